//! One endpoint's sync through the Dataplane API v3, as the executor of [`super::decide`]:
//! read what the pod reports (storage listings, the render's files as each kind allows, the
//! raw configuration), let [`decide`] list the operations, apply them in order, and report.
//!
//! ```text
//!  list maps/ssl_certificates/ssl_ca_files/general ─► read_plan ─► GET each render file present
//!    (content; certificate metadata; CA count + entries) ─► GET configuration/raw
//!  decide(running, render, known) ─► [files] [push | reload] [deletes]
//!    (files skip the reload when the configuration changes; otherwise the last one reloads)
//!  execute: POST/PUT files, POST raw?version=N (409: re-read, bounded), poll Reload-ID,
//!           DELETE stale files (failures logged)
//! ```
//!
//! Configuration steps (which one is [`plan`]'s, module doc of [`super::decide`]):
//! - a raw push at the version read (409: re-read the version, bounded);
//! - server updates outside a transaction, `PUT .../servers/{name}?version=N`, the version
//!   taken from each answer for the next (200: applied at runtime, no reload; 202: the API
//!   reloads, waited for);
//! - one transaction: start at the version read, each change with `transaction_id`, commit
//!   (one reload, waited for). Every failure path aborts it (`DELETE`), also a dropped future
//!   (a guard sends the abort), so no transaction is left open (dataplaneapi#339).
//!
//! A 409 (the version moved under the sync) re-reads the pod and plans again, bounded by
//! `max_conflict_retries`; any other failure of a fine-grained step falls back to one raw
//! push ([`fallback`], mode `raw_fallback`) of the render at the version re-read.
//!
//! No rule lives here: which files differ, whether the configuration is pushed or only reloaded,
//! and what is deleted are [`decide`]'s. The executor only maps each operation to its requests,
//! with the transport-level fallbacks an idempotent write needs (an upload answered 409 is
//! replaced, a replace answered 404 is uploaded), the bounded 409 retries of the push, and
//! reload polling. A pod that already runs the render gets reads only: no write, no reload.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use haptic_journal::{ConfigVersion, OperationCounts, ReloadId, SyncMode};
use reqwest::Method;
use tokio::sync::Semaphore;

use crate::dataplane::{
    DataplaneClient, DataplaneError, PushOptions, StorageKind, StorageWriteOptions,
    StorageWriteOutcome, Target, TransactionId,
};

use super::decide::{
    CaFileEntries, KnownRun, Operation, RunningPod, Stored, SyncPolicy, config_changes,
    count_changes, fallback, mode_of, plan, read_plan,
};
pub use super::decide::{LoadedFile, LoadedRender};
use super::structure::{ChildKey, ConfigChange};
use crate::core::guard::LeaseGuard;

/// CA-file entries read at most per CA file. A pod reporting more is not read entry by entry:
/// the file then compares as different and is replaced on every sync (bounded reads over a
/// reload per sync for CA bundles of that size).
const MAX_CA_ENTRIES_READ: u32 = 256;

/// Bounds of one endpoint sync.
#[derive(Clone, Debug)]
pub struct SyncLimits {
    /// Raw pushes retried after a 409 (re-reading the version each time). Default: 3.
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
    /// 409s retried.
    pub conflict_retries: u32,
    /// Writes by section.
    pub ops: OperationCounts,
    /// What differed (`config`, `file maps/x.map`, `reload`), for drift reports.
    pub differed: Vec<String>,
    /// The operations [`decide`] listed, in order (empty: the pod already ran the render);
    /// the last plan's when a conflict made the sync plan again.
    pub operations: Vec<Operation>,
    /// How the configuration was applied (`fine_grained` also for files only or nothing).
    pub mode: SyncMode,
    /// True only when a fine-grained attempt failed and a raw push replaced it.
    pub fallback_used: bool,
    /// Configuration changes applied or pushed (each one API call in fine-grained modes).
    pub config_changes: u32,
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
    /// The Lease is no longer held with margin: stop at once (J7).
    #[error("leadership lost before the push")]
    LeaseLost,
    /// The per-endpoint timeout passed.
    #[error("endpoint sync timed out after {0:?}")]
    Timeout(Duration),
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
}

