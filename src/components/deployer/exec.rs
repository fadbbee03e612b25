//! The requests of one sync ([`super::sync`]): reads of what the pod holds, each operation of a
//! plan, transactions, reload waits, and the journal commits of the pod-truth record that must
//! precede a write (the file intents; a transaction's id before its first change, `committing`
//! before its commit).

use std::collections::{BTreeMap, BTreeSet};

use haptic_journal::{
    ConfigVersion, EndpointTransaction, Op, ReloadId, TransactionState, UnixMillis,
};
use reqwest::Method;

use crate::dataplane::{
    DataplaneClient, DataplaneError, PushOptions, StorageKind, StorageWriteOptions,
    StorageWriteOutcome, Target, TransactionId,
};

use super::decide::{
    CaFileEntries, LoadedView, Operation, RunningPod, Stored, applied_at_runtime, is_loaded,
    read_plan, runtime_read_plan,
};
use super::ledger::PodLedger;
use super::retry::Attempt;
use super::structure::{ChildKey, ConfigChange};
use super::sync::{Calls, SyncError, SyncReport};
use crate::core::render::{JournaledFile, JournaledRender};

/// CA-file entries read at most per CA file. A pod reporting more is not read entry by entry:
/// the file then compares as different and is replaced on every sync (bounded reads over a
/// reload per sync for CA bundles of that size).
const MAX_CA_ENTRIES_READ: u32 = 256;

/// The step name of the raw configuration push in [`SyncError::Dataplane`].
pub(super) const PUSH_STEP: &str = "push configuration";

/// The storage listings a sync reads, in [`StorageKind`] order.
const LISTED: [StorageKind; 4] = [
    StorageKind::SslCertificate,
    StorageKind::CaFile,
    StorageKind::General,
    StorageKind::Map,
];

/// How one execution of a plan failed: what [`super::retry::next_step`] decides on, and the
/// error reported if it decides to fail.
#[derive(Debug)]
pub(super) struct Failure {
    pub(super) attempt: Attempt,
    pub(super) error: SyncError,
}

impl Failure {
    fn failed(error: SyncError) -> Failure {
        Failure {
            attempt: Attempt::Failed,
            error,
        }
    }
}

