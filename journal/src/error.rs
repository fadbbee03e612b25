//! Errors, one enum per operation family (STYLE.md 2.4).

use std::path::PathBuf;
use std::sync::Arc;

pub use crate::corrupt::{Corrupt, CorruptReason, RecordKey};
use crate::ids::{Checksum, Term};
use crate::report::VerifyReport;

/// How a caller should react to an error (STYLE.md 2.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// Trying again later may succeed.
    Retryable,
    /// Another writer or a newer value won; re-read and decide again.
    Conflict,
    /// Retrying will not help; an operator must act.
    Fatal,
}

/// Opening (or creating) a journal failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// Another process holds the journal (redb's file lock).
    #[error(
        "journal {path} is in use by another process: stop that process; to inspect a live \
         journal, run the controller with --journal-concurrency single-writer"
    )]
    InUse {
        /// The file.
        path: PathBuf,
    },
    /// The file does not exist and the options do not allow creating it.
    #[error("journal {path} does not exist: check the path, or allow create")]
    NotFound {
        /// The file.
        path: PathBuf,
    },
    /// The file was written by newer code.
    #[error(
        "journal {path} has schema version {found}, newer than the {supported} this build \
         supports: run a newer haptic"
    )]
    SchemaTooNew {
        /// The file.
        path: PathBuf,
        /// Schema version in the file.
        found: u32,
        /// Newest version this code knows.
        supported: u32,
    },
    /// The file has an older schema and needs a migration (never done silently, J8).
    #[error(
        "journal {path} has schema version {found}, this build needs {supported}: migrate it \
         with `haptic-journalctl migrate --write {path}`"
    )]
    SchemaTooOld {
        /// The file.
        path: PathBuf,
        /// Schema version in the file.
        found: u32,
        /// Version this code needs.
        supported: u32,
    },
    /// The file is a redb database but not a haptic journal (no meta table).
    #[error("{path} is not a haptic journal (no meta table): check the path")]
    NotAJournal {
        /// The file.
        path: PathBuf,
    },
    /// `verify_on_open` (or redb's own checks) found damage (J10).
    #[error(
        "journal {path} is corrupt ({} problem(s), first: {}): start with \
         --journal-recovery=rebuild to move it aside, or inspect it with `haptic-journalctl verify`",
        .report.problems.len(),
        .report.problems.first().map(ToString::to_string).unwrap_or_default()
    )]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What verify found.
        report: Box<VerifyReport>,
    },
    /// redb refused or failed the open (damaged file, unsupported format, ...).
    #[error(
        "journal {path} cannot be opened by redb: check the path and the volume, or start with \
         --journal-recovery=rebuild to move it aside"
    )]
    Storage {
        /// The file.
        path: PathBuf,
        /// redb's error.
        #[source]
        source: redb::Error,
    },
    /// The file could not be created, opened or chmodded.
    #[error("journal {path}: i/o error")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The options contradict each other or redb's rules.
    #[error("invalid journal options: {reason}")]
    InvalidOptions {
        /// What is wrong.
        reason: &'static str,
    },
}

impl OpenError {
    /// How to react.
    #[must_use]
    pub fn kind(&self) -> ErrorKind {
        match self {
            OpenError::InUse { .. } => ErrorKind::Retryable,
            _ => ErrorKind::Fatal,
        }
    }

    /// Bounded metric label.
    #[must_use]
    pub fn metric_label(&self) -> &'static str {
        match self {
            OpenError::InUse { .. } => "in_use",
            OpenError::NotFound { .. } => "not_found",
            OpenError::SchemaTooNew { .. } => "schema_too_new",
            OpenError::SchemaTooOld { .. } => "schema_too_old",
            OpenError::NotAJournal { .. } => "not_a_journal",
            OpenError::Corrupt { .. } => "corrupt",
            OpenError::Storage { .. } => "storage",
            OpenError::Io { .. } => "io",
            OpenError::InvalidOptions { .. } => "invalid_options",
        }
    }
}

