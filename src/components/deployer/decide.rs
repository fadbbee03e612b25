//! The deployer's pure decision: what differs on one pod, as the Dataplane operations that make
//! it run the render, in the order the sync applies them.
//!
//! ```text
//!  RunningPod (what the pod reports)  ─┐
//!  LoadedRender (what it should run)  ─┼─► decide ─► Vec<Operation>
//!  KnownRun (what this journal last    ┘     1. UploadFile / ReplaceFile  (skip_reload, certificates,
//!   recorded it running; may be None)           CA files, general files, maps)
//!                                            2. PushRawConfig{version} | Reload{version}  (at most one)
//!                                            3. DeleteFile  (files the render no longer names)
//! ```
//!
//! Every comparison is against what the pod holds, never against which journal wrote it, so a
//! restarted leader, a new leader with an empty journal and a rebuilt journal decide alike:
//! - maps and general files (crt-lists too) by content;
//! - certificates, whose content the API does not return, by the metadata it does
//!   ([`SslCertificateInfo`]): as upstream, the leaf's serial and the set of issuers, falling
//!   back to the SHA-256 fingerprint when the pod reports no serial; every other identifier the
//!   pod reports (the size, a fingerprint next to the serial) must agree too. The render's side
//!   is computed from its PEM ([`crate::dataplane::cert`]);
//! - CA files by their entries (`count`, then each certificate's serial, issuer and SHA-1
//!   fingerprint as HAProxy's runtime reports them), matched in any order;
//! - the configuration structurally ([`structure::equal`]: sections and the objects in them;
//!   comments, layout, the API's header lines and orderings HAProxy ignores never count),
//!   never by version alone.
//!
//! How a configuration difference is applied ([`SyncPolicy`], in priority order, as upstream
//! does, plus the unmodelled case):
//! 1. the pod is at configuration version 1 (fresh): one raw push, [`SyncMode::RawInitial`];
//! 2. the difference touches something [`structure`] does not model: one raw push,
//!    [`SyncMode::RawUnmodelled`] (never a guessed model);
//! 3. more changes than `raw_push_threshold` (> 0): one raw push, [`SyncMode::RawThreshold`];
//! 4. only updates of existing servers in fields the real Dataplane API applies at runtime
//!    (weight, address, port, maintenance, agent, health-check port), and no file to write or
//!    load: one [`Operation::UpdateServer`] each, outside a transaction, [`SyncMode::Runtime`]
//!    (the API answers 200 and does not reload; whether it does is its rule, not ours);
//! 5. anything else: one [`Operation::Transaction`] with the changes in apply order (deletes
//!    children first, creates parents first, then updates) and exactly one reload at commit,
//!    [`SyncMode::FineGrained`]. Files written before it with `skip_reload` are loaded by that
//!    reload, so a render that changes files and servers makes one reload and no pod serves the
//!    new files with the old servers.
//!
//! A failed fine-grained attempt falls back to [`fallback`] (one raw push,
//! [`SyncMode::RawFallback`]); that is the executor's to call.
//!
//! A pod that reports nothing to compare a certificate by gets it uploaded again (the safe side).
//!
//! One reload per render, and never the new files with the old configuration: when the
//! configuration differs, every file write skips the reload and the [`Operation::PushRawConfig`]
//! that follows loads them all. When only files differ, all writes but the last skip the reload
//! and the last one reloads (no configuration push); a trailing [`Operation::Reload`] with
//! `unless_reloaded` covers the case where that write needed no reload (a certificate taken in
//! at runtime) while earlier ones did. [`KnownRun`] is used for one thing only: a file the pod
//! holds with the render's content that this journal last saw the pod run with other content may
//! be on disk but never loaded (a sync stopped between a `skip_reload` write and its reload), so
//! it gets a reload; when the pod already runs the render's configuration and that differs from
//! the known one, the push that put it there came after the files and loaded them.
//! Without a known run (a new leader, a rebuilt journal) files on disk are taken as loaded.
//!
//! Pure: no I/O, no clock, no randomness.

