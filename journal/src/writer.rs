//! The writer thread: owns every write transaction and group-commits concurrent requests.
//!
//! ```text
//!  caller threads                 writer thread
//!  accept(batch) --req+reply--> [ recv one, drain up to max_group ]
//!       |                         begin_write (Durability::Immediate)
//!       |                         per request: validate, then apply (Seq, WorkId, refs)
//!       |                         gc zero-ref blobs; every N commits: trim
//!       |                         crash_point before_commit; commit (fsync); after_commit
//!       <----- reply (durable) -- wake every caller of the group
//! ```

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, SyncSender};

use redb::{ReadableTable, Table, WriteTransaction};

use crate::batch::{Accepted, BlobKind, Op, OpOutcome, Origin};
use crate::codec;
use crate::corrupt::{Corrupt, CorruptReason, RecordKey};
use crate::db::{Db, Inner};
use crate::decode;
use crate::error::{AcceptError, CompactError};
use crate::ids::{Checksum, Seq, Term, UnixMillis, WorkId};
use crate::tables::{
    self, META_DISPATCHED, META_IDENTITY, META_NEXT_SEQ, META_NEXT_WORK_ID, META_TERM,
};
use crate::work::{Queue, QueueShape, WorkItem, WorkKey, WorkRecord};

pub(crate) type Reply = SyncSender<Result<Accepted, AcceptError>>;

pub(crate) enum Request {
    Batch {
        ops: Vec<Op>,
        reply: Reply,
    },
    Compact {
        reply: SyncSender<Result<bool, CompactError>>,
    },
}

pub(crate) struct WriterConfig {
    pub durability: redb::Durability,
    pub max_group: usize,
    pub trim_every_commits: u32,
    /// The file, when the journal is a file: auto-compaction compares its size with live data.
    pub auto_compact_path: Option<std::path::PathBuf>,
}