impl SyncError {
    /// Whether a later retry may help. Only a classified permanent rejection is not
    /// ([`SyncError::PushRejected`]: the scheduler quarantines the render for the pod, DESIGN.md
    /// J11); every other failure (transport, 5xx, failed reloads, refused credentials, a file
    /// the API refuses, ...) is retried with bounded backoff. [`SyncError::LeaseLost`] is not
    /// retried by this term (the deployment stops).
    #[must_use]
    pub fn retryable(&self) -> bool {
        !matches!(self, SyncError::PushRejected { .. } | SyncError::LeaseLost)
    }

    /// The status and message of a rejected configuration push (400 or 422 on the raw push),
    /// the failure a resync may cure once (module doc of [`sync_endpoint`]).
    fn push_rejection(&self) -> Option<(u16, &str)> {
        match self {
            SyncError::Dataplane {
                step: PUSH_STEP,
                source: DataplaneError::Rejected { status, message },
                ..
            } if matches!(status, 400 | 422) => Some((*status, message)),
            _ => None,
        }
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

/// The Dataplane calls of one sync, each holding a permit of the deployment-wide semaphore
/// (`max_parallel` requests in flight across the deployment).
struct Calls<'a> {
    client: &'a DataplaneClient,
    permits: &'a Arc<Semaphore>,
}

macro_rules! call {
    ($calls:expr, $step:expr, $retries:expr, $fut:expr) => {{
        let _permit = $calls.permits.acquire().await;
        $fut.await.map_err(|source| SyncError::Dataplane {
            step: $step,
            source,
            conflict_retries: $retries,
        })
    }};
}

/// The step name of the raw configuration push in [`SyncError::Dataplane`].
const PUSH_STEP: &str = "push configuration";

/// The storage listings a sync reads, in [`StorageKind`] order.
const LISTED: [StorageKind; 4] = [
    StorageKind::SslCertificate,
    StorageKind::CaFile,
    StorageKind::General,
    StorageKind::Map,
];

/// Syncs one endpoint to `render` (module doc). `known` is what this journal last recorded the
/// endpoint running, if anything; it only tells whether files on disk may be unloaded
/// ([`super::decide`]).
///
/// A configuration push rejected with 400 or 422 is not final at once: the file a
/// configuration references may have been removed or changed on the pod between the read and
/// the push. The sync then reads the pod again and runs the plan again (files that differ are
/// rewritten, then the push). A second rejection is [`SyncError::PushRejected`].
///
/// # Errors
/// [`SyncError`]; `retryable()` tells the scheduler whether to back off and retry
/// ([`SyncError::PushRejected`] is the one permanent failure).
///
/// # Cancel safety
/// Dropping the future stops between or inside HTTP requests; a write that reached the pod is
/// found equal by the next sync's comparison, so nothing is applied twice. A file written with
/// `skip_reload` but not yet loaded (cancelled before the reload) differs from `known`, so the
/// next sync by this journal still reloads.
pub async fn sync_endpoint(
    client: &DataplaneClient,
    render: &LoadedRender,
    known: Option<&KnownRun>,
    permits: &Arc<Semaphore>,
    lease: &dyn LeaseGuard,
    limits: &SyncLimits,
    policy: &SyncPolicy,
) -> Result<SyncReport, SyncError> {
    let calls = Calls { client, permits };
    let mut report = SyncReport::default();
    let mut conflicts = 0;
    let mut resynced = false;
    loop {
        let running = read_running(&calls, render, &mut report).await?;
        report.version_after = Some(running.config.version);
        let ops = plan(&running, render, known, policy);
        report.operations.clone_from(&ops);
        report.mode = mode_of(&ops);
        if let Some(changes) = config_changes(&running, render) {
            report.ops.backends = Default::default();
            report.ops.servers = Default::default();
            report.ops.frontends = Default::default();
            count_changes(&changes, &mut report.ops);
            report.config_changes = changes.len() as u32;
        }
        let failed = match execute(&calls, render, &ops, lease, limits, &mut report).await {
            Ok(()) => return Ok(report),
            Err(Failure::Conflict) if conflicts < limits.max_conflict_retries => {
                conflicts += 1;
                report.conflict_retries = conflicts;
                tracing::debug!(conflicts, "configuration version moved: planning again");
                continue;
            }
            Err(Failure::Conflict) => {
                return Err(SyncError::ConflictsExhausted { retries: conflicts });
            }
            Err(Failure::FineGrained(e)) => {
                tracing::warn!(error = %e, "fine-grained sync failed: raw push fallback");
                let version = call!(
                    calls,
                    "read version",
                    report.conflict_retries,
                    client.configuration_version()
                )?;
                match push_config(&calls, render, version, lease, limits, &mut report).await {
                    Ok(()) => {
                        report.mode = SyncMode::RawFallback;
                        report.fallback_used = true;
                        report.operations.push(fallback(version));
                        report.differed.push("config".to_owned());
                        return Ok(report);
                    }
                    Err(e) => e,
                }
            }
            Err(Failure::Fatal(e)) => e,
        };
        match failed.push_rejection() {
            Some(_) if !resynced => {
                resynced = true;
                tracing::warn!(error = %failed, "configuration push rejected: syncing the files again");
            }
            Some((status, message)) => {
                return Err(SyncError::PushRejected {
                    status,
                    message: message.to_owned(),
                });
            }
            None => return Err(failed),
        }
    }
}

/// How one execution of a plan failed.
enum Failure {
    /// A 409/406: the version moved; plan again from what the pod reports.
    Conflict,
    /// A fine-grained step failed otherwise (transaction aborted): fall back to a raw push.
    FineGrained(SyncError),
    /// Anything else (file writes, raw pushes, reload failures, the Lease).
    Fatal(SyncError),
}

impl From<SyncError> for Failure {
    fn from(e: SyncError) -> Self {
        Failure::Fatal(e)
    }
}

/// Runs one plan's operations in order (module doc).
async fn execute(
    calls: &Calls<'_>,
    render: &LoadedRender,
    ops: &[Operation],
    lease: &dyn LeaseGuard,
    limits: &SyncLimits,
    report: &mut SyncReport,
) -> Result<(), Failure> {
    let client = calls.client;
    // Reload IDs answered to `skip_reload` writes (certificate POST before v3.2): waited for
    // after the push, which the same reload agent batches with them.
    let mut pending_reloads: Vec<ReloadId> = Vec::new();
    // Whether the last file write reloaded (answered a Reload-ID): a conditional reload is
    // then not needed.
    let mut write_reloaded = false;
    // The version the next runtime server update is conditional on.
    let mut next_version: Option<ConfigVersion> = None;
    for op in ops {
        if !lease.is_valid() {
            return Err(SyncError::LeaseLost.into());
        }
        match op {
            Operation::UploadFile {
                kind,
                name,
                path,
                skip_reload,
                ..
            }
            | Operation::ReplaceFile {
                kind,
                name,
                path,
                skip_reload,
                ..
            } => {
                let content = render_content(render, path);
                let exists = matches!(op, Operation::ReplaceFile { .. });
                haptic_journal::crash_point!("deployer::before_storage_upload");
                let (outcome, replaced) =
                    write_file(calls, *kind, name, content, exists, *skip_reload).await?;
                let counts = section(&mut report.ops, *kind);
                if replaced {
                    counts.modified += 1;
                } else {
                    counts.added += 1;
                }
                report.ops.total_api_operations += 1;
                report.changed = true;
                report.differed.push(op.describe());
                match (skip_reload, outcome.reload_id) {
                    (false, Some(id)) => {
                        // Loads every file on disk, the skipped ones too.
                        wait_reload(calls, &id, limits, 0).await?;
                        report.reload_triggered = true;
                        report.reload_id = Some(id);
                        write_reloaded = true;
                    }
                    (false, None) => {}
                    (true, id) => pending_reloads.extend(id),
                }
            }
            Operation::Reload {
                unless_reloaded: true,
                ..
            } if write_reloaded => {}
            Operation::PushRawConfig { version, .. } | Operation::Reload { version, .. } => {
                push_config(calls, render, *version, lease, limits, report).await?;
                report.differed.push(op.describe());
            }
            Operation::UpdateServer {
                backend,
                name,
                body,
                ..
            } => {
                let version = match next_version {
                    Some(v) => v,
                    None => report.version_after.unwrap_or(ConfigVersion(1)),
                };
                let path = ["backends", backend.as_str(), "servers", name.as_str()];
                let answer = {
                    let _permit = calls.permits.acquire().await;
                    client
                        .configuration_object(
                            Method::PUT,
                            &path,
                            Target::Version(version),
                            Some(&body.0),
                        )
                        .await
                };
                report.ops.total_api_operations += 1;
                let outcome = match answer {
                    Ok(o) => o,
                    Err(DataplaneError::Conflict { .. }) => return Err(Failure::Conflict),
                    Err(source) => {
                        return Err(Failure::FineGrained(SyncError::Dataplane {
                            step: "update server",
                            source,
                            conflict_retries: report.conflict_retries,
                        }));
                    }
                };
                report.changed = true;
                report.differed.push(op.describe());
                let after = outcome
                    .version_after
                    .unwrap_or(ConfigVersion(version.0 + 1));
                next_version = Some(after);
                report.version_after = Some(after);
                if let Some(id) = outcome.reload_id {
                    // The API decided this change needs a reload (e.g. no runtime socket).
                    wait_reload(calls, &id, limits, report.conflict_retries).await?;
                    report.reload_triggered = true;
                    report.reload_id = Some(id);
                }
            }
            Operation::Transaction { version, changes } => {
                transaction(calls, *version, changes, lease, limits, report).await?;
                report.differed.push(op.describe());
            }
            Operation::DeleteFile { kind, name } => {
                let opts = StorageWriteOptions {
                    skip_reload: true,
                    ..StorageWriteOptions::default()
                };
                let deleted = {
                    let _permit = calls.permits.acquire().await;
                    client.delete_storage_file(*kind, name, opts).await
                };
                match deleted {
                    Ok(_) => {
                        section(&mut report.ops, *kind).removed += 1;
                        report.changed = true;
                        report.ops.total_api_operations += 1;
                        report.differed.push(op.describe());
                    }
                    Err(DataplaneError::NotFound { .. }) => {}
                    Err(e) => tracing::warn!(file = %name, error = %e, "stale file not deleted"),
                }
            }
        }
    }
    for id in pending_reloads.drain(..) {
        if report.reload_id.as_ref() != Some(&id) {
            wait_reload(calls, &id, limits, report.conflict_retries).await?;
        }
        report.reload_triggered = true;
    }
    Ok(())
}

/// Aborts the transaction when dropped armed: a sync cancelled (timeout, drain) between the
/// start and the commit must not leave it open (dataplaneapi#339). The abort runs on the
/// runtime, bounded; its failure is logged (the API drops outdated transactions' files only at
/// its own restart, so an abort that cannot reach the pod leaves what a crash would).
struct AbortGuard {
    client: DataplaneClient,
    id: Option<TransactionId>,
}

/// Bound of one abort (upstream: a fresh 5 s context).
const ABORT_TIMEOUT: Duration = Duration::from_secs(5);

impl AbortGuard {
    async fn abort(&mut self) {
        if let Some(id) = self.id.take() {
            abort(&self.client, &id).await;
        }
    }
}

impl Drop for AbortGuard {
    fn drop(&mut self) {
        if let Some(id) = self.id.take()
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            let client = self.client.clone();
            rt.spawn(async move { abort(&client, &id).await });
        }
    }
}

