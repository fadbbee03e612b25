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

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use haptic_journal::{
    AcceptError, Accepted, Batch, Event, EventKind, Journal, ReadError, RecordHeader, Seq, Term,
    UnixMillis,
};
use tokio::sync::{Notify, mpsc, watch};
use tokio_util::sync::CancellationToken;

pub mod checkpoint;
pub mod fault;
pub mod input;
pub mod render;
#[cfg(test)]
mod tests;

/// Capacity of one subscription's channel. A component handles one deployment-sized burst of
/// events per reconciliation (HAPTIC sizes its buffers at 50); 256 absorbs a replay chunk
/// without making the dispatcher wait, and a slower consumer only slows delivery (back-pressure),
/// it never loses events.
pub const DEFAULT_SUBSCRIPTION_CAPACITY: usize = 256;

/// Events read from the journal per delivery round (bounds the dispatcher's memory).
const READ_CHUNK: usize = 256;

/// How often the dispatcher looks at the log even without a wake-up (events accepted by a writer
/// that bypassed [`DispatchHandle`]).
const POLL_INTERVAL: Duration = Duration::from_millis(500);

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

/// Which events a subscription receives.
#[derive(Clone, Debug)]
pub struct SubscribeOptions {
    /// Component identifier (logs, stats), e.g. `deployment-scheduler`.
    pub name: &'static str,
    /// Event kinds to receive; empty = every kind.
    pub kinds: Vec<EventKind>,
    /// Receive live events only while this replica leads (leadership events always arrive).
    pub leader_only: bool,
    /// Channel capacity. Default: [`DEFAULT_SUBSCRIPTION_CAPACITY`].
    pub capacity: usize,
}

impl SubscribeOptions {
    /// Every event kind, not leader-only, default capacity.
    #[must_use]
    pub fn new(name: &'static str) -> Self {
        SubscribeOptions {
            name,
            kinds: Vec::new(),
            leader_only: false,
            capacity: DEFAULT_SUBSCRIPTION_CAPACITY,
        }
    }

    /// Only these kinds (leadership events are always included for leader-only subscriptions).
    #[must_use]
    pub fn kinds(mut self, kinds: &[EventKind]) -> Self {
        self.kinds = kinds.to_vec();
        self
    }

    /// Leader-only delivery.
    #[must_use]
    pub fn leader_only(mut self, yes: bool) -> Self {
        self.leader_only = yes;
        self
    }

    /// Channel capacity (at least 1).
    #[must_use]
    pub fn capacity(mut self, n: usize) -> Self {
        self.capacity = n.max(1);
        self
    }
}

/// One committed event handed to a component. Dropping it marks it processed for this
/// subscription (drop deliveries in the order received; `mark_dispatched` waits for it).
#[derive(Debug)]
pub struct Delivery {
    /// The event's position in the log.
    pub seq: Seq,
    /// The term current when the event was committed.
    pub term: Term,
    /// When it was committed.
    pub accepted_at: UnixMillis,
    /// Whether it was committed before this dispatcher started (replay after a restart).
    pub replayed: bool,
    /// The event.
    pub event: Arc<Event>,
    _ack: AckGuard,
}

impl Delivery {
    /// Marks the event processed now (same as dropping the delivery).
    pub fn done(self) {
        drop(self);
    }
}

#[derive(Debug)]
struct AckGuard {
    seq: u64,
    processed: Arc<AtomicU64>,
    notify: Arc<Notify>,
}

impl Drop for AckGuard {
    fn drop(&mut self) {
        self.processed.fetch_max(self.seq, Ordering::SeqCst);
        self.notify.notify_one();
    }
}

/// The receiving end of one subscription.
#[derive(Debug)]
pub struct Subscription {
    name: &'static str,
    /// Deliveries from the dispatcher task; closed when the dispatcher stops.
    rx: mpsc::Receiver<Delivery>,
}

