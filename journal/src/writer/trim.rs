//! Trimming events below the watermark (`journal/DESIGN.md`, "Trimming"), and compaction.

use redb::ReadableTable;

use super::{Ctx, Tx};
use crate::corrupt::{Corrupt, RecordKey};
use crate::db::{Db, Inner};
use crate::decode;
use crate::error::{AcceptError, CompactError};
use crate::work::Queue;

impl Tx<'_> {
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

pub(super) fn compact(inner: &Inner) -> Result<bool, CompactError> {
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