async fn abort(client: &DataplaneClient, id: &TransactionId) {
    match tokio::time::timeout(ABORT_TIMEOUT, client.delete_transaction(id)).await {
        Ok(Ok(())) => tracing::debug!(txn_id = %id, "transaction aborted"),
        Ok(Err(e)) => tracing::warn!(txn_id = %id, error = %e, "transaction abort failed"),
        Err(_) => tracing::warn!(txn_id = %id, "transaction abort timed out"),
    }
}

/// One configuration transaction (module doc): start at `version`, apply `changes` in order,
/// commit, wait for the reload. Aborted on every failure.
async fn transaction(
    calls: &Calls<'_>,
    version: ConfigVersion,
    changes: &[ConfigChange],
    lease: &dyn LeaseGuard,
    limits: &SyncLimits,
    report: &mut SyncReport,
) -> Result<(), Failure> {
    let client = calls.client;
    let retries = report.conflict_retries;
    let fine = |step, source| {
        Failure::FineGrained(SyncError::Dataplane {
            step,
            source,
            conflict_retries: retries,
        })
    };
    let started = {
        let _permit = calls.permits.acquire().await;
        client.start_transaction(version).await
    };
    report.ops.total_api_operations += 1;
    let txn = match started {
        Ok(t) => t,
        Err(DataplaneError::Conflict { .. }) => return Err(Failure::Conflict),
        Err(e) => return Err(fine("start transaction", e)),
    };
    let mut guard = AbortGuard {
        client: client.clone(),
        id: Some(txn.id.clone()),
    };
    for change in changes {
        if !lease.is_valid() {
            guard.abort().await;
            return Err(SyncError::LeaseLost.into());
        }
        let (method, path, body) = change_request(change);
        let segments: Vec<&str> = path.iter().map(String::as_str).collect();
        let applied = {
            let _permit = calls.permits.acquire().await;
            client
                .configuration_object(method, &segments, Target::Transaction(&txn.id), body)
                .await
        };
        report.ops.total_api_operations += 1;
        if let Err(e) = applied {
            guard.abort().await;
            return Err(fine("apply configuration change", e));
        }
    }
    if !lease.is_valid() {
        guard.abort().await;
        return Err(SyncError::LeaseLost.into());
    }
    let committed = {
        let _permit = calls.permits.acquire().await;
        client.commit_transaction(&txn.id, version).await
    };
    report.ops.total_api_operations += 1;
    let outcome = match committed {
        Ok(o) => {
            guard.id = None;
            o
        }
        Err(DataplaneError::Conflict { .. }) => {
            guard.abort().await;
            return Err(Failure::Conflict);
        }
        Err(e) => {
            guard.abort().await;
            return Err(fine("commit transaction", e));
        }
    };
    report.changed = true;
    report.version_after = outcome.version_after.or(Some(ConfigVersion(version.0 + 1)));
    if let Some(id) = outcome.reload_id {
        wait_reload(calls, &id, limits, retries).await?;
        report.reload_triggered = true;
        report.reload_id = Some(id);
    }
    Ok(())
}

