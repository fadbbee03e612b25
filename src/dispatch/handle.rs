//! The publishing side: [`DispatchHandle`] journals events and batches (waiting out a storage
//! fault), then wakes the dispatcher task; its [`DispatchStats`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use haptic_journal::{Accepted, Batch, Event, Journal, Seq};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::{DispatchError, Leadership, WRITABLE_RETRY_INITIAL, WRITABLE_RETRY_MAX};

/// Counters of the dispatcher.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DispatchStats {
    /// Deliveries sent (one per event and subscription).
    pub delivered: u64,
    /// Events read during replay (committed before start).
    pub replayed: u64,
    /// Sends that found a subscription's channel full and had to wait.
    pub overflow_waits: u64,
    /// Last `Seq` journaled as dispatched.
    pub marked_through: u64,
}

/// The counters behind [`DispatchStats`], moved by the dispatcher task.
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) delivered: AtomicU64,
    pub(super) replayed: AtomicU64,
    pub(super) overflow_waits: AtomicU64,
    pub(super) marked_through: AtomicU64,
}

/// What the dispatcher task and every handle share.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) journal: Arc<Journal>,
    /// Highest `Seq` known committed (wakes the dispatcher task).
    pub(super) committed: watch::Sender<u64>,
    /// Whether the journal takes commits, as the last accept (or the journal watch's probe)
    /// found: false from a storage fault until a commit succeeds again. Writes waiting on a
    /// fault wake when it turns true.
    pub(super) writable: watch::Sender<bool>,
    /// Cancelled when the dispatcher stops: writes waiting on a storage fault give up
    /// ([`DispatchError::Stopped`]).
    pub(super) stopping: CancellationToken,
    /// The leadership as the live event stream shows it.
    pub(super) leadership: watch::Sender<Leadership>,
    pub(super) counters: Counters,
}

/// Publishes events and batches: journals them, then wakes the dispatcher. Cheap to clone.
#[derive(Clone, Debug)]
pub struct DispatchHandle {
    pub(super) shared: Arc<Shared>,
}

impl DispatchHandle {
    /// The journal behind the dispatcher (reads, queue inspection).
    #[must_use]
    pub fn journal(&self) -> &Arc<Journal> {
        &self.shared.journal
    }

    /// Journals one event and returns its `Seq`; the subscribers get it after this commit.
    /// Durable when this returns.
    ///
    /// # Errors
    /// [`DispatchError::Accept`] (on `Storage`: stop acting and reopen); [`DispatchError::Join`].
    ///
    /// # Cancel safety
    /// The commit runs in a blocking task: once started it completes (and is dispatched) even if
    /// this future is dropped; the caller just does not learn the `Seq`.
    pub async fn publish(&self, event: Event) -> Result<Seq, DispatchError> {
        let mut b = Batch::new();
        b.event(event);
        let a = self.accept(b).await?;
        Ok(a.seqs().first().copied().unwrap_or(Seq(0)))
    }

    /// Journals several events in one batch (one transaction), in order.
    ///
    /// # Errors
    /// As [`DispatchHandle::publish`].
    ///
    /// # Cancel safety
    /// As [`DispatchHandle::publish`].
    pub async fn publish_all(&self, events: Vec<Event>) -> Result<Vec<Seq>, DispatchError> {
        let mut b = Batch::new();
        for e in events {
            b.event(e);
        }
        Ok(self.accept(b).await?.seqs())
    }

    /// Journals a whole batch (events with work items, acks, blobs, endpoint state) in one
    /// transaction; its events are dispatched after the commit. Durable when this returns.
    ///
    /// A storage fault (a full, read-only or failing volume, a removed file) does not end the
    /// call: nothing was committed, the handle turns not writable, and the same batch is tried
    /// again when a commit succeeds again (the runtime's journal watch probes) or after a
    /// backoff of [`WRITABLE_RETRY_INITIAL`] doubling to [`WRITABLE_RETRY_MAX`], until it is
    /// committed or the dispatcher stops. So a component's work waits, unacknowledged and
    /// without effects, while the journal cannot take it; while the journal is known not
    /// writable the call waits before its first try. Inputs that must be refused at once (the
    /// ingest endpoint's 507) use [`DispatchHandle::try_accept`].
    ///
    /// # Errors
    /// As [`DispatchHandle::publish`], never a storage fault; [`DispatchError::Stopped`] when
    /// the dispatcher stopped while the call waited.
    ///
    /// # Cancel safety
    /// As [`DispatchHandle::publish`]; dropping the future while it waits loses nothing
    /// durable (the batch was not committed).
    pub async fn accept(&self, batch: Batch) -> Result<Accepted, DispatchError> {
        let mut batch = batch;
        let mut delay = WRITABLE_RETRY_INITIAL;
        let mut writable = self.shared.writable.subscribe();
        loop {
            if !*writable.borrow_and_update() {
                self.wait_writable_or(&mut writable, delay).await?;
                delay = (delay * 2).min(WRITABLE_RETRY_MAX);
            }
            match self.commit(batch).await {
                Ok(a) => return Ok(a),
                Err((e, kept)) if e.storage_fault().is_some() => {
                    tracing::debug!(error = %e, "journal not writable; the write waits");
                    batch = kept;
                }
                Err((e, _)) => return Err(e),
            }
        }
    }

