//! One endpoint's sync through the Dataplane API v3, as the executor of [`super::decide`]:
//! read what the pod reports, let [`plan`] list the operations, apply them in order, and report,
//! keeping the pod-truth record ([`PodLedger`]) as answers come in.
//!
//! ```text
//!  leftover transactions? (a journal record, or the first sync of the endpoint this term)
//!     GET .../transactions, DELETE each                      (never more than one of ours open)
//!  list maps/ssl_certificates/ssl_ca_files/general ─► read_plan ─► GET each render file present
//!    ─► GET configuration/raw ─► runtime_read_plan ─► GET .../runtime/{maps,ssl_certs,ssl_crt_lists}
//!  plan(running, render, record) ─► [files] [config step] [deletes]
//!  journal the file intents (written, loaded as still known)            ── commit, then:
//!  execute: POST/PUT files, then one of: POST raw?version=N | PUT servers at runtime |
//!           transaction (journaled open before its first change, committing before the
//!           commit; aborted on every failure), poll Reload-ID, DELETE stale files
//!  next_step(attempt) ─► succeed | plan again | delete transactions and plan again | fall back
//!                        to one raw push | fail                                 (retry.rs)
//! ```
//!
//! A sync succeeds only when every render file is known loaded ([`PodLedger::all_loaded`]): a
//! write on disk that no reload loaded is planned again (a reload), never reported synced.
//!
//! Reload ids (`observed-v3.4.md`): a queued reload answers `in_progress` without an `id`; an id
//! unknown to the API after its last success is 404; an older one answers `succeeded` even when
//! it was never issued. So a reload counts as loading a write only when it succeeded with a
//! `reload_timestamp` not older than the write's answer (`Date`, the pod's clock); a 404 or an
//! older answer is "unknown": the sync reads the pod again and plans again.
//!
//! No rule lives here: which files differ and whether they are loaded, the configuration step,
//! and what is deleted are [`plan`]'s; what follows an attempt is [`next_step`]'s. The executor
//! maps each operation to its requests, with the transport-level fallbacks an idempotent write
//! needs (an upload answered 409 is replaced, a replace answered 404 is uploaded).

use std::sync::Arc;
use std::time::Duration;

use haptic_journal::{ConfigVersion, Op, OperationCounts, ReloadId, SyncMode};
use tokio::sync::Semaphore;

use crate::dataplane::{DataplaneClient, DataplaneError};
use crate::dispatch::DispatchError;

use super::decide::{Operation, SyncPolicy, fallback};
use super::ledger::PodLedger;
use super::retry::{Attempt, Attempts, Next, next_step};
use crate::core::guard::LeaseGuard;
use crate::core::render::JournaledRender;

use super::exec;

/// Bounds of one endpoint sync.
#[derive(Clone, Debug)]
pub struct SyncLimits {
    /// Plans run again after a 409/406 or an unconfirmed reload. Default: 3.
    pub max_conflict_retries: u32,
    /// Reload poll interval. Default: 200 ms.
    pub reload_poll_interval: Duration,
    /// Longest wait for one reload. Default: 10 s.
    pub reload_timeout: Duration,
}

impl Default for SyncLimits {
    fn default() -> Self {
        SyncLimits {
            max_conflict_retries: 3,
            reload_poll_interval: Duration::from_millis(200),
            reload_timeout: Duration::from_secs(10),
        }
    }
}

/// What a successful sync did.
#[derive(Clone, Debug)]
pub struct SyncReport {
    /// Whether anything was written.
    pub changed: bool,
    /// Whether HAProxy reloaded.
    pub reload_triggered: bool,
    /// Last reload id.
    pub reload_id: Option<ReloadId>,
    /// Configuration version afterwards, when known.
    pub version_after: Option<ConfigVersion>,
    /// 409s (and unconfirmed reloads) planned again.
    pub conflict_retries: u32,
    /// Writes by section.
    pub ops: OperationCounts,
    /// What differed (`config`, `file maps/x.map`, `reload`), for drift reports.
    pub differed: Vec<String>,
    /// The operations [`plan`] listed, in order (empty: the pod already ran the render);
    /// the last plan's when the sync planned again.
    pub operations: Vec<Operation>,
    /// How the configuration was applied (`fine_grained` also for files only or nothing).
    pub mode: SyncMode,
    /// True only when a fine-grained attempt failed and a raw push replaced it.
    pub fallback_used: bool,
    /// Configuration changes applied or pushed (each one API call in fine-grained modes).
    pub config_changes: u32,
    /// Transactions found open on the pod and deleted before writing (left by a kill, a
    /// timeout or another replica).
    pub transactions_deleted: u32,
}

