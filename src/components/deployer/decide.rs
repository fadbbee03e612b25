//! The deployer's pure decision: what differs on one pod, as the Dataplane operations that make
//! it run the render, in the order the sync applies them.
//!
//! ```text
//!  RunningPod (what the pod reports)  ─┐
//!  JournaledRender (what it should run)  ─┼─► decide ─► Vec<Operation>
//!  EndpointFiles (what this journal    ┘     1. UploadFile / ReplaceFile  (certificates and CA
//!   recorded written and loaded;               files applied at runtime; general files, maps
//!   may be None)                               with skip_reload)
//!                                            2. one configuration step: PushRawConfig | Transaction
//!                                               | UpdateServer... | Reload   (at most one reload)
//!                                            3. DeleteFile  (files the render no longer names)
//! ```
//!
//! What is on disk is compared with what the pod holds, never with which journal wrote it, so a
//! restarted leader, a new leader with an empty journal and a rebuilt journal decide alike
//! ([`super::compare`]):
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
//! **On disk is not loaded** (issue 24). A file is applied on a pod only when HAProxy runs it,
//! not when it sits on disk: a `skip_reload` write whose reload then failed, timed out or never
//! came (a kill, a cancel) leaves the new content on disk and the old one in HAProxy. For every
//! render file whose content on disk is the render's, [`plan`] asks, in this order:
//! 1. the journal's record of the endpoint ([`EndpointFiles`], table `endpoint_files`): the file
//!    is loaded when the record says HAProxy loaded exactly this content (a reload that succeeded
//!    after the write, a runtime update that answered it applied, or a runtime view that showed
//!    it); the record survives failures, retries and restarts (J11), so a retry reloads;
//! 2. else what HAProxy reports loaded through the runtime endpoints, read by the sync for the
//!    files [`runtime_read_plan`] lists (maps, certificates, crt-lists; [`super::compare`]);
//!    a new leader with no record, or a record another replica's syncs made stale, is proved
//!    right without a write;
//! 3. else (general files such as error pages, which have no runtime view) it is not known to
//!    be loaded: one reload on that first sync, recorded, then never again.
//!
//! CA files are read through the runtime in the first place (loaded when equal). A file not
//! known to be loaded makes the configuration step reload ([`Operation::Transaction`] instead of
//! runtime server updates, or a push) or, when the configuration is the render's, one
//! [`Operation::Reload`].
//!
//! **Runtime-applied files.** The Data Plane API applies a certificate (storage
//! `ssl_certificates`) and a CA file (runtime `ssl_ca_files`) through HAProxy's runtime API when
//! written without `skip_reload` (200/201, no reload; 202 with a `Reload-ID` only when that
//! update failed, `observed-v3.4.md`). They are written that way and count as loaded by the
//! answer, never reloaded for.
//!
//! One reload per render, and never the new files with the old configuration: when the
//! configuration differs, every other file write skips the reload and the configuration step
//! that follows loads them all. When only files differ, all writes but the last skip the
//! reload and the last one reloads (no configuration push); a trailing [`Operation::Reload`]
//! with `unless_reloaded` covers the case where that write needed no reload while earlier ones
//! did.
//!
//! **A pod whose API holds another configuration than its file.** After a failed reload the
//! real API puts the last good file back on disk but keeps the failed configuration and its
//! version in memory (`observed-v3.4.md`): the raw file's `# _version=` line and the
//! `Configuration-Version` header differ. An object write would then apply to a configuration
//! the file does not show, so the render goes by one raw push ([`SyncMode::RawResync`]), which
//! replaces both, even when the file already equals the render.
//!
//! **No runtime API.** Runtime server updates need HAProxy's admin stats socket in the running
//! configuration (`stats socket ... level admin`); without one the API reloads for each. Such a
//! change goes by one transaction (one reload) in [`SyncMode::NoRuntimeApi`], which the executor
//! reports (a warning naming the fix, an Event, the pod's `syncMode`).
//!
//! Pure: no I/O, no clock, no randomness.

use std::collections::{BTreeMap, BTreeSet};

use haptic_journal::{AuxKind, ConfigVersion, EndpointFiles, FileStore, OperationCounts, SyncMode};

