//! The acceptor: the one task between the input side (render sources, pod discovery, the Lease
//! elector) and the journal. Every [`Input`] becomes one `Journal::accept` batch (group commit)
//! and only then reaches the components, through the dispatcher (DESIGN.md J1).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use haptic_journal::{Batch, Event};
use tokio::sync::mpsc;

use crate::dispatch::input::{Input, render_batch};
use crate::dispatch::{DispatchError, DispatchHandle};
use crate::telemetry::Metrics;

/// Capacity of the input channel. Inputs are small (a render is behind an `Arc`), arrive in
/// bursts of one pod-discovery diff (a few events per pod that changed) or one render, and the
/// acceptor commits them as fast as the journal's group commit allows; 64 absorbs a discovery
/// diff of a large fleet while a commit is in flight. A full channel makes the producer wait.
pub const INPUT_CAPACITY: usize = 64;

/// How often an acceptor holding an input for the journal checks whether its producers are gone.
const CLOSED_POLL: std::time::Duration = std::time::Duration::from_millis(200);

/// Counters of the acceptor.
#[derive(Debug, Default)]
pub struct AcceptorStats {
    /// Renders journaled (`template.rendered` with their blobs).
    pub renders: AtomicU64,
    /// Other events journaled.
    pub events: AtomicU64,
}

/// While an input is held: takes what waits on the channel (up to [`INPUT_CAPACITY`] held in
/// `backlog`, in order); a render with a reply (ingest) is answered with `held`'s storage fault at
/// once instead of waiting behind the held input (the endpoint answers 507).
fn refuse_waiting(
    rx: &mut mpsc::Receiver<Input>,
    backlog: &mut std::collections::VecDeque<Input>,
    held: &DispatchError,
) {
    let DispatchError::Accept(fault) = held else {
        return;
    };
    while backlog.len() < INPUT_CAPACITY {
        let Ok(mut input) = rx.try_recv() else { return };
        match &mut input {
            Input::Rendered {
                reply: reply @ Some(_),
                ..
            } => {
                // The endpoint counts its refusal (haptic_journal_refused_inputs_total).
                if let Some(r) = reply.take() {
                    let _ = r.send(Err(DispatchError::Accept(fault.clone())));
                }
            }
            _ => backlog.push_back(input),
        }
    }
}

/// The batch one input becomes: a render with its blobs; `leader.became` with the term
/// recorded in the journal's meta in the same commit (J7); anything else as is.
#[must_use]
pub fn batch_of(input: &Input) -> Batch {
    match input {
        Input::Rendered {
            event,
            content,
            manifest,
            ..
        } => render_batch(event.clone(), content, manifest),
        Input::Event(event) => {
            let mut b = Batch::new();
            if let Event::BecameLeader { term, identity, .. } = event {
                b.set_term(*term, identity.clone());
            }
            b.event(event.clone());
            b
        }
    }
}

