//! `deployer`: the stateless executor. Deploys one scheduled render to its endpoints in
//! parallel through each pod's Dataplane API, journaling every per-endpoint result before the
//! events that depend on it.
//!
//! ```text
//!  scheduler shell ── run(inflight WorkId, DeployRequest, cancel) ──► Deployer
//!     DeploymentStarted ──► journal+dispatch
//!     per endpoint (at most max_parallel Dataplane requests in flight, own timeout):
//!        sync_endpoint (sync.rs, exec.rs): delete left-over transactions (first sync of the
//!          endpoint this term, or one recorded); read what the pod reports (listings, the
//!          render's files, raw config, runtime views of files not known loaded)
//!          ─► decide::plan(running, render, record, policy) ─► Vec<Operation>
//!             (structure.rs: the configuration compared section by section, object by object;
//!             compare.rs: files on disk and loaded)
//!          ─► journal the file intents ─► execute: files (certificates and CA files at
//!             runtime, others skip_reload), then one of: POST raw?version=N (raw_initial,
//!             raw_unmodelled, raw_threshold, raw_resync) | PUT servers at runtime (runtime,
//!             no reload) | one transaction (fine_grained, no_runtime_api: journaled open and
//!             committing, one reload at commit, aborted on every failure) | a reload; poll
//!             Reload-ID (bounded), delete unreferenced files
//!          ─► retry::next_step: plan again (409/406, an unconfirmed reload, a file not yet
//!             loaded), delete transactions (429), fall back to one raw push (raw_fallback),
//!             or fail
//!        ──► one batch: endpoint_applied + endpoint_files + endpoint_transaction state
//!            + InstanceDeployed/InstanceDeploymentFailed + ConfigAppliedToPod (every synced
//!            endpoint, no-ops included)
//!     one batch: DeploymentCompleted + DeployedConfigPublishRequest (when >= 1 pod took it)
//!                + ack of the deploy-inflight slot (J3)
//! ```
//!
//! What differs on a pod is decided by the pure [`decide`] from what the pod reports (content
//! for maps and general files, metadata for certificates and CA files, content for the
//! configuration), never from which journal wrote it: a restarted leader, a newly elected one
//! with an empty journal and a rebuilt journal find a pod that runs the render equal and leave
//! it alone (no write; a reload only for general files no record proves loaded). Whether what
//! is on disk is loaded comes from the journal's `endpoint_files` record, else the pod's
//! runtime views ([`decide`], module doc; journal/DESIGN.md "Pod truth").
//!
//! # Inputs
//! A journaled in-flight deployment (its [`WorkId`] and [`DeployRequest`]) and a cancel token;
//! the render's blobs and the `endpoint_applied` rows from the journal; what each pod reports
//! through its Dataplane API.
//!
//! # Effects
//! Dataplane API calls (storage reads and writes, raw configuration, reload polling), the
//! [`Operation`]s [`decide`] lists for each pod; journal batches through the dispatcher.
//!
//! # Journal records
//! - `deployment.started`, once per run, before any Dataplane call;
//! - per endpoint, before its first write: `endpoint_files` with the file intents; around a
//!   transaction: `endpoint_transaction` (open before its first change, committing before the
//!   commit);
//! - per endpoint, one batch after its sync returned: tables `endpoint_files` and
//!   `endpoint_transaction` as the sync ended (kept as journaled when it timed out), table
//!   `endpoint_applied` (put on success: render, configuration version, reload id; removed on
//!   failure) with `instance.deployed` or
//!   `instance.deployment.failed`, and `config.applied.to.pod` for every synced endpoint, a
//!   no-op included (`is_drift_check` set on drift runs; `sync` says what was done: its
//!   `sync_mode` (how the configuration was applied), `fallback_used` (only for
//!   `raw_fallback`), `operation_counts` (backends, servers and frontends from the structural
//!   diff, files from the writes; zero for a no-op); `error` is set on a failure, with no mode;
//!   `rejected` when the failure is [`sync::SyncError::PushRejected`] (a 400/422 on the
//!   configuration push that persisted after the pod's files were synced again) or
//!   [`sync::SyncError::FileRejected`] (a certificate the API cannot parse), the failures
//!   `instance.deployment.failed` reports not `retryable`, which the scheduler quarantines). A resumed deployment
//!   whose writes landed before a crash therefore still reports each pod's new state; the
//!   publisher writes a pod's status only when it differs from what that pod runs;
//! - after the last endpoint, one batch: `deployment.completed`,
//!   `deployed.config.publish.request` (when at least one endpoint succeeded) and the ack of
//!   queue `deploy-inflight` (J3).
//!
//! # Failpoints
//! `deployer::before_storage_upload`, `deployer::after_storage_write` (a file on disk, not
//! loaded), `deployer::after_transaction_started`, `deployer::after_transaction_change`,
//! `deployer::before_transaction_commit` (a transaction open on the pod),
//! `deployer::after_raw_push`, `deployer::after_reload`, `deployer::after_endpoint_applied`
//! (one endpoint journaled, deployment not completed), `deployer::before_completed`.
//!
//! # Metrics
//! [`DeployerStats`]: deployments (and those with a failed endpoint), endpoint
//! successes/failures, reloads, drift detections, deposed runs, successful syncs by
//! [`SyncMode`] (`haptic_endpoint_sync_modes_total`).