use std::collections::{BTreeMap, BTreeSet};

use haptic_journal::{AuxKind, Checksum, ConfigVersion, OperationCounts, SyncMode};

use super::structure::{
    self, ChildKind, ConfigChange, ConfigDiff, ObjectBody, ParentKind, ParsedConfig,
};
use crate::dataplane::cert::{self, PemSummary};
use crate::dataplane::{RawConfiguration, SslCertificateInfo, StorageKind};

/// One auxiliary file of the render being deployed.
#[derive(Clone, Debug, PartialEq, Eq)]
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
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadedRender {
    /// Render checksum.
    pub checksum: Checksum,
    /// Blob key of `haproxy.cfg` (sha256 of its bytes).
    pub config_blob: Checksum,
    /// `haproxy.cfg`.
    pub config: String,
    /// Auxiliary files.
    pub files: Vec<LoadedFile>,
}

/// What one stored file is, as the pod reports it.
#[derive(Clone, Debug, PartialEq)]
pub enum Stored {
    /// The raw bytes (`GET .../{maps,general}/{name}`).
    Content(Vec<u8>),
    /// Certificate metadata (`GET .../ssl_certificates/{name}`).
    Certificate(Box<SslCertificateInfo>),
    /// A CA file's count and entries (`GET .../runtime/ssl_ca_files/{name}` and
    /// `.../entries/{i}`).
    CaFile(CaFileEntries),
    /// Named by a listing and not read (not in the render: only its name matters).
    Listed,
}

/// What a pod reports about one CA file.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CaFileEntries {
    /// The count it reports (`3 certificate(s)` → 3), when it reports one.
    pub count: Option<u32>,
    /// Its certificates, as read (index 1 first).
    pub entries: Vec<SslCertificateInfo>,
}

/// What the pod reports, read by the sync before deciding.
#[derive(Clone, Debug, PartialEq)]
pub struct RunningPod {
    /// `GET .../configuration/raw`: the file on disk and its version.
    pub config: RawConfiguration,
    /// Every file the storage listings name, keyed by storage kind and stored name; the render's
    /// files read as [`read_plan`] says, the others [`Stored::Listed`].
    pub files: BTreeMap<(StorageKind, String), Stored>,
}

/// What this journal last recorded an endpoint running (`endpoint_applied` and the render it
/// names), if anything.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KnownRun {
    /// Blob key of that render's `haproxy.cfg`.
    pub config: Checksum,
    /// That render's files: path to blob key.
    pub files: BTreeMap<String, Checksum>,
}

/// Why a file is written.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FileReason {
    /// The pod does not store it.
    Missing,
    /// Its content differs (maps, general files).
    ContentDiffers,
    /// The size the pod reports differs from the render's.
    SizeDiffers {
        /// Bytes on the pod.
        stored: i64,
        /// Bytes in the render.
        wanted: usize,
    },
    /// The leaf's serial differs.
    SerialDiffers,
    /// The issuers differ.
    IssuersDiffer,
    /// A fingerprint the pod reports differs.
    FingerprintDiffers,
    /// A CA file's certificates differ (count, or an entry without a match).
    CaEntriesDiffer,
    /// The pod reports nothing to compare by (no serial, no fingerprint).
    NoIdentity,
    /// The render's PEM does not parse, so there is nothing to compare with.
    Unparsable,
    /// Listed but not read.
    Unread,
}

/// Why the configuration is pushed unchanged (a reload).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReloadReason {
    /// Files were written; the configuration is already the render's.
    FilesWritten,
    /// Files on disk with the render's content that may never have been loaded (module doc):
    /// their render paths.
    StoredNotLoaded {
        /// Render paths, sorted.
        paths: Vec<String>,
    },
}

