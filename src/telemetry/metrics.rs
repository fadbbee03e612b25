//! Prometheus metrics: one `prometheus-client` [`Registry`] owned by [`Metrics`], no globals.
//!
//! Two kinds of values:
//! - counters the runtime moves directly ([`Metrics::events_accepted`],
//!   [`Metrics::render_accepted`], [`Metrics::validation`], [`Metrics::observe_commit`]);
//! - values the journal, the dispatcher and the components already count in atomics, read at
//!   scrape time by a custom [`Collector`](prometheus_client::collector::Collector) over the
//!   handles registered ([`Metrics::register_journal`], [`Metrics::register_dispatch`],
//!   [`Metrics::register`]). Each component owns its families: it implements
//!   [`CounterSource`] beside its counters (`components/<name>/metrics.rs`), so this module
//!   names no component. A handle may be registered after the server started and may be
//!   replaced at each leadership term: the replaced handle's last counter values are carried
//!   over, so every `_total` stays monotonic for the process's life.
//!
//! Families (OpenMetrics names; counters end in `_total` on the wire). Every label is a bounded
//! enum:
//!
//! | family | type | labels | from |
//! |---|---|---|---|
//! | `haptic_events_published_total` (upstream name) | counter | | runtime |
//! | `haptic_renders_total` | counter | `source` = `dir`, `configmap`, `ingest` | runtime |
//! | `haptic_validation_total` (upstream name) | counter | | validator: `ValidationStats` (passed + failed) |
//! | `haptic_validation_errors_total` (upstream name) | counter | | validator: `ValidationStats::failed` |
//! | `haptic_journal_commit_duration_seconds` | histogram | | runtime ([`Metrics::observe_commit`]) |
//! | `haptic_journal_commits_total` | counter | | `Journal::commit_stats` |
//! | `haptic_journal_failed_commits_total` | counter | | `Journal::commit_stats` |
//! | `haptic_journal_committed_events_total` | counter | | `Journal::commit_stats` |
//! | `haptic_journal_requests_total` | counter | | `Journal::commit_stats` |
//! | `haptic_journal_events_per_commit` | gauge | | `Journal::commit_stats` |
//! | `haptic_journal_readable` | gauge 0/1 | | last scrape's journal read |
//! | `haptic_journal_writable` | gauge 0/1 | | the journal watch ([`Metrics::set_journal_writable`]): 0 from a storage fault until a commit succeeds again |
//! | `haptic_journal_refused_inputs_total` | counter | `source` = `dir`, `configmap`, `ingest` | renders not journaled for a storage fault ([`Metrics::input_refused`]: an ingest `507`, a source render held for later) |
//! | `haptic_journal_queue_depth` | gauge | `queue` = `Queue::as_str` | `Journal::pending` |
//! | `haptic_journal_queue_oldest_age_seconds` | gauge | `queue` (non-empty queues only) | `Journal::pending` |
//! | `haptic_journal_undispatched_events` | gauge | | `Journal::pending` |
//! | `haptic_parked_statuses` | gauge | | depth of `status-parked` |
//! | `haptic_term` | gauge | | journaled leadership term |
//! | `haptic_leader_election_is_leader` (upstream name) | gauge 0/1 | | `DispatchHandle::leadership` |
//! | `haptic_leader_election_transitions_total` (upstream name) | counter | | [`Metrics::leadership`] |
//! | `haptic_leader_election_time_as_leader_seconds_total` (upstream name) | counter | | [`Metrics::leadership`] |
//! | `haptic_dispatch_deliveries_total` | counter | | `DispatchStats::delivered` |
//! | `haptic_dispatch_replayed_events_total` | counter | | `DispatchStats::replayed` |
//! | `haptic_dispatch_overflow_waits_total` | counter | | `DispatchStats::overflow_waits` |
//! | `haptic_deployment_total` (upstream name) | counter | | `DeployerStats::deployments` |
//! | `haptic_deployment_errors_total` (upstream name) | counter | | `DeployerStats::failed_deployments` |
//! | `haptic_deployment_duration_seconds` (upstream name) | histogram | | live `deployment.completed` ([`Metrics::observe_event`]) |
//! | `haptic_deployments_deposed_total` | counter | | `DeployerStats::deposed` |
//! | `haptic_endpoint_syncs_total` | counter | `result` = `success`, `failure` | `DeployerStats` |
//! | `haptic_reloads_total` | counter | | `DeployerStats::reloads` |
//! | `haptic_endpoint_sync_modes_total` | counter | `mode` = `fine_grained`, `runtime`, `raw_initial`, `raw_threshold`, `raw_fallback`, `raw_unmodelled` | `DeployerStats::mode` |
//! | `haptic_drift_detected_total` | counter | | `DeployerStats::drift_detected` |
//! | `haptic_managed_pods` | gauge | | last `haproxy.pods.discovered` ([`super::fleet`]) |
//! | `haptic_fleet_pinned` | gauge 0/1 | | `render.gate.completed` latch ([`super::fleet`]) |
//! | `haptic_pods_not_on_spec_checksum` | gauge | | discovered pods off the newest passed render ([`super::fleet`]) |
//! | `haptic_validator_version_mismatch_pods` | gauge | | [`Metrics::set_version_mismatch_pods`] |
//! | `haptic_publishes_total` | counter | `result` = `success`, `given_up` (ended by a permanent rejection) | publisher `Counters` |
//! | `haptic_publisher_blocked_attempts_total` | counter | | publisher `Counters::blocked` (401, 403, missing CRD; retried) |
//! | `haptic_retries_total` | counter | `component` = `config-publisher`, `deployment-scheduler` | publisher retries, scheduler timeouts |
//! | `haptic_config_published_total` | counter | | publisher `Counters::config_published` |
//! | `haptic_publisher_heals_total` | counter | | publisher `Counters::heals` |
//! | `haptic_status_write_rounds_total` | counter | | publisher `Counters::status_rounds` |
//! | `haptic_scheduler_deployments_started_total` | counter | | `SchedulerStats::started` |
//! | `haptic_scheduler_timeouts_total` | counter | | `SchedulerStats::timeouts` |
//! | `haptic_scheduler_endpoints_given_up_total` | counter | | `SchedulerStats::given_up` |
//! | `haptic_drift_triggers_total` | counter | | `DriftHandle::triggers` |
//!
//! Names: `haptic_<component>_<noun>` (STYLE.md 2.10), except where a family means what an
//! upstream HAPTIC metric means: then it has upstream's name (marked above; README "Metrics"
//! lists the mapping), so upstream's dashboards and alerts read it.
//!
//! The families from `DeployerStats`, the publisher's `Counters`, `SchedulerStats`,
//! `ValidationStats` and `DriftHandle` are the components' own (`components/<name>/metrics.rs`);
//! [`RETRIES`] is the one family two components report into. A declared source
//! ([`Metrics::declare`]; `runtime::metrics` declares every component's) reports 0 until a
//! handle is registered (gauges and counters alike), so dashboards and alerts see every family
//! on followers too and from the first scrape.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use haptic_journal::{Event, Journal};
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use crate::dispatch::DispatchHandle;
pub use crate::dispatch::input::RenderSource;
pub use counters::{CounterFamily, CounterSource, RETRIES, Series};