impl From<SyncError> for Failure {
    fn from(e: SyncError) -> Self {
        Failure::failed(e)
    }
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

/// Commits `ops` through the sync's journal.
async fn commit(calls: &Calls<'_>, ops: Vec<Op>) -> Result<(), SyncError> {
    calls.journal.commit(ops).await.map_err(SyncError::Journal)
}

/// Lists the pod's transactions and deletes every one (module doc of [`super::sync`]: the pods
/// are ours by selection, so every transaction listed is ours); the ledger forgets its own.
/// Returns how many were deleted.
pub(super) async fn delete_transactions(
    calls: &Calls<'_>,
    ledger: &mut PodLedger,
) -> Result<u32, SyncError> {
    let mut deleted = 0;
    for t in list_transactions(calls).await? {
        call!(
            calls,
            "delete transaction",
            0,
            calls.client.delete_transaction(&t.id)
        )?;
        tracing::info!(txn_id = %t.id, status = t.status.as_deref().unwrap_or("unknown"), "left-over transaction deleted");
        deleted += 1;
    }
    ledger.transaction = None;
    Ok(deleted)
}

/// The pod's transactions that are not committed (`GET .../transactions`, those whose status
/// is not `success`): what [`delete_transactions`] deletes.
pub(super) async fn list_transactions(
    calls: &Calls<'_>,
) -> Result<Vec<crate::dataplane::TransactionInfo>, SyncError> {
    let listed = call!(calls, "list transactions", 0, calls.client.transactions())?;
    Ok(listed
        .into_iter()
        .filter(|t| t.status.as_deref() != Some("success"))
        .collect())
}

/// `GET .../configuration/version`.
pub(super) async fn read_version(
    calls: &Calls<'_>,
    retries: u32,
) -> Result<ConfigVersion, SyncError> {
    call!(
        calls,
        "read version",
        retries,
        calls.client.configuration_version()
    )
}

/// Reads what [`super::decide::plan`] compares: every listing, the render's files present on
/// the pod, the configuration, and the runtime views of the files [`runtime_read_plan`] lists.
pub(super) async fn read_running(
    calls: &Calls<'_>,
    render: &JournaledRender,
    record: Option<&haptic_journal::EndpointFiles>,
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
    let mut running = RunningPod {
        config,
        files,
        loaded: BTreeMap::new(),
    };
    let views = runtime_read_plan(&running, render, record);
    if !views.is_empty() {
        // A reload queued or running on the pod (one a killed or timed-out sync of ours left,
        // or another writer's) may be about to load these files: let it finish before asking
        // HAProxy what it loaded, rather than reload again.
        wait_for_pending_reloads(calls, report).await?;
    }
    for (key, file) in views {
        let view = read_loaded(calls, file).await?;
        running.loaded.insert(key, view);
    }
    Ok(running)
}

/// Waits, bounded by `reload_timeout`, until the pod lists no reload in progress; past the
/// bound the sync goes on (what HAProxy reports loaded then decides).
async fn wait_for_pending_reloads(
    calls: &Calls<'_>,
    report: &mut SyncReport,
) -> Result<(), SyncError> {
    let deadline = tokio::time::Instant::now() + calls.limits.reload_timeout;
    loop {
        let listed = call!(calls, "list reloads", 0, calls.client.reloads())?;
        report.ops.total_api_operations += 1;
        let pending = listed
            .iter()
            .any(|r| r.status == crate::dataplane::ReloadStatus::InProgress);
        if !pending || tokio::time::Instant::now() >= deadline {
            return Ok(());
        }
        tokio::time::sleep(calls.limits.reload_poll_interval).await;
    }
}

/// What HAProxy reports loaded for one file (404: nothing under that name).
async fn read_loaded(calls: &Calls<'_>, file: &JournaledFile) -> Result<LoadedView, SyncError> {
    let client = calls.client;
    let name = file.name();
    let read = match file.storage() {
        StorageKind::Map => call!(
            calls,
            "read loaded map",
            0,
            client.runtime_map_entries(name)
        )
        .map(LoadedView::MapEntries),
        StorageKind::SslCertificate => call!(
            calls,
            "read loaded certificate",
            0,
            client.runtime_certificate(name)
        )
        .map(|c| LoadedView::Certificate(Box::new(c))),
        StorageKind::General => call!(
            calls,
            "read loaded crt-list",
            0,
            client.runtime_crt_list_entries(name)
        )
        .map(LoadedView::CrtList),
        StorageKind::CaFile => Ok(LoadedView::Absent),
    };
    match read {
        Err(SyncError::Dataplane {
            source: DataplaneError::NotFound { .. },
            ..
        }) => Ok(LoadedView::Absent),
        other => other,
    }
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

fn render_file<'r>(render: &'r JournaledRender, path: &str) -> Option<&'r JournaledFile> {
    render.files.iter().find(|f| f.path == path)
}