use super::compare::{compare, loaded_matches};
use super::structure::{
    self, ChildKind, ConfigChange, ConfigDiff, ObjectBody, ParentKind, ParsedConfig,
};
use crate::core::render::{JournaledFile, JournaledRender};
use crate::dataplane::{CrtListEntry, MapEntry, RawConfiguration, SslCertificateInfo, StorageKind};

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
    /// What HAProxy has loaded for the files [`runtime_read_plan`] listed, same key.
    pub loaded: BTreeMap<(StorageKind, String), LoadedView>,
}

/// What HAProxy reports loaded for one file, through a runtime endpoint.
#[derive(Clone, Debug, PartialEq)]
pub enum LoadedView {
    /// A map's entries (`GET .../runtime/maps/{name}/entries`).
    MapEntries(Vec<MapEntry>),
    /// A certificate (`GET .../runtime/ssl_certs/{name}`).
    Certificate(Box<SslCertificateInfo>),
    /// A crt-list's lines (`GET .../runtime/ssl_crt_lists/entries?name=`).
    CrtList(Vec<CrtListEntry>),
    /// HAProxy has nothing loaded under that name (404).
    Absent,
}

/// The journal's storage area of a Dataplane storage kind.
#[must_use]
pub fn file_store(kind: StorageKind) -> FileStore {
    match kind {
        StorageKind::SslCertificate => FileStore::SslCertificate,
        StorageKind::CaFile => FileStore::CaFile,
        StorageKind::General => FileStore::General,
        StorageKind::Map => FileStore::Map,
    }
}

