//! The reads: each runs in its own read transaction (a consistent snapshot), with redb panics
//! contained.

use redb::{ReadTransaction, ReadableTable};

use super::{Journal, guarded};
use crate::batch::BlobKind;
use crate::codec::RecordHeader;
use crate::corrupt::{Corrupt, CorruptReason, RecordKey};
use crate::decode;
use crate::error::{ReadError, storage};
use crate::events::Event;
use crate::ids::{Checksum, Seq, Term, UnixMillis, WorkId};
use crate::meta::{Meta, read_meta};
use crate::render::Render;
use crate::tables;
use crate::work::{
    EndpointApplied, PodStatusKey, PublishedCheckpoint, Queue, QueueShape, WorkKey, WorkRecord,
};

/// A work item as read from its queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkEntry {
    /// The queue.
    pub queue: Queue,
    /// Its key (pass it back to ack).
    pub key: WorkKey,
    /// Envelope header (term, time of the last write).
    pub header: RecordHeader,
    /// The record (pass `record.id` back to ack).
    pub record: WorkRecord,
}

/// Blob reference counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlobCounts {
    /// References from records (events, work items, render manifests).
    pub refs: u64,
    /// Explicit holds ([`Journal::put_blob`]).
    pub holds: u64,
}

impl Journal {
    pub(crate) fn read_txn(&self) -> Result<ReadTransaction, ReadError> {
        // A poisoned lock only means a thread panicked while holding it; the database is intact.
        let db = self
            .inner
            .db
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        db.begin_read().map_err(storage)
    }

    /// The meta values.
    ///
    /// # Errors
    /// [`ReadError`].
    pub fn meta(&self) -> Result<Meta, ReadError> {
        guarded(|| read_meta(&self.read_txn()?))
    }

    /// The current leadership term.
    ///
    /// # Errors
    /// [`ReadError`].
    pub fn term(&self) -> Result<Term, ReadError> {
        guarded(|| Ok(self.meta()?.term))
    }

    /// One event.
    ///
    /// # Errors
    /// [`ReadError::Corrupt`] when it fails its CRC or decode.
    pub fn event(&self, seq: Seq) -> Result<Option<(RecordHeader, Event)>, ReadError> {
        guarded(|| {
            let rtx = self.read_txn()?;
            let t = rtx.open_table(tables::EVENTS).map_err(storage)?;
            let Some(v) = t.get(seq.0).map_err(storage)? else {
                return Ok(None);
            };
            decode::event(v.value()).map(Some).map_err(|reason| {
                ReadError::Corrupt(Corrupt {
                    table: "events",
                    key: RecordKey::Seq(seq.0),
                    reason,
                })
            })
        })
    }

    /// Events from `from` (inclusive) in `Seq` order, at most `limit`.
    ///
    /// # Errors
    /// [`ReadError::Corrupt`] at the first corrupt event (never skipped).
    pub fn events(
        &self,
        from: Seq,
        limit: usize,
    ) -> Result<Vec<(Seq, RecordHeader, Event)>, ReadError> {
        guarded(|| {
            let rtx = self.read_txn()?;
            let t = rtx.open_table(tables::EVENTS).map_err(storage)?;
            let mut out = Vec::new();
            for r in t.range(from.0..).map_err(storage)?.take(limit) {
                let (k, v) = r.map_err(storage)?;
                let (h, e) = decode::event(v.value()).map_err(|reason| {
                    ReadError::Corrupt(Corrupt {
                        table: "events",
                        key: RecordKey::Seq(k.value()),
                        reason,
                    })
                })?;
                out.push((Seq(k.value()), h, e));
            }
            Ok(out)
        })
    }

    /// Every item of a queue in queue order (FIFO by id; status queues by key; slots: 0 or 1).
    ///
    /// # Errors
    /// [`ReadError::Corrupt`] at the first corrupt item.
    pub fn queue(&self, queue: Queue) -> Result<Vec<WorkEntry>, ReadError> {
        guarded(|| read_queue(&self.read_txn()?, queue))
    }

    /// Items of `queue` due at `now` (`next_attempt_at <= now`), in queue order, at most `limit`.
    ///
    /// # Errors
    /// [`ReadError::Corrupt`] at the first corrupt item.
    pub fn peek_due(
        &self,
        queue: Queue,
        now: UnixMillis,
        limit: usize,
    ) -> Result<Vec<WorkEntry>, ReadError> {
        guarded(|| {
            Ok(self
                .queue(queue)?
                .into_iter()
                .filter(|e| e.record.next_attempt_at <= now)
                .take(limit)
                .collect())
        })
    }