pub mod compare;
pub mod decide;
mod exec;
pub mod ledger;
mod metrics;
pub mod preview;
pub mod retry;
pub mod structure;
#[cfg(test)]
mod structure_tests;
pub mod sync;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use futures::stream::FuturesUnordered;
use haptic_journal::{
    Batch, DeployRequest, DeploymentCause, EndpointApplied, EndpointFiles, EndpointTransaction,
    Event, Journal, Op, Queue, SyncMetadata, SyncMode, Term, UnixMillis, WorkId, WorkKey,
};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::core::render::JournaledRender;
use crate::dataplane::{BasicAuth, Dataplane, Endpoint as DpEndpoint};
use crate::dispatch::render::{RenderLoadError, RenderStore};
use crate::dispatch::{DispatchError, DispatchHandle};

pub use decide::{Operation, SyncPolicy};
pub use ledger::PodLedger;
pub use preview::{PodPlan, plan_endpoint};
pub use sync::{
    NoPodJournal, PodJournal, PodSync, SyncError, SyncLimits, SyncOutcome, SyncReport,
    sync_endpoint,
};

/// Longest time between two trims of the whole history ([`Deployer::history_trim_due`]).
const HISTORY_TRIM_INTERVAL: Duration = Duration::from_secs(3600);

/// Component identifier (logs, metrics, health).
pub const COMPONENT: &str = "deployer";

use crate::core::guard::{DeployerNotice, LeaseGuard, NoticeHook};

/// Deployer settings.
#[derive(Clone, Debug)]
pub struct DeployerSettings {
    /// Dataplane API requests in flight across one deployment; 0 = unlimited. Default: 0.
    pub max_parallel: usize,
    /// Bound of one endpoint's whole sync. Default: 25 s (below the 30 s deployment timeout).
    pub endpoint_timeout: Duration,
    /// A configuration change of more operations than this goes by one raw push
    /// (`raw_threshold`) instead of a transaction; 0 = never by count (`--raw-push-threshold`).
    /// Default: 100 (upstream's default).
    pub raw_push_threshold: u32,
    /// Bounds of one sync.
    pub limits: SyncLimits,
    /// Dataplane credentials for every endpoint, if any, when [`Self::credentials_source`] is
    /// unset or holds none yet. Default: none.
    pub credentials: Option<BasicAuth>,
    /// The watched credentials Secret ([`crate::k8s::credentials`]): read at each endpoint sync,
    /// so a rotated password is used from the next sync on. Default: none.
    pub credentials_source: Option<crate::k8s::credentials::CredentialsReceiver>,
    /// The validator's `haproxy -v` first line; each pod's HAProxy version (read once per
    /// endpoint through `/v3/services/haproxy/runtime/info`) is compared with it by
    /// major.minor ([`Deployer::version_report`]). Default: none (no comparison).
    pub validator_version: Option<String>,
    /// Retention of the per-pod deployment history: one [`haptic_journal::SyncRecord`] per
    /// sync, appended in the batch that reports the sync (`--history-max-entries`,
    /// `--history-max-age`). Default: 200 records, 14 days.
    pub history: haptic_journal::HistoryRetention,
}

impl Default for DeployerSettings {
    fn default() -> Self {
        DeployerSettings {
            max_parallel: 0,
            endpoint_timeout: Duration::from_secs(25),
            raw_push_threshold: 100,
            limits: SyncLimits::default(),
            credentials: None,
            credentials_source: None,
            validator_version: None,
            history: haptic_journal::HistoryRetention::default(),
        }
    }
}

impl DeployerSettings {
    /// The credentials to use now: the watched source's newest, else [`Self::credentials`].
    #[must_use]
    pub fn current_credentials(&self) -> Option<BasicAuth> {
        self.credentials_source
            .as_ref()
            .and_then(|rx| rx.borrow().as_ref().map(basic_auth))
            .or_else(|| self.credentials.clone())
    }
}

/// The Dataplane client's basic auth for credentials read from the Secret.
#[must_use]
pub fn basic_auth(c: &crate::k8s::discovery::Credentials) -> BasicAuth {
    BasicAuth {
        username: c.username.clone(),
        password: c.password.clone(),
    }
}