impl Subscription {
    /// The next delivery; `None` once the dispatcher stopped.
    ///
    /// # Cancel safety
    /// Cancel safe (`mpsc::Receiver::recv`): a cancelled call loses nothing.
    pub async fn recv(&mut self) -> Option<Delivery> {
        self.rx.recv().await
    }

    /// The component name given at subscription.
    #[must_use]
    pub fn name(&self) -> &'static str {
        self.name
    }
}

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

#[derive(Debug, Default)]
struct Counters {
    delivered: AtomicU64,
    replayed: AtomicU64,
    overflow_waits: AtomicU64,
    marked_through: AtomicU64,
}

#[derive(Debug)]
struct Shared {
    journal: Arc<Journal>,
    /// Highest `Seq` known committed (wakes the dispatcher task).
    committed: watch::Sender<u64>,
    /// Whether the journal takes commits, as the last accept (or the journal watch's probe)
    /// found: false from a storage fault until a commit succeeds again. Writes waiting on a
    /// fault wake when it turns true.
    writable: watch::Sender<bool>,
    /// Cancelled when the dispatcher stops: writes waiting on a storage fault give up
    /// ([`DispatchError::Stopped`]).
    stopping: CancellationToken,
    leadership: watch::Sender<Leadership>,
    counters: Counters,
}

/// Publishes events and batches: journals them, then wakes the dispatcher. Cheap to clone.
#[derive(Clone, Debug)]
pub struct DispatchHandle {
    shared: Arc<Shared>,
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

struct Sub {
    options: SubscribeOptions,
    /// Sending end of the subscription; `None` once the receiver was dropped.
    tx: Option<mpsc::Sender<Delivery>>,
    /// Highest `Seq` the component has dropped (processed).
    processed: Arc<AtomicU64>,
    /// Highest `Seq` sent to it.
    sent_through: u64,
}

/// Builds the dispatcher: subscribe every component, take handles, then [`Dispatcher::run`].
pub struct Dispatcher {
    shared: Arc<Shared>,
    subs: Vec<Sub>,
    notify: Arc<Notify>,
    /// The last `Seq` committed before this dispatcher existed: events up to it are replays,
    /// later ones are live. Taken in [`Dispatcher::new`], before any [`DispatchHandle`] can
    /// publish, so an event accepted between `new` and the start of `run` (a `BecameLeader`,
    /// say) is never mistaken for a replay. `None` when the journal could not be read then
    /// (`run` reads it again and fails on the same error).
    replay_through: Option<u64>,
}

debug_non_exhaustive!(Dispatcher, |x| "subscriptions" => x.subs.len());

impl Dispatcher {
    /// A dispatcher over `journal` with no subscriptions yet.
    #[must_use]
    pub fn new(journal: Arc<Journal>) -> Self {
        // A metadata read is a short read transaction; this runs once, at start-up.
        let replay_through = journal.meta().ok().map(|m| m.next_seq.0.saturating_sub(1));
        let (committed, _) = watch::channel(0);
        let (leadership, _) = watch::channel(Leadership::Follower);
        let (writable, _) = watch::channel(true);
        Dispatcher {
            shared: Arc::new(Shared {
                journal,
                committed,
                writable,
                stopping: CancellationToken::new(),
                leadership,
                counters: Counters::default(),
            }),
            subs: Vec::new(),
            notify: Arc::new(Notify::new()),
            replay_through,
        }
    }

    /// Adds a subscription. Subscribe every component before [`Dispatcher::run`]: events are
    /// delivered only to the subscriptions that exist when they are read.
    pub fn subscribe(&mut self, options: SubscribeOptions) -> Subscription {
        let (tx, rx) = mpsc::channel(options.capacity.max(1));
        let name = options.name;
        self.subs.push(Sub {
            options,
            tx: Some(tx),
            processed: Arc::new(AtomicU64::new(0)),
            sent_through: 0,
        });
        Subscription { name, rx }
    }

    /// A handle to publish through.
    #[must_use]
    pub fn handle(&self) -> DispatchHandle {
        DispatchHandle {
            shared: self.shared.clone(),
        }
    }