/// The request of one configuration change: method, path under `.../configuration/`, body.
fn change_request(change: &ConfigChange) -> (Method, Vec<String>, Option<&serde_json::Value>) {
    let child_path = |parent: &super::structure::Parent, kind: super::structure::ChildKind| {
        vec![
            parent.kind.collection().to_owned(),
            parent.name.clone(),
            kind.collection().to_owned(),
        ]
    };
    match change {
        ConfigChange::CreateSection { kind, body, .. } => (
            Method::POST,
            vec![kind.collection().to_owned()],
            Some(&body.0),
        ),
        ConfigChange::ReplaceSection { kind, name, body } => (
            Method::PUT,
            vec![kind.collection().to_owned(), name.clone()],
            Some(&body.0),
        ),
        ConfigChange::DeleteSection { kind, name } => (
            Method::DELETE,
            vec![kind.collection().to_owned(), name.clone()],
            None,
        ),
        ConfigChange::CreateChild {
            parent,
            kind,
            key,
            body,
        } => {
            let mut p = child_path(parent, *kind);
            // Rules are created at their index; named objects in their collection.
            if let ChildKey::Index(i) = key {
                p.push(i.to_string());
            }
            (Method::POST, p, Some(&body.0))
        }
        ConfigChange::ReplaceChild {
            parent,
            kind,
            key,
            body,
            ..
        } => {
            let mut p = child_path(parent, *kind);
            p.push(key.to_string());
            (Method::PUT, p, Some(&body.0))
        }
        ConfigChange::DeleteChild { parent, kind, key } => {
            let mut p = child_path(parent, *kind);
            p.push(key.to_string());
            (Method::DELETE, p, None)
        }
    }
}