/// Pods whose HAProxy release line differs from the validator's (issue 16), as of the last
/// completed deployment. Shape: `mismatched` sorted by pod, each with the version the pod
/// reported.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VersionReport {
    /// The validator's `haproxy -v` first line, when known.
    pub validator: Option<String>,
    /// Pods of the last completed deployment whose major.minor differs from the validator's.
    pub mismatched: Vec<(haptic_journal::PodRef, String)>,
}

/// Counters.
#[derive(Debug, Default)]
pub struct DeployerStats {
    /// Deployments run to completion.
    pub deployments: AtomicU64,
    /// Deployments run to completion with at least one failed endpoint.
    pub failed_deployments: AtomicU64,
    /// Endpoints synced successfully.
    pub endpoint_successes: AtomicU64,
    /// Endpoints failed.
    pub endpoint_failures: AtomicU64,
    /// Reloads triggered.
    pub reloads: AtomicU64,
    /// Drift checks that found a difference (`DriftDetected`).
    pub drift_detected: AtomicU64,
    /// Runs stopped because the Lease was no longer valid.
    pub deposed: AtomicU64,
    /// Successful endpoint syncs by [`SyncMode`], in [`SyncMode::ALL`] order.
    pub modes: [AtomicU64; 8],
}

impl DeployerStats {
    /// Counts one successful sync in `mode`.
    pub fn count_mode(&self, mode: SyncMode) {
        if let Some(i) = SyncMode::ALL.iter().position(|m| *m == mode) {
            self.modes[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Successful syncs in `mode` so far.
    #[must_use]
    pub fn mode(&self, mode: SyncMode) -> u64 {
        SyncMode::ALL
            .iter()
            .position(|m| *m == mode)
            .map_or(0, |i| self.modes[i].load(Ordering::Relaxed))
    }
}

/// How a run ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunOutcome {
    /// Completed and journaled (`DeploymentCompleted`, in-flight slot acked).
    Completed {
        /// Endpoints that succeeded.
        succeeded: u32,
        /// Endpoints that failed.
        failed: u32,
    },
    /// The Lease was lost before a push: stopped at once, the in-flight slot stays.
    Deposed,
    /// Cancelled through the token (timeout, drain, lost leadership): per-endpoint results so far
    /// are journaled, the in-flight slot is the caller's to clear or keep.
    Cancelled {
        /// Endpoints that succeeded before the cancel.
        succeeded: u32,
        /// Endpoints that failed before the cancel.
        failed: u32,
    },
}

/// The executor. Cheap to share (`Arc`).
pub struct Deployer {
    dispatch: DispatchHandle,
    dataplane: Dataplane,
    settings: DeployerSettings,
    lease: Arc<dyn LeaseGuard>,
    /// Replaceable after start ([`Deployer::set_notice_hook`]); read once per notice (a
    /// drifted pod, a pod without a runtime API).
    notice_hook: std::sync::RwLock<Option<NoticeHook>>,
    /// Per endpoint URL, the leader term in which its transactions were last listed and
    /// deleted: the first sync of an endpoint in a term does it (a killed predecessor's
    /// transactions are not in this journal).
    cleaned: Mutex<HashMap<String, Term>>,
    /// When this deployer last trimmed the whole history (`None`: not yet).
    history_trimmed: Mutex<Option<Instant>>,
    /// `/v3/info` per endpoint URL, read once.
    info: Mutex<HashMap<String, crate::dataplane::Info>>,
    /// The HAProxy version each endpoint URL reported (`None`: it reported none), read once.
    versions: Mutex<HashMap<String, Option<String>>>,
    /// The version comparison of the last completed deployment.
    version_report: tokio::sync::watch::Sender<VersionReport>,
    /// Counters.
    pub stats: DeployerStats,
    /// Stall check (a run longer than [`crate::core::health::STALL_AFTER`] is unhealthy).
    pub health: crate::core::health::Health,
}

/// Marks the deployer idle again when a run ends, also when its future is dropped.
struct BusyGuard<'a>(&'a crate::core::health::Health);

impl Drop for BusyGuard<'_> {
    fn drop(&mut self) {
        self.0.end();
    }
}

debug_non_exhaustive!(Deployer, |x| "settings" => x.settings);

/// How [`Deployer::sync_one`] ended: the result, the pod-truth record (`None` after a timeout),
/// whether the pod's transactions were cleaned, a failed sync's plan ([`SyncOutcome::attempted`]).
type SyncEnd = (
    Result<SyncReport, SyncError>,
    Option<PodLedger>,
    bool,
    Option<(SyncMode, haptic_journal::OperationCounts)>,
);

