//! The journal watch: turns the journal's storage faults (a full or read-only volume, an I/O
//! error, the file removed; `Journal::storage_fault`) into what an operator sees, and probes
//! until the journal takes commits again (issue 13, "Disk").
//!
//! ```text
//!  Journal::storage_fault() --every 250 ms--> transition?  writable <-> not writable (kind)
//!     | once per transition: log line, Kubernetes Event (Warning JournalNotWritable /
//!     |   Normal JournalWritable), haptic_journal_writable 0/1, DispatchHandle writability
//!     |   (waiting writes wake), condition JournalWritable on the HAProxyCfg (leader, best effort)
//!     | while not writable: probe = one trim commit (it also frees space), backoff 1 s -> 30 s
//!     v
//!  readiness `journal` names the file, the OS error and the fix (telemetry::journal_fault_check)
//! ```
//!
//! While the journal is not writable nothing unjournaled is acted on: the acceptor holds source
//! inputs (ingest answers 507), components' writes wait in `DispatchHandle::accept`, so the
//! fleet keeps what it runs. The writer thread reopens the failed redb database itself
//! (`journal/DESIGN.md`, "Storage faults"). A removed journal file is never written again: the
//! watch keeps reporting it (readiness, condition, metric) until an operator restarts the pod;
//! the process does not exit, because liveness must not restart it into a volume it cannot use,
//! and a restart onto a missing file starts an empty journal (J9 reconciliation), a choice the
//! operator makes, as for `--journal-recovery=rebuild` (J10).
//!
//! # Metrics
//! `haptic_journal_writable`; `haptic_journal_refused_inputs_total` (counted by the acceptor and
//! the ingest endpoint).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use haptic_journal::{FaultKind, Journal, RuntimeConfigRef, UnixMillis};
use kube::runtime::events::EventType;
use tokio_util::sync::CancellationToken;

use super::notify::{self, Notifier};
use crate::core::guard::LeaseGuard;
use crate::dispatch::DispatchHandle;
use crate::dispatch::fault::describe;
use crate::k8s::crd::{self, conditions};
use crate::telemetry::Metrics;

/// How often the journal's fault state is read (a lock and a clone, no I/O).
const TICK: Duration = Duration::from_millis(250);
/// First probe delay after a fault; doubles per failed probe.
pub const PROBE_INITIAL: Duration = Duration::from_secs(1);
/// Longest delay between two probes.
pub const PROBE_MAX: Duration = Duration::from_secs(30);
/// A fault within this long after the last one continues the backoff instead of restarting it
/// at [`PROBE_INITIAL`] (a volume that takes a small probe but not the next render flaps).
const BACKOFF_MEMORY: Duration = Duration::from_secs(60);
/// Bound on one condition write (the API server may be slow; the watch must keep ticking).
const CONDITION_WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// Where the watch reports, besides the log.
pub(super) struct Reporters {
    pub notifier: Notifier,
    pub metrics: Arc<Metrics>,
    pub client: kube::Client,
    pub runtime_config: RuntimeConfigRef,
    pub lease: Arc<dyn LeaseGuard>,
    /// Unix ms of the last tick that saw a fault (stall checks are excused after it).
    pub last_fault_ms: Arc<AtomicU64>,
    /// The fault as announced (`describe`'s text), read by the readiness check; `None` while
    /// writable.
    pub announced: Arc<std::sync::Mutex<Option<String>>>,
}

impl Reporters {
    /// Says that the journal is (`writable`) or is not writable: the Event (`JournalWritable`,
    /// Normal, or `JournalNotWritable`, Warning, action `Journal`, note `message`), the metric,
    /// and the readiness check's view (the message while not writable).
    fn announce(&self, writable: bool, message: &str) {
        let (type_, reason) = if writable {
            (EventType::Normal, notify::reasons::JOURNAL_WRITABLE)
        } else {
            (EventType::Warning, notify::reasons::JOURNAL_NOT_WRITABLE)
        };
        self.notifier
            .emit(type_, reason, "Journal", message.to_owned());
        self.metrics.set_journal_writable(writable);
        *lock(&self.announced) = (!writable).then(|| message.to_owned());
    }
}

/// The watch's view: `None` writable, `Some(kind)` not writable.
type Seen = Option<FaultKind>;

