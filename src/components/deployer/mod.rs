//! `deployer`: the stateless executor. Deploys one scheduled render to its endpoints in
//! parallel through each pod's Dataplane API, journaling every per-endpoint result before the
//! events that depend on it.
//!
//! ```text
//!  scheduler shell ── run(inflight WorkId, DeployRequest, cancel) ──► Deployer
//!     DeploymentStarted ──► journal+dispatch
//!     per endpoint (at most max_parallel Dataplane requests in flight, own timeout):
//!        sync_endpoint: read what the pod reports (listings, the render's files, raw config)
//!          ─► decide::plan(running, render, known, policy) ─► Vec<Operation>
//!             (structure.rs: the configuration compared section by section, object by object)
//!          ─► execute: files (skip_reload), then one of: POST raw?version=N (raw_initial,
//!             raw_unmodelled, raw_threshold) | PUT servers at runtime (runtime, no reload) |
//!             one transaction (fine_grained, one reload at commit, aborted on every failure);
//!             a 409 re-reads and plans again (bounded), another fine-grained failure falls
//!             back to one raw push (raw_fallback); poll Reload-ID (bounded), delete
//!             unreferenced files
//!        ──► one batch: endpoint_applied state + InstanceDeployed/InstanceDeploymentFailed
//!            + ConfigAppliedToPod (every synced endpoint, no-ops included)
//!     one batch: DeploymentCompleted + DeployedConfigPublishRequest (when >= 1 pod took it)
//!                + ack of the deploy-inflight slot (J3)
//! ```
//!
//! What differs on a pod is decided by the pure [`decide`] from what the pod reports (content
//! for maps and general files, metadata for certificates and CA files, content for the
//! configuration), never from which journal wrote it: a restarted leader, a newly elected one
//! with an empty journal and a rebuilt journal find a pod that runs the render equal and leave
//! it alone (no write, no reload). The deployer keeps no decision state of its own;
//! `endpoint_applied` (what each endpoint last ran) only hints at files that may be on disk but
//! not loaded (see [`decide`]).
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
//! - per endpoint, one batch after its sync returned: table `endpoint_applied` (put on success:
//!   render, configuration version, reload id; removed on failure) with `instance.deployed` or
//!   `instance.deployment.failed`, and `config.applied.to.pod` for every synced endpoint, a
//!   no-op included (`is_drift_check` set on drift runs; `sync` says what was done: its
//!   `sync_mode` (how the configuration was applied), `fallback_used` (only for
//!   `raw_fallback`), `operation_counts` (backends, servers and frontends from the structural
//!   diff, files from the writes; zero for a no-op); `error` is set on a failure, with no mode;
//!   `rejected` when the failure is [`sync::SyncError::PushRejected`]: a 400/422 on the
//!   configuration push that persisted after the pod's files were synced again, the one failure
//!   `instance.deployment.failed` reports not `retryable`, which the scheduler quarantines). A resumed deployment
//!   whose writes landed before a crash therefore still reports each pod's new state; the
//!   publisher writes a pod's status only when it differs from what that pod runs;
//! - after the last endpoint, one batch: `deployment.completed`,
//!   `deployed.config.publish.request` (when at least one endpoint succeeded) and the ack of
//!   queue `deploy-inflight` (J3).
//!
//! # Failpoints
//! `deployer::after_endpoint_applied` (one endpoint journaled, deployment not completed),
//! `deployer::before_completed`.
//!
//! # Metrics
//! [`DeployerStats`]: deployments (and those with a failed endpoint), endpoint
//! successes/failures, reloads, drift detections, deposed runs, successful syncs by
//! [`SyncMode`] (`haptic_endpoint_sync_modes_total`).

pub mod decide;
mod metrics;
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
    Batch, DeployRequest, DeploymentCause, EndpointApplied, Event, Journal, Op, Queue,
    SyncMetadata, SyncMode, UnixMillis, WorkId, WorkKey,
};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::dataplane::{BasicAuth, Dataplane, Endpoint as DpEndpoint};
use crate::dispatch::{DispatchError, DispatchHandle};

pub use decide::{KnownRun, LoadedFile, LoadedRender, Operation, SyncPolicy};
pub use sync::{SyncError, SyncLimits, SyncReport, sync_endpoint};

/// Component identifier (logs, metrics, health).
pub const COMPONENT: &str = "deployer";

use crate::core::guard::{DriftHook, LeaseGuard};

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
    pub modes: [AtomicU64; 6],
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
    /// Replaceable after start ([`Deployer::set_drift_hook`]); read once per drifted pod.
    drift_hook: std::sync::RwLock<Option<DriftHook>>,
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

struct EndpointResult {
    endpoint: haptic_journal::Endpoint,
    result: Result<SyncReport, SyncError>,
    duration: Duration,
}

impl Deployer {
    /// A deployer publishing through `dispatch`.
    #[must_use]
    pub fn new(
        dispatch: DispatchHandle,
        dataplane: Dataplane,
        settings: DeployerSettings,
        lease: Arc<dyn LeaseGuard>,
        drift_hook: Option<DriftHook>,
    ) -> Self {
        Deployer {
            dispatch,
            dataplane,
            settings,
            lease,
            drift_hook: std::sync::RwLock::new(drift_hook),
            info: Mutex::new(HashMap::new()),
            versions: Mutex::new(HashMap::new()),
            version_report: tokio::sync::watch::Sender::new(VersionReport::default()),
            stats: DeployerStats::default(),
            health: crate::core::health::Health::default(),
        }
    }