struct EndpointResult {
    endpoint: haptic_journal::Endpoint,
    result: Result<SyncReport, SyncError>,
    /// The pod-truth record as the sync ended; `None` when it did not end (a timeout): what it
    /// journaled before its writes stays (the intents are the conservative record).
    ledger: Option<PodLedger>,
    /// Whether the pod's transactions were listed and deleted.
    cleaned: bool,
    /// A failed sync's planned mode and operation counts ([`SyncOutcome::attempted`]).
    attempted: Option<(SyncMode, haptic_journal::OperationCounts)>,
    duration: Duration,
}

/// The deployer's [`PodJournal`]: one batch through the dispatcher per commit.
struct DispatchPodJournal<'a>(&'a DispatchHandle);

impl PodJournal for DispatchPodJournal<'_> {
    fn commit(&self, ops: Vec<Op>) -> futures::future::BoxFuture<'_, Result<(), DispatchError>> {
        Box::pin(async move {
            let mut b = Batch::new();
            for op in ops {
                b.push(op);
            }
            self.0.accept(b).await.map(|_| ())
        })
    }
}

impl Deployer {
    /// A deployer publishing through `dispatch`.
    #[must_use]
    pub fn new(
        dispatch: DispatchHandle,
        dataplane: Dataplane,
        settings: DeployerSettings,
        lease: Arc<dyn LeaseGuard>,
        notice_hook: Option<NoticeHook>,
    ) -> Self {
        Deployer {
            dispatch,
            dataplane,
            settings,
            lease,
            notice_hook: std::sync::RwLock::new(notice_hook),
            cleaned: Mutex::new(HashMap::new()),
            history_trimmed: Mutex::new(None),
            info: Mutex::new(HashMap::new()),
            versions: Mutex::new(HashMap::new()),
            version_report: tokio::sync::watch::Sender::new(VersionReport::default()),
            stats: DeployerStats::default(),
            health: crate::core::health::Health::default(),
        }
    }

    /// Replaces the [`NoticeHook`] (e.g. once the runtime config and a kube client are known);
    /// takes effect from the next notice.
    pub fn set_notice_hook(&self, hook: Option<NoticeHook>) {
        *self
            .notice_hook
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = hook;
    }

    /// Calls the notice hook, if any.
    fn notice(&self, pod: &haptic_journal::PodRef, notice: &DeployerNotice) {
        let hook = self
            .notice_hook
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        if let Some(h) = hook {
            h(pod, notice);
        }
    }

    fn journal(&self) -> &Arc<Journal> {
        self.dispatch.journal()
    }

    /// The version comparison, updated after each completed deployment (changes only).
    #[must_use]
    pub fn version_report(&self) -> tokio::sync::watch::Receiver<VersionReport> {
        self.version_report.subscribe()
    }

    /// Compares the versions of `endpoints` with the validator's and publishes a changed
    /// [`VersionReport`].
    fn report_versions(&self, endpoints: &[haptic_journal::Endpoint]) {
        use crate::core::version::HaproxyVersion;
        let validator = self.settings.validator_version.clone();
        let Some(want) = validator.as_deref().and_then(HaproxyVersion::parse) else {
            return;
        };
        let mut mismatched: Vec<(haptic_journal::PodRef, String)> = {
            let versions = self
                .versions
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            endpoints
                .iter()
                .filter_map(|ep| {
                    let v = versions.get(ep.url.as_str())?.as_ref()?;
                    (HaproxyVersion::parse(v)? != want).then(|| (ep.pod.clone(), v.clone()))
                })
                .collect()
        };
        mismatched.sort();
        let report = VersionReport {
            validator,
            mismatched,
        };
        self.version_report.send_if_modified(|cur| {
            if *cur == report {
                false
            } else {
                *cur = report;
                true
            }
        });
    }

