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
    pub(crate) fn watermark(&mut self, ctx: &Ctx) -> Result<u64, AcceptError> {
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
        for q in [
            Queue::Publish,
            Queue::PublishDeployed,
            Queue::Invalid,
            Queue::Verdict,
        ] {
            for r in self.fifo(q)?.iter().map_err(s)? {
                let (k, v) = r.map_err(s)?;
                consider(v.value(), q.table_name(), RecordKey::WorkId(k.value()))?;
            }
        }
        for q in [Queue::StatusPending, Queue::StatusParked] {
            let t = if q == Queue::StatusParked {
                self.parked()?
            } else {
                self.pending()?
            };
            for r in t.iter().map_err(s)? {
                let (k, v) = r.map_err(s)?;
                consider(
                    v.value(),
                    q.table_name(),
                    RecordKey::Text(k.value().to_owned()),
                )?;
            }
        }
        for q in [
            Queue::DeployPending,
            Queue::DeployInflight,
            Queue::DrainCheckpoint,
        ] {
            if let Some(v) = self.slot(q)?.get(()).map_err(s)? {
                consider(v.value(), q.table_name(), RecordKey::Slot)?;
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
            let first = self.events()?.first().map_err(s)?.map(|(k, _)| k.value());
            match first {
                Some(seq) if seq < w => {}
                _ => break,
            }
            let Some((seq, bytes)) = self
                .events()?
                .pop_first()
                .map_err(s)?
                .map(|(k, v)| (k.value(), v.value().to_vec()))
            else {
                break;
            };
            self.events_removed = true;
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
        if n > 0 {
            crate::crash_point!("journal::after_trim");
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
        Db::Closed => Err(CompactError::Storage(redb::Error::DatabaseClosed)),
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
