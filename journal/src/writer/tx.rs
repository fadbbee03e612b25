//! The tables of one write transaction ([`Tx`]) and the meta counters it carries ([`Ctx`]).

use redb::{ReadableTable, Table, WriteTransaction};

use crate::corrupt::{Corrupt, CorruptReason, RecordKey};
use crate::decode;
use crate::error::AcceptError;
use crate::ids::{Checksum, Term, UnixMillis, WorkId};
use crate::tables::{
    self, META_DISPATCHED, META_IDENTITY, META_NEXT_SEQ, META_NEXT_WORK_ID, META_TERM,
};
use crate::work::{Queue, QueueShape, WorkItem, WorkKey, WorkRecord};

/// Per-transaction counters, loaded from meta at `begin` and stored at the end.
pub(crate) struct Ctx {
    pub now: UnixMillis,
    pub term: Term,
    pub identity: Option<String>,
    pub next_seq: u64,
    pub next_work: u64,
    pub dispatched: u64,
}

fn meta_u64(
    t: &impl ReadableTable<&'static str, &'static [u8]>,
    key: &str,
) -> Result<Option<u64>, AcceptError> {
    match t.get(key).map_err(AcceptError::storage)? {
        None => Ok(None),
        Some(v) => {
            let b: [u8; 8] = v.value().try_into().map_err(|_| {
                AcceptError::Corrupt(Corrupt {
                    table: "meta",
                    key: RecordKey::Text(key.to_owned()),
                    reason: CorruptReason::BadMeta,
                })
            })?;
            Ok(Some(u64::from_le_bytes(b)))
        }
    }
}

pub(crate) struct Tx<'t> {
    pub meta: Table<'t, &'static str, &'static [u8]>,
    pub events: Table<'t, u64, &'static [u8]>,
    pub blobs: Table<'t, &'static [u8], &'static [u8]>,
    pub refs: Table<'t, &'static [u8], (u64, u64)>,
    pub fifo: [Table<'t, u64, &'static [u8]>; 4],
    pub pending: Table<'t, &'static str, &'static [u8]>,
    pub parked: Table<'t, &'static str, &'static [u8]>,
    pub slots: [Table<'t, (), &'static [u8]>; 3],
    pub endpoints: Table<'t, &'static str, &'static [u8]>,
    pub published: Table<'t, &'static str, &'static [u8]>,
    pub components: Table<'t, &'static str, &'static [u8]>,
    /// Blobs whose count may have reached zero in this request.
    pub(super) gc: Vec<Checksum>,
}

fn fifo_index(q: Queue) -> usize {
    match q {
        Queue::PublishDeployed => 1,
        Queue::Invalid => 2,
        Queue::Verdict => 3,
        _ => 0,
    }
}

fn slot_index(q: Queue) -> usize {
    match q {
        Queue::DeployInflight => 1,
        Queue::DrainCheckpoint => 2,
        _ => 0,
    }
}

impl<'t> Tx<'t> {
    pub(crate) fn open(txn: &'t WriteTransaction) -> Result<Self, redb::Error> {
        Ok(Tx {
            meta: txn.open_table(tables::META)?,
            events: txn.open_table(tables::EVENTS)?,
            blobs: txn.open_table(tables::BLOBS)?,
            refs: txn.open_table(tables::BLOB_REFS)?,
            fifo: [
                txn.open_table(tables::PUBLISH_VALIDATED)?,
                txn.open_table(tables::PUBLISH_DEPLOYED)?,
                txn.open_table(tables::INVALID_PUBLISH)?,
                txn.open_table(tables::VERDICT)?,
            ],
            pending: txn.open_table(tables::STATUS_PENDING)?,
            parked: txn.open_table(tables::STATUS_PARKED)?,
            slots: [
                txn.open_table(tables::DEPLOY_PENDING)?,
                txn.open_table(tables::DEPLOY_INFLIGHT)?,
                txn.open_table(tables::DRAIN_CHECKPOINT)?,
            ],
            endpoints: txn.open_table(tables::ENDPOINT_APPLIED)?,
            published: txn.open_table(tables::PUBLISHED_CHECKPOINT)?,
            components: txn.open_table(tables::COMPONENT_STATE)?,
            gc: Vec::new(),
        })
    }

    pub(crate) fn load_ctx(&self) -> Result<Ctx, AcceptError> {
        let identity = self
            .meta
            .get(META_IDENTITY)
            .map_err(AcceptError::storage)?
            .map(|v| String::from_utf8_lossy(v.value()).into_owned());
        Ok(Ctx {
            now: UnixMillis::now(),
            term: Term(meta_u64(&self.meta, META_TERM)?.unwrap_or(0)),
            identity,
            next_seq: meta_u64(&self.meta, META_NEXT_SEQ)?.unwrap_or(1),
            next_work: meta_u64(&self.meta, META_NEXT_WORK_ID)?.unwrap_or(1),
            dispatched: meta_u64(&self.meta, META_DISPATCHED)?.unwrap_or(0),
        })
    }