/// Runs one plan's operations in order (module doc of [`super::sync`]). Before the first write
/// the file intents are journaled; files the plan found loaded are recorded so.
pub(super) async fn execute(
    calls: &Calls<'_>,
    render: &JournaledRender,
    running: &RunningPod,
    ops: &[Operation],
    ledger: &mut PodLedger,
    report: &mut SyncReport,
) -> Result<(), Failure> {
    let client = calls.client;
    let mut intents = false;
    for f in &render.files {
        let key = (f.storage(), f.name().to_owned());
        let written = ops.iter().any(|op| {
            matches!(op, Operation::UploadFile { path, .. } | Operation::ReplaceFile { path, .. } if *path == f.path)
        });
        if written {
            ledger.before_write(f, running.files.get(&key));
            intents = true;
        } else if running.files.contains_key(&key) {
            if is_loaded(f, running, ledger.record()) {
                ledger.proved_loaded(f);
            } else {
                ledger.found_on_disk(f);
            }
        }
    }
    if intents {
        commit(calls, vec![Op::PutEndpointFiles(ledger.files.clone())]).await?;
    }
    // Reload IDs answered to writes that were to be applied at runtime but were not (202):
    // waited for after the configuration step, which the same reload agent batches with them.
    let mut pending_reloads: Vec<(ReloadId, Option<i64>, &JournaledFile)> = Vec::new();
    // Whether the last file write reloaded (answered a Reload-ID): a conditional reload is
    // then not needed.
    let mut write_reloaded = false;
    // The version the next runtime server update is conditional on.
    let mut next_version: Option<ConfigVersion> = None;
    for op in ops {
        if !calls.lease.is_valid() {
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
                let Some(file) = render_file(render, path) else {
                    continue;
                };
                let exists = matches!(op, Operation::ReplaceFile { .. });
                haptic_journal::crash_point!("deployer::before_storage_upload");
                let (outcome, replaced) =
                    write_file(calls, *kind, name, file, exists, *skip_reload).await?;
                haptic_journal::crash_point!("deployer::after_storage_write");
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
                    (false, None) if applied_at_runtime(*kind) => ledger.applied_at_runtime(file),
                    (false, Some(id)) if applied_at_runtime(*kind) => {
                        pending_reloads.push((id, outcome.answered_at, file));
                    }
                    (false, Some(id)) => {
                        // Loads every file on disk, the skipped ones too.
                        wait_reload(calls, &id, outcome.answered_at, report.conflict_retries)
                            .await?;
                        ledger.reloaded();
                        report.reload_triggered = true;
                        report.reload_id = Some(id);
                        write_reloaded = true;
                    }
                    (false, None) => {}
                    (true, id) => {
                        if let Some(id) = id {
                            pending_reloads.push((id, outcome.answered_at, file));
                        }
                    }
                }
            }
            Operation::Reload {
                unless_reloaded: true,
                ..
            } if write_reloaded => {}
            Operation::PushRawConfig { version, .. } | Operation::Reload { version, .. } => {
                push_attempt(calls, render, *version, ledger, report).await?;
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
                    Err(DataplaneError::Conflict { .. }) => {
                        return Err(conflict("update server", report.conflict_retries));
                    }
                    Err(source) => {
                        return Err(fine_grained("update server", source, report));
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
                    wait_reload(calls, &id, outcome.answered_at, report.conflict_retries).await?;
                    ledger.reloaded();
                    report.reload_triggered = true;
                    report.reload_id = Some(id);
                }
            }
            Operation::Transaction {
                version, changes, ..
            } => {
                transaction(calls, *version, changes, ledger, report).await?;
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
                        ledger.deleted(*kind, name);
                    }
                    Err(DataplaneError::NotFound { .. }) => ledger.deleted(*kind, name),
                    Err(e) => tracing::warn!(file = %name, error = %e, "stale file not deleted"),
                }
            }
        }
    }
    for (id, since, file) in pending_reloads {
        if report.reload_id.as_ref() != Some(&id) {
            wait_reload(calls, &id, since, report.conflict_retries).await?;
        }
        ledger.proved_loaded(file);
        report.reload_triggered = true;
    }
    Ok(())
}

fn conflict(step: &'static str, retries: u32) -> Failure {
    Failure {
        attempt: Attempt::Conflict,
        error: SyncError::Dataplane {
            step,
            source: DataplaneError::Conflict {
                expected: ConfigVersion(0),
                actual: None,
            },
            conflict_retries: retries,
        },
    }
}

fn fine_grained(step: &'static str, source: DataplaneError, report: &SyncReport) -> Failure {
    Failure {
        attempt: Attempt::FineGrainedFailed,
        error: SyncError::Dataplane {
            step,
            source,
            conflict_retries: report.conflict_retries,
        },
    }
}

