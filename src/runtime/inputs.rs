//! The acceptor: the one task between the input side (render sources, pod discovery, the Lease
//! elector) and the journal. Every [`Input`] becomes one `Journal::accept` batch (group commit)
//! and only then reaches the components, through the dispatcher (DESIGN.md J1).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use haptic_journal::{Batch, Event};
use tokio::sync::mpsc;

use crate::dispatch::{DispatchError, DispatchHandle};
use crate::source::{Input, render_batch};
use crate::telemetry::{Metrics, RenderSource};

/// Capacity of the input channel. Inputs are small (a render is behind an `Arc`), arrive in
/// bursts of one pod-discovery diff (a few events per pod that changed) or one render, and the
/// acceptor commits them as fast as the journal's group commit allows; 64 absorbs a discovery
/// diff of a large fleet while a commit is in flight. A full channel makes the producer wait.
pub const INPUT_CAPACITY: usize = 64;

/// Counters of the acceptor.
#[derive(Debug, Default)]
pub struct AcceptorStats {
    /// Renders journaled (`template.rendered` with their blobs).
    pub renders: AtomicU64,
    /// Other events journaled.
    pub events: AtomicU64,
}

/// The batch one input becomes: a render with its blobs; `leader.became` with the term
/// recorded in the journal's meta in the same commit (J7); anything else as is.
#[must_use]
pub fn batch_of(input: &Input) -> Batch {
    match input {
        Input::Rendered { event, content } => render_batch(event.clone(), content),
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

/// Journals every input until every sender is gone; `source` labels the renders in `metrics`
/// (the commit latency observed is the whole `accept` round trip, group commit included).
///
/// # Errors
/// [`DispatchError`] when a commit fails: the input side stops (nothing after the failed input
/// is accepted, so nothing is acted on without being durable).
///
/// # Cancel safety
/// Dropping the future while a commit is in flight leaves that commit to finish in its blocking
/// task; the input is then durable but its producer was not told (sources resend on start).
pub async fn run(
    mut rx: mpsc::Receiver<Input>,
    dispatch: DispatchHandle,
    stats: Arc<AcceptorStats>,
    metrics: Arc<Metrics>,
    source: RenderSource,
) -> Result<(), DispatchError> {
    while let Some(input) = rx.recv().await {
        let batch = batch_of(&input);
        let started = std::time::Instant::now();
        let accepted = dispatch.accept(batch).await?;
        metrics.observe_commit(started.elapsed());
        metrics.events_accepted(accepted.seqs().len() as u64);
        match &input {
            Input::Rendered { event, content } => {
                stats.renders.fetch_add(1, Ordering::Relaxed);
                metrics.render_accepted(source);
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