/// Whether the Dataplane API applies a write of this kind through HAProxy's runtime API (no
/// reload when it succeeds): certificates and CA files (module doc).
#[must_use]
pub fn applied_at_runtime(kind: StorageKind) -> bool {
    matches!(kind, StorageKind::SslCertificate | StorageKind::CaFile)
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
        /// Sent with `skip_reload=true` (every write but the last of a files-only change; never
        /// for certificates and CA files, which the API applies at runtime).
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
        /// [`SyncMode::FineGrained`], or [`SyncMode::NoRuntimeApi`] when the changes are
        /// runtime server updates that the pod cannot apply without a reload (module doc).
        mode: SyncMode,
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
    /// True for the operations that reload HAProxy whatever the answers before them: a push, a
    /// transaction, an unconditional reload, a file write without `skip_reload` of a kind the
    /// API does not apply at runtime (certificates and CA files are taken in at runtime).
    #[must_use]
    pub fn reloads(&self) -> bool {
        match self {
            Operation::PushRawConfig { .. } | Operation::Transaction { .. } => true,
            Operation::UpdateServer { .. } => false,
            Operation::Reload {
                unless_reloaded, ..
            } => !unless_reloaded,
            // A create never reloads (the spec's `POST .../storage/{maps,general}` answers 201
            // only; certificates and CA files are applied at runtime).
            Operation::UploadFile { .. } => false,
            Operation::ReplaceFile {
                kind, skip_reload, ..
            } => !skip_reload && !applied_at_runtime(*kind),
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
    render: &JournaledRender,
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
/// server updates, the transaction's mode, else `fine_grained` (files only, or nothing).
#[must_use]
pub fn mode_of(ops: &[Operation]) -> SyncMode {
    ops.iter()
        .find_map(|o| match o {
            Operation::PushRawConfig { mode, .. } | Operation::Transaction { mode, .. } => {
                Some(*mode)
            }
            Operation::UpdateServer { .. } => Some(SyncMode::Runtime),
            _ => None,
        })
        .unwrap_or(SyncMode::FineGrained)
}

/// How many reloads `ops` make on a pod when every answer is the expected one (what
/// `haptic plan` reports): one per operation that [`Operation::reloads`] whatever came before,
/// and a trailing [`Operation::Reload`] with `unless_reloaded` unless the file write before it
/// reloaded. At most one for a list [`plan`] returns (module doc: one reload per render).
#[must_use]
pub fn expected_reloads(ops: &[Operation]) -> u32 {
    let mut count = 0;
    let mut last_write_reloaded = false;
    for op in ops {
        match op {
            Operation::Reload {
                unless_reloaded: true,
                ..
            } => {
                if !last_write_reloaded {
                    count += 1;
                }
            }
            Operation::UploadFile { .. } | Operation::ReplaceFile { .. } => {
                last_write_reloaded = op.reloads();
                count += u32::from(last_write_reloaded);
            }
            _ => count += u32::from(op.reloads()),
        }
    }
    count
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
pub fn config_changes(running: &RunningPod, render: &JournaledRender) -> Option<Vec<ConfigChange>> {
    match structure::diff(
        &structure::parse(&running.config.text),
        &structure::parse(&render.config_text()),
    ) {
        ConfigDiff::Changes(c) => Some(c),
        ConfigDiff::Unmodelled { .. } => None,
    }
}

/// Whether a configuration text gives HAProxy's runtime API with the rights a runtime server
/// update needs: a `stats socket ... level admin` line in its `global` section.
#[must_use]
pub fn has_admin_socket(config: &str) -> bool {
    let mut in_global = false;
    for line in config.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some(first) = words.first() else { continue };
        if first.starts_with('#') {
            continue;
        }
        if structure::SECTION_KEYWORDS.contains(first) {
            in_global = *first == "global";
            continue;
        }
        if in_global
            && words.len() > 2
            && words[0] == "stats"
            && words[1] == "socket"
            && words.windows(2).any(|w| w == ["level", "admin"])
        {
            return true;
        }
    }
    false
}

/// How to apply a configuration difference (module doc, steps 1-5). `files_pending`: files are
/// written or need loading in this sync, so the change must reload once. `runtime_api`: the pod
/// can apply server updates without a reload.
fn config_operation(
    version: ConfigVersion,
    running: &ParsedConfig,
    render: &ParsedConfig,
    policy: &SyncPolicy,
    files_pending: bool,
    runtime_api: bool,
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
    let runtime_only = changes.iter().all(ConfigChange::is_runtime_server_update);
    if runtime_only && !runtime_api {
        return vec![Operation::Transaction {
            version,
            changes,
            mode: SyncMode::NoRuntimeApi,
        }];
    }
    if runtime_only && !files_pending {
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
    vec![Operation::Transaction {
        version,
        changes,
        mode: SyncMode::FineGrained,
    }]
}

/// Which render files the sync reads through a runtime endpoint before deciding: those whose
/// content on disk is the render's ([`compare`]), that `record` does not prove loaded, and whose
/// kind has a runtime view (maps, certificates, crt-lists; CA files are read through the
/// runtime already).
///
/// Shape: sorted by (kind, name), no duplicates; each with the render file.
#[must_use]
pub fn runtime_read_plan<'r>(
    running: &RunningPod,
    render: &'r JournaledRender,
    record: Option<&EndpointFiles>,
) -> Vec<((StorageKind, String), &'r JournaledFile)> {
    let mut out: BTreeMap<(StorageKind, String), &JournaledFile> = BTreeMap::new();
    for f in &render.files {
        let (kind, name) = (f.storage(), f.name().to_owned());
        if !has_runtime_view(f) {
            continue;
        }
        let Some(stored) = running.files.get(&(kind, name.clone())) else {
            continue;
        };
        if compare(kind, stored, &f.content).is_err() || recorded_loaded(record, f) {
            continue;
        }
        out.insert((kind, name), f);
    }
    out.into_iter().collect()
}

/// Whether HAProxy's runtime reports what it loaded for this file (module doc).
#[must_use]
pub fn has_runtime_view(f: &JournaledFile) -> bool {
    match f.storage() {
        StorageKind::Map | StorageKind::SslCertificate => true,
        StorageKind::General => f.kind == AuxKind::CrtList,
        StorageKind::CaFile => false,
    }
}

/// Whether `record` says HAProxy loaded exactly the render's content of `f`.
fn recorded_loaded(record: Option<&EndpointFiles>, f: &JournaledFile) -> bool {
    record
        .and_then(|r| r.file(file_store(f.storage()), f.name()))
        .is_some_and(|s| s.loaded_is(f.blob))
}

/// Whether a render file whose content on disk is the render's is known to be loaded (module
/// doc: the record, else the runtime view read, else not for files without one).
#[must_use]
pub fn is_loaded(f: &JournaledFile, running: &RunningPod, record: Option<&EndpointFiles>) -> bool {
    if f.storage() == StorageKind::CaFile || recorded_loaded(record, f) {
        return true;
    }
    running
        .loaded
        .get(&(f.storage(), f.name().to_owned()))
        .is_some_and(|view| {
            loaded_matches(f.storage(), f.kind == AuxKind::CrtList, view, &f.content)
        })
}

/// What to do on a pod reporting `running` so it runs `render` (module doc), with the default
/// [`SyncPolicy`].
#[must_use]
pub fn decide(
    running: &RunningPod,
    render: &JournaledRender,
    record: Option<&EndpointFiles>,
) -> Vec<Operation> {
    plan(running, render, record, &SyncPolicy::default())
}

/// What to do on a pod reporting `running` so it runs `render` (module doc) under `policy`.
/// `record` is the journal's stored-file state of the endpoint, when it has one for this pod.
///
/// Shape: file writes (sorted by kind and name), then at most one configuration step (a raw
/// push, a transaction, server updates, or a reload), then deletes of stale files.
#[must_use]
pub fn plan(
    running: &RunningPod,
    render: &JournaledRender,
    record: Option<&EndpointFiles>,
    policy: &SyncPolicy,
) -> Vec<Operation> {
    let parsed_running = structure::parse(&running.config.text);
    let parsed_render = structure::parse(&render.config_text());
    let config_equal = structure::equal(&parsed_running, &parsed_render);
    let mut writes: Vec<Operation> = Vec::new();
    let mut not_loaded: Vec<String> = Vec::new();
    let mut files: Vec<&JournaledFile> = render.files.iter().collect();
    files.sort_by(|a, b| (a.storage(), a.name()).cmp(&(b.storage(), b.name())));
    for file in files {
        let (kind, name) = (file.storage(), file.name().to_owned());
        let path = file.path.clone();
        // Certificates and CA files are applied at runtime: written without skip_reload.
        let skip_reload = !applied_at_runtime(kind);
        match running.files.get(&(kind, name.clone())) {
            None => writes.push(Operation::UploadFile {
                kind,
                name,
                path,
                reason: FileReason::Missing,
                skip_reload,
            }),
            Some(stored) => match compare(kind, stored, &file.content) {
                Err(reason) => writes.push(Operation::ReplaceFile {
                    kind,
                    name,
                    path,
                    reason,
                    skip_reload,
                }),
                Ok(()) => {
                    if !is_loaded(file, running, record) {
                        not_loaded.push(path);
                    }
                }
            },
        }
    }
    let version = running.config.version;
    // Writes that need a reload to be loaded (the others are applied at runtime).
    let reloading_writes = writes.iter().filter(|w| needs_reload(w)).count();
    let mut ops = writes;
    not_loaded.sort();
    let diverged = running
        .config
        .file_version
        .is_some_and(|file| file != version);
    if diverged {
        // The API's in-memory configuration is not the file's (a failed reload): only a raw
        // push replaces both (module doc).
        ops.push(Operation::PushRawConfig {
            version,
            mode: SyncMode::RawResync,
        });
    } else if !config_equal {
        let files_pending = reloading_writes > 0 || !not_loaded.is_empty();
        ops.extend(config_operation(
            version,
            &parsed_running,
            &parsed_render,
            policy,
            files_pending,
            has_admin_socket(&running.config.text),
        ));
    } else if reloading_writes > 0 {
        // Files only: the last write that needs a reload reloads when it is a replace (a create
        // never reloads), and a push follows when it did not although earlier writes or files
        // on disk still need loading.
        let last_reloads = match ops.iter_mut().rev().find(|w| needs_reload(w)) {
            Some(Operation::ReplaceFile { skip_reload, .. }) => {
                *skip_reload = false;
                true
            }
            _ => false,
        };
        if !last_reloads || reloading_writes > 1 || !not_loaded.is_empty() {
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

/// A file write whose content HAProxy takes only at a reload (not a certificate or CA file).
fn needs_reload(op: &Operation) -> bool {
    matches!(op,
        Operation::UploadFile { kind, .. } | Operation::ReplaceFile { kind, .. }
            if !applied_at_runtime(*kind))
}

/// Stored files the render does not name, deleted last. Certificates and CA files share one
/// directory (and may be listed by both endpoints): a name the render uses for either kind is
/// kept, and each other name there is deleted once (through the CA endpoint when it lists it).
/// Names HAProxy provides itself (starting with `@`, such as the `@system-ca` bundle the real
/// API lists among CA files) are not ours and never deleted.
fn stale(running: &RunningPod, render: &JournaledRender) -> Vec<Operation> {
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
        if name.starts_with('@') {
            continue;
        }
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
