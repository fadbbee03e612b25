//! The report of a [`crate::verify`] walk: every problem with its location. Below the errors
//! ([`crate::error::OpenError::Corrupt`] carries one) and below the walk that fills it.

use std::fmt;

use crate::contain::Damage;
use crate::corrupt::{Corrupt, CorruptReason, RecordKey};
use crate::ids::{Checksum, Seq};

/// What is wrong at one location.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProblemKind {
    /// The value fails its envelope, CRC, decode or hash check.
    Corrupt(CorruptReason),
    /// A record references a blob that is not stored.
    MissingBlob {
        /// The missing blob.
        blob: Checksum,
    },
    /// A blob's stored reference count differs from the references found.
    RefCountMismatch {
        /// Stored count.
        stored: u64,
        /// References found by the walk.
        found: u64,
    },
    /// A blob has content but no counts, or counts but no content.
    OrphanBlob,
    /// A blob with zero references and zero holds was not collected.
    UncollectedBlob,
    /// The event log has a gap.
    SeqGap {
        /// The `Seq` expected next.
        expected: Seq,
        /// The `Seq` found.
        found: Seq,
    },
    /// An event at or beyond meta's `next_seq`.
    SeqBeyondNext {
        /// meta `next_seq`.
        next_seq: Seq,
    },
    /// A work item id at or beyond meta's `next_work_id`, or stored under another id's key.
    BadWorkId,
    /// A record is stamped with a term newer than meta's current term.
    TermAhead {
        /// The record's term.
        found: u64,
        /// meta's term.
        current: u64,
    },
    /// meta itself is missing or malformed.
    BadMeta,
    /// A `pod_history` record is stored under another pod's key (schema 4): it would escape
    /// its pod's retention and show in the other pod's history.
    HistoryKeyMismatch {
        /// The record's own pod key (`"<namespace>/<name>"`).
        record_pod: String,
    },
    /// redb could not read a page of the file (it panicked; contained): the b-tree itself is
    /// damaged below the record level.
    Damaged {
        /// redb's message and where it failed.
        message: String,
    },
}

impl fmt::Display for ProblemKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProblemKind::Corrupt(r) => write!(f, "{r}"),
            ProblemKind::MissingBlob { blob } => write!(f, "references missing blob {blob}"),
            ProblemKind::RefCountMismatch { stored, found } => {
                write!(f, "reference count {stored} stored, {found} found")
            }
            ProblemKind::OrphanBlob => f.write_str("blob content and counts disagree"),
            ProblemKind::Damaged { message } => write!(f, "{message}"),
            ProblemKind::UncollectedBlob => f.write_str("unreferenced blob was not collected"),
            ProblemKind::SeqGap { expected, found } => {
                write!(f, "event log gap: expected seq {expected}, found {found}")
            }
            ProblemKind::SeqBeyondNext { next_seq } => {
                write!(f, "event at or beyond meta next_seq {next_seq}")
            }
            ProblemKind::BadWorkId => f.write_str("work id does not match its key or meta"),
            ProblemKind::TermAhead { found, current } => {
                write!(
                    f,
                    "stamped with term {found}, newer than current term {current}"
                )
            }
            ProblemKind::BadMeta => f.write_str("meta is missing or malformed"),
            ProblemKind::HistoryKeyMismatch { record_pod } => {
                write!(
                    f,
                    "history record of pod {record_pod} under another pod's key"
                )
            }
        }
    }
}

/// One problem and where it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// Table name.
    pub table: &'static str,
    /// Record key.
    pub key: RecordKey,
    /// Byte offset inside the value, when meaningful.
    pub offset: Option<u64>,
    /// What is wrong.
    pub kind: ProblemKind,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "table {} at {}", self.table, self.key)?;
        if let Some(o) = self.offset {
            write!(f, " (byte offset {o})")?;
        }
        write!(f, ": {}", self.kind)
    }
}

/// The result of [`crate::Journal::verify`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Every problem, in walk order (tables in [`tables::ALL_TABLES`](crate::tables::ALL_TABLES) order, keys
    /// ascending).
    pub problems: Vec<Problem>,
    /// Records checked.
    pub records_checked: u64,
}

impl VerifyReport {
    /// Whether no problem was found.
    #[must_use]
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }

    pub(crate) fn single(c: Corrupt) -> Self {
        let offset = c.reason.offset();
        VerifyReport {
            problems: vec![Problem {
                table: c.table,
                key: c.key,
                offset,
                kind: ProblemKind::Corrupt(c.reason),
            }],
            records_checked: 0,
        }
    }

    /// A report with one [`ProblemKind::Damaged`] problem (a contained redb panic).
    pub(crate) fn damaged(d: Damage) -> Self {
        let message = d.to_string();
        VerifyReport {
            problems: vec![Problem {
                table: d.table.unwrap_or("redb-internal"),
                key: RecordKey::Unknown,
                offset: None,
                kind: ProblemKind::Damaged { message },
            }],
            records_checked: 0,
        }
    }

    pub(crate) fn corrupt(&mut self, table: &'static str, key: RecordKey, reason: CorruptReason) {
        let offset = reason.offset();
        self.problems.push(Problem {
            table,
            key,
            offset,
            kind: ProblemKind::Corrupt(reason),
        });
    }

    pub(crate) fn problem(&mut self, table: &'static str, key: RecordKey, kind: ProblemKind) {
        self.problems.push(Problem {
            table,
            key,
            offset: None,
            kind,
        });
    }
}