impl Default for SyncReport {
    fn default() -> Self {
        SyncReport {
            changed: false,
            reload_triggered: false,
            reload_id: None,
            version_after: None,
            conflict_retries: 0,
            ops: OperationCounts::default(),
            differed: Vec::new(),
            operations: Vec::new(),
            mode: SyncMode::FineGrained,
            fallback_used: false,
            config_changes: 0,
            transactions_deleted: 0,
        }
    }
}

/// Why a sync failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SyncError {
    /// A Dataplane call failed.
    #[error("{step} failed")]
    Dataplane {
        /// Which step.
        step: &'static str,
        /// The error.
        #[source]
        source: DataplaneError,
        /// Conflicts retried before.
        conflict_retries: u32,
    },
    /// The version kept moving under us.
    #[error("configuration version conflict persisted after {retries} retries")]
    ConflictsExhausted {
        /// Retries done.
        retries: u32,
    },
    /// A reload a write scheduled could not be confirmed, also after planning again (module
    /// doc): the pod is read again at the next sync.
    #[error("reload {reload_id} of this sync could not be confirmed: {why}")]
    ReloadUnknown {
        /// The reload.
        reload_id: ReloadId,
        /// `unknown to the api` (404) or `answer older than the write`.
        why: &'static str,
    },
    /// The Lease is no longer held with margin: stop at once (J7).
    #[error("leadership lost before the push")]
    LeaseLost,
    /// The per-endpoint timeout passed.
    #[error("endpoint sync timed out after {0:?}")]
    Timeout(Duration),
    /// Render files are on disk but still not known loaded after the sync reloaded and planned
    /// again (a reload that did not come, or whose answer could not be confirmed).
    #[error("files on the pod are not loaded after reloading: {}", paths.join(", "))]
    NotLoaded {
        /// Render paths, sorted.
        paths: Vec<String>,
    },
    /// The pod-truth record could not be journaled; nothing more is written to the pod (J1:
    /// the intent is durable before the write).
    #[error("the pod's record could not be journaled")]
    Journal(#[source] DispatchError),
    /// The pod's Dataplane API rejected the configuration push (400 or 422) and rejected it
    /// again after the pod's files were synced again (read back, compared and rewritten where
    /// they differed): the render is wrong for this pod (e.g. `haproxy -c` on the controller
    /// did not catch it), so retrying cannot help. `message` is HAProxy's answer. The
    /// scheduler quarantines the (render, pod) instead of retrying (not `retryable`).
    #[error("dataplane rejected the configuration with status {status}: {message}")]
    PushRejected {
        /// HTTP status of the second rejection (400 or 422).
        status: u16,
        /// The `message` of the error body (HAProxy's `[ALERT]` lines), or the body text.
        message: String,
    },
    /// The pod's Dataplane API refused a file of the render for what it holds: a certificate
    /// it cannot parse answers 500 "failed to parse certificate" (`observed-v3.4.md`), not a
    /// 4xx, and would be retried forever. Permanent (not `retryable`): quarantined like a
    /// rejected push, until a new render.
    #[error("dataplane refused {path} (status {status}): {message}")]
    FileRejected {
        /// Render path of the file.
        path: String,
        /// HTTP status.
        status: u16,
        /// The API's message.
        message: String,
    },
}

impl SyncError {
    /// Whether a later retry may help. Only a classified permanent rejection is not
    /// ([`SyncError::PushRejected`], [`SyncError::FileRejected`]: the scheduler quarantines the
    /// render for the pod, DESIGN.md J11); every other failure (transport, 5xx, failed reloads,
    /// refused credentials, ...) is retried with bounded backoff. [`SyncError::LeaseLost`] is
    /// not retried by this term (the deployment stops).
    #[must_use]
    pub fn retryable(&self) -> bool {
        !matches!(
            self,
            SyncError::PushRejected { .. } | SyncError::FileRejected { .. } | SyncError::LeaseLost
        )
    }