    /// Runs until `cancel`: replays undispatched events, then delivers new ones as they commit.
    /// On return every subscription is closed.
    ///
    /// # Errors
    /// [`DispatchError::Read`] on a corrupt log; [`DispatchError::Accept`] when
    /// `mark_dispatched` fails (stop and reopen).
    ///
    /// # Cancel safety
    /// Dropping the future loses nothing durable: undispatched events stay in the log and are
    /// replayed by the next dispatcher.
    pub async fn run(mut self, cancel: CancellationToken) -> Result<(), DispatchError> {
        // Writes waiting on a storage fault give up once the dispatcher is gone.
        let _stopping = self.shared.stopping.clone().drop_guard();
        let journal = self.shared.journal.clone();
        let Some(meta) =
            read_retrying(&journal, &cancel, |j| j.meta().map_err(DispatchError::Read)).await?
        else {
            return Ok(());
        };
        let replay_through = self
            .replay_through
            .unwrap_or_else(|| meta.next_seq.0.saturating_sub(1));
        let mut next = meta.dispatched_through.0 + 1;
        let mut marked = meta.dispatched_through.0;
        self.shared
            .counters
            .marked_through
            .store(marked, Ordering::Relaxed);
        let mut committed = self.shared.committed.subscribe();
        let mut leader = Leadership::Follower;
        tracing::info!(
            from = next,
            replay_through,
            subscriptions = self.subs.len(),
            "dispatcher started"
        );
        loop {
            let Some(chunk) = read_retrying(&journal, &cancel, move |j| {
                j.events(Seq(next), READ_CHUNK).map_err(DispatchError::Read)
            })
            .await?
            else {
                break;
            };
            if chunk.is_empty() {
                marked = self.mark(marked, next - 1).await?;
                tokio::select! {
                    () = cancel.cancelled() => break,
                    r = committed.wait_for(|c| *c >= next) => { if r.is_err() { break; } }
                    () = self.notify.notified() => {}
                    () = tokio::time::sleep(POLL_INTERVAL) => {}
                }
                continue;
            }
            for (seq, header, event) in chunk {
                let replayed = seq.0 <= replay_through;
                if replayed {
                    self.shared
                        .counters
                        .replayed
                        .fetch_add(1, Ordering::Relaxed);
                }
                if !replayed {
                    match &event {
                        Event::BecameLeader { term, .. } => leader = Leadership::Leader(*term),
                        Event::LostLeadership { .. } => leader = Leadership::Follower,
                        _ => {}
                    }
                    self.shared.leadership.send_if_modified(|l| {
                        let changed = *l != leader;
                        *l = leader;
                        changed
                    });
                }
                if !self
                    .deliver(seq, &header, Arc::new(event), replayed, leader, &cancel)
                    .await
                {
                    return self.stop(marked, next - 1).await;
                }
                next = seq.0 + 1;
            }
            marked = self.mark(marked, next - 1).await?;
        }
        self.stop(marked, next - 1).await
    }

    async fn stop(&mut self, marked: u64, delivered_through: u64) -> Result<(), DispatchError> {
        if let Err(e) = self.mark(marked, delivered_through).await {
            tracing::warn!(error = %e, "final dispatch mark failed");
        }
        for s in &mut self.subs {
            s.tx = None;
        }
        tracing::info!("dispatcher stopped");
        Ok(())
    }

