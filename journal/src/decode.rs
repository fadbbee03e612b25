//! Record decoding without a [`crate::Journal`]: what `haptic-journalctl` uses to print any
//! stored value, and what `verify` runs on every record.

use crate::batch::BlobKind;
use crate::codec::{self, RecordHeader};
use crate::corrupt::CorruptReason;
use crate::events::{Event, EventKind};
use crate::ids::Checksum;
use crate::render::Render;
use crate::work::{EndpointApplied, PublishedCheckpoint, WorkRecord};

/// An event record (table `events`).
///
/// # Errors
/// A [`CorruptReason`] when the envelope, the kind or the payload is wrong.
pub fn event(bytes: &[u8]) -> Result<(RecordHeader, Event), CorruptReason> {
    let (h, e): (RecordHeader, Event) = codec::open_as(bytes, |k| EventKind::parse(k).is_some())?;
    if e.kind().as_str() != h.kind {
        return Err(CorruptReason::UnexpectedKind { found: h.kind });
    }
    Ok((h, e))
}

/// A work record (any queue table).
///
/// # Errors
/// A [`CorruptReason`] when the envelope, the kind or the payload is wrong.
pub fn work(bytes: &[u8]) -> Result<(RecordHeader, WorkRecord), CorruptReason> {
    let (h, w): (RecordHeader, WorkRecord) = codec::open_as(bytes, |k| k.starts_with("work."))?;
    if w.item.record_kind() != h.kind {
        return Err(CorruptReason::UnexpectedKind { found: h.kind });
    }
    Ok((h, w))
}

/// A blob record (table `blobs`): header, kind and content (for renders, the encoded manifest;
/// see [`render`]). Does not check the content hash (see [`blob_checked`]).
///
/// # Errors
/// A [`CorruptReason`] when the envelope or kind is wrong.
pub fn blob(bytes: &[u8]) -> Result<(RecordHeader, BlobKind, &[u8]), CorruptReason> {
    let raw = codec::open(bytes)?;
    let kind = match raw.kind {
        "blob.file" => BlobKind::File,
        "blob.render" => BlobKind::Render,
        other => {
            return Err(CorruptReason::UnexpectedKind {
                found: other.to_owned(),
            });
        }
    };
    Ok((raw.header(), kind, raw.payload))
}

/// A blob that must match its `key`: a file's content must hash to it (SHA-256), a render
/// manifest's blob keys and paths must give it as their render checksum
/// ([`Render::computed_checksum`]), and so must the manifest's `checksum` field.
///
/// # Errors
/// As [`blob`], plus [`CorruptReason::BlobHashMismatch`] (with what the content hashes to), and
/// [`CorruptReason::Decode`] for a manifest that does not decode.
pub fn blob_checked(key: Checksum, bytes: &[u8]) -> Result<(BlobKind, &[u8]), CorruptReason> {
    let (_, kind, content) = blob(bytes)?;
    let actual = match kind {
        BlobKind::File => Checksum::of(content),
        BlobKind::Render => {
            let r = render(content)?;
            let computed = r.computed_checksum();
            if computed == key {
                r.checksum
            } else {
                computed
            }
        }
    };
    if actual != key {
        return Err(CorruptReason::BlobHashMismatch { actual });
    }
    Ok((kind, content))
}

/// A render manifest from a `blob.render` blob's content.
///
/// # Errors
/// [`CorruptReason::Decode`] when it is not a manifest.
pub fn render(content: &[u8]) -> Result<Render, CorruptReason> {
    codec::decode_payload(content)
}

/// An `endpoint_applied` record.
///
/// # Errors
/// A [`CorruptReason`] when the envelope, the kind or the payload is wrong.
pub fn endpoint_applied(bytes: &[u8]) -> Result<(RecordHeader, EndpointApplied), CorruptReason> {
    codec::open_as(bytes, |k| k == EndpointApplied::RECORD_KIND)
}

/// An `endpoint_files` record (schema 2).
///
/// # Errors
/// A [`CorruptReason`] when the envelope, the kind or the payload is wrong.
pub fn endpoint_files(
    bytes: &[u8],
) -> Result<(RecordHeader, crate::pod::EndpointFiles), CorruptReason> {
    codec::open_as(bytes, |k| k == crate::pod::EndpointFiles::RECORD_KIND)
}