    /// Whether the failure is a permanent rejection of the render by the pod (the status
    /// shows it `rejected`).
    #[must_use]
    pub fn rejected(&self) -> bool {
        matches!(
            self,
            SyncError::PushRejected { .. } | SyncError::FileRejected { .. }
        )
    }

    /// 409s retried before the failure.
    #[must_use]
    pub fn conflict_retries(&self) -> u32 {
        match self {
            SyncError::Dataplane {
                conflict_retries, ..
            } => *conflict_retries,
            SyncError::ConflictsExhausted { retries } => *retries,
            _ => 0,
        }
    }
}

/// Commits pod-truth records for the executor: durable when the future resolves (the deployer
/// sends them through the dispatcher, one batch each).
pub trait PodJournal: Send + Sync {
    /// Commits `ops` in one batch.
    ///
    /// # Errors
    /// [`DispatchError`] when the journal refused or failed.
    fn commit(&self, ops: Vec<Op>) -> futures::future::BoxFuture<'_, Result<(), DispatchError>>;
}

/// A [`PodJournal`] that keeps nothing (benchmarks that measure the Dataplane side only).
#[derive(Debug, Default, Clone, Copy)]
pub struct NoPodJournal;

impl PodJournal for NoPodJournal {
    fn commit(&self, _ops: Vec<Op>) -> futures::future::BoxFuture<'_, Result<(), DispatchError>> {
        Box::pin(async { Ok(()) })
    }
}

/// What one sync knows of the pod besides the render: the journal's records and whether the
/// pod's transactions must be listed and deleted before the first write.
#[derive(Debug)]
pub struct PodSync {
    /// The pod-truth record, from the journal (empty for a pod it has none of).
    pub ledger: PodLedger,
    /// List and delete the pod's transactions first: the first sync of the endpoint in this
    /// leader term (a killed predecessor's are not in this journal), or the ledger names one.
    pub clean_transactions: bool,
}

/// How a sync ended, with the record to journal in the endpoint's batch.
#[derive(Debug)]
pub struct SyncOutcome {
    /// What it did, or why it failed.
    pub result: Result<SyncReport, SyncError>,
    /// The pod-truth record as of the end (journaled by the deployer with the result).
    pub ledger: PodLedger,
    /// Whether the pod's transactions were listed and deleted (the deployer remembers it for
    /// the term).
    pub transactions_cleaned: bool,
    /// What a failed sync had planned when it failed: its mode and the operation counts of its
    /// last plan (the history records them); `None` on success (the report has them) and for a
    /// sync that failed before it planned.
    pub attempted: Option<(SyncMode, haptic_journal::OperationCounts)>,
}

/// The Dataplane calls of one sync, each holding a permit of the deployment-wide semaphore
/// (`max_parallel` requests in flight across the deployment), and the journal of its record.
pub(super) struct Calls<'a> {
    pub(super) client: &'a DataplaneClient,
    pub(super) permits: &'a Arc<Semaphore>,
    pub(super) journal: &'a dyn PodJournal,
    pub(super) lease: &'a dyn LeaseGuard,
    pub(super) limits: &'a SyncLimits,
}

