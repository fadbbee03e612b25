//! The tables of one write transaction ([`Tx`]) and the meta counters it carries ([`Ctx`]).

use std::sync::Arc;

use redb::{ReadableTable, Table, WriteTransaction};
use serde::Serialize;

use crate::checkpoint::ComponentCheckpoint;
use crate::codec;
use crate::corrupt::{Corrupt, CorruptReason, RecordKey};
use crate::decode;
use crate::error::AcceptError;
use crate::ids::{Checksum, Term, UnixMillis, WorkId};
use crate::pod::{EndpointFiles, EndpointTransaction};
use crate::tables::{
    self, META_DISPATCHED, META_IDENTITY, META_NEXT_SEQ, META_NEXT_WORK_ID, META_TERM,
};
use crate::work::{
    EndpointApplied, PodStatusChange, PublishedCheckpoint, Queue, QueueShape, WorkItem, WorkKey,
    WorkRecord,
};

/// The meta counters, loaded once from meta and kept by the writer thread across commits (it
/// owns every write transaction, so nobody else changes them while the journal is open).
///
/// `now` is set per transaction; the rest is what the last successful commit left. A group works
/// on a copy: only a successful commit replaces the writer's copy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Ctx {
    pub now: UnixMillis,
    pub term: Term,
    pub identity: Option<Arc<str>>,
    /// The `Seq` the next event gets: `max(meta next_seq, newest event + 1)`.
    pub next_seq: u64,
    /// What meta's `next_seq` holds: a floor, written only by commits that delete events
    /// (`journal/DESIGN.md`, invariant 1), so an event-only commit writes no meta key.
    pub meta_next_seq: u64,
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

