//! The `meta` table and the schema version (J8): creating a journal's tables, reading and writing
//! meta values (layout in `journal/DESIGN.md`).

use redb::{ReadTransaction, ReadableTable};

use crate::corrupt::{Corrupt, CorruptReason, RecordKey};
use crate::error::{ReadError, storage};
use crate::ids::{Identity, Seq, Term, UnixMillis, WorkId};
use crate::tables::{self, META_CODEC, META_CREATED_AT, META_SCHEMA_VERSION};
use crate::work::{Queue, QueueShape};

/// The schema version this code reads and writes (DESIGN.md J8).
pub const SCHEMA_VERSION: u32 = 4;

/// Values of the `meta` table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Meta {
    /// Schema version.
    pub schema_version: u32,
    /// Payload codec name.
    pub codec: String,
    /// Current leadership term.
    pub term: Term,
    /// Replica holding the term, when one was recorded.
    pub identity: Option<Identity>,
    /// File creation time.
    pub created_at: UnixMillis,
    /// The `Seq` the next event will get: the larger of meta's `next_seq` (a floor, written when
    /// events are trimmed) and the newest event's `Seq` + 1 (`journal/DESIGN.md`, invariant 1).
    pub next_seq: Seq,
    /// The `WorkId` the next work item will get.
    pub next_work_id: WorkId,
    /// Last dispatched `Seq` (`Seq(0)`: none).
    pub dispatched_through: Seq,
}

/// Creates every table and writes the initial meta, in `txn`. For new files and for migrations.
///
/// # Errors
/// redb errors.
pub fn init_tables(txn: &redb::WriteTransaction) -> Result<(), redb::Error> {
    {
        txn.open_table(tables::EVENTS)?;
        txn.open_table(tables::BLOBS)?;
        txn.open_table(tables::BLOB_REFS)?;
        for q in Queue::ALL {
            match q.shape() {
                QueueShape::Fifo => {
                    txn.open_table(tables::fifo_def(*q))?;
                }
                QueueShape::ByPod => {
                    txn.open_table(tables::pod_def(*q))?;
                }
                QueueShape::Slot => {
                    txn.open_table(tables::slot_def(*q))?;
                }
            }
        }
        txn.open_table(tables::ENDPOINT_APPLIED)?;
        txn.open_table(tables::ENDPOINT_FILES)?;
        txn.open_table(tables::ENDPOINT_TRANSACTION)?;
        txn.open_table(tables::PUBLISHED_CHECKPOINT)?;
        txn.open_table(tables::COMPONENT_STATE)?;
        txn.open_table(tables::POD_HISTORY)?;
        let mut meta = txn.open_table(tables::META)?;
        if meta.get(META_SCHEMA_VERSION)?.is_none() {
            meta.insert(META_SCHEMA_VERSION, SCHEMA_VERSION.to_le_bytes().as_slice())?;
            meta.insert(META_CODEC, crate::codec::CODEC_NAME.as_bytes())?;
            meta.insert(
                META_CREATED_AT,
                UnixMillis::now().0.to_le_bytes().as_slice(),
            )?;
        }
    }
    Ok(())
}

/// Reads the schema version from meta; `None` when the file has no meta table or key.
///
/// # Errors
/// [`ReadError::Corrupt`] for a malformed value; storage errors.
pub fn read_schema_version(txn: &ReadTransaction) -> Result<Option<u32>, ReadError> {
    let t = match txn.open_table(tables::META) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
        Err(e) => return Err(storage(e)),
    };
    let Some(v) = t.get(META_SCHEMA_VERSION).map_err(storage)? else {
        return Ok(None);
    };
    let b: [u8; 4] = v
        .value()
        .try_into()
        .map_err(|_| bad_meta(META_SCHEMA_VERSION))?;
    Ok(Some(u32::from_le_bytes(b)))
}

/// Writes the schema version (a migration step does this in its own transaction, J8).
///
/// # Errors
/// redb errors.
pub fn write_schema_version(txn: &redb::WriteTransaction, version: u32) -> Result<(), redb::Error> {
    let mut t = txn.open_table(tables::META)?;
    t.insert(META_SCHEMA_VERSION, version.to_le_bytes().as_slice())?;
    Ok(())
}

fn bad_meta(key: &str) -> ReadError {
    ReadError::Corrupt(Corrupt {
        table: "meta",
        key: RecordKey::Text(key.to_owned()),
        reason: CorruptReason::BadMeta,
    })
}

/// The `Seq` the next event gets, from meta's `next_seq` (a floor) and the newest event's `Seq`.
///
/// Meta's value is written only by commits that delete events (trimming), so that an event-only
/// commit writes one table; the newest event implies the rest. Never below either, so a `Seq` is
/// never reused, also after every event was trimmed (invariant 1).
pub(crate) fn next_seq(meta_next_seq: u64, newest_event: Option<u64>) -> u64 {
    newest_event.map_or(meta_next_seq, |n| meta_next_seq.max(n + 1))
}

/// Reads every meta value (`next_seq` derived as [`Meta::next_seq`] says).
///
/// # Errors
/// [`ReadError::Corrupt`] for a missing or malformed value; storage errors.
pub fn read_meta(txn: &ReadTransaction) -> Result<Meta, ReadError> {
    // The newest event first (it is part of next_seq), so damage there is named as the events
    // table's.
    crate::contain::at_table("events");
    let newest = {
        let events = txn.open_table(tables::EVENTS).map_err(storage)?;
        events.last().map_err(storage)?.map(|(k, _)| k.value())
    };
    crate::contain::at_table("meta");
    let t = txn.open_table(tables::META).map_err(storage)?;
    let get = |k: &str| -> Result<Option<Vec<u8>>, ReadError> {
        Ok(t.get(k).map_err(storage)?.map(|v| v.value().to_vec()))
    };
    let u64_of = |k: &str, default: Option<u64>| -> Result<u64, ReadError> {
        match get(k)? {
            Some(v) => Ok(u64::from_le_bytes(v.try_into().map_err(|_| bad_meta(k))?)),
            None => default.ok_or_else(|| bad_meta(k)),
        }
    };
    let schema = get(META_SCHEMA_VERSION)?.ok_or_else(|| bad_meta(META_SCHEMA_VERSION))?;
    let schema_version = u32::from_le_bytes(
        schema
            .try_into()
            .map_err(|_| bad_meta(META_SCHEMA_VERSION))?,
    );
    Ok(Meta {
        schema_version,
        codec: String::from_utf8_lossy(&get(META_CODEC)?.unwrap_or_default()).into_owned(),
        term: Term(u64_of(tables::META_TERM, Some(0))?),
        identity: get(tables::META_IDENTITY)?
            .map(|v| Identity(String::from_utf8_lossy(&v).into_owned())),
        created_at: UnixMillis(u64_of(META_CREATED_AT, Some(0))?),
        next_seq: Seq(next_seq(u64_of(tables::META_NEXT_SEQ, Some(1))?, newest)),
        next_work_id: WorkId(u64_of(tables::META_NEXT_WORK_ID, Some(1))?),
        dispatched_through: Seq(u64_of(tables::META_DISPATCHED, Some(0))?),
    })
}