/// Syncs one endpoint to `render` (module doc).
///
/// A configuration push rejected with 400 or 422 is not final at once: the file a configuration
/// references may have been removed or changed on the pod between the read and the push. The
/// sync then reads the pod again and plans again. A second rejection is
/// [`SyncError::PushRejected`].
///
/// # Errors
/// In [`SyncOutcome::result`]: [`SyncError`]; `retryable()` tells the scheduler whether to back
/// off and retry.
///
/// # Cancel safety
/// Dropping the future stops between or inside HTTP requests. What it journaled before each
/// write stays (files written and not known loaded, a transaction open or committing), so the
/// next sync reloads what may not be loaded and deletes what may be left open.
#[allow(clippy::too_many_arguments)]
pub async fn sync_endpoint(
    client: &DataplaneClient,
    render: &JournaledRender,
    pod: PodSync,
    journal: &dyn PodJournal,
    permits: &Arc<Semaphore>,
    lease: &dyn LeaseGuard,
    limits: &SyncLimits,
    policy: &SyncPolicy,
) -> SyncOutcome {
    let calls = Calls {
        client,
        permits,
        journal,
        lease,
        limits,
    };
    let mut ledger = pod.ledger;
    let mut report = SyncReport::default();
    let mut cleaned = false;
    let ran = run(
        &calls,
        render,
        pod.clean_transactions,
        &mut ledger,
        &mut cleaned,
        policy,
        &mut report,
    )
    .await;
    let planned = !report.operations.is_empty() || report.fallback_used;
    let attempted = (ran.is_err() && planned).then_some((report.mode, report.ops));
    let result = ran.map(|()| report);
    if result.is_ok() {
        ledger.keep_only(&render.files, haptic_journal::UnixMillis::now());
    }
    SyncOutcome {
        result,
        ledger,
        transactions_cleaned: cleaned,
        attempted,
    }
}

async fn run(
    calls: &Calls<'_>,
    render: &JournaledRender,
    clean_first: bool,
    ledger: &mut PodLedger,
    cleaned: &mut bool,
    policy: &SyncPolicy,
    report: &mut SyncReport,
) -> Result<(), SyncError> {
    let mut counts = Attempts::default();
    let mut clean = clean_first || ledger.transaction.is_some();
    let mut fall_back = false;
    loop {
        if clean {
            report.transactions_deleted += exec::delete_transactions(calls, ledger).await?;
            *cleaned = true;
            clean = false;
        }
        let executed = if fall_back {
            fall_back = false;
            let version = exec::read_version(calls, report.conflict_retries).await?;
            report.mode = SyncMode::RawFallback;
            report.fallback_used = true;
            report.operations.push(fallback(version));
            report.differed.push("config".to_owned());
            exec::push_attempt(calls, render, version, ledger, report).await
        } else {
            let running = exec::read_running(calls, render, ledger.record(), report).await?;
            report.version_after = Some(running.config.version);
            let ops = super::decide::plan(&running, render, ledger.record(), policy);
            report.operations.clone_from(&ops);
            if !report.fallback_used {
                report.mode = super::decide::mode_of(&ops);
            }
            if let Some(changes) = super::decide::config_changes(&running, render) {
                report.ops.backends = Default::default();
                report.ops.servers = Default::default();
                report.ops.frontends = Default::default();
                super::decide::count_changes(&changes, &mut report.ops);
                report.config_changes = changes.len() as u32;
            }
            exec::execute(calls, render, &running, &ops, ledger, report).await
        };
        let (attempt, failure) = match executed {
            Ok(()) if ledger.all_loaded(&render.files) => (Attempt::Done, None),
            Ok(()) => (Attempt::NotAllLoaded, None),
            Err(f) => (f.attempt, Some(f.error)),
        };
        match next_step(attempt, &mut counts, calls.limits.max_conflict_retries) {
            Next::Succeed => return Ok(()),
            Next::Replan => {
                report.conflict_retries = counts.conflicts;
                tracing::debug!(?attempt, "planning again from what the pod reports");
            }
            Next::CleanupThenReplan => {
                tracing::warn!("too many transactions open on the pod: deleting them");
                clean = true;
            }
            Next::FallBack => {
                if let Some(e) = &failure {
                    tracing::warn!(error = %crate::core::error::chain(e), "fine-grained sync failed: raw push fallback");
                }
                fall_back = true;
            }
            Next::Fail => {
                return Err(match (attempt, failure) {
                    (Attempt::Conflict, _) => SyncError::ConflictsExhausted {
                        retries: counts.conflicts,
                    },
                    (
                        Attempt::PushRejected,
                        Some(SyncError::Dataplane {
                            source: DataplaneError::Rejected { status, message },
                            ..
                        }),
                    ) => SyncError::PushRejected { status, message },
                    (_, Some(e)) => e,
                    (_, None) => SyncError::NotLoaded {
                        paths: render
                            .files
                            .iter()
                            .filter(|f| !ledger.all_loaded([*f]))
                            .map(|f| f.path.clone())
                            .collect(),
                    },
                });
            }
        }
    }
}