/// Upper bounds (seconds) of the commit latency histogram: 0.5 ms to ~4 s, doubling. An fsync
/// on a local SSD sits in the low milliseconds, a slow network volume in the hundreds.
const COMMIT_BUCKETS_SECS: [f64; 14] = [
    0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048,
    4.096,
];

/// Upper bounds (seconds) of the deployment duration histogram: upstream HAPTIC's buckets
/// (10 ms to 10 s, so its dashboards' quantiles read the same) plus 30 s and 60 s, because a
/// deployment here includes the reload poll and is bounded by the 30 s deployment timeout.
const DEPLOYMENT_BUCKETS_SECS: [f64; 11] =
    [0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

/// Outcome of one `haproxy -c` validation (`haptic_validation_total` counts both, `haptic_validation_errors_total` the failures).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum ValidationResult {
    /// `ValidationCompleted`.
    Passed,
    /// `ValidationFailed`.
    Failed,
}

impl ValidationResult {
    /// Every value, in label order.
    pub const ALL: [ValidationResult; 2] = [ValidationResult::Passed, ValidationResult::Failed];

    /// The label value: `passed`, `failed`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            ValidationResult::Passed => "passed",
            ValidationResult::Failed => "failed",
        }
    }
}

impl EncodeLabelValue for RenderSource {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> fmt::Result {
        fmt::Write::write_str(encoder, self.as_str())
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SourceLabels {
    source: RenderSource,
}

/// The controller's metrics. Create one per process with [`Metrics::new`] and share the `Arc`.
///
/// `Send + Sync`; every method takes `&self`.
#[derive(Debug)]
pub struct Metrics {
    /// Built once in [`Metrics::new`], read-only afterwards (encoding takes `&Registry`).
    registry: Registry,
    /// The registered handles, shared with the collector inside `registry`.
    sources: Arc<Sources>,
    renders: Family<SourceLabels, Counter>,
    events_accepted: Counter,
    commit_duration: Histogram,
    deployment_duration: Histogram,
    journal_writable: Gauge,
    refused_inputs: Family<SourceLabels, Counter>,
}

impl Metrics {
    /// A registry with the telemetry's own `haptic_*` families (see the module docs), all at 0
    /// and no handle registered; the components' families come with [`Metrics::declare`] or
    /// [`Metrics::register`].
    #[must_use]
    pub fn new() -> Arc<Metrics> {
        let mut registry = Registry::default();
        let renders = Family::<SourceLabels, Counter>::default();
        let events_accepted = Counter::default();
        let commit_duration = Histogram::new(COMMIT_BUCKETS_SECS);
        let deployment_duration = Histogram::new(DEPLOYMENT_BUCKETS_SECS);
        let journal_writable = Gauge::default();
        journal_writable.set(1);
        let refused_inputs = Family::<SourceLabels, Counter>::default();
        // Create every bounded label value up front, so each series exists from the first scrape.
        for source in RenderSource::ALL {
            drop(renders.get_or_create(&SourceLabels { source }));
            drop(refused_inputs.get_or_create(&SourceLabels { source }));
        }
        registry.register(
            "haptic_journal_writable",
            "1 while journal commits succeed, 0 from a storage fault (full, read-only or failing \
             volume, journal file removed) until a commit succeeds again",
            journal_writable.clone(),
        );
        registry.register(
            "haptic_journal_refused_inputs",
            "Renders not journaled because of a journal storage fault (ingest answered 507; a \
             source render held until the journal takes commits again), by render source",
            refused_inputs.clone(),
        );
        registry.register(
            "haptic_events_published",
            "Events committed to the journal through the dispatcher (upstream HAPTIC's name: \
             events published on its bus)",
            events_accepted.clone(),
        );
        registry.register(
            "haptic_renders",
            "Renders accepted (journaled as TemplateRendered), by render source",
            renders.clone(),
        );
        registry.register_with_unit(
            "haptic_journal_commit_duration",
            "Latency of one journal accept (group commit with fsync), as the caller saw it",
            Unit::Seconds,
            commit_duration.clone(),
        );
        registry.register_with_unit(
            "haptic_deployment_duration",
            "Duration of one deployment run, start to DeploymentCompleted (upstream HAPTIC's name)",
            Unit::Seconds,
            deployment_duration.clone(),
        );
        let sources = Arc::new(Sources::default());
        registry.register_collector(Box::new(SourcesCollector(sources.clone())));
        Arc::new(Metrics {
            registry,
            sources,
            renders,
            events_accepted,
            commit_duration,
            deployment_duration,
            journal_writable,
            refused_inputs,
        })
    }