    /// Sends one event to every matching subscription; `false` when cancelled meanwhile.
    async fn deliver(
        &mut self,
        seq: Seq,
        header: &RecordHeader,
        event: Arc<Event>,
        replayed: bool,
        leader: Leadership,
        cancel: &CancellationToken,
    ) -> bool {
        let kind = event.kind();
        let leadership_event = matches!(kind, EventKind::BecameLeader | EventKind::LostLeadership);
        for sub in &mut self.subs {
            let Some(tx) = sub.tx.as_ref() else { continue };
            let wanted = sub.options.kinds.is_empty()
                || sub.options.kinds.contains(&kind)
                || (sub.options.leader_only && leadership_event);
            let allowed =
                !sub.options.leader_only || leadership_event || replayed || leader.is_leader();
            if !(wanted && allowed) {
                continue;
            }
            let delivery = Delivery {
                seq,
                term: header.term,
                accepted_at: header.accepted_at,
                replayed,
                event: event.clone(),
                _ack: AckGuard {
                    seq: seq.0,
                    processed: sub.processed.clone(),
                    notify: self.notify.clone(),
                },
            };
            let sent = match tx.try_send(delivery) {
                Ok(()) => true,
                Err(mpsc::error::TrySendError::Closed(_)) => false,
                Err(mpsc::error::TrySendError::Full(delivery)) => {
                    self.shared
                        .counters
                        .overflow_waits
                        .fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(subscription = sub.options.name, "subscription full");
                    tokio::select! {
                        () = cancel.cancelled() => return false,
                        r = tx.send(delivery) => r.is_ok(),
                    }
                }
            };
            if sent {
                sub.sent_through = seq.0;
                self.shared
                    .counters
                    .delivered
                    .fetch_add(1, Ordering::Relaxed);
            } else {
                tracing::debug!(subscription = sub.options.name, "subscription closed");
                sub.tx = None;
            }
        }
        true
    }

    /// Journals `mark_dispatched` up to the highest `Seq` every subscription has processed.
    async fn mark(&self, marked: u64, delivered_through: u64) -> Result<u64, DispatchError> {
        let mut safe = delivered_through;
        for s in &self.subs {
            if s.tx.is_none() {
                continue;
            }
            let p = s.processed.load(Ordering::SeqCst);
            if p < s.sent_through {
                safe = safe.min(p);
            }
        }
        if safe <= marked {
            return Ok(marked);
        }
        match blocking(&self.shared.journal, move |j| {
            j.mark_dispatched(Seq(safe)).map_err(DispatchError::Accept)
        })
        .await
        {
            Ok(()) => {}
            // Not marked: the events stay undispatched in the journal (a restart replays them,
            // which handlers take idempotently); the next round marks again.
            Err(e) if e.storage_fault().is_some() => return Ok(marked),
            Err(e) => return Err(e),
        }
        self.shared
            .counters
            .marked_through
            .store(safe, Ordering::Relaxed);
        Ok(safe)
    }
}

/// A read that waits out a storage fault (redb refuses reads between a failed commit and the
/// writer's reopen): retried every [`POLL_INTERVAL`], logged once per fault; `None` when
/// `cancel` fired meanwhile.
async fn read_retrying<T: Send + 'static>(
    journal: &Arc<Journal>,
    cancel: &CancellationToken,
    f: impl Fn(&Journal) -> Result<T, DispatchError> + Send + Sync + 'static,
) -> Result<Option<T>, DispatchError> {
    let f = Arc::new(f);
    let mut logged = false;
    loop {
        let g = f.clone();
        match blocking(journal, move |j| g(j)).await {
            Ok(v) => {
                if logged {
                    tracing::info!("journal readable again; dispatch resumes");
                }
                return Ok(Some(v));
            }
            Err(e) if e.storage_fault().is_some() => {
                if !logged {
                    tracing::warn!(error = %e, "journal not readable; dispatch waits");
                    logged = true;
                }
                tokio::select! {
                    () = cancel.cancelled() => return Ok(None),
                    () = tokio::time::sleep(POLL_INTERVAL) => {}
                }
            }
            Err(e) => return Err(e),
        }
    }
}

async fn blocking<T: Send + 'static>(
    journal: &Arc<Journal>,
    f: impl FnOnce(&Journal) -> Result<T, DispatchError> + Send + 'static,
) -> Result<T, DispatchError> {
    let j = journal.clone();
    tokio::task::spawn_blocking(move || f(&j))
        .await
        .map_err(DispatchError::Join)?
}
