//! One endpoint's sync through the Dataplane API v3: aux files first, then the raw
//! configuration with its version, reload polling, then removal of files no longer referenced.
//!
//! One reload per sync: when the configuration changes, files are written with
//! `skip_reload=true`, so HAProxy never runs the new files with the old configuration, and the
//! raw push that follows does the single reload. When only files changed (the configuration is
//! already the render's), all but the last write skip the reload and the last one reloads; when
//! that write needs no reload (a certificate the configuration does not name) or files are on
//! disk but not yet loaded, the same configuration is pushed again at the current version, the
//! API's way to reload everything on disk (ecosystem.md A.2). Files no longer referenced are
//! deleted last, with `skip_reload=true` (nothing running names them).
//!
//! Idempotent by comparison: every file and the configuration are read back and compared before
//! any write (the configuration ignoring the Dataplane's `# _version` / `# _md5hash` header
//! lines), so a pod that already runs the render gets no write and no reload.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use haptic_journal::{AuxKind, Checksum, ConfigVersion, OperationCounts, ReloadId};
use tokio::sync::Semaphore;

use crate::dataplane::{
    DataplaneClient, DataplaneError, PushOptions, StorageKind, StorageWriteOptions,
    raw_configs_equal,
};

use crate::core::guard::LeaseGuard;

/// One auxiliary file of the render being deployed.
#[derive(Clone, Debug)]
pub struct LoadedFile {
    /// Kind.
    pub kind: AuxKind,
    /// Path in the render (`maps/hosts.map`).
    pub path: String,
    /// Blob key (sha256 of the content).
    pub blob: Checksum,
    /// Content.
    pub content: Vec<u8>,
}

impl LoadedFile {
    /// The Dataplane storage this file goes to.
    #[must_use]
    pub fn storage(&self) -> StorageKind {
        StorageKind::from(self.kind)
    }

    /// The storage name (base name of the path).
    #[must_use]
    pub fn name(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or(&self.path)
    }
}

/// The render being deployed, loaded from the journal's blobs.
#[derive(Clone, Debug)]
pub struct LoadedRender {
    /// Render checksum.
    pub checksum: Checksum,
    /// `haproxy.cfg`.
    pub config: String,
    /// Auxiliary files.
    pub files: Vec<LoadedFile>,
}

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
#[derive(Clone, Debug, Default)]
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
    /// What differed (`config`, `file maps/x.map`), for drift reports.
    pub differed: Vec<String>,
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
}