    /// Sets `haptic_journal_writable` (1 writable, 0 a storage fault).
    pub fn set_journal_writable(&self, writable: bool) {
        self.journal_writable.set(i64::from(writable));
    }

    /// Counts one render from `source` not journaled for a storage fault
    /// (`haptic_journal_refused_inputs_total{source}`).
    pub fn input_refused(&self, source: RenderSource) {
        self.refused_inputs
            .get_or_create(&SourceLabels { source })
            .inc();
    }

    /// Counts `n` events committed (`haptic_events_published_total`).
    pub fn events_accepted(&self, n: u64) {
        self.events_accepted.inc_by(n);
    }

    /// Counts one render accepted from `source` (`haptic_renders_total{source}`).
    pub fn render_accepted(&self, source: RenderSource) {
        self.renders.get_or_create(&SourceLabels { source }).inc();
    }

    /// Records one journal commit's latency, measured by the caller around
    /// `DispatchHandle::accept` / `Journal::accept` (`haptic_journal_commit_duration_seconds`).
    /// The journal's own `CommitStats` carry counts only, no latency.
    pub fn observe_commit(&self, duration: Duration) {
        self.commit_duration.observe(duration.as_secs_f64());
    }

    /// Folds one journal event into the fleet gauges (`haptic_managed_pods`,
    /// `haptic_fleet_pinned`, `haptic_pods_not_on_spec_checksum`); a live (not `replayed`)
    /// `DeploymentCompleted` is observed in `haptic_deployment_duration_seconds`.
    pub fn observe_event(&self, event: &Event, replayed: bool) {
        if let Event::DeploymentCompleted { duration_ms, .. } = event
            && !replayed
        {
            self.deployment_duration
                .observe(Duration::from_millis(*duration_ms).as_secs_f64());
        }
        lock(&self.sources.fleet).apply(event);
    }