    pub(crate) fn store_ctx(&mut self, ctx: &Ctx) -> Result<(), AcceptError> {
        let s = AcceptError::storage;
        self.meta
            .insert(META_TERM, ctx.term.0.to_le_bytes().as_slice())
            .map_err(s)?;
        self.meta
            .insert(META_NEXT_SEQ, ctx.next_seq.to_le_bytes().as_slice())
            .map_err(s)?;
        self.meta
            .insert(META_NEXT_WORK_ID, ctx.next_work.to_le_bytes().as_slice())
            .map_err(s)?;
        self.meta
            .insert(META_DISPATCHED, ctx.dispatched.to_le_bytes().as_slice())
            .map_err(s)?;
        if let Some(id) = &ctx.identity {
            self.meta.insert(META_IDENTITY, id.as_bytes()).map_err(s)?;
        }
        Ok(())
    }

    pub(super) fn read_work(
        &self,
        queue: Queue,
        key: &WorkKey,
    ) -> Result<Option<WorkRecord>, AcceptError> {
        let (bytes, rk) = match (queue.shape(), key) {
            (QueueShape::Fifo, WorkKey::Id(id)) => (
                self.fifo[fifo_index(queue)]
                    .get(id.0)
                    .map_err(AcceptError::storage)?
                    .map(|v| v.value().to_vec()),
                RecordKey::WorkId(id.0),
            ),
            (QueueShape::ByPod, WorkKey::Pod(k)) => {
                let t = if queue == Queue::StatusParked {
                    &self.parked
                } else {
                    &self.pending
                };
                (
                    t.get(k.0.as_str())
                        .map_err(AcceptError::storage)?
                        .map(|v| v.value().to_vec()),
                    RecordKey::Text(k.0.clone()),
                )
            }
            (QueueShape::Slot, WorkKey::Slot) => (
                self.slots[slot_index(queue)]
                    .get(())
                    .map_err(AcceptError::storage)?
                    .map(|v| v.value().to_vec()),
                RecordKey::Slot,
            ),
            _ => return Ok(None),
        };
        match bytes {
            None => Ok(None),
            Some(b) => decode::work(&b).map(|(_, r)| Some(r)).map_err(|reason| {
                AcceptError::Corrupt(Corrupt {
                    table: queue.table_name(),
                    key: rk,
                    reason,
                })
            }),
        }
    }

    pub(super) fn write_work(
        &mut self,
        queue: Queue,
        key: &WorkKey,
        bytes: &[u8],
    ) -> Result<(), AcceptError> {
        let s = AcceptError::storage;
        match key {
            WorkKey::Id(id) => {
                self.fifo[fifo_index(queue)]
                    .insert(id.0, bytes)
                    .map_err(s)?;
            }
            WorkKey::Pod(k) => {
                let t = if queue == Queue::StatusParked {
                    &mut self.parked
                } else {
                    &mut self.pending
                };
                t.insert(k.0.as_str(), bytes).map_err(s)?;
            }
            WorkKey::Slot => {
                self.slots[slot_index(queue)].insert((), bytes).map_err(s)?;
            }
        }
        Ok(())
    }

    /// Removes the record under `key`, releasing its blob references. Returns it.
    pub(super) fn remove_work(
        &mut self,
        queue: Queue,
        key: &WorkKey,
    ) -> Result<Option<WorkRecord>, AcceptError> {
        let old = self.read_work(queue, key)?;
        if old.is_some() {
            let s = AcceptError::storage;
            match key {
                WorkKey::Id(id) => {
                    self.fifo[fifo_index(queue)].remove(id.0).map_err(s)?;
                }
                WorkKey::Pod(k) => {
                    let t = if queue == Queue::StatusParked {
                        &mut self.parked
                    } else {
                        &mut self.pending
                    };
                    t.remove(k.0.as_str()).map_err(s)?;
                }
                WorkKey::Slot => {
                    self.slots[slot_index(queue)].remove(()).map_err(s)?;
                }
            }
        }
        if let Some(rec) = &old {
            for h in rec.item.blob_refs() {
                self.adjust(h, -1, 0)?;
            }
        }
        Ok(old)
    }

    pub(super) fn key_of(item: &WorkItem, id: WorkId) -> WorkKey {
        match item.queue().shape() {
            QueueShape::Fifo => WorkKey::Id(id),
            QueueShape::ByPod => match item {
                WorkItem::Status(s) => WorkKey::Pod(s.key()),
                _ => WorkKey::Slot,
            },
            QueueShape::Slot => WorkKey::Slot,
        }
    }
}