    /// Runs one deployment to the end (or until `cancel`).
    ///
    /// # Errors
    /// [`DispatchError`] when journaling fails (on `Storage`: stop and reopen).
    ///
    /// # Cancel safety
    /// Cancel through `cancel` (or drop the future): per-endpoint results already journaled
    /// stay; the in-flight slot stays until the caller journals the cancel.
    pub async fn run(
        &self,
        inflight: WorkId,
        request: DeployRequest,
        cancel: CancellationToken,
    ) -> Result<RunOutcome, DispatchError> {
        self.health.begin(UnixMillis::now().0);
        let _busy = BusyGuard(&self.health);
        let started = Instant::now();
        let corr = request.correlation.clone();
        if request.endpoints.is_empty() {
            let mut b = Batch::new();
            b.event(completed(&request, 0, 0, 0, started, &BTreeMap::new(), 0));
            b.ack(Queue::DeployInflight, WorkKey::Slot, inflight);
            self.dispatch.accept(b).await?;
            return Ok(RunOutcome::Completed {
                succeeded: 0,
                failed: 0,
            });
        }
        self.dispatch
            .publish(Event::DeploymentStarted {
                correlation: corr.clone(),
                deployment: request.deployment.clone(),
                endpoints: request.endpoints.clone(),
            })
            .await?;
        let loaded = self.load(&request).await?;
        let (records, term, fleet) = self.pod_records().await?;
        let gone = self.forget_gone(&records, &request.endpoints, &fleet);
        let permits = Arc::new(Semaphore::new(if self.settings.max_parallel == 0 {
            Semaphore::MAX_PERMITS
        } else {
            self.settings.max_parallel
        }));
        let drift = request.reason.cause == DeploymentCause::DriftPrevention;
        let mut futs = FuturesUnordered::new();
        for ep in &request.endpoints {
            let loaded = loaded.clone();
            let permits = permits.clone();
            let (files, txn) = records.get(ep.url.as_str()).cloned().unwrap_or_default();
            let ledger = PodLedger::new(&ep.url, &ep.pod, files, txn);
            let clean = self.needs_cleaning(ep.url.as_str(), term);
            futs.push(async move {
                let t = Instant::now();
                let (result, ledger, cleaned, attempted) = match &loaded {
                    Err(msg) => (
                        Err(SyncError::Dataplane {
                            step: "load render",
                            source: crate::dataplane::DataplaneError::NotFound {
                                path: msg.clone(),
                            },
                            conflict_retries: 0,
                        }),
                        Some(ledger),
                        false,
                        None,
                    ),
                    Ok(render) => {
                        let pod = PodSync {
                            ledger,
                            clean_transactions: clean,
                        };
                        self.sync_one(ep, render, pod, &permits).await
                    }
                };
                EndpointResult {
                    endpoint: ep.clone(),
                    result,
                    ledger,
                    cleaned,
                    attempted,
                    duration: t.elapsed(),
                }
            });
        }
        let (mut ok, mut failed, mut reloads, mut ops_total) = (0u32, 0u32, 0u32, 0u32);
        let mut breakdown: BTreeMap<String, u32> = BTreeMap::new();
        let mut any_applied = false;
        loop {
            let next = tokio::select! {
                () = cancel.cancelled() => {
                    tracing::info!(deployment = %request.deployment, "deployment cancelled");
                    return Ok(RunOutcome::Cancelled { succeeded: ok, failed });
                }
                n = futs.next() => n,
            };
            let Some(mut r) = next else { break };
            if r.cleaned {
                lock(&self.cleaned).insert(r.endpoint.url.to_string(), term);
            }
            if let Err(SyncError::Journal(_)) = &r.result {
                // The record could not be journaled: nothing more is written (J1); stop and let
                // the runtime reopen the journal.
                if let Err(SyncError::Journal(e)) =
                    std::mem::replace(&mut r.result, Err(SyncError::LeaseLost))
                {
                    return Err(e);
                }
            }
            if matches!(r.result, Err(SyncError::LeaseLost)) {
                tracing::warn!(deployment = %request.deployment, "lease lost: deployment stopped");
                self.stats.deposed.fetch_add(1, Ordering::Relaxed);
                return Ok(RunOutcome::Deposed);
            }
            let mut b = Batch::new();
            let mut sync = SyncMetadata {
                sync_duration_ms: r.duration.as_millis() as u64,
                ..SyncMetadata::default()
            };
            match &r.result {
                Ok(rep) => {
                    ok += 1;
                    any_applied = true;
                    self.stats
                        .endpoint_successes
                        .fetch_add(1, Ordering::Relaxed);
                    if rep.reload_triggered {
                        reloads += 1;
                        self.stats.reloads.fetch_add(1, Ordering::Relaxed);
                    }
                    ops_total += rep.ops.total_api_operations;
                    add_breakdown(&mut breakdown, &rep.ops);
                    sync.reload_triggered = rep.reload_triggered;
                    sync.reload_id = rep.reload_id.clone();
                    sync.version_conflict_retries = rep.conflict_retries;
                    sync.operation_counts = rep.ops;
                    sync.fallback_used = rep.fallback_used;
                    sync.sync_mode = Some(rep.mode);
                    self.stats.count_mode(rep.mode);
                    if drift && rep.changed {
                        self.stats.drift_detected.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(
                            pod = %r.endpoint.pod.name,
                            differed = ?rep.differed,
                            "drift detected"
                        );
                        self.notice(
                            &r.endpoint.pod,
                            &DeployerNotice::Drift(rep.differed.clone()),
                        );
                    }
                    if rep.mode == SyncMode::NoRuntimeApi {
                        tracing::warn!(
                            pod = %r.endpoint.pod.name,
                            fix = "add `stats socket <path> mode 600 level admin` to the global section",
                            "server changes reloaded: the pod's configuration has no admin stats socket"
                        );
                        self.notice(&r.endpoint.pod, &DeployerNotice::NoRuntimeApi);
                    }
                    b.push(Op::PutEndpointApplied(EndpointApplied {
                        endpoint: r.endpoint.url.clone(),
                        pod: r.endpoint.pod.clone(),
                        render: request.render,
                        config_version: rep.version_after,
                        reload_id: rep.reload_id.clone(),
                        applied_at: UnixMillis::now(),
                    }));
                    b.event(Event::InstanceDeployed {
                        correlation: corr.clone(),
                        deployment: request.deployment.clone(),
                        endpoint: r.endpoint.clone(),
                        duration_ms: sync.sync_duration_ms,
                        reload_required: rep.reload_triggered,
                    });
                }
                Err(e) => {
                    failed += 1;
                    self.stats.endpoint_failures.fetch_add(1, Ordering::Relaxed);
                    let text = error_text(e);
                    tracing::warn!(pod = %r.endpoint.pod.name, error = %text, "endpoint deployment failed");
                    sync.version_conflict_retries = e.conflict_retries();
                    sync.error = Some(text.clone());
                    sync.rejected = e.rejected();
                    b.push(Op::RemoveEndpointApplied(r.endpoint.url.clone()));
                    b.event(Event::InstanceDeploymentFailed {
                        correlation: corr.clone(),
                        deployment: request.deployment.clone(),
                        endpoint: r.endpoint.clone(),
                        error: text,
                        retryable: e.retryable(),
                    });
                }
            }
            // The pod-truth record as the sync ended (a timed-out sync keeps what it journaled
            // before its writes).
            if let Some(ledger) = r.ledger.take() {
                b.push(Op::PutEndpointFiles(ledger.files));
                b.push(match ledger.transaction {
                    Some(t) => Op::PutEndpointTransaction(t),
                    None => Op::RemoveEndpointTransaction(r.endpoint.url.clone()),
                });
            }
            // A drift check that found nothing to change is not history (one a minute per pod
            // would push the deployments out of a pod's kept records within hours); a drift
            // repair is.
            let idle_drift_check = drift && matches!(&r.result, Ok(rep) if !rep.changed);
            if !idle_drift_check {
                let mut record = history_record(&r.endpoint, &request, term, &sync);
                if let Err(SyncError::ReloadUnknown { reload_id, .. }) = &r.result {
                    // The reload the failed sync asked for, which it could not confirm.
                    record.reload_id = Some(reload_id.clone());
                }
                if let Some((mode, ops)) = r.attempted {
                    // What the failed sync had planned: the history says how it tried.
                    record.mode = Some(mode);
                    record.operations = ops;
                }
                b.append_history(record, self.settings.history);
            }
            // Every synced endpoint is reported, a no-op included: a resumed deployment whose
            // writes landed before a crash still reports each pod's new state (the publisher
            // writes a pod's status only when it differs from what the pod runs).
            b.event(Event::ConfigAppliedToPod {
                correlation: corr.clone(),
                runtime_config: request.runtime_config.clone(),
                pod: r.endpoint.pod.clone(),
                checksum: request.render,
                is_drift_check: drift,
                sync,
            });
            self.dispatch.accept(b).await?;
            haptic_journal::crash_point!("deployer::after_endpoint_applied");
        }
        haptic_journal::crash_point!("deployer::before_completed");
        let mut b = Batch::new();
        let trim = self.history_trim_due();
        if trim {
            // The history of pods that left gets no append, so no trim on append: trimmed here,
            // at most hourly (the trim reads the whole table in the writer's transaction).
            b.trim_history(self.settings.history, UnixMillis::now());
        }
        for url in gone {
            b.push(Op::RemoveEndpointTransaction(url.clone()));
            b.push(Op::RemoveEndpointFiles(url));
        }
        b.event(completed(
            &request, ok, failed, reloads, started, &breakdown, ops_total,
        ));
        if any_applied {
            b.event(Event::DeployedConfigPublishRequest {
                correlation: corr.clone(),
                deployment: request.deployment.clone(),
                render: request.render,
                runtime_config: request.runtime_config.clone(),
            });
        }
        b.ack(Queue::DeployInflight, WorkKey::Slot, inflight);
        self.dispatch.accept(b).await?;
        if trim {
            *lock(&self.history_trimmed) = Some(Instant::now());
        }
        tracing::info!(
            deployment = %request.deployment,
            render = %request.render,
            succeeded = ok,
            failed,
            reloads,
            duration_ms = started.elapsed().as_millis() as u64,
            "deployment completed"
        );
        self.report_versions(&request.endpoints);
        self.stats.deployments.fetch_add(1, Ordering::Relaxed);
        if failed > 0 {
            self.stats
                .failed_deployments
                .fetch_add(1, Ordering::Relaxed);
        }
        Ok(RunOutcome::Completed {
            succeeded: ok,
            failed,
        })
    }