/// Reads what [`decide`] compares: every listing, the render's files present on the pod, the
/// configuration.
async fn read_running(
    calls: &Calls<'_>,
    render: &LoadedRender,
    report: &mut SyncReport,
) -> Result<RunningPod, SyncError> {
    let client = calls.client;
    let mut listed: BTreeMap<StorageKind, BTreeSet<String>> = BTreeMap::new();
    for kind in LISTED {
        let list = call!(calls, "list storage", 0, client.list_storage(kind))?;
        report.ops.total_api_operations += 1;
        listed.insert(
            kind,
            list.into_iter().filter_map(|f| f.storage_name).collect(),
        );
    }
    let mut files: BTreeMap<(StorageKind, String), Stored> = listed
        .iter()
        .flat_map(|(kind, names)| names.iter().map(|n| ((*kind, n.clone()), Stored::Listed)))
        .collect();
    for (kind, name) in read_plan(&listed, render) {
        match read_stored(calls, kind, &name).await {
            Ok(stored) => {
                files.insert((kind, name), stored);
            }
            // Deleted between the listing and the read: missing.
            Err(SyncError::Dataplane {
                source: DataplaneError::NotFound { .. },
                ..
            }) => {
                files.remove(&(kind, name));
            }
            Err(e) => return Err(e),
        }
    }
    let config = call!(calls, "read configuration", 0, client.raw_configuration())?;
    report.ops.total_api_operations += 1;
    Ok(RunningPod { config, files })
}