/// An `endpoint_transaction` record (schema 2).
///
/// # Errors
/// A [`CorruptReason`] when the envelope, the kind or the payload is wrong.
pub fn endpoint_transaction(
    bytes: &[u8],
) -> Result<(RecordHeader, crate::pod::EndpointTransaction), CorruptReason> {
    codec::open_as(bytes, |k| k == crate::pod::EndpointTransaction::RECORD_KIND)
}

/// A `component_state` record.
///
/// # Errors
/// A [`CorruptReason`] naming the failing field.
pub fn component_checkpoint(
    bytes: &[u8],
) -> Result<(RecordHeader, crate::checkpoint::ComponentCheckpoint), CorruptReason> {
    codec::open_as(bytes, |k| {
        k == crate::checkpoint::ComponentCheckpoint::RECORD_KIND
    })
}

/// A `pod_history` record (schema 4).
///
/// # Errors
/// A [`CorruptReason`] when the envelope, the kind or the payload is wrong.
pub fn sync_record(
    bytes: &[u8],
) -> Result<(RecordHeader, crate::history::SyncRecord), CorruptReason> {
    codec::open_as(bytes, |k| k == crate::history::SyncRecord::RECORD_KIND)
}

/// A `published_checkpoint` record.
///
/// # Errors
/// A [`CorruptReason`] when the envelope, the kind or the payload is wrong.
pub fn published_checkpoint(
    bytes: &[u8],
) -> Result<(RecordHeader, PublishedCheckpoint), CorruptReason> {
    codec::open_as(bytes, |k| k == PublishedCheckpoint::RECORD_KIND)
}

/// Any record, decoded by the table it was read from.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Decoded {
    /// From `events`.
    Event(Event),
    /// From a queue table.
    Work(WorkRecord),
    /// From `blobs`: kind and content length (content via [`blob`]).
    Blob {
        /// File or manifest.
        kind: BlobKind,
        /// Content length.
        size_bytes: u64,
        /// The manifest, for renders.
        render: Option<Render>,
    },
    /// From `endpoint_applied`.
    EndpointApplied(EndpointApplied),
    /// From `endpoint_files`.
    EndpointFiles(crate::pod::EndpointFiles),
    /// From `endpoint_transaction`.
    EndpointTransaction(crate::pod::EndpointTransaction),
    /// From `published_checkpoint`.
    PublishedCheckpoint(PublishedCheckpoint),
    /// From `component_state`.
    ComponentCheckpoint(crate::checkpoint::ComponentCheckpoint),
    /// From `pod_history` (schema 4).
    SyncRecord(crate::history::SyncRecord),
}

/// Decodes a value of any envelope table (`meta` and `blob_refs` are not envelopes).
///
/// # Errors
/// A [`CorruptReason`]; [`CorruptReason::UnexpectedKind`] for a table without envelopes.
pub fn any(table: &str, bytes: &[u8]) -> Result<(RecordHeader, Decoded), CorruptReason> {
    match table {
        "events" => event(bytes).map(|(h, e)| (h, Decoded::Event(e))),
        "blobs" => {
            let (h, kind, content) = blob(bytes)?;
            let render = match kind {
                BlobKind::Render => Some(render(content)?),
                BlobKind::File => None,
            };
            Ok((
                h,
                Decoded::Blob {
                    kind,
                    size_bytes: content.len() as u64,
                    render,
                },
            ))
        }
        "endpoint_applied" => {
            endpoint_applied(bytes).map(|(h, e)| (h, Decoded::EndpointApplied(e)))
        }
        "endpoint_files" => endpoint_files(bytes).map(|(h, e)| (h, Decoded::EndpointFiles(e))),
        "endpoint_transaction" => {
            endpoint_transaction(bytes).map(|(h, t)| (h, Decoded::EndpointTransaction(t)))
        }
        "published_checkpoint" => {
            published_checkpoint(bytes).map(|(h, p)| (h, Decoded::PublishedCheckpoint(p)))
        }
        "component_state" => {
            component_checkpoint(bytes).map(|(h, c)| (h, Decoded::ComponentCheckpoint(c)))
        }
        "pod_history" => sync_record(bytes).map(|(h, r)| (h, Decoded::SyncRecord(r))),
        t if crate::work::Queue::ALL.iter().any(|q| q.table_name() == t) => {
            work(bytes).map(|(h, w)| (h, Decoded::Work(w)))
        }
        other => Err(CorruptReason::UnexpectedKind {
            found: format!("table {other}"),
        }),
    }
}
