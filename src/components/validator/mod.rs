//! The validator component (`validator`): every journaled `template.rendered` is validated with the real
//! `haproxy -c` (on the render read back from the journal's blobs), and its verdict events
//! (`validation.completed` / `validation.failed`, then `render.gate.completed`) are journaled.
//!
//! Runs on every replica (followers validate too, DESIGN.md J9). Because it reacts to the
//! journaled event rather than to the source, a render accepted just before a crash (an ingest
//! 202, say) is validated after the restart: the dispatcher replays the undispatched event. A
//! replayed render whose verdict is already in the journal is not validated again.
//!
//! # Inputs
//! `template.rendered`, `render.gate.completed` (to know the last render that passed).
//! # Effects
//! `validation.completed` or `validation.failed`, then `render.gate.completed` (one commit).
//! # Journal records
//! The events above; its checkpoint (table `component_state`, key `validator`: the last render
//! that passed, as of the last event folded), written with the verdict or alone (DESIGN.md J11).
//! Replayed events the checkpoint already folded are skipped.
//! # Failpoints
//! None.
//! # Metrics
//! [`ValidationStats`] (passed, failed, skipped), read at each scrape
//! (`haptic_validation_total`, `haptic_validation_errors_total`: the validator's own families,
//! `metrics.rs`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use haptic_journal::{Batch, Checksum, Event, EventKind, GateVerdict, Journal, Seq};

use crate::dispatch::checkpoint::Checkpoints;
use crate::dispatch::render::{RenderLoadError, RenderStore};
use crate::dispatch::{DispatchError, DispatchHandle, SubscribeOptions, Subscription};
use crate::validate::Validator;

pub mod decide;
mod metrics;

pub use decide::{Input, ValidatorState, decide};

/// Component identifier (logs, metrics, health).
pub const COMPONENT: &str = "validator";

/// Events scanned ahead of a replayed render to find its verdict.
const VERDICT_LOOKAHEAD: usize = 4096;

/// Counters.
#[derive(Debug, Default)]
pub struct ValidationStats {
    /// Renders that passed.
    pub passed: AtomicU64,
    /// Renders that failed.
    pub failed: AtomicU64,
    /// Replayed renders whose verdict was already journaled.
    pub skipped: AtomicU64,
    /// Stall check.
    pub health: Arc<crate::core::health::Health>,
}

/// The subscription the validator needs (every replica, not leader-only).
#[must_use]
pub fn subscribe_options() -> SubscribeOptions {
    SubscribeOptions::new(COMPONENT)
        .kinds(&[EventKind::TemplateRendered, EventKind::RenderGateCompleted])
}

/// Reads what the validator restores at start: its checkpoint bookkeeping and state (the one
/// start-up recovery path; [`run`] calls it, and so does the restart-equivalence test).
/// Blocking: one short read transaction.
///
/// # Errors
/// [`haptic_journal::ReadError`] when the checkpoint cannot be read.
pub fn recover(
    journal: &Journal,
) -> Result<(Checkpoints, ValidatorState), haptic_journal::ReadError> {
    let (checkpoints, restored) = Checkpoints::restore(journal, COMPONENT)?;
    Ok((checkpoints, ValidatorState::restored(restored)))
}

/// Whether the journal already holds a gate verdict for `render` after `seq`.
fn verdict_journaled(journal: &Journal, seq: Seq, render: Checksum) -> bool {
    journal
        .events(Seq(seq.0 + 1), VERDICT_LOOKAHEAD)
        .map(|events| {
            events.iter().any(|(_, _, e)| {
                matches!(e, Event::RenderGateCompleted { render: r, .. } if *r == render)
            })
        })
        .unwrap_or(false)
}

