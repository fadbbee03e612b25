//! What is wrong with a stored record, and where (J5): why a value failed its checks and the key
//! it is stored under. Just above [`crate::ids`]: the envelope ([`crate::codec`]),
//! [`crate::contain`], the verify report and the errors all use it. Re-exported from
//! [`crate::error`].

use std::fmt;

use crate::ids::Checksum;

/// The key of a stored record, for error and verify reports.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RecordKey {
    /// Events log position.
    Seq(u64),
    /// A FIFO queue item id.
    WorkId(u64),
    /// A text key (pod status key, endpoint URL, HAProxyCfg name, meta key).
    Text(String),
    /// A blob key.
    Blob(Checksum),
    /// A blob key that is not 32 bytes long.
    BadBlobKey(Vec<u8>),
    /// The single-slot key.
    Slot,
    /// No key is known (damage found below the record level).
    Unknown,
}

impl fmt::Display for RecordKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordKey::Seq(s) => write!(f, "seq {s}"),
            RecordKey::WorkId(w) => write!(f, "work id {w}"),
            RecordKey::Text(t) => write!(f, "{t:?}"),
            RecordKey::Blob(c) => write!(f, "{c}"),
            RecordKey::BadBlobKey(b) => write!(f, "0x{}", hex::encode(b)),
            RecordKey::Slot => f.write_str("slot"),
            RecordKey::Unknown => f.write_str("unknown key"),
        }
    }
}

/// Why a stored value failed to decode.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CorruptReason {
    /// The value is shorter than its header says.
    #[error("value of {len} bytes is truncated, at least {needed} needed")]
    Truncated {
        /// Actual length.
        len: u64,
        /// Minimum length.
        needed: u64,
    },
    /// Unknown envelope format version byte.
    #[error("unknown format version {found}")]
    UnknownFormatVersion {
        /// The byte found at offset 0.
        found: u8,
    },
    /// The record kind is not printable ASCII.
    #[error("record kind is not printable ascii")]
    BadKind,
    /// The record kind is not one this table holds.
    #[error("unexpected record kind {found:?}")]
    UnexpectedKind {
        /// The kind found.
        found: String,
    },
    /// The declared payload length disagrees with the value length.
    #[error("payload length {declared} declared, {actual} present")]
    LengthMismatch {
        /// Declared length.
        declared: u64,
        /// Bytes present.
        actual: u64,
        /// Offset of the length field.
        offset: u64,
    },
    /// The CRC32 does not match.
    #[error("crc32 mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch {
        /// CRC stored in the envelope.
        stored: u32,
        /// CRC computed over the value.
        computed: u32,
        /// Offset of the CRC field.
        offset: u64,
    },
    /// The payload is not a valid record of its kind.
    #[error("payload does not decode: {message}")]
    Decode {
        /// The decoder's message.
        message: String,
    },
    /// The payload has bytes after the record.
    #[error("{extra} trailing bytes after the payload")]
    TrailingBytes {
        /// Count of extra bytes.
        extra: u64,
    },
    /// A blob does not hash to its key: a file's content (SHA-256), or a render manifest's blob
    /// keys and paths (the render checksum), or the manifest's own `checksum` field.
    #[error("content hashes to {actual}, not to its key")]
    BlobHashMismatch {
        /// What the content hashes to.
        actual: Checksum,
    },
    /// A meta value has the wrong size or encoding.
    #[error("meta value is malformed")]
    BadMeta,
}

impl CorruptReason {
    /// Byte offset inside the value where the problem was found, when meaningful.
    #[must_use]
    pub fn offset(&self) -> Option<u64> {
        match self {
            CorruptReason::UnknownFormatVersion { .. } => Some(0),
            CorruptReason::BadKind => Some(1),
            CorruptReason::LengthMismatch { offset, .. }
            | CorruptReason::CrcMismatch { offset, .. } => Some(*offset),
            CorruptReason::Truncated { len, .. } => Some(*len),
            _ => None,
        }
    }
}

/// A stored record that failed its checks, with its location (J5).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("corrupt record in table {table} at {key}{}: {reason}", .reason.offset().map(|o| format!(" (byte offset {o})")).unwrap_or_default())]
pub struct Corrupt {
    /// Table name.
    pub table: &'static str,
    /// Record key.
    pub key: RecordKey,
    /// What is wrong.
    pub reason: CorruptReason,
}

impl Corrupt {
    /// The record under text key `key` of `table` failed for the reason it is given: a closure
    /// for `map_err`, which copies the key only on failure.
    pub(crate) fn text<'k>(
        table: &'static str,
        key: &'k str,
    ) -> impl FnOnce(CorruptReason) -> Self + 'k {
        move |reason| Corrupt {
            table,
            key: RecordKey::Text(key.to_owned()),
            reason,
        }
    }
}
