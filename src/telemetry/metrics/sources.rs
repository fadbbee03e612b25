//! The scrape-time side of [`super::Metrics`]: the journal and the dispatcher (their handles
//! in one slot each, carrying a replaced handle's counters over), the components' registered
//! counter sources, the fleet, and the [`Collector`] that reads them all.

use std::fmt;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex, MutexGuard};

use haptic_journal::{Journal, Queue, UnixMillis};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric as _};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Unit;
use tokio::sync::watch;

use super::counters::{self, AnySlot, CounterFamily, CounterSource, Series, Slot};
use crate::dispatch::{DispatchHandle, Leadership};
use crate::telemetry::fleet::{FleetView, LeaderClock};

/// A poisoned lock only means a thread panicked while registering; the slot is still valid.
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

// ----- the journal and the dispatcher -----

static JOURNAL_COMMITS: CounterFamily = CounterFamily {
    name: "haptic_journal_commits",
    help: "Successful journal commits",
};
static JOURNAL_FAILED_COMMITS: CounterFamily = CounterFamily {
    name: "haptic_journal_failed_commits",
    help: "Journal commits that failed (each failed every request of its group)",
};
static JOURNAL_COMMITTED_EVENTS: CounterFamily = CounterFamily {
    name: "haptic_journal_committed_events",
    help: "Events committed to the journal",
};
static JOURNAL_REQUESTS: CounterFamily = CounterFamily {
    name: "haptic_journal_requests",
    help: "Requests (accept calls and single operations) committed",
};

/// Positions in the journal's [`CounterSource::SERIES`].
const COMMITS: usize = 0;
const EVENTS: usize = 2;

impl CounterSource for Arc<Journal> {
    const SERIES: &'static [Series] = &[
        Series::of(&JOURNAL_COMMITS),
        Series::of(&JOURNAL_FAILED_COMMITS),
        Series::of(&JOURNAL_COMMITTED_EVENTS),
        Series::of(&JOURNAL_REQUESTS),
    ];
    fn read(&self) -> Vec<u64> {
        let s = self.commit_stats();
        vec![s.commits, s.failed_commits, s.events, s.requests]
    }
    fn same(&self, other: &Self) -> bool {
        Arc::ptr_eq(self, other)
    }
}

static LEADER_TRANSITIONS: CounterFamily = CounterFamily {
    name: "haptic_leader_election_transitions",
    help: "Leadership changes of this replica, acquired or lost (upstream HAPTIC's name)",
};

static DISPATCH_DELIVERIES: CounterFamily = CounterFamily {
    name: "haptic_dispatch_deliveries",
    help: "Deliveries to subscribers (one per event and subscription)",
};
static DISPATCH_REPLAYED: CounterFamily = CounterFamily {
    name: "haptic_dispatch_replayed_events",
    help: "Events replayed from the journal (committed before start)",
};
static DISPATCH_OVERFLOW_WAITS: CounterFamily = CounterFamily {
    name: "haptic_dispatch_overflow_waits",
    help: "Deliveries that found a subscriber's channel full and waited",
};

#[derive(Clone)]
pub(super) struct DispatchSource {
    pub(super) handle: DispatchHandle,
    /// Kept from registration: a `borrow()` per scrape instead of a new receiver each time.
    pub(super) leadership: watch::Receiver<Leadership>,
}

impl CounterSource for DispatchSource {
    const SERIES: &'static [Series] = &[
        Series::of(&DISPATCH_DELIVERIES),
        Series::of(&DISPATCH_REPLAYED),
        Series::of(&DISPATCH_OVERFLOW_WAITS),
    ];
    fn read(&self) -> Vec<u64> {
        let s = self.handle.stats();
        vec![s.delivered, s.replayed, s.overflow_waits]
    }
    fn same(&self, other: &Self) -> bool {
        // The handle exposes no identity; the runtime builds a new dispatcher only over a
        // reopened journal, so the journal identifies it.
        Arc::ptr_eq(self.handle.journal(), other.handle.journal())
    }
}