    /// Replaces the [`DriftHook`] (e.g. once the runtime config and a kube client are known);
    /// takes effect from the next drifted pod.
    pub fn set_drift_hook(&self, hook: Option<DriftHook>) {
        *self
            .drift_hook
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = hook;
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
        let previous = self.previous_files().await?;
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
            let known = previous.get(ep.url.as_str()).cloned();
            futs.push(async move {
                let t = Instant::now();
                let result = match &loaded {
                    Err(msg) => Err(SyncError::Dataplane {
                        step: "load render",
                        source: crate::dataplane::DataplaneError::NotFound { path: msg.clone() },
                        conflict_retries: 0,
                    }),
                    Ok(render) => self.sync_one(ep, render, known.as_ref(), &permits).await,
                };
                EndpointResult {
                    endpoint: ep.clone(),
                    result,
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
            let Some(r) = next else { break };
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
                        let hook = self
                            .drift_hook
                            .read()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .clone();
                        if let Some(h) = hook {
                            h(&r.endpoint.pod, &rep.differed);
                        }
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
                    sync.rejected = matches!(e, SyncError::PushRejected { .. });
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

    async fn sync_one(
        &self,
        ep: &haptic_journal::Endpoint,
        render: &LoadedRender,
        known: Option<&KnownRun>,
        permits: &Arc<Semaphore>,
    ) -> Result<SyncReport, SyncError> {
        let Ok(url) = reqwest::Url::parse(ep.url.as_str()) else {
            return Err(SyncError::Dataplane {
                step: "endpoint url",
                source: crate::dataplane::DataplaneError::NotFound {
                    path: ep.url.to_string(),
                },
                conflict_retries: 0,
            });
        };
        let client = self
            .dataplane
            .client(DpEndpoint::new(url, self.settings.current_credentials()));
        let timeout = self.settings.endpoint_timeout;
        let work = async {
            let cached = self
                .info
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .contains_key(ep.url.as_str());
            if !cached {
                let info = {
                    let _p = permits.acquire().await;
                    client.info().await
                }
                .map_err(|source| SyncError::Dataplane {
                    step: "read info",
                    source,
                    conflict_retries: 0,
                })?;
                self.info
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .insert(ep.url.to_string(), info);
            }
            let version_known = self
                .versions
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .contains_key(ep.url.as_str());
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
                    self.versions
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .insert(ep.url.to_string(), v);
                }
            }
            sync_endpoint(
                &client,
                render,
                known,
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
            Ok(r) => r,
            Err(_) => Err(SyncError::Timeout(timeout)),
        }
    }

    /// Loads the render's bytes from the journal; `Err(text)` when a blob is missing.
    async fn load(
        &self,
        request: &DeployRequest,
    ) -> Result<Result<LoadedRender, String>, DispatchError> {
        let j = self.journal().clone();
        let checksum = request.render;
        tokio::task::spawn_blocking(
            move || -> Result<Result<LoadedRender, String>, DispatchError> {
                let Some(render) = j.get_render(checksum).map_err(DispatchError::Read)? else {
                    return Ok(Err(format!("render {checksum} not in the journal")));
                };
                let Some(config) = j.get_blob(render.config).map_err(DispatchError::Read)? else {
                    return Ok(Err(format!(
                        "config of render {checksum} not in the journal"
                    )));
                };
                let mut files = Vec::new();
                for f in &render.files {
                    let Some(content) = j.get_blob(f.blob).map_err(DispatchError::Read)? else {
                        return Ok(Err(format!("file {} not in the journal", f.path)));
                    };
                    files.push(LoadedFile {
                        kind: f.kind,
                        path: f.path.clone(),
                        blob: f.blob,
                        content,
                    });
                }
                Ok(Ok(LoadedRender {
                    checksum,
                    config_blob: render.config,
                    config: String::from_utf8_lossy(&config).into_owned(),
                    files,
                }))
            },
        )
        .await
        .map_err(DispatchError::Join)?
    }

    /// Per endpoint URL: what this journal last recorded it running (`endpoint_applied` and the
    /// render manifest it names, while stored). Only a hint of files that may be unloaded
    /// ([`decide`]); equality is always decided from what the pod reports.
    async fn previous_files(&self) -> Result<HashMap<String, KnownRun>, DispatchError> {
        let j = self.journal().clone();
        tokio::task::spawn_blocking(move || {
            let mut out = HashMap::new();
            for a in j.endpoints_applied().map_err(DispatchError::Read)? {
                if let Some(r) = j.get_render(a.render).map_err(DispatchError::Read)? {
                    let files = r.files.into_iter().map(|f| (f.path, f.blob)).collect();
                    out.insert(
                        a.endpoint.to_string(),
                        KnownRun {
                            config: r.config,
                            files,
                        },
                    );
                }
            }
            Ok(out)
        })
        .await
        .map_err(DispatchError::Join)?
    }
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