    /// [`DispatchHandle::accept`] without the wait: a storage fault is returned at once
    /// (and the handle turns not writable). Durable when this returns `Ok`.
    ///
    /// # Errors
    /// As [`DispatchHandle::publish`], including storage faults
    /// ([`DispatchError::storage_fault`]).
    ///
    /// # Cancel safety
    /// As [`DispatchHandle::publish`].
    pub async fn try_accept(&self, batch: Batch) -> Result<Accepted, DispatchError> {
        self.commit(batch).await.map_err(|(e, _)| e)
    }

    /// Whether the journal takes commits as far as this handle knows (false from a storage
    /// fault until a commit succeeds again).
    #[must_use]
    pub fn journal_writable(&self) -> bool {
        *self.shared.writable.borrow()
    }

    /// Records what the runtime's journal watch found (a probe commit succeeded, or the journal
    /// reports a fault); waiting writes wake when it turns true.
    pub fn set_journal_writable(&self, yes: bool) {
        self.shared.writable.send_if_modified(|w| {
            let changed = *w != yes;
            *w = yes;
            changed
        });
    }

    /// Waits until writable, `delay` passed, or the dispatcher stopped (`Stopped`).
    async fn wait_writable_or(
        &self,
        writable: &mut watch::Receiver<bool>,
        delay: Duration,
    ) -> Result<(), DispatchError> {
        tokio::select! {
            () = self.shared.stopping.cancelled() => Err(DispatchError::Stopped),
            _ = writable.wait_for(|w| *w) => Ok(()),
            () = tokio::time::sleep(delay) => Ok(()),
        }
    }

    /// One commit; the batch comes back when it failed.
    async fn commit(&self, batch: Batch) -> Result<Accepted, (DispatchError, Batch)> {
        let shared = self.shared.clone();
        let r = tokio::task::spawn_blocking(move || {
            let accepted = shared.journal.accept_or_keep(batch)?;
            if let Some(last) = accepted.seqs().last() {
                shared.committed.send_if_modified(|c| {
                    let grow = last.0 > *c;
                    if grow {
                        *c = last.0;
                    }
                    grow
                });
            }
            Ok::<_, Box<(haptic_journal::AcceptError, Batch)>>(accepted)
        })
        .await;
        match r {
            Err(e) => Err((DispatchError::Join(e), Batch::new())),
            Ok(Ok(a)) => {
                self.set_journal_writable(true);
                Ok(a)
            }
            Ok(Err(refused)) => {
                let (e, kept) = *refused;
                let e = DispatchError::Accept(e);
                if e.storage_fault().is_some() {
                    self.set_journal_writable(false);
                }
                Err((e, kept))
            }
        }
    }

    /// Wakes the dispatcher after events were accepted directly on the journal (not through
    /// this handle). Without it they are still found within the poll interval.
    pub fn notify_committed(&self, seq: Seq) {
        self.shared.committed.send_if_modified(|c| {
            let grow = seq.0 > *c;
            if grow {
                *c = seq.0;
            }
            grow
        });
    }

    /// The leadership state as seen in the live event stream.
    #[must_use]
    pub fn leadership(&self) -> watch::Receiver<Leadership> {
        self.shared.leadership.subscribe()
    }

    /// Counters.
    #[must_use]
    pub fn stats(&self) -> DispatchStats {
        let c = &self.shared.counters;
        DispatchStats {
            delivered: c.delivered.load(Ordering::Relaxed),
            replayed: c.replayed.load(Ordering::Relaxed),
            overflow_waits: c.overflow_waits.load(Ordering::Relaxed),
            marked_through: c.marked_through.load(Ordering::Relaxed),
        }
    }
}
