//! Stop: what ends the process (SIGTERM or SIGINT, or a critical task that fails or ends
//! early) and the graceful stop, in order: the inputs; when leading (and nothing failed), the
//! deployer's drain, then every accepted event dispatched, then the publisher's drain and the
//! queued per-pod statuses written; the
//! Lease released (its `leader.lost` journaled); the acceptor; every accepted event
//! dispatched; the components; last the credentials watch and the probes.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use haptic_journal::{Journal, Queue};
use tracing::{info, warn};

use super::RuntimeError;
use super::inputs::Running;
use super::lead::Leading;
use super::open::{Credentials, Probes};
use super::wire::Tasks;
use crate::components::publisher::ConfigPublisher;
use crate::dispatch::DispatchHandle;

/// Resolves on SIGTERM or SIGINT.
pub(super) fn shutdown_signal() -> Result<impl Future<Output = &'static str>, RuntimeError> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).map_err(RuntimeError::Signal)?;
    let mut int = signal(SignalKind::interrupt()).map_err(RuntimeError::Signal)?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        }
    })
}

/// Waits until every event committed so far was dispatched and processed by every subscriber,
/// or until `bound` passed. Returns whether it got there.
async fn wait_dispatched(journal: &Arc<Journal>, bound: Duration) -> bool {
    let deadline = Instant::now() + bound;
    let target = journal.meta().map(|m| m.next_seq.0.saturating_sub(1));
    let Ok(target) = target else { return false };
    poll_until(deadline, || {
        journal.meta().map(|m| m.dispatched_through.0 >= target)
    })
    .await
}

/// The graceful leader stop: the deployer's drain, every accepted event dispatched, the
/// publisher's drain, then the queued per-pod statuses written, all within `bound`.
async fn drain(
    scheduler: &crate::components::scheduler::SchedulerHandle,
    publisher: &ConfigPublisher,
    journal: &Arc<Journal>,
    bound: Duration,
) {
    let started = Instant::now();
    info!(
        bound_ms = bound.as_millis() as u64,
        "draining: deployer first"
    );
    scheduler.drain(bound).await;
    let rest = bound.saturating_sub(started.elapsed());
    if !wait_dispatched(journal, rest).await {
        warn!("drain: not every accepted event was dispatched in time");
    }
    let rest = bound.saturating_sub(started.elapsed());
    match tokio::time::timeout(rest, publisher.drain()).await {
        Ok(Ok(Some(render))) => info!(%render, "drain: published the newest deployed render"),
        Ok(Ok(None)) => info!("drain: nothing left to publish"),
        Ok(Err(error)) => warn!(%error, "drain: publisher failed"),
        Err(_) => warn!("drain: publisher did not finish in time"),
    }
    // The drained deployment's per-pod statuses were queued when its events were dispatched:
    // the status worker writes them while the term still runs (a parked one waits for a
    // publication and is not waited for). Left queued, the next leader writes them.
    let rest = bound.saturating_sub(started.elapsed());
    if !wait_queue_empty(journal, Queue::StatusPending, rest).await {
        warn!(
            "drain: per-pod statuses still queued at the drain timeout; the next leader writes them"
        );
    }
}

/// Waits until the queue `queue` is empty, or until `bound` passed. Returns whether it got
/// there (a journal read error counts as not).
async fn wait_queue_empty(journal: &Arc<Journal>, queue: Queue, bound: Duration) -> bool {
    let deadline = Instant::now() + bound;
    poll_until(deadline, || {
        journal.queue(queue).map(|items| items.is_empty())
    })
    .await
}

/// Reads `done` every 20 ms until it says true (returns true), a read fails or `deadline`
/// passed (returns false). The first read is at once.
async fn poll_until<E>(deadline: Instant, mut done: impl FnMut() -> Result<bool, E>) -> bool {
    loop {
        match done() {
            Ok(true) => return true,
            Ok(false) => {}
            Err(_) => return false,
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits for a signal (`None`: a graceful stop) or the end of a critical task (its error).
pub(super) async fn wait_for_end(
    signal: std::pin::Pin<&mut impl Future<Output = &'static str>>,
    tasks: &mut Tasks,
) -> Option<RuntimeError> {
    tokio::select! {
        s = signal => { info!(signal = s, "shutting down"); None }
        Some((component, result)) = tasks.ended.recv() => Some(RuntimeError::Component {
            component,
            reason: result.err().unwrap_or_else(|| "ended unexpectedly".to_owned()),
        }),
    }
}

/// Everything [`stop`] stops.
pub(super) struct Stopping {
    /// The tasks and their tokens.
    pub(super) tasks: Tasks,
    /// The dispatcher's handle (whether this replica leads).
    pub(super) dispatch: DispatchHandle,
    /// The input side.
    pub(super) inputs: Running,
    /// The leader-only components.
    pub(super) leading: Leading,
    /// The journal.
    pub(super) journal: Arc<Journal>,
    /// The credentials watch.
    pub(super) credentials: Credentials,
    /// The probes and metrics server.
    pub(super) probes: Probes,
    /// `--drain-timeout`.
    pub(super) drain_timeout: Duration,
}

/// The graceful stop (see the module docs); `failed` (a critical task ended) skips the
/// leader's drains.
pub(super) async fn stop(s: Stopping, failed: bool) {
    let Stopping {
        tasks,
        dispatch,
        inputs,
        leading,
        journal,
        credentials,
        probes,
        drain_timeout,
    } = s;
    tasks.inputs.cancel();
    let leads = dispatch.leadership().borrow().is_leader();
    if leads && !failed {
        drain(
            &leading.scheduler,
            &leading.publisher,
            &journal,
            drain_timeout,
        )
        .await;
    }
    tasks.lease.cancel();
    match tokio::time::timeout(Duration::from_secs(10), inputs.elector).await {
        Ok(Ok(Err(error))) => warn!(%error, "lease elector ended with an error"),
        Err(_) => warn!("lease release timed out"),
        _ => {}
    }
    if tokio::time::timeout(Duration::from_secs(10), inputs.acceptor)
        .await
        .is_err()
    {
        warn!("input acceptor did not finish in 10s");
    }
    wait_dispatched(&journal, Duration::from_secs(3)).await;
    tasks.work.cancel();
    tasks.tracker.close();
    if tokio::time::timeout(Duration::from_secs(15), tasks.tracker.wait())
        .await
        .is_err()
    {
        warn!("some tasks did not stop within 15s");
    }
    credentials.stop().await;
    probes.stop().await;
    info!("haptic stopped");
}