/// The current handle and the totals of `slot`; the lock is held only while copying (the
/// journal's handle is read after it).
fn totals<T: CounterSource>(slot: &Mutex<Slot<T>>) -> (Option<T>, Vec<u64>) {
    let (current, carried) = {
        let s = lock(slot);
        (s.current(), s.carried())
    };
    let mut now = current
        .as_ref()
        .map_or_else(|| vec![0; T::SERIES.len()], CounterSource::read);
    counters::add(&mut now, &carried);
    (current, now)
}

#[derive(Default)]
pub(super) struct Sources {
    pub(super) journal: Mutex<Slot<Arc<Journal>>>,
    pub(super) dispatch: Mutex<Slot<DispatchSource>>,
    /// The components' counter sources, in declaration order ([`super::Metrics::declare`]).
    pub(super) components: Mutex<Vec<Box<dyn AnySlot>>>,
    /// The fleet folded from journal events ([`super::Metrics::observe_event`]).
    pub(super) fleet: Mutex<FleetView>,
    /// Leadership transitions and time as leader ([`super::Metrics::leadership`]).
    pub(super) leader_clock: Mutex<LeaderClock>,
    /// Pods whose HAProxy major.minor differs from the validator's
    /// ([`super::Metrics::set_version_mismatch_pods`]).
    pub(super) version_mismatch_pods: std::sync::atomic::AtomicU64,
}

impl fmt::Debug for Sources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let components: Vec<(&str, bool)> = lock(&self.components)
            .iter()
            .map(|s| {
                let name = s.series().first().map_or("", |x| x.family.name);
                (name, s.is_registered())
            })
            .collect();
        f.debug_struct("Sources")
            .field("journal", &lock(&self.journal).is_registered())
            .field("dispatch", &lock(&self.dispatch).is_registered())
            .field("components", &components)
            .finish()
    }
}

/// What one scrape reads from the journal's meta and queues.
#[derive(Default)]
struct JournalView {
    readable: bool,
    term: u64,
    undispatched_events: u64,
    /// (queue, depth, oldest age in seconds), in `Queue::ALL` order.
    queues: Vec<(Queue, u64, Option<u64>)>,
}

fn journal_view(journal: Option<&Arc<Journal>>) -> JournalView {
    let Some(journal) = journal else {
        return JournalView::default();
    };
    match journal.pending() {
        Ok(p) => {
            let now = UnixMillis::now();
            JournalView {
                readable: true,
                term: p.term.0,
                undispatched_events: p.undispatched_events,
                queues: p
                    .queues
                    .iter()
                    .map(|q| (q.queue, q.count, q.oldest_age_secs(now)))
                    .collect(),
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "journal read for metrics failed");
            JournalView::default()
        }
    }
}

/// Reads every registered handle at scrape time.
#[derive(Debug)]
pub(super) struct SourcesCollector(pub(super) Arc<Sources>);