/// A write (accept, enqueue, ack, park, blob, trim, term) failed. Nothing of the request was
/// committed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum AcceptError {
    /// The journal was opened read-only.
    #[error("journal is open read-only")]
    ReadOnly,
    /// The writer thread has stopped (after a panic or a failed commit left redb unusable).
    #[error("journal writer thread has stopped: reopen the journal")]
    WriterGone,
    /// A new term must be greater than the current one (J7).
    #[error("term {requested} is not newer than the current term {current}")]
    TermNotNewer {
        /// Term in meta.
        current: Term,
        /// Term requested.
        requested: Term,
    },
    /// A record references a blob that is neither stored nor put in the same batch.
    #[error("record references blob {blob} which is not stored: put it in the same batch")]
    MissingBlob {
        /// The missing blob.
        blob: Checksum,
    },
    /// A blob release named a blob with no hold.
    #[error("blob {blob} has no hold to release")]
    NoHold {
        /// The blob.
        blob: Checksum,
    },
    /// A blob put with a caller-supplied hash ([`crate::Batch::put_render_hashed`]) whose
    /// content does not hash to it; nothing of the batch was committed.
    #[error("blob content hashes to {actual}, not to the key {blob} it was put under")]
    BlobHashMismatch {
        /// The key the caller supplied.
        blob: Checksum,
        /// The SHA-256 of the content.
        actual: Checksum,
    },
    /// A stored record the write had to read is corrupt.
    #[error(transparent)]
    Corrupt(#[from] Corrupt),
    /// redb failed; the whole group commit failed with it.
    #[error("journal storage failed")]
    Storage {
        /// redb's error, shared by every request of the failed group.
        #[source]
        source: Arc<redb::Error>,
    },
    /// The journal file was removed (or replaced by another file) while open: a commit to the
    /// unlinked file would not survive a restart, so none is made (J1).
    #[error(
        "journal file {path} was removed or replaced while open: restart the process to open \
         the file at that path"
    )]
    Removed {
        /// The path the journal was opened at.
        path: PathBuf,
    },
}

impl AcceptError {
    /// How to react.
    #[must_use]
    pub fn kind(&self) -> ErrorKind {
        match self {
            AcceptError::TermNotNewer { .. } => ErrorKind::Conflict,
            AcceptError::Storage { .. } => ErrorKind::Retryable,
            _ => ErrorKind::Fatal,
        }
    }

    /// What kind of storage fault this is, when it is one: `Storage` (classified by the OS
    /// error under it, [`FaultKind::of`]) and `Removed`; `None` for every other variant (those
    /// are about the request, not the volume).
    #[must_use]
    pub fn fault_kind(&self) -> Option<FaultKind> {
        match self {
            AcceptError::Storage { source } => Some(FaultKind::of(source)),
            AcceptError::Removed { .. } => Some(FaultKind::Removed),
            _ => None,
        }
    }

    /// Bounded metric label.
    #[must_use]
    pub fn metric_label(&self) -> &'static str {
        match self {
            AcceptError::Removed { .. } => "removed",
            AcceptError::ReadOnly => "read_only",
            AcceptError::WriterGone => "writer_gone",
            AcceptError::TermNotNewer { .. } => "term_not_newer",
            AcceptError::MissingBlob { .. } => "missing_blob",
            AcceptError::NoHold { .. } => "no_hold",
            AcceptError::BlobHashMismatch { .. } => "blob_hash_mismatch",
            AcceptError::Corrupt(_) => "corrupt",
            AcceptError::Storage { .. } => "storage",
        }
    }

    pub(crate) fn storage(e: impl Into<redb::Error>) -> Self {
        AcceptError::Storage {
            source: Arc::new(e.into()),
        }
    }
}

/// Why the journal's storage refuses writes, from the OS error under a failed commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FaultKind {
    /// The volume is full or over quota (`ENOSPC`, `EDQUOT`): free space on it.
    Full,
    /// The volume is mounted read-only (`EROFS`): remount it read-write.
    ReadOnly,
    /// The journal file or its directory is gone (`ENOENT`, `ESTALE`, or a different file at
    /// the path): the data written since the removal is not on any path; restart the process.
    Removed,
    /// Any other I/O error (`EIO`, ...): check the volume.
    Io,
}