/// One Dataplane operation of a sync, in the order [`decide`] returns them.
///
/// Today's operations are whole files and the whole raw configuration. The enum grows
/// (fine-grained configuration operations: servers, backends, transactions), so it is
/// `#[non_exhaustive]`: match with a wildcard arm outside this crate.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Operation {
    /// `POST .../{kind}`: store a file the pod lacks. A 409 (stored meanwhile) becomes a
    /// replace.
    UploadFile {
        /// Storage.
        kind: StorageKind,
        /// Stored name.
        name: String,
        /// Render path (where the content is).
        path: String,
        /// Why.
        reason: FileReason,
        /// Sent with `skip_reload=true` (every write but the last of a files-only change).
        skip_reload: bool,
    },
    /// `PUT .../{kind}/{name}`: replace a stored file that differs. A 404 (deleted meanwhile)
    /// becomes an upload.
    ReplaceFile {
        /// Storage.
        kind: StorageKind,
        /// Stored name.
        name: String,
        /// Render path (where the content is).
        path: String,
        /// Why.
        reason: FileReason,
        /// Sent with `skip_reload=true` (every write but the last of a files-only change).
        skip_reload: bool,
    },
    /// `POST .../configuration/raw?version=N`: the render's configuration, conditional on the
    /// version the pod reported; its reload loads every file written before it.
    PushRawConfig {
        /// The version the pod reported (409 when it moved: re-read, bounded retries).
        version: ConfigVersion,
        /// Why the whole configuration is pushed (a raw mode of [`SyncMode`]).
        mode: SyncMode,
    },
    /// `PUT .../backends/{backend}/servers/{name}?version=N` outside a transaction: an existing
    /// server whose changed fields the real Dataplane API applies through HAProxy's runtime API
    /// (200, no reload). The executor takes the version the pod reported for the first one and
    /// the version each answer reports for the next; a 409 re-reads the pod and decides again.
    UpdateServer {
        /// The backend.
        backend: String,
        /// The server's name.
        name: String,
        /// The render's `server` model (the whole object: the API replaces it).
        body: ObjectBody,
        /// The model fields that differ (sorted).
        changed_fields: Vec<String>,
    },
    /// `POST .../transactions?version=N`, every change with `transaction_id`, then
    /// `PUT .../transactions/{id}` (one reload). Aborted (`DELETE`) on every failure path.
    Transaction {
        /// The version the pod reported (409 when it moved: re-read and decide again).
        version: ConfigVersion,
        /// The changes, in apply order.
        changes: Vec<ConfigChange>,
    },
    /// The configuration is already the render's but files need loading: the same
    /// configuration is pushed at `version`, the API's way to reload everything on disk
    /// (ecosystem.md A.2).
    Reload {
        /// The version the pod reported.
        version: ConfigVersion,
        /// Why.
        reason: ReloadReason,
        /// Skipped when the last file write of this list already reloaded (its answer carried
        /// a `Reload-ID`).
        unless_reloaded: bool,
    },
    /// `DELETE .../{kind}/{name}` with `skip_reload`: a file the render no longer names, once
    /// the configuration that stops naming it is live. Failures are logged, not fatal.
    DeleteFile {
        /// Storage.
        kind: StorageKind,
        /// Stored name.
        name: String,
    },
}

impl Operation {
    /// True for the operations that reload HAProxy whatever the answers before them: a push, an
    /// unconditional reload, a file write without `skip_reload` (the API reloads, or takes the
    /// file in at runtime).
    #[must_use]
    pub fn reloads(&self) -> bool {
        match self {
            Operation::PushRawConfig { .. } | Operation::Transaction { .. } => true,
            Operation::UpdateServer { .. } => false,
            Operation::Reload {
                unless_reloaded, ..
            } => !unless_reloaded,
            Operation::UploadFile { skip_reload, .. }
            | Operation::ReplaceFile { skip_reload, .. } => !skip_reload,
            Operation::DeleteFile { .. } => false,
        }
    }

