//! The scrape-time side of [`super::Metrics`]: registered component handles (one slot each,
//! carrying a replaced handle's counters over) and the [`Collector`] that reads them.

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

use crate::components::deployer::Deployer;
use crate::components::drift::DriftHandle;
use crate::components::publisher::ConfigPublisher;
use crate::components::scheduler::SchedulerStats;
use crate::components::validator::ValidationStats;
use crate::dispatch::{DispatchHandle, Leadership};
use crate::telemetry::fleet::{FleetView, LeaderClock};

/// A poisoned lock only means a thread panicked while registering; the slot is still valid.
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

// ----- registered sources -----

/// Counter snapshots that can be added (to carry a replaced handle's values over).
pub(super) trait Counts: Copy + Default {
    fn plus(self, other: Self) -> Self;
}

macro_rules! counts {
    ($name:ident { $($field:ident),* $(,)? }) => {
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub(super) struct $name {
            $($field: u64),*
        }

        impl Counts for $name {
            fn plus(self, other: Self) -> Self {
                $name {
                    $($field: self.$field.saturating_add(other.$field)),*
                }
            }
        }
    };
}

counts!(JournalCounts {
    commits,
    events,
    requests,
    failed_commits
});
counts!(DispatchCounts {
    delivered,
    replayed,
    overflow_waits
});
counts!(DeployerCounts {
    deployments,
    failed_deployments,
    endpoint_successes,
    endpoint_failures,
    reloads,
    drift_detected,
    deposed
});
counts!(PublisherCounts {
    publications,
    config_published,
    retries,
    given_up,
    blocked,
    heals,
    status_rounds
});
counts!(SchedulerCounts {
    started,
    timeouts,
    given_up
});
counts!(DriftCounts { triggers });
counts!(ValidatorCounts { passed, failed });

/// A registered handle: how to read its counters and whether another handle is the same one.
pub(super) trait Source: Clone {
    type Counts: Counts;
    fn read(&self) -> Self::Counts;
    fn same(&self, other: &Self) -> bool;
}

impl Source for Arc<Journal> {
    type Counts = JournalCounts;
    fn read(&self) -> JournalCounts {
        let s = self.commit_stats();
        JournalCounts {
            commits: s.commits,
            events: s.events,
            requests: s.requests,
            failed_commits: s.failed_commits,
        }
    }
    fn same(&self, other: &Self) -> bool {
        Arc::ptr_eq(self, other)
    }
}

#[derive(Clone)]
pub(super) struct DispatchSource {
    pub(super) handle: DispatchHandle,
    /// Kept from registration: a `borrow()` per scrape instead of a new receiver each time.
    pub(super) leadership: watch::Receiver<Leadership>,
}

impl Source for DispatchSource {
    type Counts = DispatchCounts;
    fn read(&self) -> DispatchCounts {
        let s = self.handle.stats();
        DispatchCounts {
            delivered: s.delivered,
            replayed: s.replayed,
            overflow_waits: s.overflow_waits,
        }
    }
    fn same(&self, other: &Self) -> bool {
        // The handle exposes no identity; the runtime builds a new dispatcher only over a
        // reopened journal, so the journal identifies it.
        Arc::ptr_eq(self.handle.journal(), other.handle.journal())
    }
}

impl Source for Arc<Deployer> {
    type Counts = DeployerCounts;
    fn read(&self) -> DeployerCounts {
        let s = &self.stats;
        DeployerCounts {
            deployments: s.deployments.load(Relaxed),
            failed_deployments: s.failed_deployments.load(Relaxed),
            endpoint_successes: s.endpoint_successes.load(Relaxed),
            endpoint_failures: s.endpoint_failures.load(Relaxed),
            reloads: s.reloads.load(Relaxed),
            drift_detected: s.drift_detected.load(Relaxed),
            deposed: s.deposed.load(Relaxed),
        }
    }
    fn same(&self, other: &Self) -> bool {
        Arc::ptr_eq(self, other)
    }
}

impl Source for ConfigPublisher {
    type Counts = PublisherCounts;
    fn read(&self) -> PublisherCounts {
        let c = self.counters();
        PublisherCounts {
            publications: c.publications.load(Relaxed),
            config_published: c.config_published.load(Relaxed),
            retries: c.retries.load(Relaxed),
            given_up: c.given_up.load(Relaxed),
            blocked: c.blocked.load(Relaxed),
            heals: c.heals.load(Relaxed),
            status_rounds: c.status_rounds.load(Relaxed),
        }
    }
    fn same(&self, other: &Self) -> bool {
        std::ptr::eq(self.counters(), other.counters())
    }
}