    /// A blob's content (for renders: the encoded manifest; use [`Journal::get_render`]).
    ///
    /// # Errors
    /// [`ReadError::Corrupt`] when the envelope or the content hash is wrong.
    pub fn get_blob(&self, hash: Checksum) -> Result<Option<Vec<u8>>, ReadError> {
        guarded(|| {
            let rtx = self.read_txn()?;
            let t = rtx.open_table(tables::BLOBS).map_err(storage)?;
            let Some(v) = t.get(hash.as_bytes().as_slice()).map_err(storage)? else {
                return Ok(None);
            };
            let (_, content) = decode::blob_checked(hash, v.value()).map_err(|reason| {
                ReadError::Corrupt(Corrupt {
                    table: "blobs",
                    key: RecordKey::Blob(hash),
                    reason,
                })
            })?;
            Ok(Some(content.to_vec()))
        })
    }

    /// A render manifest by render checksum.
    ///
    /// # Errors
    /// [`ReadError::Corrupt`] when it is not a valid manifest.
    pub fn get_render(&self, checksum: Checksum) -> Result<Option<Render>, ReadError> {
        guarded(|| {
            let Some(content) = self.get_blob(checksum)? else {
                return Ok(None);
            };
            decode::render(&content).map(Some).map_err(|reason| {
                ReadError::Corrupt(Corrupt {
                    table: "blobs",
                    key: RecordKey::Blob(checksum),
                    reason,
                })
            })
        })
    }

    /// Every stored render manifest, by render checksum. Tools use it to find which files are
    /// secret ([`crate::AuxKind::is_secret`]) before printing a blob.
    ///
    /// # Errors
    /// [`ReadError::Corrupt`] at the first corrupt manifest.
    pub fn renders(&self) -> Result<Vec<Render>, ReadError> {
        guarded(|| {
            let mut out = Vec::new();
            for (hash, kind, _, _) in self.blobs()? {
                if kind == BlobKind::Render
                    && let Some(r) = self.get_render(hash)?
                {
                    out.push(r);
                }
            }
            Ok(out)
        })
    }

    /// A blob's reference counts; `None` when it is not stored.
    ///
    /// # Errors
    /// [`ReadError`].
    pub fn blob_counts(&self, hash: Checksum) -> Result<Option<BlobCounts>, ReadError> {
        guarded(|| {
            let rtx = self.read_txn()?;
            let t = rtx.open_table(tables::BLOB_REFS).map_err(storage)?;
            Ok(t.get(hash.as_bytes().as_slice())
                .map_err(storage)?
                .map(|v| {
                    let (refs, holds) = v.value();
                    BlobCounts { refs, holds }
                }))
        })
    }

    /// Every stored blob with its kind, size and counts, by key.
    ///
    /// # Errors
    /// [`ReadError::Corrupt`] at the first corrupt blob.
    pub fn blobs(&self) -> Result<Vec<(Checksum, BlobKind, u64, BlobCounts)>, ReadError> {
        guarded(|| {
            let rtx = self.read_txn()?;
            crate::contain::at_table("blobs");
            let t = rtx.open_table(tables::BLOBS).map_err(storage)?;
            let refs = rtx.open_table(tables::BLOB_REFS).map_err(storage)?;
            let mut out = Vec::new();
            for r in t.iter().map_err(storage)? {
                let (k, v) = r.map_err(storage)?;
                let key = Checksum::from_key(k.value()).ok_or_else(|| {
                    ReadError::Corrupt(Corrupt {
                        table: "blobs",
                        key: RecordKey::BadBlobKey(k.value().to_vec()),
                        reason: CorruptReason::BadMeta,
                    })
                })?;
                let (_, kind, content) = decode::blob(v.value()).map_err(|reason| {
                    ReadError::Corrupt(Corrupt {
                        table: "blobs",
                        key: RecordKey::Blob(key),
                        reason,
                    })
                })?;
                let (r, h) = refs
                    .get(k.value())
                    .map_err(storage)?
                    .map(|v| v.value())
                    .unwrap_or((0, 0));
                out.push((
                    key,
                    kind,
                    content.len() as u64,
                    BlobCounts { refs: r, holds: h },
                ));
            }
            Ok(out)
        })
    }