    /// A short description for drift reports (`file maps/x.map`, `config`, `stale file x`).
    #[must_use]
    pub fn describe(&self) -> String {
        match self {
            Operation::UploadFile { path, .. } | Operation::ReplaceFile { path, .. } => {
                format!("file {path}")
            }
            Operation::PushRawConfig { .. } => "config".to_owned(),
            Operation::UpdateServer { backend, name, .. } => format!("server {backend}/{name}"),
            Operation::Transaction { changes, .. } => {
                let what: Vec<String> = changes.iter().map(ConfigChange::describe).collect();
                format!("config: {}", what.join(", "))
            }
            Operation::Reload { .. } => "reload".to_owned(),
            Operation::DeleteFile { name, .. } => format!("stale file {name}"),
        }
    }
}

/// Which stored files the sync reads before deciding: the render's files that the listings
/// name, each as its kind needs (content, certificate metadata, CA entries). `listed` holds the
/// names of each listing.
///
/// Shape: sorted by (kind, name), no duplicates.
#[must_use]
pub fn read_plan(
    listed: &BTreeMap<StorageKind, BTreeSet<String>>,
    render: &LoadedRender,
) -> Vec<(StorageKind, String)> {
    let mut out: BTreeSet<(StorageKind, String)> = BTreeSet::new();
    for f in &render.files {
        let kind = f.storage();
        if listed
            .get(&kind)
            .is_some_and(|names| names.contains(f.name()))
        {
            out.insert((kind, f.name().to_owned()));
        }
    }
    out.into_iter().collect()
}

/// The deployer's settings that shape a sync's operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyncPolicy {
    /// More configuration changes than this go by one raw push ([`SyncMode::RawThreshold`]);
    /// 0 = never by count. Default: 100 (upstream's default).
    pub raw_push_threshold: u32,
}

impl Default for SyncPolicy {
    fn default() -> Self {
        SyncPolicy {
            raw_push_threshold: 100,
        }
    }
}

/// The raw push after a failed fine-grained attempt, at `version` (re-read after the failure).
#[must_use]
pub fn fallback(version: ConfigVersion) -> Operation {
    Operation::PushRawConfig {
        version,
        mode: SyncMode::RawFallback,
    }
}

/// How a list of operations applies the configuration: the raw push's mode, `runtime` for
/// server updates, else `fine_grained` (a transaction, files only, or nothing).
#[must_use]
pub fn mode_of(ops: &[Operation]) -> SyncMode {
    ops.iter()
        .find_map(|o| match o {
            Operation::PushRawConfig { mode, .. } => Some(*mode),
            Operation::UpdateServer { .. } => Some(SyncMode::Runtime),
            Operation::Transaction { .. } => Some(SyncMode::FineGrained),
            _ => None,
        })
        .unwrap_or(SyncMode::FineGrained)
}

/// Adds what `changes` do to backends, servers and frontends to `counts` (a section whose
/// children other than servers change counts as modified once).
pub fn count_changes(changes: &[ConfigChange], counts: &mut OperationCounts) {
    let mut touched: BTreeSet<(ParentKind, &str)> = BTreeSet::new();
    for c in changes {
        fn section(
            counts: &mut OperationCounts,
            k: ParentKind,
        ) -> &mut haptic_journal::ChangeCounts {
            match k {
                ParentKind::Backend => &mut counts.backends,
                ParentKind::Frontend => &mut counts.frontends,
            }
        }
        match c {
            ConfigChange::CreateSection { kind, .. } => section(counts, *kind).added += 1,
            ConfigChange::DeleteSection { kind, .. } => section(counts, *kind).removed += 1,
            ConfigChange::ReplaceSection { kind, name, .. } => {
                if touched.insert((*kind, name)) {
                    section(counts, *kind).modified += 1;
                }
            }
            ConfigChange::CreateChild {
                kind: ChildKind::Server,
                ..
            } => counts.servers.added += 1,
            ConfigChange::DeleteChild {
                kind: ChildKind::Server,
                ..
            } => counts.servers.removed += 1,
            ConfigChange::ReplaceChild {
                kind: ChildKind::Server,
                ..
            } => counts.servers.modified += 1,
            ConfigChange::CreateChild { parent, .. }
            | ConfigChange::DeleteChild { parent, .. }
            | ConfigChange::ReplaceChild { parent, .. } => {
                if touched.insert((parent.kind, &parent.name)) {
                    section(counts, parent.kind).modified += 1;
                }
            }
        }
    }
}