type StrTable<'t> = Table<'t, &'static str, &'static [u8]>;
type IdTable<'t> = Table<'t, u64, &'static [u8]>;
type KeyTable<'t> = Table<'t, &'static [u8], &'static [u8]>;
type RefsTable<'t> = Table<'t, &'static [u8], (u64, u64)>;
type SlotTable<'t> = Table<'t, (), &'static [u8]>;
pub(super) type HistoryTable<'t> = Table<'t, (&'static str, u64), &'static [u8]>;

/// The tables of one write transaction, each opened on first use.
///
/// Opening a redb table costs a table-directory lookup, and every open table is flushed and
/// closed at commit, so a group opens only what its requests touch (an event-only group: `meta`
/// and `events`).
pub(crate) struct Tx<'t> {
    txn: &'t WriteTransaction,
    meta: Option<StrTable<'t>>,
    events: Option<IdTable<'t>>,
    blobs: Option<KeyTable<'t>>,
    refs: Option<RefsTable<'t>>,
    fifo: [Option<IdTable<'t>>; 4],
    pending: Option<StrTable<'t>>,
    parked: Option<StrTable<'t>>,
    slots: [Option<SlotTable<'t>>; 3],
    records: [Option<StrTable<'t>>; 5],
    history: Option<HistoryTable<'t>>,
    /// Blobs whose count may have reached zero in this request.
    pub(super) gc: Vec<Checksum>,
    /// Whether this transaction deleted events (then meta `next_seq` must be written).
    pub(super) events_removed: bool,
    /// Scratch buffer every record of the transaction is sealed into (see
    /// [`crate::codec::seal_value_into`]); owned by the writer and reused across transactions.
    pub(super) buf: Vec<u8>,
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

/// The tables that keep one record a name (an endpoint URL, a checkpoint or component name),
/// each record replaced whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Named {
    /// `endpoint_applied`.
    EndpointApplied,
    /// `endpoint_files`.
    EndpointFiles,
    /// `endpoint_transaction`.
    EndpointTransaction,
    /// `published_checkpoint`.
    PublishedCheckpoint,
    /// `component_state`.
    ComponentState,
}

impl Named {
    /// The kind of the records the table holds.
    fn record_kind(self) -> &'static str {
        match self {
            Named::EndpointApplied => EndpointApplied::RECORD_KIND,
            Named::EndpointFiles => EndpointFiles::RECORD_KIND,
            Named::EndpointTransaction => EndpointTransaction::RECORD_KIND,
            Named::PublishedCheckpoint => PublishedCheckpoint::RECORD_KIND,
            Named::ComponentState => ComponentCheckpoint::RECORD_KIND,
        }
    }
}

/// The [`Named`] tables, in the order of its variants.
const NAMED_TABLES: [redb::TableDefinition<&str, &[u8]>; 5] = [
    tables::ENDPOINT_APPLIED,
    tables::ENDPOINT_FILES,
    tables::ENDPOINT_TRANSACTION,
    tables::PUBLISHED_CHECKPOINT,
    tables::COMPONENT_STATE,
];

/// Opens `def` into `slot` unless it is already open there; returns the table.
fn lazy<'s, 't, K: redb::Key + 'static, V: redb::Value + 'static>(
    txn: &'t WriteTransaction,
    slot: &'s mut Option<Table<'t, K, V>>,
    def: redb::TableDefinition<K, V>,
) -> Result<&'s mut Table<'t, K, V>, AcceptError> {
    let table = match slot.take() {
        Some(t) => t,
        None => txn.open_table(def).map_err(AcceptError::storage)?,
    };
    Ok(slot.insert(table))
}

impl<'t> Tx<'t> {
    /// Tables of `txn`, none open yet; `buf` is the writer's sealing buffer.
    pub(crate) fn new(txn: &'t WriteTransaction, buf: Vec<u8>) -> Self {
        Tx {
            txn,
            meta: None,
            events: None,
            blobs: None,
            refs: None,
            fifo: [None, None, None, None],
            pending: None,
            parked: None,
            slots: [None, None, None],
            records: [None, None, None, None, None],
            history: None,
            gc: Vec::new(),
            events_removed: false,
            buf,
        }
    }

    /// Closes the tables and gives back the sealing buffer.
    pub(crate) fn finish(self) -> Vec<u8> {
        self.buf
    }

    pub(super) fn meta(&mut self) -> Result<&mut StrTable<'t>, AcceptError> {
        lazy(self.txn, &mut self.meta, tables::META)
    }

    pub(super) fn events(&mut self) -> Result<&mut IdTable<'t>, AcceptError> {
        lazy(self.txn, &mut self.events, tables::EVENTS)
    }

    pub(super) fn blobs(&mut self) -> Result<&mut KeyTable<'t>, AcceptError> {
        lazy(self.txn, &mut self.blobs, tables::BLOBS)
    }

    pub(super) fn refs(&mut self) -> Result<&mut RefsTable<'t>, AcceptError> {
        lazy(self.txn, &mut self.refs, tables::BLOB_REFS)
    }

    pub(super) fn fifo(&mut self, q: Queue) -> Result<&mut IdTable<'t>, AcceptError> {
        let i = fifo_index(q);
        lazy(self.txn, &mut self.fifo[i], tables::fifo_def(q))
    }

    pub(super) fn pending(&mut self) -> Result<&mut StrTable<'t>, AcceptError> {
        lazy(self.txn, &mut self.pending, tables::STATUS_PENDING)
    }

    pub(super) fn parked(&mut self) -> Result<&mut StrTable<'t>, AcceptError> {
        lazy(self.txn, &mut self.parked, tables::STATUS_PARKED)
    }

    /// `status_parked` for [`Queue::StatusParked`], `status_pending` otherwise.
    fn by_pod(&mut self, q: Queue) -> Result<&mut StrTable<'t>, AcceptError> {
        if q == Queue::StatusParked {
            self.parked()
        } else {
            self.pending()
        }
    }

    pub(super) fn slot(&mut self, q: Queue) -> Result<&mut SlotTable<'t>, AcceptError> {
        let i = slot_index(q);
        lazy(self.txn, &mut self.slots[i], tables::slot_def(q))
    }

    pub(super) fn named(&mut self, t: Named) -> Result<&mut StrTable<'t>, AcceptError> {
        let i = t as usize;
        lazy(self.txn, &mut self.records[i], NAMED_TABLES[i])
    }

    pub(super) fn history(&mut self) -> Result<&mut HistoryTable<'t>, AcceptError> {
        lazy(self.txn, &mut self.history, tables::POD_HISTORY)
    }

    /// Reads the meta counters (the writer does this once, then keeps them; see [`Ctx`]).
    pub(crate) fn load_ctx(&mut self) -> Result<Ctx, AcceptError> {
        let newest = self
            .events()?
            .last()
            .map_err(AcceptError::storage)?
            .map(|(k, _)| k.value());
        let meta = self.meta()?;
        let identity = meta
            .get(META_IDENTITY)
            .map_err(AcceptError::storage)?
            .map(|v| Arc::from(String::from_utf8_lossy(v.value()).as_ref()));
        let meta_next_seq = meta_u64(meta, META_NEXT_SEQ)?.unwrap_or(1);
        Ok(Ctx {
            now: UnixMillis::now(),
            term: Term(meta_u64(meta, META_TERM)?.unwrap_or(0)),
            identity,
            next_seq: crate::meta::next_seq(meta_next_seq, newest),
            meta_next_seq,
            next_work: meta_u64(meta, META_NEXT_WORK_ID)?.unwrap_or(1),
            dispatched: meta_u64(meta, META_DISPATCHED)?.unwrap_or(0),
        })
    }

    /// Writes the meta counters that differ from `stored` (what meta holds now); nothing when
    /// none changed. `next_seq` is written only when this transaction deleted events: otherwise
    /// the newest event implies it (invariant 1).
    pub(crate) fn store_ctx(&mut self, ctx: &mut Ctx, stored: &Ctx) -> Result<(), AcceptError> {
        let s = AcceptError::storage;
        if self.events_removed && ctx.next_seq != ctx.meta_next_seq {
            ctx.meta_next_seq = ctx.next_seq;
        }
        let changed: [(&str, u64, u64); 4] = [
            (META_TERM, ctx.term.0, stored.term.0),
            (META_NEXT_SEQ, ctx.meta_next_seq, stored.meta_next_seq),
            (META_NEXT_WORK_ID, ctx.next_work, stored.next_work),
            (META_DISPATCHED, ctx.dispatched, stored.dispatched),
        ];
        for (key, new, old) in changed {
            if new != old {
                self.meta()?
                    .insert(key, new.to_le_bytes().as_slice())
                    .map_err(s)?;
            }
        }
        if ctx.identity != stored.identity
            && let Some(id) = &ctx.identity
        {
            self.meta()?
                .insert(META_IDENTITY, id.as_bytes())
                .map_err(s)?;
        }
        Ok(())
    }

    pub(super) fn read_work(
        &mut self,
        queue: Queue,
        key: &WorkKey,
    ) -> Result<Option<WorkRecord>, AcceptError> {
        let s = AcceptError::storage;
        let (bytes, rk) = match (queue.shape(), key) {
            (QueueShape::Fifo, WorkKey::Id(id)) => (
                self.fifo(queue)?
                    .get(id.0)
                    .map_err(s)?
                    .map(|v| v.value().to_vec()),
                RecordKey::WorkId(id.0),
            ),
            (QueueShape::ByPod, WorkKey::Pod(k)) => (
                self.by_pod(queue)?
                    .get(k.0.as_str())
                    .map_err(s)?
                    .map(|v| v.value().to_vec()),
                RecordKey::Text(k.0.clone()),
            ),
            (QueueShape::Slot, WorkKey::Slot) => (
                self.slot(queue)?
                    .get(())
                    .map_err(s)?
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

    /// Writes the record sealed in [`Self::buf`] under `key`.
    pub(super) fn write_work_buf(
        &mut self,
        queue: Queue,
        key: &WorkKey,
    ) -> Result<(), AcceptError> {
        let s = AcceptError::storage;
        let buf = std::mem::take(&mut self.buf);
        let r = match key {
            WorkKey::Id(id) => self.fifo(queue)?.insert(id.0, buf.as_slice()).map(|_| ()),
            WorkKey::Pod(k) => self
                .by_pod(queue)?
                .insert(k.0.as_str(), buf.as_slice())
                .map(|_| ()),
            WorkKey::Slot => self.slot(queue)?.insert((), buf.as_slice()).map(|_| ()),
        };
        self.buf = buf;
        r.map_err(s)
    }

    /// Seals `value` as a `kind` record of this transaction (its time and term) into
    /// [`Self::buf`].
    pub(super) fn seal<T: Serialize>(&mut self, ctx: &Ctx, kind: &str, value: &T) {
        codec::seal_value_into(&mut self.buf, kind, ctx.now, ctx.term, value);
    }

    /// Seals `value` as a record of `table` (see [`Self::seal`]) and writes it under `key`.
    /// Returns the bytes of the record it replaced when `keep_old`; otherwise `None`, copying
    /// nothing.
    pub(super) fn put_record<T: Serialize>(
        &mut self,
        ctx: &Ctx,
        table: Named,
        key: &str,
        value: &T,
        keep_old: bool,
    ) -> Result<Option<Vec<u8>>, AcceptError> {
        self.seal(ctx, table.record_kind(), value);
        let buf = std::mem::take(&mut self.buf);
        let r = self.named(table).and_then(|t| {
            t.insert(key, buf.as_slice())
                .map(|old| old.filter(|_| keep_old).map(|v| v.value().to_vec()))
                .map_err(AcceptError::storage)
        });
        self.buf = buf;
        r
    }

    /// Removes the record under `key` of `table`; returns its bytes, if any.
    pub(super) fn remove_record(
        &mut self,
        table: Named,
        key: &str,
    ) -> Result<Option<Vec<u8>>, AcceptError> {
        Ok(self
            .named(table)?
            .remove(key)
            .map_err(AcceptError::storage)?
            .map(|v| v.value().to_vec()))
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
                    self.fifo(queue)?.remove(id.0).map_err(s)?;
                }
                WorkKey::Pod(k) => {
                    self.by_pod(queue)?.remove(k.0.as_str()).map_err(s)?;
                }
                WorkKey::Slot => {
                    self.slot(queue)?.remove(()).map_err(s)?;
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

    /// The id of the queued item a new `item` must not replace, if any: a discovered pod's
    /// pending entry (`PodStatusChange::Discovered`, issue 27) never replaces an item queued
    /// or parked for the same pod (a deployment report, a removal): that item says more, and
    /// a pod with an entry keeps it anyway. Every other item replaces the pod's older one.
    pub(super) fn report_kept_over(
        &mut self,
        item: &WorkItem,
    ) -> Result<Option<WorkId>, AcceptError> {
        let WorkItem::Status(s) = item else {
            return Ok(None);
        };
        if !matches!(s.change, PodStatusChange::Discovered) {
            return Ok(None);
        }
        let key = WorkKey::Pod(s.key());
        if let Some(rec) = self.read_work(Queue::StatusPending, &key)? {
            return Ok(Some(rec.id));
        }
        Ok(self.read_work(Queue::StatusParked, &key)?.map(|r| r.id))
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
