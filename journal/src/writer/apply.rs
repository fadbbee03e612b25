//! Validating and applying one request's operations inside the group's transaction.

use std::collections::HashSet;

use redb::ReadableTable;

use super::tx::Named;
use super::{Ctx, Tx};
use crate::batch::{Accepted, BlobKind, Op, OpOutcome, Origin};
use crate::codec;
use crate::corrupt::{Corrupt, RecordKey};
use crate::decode;
use crate::error::AcceptError;
use crate::ids::{Checksum, Seq, WorkId};
use crate::work::{Queue, QueueShape, WorkKey, WorkRecord};

impl Tx<'_> {
    /// Checks what can be checked before anything is written, so a rejected request leaves no
    /// trace in the shared transaction.
    pub(crate) fn validate(&mut self, ctx: &Ctx, ops: &[Op]) -> Result<(), AcceptError> {
        let mut put: HashSet<Checksum> = HashSet::new();
        let mut term = ctx.term;
        let mut released: Vec<(Checksum, u64)> = Vec::new();
        let need = |tx: &mut Self, put: &HashSet<Checksum>, h: &Checksum| {
            if put.contains(h) || tx.blob_exists(h)? {
                Ok(())
            } else {
                Err(AcceptError::MissingBlob { blob: *h })
            }
        };
        for op in ops {
            match op {
                Op::Event(e) => {
                    for h in e.blob_refs() {
                        need(self, &put, &h)?;
                    }
                }
                Op::PutBlob {
                    hash,
                    kind,
                    content,
                    check_hash,
                    ..
                } => {
                    // A caller-supplied key is checked before new content is stored under it.
                    if *check_hash && !put.contains(hash) && !self.blob_exists(hash)? {
                        let actual = Checksum::of(content);
                        if actual != *hash {
                            return Err(AcceptError::BlobHashMismatch {
                                blob: *hash,
                                actual,
                            });
                        }
                    }
                    // A stored manifest already references its files (invariant 4): only a
                    // manifest this batch may store has its files checked.
                    if *kind == BlobKind::Render
                        && !put.contains(hash)
                        && !self.blob_exists(hash)?
                        && let Ok(r) = decode::render(content)
                    {
                        for h in r.blob_refs() {
                            need(self, &put, &h)?;
                        }
                    }
                    put.insert(*hash);
                }
                Op::Enqueue { item, .. } => {
                    for h in item.blob_refs() {
                        need(self, &put, &h)?;
                    }
                }
                Op::PutComponentCheckpoint(c) => {
                    for h in c.state.renders() {
                        need(self, &put, &h)?;
                    }
                }
                Op::AppendHistory { record, .. } => need(self, &put, &record.render)?,
                Op::ReleaseBlob(h) => {
                    let stored_holds = self.counts(h)?.map(|c| c.1).unwrap_or(0);
                    let holds = stored_holds
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
        // A request's events get consecutive Seqs from here (EventRef(i) = first + i).
        let first_seq = ctx.next_seq;
        let s = AcceptError::storage;
        for op in ops {
            let out = match op {
                Op::Event(e) => {
                    let seq = ctx.next_seq;
                    self.seal(ctx, e.kind().as_str(), e);
                    let buf = std::mem::take(&mut self.buf);
                    let r = self.events()?.insert(seq, buf.as_slice()).map(|_| ());
                    self.buf = buf;
                    r.map_err(s)?;
                    for h in e.blob_refs() {
                        self.adjust(h, 1, 0)?;
                    }
                    ctx.next_seq += 1;
                    OpOutcome::Event(Seq(seq))
                }
                Op::PutBlob {
                    hash,
                    kind,
                    content,
                    hold,
                    ..
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
                        self.blobs()?
                            .insert(hash.as_bytes().as_slice(), bytes.as_slice())
                            .map_err(s)?;
                        self.refs()?
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
                } => 'enqueue: {
                    let item = item.clone();
                    if let Some(kept) = self.report_kept_over(&item)? {
                        break 'enqueue OpOutcome::Enqueued(kept);
                    }
                    let id = WorkId(ctx.next_work);
                    ctx.next_work += 1;
                    let origin = match *origin {
                        Origin::None => None,
                        Origin::Seq(s) => Some(s),
                        Origin::Batch(r) => {
                            let seq = first_seq + r.0 as u64;
                            (seq < ctx.next_seq).then_some(Seq(seq))
                        }
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
                    self.seal(ctx, rec.item.record_kind(), &rec);
                    self.write_work_buf(queue, &key)?;
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
                        self.seal(ctx, rec.item.record_kind(), &rec);
                        self.write_work_buf(*queue, key)?;
                        OpOutcome::Matched(true)
                    }
                    _ => OpOutcome::Matched(false),
                },
                Op::Park { key, id } => {
                    let wk = WorkKey::Pod(key.clone());
                    match self.read_work(Queue::StatusPending, &wk)? {
                        Some(rec) if rec.id == *id => {
                            let bytes = self
                                .pending()?
                                .remove(key.0.as_str())
                                .map_err(s)?
                                .map(|v| v.value().to_vec())
                                .unwrap_or_default();
                            self.parked()?
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
                            for r in self.parked()?.iter().map_err(s)? {
                                let (k, _) = r.map_err(s)?;
                                v.push(k.value().to_owned());
                            }
                            v
                        }
                    };
                    let mut n = 0u32;
                    for k in keys {
                        let Some(bytes) = self
                            .parked()?
                            .remove(k.as_str())
                            .map_err(s)?
                            .map(|v| v.value().to_vec())
                        else {
                            continue;
                        };
                        n += 1;
                        if self.pending()?.get(k.as_str()).map_err(s)?.is_some() {
                            // Pending holds a newer update: the parked one is superseded.
                            if let Ok((_, rec)) = decode::work(&bytes) {
                                for h in rec.item.blob_refs() {
                                    self.adjust(h, -1, 0)?;
                                }
                            }
                        } else {
                            self.pending()?
                                .insert(k.as_str(), bytes.as_slice())
                                .map_err(s)?;
                        }
                    }
                    OpOutcome::Unparked(n)
                }
                Op::SetTerm { term, identity } => {
                    ctx.term = *term;
                    ctx.identity = Some(std::sync::Arc::from(identity.0.as_str()));
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
                    let url = e.endpoint.as_str();
                    if let Some(old) = self.put_record(ctx, Named::EndpointApplied, url, e, true)? {
                        self.release_endpoint_render(&old, url)?;
                    }
                    OpOutcome::Done
                }
                Op::RemoveEndpointApplied(url) => {
                    if let Some(old) = self.remove_record(Named::EndpointApplied, url.as_str())? {
                        self.release_endpoint_render(&old, url.as_str())?;
                    }
                    OpOutcome::Done
                }
                Op::PutEndpointFiles(e) => {
                    self.put_record(ctx, Named::EndpointFiles, e.endpoint.as_str(), e, false)?;
                    OpOutcome::Done
                }
                Op::RemoveEndpointFiles(url) => {
                    self.remove_record(Named::EndpointFiles, url.as_str())?;
                    OpOutcome::Done
                }
                Op::PutEndpointTransaction(t) => {
                    let url = t.endpoint.as_str();
                    self.put_record(ctx, Named::EndpointTransaction, url, t, false)?;
                    OpOutcome::Done
                }
                Op::RemoveEndpointTransaction(url) => {
                    self.remove_record(Named::EndpointTransaction, url.as_str())?;
                    OpOutcome::Done
                }
                Op::PutPublishedCheckpoint(p) => {
                    self.put_record(ctx, Named::PublishedCheckpoint, p.name.as_str(), p, false)?;
                    OpOutcome::Done
                }
                Op::RemovePublishedCheckpoint(name) => {
                    self.remove_record(Named::PublishedCheckpoint, name.as_str())?;
                    OpOutcome::Done
                }
                Op::PutComponentCheckpoint(c) => {
                    // The renders a component's state names stay stored while it names them
                    // (invariant 4); take the new references before dropping the old ones.
                    for h in c.state.renders() {
                        self.adjust(h, 1, 0)?;
                    }
                    let key = c.state.component();
                    if let Some(old) = self.put_record(ctx, Named::ComponentState, key, c, true)? {
                        self.release_checkpoint_renders(&old, key)?;
                    }
                    OpOutcome::Done
                }
                Op::Trim => OpOutcome::Trimmed(self.trim(ctx)?),
                Op::AppendHistory { record, retention } => {
                    let (seq, trimmed) = self.append_history(ctx, record, retention)?;
                    OpOutcome::HistoryAppended { seq, trimmed }
                }
                Op::TrimHistory { retention, now } => {
                    OpOutcome::HistoryTrimmed(self.trim_history(retention, *now)?)
                }
            };
            outcomes.push(out);
        }
        self.collect()?;
        Ok(Accepted { outcomes })
    }
}