impl SyncError {
    /// Whether a later retry may help (bounded backoff); permanent errors wait for a new render.
    #[must_use]
    pub fn retryable(&self) -> bool {
        match self {
            SyncError::Dataplane { source, .. } => {
                matches!(
                    source.kind(),
                    crate::core::ErrorKind::Retryable | crate::core::ErrorKind::Conflict
                ) || matches!(source, DataplaneError::ReloadFailed { .. })
            }
            SyncError::ConflictsExhausted { .. } | SyncError::Timeout(_) => true,
            SyncError::LeaseLost => false,
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

fn storage_kinds() -> [StorageKind; 4] {
    [
        StorageKind::Map,
        StorageKind::General,
        StorageKind::SslCertificate,
        StorageKind::CaFile,
    ]
}

/// Syncs one endpoint to `render`. `previous` maps render paths to the blobs the endpoint ran
/// before (from the journal), used where the API cannot return a file's content (certificates
/// and CA files: compared by size and the journaled blob).
///
/// # Errors
/// [`SyncError`]; `retryable()` tells the scheduler whether to back off and retry.
///
/// # Cancel safety
/// Dropping the future stops between or inside HTTP requests; a write that reached the pod is
/// found equal by the next sync's comparison, so nothing is applied twice. A file written with
/// `skip_reload` but not yet loaded (cancelled before the push) differs from `previous`, so the
/// next sync still does the reload.
pub async fn sync_endpoint(
    client: &DataplaneClient,
    render: &LoadedRender,
    previous: &BTreeMap<String, Checksum>,
    permits: &Arc<Semaphore>,
    lease: &dyn LeaseGuard,
    limits: &SyncLimits,
) -> Result<SyncReport, SyncError> {
    let calls = Calls { client, permits };
    let mut report = SyncReport::default();
    let mut reloads: Vec<ReloadId> = Vec::new();
    let mut reload_needed = false;

    // 1. What the pod stores now.
    let mut stored: HashMap<StorageKind, BTreeMap<String, Option<i64>>> = HashMap::new();
    for kind in storage_kinds() {
        let list = call!(calls, "list storage", 0, client.list_storage(kind))?;
        report.ops.total_api_operations += 1;
        let names = list
            .into_iter()
            .filter_map(|f| f.storage_name.map(|n| (n, f.size)))
            .collect();
        stored.insert(kind, names);
    }

    // 2. Which files differ (compared before any write).
    let mut to_write: Vec<(&LoadedFile, bool)> = Vec::new();
    for file in &render.files {
        let kind = file.storage();
        let name = file.name();
        let existing = stored.get(&kind).and_then(|m| m.get(name)).copied();
        let equal = match existing {
            None => false,
            Some(size) => match kind {
                StorageKind::Map | StorageKind::General => {
                    let body = call!(calls, "read file", 0, client.get_storage_file(kind, name))?;
                    body == file.content
                }
                StorageKind::SslCertificate | StorageKind::CaFile => {
                    size == Some(file.content.len() as i64)
                        && previous.get(&file.path) == Some(&file.blob)
                }
            },
        };
        if equal {
            // Stored but maybe never loaded: a sync cancelled between its `skip_reload` writes
            // and its reload leaves the file on disk while the endpoint's journaled render
            // still names the older blob. Reload so it takes effect.
            if previous.get(&file.path).is_some_and(|b| *b != file.blob) {
                reload_needed = true;
            }
            continue;
        }
        to_write.push((file, existing.is_some()));
    }

    // 3. The configuration as the pod runs it decides which request reloads (module doc).
    let first_read = call!(calls, "read configuration", 0, client.raw_configuration())?;
    let config_differs = !raw_configs_equal(&first_read.text, &render.config);
    let mut first_read = Some(first_read);

    // 4. Upload changed files before the configuration that needs them, with `skip_reload`;
    //    with the configuration unchanged the last write reloads instead of the push.
    let count = to_write.len();
    let mut skipped_any = false;
    for (i, (file, exists)) in to_write.into_iter().enumerate() {
        let (kind, name) = (file.storage(), file.name());
        if !lease.is_valid() {
            return Err(SyncError::LeaseLost);
        }
        let reload_here = !config_differs && i + 1 == count;
        let opts = StorageWriteOptions {
            skip_reload: !reload_here,
            ..StorageWriteOptions::default()
        };
        let outcome = if exists {
            call!(
                calls,
                "replace file",
                0,
                client.replace_storage_file(kind, name, &file.content, opts)
            )?
        } else {
            call!(
                calls,
                "upload file",
                0,
                client.create_storage_file(kind, name, &file.content, opts)
            )?
        };
        let counts = section(&mut report.ops, file.kind);
        if exists {
            counts.modified += 1;
        } else {
            counts.added += 1;
        }
        report.ops.total_api_operations += 1;
        report.changed = true;
        report.differed.push(format!("file {}", file.path));
        match (reload_here, outcome.reload_id) {
            (true, Some(id)) => {
                // Loads every file on disk, the skipped ones too.
                wait_reload(&calls, &id, limits, 0).await?;
                report.reload_triggered = true;
                report.reload_id = Some(id);
                reload_needed = false;
                skipped_any = false;
            }
            // Taken in without a reload (e.g. a certificate the configuration does not name):
            // earlier skipped writes still need one, from the push below.
            (true, None) => {}
            // An API that reloads despite `skip_reload` (certificate POST before v3.2): waited
            // for after the push, which the same reload agent batches with it.
            (false, id) => {
                skipped_any = true;
                reloads.extend(id);
            }
        }
    }
    reload_needed |= skipped_any;

    // 5. The configuration, conditional on its version; 409 = re-read and retry (bounded).
    //    Pushed unchanged when files still need a reload: the API's one way to reload them all.
    let mut retries = 0;
    let mut version_override: Option<ConfigVersion> = None;
    loop {
        let current = match first_read.take() {
            Some(c) => c,
            None => call!(
                calls,
                "read configuration",
                retries,
                client.raw_configuration()
            )?,
        };
        report.ops.total_api_operations += 1;
        let config_equal = raw_configs_equal(&current.text, &render.config);
        if config_equal && !reload_needed {
            report.version_after = Some(current.version);
            break;
        }
        if !lease.is_valid() {
            return Err(SyncError::LeaseLost);
        }
        let pushed = {
            let _permit = calls.permits.acquire().await;
            client
                .push_raw_configuration(
                    &render.config,
                    version_override.unwrap_or(current.version),
                    PushOptions::default(),
                )
                .await
        };
        report.ops.total_api_operations += 1;
        match pushed {
            Ok(outcome) => {
                report.changed = true;
                if !config_equal {
                    report.differed.push("config".to_owned());
                }
                report.version_after = outcome
                    .version_after
                    .or(Some(ConfigVersion(current.version.0 + 1)));
                report.conflict_retries = retries;
                if let Some(id) = outcome.reload_id {
                    wait_reload(&calls, &id, limits, retries).await?;
                    report.reload_triggered = true;
                    report.reload_id = Some(id);
                }
                for id in reloads.drain(..) {
                    if report.reload_id.as_ref() != Some(&id) {
                        wait_reload(&calls, &id, limits, retries).await?;
                    }
                    report.reload_triggered = true;
                }
                break;
            }
            Err(DataplaneError::Conflict { actual, .. })
                if retries < limits.max_conflict_retries =>
            {
                // Re-read the version: after a failed reload the raw file can show an older
                // version than the API's in-memory one (ecosystem.md A.3).
                retries += 1;
                version_override = Some(match actual {
                    Some(v) => v,
                    None => call!(
                        calls,
                        "read version",
                        retries,
                        client.configuration_version()
                    )?,
                });
            }
            Err(DataplaneError::Conflict { .. }) => {
                return Err(SyncError::ConflictsExhausted { retries });
            }
            Err(source) => {
                return Err(SyncError::Dataplane {
                    step: "push configuration",
                    source,
                    conflict_retries: retries,
                });
            }
        }
    }
    report.conflict_retries = retries;
    for id in reloads.drain(..) {
        if report.reload_id.as_ref() != Some(&id) {
            wait_reload(&calls, &id, limits, retries).await?;
        }
        report.reload_triggered = true;
    }

    // 6. Files the render no longer references, once the configuration is live. Certificates
    //    and CA files share one directory, so they are matched against both kinds.
    let mut wanted: HashMap<StorageKind, BTreeSet<&str>> = HashMap::new();
    for f in &render.files {
        wanted.entry(f.storage()).or_default().insert(f.name());
    }
    let certs: BTreeSet<&str> = [StorageKind::SslCertificate, StorageKind::CaFile]
        .iter()
        .filter_map(|k| wanted.get(k))
        .flatten()
        .copied()
        .collect();
    for (kind, names) in &stored {
        for name in names.keys() {
            let keep = match kind {
                StorageKind::SslCertificate | StorageKind::CaFile => certs.contains(name.as_str()),
                _ => wanted.get(kind).is_some_and(|w| w.contains(name.as_str())),
            };
            if keep {
                continue;
            }
            if !lease.is_valid() {
                return Err(SyncError::LeaseLost);
            }
            let _permit = calls.permits.acquire().await;
            let opts = StorageWriteOptions {
                skip_reload: true,
                ..StorageWriteOptions::default()
            };
            match client.delete_storage_file(*kind, name, opts).await {
                Ok(_) => {
                    report.changed = true;
                    report.ops.total_api_operations += 1;
                    report.differed.push(format!("stale file {name}"));
                }
                Err(DataplaneError::NotFound { .. }) => {}
                Err(e) => tracing::warn!(file = %name, error = %e, "stale file not deleted"),
            }
        }
    }
    Ok(report)
}

fn section(ops: &mut OperationCounts, kind: AuxKind) -> &mut haptic_journal::ChangeCounts {
    match kind {
        AuxKind::Map => &mut ops.maps,
        AuxKind::Ssl | AuxKind::Ca => &mut ops.ssl_certs,
        AuxKind::General | AuxKind::CrtList => &mut ops.general_files,
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