impl Source for Arc<SchedulerStats> {
    type Counts = SchedulerCounts;
    fn read(&self) -> SchedulerCounts {
        SchedulerCounts {
            started: self.started.load(Relaxed),
            timeouts: self.timeouts.load(Relaxed),
            given_up: self.given_up.load(Relaxed),
        }
    }
    fn same(&self, other: &Self) -> bool {
        Arc::ptr_eq(self, other)
    }
}

impl Source for Arc<ValidationStats> {
    type Counts = ValidatorCounts;
    fn read(&self) -> ValidatorCounts {
        ValidatorCounts {
            passed: self.passed.load(Relaxed),
            failed: self.failed.load(Relaxed),
        }
    }
    fn same(&self, other: &Self) -> bool {
        Arc::ptr_eq(self, other)
    }
}

impl Source for DriftHandle {
    type Counts = DriftCounts;
    fn read(&self) -> DriftCounts {
        DriftCounts {
            triggers: self.triggers.load(Relaxed),
        }
    }
    fn same(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.triggers, &other.triggers)
    }
}

/// One registered handle plus the counters of the handles it replaced.
pub(super) struct Slot<T: Source> {
    current: Option<T>,
    carried: T::Counts,
}

impl<T: Source> Default for Slot<T> {
    fn default() -> Self {
        Slot {
            current: None,
            carried: T::Counts::default(),
        }
    }
}

impl<T: Source> Slot<T> {
    /// Installs `new`; a different old handle's last values move into `carried`. Increments
    /// the old handle makes after this (a draining component) are not counted.
    pub(super) fn replace(&mut self, new: T) {
        if let Some(old) = self.current.take()
            && !old.same(&new)
        {
            self.carried = self.carried.plus(old.read());
        }
        self.current = Some(new);
    }

    /// The current handle (cloned, so the lock is not held while reading it) and the carried
    /// counts.
    fn snapshot(&self) -> (Option<T>, T::Counts) {
        (self.current.clone(), self.carried)
    }
}

fn totals<T: Source>(slot: &Mutex<Slot<T>>) -> (Option<T>, T::Counts) {
    let (current, carried) = lock(slot).snapshot();
    let now = current.as_ref().map(Source::read).unwrap_or_default();
    (current, now.plus(carried))
}

#[derive(Default)]
pub(super) struct Sources {
    pub(super) journal: Mutex<Slot<Arc<Journal>>>,
    pub(super) dispatch: Mutex<Slot<DispatchSource>>,
    pub(super) deployer: Mutex<Slot<Arc<Deployer>>>,
    pub(super) publisher: Mutex<Slot<ConfigPublisher>>,
    pub(super) scheduler: Mutex<Slot<Arc<SchedulerStats>>>,
    pub(super) drift: Mutex<Slot<DriftHandle>>,
    pub(super) validator: Mutex<Slot<Arc<ValidationStats>>>,
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
        f.debug_struct("Sources")
            .field("journal", &lock(&self.journal).current.is_some())
            .field("dispatch", &lock(&self.dispatch).current.is_some())
            .field("deployer", &lock(&self.deployer).current.is_some())
            .field("publisher", &lock(&self.publisher).current.is_some())
            .field("scheduler", &lock(&self.scheduler).current.is_some())
            .field("drift", &lock(&self.drift).current.is_some())
            .field("validator", &lock(&self.validator).current.is_some())
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
        let (_, dep) = totals(&s.deployer);
        let (_, publ) = totals(&s.publisher);
        let (_, sched) = totals(&s.scheduler);
        let (_, drift) = totals(&s.drift);
        let (_, validator) = totals(&s.validator);
        let view = journal_view(journal.as_ref());
        let leader = dispatch
            .as_ref()
            .is_some_and(|d| d.leadership.borrow().is_leader());