/// Writes one file: a create (`exists` false) or a replace; a create answered 409 is replaced
/// and a replace answered 404 is created. Returns the outcome and whether it replaced. A
/// certificate the API cannot parse (500 "failed to parse certificate") is
/// [`SyncError::FileRejected`].
async fn write_file(
    calls: &Calls<'_>,
    kind: StorageKind,
    name: &str,
    file: &JournaledFile,
    exists: bool,
    skip_reload: bool,
) -> Result<(StorageWriteOutcome, bool), SyncError> {
    let client = calls.client;
    let content = file.content.as_slice();
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
    let (result, step, replaced) = match first {
        Ok(outcome) => return Ok((outcome, exists)),
        Err(DataplaneError::AlreadyExists { .. }) if !exists => {
            let _permit = calls.permits.acquire().await;
            (
                client.replace_storage_file(kind, name, content, opts).await,
                "replace file",
                true,
            )
        }
        Err(DataplaneError::NotFound { .. }) if exists => {
            let _permit = calls.permits.acquire().await;
            (
                client.create_storage_file(kind, name, content, opts).await,
                "upload file",
                false,
            )
        }
        Err(source) => (
            Err(source),
            if exists {
                "replace file"
            } else {
                "upload file"
            },
            exists,
        ),
    };
    match result {
        Ok(o) => Ok((o, replaced)),
        Err(DataplaneError::Server { status, message })
            if kind == StorageKind::SslCertificate
                && message
                    .to_ascii_lowercase()
                    .contains("failed to parse certificate") =>
        {
            Err(SyncError::FileRejected {
                path: file.path.clone(),
                status,
                message,
            })
        }
        Err(source) => Err(SyncError::Dataplane {
            step,
            source,
            conflict_retries: 0,
        }),
    }
}

/// Pushes the render's configuration at `version` as one attempt: a 409 re-reads the version
/// (from the answer, else `GET .../version`: after a failed reload the raw file can show an
/// older version than the API's in-memory one) and retries, bounded; a 400/422 is
/// [`Attempt::PushRejected`]; an unconfirmed reload [`Attempt::ReloadUnknown`]. Its reload
/// loads every file on disk.
pub(super) async fn push_attempt(
    calls: &Calls<'_>,
    render: &JournaledRender,
    version: ConfigVersion,
    ledger: &mut PodLedger,
    report: &mut SyncReport,
) -> Result<(), Failure> {
    let client = calls.client;
    let mut retries = 0;
    let mut version = version;
    loop {
        if !calls.lease.is_valid() {
            return Err(SyncError::LeaseLost.into());
        }
        let pushed = {
            let _permit = calls.permits.acquire().await;
            client
                .push_raw_configuration(&render.config_text(), version, PushOptions::default())
                .await
        };
        report.ops.total_api_operations += 1;
        match pushed {
            Ok(outcome) => {
                report.changed = true;
                report.version_after = outcome.version_after.or(Some(ConfigVersion(version.0 + 1)));
                report.conflict_retries = report.conflict_retries.max(retries);
                haptic_journal::crash_point!("deployer::after_raw_push");
                if let Some(id) = outcome.reload_id {
                    wait_reload(calls, &id, outcome.answered_at, retries).await?;
                    haptic_journal::crash_point!("deployer::after_reload");
                    ledger.reloaded();
                    report.reload_triggered = true;
                    report.reload_id = Some(id);
                }
                return Ok(());
            }
            Err(DataplaneError::Conflict { actual, .. })
                if retries < calls.limits.max_conflict_retries =>
            {
                retries += 1;
                version = match actual {
                    Some(v) => v,
                    None => read_version(calls, retries).await?,
                };
            }
            Err(DataplaneError::Conflict { .. }) => {
                return Err(SyncError::ConflictsExhausted { retries }.into());
            }
            Err(DataplaneError::Rejected { status, message }) if matches!(status, 400 | 422) => {
                return Err(Failure {
                    attempt: Attempt::PushRejected,
                    error: SyncError::Dataplane {
                        step: PUSH_STEP,
                        source: DataplaneError::Rejected { status, message },
                        conflict_retries: retries,
                    },
                });
            }
            Err(source) => {
                return Err(SyncError::Dataplane {
                    step: PUSH_STEP,
                    source,
                    conflict_retries: retries,
                }
                .into());
            }
        }
    }
}