impl Collector for SourcesCollector {
    fn encode(&self, mut enc: DescriptorEncoder<'_>) -> fmt::Result {
        let s = &self.0;
        let (journal, jc) = totals(&s.journal);
        let (dispatch, dc) = totals(&s.dispatch);
        let view = journal_view(journal.as_ref());
        let leader = dispatch
            .as_ref()
            .is_some_and(|d| d.leadership.borrow().is_leader());

        // Journal.
        counters::encode(&mut enc, <Arc<Journal> as CounterSource>::SERIES, &jc)?;
        let per_commit = if jc[COMMITS] == 0 {
            0.0
        } else {
            jc[EVENTS] as f64 / jc[COMMITS] as f64
        };
        gauge(
            &mut enc,
            "haptic_journal_events_per_commit",
            "Mean events per journal commit since start (group commit efficiency)",
            None,
            per_commit,
        )?;
        gauge(
            &mut enc,
            "haptic_journal_readable",
            "1 when the last scrape could read the journal, 0 when not (or none registered)",
            None,
            u64::from(view.readable),
        )?;
        {
            let mut m = enc.encode_descriptor(
                "haptic_journal_queue_depth",
                "Items in each journal work queue",
                None,
                MetricType::Gauge,
            )?;
            for q in Queue::ALL {
                let depth = view
                    .queues
                    .iter()
                    .find(|(x, _, _)| x == q)
                    .map_or(0, |(_, d, _)| *d);
                let labels = [("queue", q.as_str())];
                ConstGauge::new(depth).encode(m.encode_family(&labels)?)?;
            }
        }
        {
            let mut m = enc.encode_descriptor(
                "haptic_journal_queue_oldest_age",
                "Age of the oldest item of each non-empty journal work queue",
                Some(&Unit::Seconds),
                MetricType::Gauge,
            )?;
            for (q, _, age) in &view.queues {
                if let Some(age) = age {
                    let labels = [("queue", q.as_str())];
                    ConstGauge::new(*age).encode(m.encode_family(&labels)?)?;
                }
            }
        }
        gauge(
            &mut enc,
            "haptic_journal_undispatched_events",
            "Events committed but not yet processed by every subscriber",
            None,
            view.undispatched_events,
        )?;
        let parked = view
            .queues
            .iter()
            .find(|(q, _, _)| *q == Queue::StatusParked)
            .map_or(0, |(_, d, _)| *d);
        gauge(
            &mut enc,
            "haptic_parked_statuses",
            "Per-pod status updates parked until their HAProxyCfg can take them",
            None,
            parked,
        )?;
        gauge(
            &mut enc,
            "haptic_term",
            "Leadership term journaled last (0: never led)",
            None,
            view.term,
        )?;
        gauge(
            &mut enc,
            "haptic_leader_election_is_leader",
            "1 while this replica leads (as the dispatcher saw the live event stream), else 0 \
             (upstream HAPTIC's name)",
            None,
            u64::from(leader),
        )?;
        let (transitions, led_secs) = {
            let c = lock(&s.leader_clock);
            (c.transitions, c.led_secs_at(std::time::Instant::now()))
        };
        counters::encode(&mut enc, &[Series::of(&LEADER_TRANSITIONS)], &[transitions])?;
        ConstCounter::new(led_secs).encode(enc.encode_descriptor(
            "haptic_leader_election_time_as_leader_seconds",
            "Seconds this replica has led since it started (upstream HAPTIC's name)",
            None,
            MetricType::Counter,
        )?)?;
        let fleet = lock(&s.fleet).clone();
        gauge(
            &mut enc,
            "haptic_managed_pods",
            "HAProxy pods of the last discovery (the pods deployments target)",
            None,
            fleet.managed_pods(),
        )?;
        gauge(
            &mut enc,
            "haptic_fleet_pinned",
            "1 while the render gate is pinned (the newest render was rejected; the fleet keeps \
             the last render that passed), else 0",
            None,
            u64::from(fleet.pinned()),
        )?;
        gauge(
            &mut enc,
            "haptic_pods_not_on_spec_checksum",
            "Discovered pods not known to run the newest render that passed the gate (the \
             render HAProxyCfg.spec.checksum converges to); meaningful on the leader",
            None,
            fleet.pods_not_on_target(),
        )?;
        gauge(
            &mut enc,
            "haptic_validator_version_mismatch_pods",
            "Pods whose HAProxy major.minor differs from the validator's haproxy -v \
             (condition ValidatorVersionMismatch)",
            None,
            s.version_mismatch_pods.load(Relaxed),
        )?;

        // Dispatcher.
        counters::encode(&mut enc, DispatchSource::SERIES, &dc)?;

        // The components, in declaration order.
        let (series, values) = {
            let slots = lock(&s.components);
            let mut series: Vec<Series> = Vec::new();
            let mut values: Vec<u64> = Vec::new();
            for slot in slots.iter() {
                series.extend_from_slice(slot.series());
                values.extend(slot.totals());
            }
            (series, values)
        };
        counters::encode(&mut enc, &series, &values)
    }
}

/// One unlabelled gauge.
fn gauge<N>(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    value: N,
) -> fmt::Result
where
    N: prometheus_client::encoding::EncodeGaugeValue + fmt::Debug + Send + Sync + 'static,
{
    ConstGauge::new(value).encode(enc.encode_descriptor(name, help, unit, MetricType::Gauge)?)
}