        // Journal.
        counter(
            &mut enc,
            "haptic_journal_commits",
            "Successful journal commits",
            jc.commits,
        )?;
        counter(
            &mut enc,
            "haptic_journal_failed_commits",
            "Journal commits that failed (each failed every request of its group)",
            jc.failed_commits,
        )?;
        counter(
            &mut enc,
            "haptic_journal_committed_events",
            "Events committed to the journal",
            jc.events,
        )?;
        counter(
            &mut enc,
            "haptic_journal_requests",
            "Requests (accept calls and single operations) committed",
            jc.requests,
        )?;
        let per_commit = if jc.commits == 0 {
            0.0
        } else {
            jc.events as f64 / jc.commits as f64
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
        counter(
            &mut enc,
            "haptic_leader_election_transitions",
            "Leadership changes of this replica, acquired or lost (upstream HAPTIC's name)",
            transitions,
        )?;
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
        counter(
            &mut enc,
            "haptic_dispatch_deliveries",
            "Deliveries to subscribers (one per event and subscription)",
            dc.delivered,
        )?;
        counter(
            &mut enc,
            "haptic_dispatch_replayed_events",
            "Events replayed from the journal (committed before start)",
            dc.replayed,
        )?;
        counter(
            &mut enc,
            "haptic_dispatch_overflow_waits",
            "Deliveries that found a subscriber's channel full and waited",
            dc.overflow_waits,
        )?;

        // Validator.
        counter(
            &mut enc,
            "haptic_validation",
            "Render validations (haproxy -c), passed or failed (upstream HAPTIC's name)",
            validator.passed.saturating_add(validator.failed),
        )?;
        counter(
            &mut enc,
            "haptic_validation_errors",
            "Render validations that rejected the render (upstream HAPTIC's name)",
            validator.failed,
        )?;

        // Deployer.
        counter(
            &mut enc,
            "haptic_deployment",
            "Deployment runs completed (upstream HAPTIC's name)",
            dep.deployments,
        )?;
        counter(
            &mut enc,
            "haptic_deployment_errors",
            "Deployment runs completed with at least one failed pod (upstream HAPTIC's name)",
            dep.failed_deployments,
        )?;
        counter(
            &mut enc,
            "haptic_deployments_deposed",
            "Deployment runs stopped because the Lease was no longer valid",
            dep.deposed,
        )?;
        counter_family(
            &mut enc,
            "haptic_endpoint_syncs",
            "Endpoint (pod Dataplane API) syncs, by result",
            "result",
            &[
                ("success", dep.endpoint_successes),
                ("failure", dep.endpoint_failures),
            ],
        )?;
        counter(
            &mut enc,
            "haptic_reloads",
            "HAProxy reloads triggered",
            dep.reloads,
        )?;
        counter(
            &mut enc,
            "haptic_drift_detected",
            "Drift checks that found a pod differing from its render",
            dep.drift_detected,
        )?;

        // Publisher and scheduler.
        counter_family(
            &mut enc,
            "haptic_publishes",
            "Publications of the main HAProxyCfg, by result",
            "result",
            &[("success", publ.publications), ("given_up", publ.given_up)],
        )?;
        counter_family(
            &mut enc,
            "haptic_retries",
            "Retries, by component (publisher: failed API attempts retried; scheduler: \
             deployments cancelled at their timeout)",
            "component",
            &[
                ("config-publisher", publ.retries),
                ("deployment-scheduler", sched.timeouts),
            ],
        )?;
        counter(
            &mut enc,
            "haptic_config_published",
            "ConfigPublished events journaled",
            publ.config_published,
        )?;
        counter(
            &mut enc,
            "haptic_publisher_blocked_attempts",
            "Failed publisher writes that need an operator (401, 403, a missing CRD); retried",
            publ.blocked,
        )?;
        counter(
            &mut enc,
            "haptic_publisher_heals",
            "Self-healing republications of changed or deleted objects",
            publ.heals,
        )?;
        counter(
            &mut enc,
            "haptic_status_write_rounds",
            "Per-pod status write rounds",
            publ.status_rounds,
        )?;
        counter(
            &mut enc,
            "haptic_scheduler_deployments_started",
            "Deployments started by the scheduler (including resumed ones)",
            sched.started,
        )?;
        counter(
            &mut enc,
            "haptic_scheduler_timeouts",
            "Deployments cancelled after their timeout",
            sched.timeouts,
        )?;
        counter(
            &mut enc,
            "haptic_scheduler_endpoints_given_up",
            "Endpoints given up after the timeout retries",
            sched.given_up,
        )?;
        counter(
            &mut enc,
            "haptic_drift_triggers",
            "Drift prevention checks triggered",
            drift.triggers,
        )?;
        Ok(())
    }
}

/// One unlabelled counter; `name` without `_total` (the encoder appends it).
fn counter(enc: &mut DescriptorEncoder<'_>, name: &str, help: &str, value: u64) -> fmt::Result {
    ConstCounter::new(value).encode(enc.encode_descriptor(name, help, None, MetricType::Counter)?)
}

/// One counter family with one label `key`, one series per `(value, count)`.
fn counter_family(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    key: &'static str,
    series: &[(&'static str, u64)],
) -> fmt::Result {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (value, count) in series {
        let labels = [(key, *value)];
        ConstCounter::new(*count).encode(m.encode_family(&labels)?)?;
    }
    Ok(())
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
