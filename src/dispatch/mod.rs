//! The event dispatcher: every event is committed to the journal first, then handed to the
//! subscribed components in `Seq` order (DESIGN.md J1, section 1).
//!
//! ```text
//!  component / source ──► DispatchHandle::publish / accept(Batch)
//!                              │ spawn_blocking(Journal::accept)   (group commit, fsync)
//!                              │ committed-seq watch  ◄── set inside the blocking task
//!                              ▼
//!  dispatcher task ── reads events next.. from the journal (replay and live are one path)
//!        │ for each event, in Seq order: every matching subscription (bounded mpsc)
//!        ▼
//!  Subscription::recv() ─► Delivery { seq, term, event, .. } ─► component handles it, drops it
//!                                                     drop = processed ─► mark_dispatched(min)
//! ```
//!
//! Invariants:
//! - a component never sees an event before its commit returned (delivery reads the committed log);
//! - every subscription sees its events in `Seq` order, with no gap, also across a restart: on
//!   start the dispatcher begins at `dispatched_through + 1`, so undispatched events are
//!   delivered again first (flagged [`Delivery::replayed`]);
//! - `mark_dispatched(s)` is journaled only when every subscription has *processed* (dropped) every
//!   event up to `s` that it was sent, so a crash never loses an event a component had not
//!   finished handling (it is replayed; handlers must be idempotent, J3);
//! - channels are bounded; a full subscription makes the dispatcher wait (back-pressure, never a
//!   drop) and the wait is counted ([`DispatchStats::overflow_waits`]);
//! - term-aware: a live `LostLeadership` stops delivery to leader-only subscriptions (they still
//!   get the `LostLeadership` itself so they can stop) until the next live `BecameLeader`.
//!   Leadership changes read back during replay do not change the leadership state: after a
//!   restart the replica is a follower until the runtime journals a new `BecameLeader`.
//!
//! Usage (the runtime wires it once; components keep only their [`Subscription`] and a
//! [`DispatchHandle`] clone):
//! ```text
//! let mut d = Dispatcher::new(journal.clone());           // Arc<Journal>
//! let sub = d.subscribe(SubscribeOptions::new("config-publisher")
//!     .kinds(&[EventKind::ConfigValidated, EventKind::DeployedConfigPublishRequest])
//!     .leader_only(true));                                 // before run()
//! let handle = d.handle();                                 // Clone + Send + Sync
//! tracker.spawn(d.run(cancel.clone()));
//! // component loop:
//! while let Some(delivery) = sub.recv().await {           // Seq order, after commit
//!     handle_event(&delivery.event).await;                 // journal own work via handle.accept(batch)
//!     drop(delivery);                                      // = processed; mark_dispatched follows
//! }
//! handle.publish(event).await?;                            // journal + dispatch one event
//! handle.accept(batch).await?;                             // events + work items + acks, one commit
//! ```
//!
//! # Inputs
//! Events and batches through [`DispatchHandle`]; the committed event log.
//!
//! # Effects
//! [`Delivery`]s on each [`Subscription`]; `Journal::mark_dispatched`; the [`Leadership`] watch.
//!
//! # Journal records
//! Events (table `events`); `meta.dispatched_through`.
//!
//! # Failpoints
//! None of its own (the journal's `journal::before_commit` / `after_commit` cover accept).
//!
//! # Metrics
//! [`DispatchStats`]: events delivered, replayed, overflow waits, marked-through seq.

use std::time::Duration;

use haptic_journal::{AcceptError, ReadError, Term};

pub mod checkpoint;
mod dispatcher;
pub mod fault;
mod handle;
pub mod input;
pub mod render;
mod subscription;
#[cfg(test)]
mod tests;

pub use dispatcher::Dispatcher;
pub use handle::{DispatchHandle, DispatchStats};
pub use subscription::{Delivery, SubscribeOptions, Subscription};

/// Capacity of one subscription's channel. A component handles one deployment-sized burst of
/// events per reconciliation (HAPTIC sizes its buffers at 50); 256 absorbs a replay chunk
/// without making the dispatcher wait, and a slower consumer only slows delivery (back-pressure),
/// it never loses events.
pub const DEFAULT_SUBSCRIPTION_CAPACITY: usize = 256;

/// Events read from the journal per delivery round (bounds the dispatcher's memory).
pub(crate) const READ_CHUNK: usize = 256;

/// How often the dispatcher looks at the log even without a wake-up (events accepted by a writer
/// that bypassed [`DispatchHandle`]).
pub(crate) const POLL_INTERVAL: Duration = Duration::from_millis(500);

/// First wait of a write that found the journal not writable before it tries again
/// ([`DispatchHandle::accept`]); doubles per try.
pub const WRITABLE_RETRY_INITIAL: Duration = Duration::from_secs(1);

/// Longest wait between two tries of a write waiting on a storage fault.
pub const WRITABLE_RETRY_MAX: Duration = Duration::from_secs(30);

/// Whether this replica currently leads, as the dispatcher saw it in the live event stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Leadership {
    /// Not leader (the start state, also after a restart).
    Follower,
    /// Leader for this term (from the last live `BecameLeader`).
    Leader(Term),
}

impl Leadership {
    /// Whether this is [`Leadership::Leader`].
    #[must_use]
    pub fn is_leader(self) -> bool {
        matches!(self, Leadership::Leader(_))
    }
}

/// Errors of the dispatcher and its handle.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DispatchError {
    /// The journal refused or failed the batch; on `Storage`, stop acting and reopen.
    #[error("journal accept failed")]
    Accept(#[source] AcceptError),
    /// Reading the event log failed (corrupt record or storage).
    #[error("journal read failed")]
    Read(#[source] ReadError),
    /// A blocking journal task panicked or was cancelled by the runtime's shutdown.
    #[error("journal task did not complete")]
    Join(#[source] tokio::task::JoinError),
    /// The dispatcher stopped while the write waited for the journal to take commits again
    /// (a storage fault); nothing of the batch was committed.
    #[error("the dispatcher stopped while the journal was not writable")]
    Stopped,
}

impl DispatchError {
    /// Bounded metric label.
    #[must_use]
    pub fn metric_label(&self) -> &'static str {
        match self {
            DispatchError::Accept(e) => e.metric_label(),
            DispatchError::Read(e) => e.metric_label(),
            DispatchError::Join(_) => "join",
            DispatchError::Stopped => "stopped",
        }
    }

    /// The storage fault behind the error, when it is one (a full, read-only or failing
    /// volume, or a removed journal file): the input was not journaled, and retrying once the
    /// journal is writable again may succeed.
    #[must_use]
    pub fn storage_fault(&self) -> Option<haptic_journal::FaultKind> {
        match self {
            DispatchError::Accept(e) => e.fault_kind(),
            DispatchError::Read(ReadError::Storage(e)) => Some(haptic_journal::FaultKind::of(e)),
            _ => None,
        }
    }

    /// Whether the journal must be reopened (a failed commit or a writer that has stopped).
    #[must_use]
    pub fn needs_reopen(&self) -> bool {
        matches!(
            self,
            DispatchError::Accept(AcceptError::Storage { .. } | AcceptError::WriterGone)
        )
    }
}