    /// Every endpoint's last-applied state, by URL.
    ///
    /// # Errors
    /// [`ReadError::Corrupt`] at the first corrupt record.
    pub fn endpoints_applied(&self) -> Result<Vec<EndpointApplied>, ReadError> {
        self.state_table(
            tables::ENDPOINT_APPLIED,
            "endpoint_applied",
            decode::endpoint_applied,
        )
    }

    /// Every endpoint's stored-file state (schema 2), by URL.
    ///
    /// # Errors
    /// [`ReadError::Corrupt`] at the first corrupt record.
    pub fn endpoints_files(&self) -> Result<Vec<crate::pod::EndpointFiles>, ReadError> {
        self.state_table(
            tables::ENDPOINT_FILES,
            "endpoint_files",
            decode::endpoint_files,
        )
    }

    /// Every transaction this replica has open on an endpoint (schema 2), by URL.
    ///
    /// # Errors
    /// [`ReadError::Corrupt`] at the first corrupt record.
    pub fn endpoint_transactions(&self) -> Result<Vec<crate::pod::EndpointTransaction>, ReadError> {
        self.state_table(
            tables::ENDPOINT_TRANSACTION,
            "endpoint_transaction",
            decode::endpoint_transaction,
        )
    }

    /// Every record of a state table keyed by text, decoded by `decode`.
    fn state_table<T>(
        &self,
        def: redb::TableDefinition<&str, &[u8]>,
        table: &'static str,
        decode: Decoder<T>,
    ) -> Result<Vec<T>, ReadError> {
        guarded(|| text_table(&self.read_txn()?, def, table, decode))
    }

    /// The checkpoint of `component` (`deployment-scheduler`, `validator`, `config-publisher`),
    /// if one was written (DESIGN.md J11).
    ///
    /// # Errors
    /// [`ReadError::Corrupt`] when the record is corrupt.
    pub fn component_checkpoint(
        &self,
        component: &str,
    ) -> Result<Option<crate::checkpoint::ComponentCheckpoint>, ReadError> {
        guarded(|| {
            let rtx = self.read_txn()?;
            let t = rtx.open_table(tables::COMPONENT_STATE).map_err(storage)?;
            let Some(v) = t.get(component).map_err(storage)? else {
                return Ok(None);
            };
            let (_, c) = decode::component_checkpoint(v.value())
                .map_err(Corrupt::text("component_state", component))?;
            Ok(Some(c))
        })
    }

    /// Every HAProxyCfg's published checkpoint, by name.
    ///
    /// # Errors
    /// [`ReadError::Corrupt`] at the first corrupt record.
    pub fn published_checkpoints(&self) -> Result<Vec<PublishedCheckpoint>, ReadError> {
        self.state_table(
            tables::PUBLISHED_CHECKPOINT,
            "published_checkpoint",
            decode::published_checkpoint,
        )
    }

    /// Raw `(key, value)` pairs of any table except `blob_refs` (use [`Journal::blobs`]), for
    /// dumping with [`crate::decode::any`] even when records are corrupt. `meta` values are the raw
    /// little-endian/UTF-8 bytes. `from`/`limit` apply to `events` (by `Seq`) and to all tables
    /// (by position).
    ///
    /// # Errors
    /// [`ReadError::Storage`]; an unknown table name gives an empty list.
    pub fn raw_table(
        &self,
        table: &str,
        from: Option<Seq>,
        limit: usize,
    ) -> Result<Vec<(RecordKey, Vec<u8>)>, ReadError> {
        guarded(|| {
            let rtx = self.read_txn()?;
            raw_table(&rtx, table, from, limit)
        })
    }

    /// Walks every table: envelopes and CRCs, blob hashes, the gap-free event log, and the
    /// cross-references (every referenced blob exists; every blob's stored counts equal the
    /// references found). Never stops at the first problem.
    ///
    /// # Errors
    /// [`ReadError::Storage`] when redb itself fails.
    pub fn verify(&self) -> Result<crate::verify::VerifyReport, ReadError> {
        guarded(|| crate::verify::verify(&self.read_txn()?))
    }
}