    /// The endpoints with a pod-truth record that are neither targeted by this deployment nor
    /// among the scheduler's admitted endpoints (`fleet`, its checkpoint, committed with the
    /// request): the pod behind the URL left the fleet (deleted, or replaced at another
    /// address). Their records are removed with the deployment's completion: a transaction on a
    /// deleted pod died with it, and should the URL come back, its transactions are listed and
    /// deleted before the first write again (it is forgotten in [`Self::cleaned`]), and its
    /// files are compared anew.
    fn forget_gone(
        &self,
        records: &PodRecords,
        targets: &[haptic_journal::Endpoint],
        fleet: &[haptic_journal::Endpoint],
    ) -> Vec<haptic_journal::EndpointUrl> {
        let targeted: std::collections::HashSet<&str> = targets
            .iter()
            .chain(fleet)
            .map(|e| e.url.as_str())
            .collect();
        let mut gone = Vec::new();
        let mut cleaned = lock(&self.cleaned);
        for (url, (files, txn)) in records {
            if targeted.contains(url.as_str()) {
                continue;
            }
            cleaned.remove(url);
            let endpoint = txn
                .as_ref()
                .map(|t| t.endpoint.clone())
                .or_else(|| files.as_ref().map(|f| f.endpoint.clone()));
            gone.extend(endpoint);
        }
        gone.sort();
        gone
    }

