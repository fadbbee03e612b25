//! The per-pod deployment history's reads (table `pod_history`, schema 4; `journal/DESIGN.md`,
//! "Pod history"): one pod's key range, one render's records, the whole timeline, a query.

use redb::ReadableTable;

use super::{Journal, guarded};
use crate::corrupt::Corrupt;
use crate::decode;
use crate::error::{ReadError, storage};
use crate::ids::{Checksum, UnixMillis};
use crate::tables;

impl Journal {
    /// One pod's history (table `pod_history`, schema 4): its sync records that overlap
    /// `from..=to` (unix ms, both inclusive: started at or before `to`, ended at or after
    /// `from`), in append order (oldest first). Reads only the pod's key range.
    ///
    /// # Errors
    /// [`ReadError::Corrupt`] at the first corrupt record (key `"<ns>/<pod>#<seq>"`).
    pub fn pod_history(
        &self,
        pod: &crate::events::PodRef,
        from: UnixMillis,
        to: UnixMillis,
    ) -> Result<Vec<crate::history::SyncRecord>, ReadError> {
        let key = crate::history::pod_key(pod);
        guarded(|| {
            let rtx = self.read_txn()?;
            crate::contain::at_table("pod_history");
            let t = rtx.open_table(tables::POD_HISTORY).map_err(storage)?;
            let mut out = Vec::new();
            let range = (key.as_str(), 0u64)..=(key.as_str(), u64::MAX);
            for r in t.range(range).map_err(storage)? {
                let (k, v) = r.map_err(storage)?;
                let rec = history_record(k.value(), v.value())?;
                if rec.overlaps(from, to) {
                    out.push(rec);
                }
            }
            Ok(out)
        })
    }

    /// Every history record (schema 4) whose sync brought, or tried to bring, a pod to
    /// `render` ("which pods ran render R, and when"), ordered by start time (ties: by pod,
    /// then append order). Walks the whole table.
    ///
    /// # Errors
    /// [`ReadError::Corrupt`] at the first corrupt record.
    pub fn history_of_render(
        &self,
        render: Checksum,
    ) -> Result<Vec<crate::history::SyncRecord>, ReadError> {
        self.history_where(|r| r.render == render)
    }

    /// Every history record (schema 4) of every pod, ordered by start time (ties: by pod,
    /// then append order): the fleet's timeline. Walks the whole table.
    ///
    /// # Errors
    /// [`ReadError::Corrupt`] at the first corrupt record.
    pub fn history(&self) -> Result<Vec<crate::history::SyncRecord>, ReadError> {
        self.history_where(|_| true)
    }

    /// The records `query` asks for (one pod's key range when it names a pod, else the whole
    /// table), oldest first: append order for one pod, start time otherwise.
    ///
    /// # Errors
    /// [`ReadError::Corrupt`] at the first corrupt record.
    pub fn history_query(
        &self,
        query: &crate::history::HistoryQuery,
    ) -> Result<Vec<crate::history::SyncRecord>, ReadError> {
        match &query.pod {
            Some(pod) => Ok(self
                .pod_history(pod, query.from, query.to)?
                .into_iter()
                .filter(|r| query.matches(r))
                .collect()),
            None => self.history_where(|r| query.matches(r)),
        }
    }

    fn history_where(
        &self,
        keep: impl Fn(&crate::history::SyncRecord) -> bool,
    ) -> Result<Vec<crate::history::SyncRecord>, ReadError> {
        guarded(|| {
            let rtx = self.read_txn()?;
            crate::contain::at_table("pod_history");
            let t = rtx.open_table(tables::POD_HISTORY).map_err(storage)?;
            let mut out = Vec::new();
            for r in t.iter().map_err(storage)? {
                let (k, v) = r.map_err(storage)?;
                let rec = history_record(k.value(), v.value())?;
                if keep(&rec) {
                    out.push(rec);
                }
            }
            // Stable: equal start times keep the table's (pod, sequence) order.
            out.sort_by_key(|r| r.started_at);
            Ok(out)
        })
    }
}

/// Decodes the `pod_history` record stored under `(pod, seq)`.
fn history_record(
    (pod, seq): (&str, u64),
    bytes: &[u8],
) -> Result<crate::history::SyncRecord, ReadError> {
    decode::sync_record(bytes)
        .map(|(_, r)| r)
        .map_err(|reason| {
            ReadError::Corrupt(Corrupt {
                table: "pod_history",
                key: crate::history::record_key(pod, seq),
                reason,
            })
        })
}