/// Runs until `cancel`.
///
/// # Cancel safety
/// Cancel through `cancel`; a probe in flight finishes in its blocking task.
pub(super) async fn run(
    journal: Arc<Journal>,
    dispatch: DispatchHandle,
    r: Reporters,
    cancel: CancellationToken,
) {
    let mut seen: Seen = None;
    // The condition to write (`Some`) once a fault happened in this process; `written` is what
    // the API has. Nothing is written while the journal never faulted (no churn on start).
    let mut wanted: Option<(Seen, String)> = None;
    let mut written: Option<(Seen, String)> = None;
    let mut backoff = PROBE_INITIAL;
    let mut next_probe = tokio::time::Instant::now();
    let mut last_fault = tokio::time::Instant::now();
    // Ticks without a fault since a fault was announced: the journal is announced writable only
    // after one full tick in which the writes that waited (woken by the probe's success) did not
    // fault again. A small probe commit may fit a nearly full volume where the held render does
    // not; without this the state would flap at every probe.
    let mut clear_ticks = 0_u32;
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(TICK) => {}
        }
        let now = tokio::time::Instant::now();
        let fault = journal.storage_fault();
        let kind = fault.as_ref().map(|f| f.kind);
        if let Some(f) = &fault {
            clear_ticks = 0;
            r.last_fault_ms
                .store(UnixMillis::now().0, Ordering::Relaxed);
            dispatch.set_journal_writable(false);
            if seen != kind {
                let message = describe(journal.path(), f);
                tracing::warn!(journal = %journal.path().display(), kind = f.kind.metric_label(),
                    error = %f.message, failures = f.failures, %message,
                    "journal not writable: input refused, fleet kept as it runs");
                r.announce(false, &message);
                if seen.is_none() {
                    if now.duration_since(last_fault) > BACKOFF_MEMORY {
                        backoff = PROBE_INITIAL;
                    }
                    next_probe = now + backoff;
                }
                wanted = Some((kind, message));
                seen = kind;
            }
            last_fault = now;
            if now >= next_probe {
                let j = journal.clone();
                let probe = tokio::task::spawn_blocking(move || j.trim()).await;
                match probe {
                    Ok(Ok(trimmed)) => {
                        tracing::debug!(trimmed, "journal probe committed");
                        // Wake the waiting writes; they tell within one tick.
                        dispatch.set_journal_writable(true);
                    }
                    Ok(Err(error)) => {
                        tracing::debug!(%error, "journal probe failed");
                    }
                    Err(_) => {}
                }
                backoff = (backoff * 2).min(PROBE_MAX);
                next_probe = tokio::time::Instant::now() + backoff;
            }
        } else if seen.is_some() {
            r.last_fault_ms
                .store(UnixMillis::now().0, Ordering::Relaxed);
            dispatch.set_journal_writable(true);
            clear_ticks += 1;
            if clear_ticks < 2 {
                continue;
            }
            let message = format!(
                "journal {} takes commits again: input accepted, pending work continues",
                journal.path().display()
            );
            tracing::info!(journal = %journal.path().display(), "journal writable again");
            r.announce(true, &message);
            wanted = Some((None, message));
            seen = None;
        }
        if let Some(want) = wanted.as_ref().filter(|w| written.as_ref() != Some(*w))
            && r.lease.is_valid()
        {
            match tokio::time::timeout(
                CONDITION_WRITE_TIMEOUT,
                write_condition(&r.client, &r.runtime_config, want),
            )
            .await
            {
                Ok(Ok(true)) => written = Some(want.clone()),
                Ok(Ok(false)) => {}
                Ok(Err(error)) => {
                    tracing::debug!(%error, "condition JournalWritable not written; retrying");
                }
                Err(_) => tracing::debug!("condition JournalWritable write timed out; retrying"),
            }
        }
    }
}

/// The reason of the `JournalWritable` condition for a fault of `kind` (`None`: writable).
#[must_use]
pub(super) fn condition_reason(kind: Option<FaultKind>) -> &'static str {
    use crate::k8s::crd::reasons;
    match kind {
        None => reasons::JOURNAL_WRITABLE,
        Some(FaultKind::Full) => reasons::JOURNAL_FULL,
        Some(FaultKind::ReadOnly) => reasons::JOURNAL_READ_ONLY,
        Some(_) => reasons::JOURNAL_UNAVAILABLE,
    }
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Sets `JournalWritable` on the HAProxyCfg (merged with the others by type); `false` when the
/// object does not exist yet or kept conflicting.
async fn write_condition(
    client: &kube::Client,
    runtime_config: &RuntimeConfigRef,
    (kind, message): &(Seen, String),
) -> Result<bool, kube::Error> {
    crd::write_cfg_condition(
        client,
        runtime_config,
        (
            conditions::JOURNAL_WRITABLE,
            kind.is_none(),
            condition_reason(*kind),
        ),
        message,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn condition_reasons() {
        assert_eq!(condition_reason(None), "JournalWritable");
        assert_eq!(condition_reason(Some(FaultKind::Full)), "JournalFull");
        assert_eq!(
            condition_reason(Some(FaultKind::ReadOnly)),
            "JournalReadOnly"
        );
        assert_eq!(
            condition_reason(Some(FaultKind::Removed)),
            "JournalUnavailable"
        );
    }
}