    /// Whether the completing deployment trims the whole history: at the first completion of
    /// this process, then at most hourly (marked done once its batch is accepted).
    fn history_trim_due(&self) -> bool {
        lock(&self.history_trimmed).is_none_or(|t| t.elapsed() >= HISTORY_TRIM_INTERVAL)
    }

    /// Whether the endpoint's transactions must be listed and deleted before its next write:
    /// not yet done in leader term `term` (a killed predecessor's are in no journal of ours).
    fn needs_cleaning(&self, url: &str, term: Term) -> bool {
        lock(&self.cleaned).get(url) != Some(&term)
    }

    async fn sync_one(
        &self,
        ep: &haptic_journal::Endpoint,
        render: &JournaledRender,
        pod: PodSync,
        permits: &Arc<Semaphore>,
    ) -> SyncEnd {
        let Ok(url) = reqwest::Url::parse(ep.url.as_str()) else {
            return (
                Err(SyncError::Dataplane {
                    step: "endpoint url",
                    source: crate::dataplane::DataplaneError::NotFound {
                        path: ep.url.to_string(),
                    },
                    conflict_retries: 0,
                }),
                Some(pod.ledger),
                false,
                None,
            );
        };
        let client = self
            .dataplane
            .client(DpEndpoint::new(url, self.settings.current_credentials()));
        let timeout = self.settings.endpoint_timeout;
        let journal = DispatchPodJournal(&self.dispatch);
        let work = async {
            let cached = lock(&self.info).contains_key(ep.url.as_str());
            if !cached {
                let info = {
                    let _p = permits.acquire().await;
                    client.info().await
                };
                match info {
                    Ok(info) => {
                        lock(&self.info).insert(ep.url.to_string(), info);
                    }
                    Err(source) => {
                        return SyncOutcome {
                            result: Err(SyncError::Dataplane {
                                step: "read info",
                                source,
                                conflict_retries: 0,
                            }),
                            ledger: pod.ledger,
                            transactions_cleaned: false,
                            attempted: None,
                        };
                    }
                }
            }
            let version_known = lock(&self.versions).contains_key(ep.url.as_str());
            if !version_known && self.settings.validator_version.is_some() {
                // Best effort: the comparison is a warning, never a reason to fail a sync. A
                // failed read is tried again at the next sync; an API without the endpoint
                // (404) counts as "reports no version".
                let read = {
                    let _p = permits.acquire().await;
                    client.haproxy_version().await
                };
                let known = match read {
                    Ok(v) => Some(v),
                    Err(crate::dataplane::DataplaneError::NotFound { .. }) => Some(None),
                    Err(_) => None,
                };
                if let Some(v) = known {
                    lock(&self.versions).insert(ep.url.to_string(), v);
                }
            }
            sync_endpoint(
                &client,
                render,
                pod,
                &journal,
                permits,
                self.lease.as_ref(),
                &self.settings.limits,
                &SyncPolicy {
                    raw_push_threshold: self.settings.raw_push_threshold,
                },
            )
            .await
        };
        match tokio::time::timeout(timeout, work).await {
            Ok(o) => (
                o.result,
                Some(o.ledger),
                o.transactions_cleaned,
                o.attempted,
            ),
            Err(_) => (Err(SyncError::Timeout(timeout)), None, false, None),
        }
    }