/// One stored file as its kind allows: raw content, certificate metadata, or CA entries.
async fn read_stored(
    calls: &Calls<'_>,
    kind: StorageKind,
    name: &str,
) -> Result<Stored, SyncError> {
    let client = calls.client;
    Ok(match kind {
        StorageKind::Map | StorageKind::General => Stored::Content(call!(
            calls,
            "read file",
            0,
            client.get_storage_file(kind, name)
        )?),
        StorageKind::SslCertificate => Stored::Certificate(Box::new(call!(
            calls,
            "read certificate",
            0,
            client.ssl_certificate_info(name)
        )?)),
        StorageKind::CaFile => {
            let info = call!(calls, "read ca file", 0, client.ca_file_info(name))?;
            let count = info.certificate_count();
            let mut entries = Vec::new();
            if let Some(n) = count.filter(|n| *n <= MAX_CA_ENTRIES_READ) {
                for index in 1..=n {
                    entries.push(call!(
                        calls,
                        "read ca file entry",
                        0,
                        client.ca_file_entry(name, index)
                    )?);
                }
            }
            Stored::CaFile(CaFileEntries { count, entries })
        }
    })
}

fn render_content<'r>(render: &'r LoadedRender, path: &str) -> &'r [u8] {
    render
        .files
        .iter()
        .find(|f| f.path == path)
        .map_or(&[][..], |f| f.content.as_slice())
}

/// Writes one file: a create (`exists` false) or a replace; a create answered 409 is replaced
/// and a replace answered 404 is created. Returns the outcome and whether it replaced.
async fn write_file(
    calls: &Calls<'_>,
    kind: StorageKind,
    name: &str,
    content: &[u8],
    exists: bool,
    skip_reload: bool,
) -> Result<(StorageWriteOutcome, bool), SyncError> {
    let client = calls.client;
    let opts = StorageWriteOptions {
        skip_reload,
        ..StorageWriteOptions::default()
    };
    let first = {
        let _permit = calls.permits.acquire().await;
        if exists {
            client.replace_storage_file(kind, name, content, opts).await
        } else {
            client.create_storage_file(kind, name, content, opts).await
        }
    };
    match first {
        Ok(outcome) => Ok((outcome, exists)),
        Err(DataplaneError::AlreadyExists { .. }) if !exists => call!(
            calls,
            "replace file",
            0,
            client.replace_storage_file(kind, name, content, opts)
        )
        .map(|o| (o, true)),
        Err(DataplaneError::NotFound { .. }) if exists => call!(
            calls,
            "upload file",
            0,
            client.create_storage_file(kind, name, content, opts)
        )
        .map(|o| (o, false)),
        Err(source) => Err(SyncError::Dataplane {
            step: if exists {
                "replace file"
            } else {
                "upload file"
            },
            source,
            conflict_retries: 0,
        }),
    }
}

