//! The dispatcher task: reads the committed log from `dispatched_through + 1` (replay and live
//! are one path), hands each event to every matching subscription in `Seq` order, and journals
//! `mark_dispatched` once every subscription processed it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use haptic_journal::{Event, EventKind, Journal, RecordHeader, Seq};
use tokio::sync::{Notify, mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::handle::{Counters, Shared};
use super::subscription::{AckGuard, Delivery, SubscribeOptions, Subscription};
use super::{DispatchError, DispatchHandle, Leadership, POLL_INTERVAL, READ_CHUNK};

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