    /// Loads the render's bytes through the render store ([`RenderStore`], a blocking read
    /// off the async task); `Ok(Err(text))` when the journal no longer holds the render or one
    /// of its blobs (the text names the render, the file and the blob).
    ///
    /// # Errors
    /// [`DispatchError::Read`] when the journal cannot be read, [`DispatchError::Join`] when
    /// the blocking read did not finish.
    async fn load(
        &self,
        request: &DeployRequest,
    ) -> Result<Result<JournaledRender, String>, DispatchError> {
        match RenderStore::new(self.journal().clone())
            .load(request.render)
            .await
        {
            Ok(render) => Ok(Ok(render)),
            Err(
                e @ (RenderLoadError::NotJournaled { .. } | RenderLoadError::MissingBlob { .. }),
            ) => Ok(Err(e.to_string())),
            Err(RenderLoadError::Read { source, .. }) => Err(DispatchError::Read(*source)),
            Err(RenderLoadError::Join { source, .. }) => Err(DispatchError::Join(source)),
        }
    }

    /// Per endpoint URL, the journal's pod-truth records (stored files, open transaction),
    /// the current leader term, and the scheduler's admitted endpoints (empty before its first
    /// checkpoint).
    async fn pod_records(
        &self,
    ) -> Result<(PodRecords, Term, Vec<haptic_journal::Endpoint>), DispatchError> {
        let j = self.journal().clone();
        tokio::task::spawn_blocking(move || {
            let mut out: PodRecords = HashMap::new();
            for f in j.endpoints_files().map_err(DispatchError::Read)? {
                let url = f.endpoint.to_string();
                out.entry(url).or_default().0 = Some(f);
            }
            for t in j.endpoint_transactions().map_err(DispatchError::Read)? {
                let url = t.endpoint.to_string();
                out.entry(url).or_default().1 = Some(t);
            }
            let term = j.term().map_err(DispatchError::Read)?;
            let fleet = match j
                .component_checkpoint(SCHEDULER_COMPONENT)
                .map_err(DispatchError::Read)?
            {
                Some(haptic_journal::ComponentCheckpoint {
                    state: haptic_journal::ComponentState::Scheduler(s),
                    ..
                }) => s.endpoints,
                _ => Vec::new(),
            };
            Ok((out, term, fleet))
        })
        .await
        .map_err(DispatchError::Join)?
    }
}

/// The history record of one endpoint's sync (`sync` as the deployer reports it in
/// `ConfigAppliedToPod`), ending now.
fn history_record(
    endpoint: &haptic_journal::Endpoint,
    request: &DeployRequest,
    term: Term,
    sync: &SyncMetadata,
) -> haptic_journal::SyncRecord {
    let ended_at = UnixMillis::now();
    haptic_journal::SyncRecord {
        pod: endpoint.pod.clone(),
        endpoint: endpoint.url.clone(),
        render: request.render,
        started_at: UnixMillis(ended_at.0.saturating_sub(sync.sync_duration_ms)),
        ended_at,
        mode: sync.sync_mode,
        operations: sync.operation_counts,
        reloaded: sync.reload_triggered,
        reload_id: sync.reload_id.clone(),
        result: match &sync.error {
            None => haptic_journal::SyncResult::Applied,
            Some(message) if sync.rejected => haptic_journal::SyncResult::Rejected {
                message: message.clone(),
            },
            Some(message) => haptic_journal::SyncResult::Failed {
                message: message.clone(),
            },
        },
        term,
        deployment: request.deployment.clone(),
    }
}

/// The deployment scheduler's component name in the journal's `component_state` table (the
/// scheduler's `COMPONENT`, which this module may not name: the scheduler uses the deployer).
pub const SCHEDULER_COMPONENT: &str = "deployment-scheduler";

/// The journal's pod-truth records of each endpoint URL.
type PodRecords = HashMap<String, (Option<EndpointFiles>, Option<EndpointTransaction>)>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn error_text(e: &SyncError) -> String {
    crate::core::error::chain(e)
}

fn add_breakdown(out: &mut BTreeMap<String, u32>, ops: &haptic_journal::OperationCounts) {
    for (section, c) in [
        ("maps", ops.maps),
        ("ssl_certs", ops.ssl_certs),
        ("general_files", ops.general_files),
    ] {
        for (ty, n) in [
            ("create", c.added),
            ("update", c.modified),
            ("delete", c.removed),
        ] {
            if n > 0 {
                *out.entry(format!("{section}_{ty}")).or_default() += n;
            }
        }
    }
}

fn completed(
    request: &DeployRequest,
    ok: u32,
    failed: u32,
    reloads: u32,
    started: Instant,
    breakdown: &BTreeMap<String, u32>,
    ops: u32,
) -> Event {
    Event::DeploymentCompleted {
        correlation: request.correlation.clone(),
        deployment: request.deployment.clone(),
        total: ok + failed,
        succeeded: ok,
        failed,
        duration_ms: started.elapsed().as_millis() as u64,
        reloads_triggered: reloads,
        total_api_operations: ops,
        operation_breakdown: breakdown.clone(),
    }
}