/// Every record of `table` (`def`, keyed by text) in `rtx`, by key, decoded by `decode`.
pub(super) fn text_table<T>(
    rtx: &ReadTransaction,
    def: redb::TableDefinition<&str, &[u8]>,
    table: &'static str,
    decode: Decoder<T>,
) -> Result<Vec<T>, ReadError> {
    let t = rtx.open_table(def).map_err(storage)?;
    let mut out = Vec::new();
    for r in t.iter().map_err(storage)? {
        let (k, v) = r.map_err(storage)?;
        let (_, e) = decode(v.value()).map_err(Corrupt::text(table, k.value()))?;
        out.push(e);
    }
    Ok(out)
}

pub(crate) fn read_queue(rtx: &ReadTransaction, queue: Queue) -> Result<Vec<WorkEntry>, ReadError> {
    let name = queue.table_name();
    crate::contain::at_table(name);
    let mut out = Vec::new();
    crate::verify::each_queue_record(rtx, queue, |rk, bytes| {
        let key = match &rk {
            RecordKey::WorkId(id) => WorkKey::Id(WorkId(*id)),
            RecordKey::Text(k) => WorkKey::Pod(PodStatusKey(k.clone())),
            _ => WorkKey::Slot,
        };
        let (header, record) = decode::work(bytes).map_err(|reason| {
            ReadError::Corrupt(Corrupt {
                table: name,
                key: rk,
                reason,
            })
        })?;
        out.push(WorkEntry {
            queue,
            key,
            header,
            record,
        });
        Ok(())
    })?;
    Ok(out)
}

pub(crate) fn raw_table(
    rtx: &ReadTransaction,
    table: &str,
    from: Option<Seq>,
    limit: usize,
) -> Result<Vec<(RecordKey, Vec<u8>)>, ReadError> {
    if let Some(t) = tables::ALL_TABLES.iter().find(|t| **t == table) {
        crate::contain::at_table(t);
    }
    let mut out = Vec::new();
    macro_rules! dump {
        ($def:expr, $key:expr) => {{
            let t = rtx.open_table($def).map_err(storage)?;
            for r in t.iter().map_err(storage)?.take(limit) {
                let (k, v) = r.map_err(storage)?;
                out.push(($key(k.value()), v.value().to_vec()));
            }
        }};
    }
    match table {
        "meta" => dump!(tables::META, |k: &str| RecordKey::Text(k.to_owned())),
        "events" => {
            let t = rtx.open_table(tables::EVENTS).map_err(storage)?;
            for r in t
                .range(from.map_or(0, |s| s.0)..)
                .map_err(storage)?
                .take(limit)
            {
                let (k, v) = r.map_err(storage)?;
                out.push((RecordKey::Seq(k.value()), v.value().to_vec()));
            }
        }
        "blobs" => dump!(tables::BLOBS, |k: &[u8]| Checksum::from_key(k)
            .map_or_else(|| RecordKey::BadBlobKey(k.to_vec()), RecordKey::Blob)),
        "endpoint_applied" => dump!(tables::ENDPOINT_APPLIED, |k: &str| RecordKey::Text(
            k.to_owned()
        )),
        "endpoint_files" => dump!(tables::ENDPOINT_FILES, |k: &str| RecordKey::Text(
            k.to_owned()
        )),
        "endpoint_transaction" => dump!(tables::ENDPOINT_TRANSACTION, |k: &str| RecordKey::Text(
            k.to_owned()
        )),
        "published_checkpoint" => dump!(tables::PUBLISHED_CHECKPOINT, |k: &str| RecordKey::Text(
            k.to_owned()
        )),
        "component_state" => dump!(tables::COMPONENT_STATE, |k: &str| RecordKey::Text(
            k.to_owned()
        )),
        "pod_history" => dump!(tables::POD_HISTORY, |(pod, seq): (&str, u64)| {
            crate::history::record_key(pod, seq)
        }),
        other => {
            let Some(q) = Queue::ALL.iter().copied().find(|q| q.table_name() == other) else {
                return Ok(out);
            };
            match q.shape() {
                QueueShape::Fifo => dump!(tables::fifo_def(q), |k: u64| RecordKey::WorkId(k)),
                QueueShape::ByPod => {
                    dump!(tables::pod_def(q), |k: &str| RecordKey::Text(k.to_owned()))
                }
                QueueShape::Slot => dump!(tables::slot_def(q), |_k: ()| RecordKey::Slot),
            }
        }
    }
    Ok(out)
}

/// A record decoder of `decode` (bytes to header and record).
type Decoder<T> = fn(&[u8]) -> Result<(RecordHeader, T), CorruptReason>;
