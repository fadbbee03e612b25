//! The writes: each goes to the writer thread and returns once its group commit is durable.

use std::sync::mpsc::sync_channel;

use super::Journal;
use crate::batch::{Accepted, Batch, Op, OpOutcome};
use crate::error::{AcceptError, CompactError};
use crate::events::Event;
use crate::ids::{Checksum, EndpointUrl, Identity, Seq, Term, UnixMillis, WorkId};
use crate::work::{EndpointApplied, PodStatusKey, PublishedCheckpoint, Queue, WorkItem, WorkKey};
use crate::writer::{Request, batch_reply};

impl Journal {
    /// Commits a batch of events and queue mutations in one write transaction with
    /// `Durability::Immediate`; returns one outcome per operation (event `Seq`s, new `WorkId`s,
    /// compare results). **Durable when this returns** (J1); concurrent calls share one commit
    /// (group commit). Every record is stamped with the current term and the commit time.
    ///
    /// Atomic: on error nothing of the batch was committed.
    ///
    /// # Errors
    /// [`AcceptError::ReadOnly`]; [`AcceptError::TermNotNewer`]; [`AcceptError::MissingBlob`]
    /// (a record names a blob that is neither stored nor put earlier in the batch);
    /// [`AcceptError::NoHold`]; [`AcceptError::Corrupt`] (a record the batch must read is
    /// corrupt); [`AcceptError::Storage`] (the commit failed: retryable after the cause is fixed);
    /// [`AcceptError::WriterGone`].
    pub fn accept(&self, batch: Batch) -> Result<Accepted, AcceptError> {
        let tx = self.tx.as_ref().ok_or(AcceptError::ReadOnly)?;
        let (reply, wait) = batch_reply();
        tx.send(Request::Batch {
            ops: batch.ops,
            reply,
        })
        .map_err(|_| AcceptError::WriterGone)?;
        // The writer hands the operations back, so they are freed here, not in its thread.
        let (result, ops) = wait.wait().ok_or(AcceptError::WriterGone)?;
        drop(ops);
        result
    }

    /// [`Journal::accept`] that hands the batch back when it fails, so a caller that retries
    /// after a storage fault ([`AcceptError::fault_kind`]) does not copy it beforehand. Same
    /// durability and atomicity: on error nothing of the batch was committed.
    ///
    /// # Errors
    /// As [`Journal::accept`], with the batch (boxed: the error path is cold; empty only when the writer thread died while it
    /// held it: [`AcceptError::WriterGone`]).
    pub fn accept_or_keep(&self, batch: Batch) -> Result<Accepted, Box<(AcceptError, Batch)>> {
        let Some(tx) = self.tx.as_ref() else {
            return Err(Box::new((AcceptError::ReadOnly, batch)));
        };
        let (reply, wait) = batch_reply();
        if let Err(std::sync::mpsc::SendError(request)) = tx.send(Request::Batch {
            ops: batch.ops,
            reply,
        }) {
            let ops = match request {
                Request::Batch { ops, .. } => ops,
                Request::Compact { .. } => Vec::new(),
            };
            return Err(Box::new((AcceptError::WriterGone, Batch::from_ops(ops))));
        }
        match wait.wait() {
            None => Err(Box::new((AcceptError::WriterGone, Batch::new()))),
            Some((Ok(accepted), ops)) => {
                drop(ops);
                Ok(accepted)
            }
            Some((Err(e), ops)) => Err(Box::new((e, Batch::from_ops(ops)))),
        }
    }

    fn one(&self, op: Op) -> Result<OpOutcome, AcceptError> {
        let mut b = Batch::new();
        b.push(op);
        let mut a = self.accept(b)?;
        Ok(a.outcomes.pop().unwrap_or(OpOutcome::Done))
    }

    /// Appends events; returns their `Seq`s in order. Durable when this returns.
    ///
    /// # Errors
    /// As [`Journal::accept`].
    pub fn accept_events(&self, events: Vec<Event>) -> Result<Vec<Seq>, AcceptError> {
        let mut b = Batch::new();
        for e in events {
            b.event(e);
        }
        Ok(self.accept(b)?.seqs())
    }

    /// Enqueues one work item (FIFO append; replace-latest for status and slot queues, which
    /// also drops a parked status for the same pod). Durable when this returns.
    ///
    /// # Errors
    /// As [`Journal::accept`].
    pub fn enqueue(
        &self,
        item: WorkItem,
        origin: crate::batch::Origin,
    ) -> Result<WorkId, AcceptError> {
        match self.one(Op::Enqueue {
            item,
            origin,
            not_before: None,
        })? {
            OpOutcome::Enqueued(id) => Ok(id),
            _ => Err(AcceptError::WriterGone),
        }
    }

    /// Compare-and-delete (J3): removes the item under `key` only if it still has `id`. Returns
    /// whether it did (false: a newer value replaced it, or it was already gone; the newer value
    /// stays). Durable when this returns; idempotent.
    ///
    /// # Errors
    /// As [`Journal::accept`].
    pub fn ack(&self, queue: Queue, key: WorkKey, id: WorkId) -> Result<bool, AcceptError> {
        Ok(matches!(
            self.one(Op::Ack { queue, key, id })?,
            OpOutcome::Matched(true)
        ))
    }