/// Slack before auto-compaction: the file may exceed twice the used bytes by this much.
const AUTO_COMPACT_SLACK_BYTES: u64 = 8 * 1024 * 1024;

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
    /// Blobs whose count may have reached zero in this request.
    gc: Vec<Checksum>,
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

    fn blob_exists(&self, h: &Checksum) -> Result<bool, AcceptError> {
        Ok(self
            .refs
            .get(h.as_bytes().as_slice())
            .map_err(AcceptError::storage)?
            .is_some())
    }

    fn counts(&self, h: &Checksum) -> Result<Option<(u64, u64)>, AcceptError> {
        Ok(self
            .refs
            .get(h.as_bytes().as_slice())
            .map_err(AcceptError::storage)?
            .map(|v| v.value()))
    }

    /// Adds `refs`/`holds` (may be negative) to a blob's counts; schedules GC at zero.
    fn adjust(&mut self, h: Checksum, refs: i64, holds: i64) -> Result<(), AcceptError> {
        let Some((r, hd)) = self.counts(&h)? else {
            if refs > 0 || holds > 0 {
                return Err(AcceptError::MissingBlob { blob: h });
            }
            // A decrement of a blob that is already gone: verify reports the mismatch.
            return Ok(());
        };
        let r = r.saturating_add_signed(refs);
        let hd = hd.saturating_add_signed(holds);
        self.refs
            .insert(h.as_bytes().as_slice(), (r, hd))
            .map_err(AcceptError::storage)?;
        if r == 0 && hd == 0 {
            self.gc.push(h);
        }
        Ok(())
    }

    /// Drops the render reference of a replaced or removed `endpoint_applied` record.
    fn release_endpoint_render(&mut self, bytes: &[u8], endpoint: &str) -> Result<(), AcceptError> {
        let (_, old) = decode::endpoint_applied(bytes).map_err(|reason| Corrupt {
            table: "endpoint_applied",
            key: RecordKey::Text(endpoint.to_owned()),
            reason,
        })?;
        self.adjust(old.render, -1, 0)
    }

    /// Removes every scheduled blob whose counts are still zero, cascading into render files.
    fn collect(&mut self) -> Result<(), AcceptError> {
        while let Some(h) = self.gc.pop() {
            if self.counts(&h)? != Some((0, 0)) {
                continue;
            }
            self.refs
                .remove(h.as_bytes().as_slice())
                .map_err(AcceptError::storage)?;
            let removed = self
                .blobs
                .remove(h.as_bytes().as_slice())
                .map_err(AcceptError::storage)?
                .map(|v| v.value().to_vec());
            if let Some(bytes) = removed {
                let corrupt = |reason| Corrupt {
                    table: "blobs",
                    key: RecordKey::Blob(h),
                    reason,
                };
                let (_, kind, content) = decode::blob(&bytes).map_err(corrupt)?;
                if kind == BlobKind::Render {
                    let render = decode::render(content).map_err(corrupt)?;
                    for child in render.blob_refs() {
                        self.adjust(child, -1, 0)?;
                    }
                }
            }
        }
        Ok(())
    }

    fn read_work(&self, queue: Queue, key: &WorkKey) -> Result<Option<WorkRecord>, AcceptError> {
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

    fn write_work(&mut self, queue: Queue, key: &WorkKey, bytes: &[u8]) -> Result<(), AcceptError> {
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
    fn remove_work(
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

    fn key_of(item: &WorkItem, id: WorkId) -> WorkKey {
        match item.queue().shape() {
            QueueShape::Fifo => WorkKey::Id(id),
            QueueShape::ByPod => match item {
                WorkItem::Status(s) => WorkKey::Pod(s.key()),
                _ => WorkKey::Slot,
            },
            QueueShape::Slot => WorkKey::Slot,
        }
    }

    /// Checks what can be checked before anything is written, so a rejected request leaves no
    /// trace in the shared transaction.
    pub(crate) fn validate(&self, ctx: &Ctx, ops: &[Op]) -> Result<(), AcceptError> {
        let mut put: HashSet<Checksum> = HashSet::new();
        let mut term = ctx.term;
        let mut released: Vec<(Checksum, u64)> = Vec::new();
        let need = |put: &HashSet<Checksum>, h: &Checksum| -> Result<(), AcceptError> {
            if put.contains(h) || self.blob_exists(h)? {
                Ok(())
            } else {
                Err(AcceptError::MissingBlob { blob: *h })
            }
        };
        for op in ops {
            match op {
                Op::Event(e) => {
                    for h in e.blob_refs() {
                        need(&put, &h)?;
                    }
                }
                Op::PutBlob {
                    hash,
                    kind,
                    content,
                    ..
                } => {
                    if *kind == BlobKind::Render
                        && let Ok(r) = decode::render(content)
                    {
                        for h in r.blob_refs() {
                            need(&put, &h)?;
                        }
                    }
                    put.insert(*hash);
                }
                Op::Enqueue { item, .. } => {
                    for h in item.blob_refs() {
                        need(&put, &h)?;
                    }
                }
                Op::ReleaseBlob(h) => {
                    let holds = self.counts(h)?.map(|c| c.1).unwrap_or(0)
                        + ops
                            .iter()
                            .filter(
                                |o| matches!(o, Op::PutBlob { hash, hold: true, .. } if hash == h),
                            )
                            .count() as u64;
                    let n = released.iter_mut().find(|(x, _)| x == h);
                    let done = match n {
                        Some((_, n)) => {
                            *n += 1;
                            *n
                        }
                        None => {
                            released.push((*h, 1));
                            1
                        }
                    };
                    if done > holds {
                        return Err(AcceptError::NoHold { blob: *h });
                    }
                }
                Op::SetTerm { term: t, .. } => {
                    if *t <= term {
                        return Err(AcceptError::TermNotNewer {
                            current: term,
                            requested: *t,
                        });
                    }
                    term = *t;
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Applies one request's operations. Call [`Self::validate`] first.
    pub(crate) fn apply(&mut self, ctx: &mut Ctx, ops: &[Op]) -> Result<Accepted, AcceptError> {
        let mut outcomes = Vec::with_capacity(ops.len());
        let mut batch_seqs: Vec<Seq> = Vec::new();
        let s = AcceptError::storage;
        for op in ops {
            let out = match op {
                Op::Event(e) => {
                    let seq = ctx.next_seq;
                    let bytes = codec::seal_value(e.kind().as_str(), ctx.now, ctx.term, &e);
                    self.events.insert(seq, bytes.as_slice()).map_err(s)?;
                    for h in e.blob_refs() {
                        self.adjust(h, 1, 0)?;
                    }
                    ctx.next_seq += 1;
                    batch_seqs.push(Seq(seq));
                    OpOutcome::Event(Seq(seq))
                }
                Op::PutBlob {
                    hash,
                    kind,
                    content,
                    hold,
                } => {
                    let (hash, kind, hold) = (*hash, *kind, *hold);
                    if self.blob_exists(&hash)? {
                        if hold {
                            self.adjust(hash, 0, 1)?;
                        }
                        OpOutcome::Blob {
                            hash,
                            stored: false,
                        }
                    } else {
                        let bytes = codec::seal(kind.record_kind(), ctx.now, ctx.term, content);
                        self.blobs
                            .insert(hash.as_bytes().as_slice(), bytes.as_slice())
                            .map_err(s)?;
                        self.refs
                            .insert(hash.as_bytes().as_slice(), (0, u64::from(hold)))
                            .map_err(s)?;
                        if kind == BlobKind::Render {
                            let render = decode::render(content).map_err(|reason| Corrupt {
                                table: "blobs",
                                key: RecordKey::Blob(hash),
                                reason,
                            })?;
                            for h in render.blob_refs() {
                                self.adjust(h, 1, 0)?;
                            }
                        }
                        self.gc.push(hash);
                        OpOutcome::Blob { hash, stored: true }
                    }
                }
                Op::ReleaseBlob(h) => {
                    self.adjust(*h, 0, -1)?;
                    OpOutcome::Done
                }
                Op::Enqueue {
                    item,
                    origin,
                    not_before,
                } => {
                    let item = item.clone();
                    let id = WorkId(ctx.next_work);
                    ctx.next_work += 1;
                    let origin = match *origin {
                        Origin::None => None,
                        Origin::Seq(s) => Some(s),
                        Origin::Batch(r) => batch_seqs.get(r.0).copied(),
                    };
                    let queue = item.queue();
                    let key = Self::key_of(&item, id);
                    if queue.shape() != QueueShape::Fifo {
                        self.remove_work(queue, &key)?;
                        if queue == Queue::StatusPending {
                            // A newer update replaces a parked one for the same pod.
                            self.remove_work(Queue::StatusParked, &key)?;
                        }
                    }
                    for h in item.blob_refs() {
                        self.adjust(h, 1, 0)?;
                    }
                    let rec = WorkRecord {
                        id,
                        origin,
                        enqueued_at: ctx.now,
                        attempt: 0,
                        next_attempt_at: not_before.unwrap_or(ctx.now),
                        item,
                    };
                    let bytes = codec::seal_value(rec.item.record_kind(), ctx.now, ctx.term, &rec);
                    self.write_work(queue, &key, &bytes)?;
                    OpOutcome::Enqueued(id)
                }
                Op::Ack { queue, key, id } => match self.read_work(*queue, key)? {
                    Some(rec) if rec.id == *id => {
                        self.remove_work(*queue, key)?;
                        OpOutcome::Matched(true)
                    }
                    _ => OpOutcome::Matched(false),
                },
                Op::Reschedule {
                    queue,
                    key,
                    id,
                    next_attempt_at,
                } => match self.read_work(*queue, key)? {
                    Some(mut rec) if rec.id == *id => {
                        rec.attempt = rec.attempt.saturating_add(1);
                        rec.next_attempt_at = *next_attempt_at;
                        let bytes =
                            codec::seal_value(rec.item.record_kind(), ctx.now, ctx.term, &rec);
                        self.write_work(*queue, key, &bytes)?;
                        OpOutcome::Matched(true)
                    }
                    _ => OpOutcome::Matched(false),
                },
                Op::Park { key, id } => {
                    let wk = WorkKey::Pod(key.clone());
                    match self.read_work(Queue::StatusPending, &wk)? {
                        Some(rec) if rec.id == *id => {
                            let bytes = self
                                .pending
                                .remove(key.0.as_str())
                                .map_err(s)?
                                .map(|v| v.value().to_vec())
                                .unwrap_or_default();
                            self.parked
                                .insert(key.0.as_str(), bytes.as_slice())
                                .map_err(s)?;
                            OpOutcome::Matched(true)
                        }
                        _ => OpOutcome::Matched(false),
                    }
                }
                Op::Unpark { key } => {
                    let keys: Vec<String> = match key {
                        Some(k) => vec![k.0.clone()],
                        None => {
                            let mut v = Vec::new();
                            for r in self.parked.iter().map_err(s)? {
                                let (k, _) = r.map_err(s)?;
                                v.push(k.value().to_owned());
                            }
                            v
                        }
                    };
                    let mut n = 0u32;
                    for k in keys {
                        let Some(bytes) = self
                            .parked
                            .remove(k.as_str())
                            .map_err(s)?
                            .map(|v| v.value().to_vec())
                        else {
                            continue;
                        };
                        n += 1;
                        if self.pending.get(k.as_str()).map_err(s)?.is_some() {
                            // Pending holds a newer update: the parked one is superseded.
                            if let Ok((_, rec)) = decode::work(&bytes) {
                                for h in rec.item.blob_refs() {
                                    self.adjust(h, -1, 0)?;
                                }
                            }
                        } else {
                            self.pending
                                .insert(k.as_str(), bytes.as_slice())
                                .map_err(s)?;
                        }
                    }
                    OpOutcome::Unparked(n)
                }
                Op::SetTerm { term, identity } => {
                    ctx.term = *term;
                    ctx.identity = Some(identity.0.clone());
                    OpOutcome::Done
                }
                Op::MarkDispatched(seq) => {
                    let last = ctx.next_seq.saturating_sub(1);
                    ctx.dispatched = ctx.dispatched.max(seq.0.min(last));
                    OpOutcome::Done
                }
                Op::PutEndpointApplied(e) => {
                    // An endpoint's applied state references the render it runs, so that render
                    // stays available for drift repair and re-deployment after its events are
                    // trimmed. Take the new reference before dropping the old one (same render).
                    self.adjust(e.render, 1, 0)?;
                    let bytes = codec::seal_value(
                        crate::work::EndpointApplied::RECORD_KIND,
                        ctx.now,
                        ctx.term,
                        e,
                    );
                    let old = self
                        .endpoints
                        .insert(e.endpoint.as_str(), bytes.as_slice())
                        .map_err(s)?
                        .map(|v| v.value().to_vec());
                    if let Some(old) = old {
                        self.release_endpoint_render(&old, e.endpoint.as_str())?;
                    }
                    OpOutcome::Done
                }
                Op::RemoveEndpointApplied(url) => {
                    let old = self
                        .endpoints
                        .remove(url.as_str())
                        .map_err(s)?
                        .map(|v| v.value().to_vec());
                    if let Some(old) = old {
                        self.release_endpoint_render(&old, url.as_str())?;
                    }
                    OpOutcome::Done
                }
                Op::PutPublishedCheckpoint(p) => {
                    let bytes = codec::seal_value(
                        crate::work::PublishedCheckpoint::RECORD_KIND,
                        ctx.now,
                        ctx.term,
                        p,
                    );
                    self.published
                        .insert(p.name.as_str(), bytes.as_slice())
                        .map_err(s)?;
                    OpOutcome::Done
                }
                Op::Trim => OpOutcome::Trimmed(self.trim(ctx)?),
            };
            outcomes.push(out);
        }
        self.collect()?;
        Ok(Accepted { outcomes })
    }

    /// The trim watermark: the lowest `Seq` that must stay (see `journal/DESIGN.md`).
    pub(crate) fn watermark(&self, ctx: &Ctx) -> Result<u64, AcceptError> {
        let s = AcceptError::storage;
        let mut w = ctx.dispatched + 1;
        let mut consider =
            |bytes: &[u8], table: &'static str, key: RecordKey| -> Result<(), AcceptError> {
                let (_, rec) = decode::work(bytes)
                    .map_err(|reason| AcceptError::Corrupt(Corrupt { table, key, reason }))?;
                if let Some(o) = rec.origin {
                    w = w.min(o.0);
                }
                Ok(())
            };
        for (i, t) in self.fifo.iter().enumerate() {
            let name = [
                Queue::Publish,
                Queue::PublishDeployed,
                Queue::Invalid,
                Queue::Verdict,
            ][i]
                .table_name();
            for r in t.iter().map_err(s)? {
                let (k, v) = r.map_err(s)?;
                consider(v.value(), name, RecordKey::WorkId(k.value()))?;
            }
        }
        for (t, name) in [
            (&self.pending, "status_pending"),
            (&self.parked, "status_parked"),
        ] {
            for r in t.iter().map_err(s)? {
                let (k, v) = r.map_err(s)?;
                consider(v.value(), name, RecordKey::Text(k.value().to_owned()))?;
            }
        }
        for (i, t) in self.slots.iter().enumerate() {
            let name = [
                Queue::DeployPending,
                Queue::DeployInflight,
                Queue::DrainCheckpoint,
            ][i]
                .table_name();
            if let Some(v) = t.get(()).map_err(s)? {
                consider(v.value(), name, RecordKey::Slot)?;
            }
        }
        Ok(w)
    }

    /// Deletes events below the watermark, releasing their blob references.
    pub(crate) fn trim(&mut self, ctx: &Ctx) -> Result<u64, AcceptError> {
        let s = AcceptError::storage;
        let w = self.watermark(ctx)?;
        let mut n = 0;
        loop {
            let first = self
                .events
                .first()
                .map_err(s)?
                .map(|(k, v)| (k.value(), v.value().to_vec()));
            let Some((seq, bytes)) = first else { break };
            if seq >= w {
                break;
            }
            self.events.remove(seq).map_err(s)?;
            let (_, e) = decode::event(&bytes).map_err(|reason| Corrupt {
                table: "events",
                key: RecordKey::Seq(seq),
                reason,
            })?;
            for h in e.blob_refs() {
                self.adjust(h, -1, 0)?;
            }
            n += 1;
        }
        self.collect()?;
        Ok(n)
    }
}

/// The writer loop. Returns when every sender is dropped.
pub(crate) fn run(inner: Arc<Inner>, rx: Receiver<Request>, cfg: WriterConfig) {
    let mut since_trim = 0u32;
    while let Ok(first) = rx.recv() {
        let mut group: Vec<(Vec<Op>, Reply)> = Vec::new();
        let mut compacts = Vec::new();
        let mut push = |r: Request, group: &mut Vec<(Vec<Op>, Reply)>| match r {
            Request::Batch { ops, reply } => group.push((ops, reply)),
            Request::Compact { reply } => compacts.push(reply),
        };
        push(first, &mut group);
        while group.len() < cfg.max_group {
            match rx.try_recv() {
                Ok(r) => push(r, &mut group),
                Err(_) => break,
            }
        }
        if !group.is_empty() {
            since_trim += 1;
            let trim = cfg.trim_every_commits > 0 && since_trim >= cfg.trim_every_commits;
            if trim {
                since_trim = 0;
            }
            let used = commit_group(&inner, &cfg, group, trim);
            if let (Some(used), Some(path)) = (used, &cfg.auto_compact_path) {
                let file = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
                if file
                    > used
                        .saturating_mul(2)
                        .saturating_add(AUTO_COMPACT_SLACK_BYTES)
                {
                    // Busy (a reader is live) is fine: the next trim tries again.
                    let _ = compact(&inner);
                }
            }
        }
        for reply in compacts {
            let _ = reply.send(compact(&inner));
        }
    }
}

fn compact(inner: &Inner) -> Result<bool, CompactError> {
    let mut db = inner
        .db
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    match &mut *db {
        Db::Ro(_) => Err(CompactError::ReadOnly),
        Db::Rw(d) => {
            crate::crash_point!("journal::before_compact");
            let r = d.compact();
            crate::crash_point!("journal::after_compact");
            match r {
                Ok(b) => Ok(b),
                Err(redb::CompactionError::TransactionInProgress) => Err(CompactError::Busy),
                Err(e) => Err(CompactError::Storage(e.into())),
            }
        }
    }
}

/// Commits a group; returns the bytes redb uses (after a trim), for the auto-compaction check.
fn commit_group(
    inner: &Inner,
    cfg: &WriterConfig,
    mut group: Vec<(Vec<Op>, Reply)>,
    trim: bool,
) -> Option<u64> {
    // A request whose apply fails (not a storage error) is answered alone and the rest retried.
    loop {
        match try_commit(inner, cfg, &group, trim) {
            Ok((results, used)) => {
                for ((_, reply), r) in group.into_iter().zip(results) {
                    let _ = reply.send(r);
                }
                return used;
            }
            Err(GroupError::Request(i, e)) => {
                let (_, reply) = group.remove(i);
                let _ = reply.send(Err(e));
                if group.is_empty() {
                    return None;
                }
            }
            Err(GroupError::Storage(e)) => {
                inner
                    .counters
                    .failed_commits
                    .fetch_add(1, Ordering::Relaxed);
                for (_, reply) in group {
                    let _ = reply.send(Err(e.clone()));
                }
                return None;
            }
        }
    }
}

/// One result per request, and the bytes redb uses when measured (after a trim).
type GroupResults = (Vec<Result<Accepted, AcceptError>>, Option<u64>);

enum GroupError {
    Request(usize, AcceptError),
    Storage(AcceptError),
}

fn try_commit(
    inner: &Inner,
    cfg: &WriterConfig,
    group: &[(Vec<Op>, Reply)],
    trim: bool,
) -> Result<GroupResults, GroupError> {
    let st = |e: redb::Error| GroupError::Storage(AcceptError::storage(e));
    let db = inner
        .db
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let Db::Rw(db) = &*db else {
        return Err(GroupError::Storage(AcceptError::ReadOnly));
    };
    let mut txn = db.begin_write().map_err(|e| st(e.into()))?;
    txn.set_durability(cfg.durability)
        .map_err(|e| st(e.into()))?;
    let mut results = Vec::with_capacity(group.len());
    let mut events = 0u64;
    {
        let mut tx = Tx::open(&txn).map_err(st)?;
        let mut ctx = tx.load_ctx().map_err(GroupError::Storage)?;
        for (i, (ops, _)) in group.iter().enumerate() {
            match tx.validate(&ctx, ops) {
                Ok(()) => {}
                Err(e) => {
                    results.push(Err(e));
                    continue;
                }
            }
            events += ops.iter().filter(|o| matches!(o, Op::Event(_))).count() as u64;
            match tx.apply(&mut ctx, ops) {
                Ok(a) => results.push(Ok(a)),
                Err(e @ AcceptError::Storage { .. }) => return Err(GroupError::Storage(e)),
                Err(e) => return Err(GroupError::Request(i, e)),
            }
        }
        if trim {
            tx.trim(&ctx).map_err(GroupError::Storage)?;
        }
        tx.store_ctx(&ctx).map_err(GroupError::Storage)?;
    }
    let used = if trim && cfg.auto_compact_path.is_some() {
        let st = txn.stats().map_err(|e| st(e.into()))?;
        Some(st.stored_bytes() + st.metadata_bytes() + st.fragmented_bytes())
    } else {
        None
    };
    crate::crash_point!("journal::before_commit");
    txn.commit().map_err(|e| st(e.into()))?;
    crate::crash_point!("journal::after_commit");
    inner.counters.commits.fetch_add(1, Ordering::Relaxed);
    inner.counters.events.fetch_add(events, Ordering::Relaxed);
    inner
        .counters
        .requests
        .fetch_add(group.len() as u64, Ordering::Relaxed);
    Ok((results, used))
}

#[cfg(test)]
mod tests {
    use std::sync::RwLock;
    use std::sync::mpsc::sync_channel;

    use super::*;
    use crate::batch::Batch;
    use crate::db::Counters;
    use crate::events::{Correlation, Event};

    fn drift(i: u64) -> Event {
        Event::DriftPreventionTriggered {
            correlation: Correlation::new(format!("e{i}")),
            time_since_last_deployment_ms: i,
        }
    }

    /// Three requests in one group: the invalid middle one is answered alone with its error,
    /// the other two share one commit.
    #[test]
    fn a_rejected_request_does_not_sink_its_group() {
        let db = redb::Builder::new()
            .create_with_backend(redb::backends::InMemoryBackend::new())
            .unwrap();
        let txn = db.begin_write().unwrap();
        crate::meta::init_tables(&txn).unwrap();
        txn.commit().unwrap();
        let inner = Inner {
            db: RwLock::new(Db::Rw(db)),
            counters: Counters::default(),
        };
        let cfg = WriterConfig {
            durability: redb::Durability::Immediate,
            max_group: 16,
            trim_every_commits: 0,
            auto_compact_path: None,
        };
        let mut group = Vec::new();
        let mut rxs = Vec::new();
        for i in 0..3u64 {
            let mut b = Batch::new();
            b.event(drift(i));
            if i == 1 {
                b.push(Op::ReleaseBlob(Checksum::of(b"never stored")));
            }
            let (tx, rx) = sync_channel(1);
            group.push((b.ops, tx));
            rxs.push(rx);
        }
        commit_group(&inner, &cfg, group, false);
        let results: Vec<_> = rxs.into_iter().map(|rx| rx.recv().unwrap()).collect();
        assert_eq!(results[0].as_ref().unwrap().seqs(), vec![Seq(1)]);
        assert!(matches!(results[1], Err(AcceptError::NoHold { .. })));
        assert_eq!(results[2].as_ref().unwrap().seqs(), vec![Seq(2)]);
        assert_eq!(inner.counters.commits.load(Ordering::Relaxed), 1);
        assert_eq!(inner.counters.events.load(Ordering::Relaxed), 2);
    }
}
