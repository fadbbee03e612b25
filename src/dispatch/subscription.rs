//! The receiving side: which events a component subscribes to ([`SubscribeOptions`]), its
//! [`Subscription`], and each [`Delivery`] (processed when dropped).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use haptic_journal::{Event, EventKind, Seq, Term, UnixMillis};
use tokio::sync::{Notify, mpsc};

use super::DEFAULT_SUBSCRIPTION_CAPACITY;

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
    pub(super) _ack: AckGuard,
}

impl Delivery {
    /// Marks the event processed now (same as dropping the delivery).
    pub fn done(self) {
        drop(self);
    }
}

/// Marks a delivery processed when dropped (wakes the dispatcher's `mark_dispatched`).
#[derive(Debug)]
pub(super) struct AckGuard {
    pub(super) seq: u64,
    pub(super) processed: Arc<AtomicU64>,
    pub(super) notify: Arc<Notify>,
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
    pub(super) name: &'static str,
    /// Deliveries from the dispatcher task; closed when the dispatcher stops.
    pub(super) rx: mpsc::Receiver<Delivery>,
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