/// Validates renders until the subscription ends or `cancel` fires.
///
/// # Errors
/// [`DispatchError`] when journaling a verdict fails.
///
/// # Cancel safety
/// Cancel via `cancel`: a validation in progress is dropped (its `haproxy` child killed) and its
/// render is validated again after a restart (the delivery was not marked processed).
pub async fn run(
    validator: Validator,
    dispatch: DispatchHandle,
    mut sub: Subscription,
    stats: Arc<ValidationStats>,
    cancel: tokio_util::sync::CancellationToken,
) -> Result<(), DispatchError> {
    let journal = dispatch.journal().clone();
    let renders = RenderStore::new(journal.clone());
    let j = journal.clone();
    let (mut checkpoints, mut state) = tokio::task::spawn_blocking(move || recover(&j))
        .await
        .map_err(DispatchError::Join)?
        .map_err(DispatchError::Read)?;
    loop {
        let d = tokio::select! {
            () = cancel.cancelled() => return Ok(()),
            d = sub.recv() => match d { Some(d) => d, None => return Ok(()) },
        };
        if checkpoints.folded(d.seq) {
            continue;
        }
        checkpoints.saw(d.seq);
        let (correlation, render, trigger) = match &*d.event {
            Event::RenderGateCompleted {
                render,
                verdict: GateVerdict::Pass,
                ..
            } => {
                decide(&mut state, Input::GatePassed(*render));
                checkpoints.note(state.checkpoint());
                if let Some(b) = checkpoints.leftover() {
                    dispatch.accept(b).await?;
                }
                continue;
            }
            Event::TemplateRendered {
                correlation,
                render,
                trigger_reason,
                ..
            } => (correlation.clone(), *render, trigger_reason.clone()),
            _ => continue,
        };
        if d.replayed {
            let j = journal.clone();
            let seq = d.seq;
            let done = tokio::task::spawn_blocking(move || verdict_journaled(&j, seq, render))
                .await
                .unwrap_or(false);
            if done {
                stats.skipped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
        }
        let content = match renders.load(render).await {
            Ok(r) => r.into_content(),
            Err(
                error
                @ (RenderLoadError::NotJournaled { .. } | RenderLoadError::MissingBlob { .. }),
            ) => {
                tracing::error!(%render, %error, "render blobs missing from the journal; not validated");
                continue;
            }
            Err(RenderLoadError::Join { .. }) => continue,
            Err(error) => {
                tracing::error!(%render, error = %crate::core::error::chain(&error),
                    "cannot read the render from the journal");
                continue;
            }
        };
        stats.health.begin(haptic_journal::UnixMillis::now().0);
        let validation = validate_with_retry(&validator, &content, &cancel).await;
        stats.health.end();
        let Some(validation) = validation else {
            return Ok(());
        };
        if validation.outcome.passed() {
            stats.passed.fetch_add(1, Ordering::Relaxed);
            tracing::info!(%render, duration_ms = validation.duration.as_millis() as u64, "render valid");
        } else {
            stats.failed.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(%render, errors = ?validation.outcome.messages(), "render rejected by haproxy -c");
        }
        let events = decide(
            &mut state,
            Input::Validated {
                correlation,
                render,
                trigger,
                validation,
            },
        );
        // The verdict and the state it leaves are durable together (J11); the checkpoint rides
        // along even when the state is unchanged, so a restart never validates it again.
        checkpoints.touch(state.checkpoint());
        let mut b = Batch::new();
        checkpoints.attach(&mut b);
        for e in events {
            b.event(e);
        }
        dispatch.accept(b).await?;
        drop(d);
    }
}

/// Validates, retrying a temp-dir failure (not a verdict on the render) with a bounded backoff.
/// `None` when cancelled.
async fn validate_with_retry(
    validator: &Validator,
    content: &crate::core::render::RenderContent,
    cancel: &tokio_util::sync::CancellationToken,
) -> Option<crate::validate::Validation> {
    let mut delay = Duration::from_millis(200);
    loop {
        let result = tokio::select! {
            () = cancel.cancelled() => return None,
            r = validator.validate(content) => r,
        };
        match result {
            Ok(v) => return Some(v),
            Err(error) => {
                tracing::error!(%error, retry_in_ms = delay.as_millis() as u64, "validation could not run");
            }
        }
        tokio::select! {
            () = cancel.cancelled() => return None,
            () = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(Duration::from_secs(10));
    }
}