/// Journals every input until every sender is gone; each render is counted in `metrics` under
/// the source it names (the commit latency observed is the whole `accept` round trip, group
/// commit included). An input with a reply channel (ingest) gets the commit's outcome.
///
/// A storage fault (the journal's volume full or read-only, the file removed) never stops the
/// acceptor and never acknowledges the input: an input with a reply is answered with the error
/// at once (ingest answers `507`); an input without one (a source's render, a pod discovery
/// diff, a leadership change) is held and journaled when the journal takes commits again
/// ([`DispatchHandle::accept`] waits), and the producers wait behind it (the channel is
/// bounded), so inputs stay in order and nothing unjournaled reaches a component; a render with
/// a reply that arrives meanwhile is answered with the fault at once, not queued behind it. A held render
/// counts once in `haptic_journal_refused_inputs_total`.
///
/// # Errors
/// [`DispatchError`] when a commit of an input without a reply fails for another reason: the
/// input side stops (nothing after the failed input is accepted, so nothing is acted on without
/// being durable). A failed commit of an input with a reply is answered to its producer and the
/// acceptor goes on.
///
/// # Cancel safety
/// Dropping the future while a commit is in flight leaves that commit to finish in its blocking
/// task; the input is then durable but its producer was not told (sources resend on start). A
/// held input is dropped unjournaled when every producer is gone (the process is stopping;
/// sources read or list it again on start).
pub async fn run(
    mut rx: mpsc::Receiver<Input>,
    dispatch: DispatchHandle,
    stats: Arc<AcceptorStats>,
    metrics: Arc<Metrics>,
) -> Result<(), DispatchError> {
    // Inputs without a reply taken off the channel while an input was held (so that renders
    // with a reply behind them are answered at once); journaled in order before the channel.
    let mut backlog: std::collections::VecDeque<Input> = std::collections::VecDeque::new();
    loop {
        let mut input = match backlog.pop_front() {
            Some(i) => i,
            None => match rx.recv().await {
                Some(i) => i,
                None => break,
            },
        };
        let batch = batch_of(&input);
        let reply = match &mut input {
            Input::Rendered { reply, .. } => reply.take(),
            Input::Event(_) => None,
        };
        let started = std::time::Instant::now();
        let accepted = match (dispatch.try_accept(batch).await, reply) {
            (Ok(accepted), reply) => {
                if let Some(reply) = reply {
                    // A producer that stopped waiting still had its input journaled.
                    let _ = reply.send(Ok(accepted.clone()));
                }
                accepted
            }
            (Err(e), Some(reply)) => {
                if e.storage_fault().is_some() {
                    tracing::warn!(error = %e, "render not journaled: journal not writable");
                } else {
                    tracing::error!(error = %e, "render not journaled");
                }
                let _ = reply.send(Err(e));
                continue;
            }
            (Err(e), None) if e.storage_fault().is_some() => {
                if let Input::Rendered { source, .. } = &input {
                    metrics.input_refused(*source);
                }
                tracing::warn!(error = %e,
                    "input not journaled: held until the journal takes commits again");
                let held = dispatch.accept(batch_of(&input));
                tokio::pin!(held);
                let outcome = loop {
                    tokio::select! {
                        r = &mut held => break Some(r),
                        () = tokio::time::sleep(CLOSED_POLL) => {
                            if rx.is_closed() {
                                break None;
                            }
                            refuse_waiting(&mut rx, &mut backlog, &e);
                        }
                    }
                };
                match outcome {
                    Some(Ok(accepted)) => {
                        tracing::info!(seq = ?accepted.seqs(), "held input journaled");
                        accepted
                    }
                    Some(Err(DispatchError::Stopped)) | None => {
                        tracing::warn!(
                            "stopping with an input not journaled (sources resend it on start)"
                        );
                        return Ok(());
                    }
                    Some(Err(e)) => return Err(e),
                }
            }
            (Err(e), None) => return Err(e),
        };
        match &input {
            Input::Rendered { .. } => {
                haptic_journal::crash_point!("accept::after_render_journaled");
            }
            Input::Event(Event::BecameLeader { .. }) => {
                haptic_journal::crash_point!("leadership::after_became_leader_journaled");
            }
            Input::Event(_) => {}
        }
        metrics.observe_commit(started.elapsed());
        metrics.events_accepted(accepted.seqs().len() as u64);
        match &input {
            Input::Rendered {
                event,
                content,
                source,
                ..
            } => {
                stats.renders.fetch_add(1, Ordering::Relaxed);
                metrics.render_accepted(*source);
                if let Event::TemplateRendered { render, .. } = event {
                    tracing::info!(render = %render, files = content.files.len(),
                        config_bytes = content.config.len(), seq = ?accepted.seqs(), "render accepted");
                }
            }
            Input::Event(event) => {
                stats.events.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(kind = event.kind().as_str(), "event accepted");
            }
        }
    }
    Ok(())
}