    /// Compare-and-update: counts a failed attempt of item `id` and sets its next attempt time.
    /// Returns whether the item still had `id`. Durable when this returns.
    ///
    /// # Errors
    /// As [`Journal::accept`].
    pub fn reschedule(
        &self,
        queue: Queue,
        key: WorkKey,
        id: WorkId,
        next_attempt_at: UnixMillis,
    ) -> Result<bool, AcceptError> {
        Ok(matches!(
            self.one(Op::Reschedule {
                queue,
                key,
                id,
                next_attempt_at
            })?,
            OpOutcome::Matched(true)
        ))
    }

    /// Compare-and-move a status item from `status-pending` to `status-parked` (the HAProxyCfg
    /// cannot take it yet). Returns whether it still had `id`. Durable when this returns.
    ///
    /// # Errors
    /// As [`Journal::accept`].
    pub fn park(&self, key: PodStatusKey, id: WorkId) -> Result<bool, AcceptError> {
        Ok(matches!(
            self.one(Op::Park { key, id })?,
            OpOutcome::Matched(true)
        ))
    }

    /// Moves parked status items back to pending (`None`: all); a parked item whose pod already
    /// has a newer pending item is dropped. Returns how many parked items were handled. Durable
    /// when this returns.
    ///
    /// # Errors
    /// As [`Journal::accept`].
    pub fn unpark(&self, key: Option<PodStatusKey>) -> Result<u32, AcceptError> {
        match self.one(Op::Unpark { key })? {
            OpOutcome::Unparked(n) => Ok(n),
            _ => Ok(0),
        }
    }

    /// Stores file content (dedup) and takes an explicit hold on it; returns its key. Release the
    /// hold with [`Journal::release_blob`]. Durable when this returns.
    ///
    /// # Errors
    /// As [`Journal::accept`].
    pub fn put_blob(&self, content: Vec<u8>) -> Result<Checksum, AcceptError> {
        let mut b = Batch::new();
        let h = b.hold_blob(content);
        self.accept(b)?;
        Ok(h)
    }

    /// Releases one explicit hold; the blob is deleted in the same commit when nothing else
    /// references it. Durable when this returns.
    ///
    /// # Errors
    /// [`AcceptError::NoHold`] when the blob has no hold; as [`Journal::accept`].
    pub fn release_blob(&self, hash: Checksum) -> Result<(), AcceptError> {
        self.one(Op::ReleaseBlob(hash)).map(|_| ())
    }

    /// Starts a new leadership term (J7); every later record is stamped with it. Usually done in
    /// the same batch as the `BecameLeader` event. Durable when this returns.
    ///
    /// # Errors
    /// [`AcceptError::TermNotNewer`] unless `term` > the current term; as [`Journal::accept`].
    pub fn set_term(&self, term: Term, identity: Identity) -> Result<(), AcceptError> {
        self.one(Op::SetTerm { term, identity }).map(|_| ())
    }

    /// Records that events up to `seq` were dispatched to the components (never moves back).
    /// Durable when this returns.
    ///
    /// # Errors
    /// As [`Journal::accept`].
    pub fn mark_dispatched(&self, seq: Seq) -> Result<(), AcceptError> {
        self.one(Op::MarkDispatched(seq)).map(|_| ())
    }

    /// Sets an endpoint's last-applied state. Durable when this returns.
    ///
    /// # Errors
    /// As [`Journal::accept`].
    pub fn put_endpoint_applied(&self, state: EndpointApplied) -> Result<(), AcceptError> {
        self.one(Op::PutEndpointApplied(state)).map(|_| ())
    }

    /// Forgets an endpoint. Durable when this returns.
    ///
    /// # Errors
    /// As [`Journal::accept`].
    pub fn remove_endpoint_applied(&self, endpoint: EndpointUrl) -> Result<(), AcceptError> {
        self.one(Op::RemoveEndpointApplied(endpoint)).map(|_| ())
    }

    /// Sets a HAProxyCfg's published checkpoint. Durable when this returns.
    ///
    /// # Errors
    /// As [`Journal::accept`].
    pub fn put_published_checkpoint(
        &self,
        checkpoint: PublishedCheckpoint,
    ) -> Result<(), AcceptError> {
        self.one(Op::PutPublishedCheckpoint(checkpoint)).map(|_| ())
    }

    /// Trims events below the watermark (min of `dispatched_through + 1` and the `origin` of
    /// every live work item) and collects blobs that lose their last reference. Returns the
    /// number of events trimmed. Durable when this returns.
    ///
    /// # Errors
    /// As [`Journal::accept`].
    pub fn trim(&self) -> Result<u64, AcceptError> {
        match self.one(Op::Trim)? {
            OpOutcome::Trimmed(n) => Ok(n),
            _ => Ok(0),
        }
    }

    /// Compacts the file (redb `compact`), run by the writer thread between commits. Returns
    /// whether anything was reclaimed.
    ///
    /// # Errors
    /// [`CompactError::Busy`] while read transactions are live; [`CompactError::ReadOnly`];
    /// [`CompactError::Storage`]; [`CompactError::WriterGone`].
    pub fn compact(&self) -> Result<bool, CompactError> {
        let tx = self.tx.as_ref().ok_or(CompactError::ReadOnly)?;
        let (reply, rx) = sync_channel(1);
        tx.send(Request::Compact { reply })
            .map_err(|_| CompactError::WriterGone)?;
        rx.recv().map_err(|_| CompactError::WriterGone)?
    }
}