/// Aborts the transaction when dropped armed: a sync cancelled (timeout, drain) between the
/// start and the commit must not leave it open (dataplaneapi#339). The abort runs on the
/// runtime, bounded; its failure is logged. The journal keeps the transaction's record until an
/// answer is journaled, so a cancelled sync's transaction is also deleted by the next sync.
struct AbortGuard {
    client: DataplaneClient,
    id: Option<TransactionId>,
}

/// Bound of one abort (upstream: a fresh 5 s context).
const ABORT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

impl AbortGuard {
    /// Aborts now; `true` when the API answered (deleted, or already gone).
    async fn abort(&mut self) -> bool {
        match self.id.take() {
            Some(id) => abort(&self.client, &id).await,
            None => true,
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

async fn abort(client: &DataplaneClient, id: &TransactionId) -> bool {
    match tokio::time::timeout(ABORT_TIMEOUT, client.delete_transaction(id)).await {
        Ok(Ok(())) => {
            tracing::debug!(txn_id = %id, "transaction aborted");
            true
        }
        Ok(Err(e)) => {
            tracing::warn!(txn_id = %id, error = %e, "transaction abort failed");
            false
        }
        Err(_) => {
            tracing::warn!(txn_id = %id, "transaction abort timed out");
            false
        }
    }
}

/// Journals the transaction's state (before its first change, before its commit).
async fn journal_transaction(
    calls: &Calls<'_>,
    ledger: &mut PodLedger,
    record: EndpointTransaction,
) -> Result<(), SyncError> {
    ledger.transaction = Some(record.clone());
    commit(calls, vec![Op::PutEndpointTransaction(record)]).await
}

/// Ends the transaction's record in the ledger: gone when the API answered, unknown otherwise
/// (the next sync lists and deletes).
fn transaction_ended(ledger: &mut PodLedger, answered: bool) {
    if answered {
        ledger.transaction = None;
    } else if let Some(t) = ledger.transaction.as_mut() {
        t.state = TransactionState::Unknown;
    }
}

/// One configuration transaction: start at `version` (journaled before its first change),
/// apply `changes` in order, commit (journaled `committing` first), wait for the reload.
/// Aborted on every failure; a 409/406 is [`Attempt::Conflict`], a 429 at the start
/// [`Attempt::TooManyTransactions`], any other failure [`Attempt::FineGrainedFailed`].
async fn transaction(
    calls: &Calls<'_>,
    version: ConfigVersion,
    changes: &[ConfigChange],
    ledger: &mut PodLedger,
    report: &mut SyncReport,
) -> Result<(), Failure> {
    let client = calls.client;
    let retries = report.conflict_retries;
    let started = {
        let _permit = calls.permits.acquire().await;
        client.start_transaction(version).await
    };
    report.ops.total_api_operations += 1;
    let txn = match started {
        Ok(t) => t,
        Err(DataplaneError::Conflict { .. }) => return Err(conflict("start transaction", retries)),
        Err(source @ DataplaneError::TooManyRequests { .. }) => {
            return Err(Failure {
                attempt: Attempt::TooManyTransactions,
                error: SyncError::Dataplane {
                    step: "start transaction",
                    source,
                    conflict_retries: retries,
                },
            });
        }
        Err(source) => return Err(fine_grained("start transaction", source, report)),
    };
    let mut guard = AbortGuard {
        client: client.clone(),
        id: Some(txn.id.clone()),
    };
    let record = EndpointTransaction {
        endpoint: ledger.files.endpoint.clone(),
        pod: ledger.files.pod.clone(),
        id: txn.id.clone(),
        version,
        state: TransactionState::Open,
        started_at: UnixMillis::now(),
    };
    if let Err(e) = journal_transaction(calls, ledger, record.clone()).await {
        let answered = guard.abort().await;
        transaction_ended(ledger, answered);
        return Err(e.into());
    }
    haptic_journal::crash_point!("deployer::after_transaction_started");
    for change in changes {
        if !calls.lease.is_valid() {
            let answered = guard.abort().await;
            transaction_ended(ledger, answered);
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
            let answered = guard.abort().await;
            transaction_ended(ledger, answered);
            return Err(fine_grained("apply configuration change", e, report));
        }
        haptic_journal::crash_point!("deployer::after_transaction_change");
    }
    if !calls.lease.is_valid() {
        let answered = guard.abort().await;
        transaction_ended(ledger, answered);
        return Err(SyncError::LeaseLost.into());
    }
    let committing = EndpointTransaction {
        state: TransactionState::Committing,
        ..record
    };
    if let Err(e) = journal_transaction(calls, ledger, committing).await {
        let answered = guard.abort().await;
        transaction_ended(ledger, answered);
        return Err(e.into());
    }
    haptic_journal::crash_point!("deployer::before_transaction_commit");
    let committed = {
        let _permit = calls.permits.acquire().await;
        client.commit_transaction(&txn.id, version).await
    };
    report.ops.total_api_operations += 1;
    let outcome = match committed {
        Ok(o) => {
            guard.id = None;
            ledger.transaction = None;
            o
        }
        Err(DataplaneError::Conflict { .. }) => {
            // 409 (a raw push moved the version: the transaction stays in progress) or 406
            // (outdated): delete it, plan again.
            let answered = guard.abort().await;
            transaction_ended(ledger, answered);
            return Err(conflict("commit transaction", retries));
        }
        Err(e) => {
            let answered = guard.abort().await;
            transaction_ended(ledger, answered);
            return Err(fine_grained("commit transaction", e, report));
        }
    };
    report.changed = true;
    report.version_after = outcome.version_after.or(Some(ConfigVersion(version.0 + 1)));
    if let Some(id) = outcome.reload_id {
        wait_reload(calls, &id, outcome.answered_at, retries).await?;
        ledger.reloaded();
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

fn section(
    ops: &mut haptic_journal::OperationCounts,
    kind: StorageKind,
) -> &mut haptic_journal::ChangeCounts {
    match kind {
        StorageKind::Map => &mut ops.maps,
        StorageKind::SslCertificate | StorageKind::CaFile => &mut ops.ssl_certs,
        StorageKind::General => &mut ops.general_files,
    }
}

/// Waits for a reload a write scheduled (module doc of [`super::sync`]): `since` is the write
/// answer's `Date` (unix seconds, the pod's clock); a success older than it, or an id the API
/// does not know (404), is [`Attempt::ReloadUnknown`]; a failed reload and a wait past
/// `reload_timeout` are failures.
async fn wait_reload(
    calls: &Calls<'_>,
    id: &ReloadId,
    since: Option<i64>,
    retries: u32,
) -> Result<(), Failure> {
    let unknown = |why| Failure {
        attempt: Attempt::ReloadUnknown,
        error: SyncError::ReloadUnknown {
            reload_id: id.clone(),
            why,
        },
    };
    // Polls are cheap GETs but still Dataplane requests: each holds a permit only while it runs.
    let deadline = tokio::time::Instant::now() + calls.limits.reload_timeout;
    loop {
        let polled = {
            let _permit = calls.permits.acquire().await;
            calls.client.reload_status(id).await
        };
        let info = match polled {
            Ok(info) => info,
            Err(DataplaneError::NotFound { .. }) => return Err(unknown("unknown to the api")),
            Err(source) => {
                return Err(SyncError::Dataplane {
                    step: "poll reload",
                    source,
                    conflict_retries: retries,
                }
                .into());
            }
        };
        match info.status {
            crate::dataplane::ReloadStatus::Succeeded => {
                return match (since, info.reload_timestamp) {
                    (Some(since), Some(at)) if at < since => {
                        Err(unknown("answer older than the write"))
                    }
                    (Some(_), None) => Err(unknown("answer without a reload time")),
                    _ => Ok(()),
                };
            }
            crate::dataplane::ReloadStatus::Failed => {
                return Err(SyncError::Dataplane {
                    step: "reload",
                    source: DataplaneError::ReloadFailed {
                        reload_id: id.clone(),
                        response: info.response.unwrap_or_default(),
                    },
                    conflict_retries: retries,
                }
                .into());
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
            }
            .into());
        }
        tokio::time::sleep(calls.limits.reload_poll_interval).await;
    }
}