/// The configuration changes between what the pod runs and the render, when modelled.
#[must_use]
pub fn config_changes(running: &RunningPod, render: &LoadedRender) -> Option<Vec<ConfigChange>> {
    match structure::diff(
        &structure::parse(&running.config.text),
        &structure::parse(&render.config),
    ) {
        ConfigDiff::Changes(c) => Some(c),
        ConfigDiff::Unmodelled { .. } => None,
    }
}

/// How to apply a configuration difference (module doc, steps 1-5). `files_pending`: files are
/// written or need loading in this sync, so the change must reload once.
fn config_operation(
    version: ConfigVersion,
    running: &ParsedConfig,
    render: &ParsedConfig,
    policy: &SyncPolicy,
    files_pending: bool,
) -> Vec<Operation> {
    let raw = |mode| vec![Operation::PushRawConfig { version, mode }];
    if version.0 == 1 {
        return raw(SyncMode::RawInitial);
    }
    let changes = match structure::diff(running, render) {
        ConfigDiff::Changes(c) if !c.is_empty() => c,
        // Equal to the model but not to the comparison (e.g. a repeated attribute line):
        // nothing to model it with.
        ConfigDiff::Changes(_) | ConfigDiff::Unmodelled { .. } => {
            return raw(SyncMode::RawUnmodelled);
        }
    };
    if policy.raw_push_threshold > 0 && changes.len() > policy.raw_push_threshold as usize {
        return raw(SyncMode::RawThreshold);
    }
    if !files_pending && changes.iter().all(ConfigChange::is_runtime_server_update) {
        return changes
            .into_iter()
            .filter_map(|c| match c {
                ConfigChange::ReplaceChild {
                    parent,
                    key: structure::ChildKey::Name(name),
                    body,
                    changed_fields,
                    ..
                } => Some(Operation::UpdateServer {
                    backend: parent.name,
                    name,
                    body,
                    changed_fields,
                }),
                _ => None,
            })
            .collect();
    }
    vec![Operation::Transaction { version, changes }]
}

/// What to do on a pod reporting `running` so it runs `render` (module doc), with the default
/// [`SyncPolicy`].
#[must_use]
pub fn decide(
    running: &RunningPod,
    render: &LoadedRender,
    known: Option<&KnownRun>,
) -> Vec<Operation> {
    plan(running, render, known, &SyncPolicy::default())
}

/// What to do on a pod reporting `running` so it runs `render` (module doc) under `policy`.
///
/// Shape: file writes (sorted by kind and name), then at most one configuration step (a raw
/// push, a transaction, server updates, or a reload), then deletes of stale files.
#[must_use]
pub fn plan(
    running: &RunningPod,
    render: &LoadedRender,
    known: Option<&KnownRun>,
    policy: &SyncPolicy,
) -> Vec<Operation> {
    let parsed_running = structure::parse(&running.config.text);
    let parsed_render = structure::parse(&render.config);
    let config_equal = structure::equal(&parsed_running, &parsed_render);
    let mut writes: Vec<Operation> = Vec::new();
    let mut not_loaded: Vec<String> = Vec::new();
    let mut files: Vec<&LoadedFile> = render.files.iter().collect();
    files.sort_by(|a, b| (a.storage(), a.name()).cmp(&(b.storage(), b.name())));
    for file in files {
        let (kind, name) = (file.storage(), file.name().to_owned());
        let path = file.path.clone();
        match running.files.get(&(kind, name.clone())) {
            None => writes.push(Operation::UploadFile {
                kind,
                name,
                path,
                reason: FileReason::Missing,
                skip_reload: true,
            }),
            Some(stored) => match compare(kind, stored, &file.content) {
                Err(reason) => writes.push(Operation::ReplaceFile {
                    kind,
                    name,
                    path,
                    reason,
                    skip_reload: true,
                }),
                Ok(()) => {
                    if maybe_not_loaded(file, render, known, config_equal) {
                        not_loaded.push(path);
                    }
                }
            },
        }
    }
    let version = running.config.version;
    let written = writes.len();
    let mut ops = writes;
    not_loaded.sort();
    if !config_equal {
        let files_pending = written > 0 || !not_loaded.is_empty();
        ops.extend(config_operation(
            version,
            &parsed_running,
            &parsed_render,
            policy,
            files_pending,
        ));
    } else if let Some(last) = ops.last_mut() {
        // Files only: the last write reloads, and a push follows when it did not although
        // earlier writes or files on disk still need loading.
        if let Operation::UploadFile { skip_reload, .. }
        | Operation::ReplaceFile { skip_reload, .. } = last
        {
            *skip_reload = false;
        }
        if written > 1 || !not_loaded.is_empty() {
            ops.push(Operation::Reload {
                version,
                reason: ReloadReason::FilesWritten,
                unless_reloaded: true,
            });
        }
    } else if !not_loaded.is_empty() {
        ops.push(Operation::Reload {
            version,
            reason: ReloadReason::StoredNotLoaded { paths: not_loaded },
            unless_reloaded: false,
        });
    }
    ops.extend(stale(running, render));
    ops
}