    /// Records this replica's leadership now (`haptic_leader_election_transitions_total`,
    /// `haptic_leader_election_time_as_leader_seconds_total`).
    pub fn leadership(&self, leading: bool) {
        lock(&self.sources.leader_clock).set(leading, std::time::Instant::now());
    }

    /// Sets `haptic_validator_version_mismatch_pods`.
    pub fn set_version_mismatch_pods(&self, pods: u64) {
        self.sources
            .version_mismatch_pods
            .store(pods, std::sync::atomic::Ordering::Relaxed);
    }

    /// Reads term, queue depths and commit counters from `journal` at each scrape (one read
    /// transaction per scrape; never a write). Replaces a journal registered before (after a
    /// reopen); its commit counters are carried over.
    pub fn register_journal(&self, journal: Arc<Journal>) {
        lock(&self.sources.journal).replace(journal);
    }

    /// The journal registered with [`Metrics::register_journal`] (`None` before it opened).
    #[must_use]
    pub fn journal(&self) -> Option<Arc<Journal>> {
        lock(&self.sources.journal).current()
    }

    /// Reads `DispatchStats` and the leadership (`haptic_leader`) from `handle` at each scrape.
    /// Replaces a dispatcher registered before; a handle over another journal is taken as a
    /// new dispatcher and the old one's counters are carried over.
    pub fn register_dispatch(&self, handle: DispatchHandle) {
        let leadership = handle.leadership();
        lock(&self.sources.dispatch).replace(DispatchSource { handle, leadership });
    }

    /// Declares the families of the counter source `T` (a component's): exported at 0 until
    /// a handle is registered. Declaring twice is declaring once; families are exported in
    /// declaration order.
    pub fn declare<T: CounterSource>(&self) {
        let _ = counters::slot_of::<T>(&mut lock(&self.sources.components));
    }

    /// Reads `source`'s counters at each scrape (declaring its families when not declared
    /// yet). Replaces the source of the same type registered before (an earlier term's
    /// component): its counters are carried over; registering the same handle again changes
    /// nothing.
    pub fn register<T: CounterSource>(&self, source: T) {
        counters::slot_of::<T>(&mut lock(&self.sources.components)).replace(source);
    }

    /// The OpenMetrics text exposition of every family, ending in `# EOF`.
    ///
    /// Reads the registered journal (a read transaction): call it from a blocking context
    /// (`spawn_blocking`) in async code.
    #[must_use]
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail, and our collector returns errors only from the
        // writer, so an error here is impossible; keep whatever was written if it ever happens.
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            tracing::error!("metrics encoding failed");
        }
        out
    }
}

mod counters;
mod sources;

use sources::{DispatchSource, Sources, SourcesCollector, lock};