/// Pushes the render's configuration at `version`; a 409 re-reads the version (from the answer,
/// else `GET .../version`: after a failed reload the raw file can show an older version than
/// the API's in-memory one, ecosystem.md A.3) and retries, bounded. Waits for its reload.
async fn push_config(
    calls: &Calls<'_>,
    render: &LoadedRender,
    version: ConfigVersion,
    lease: &dyn LeaseGuard,
    limits: &SyncLimits,
    report: &mut SyncReport,
) -> Result<(), SyncError> {
    let client = calls.client;
    let mut retries = 0;
    let mut version = version;
    loop {
        if !lease.is_valid() {
            return Err(SyncError::LeaseLost);
        }
        let pushed = {
            let _permit = calls.permits.acquire().await;
            client
                .push_raw_configuration(&render.config, version, PushOptions::default())
                .await
        };
        report.ops.total_api_operations += 1;
        match pushed {
            Ok(outcome) => {
                report.changed = true;
                report.version_after = outcome.version_after.or(Some(ConfigVersion(version.0 + 1)));
                report.conflict_retries = retries;
                haptic_journal::crash_point!("deployer::after_raw_push");
                if let Some(id) = outcome.reload_id {
                    wait_reload(calls, &id, limits, retries).await?;
                    haptic_journal::crash_point!("deployer::after_reload");
                    report.reload_triggered = true;
                    report.reload_id = Some(id);
                }
                return Ok(());
            }
            Err(DataplaneError::Conflict { actual, .. })
                if retries < limits.max_conflict_retries =>
            {
                retries += 1;
                version = match actual {
                    Some(v) => v,
                    None => call!(
                        calls,
                        "read version",
                        retries,
                        client.configuration_version()
                    )?,
                };
            }
            Err(DataplaneError::Conflict { .. }) => {
                return Err(SyncError::ConflictsExhausted { retries });
            }
            Err(source) => {
                return Err(SyncError::Dataplane {
                    step: PUSH_STEP,
                    source,
                    conflict_retries: retries,
                });
            }
        }
    }
}

fn section(ops: &mut OperationCounts, kind: StorageKind) -> &mut haptic_journal::ChangeCounts {
    match kind {
        StorageKind::Map => &mut ops.maps,
        StorageKind::SslCertificate | StorageKind::CaFile => &mut ops.ssl_certs,
        StorageKind::General => &mut ops.general_files,
    }
}

async fn wait_reload(
    calls: &Calls<'_>,
    id: &ReloadId,
    limits: &SyncLimits,
    retries: u32,
) -> Result<(), SyncError> {
    // Polls are cheap GETs but still Dataplane requests: each holds a permit only while it runs.
    let deadline = tokio::time::Instant::now() + limits.reload_timeout;
    loop {
        let info = call!(
            calls,
            "poll reload",
            retries,
            calls.client.reload_status(id)
        )?;
        match info.status {
            crate::dataplane::ReloadStatus::Succeeded => return Ok(()),
            crate::dataplane::ReloadStatus::Failed => {
                return Err(SyncError::Dataplane {
                    step: "reload",
                    source: DataplaneError::ReloadFailed {
                        reload_id: id.clone(),
                        response: info.response.unwrap_or_default(),
                    },
                    conflict_retries: retries,
                });
            }
            _ => {}
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(SyncError::Dataplane {
                step: "reload",
                source: DataplaneError::ReloadTimeout {
                    reload_id: id.clone(),
                },
                conflict_retries: retries,
            });
        }
        tokio::time::sleep(limits.reload_poll_interval).await;
    }
}