/// A file the pod holds with the render's content, which this journal last saw the pod run
/// with other content, and no later push of ours can have loaded (module doc).
fn maybe_not_loaded(
    file: &LoadedFile,
    render: &LoadedRender,
    known: Option<&KnownRun>,
    config_equal: bool,
) -> bool {
    let Some(known) = known else {
        return false;
    };
    let older = known.files.get(&file.path).is_some_and(|b| *b != file.blob);
    let loaded_by_push = config_equal && known.config != render.config_blob;
    older && !loaded_by_push
}

/// Stored files the render does not name, deleted last. Certificates and CA files share one
/// directory (and may be listed by both endpoints): a name the render uses for either kind is
/// kept, and each other name there is deleted once (through the CA endpoint when it lists it).
fn stale(running: &RunningPod, render: &LoadedRender) -> Vec<Operation> {
    let is_ssl_dir =
        |k: StorageKind| matches!(k, StorageKind::SslCertificate | StorageKind::CaFile);
    let mut wanted: BTreeSet<(StorageKind, &str)> = BTreeSet::new();
    let mut wanted_ssl: BTreeSet<&str> = BTreeSet::new();
    for f in &render.files {
        wanted.insert((f.storage(), f.name()));
        if is_ssl_dir(f.storage()) {
            wanted_ssl.insert(f.name());
        }
    }
    let mut out = Vec::new();
    let mut ssl_deleted: BTreeSet<&str> = BTreeSet::new();
    for (kind, name) in running.files.keys() {
        let kind = *kind;
        if is_ssl_dir(kind) {
            if wanted_ssl.contains(name.as_str()) {
                continue;
            }
            let via_ca = running
                .files
                .contains_key(&(StorageKind::CaFile, name.clone()));
            if (kind == StorageKind::CaFile) != via_ca || !ssl_deleted.insert(name.as_str()) {
                continue;
            }
        } else if wanted.contains(&(kind, name.as_str())) {
            continue;
        }
        out.push(Operation::DeleteFile {
            kind,
            name: name.clone(),
        });
    }
    out
}

/// `Ok` when the stored file holds `content`; otherwise why not.
fn compare(kind: StorageKind, stored: &Stored, content: &[u8]) -> Result<(), FileReason> {
    match (kind, stored) {
        (StorageKind::Map | StorageKind::General, Stored::Content(bytes)) => {
            if bytes.as_slice() == content {
                Ok(())
            } else {
                Err(FileReason::ContentDiffers)
            }
        }
        (StorageKind::SslCertificate, Stored::Certificate(info)) => {
            let info: &SslCertificateInfo = info;
            let summary = cert::summarize_pem(content).map_err(|_| FileReason::Unparsable)?;
            certificate_matches(info, &summary, content.len())
        }
        (StorageKind::CaFile, Stored::CaFile(entries)) => {
            let summary = cert::summarize_pem(content).map_err(|_| FileReason::Unparsable)?;
            ca_file_matches(entries, &summary)
        }
        _ => Err(FileReason::Unread),
    }
}

