//! Appending to a pod's history and trimming it to its retention (schema 4, issue 28;
//! `journal/DESIGN.md`, "Pod history").
//!
//! Every record holds one reference on its render (invariant 4): taken when it is appended,
//! released when it is trimmed, in the same transaction.

use redb::ReadableTable;

use super::{Ctx, Tx};
use crate::corrupt::Corrupt;
use crate::decode;
use crate::error::AcceptError;
use crate::history::{HistoryRetention, SyncRecord, record_key};
use crate::ids::{Checksum, UnixMillis};

/// What trimming needs of a stored record: its sequence, end time and render.
struct Kept {
    seq: u64,
    ended_at: UnixMillis,
    render: Checksum,
}

fn kept_of(pod: &str, seq: u64, bytes: &[u8]) -> Result<Kept, AcceptError> {
    let (_, r) = decode::sync_record(bytes).map_err(|reason| Corrupt {
        table: "pod_history",
        key: record_key(pod, seq),
        reason,
    })?;
    Ok(Kept {
        seq,
        ended_at: r.ended_at,
        render: r.render,
    })
}

impl Tx<'_> {
    /// One pod's records, oldest (lowest sequence) first.
    fn pod_records(&mut self, pod: &str) -> Result<Vec<Kept>, AcceptError> {
        let s = AcceptError::storage;
        let mut out = Vec::new();
        for r in self
            .history()?
            .range((pod, 0u64)..=(pod, u64::MAX))
            .map_err(s)?
        {
            let (k, v) = r.map_err(s)?;
            out.push(kept_of(pod, k.value().1, v.value())?);
        }
        Ok(out)
    }

    /// Removes the records of `pod` that `retention` does not keep: the oldest beyond
    /// `max_entries` (`records` oldest first) and every one that ended before `cutoff`,
    /// releasing their render references. Returns how many went.
    fn trim_pod(
        &mut self,
        pod: &str,
        records: &[Kept],
        max_entries: u64,
        cutoff: UnixMillis,
    ) -> Result<u64, AcceptError> {
        let excess = (records.len() as u64).saturating_sub(max_entries);
        let mut trimmed = 0;
        for (i, r) in records.iter().enumerate() {
            if (i as u64) < excess || r.ended_at < cutoff {
                self.history()?
                    .remove((pod, r.seq))
                    .map_err(AcceptError::storage)?;
                self.adjust(r.render, -1, 0)?;
                trimmed += 1;
            }
        }
        Ok(trimmed)
    }

    /// [`crate::batch::Op::AppendHistory`]: appends `record` as its pod's newest (sequence =
    /// the pod's newest + 1, from 1), referencing its render, then trims the pod's older
    /// records to `retention` (ages from `record.ended_at`). Returns (sequence, trimmed).
    pub(super) fn append_history(
        &mut self,
        ctx: &Ctx,
        record: &SyncRecord,
        retention: &HistoryRetention,
    ) -> Result<(u64, u64), AcceptError> {
        let pod = record.pod_key();
        let older = self.pod_records(&pod)?;
        let seq = older.last().map_or(1, |r| r.seq + 1);
        self.adjust(record.render, 1, 0)?;
        self.seal(ctx, SyncRecord::RECORD_KIND, record);
        let buf = std::mem::take(&mut self.buf);
        let r = self
            .history()?
            .insert((pod.as_str(), seq), buf.as_slice())
            .map(|_| ());
        self.buf = buf;
        r.map_err(AcceptError::storage)?;
        // The new record counts towards the limit and is never trimmed by its own append.
        let max_older = retention.max_entries() - 1;
        let trimmed = self.trim_pod(&pod, &older, max_older, retention.cutoff(record.ended_at))?;
        Ok((seq, trimmed))
    }

    /// [`crate::batch::Op::TrimHistory`]: trims every pod's records to `retention`, ages from
    /// `now`. Returns how many went.
    pub(super) fn trim_history(
        &mut self,
        retention: &HistoryRetention,
        now: UnixMillis,
    ) -> Result<u64, AcceptError> {
        let s = AcceptError::storage;
        let mut pods: Vec<(String, Vec<Kept>)> = Vec::new();
        for r in self.history()?.iter().map_err(s)? {
            let (k, v) = r.map_err(s)?;
            let (pod, seq) = k.value();
            let kept = kept_of(pod, seq, v.value())?;
            match pods.last_mut() {
                Some((p, records)) if p == pod => records.push(kept),
                _ => pods.push((pod.to_owned(), vec![kept])),
            }
        }
        let cutoff = retention.cutoff(now);
        let mut trimmed = 0;
        for (pod, records) in pods {
            trimmed += self.trim_pod(&pod, &records, retention.max_entries(), cutoff)?;
        }
        Ok(trimmed)
    }
}