impl FaultKind {
    /// Classifies a redb error by the first `std::io::Error` in its chain (redb's `Io`
    /// variants); no I/O error underneath (redb's own state, e.g. `PreviousIo`) is [`Self::Io`].
    #[must_use]
    pub fn of(e: &redb::Error) -> FaultKind {
        match io_error(e) {
            Some(io) => FaultKind::of_io(io),
            None => FaultKind::Io,
        }
    }

    /// Classifies an OS error.
    #[must_use]
    pub fn of_io(e: &std::io::Error) -> FaultKind {
        use std::io::ErrorKind as K;
        match e.kind() {
            K::StorageFull | K::QuotaExceeded => FaultKind::Full,
            K::ReadOnlyFilesystem => FaultKind::ReadOnly,
            K::NotFound | K::StaleNetworkFileHandle => FaultKind::Removed,
            _ => FaultKind::Io,
        }
    }

    /// Bounded metric label: `full`, `read_only`, `removed`, `io`.
    #[must_use]
    pub fn metric_label(self) -> &'static str {
        match self {
            FaultKind::Full => "full",
            FaultKind::ReadOnly => "read_only",
            FaultKind::Removed => "removed",
            FaultKind::Io => "io",
        }
    }
}

/// The journal's storage refused a commit, and no commit has succeeded since
/// ([`crate::Journal::storage_fault`]). Cleared by the next successful commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StorageFault {
    /// What the OS said, classified.
    pub kind: FaultKind,
    /// The first failure's error text, OS error included (e.g. `I/O error: No space left on
    /// device (os error 28)`); later failures of the same episode do not replace it unless the
    /// kind changes.
    pub message: String,
    /// When the episode's first commit failed.
    pub since: crate::ids::UnixMillis,
    /// Failed commits and failed reopens in this episode (at least 1).
    pub failures: u64,
}

/// The first `std::io::Error` under a redb error (its own `Io` variant, or a source).
fn io_error(e: &redb::Error) -> Option<&std::io::Error> {
    if let redb::Error::Io(io) = e {
        return Some(io);
    }
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return Some(io);
        }
        source = s.source();
    }
    None
}

/// A read failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// A record is corrupt (J5): the caller must not skip it.
    #[error(transparent)]
    Corrupt(#[from] Corrupt),
    /// redb failed.
    #[error("journal storage failed")]
    Storage(#[source] redb::Error),
    /// A redb page is damaged: redb panicked reading it (contained, [`crate::contain`]). J10:
    /// the file must be moved aside (`--journal-recovery=rebuild`).
    #[error(transparent)]
    Damaged(#[from] crate::contain::Damage),
}

impl ReadError {
    /// How to react.
    #[must_use]
    pub fn kind(&self) -> ErrorKind {
        match self {
            ReadError::Corrupt(_) | ReadError::Damaged(_) => ErrorKind::Fatal,
            ReadError::Storage(_) => ErrorKind::Retryable,
        }
    }

    /// Bounded metric label.
    #[must_use]
    pub fn metric_label(&self) -> &'static str {
        match self {
            ReadError::Corrupt(_) => "corrupt",
            ReadError::Storage(_) => "storage",
            ReadError::Damaged(_) => "damaged",
        }
    }
}

impl CompactError {
    /// How to react.
    #[must_use]
    pub fn kind(&self) -> ErrorKind {
        match self {
            CompactError::Busy => ErrorKind::Retryable,
            _ => ErrorKind::Fatal,
        }
    }

    /// Bounded metric label.
    #[must_use]
    pub fn metric_label(&self) -> &'static str {
        match self {
            CompactError::ReadOnly => "read_only",
            CompactError::Busy => "busy",
            CompactError::WriterGone => "writer_gone",
            CompactError::Storage(_) => "storage",
        }
    }
}

pub(crate) fn storage<E: Into<redb::Error>>(e: E) -> ReadError {
    ReadError::Storage(e.into())
}

/// Compaction failed or could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CompactError {
    /// The journal was opened read-only.
    #[error("journal is open read-only")]
    ReadOnly,
    /// Read transactions were live; try again later.
    #[error("compaction skipped: read transactions are live")]
    Busy,
    /// The writer thread has stopped.
    #[error("journal writer thread has stopped: reopen the journal")]
    WriterGone,
    /// redb failed.
    #[error("journal compaction failed")]
    Storage(#[source] redb::Error),
}