fn reported(field: Option<&String>) -> Option<&str> {
    field.map(|s| s.trim()).filter(|s| !s.is_empty())
}

/// A stored certificate against the render's PEM: serial + issuers, falling back to the SHA-256
/// fingerprint; a reported size and a reported fingerprint must agree as well.
fn certificate_matches(
    info: &SslCertificateInfo,
    summary: &PemSummary,
    size: usize,
) -> Result<(), FileReason> {
    if let Some(stored) = info.size
        && usize::try_from(stored).ok() != Some(size)
    {
        return Err(FileReason::SizeDiffers {
            stored,
            wanted: size,
        });
    }
    let leaf = summary.leaf();
    let mut identified = false;
    if let Some(serial) = reported(info.serial.as_ref()) {
        let Some(leaf) = leaf else {
            return Err(FileReason::SerialDiffers);
        };
        if serial != leaf.serial_decimal {
            return Err(FileReason::SerialDiffers);
        }
        let issuers = info.issuers.as_deref().map(cert::issuer_set);
        if issuers.unwrap_or_default() != summary.issuers() {
            return Err(FileReason::IssuersDiffer);
        }
        identified = true;
    }
    if let Some(fp) = reported(info.sha256_finger_print.as_ref()) {
        if !leaf.is_some_and(|l| cert::fingerprint_eq(fp, &l.sha256)) {
            return Err(FileReason::FingerprintDiffers);
        }
        identified = true;
    }
    if identified {
        Ok(())
    } else {
        Err(FileReason::NoIdentity)
    }
}

/// A CA file's entries against the render's PEM: the count, then every entry matched to a
/// distinct certificate of the file (HAProxy may number them in another order).
fn ca_file_matches(stored: &CaFileEntries, summary: &PemSummary) -> Result<(), FileReason> {
    let n = summary.certificates.len();
    if stored.count != u32::try_from(n).ok() || stored.entries.len() != n {
        return Err(FileReason::CaEntriesDiffer);
    }
    let mut unused: Vec<&cert::CertificateFacts> = summary.certificates.iter().collect();
    for entry in &stored.entries {
        let mut last = FileReason::CaEntriesDiffer;
        let found = unused
            .iter()
            .position(|c| match ca_entry_matches(entry, c) {
                Ok(()) => true,
                Err(reason) => {
                    last = reason;
                    false
                }
            });
        match found {
            Some(i) => {
                unused.swap_remove(i);
            }
            None if n == 1 => return Err(last),
            None => return Err(FileReason::CaEntriesDiffer),
        }
    }
    Ok(())
}

/// One CA-file entry (runtime form: hex serial, one-line DN issuer) against one certificate.
fn ca_entry_matches(
    entry: &SslCertificateInfo,
    facts: &cert::CertificateFacts,
) -> Result<(), FileReason> {
    let mut identified = false;
    if let Some(serial) = reported(entry.serial.as_ref()) {
        if !cert::serial_hex_eq(serial, &facts.serial_hex) {
            return Err(FileReason::SerialDiffers);
        }
        let issuer = reported(entry.issuers.as_ref()).and_then(cert::dn_common_name);
        if issuer != facts.issuer_cn {
            return Err(FileReason::IssuersDiffer);
        }
        identified = true;
    }
    for (fp, digest) in [
        (entry.sha1_finger_print.as_ref(), &facts.sha1[..]),
        (entry.sha256_finger_print.as_ref(), &facts.sha256[..]),
    ] {
        if let Some(fp) = reported(fp) {
            if !cert::fingerprint_eq(fp, digest) {
                return Err(FileReason::FingerprintDiffers);
            }
            identified = true;
        }
    }
    if identified {
        Ok(())
    } else {
        Err(FileReason::NoIdentity)
    }
}
