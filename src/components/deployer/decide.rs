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
//! - the configuration by content ([`raw_configs_equal`]), never by version alone.
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

use haptic_journal::{AuxKind, Checksum, ConfigVersion};

use crate::dataplane::cert::{self, PemSummary};
use crate::dataplane::{RawConfiguration, SslCertificateInfo, StorageKind, raw_configs_equal};

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
            Operation::PushRawConfig { .. } => true,
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

/// What to do on a pod reporting `running` so it runs `render` (module doc).
#[must_use]
pub fn decide(
    running: &RunningPod,
    render: &LoadedRender,
    known: Option<&KnownRun>,
) -> Vec<Operation> {
    let config_equal = raw_configs_equal(&running.config.text, &render.config);
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
        ops.push(Operation::PushRawConfig { version });
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
