//! Summaries: what a restart would replay, file and table sizes, group-commit counters.

use redb::{ReadTransaction, ReadableTable, ReadableTableMetadata, TableDefinition, TableHandle};

use super::read::{read_queue, text_table};
use super::{Journal, guarded};
use crate::error::{ReadError, storage};
use crate::ids::{Seq, Term, UnixMillis};
use crate::meta::read_meta;
use crate::tables;
use crate::work::Queue;

/// Group-commit counters since open.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommitStats {
    /// Successful commits.
    pub commits: u64,
    /// Events committed.
    pub events: u64,
    /// Requests (accept calls and single operations) committed.
    pub requests: u64,
    /// Commits that failed (each failed every request of its group).
    pub failed_commits: u64,
}

impl CommitStats {
    /// Events per commit (0 when nothing was committed).
    #[must_use]
    pub fn events_per_commit(&self) -> f64 {
        if self.commits == 0 {
            0.0
        } else {
            self.events as f64 / self.commits as f64
        }
    }
}

/// One queue in a [`Pending`] summary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueSummary {
    /// The queue.
    pub queue: Queue,
    /// Items in it.
    pub count: u64,
    /// `enqueued_at` of the oldest item; `None` when empty.
    pub oldest_enqueued_at: Option<UnixMillis>,
    /// Bytes of stored values.
    pub value_bytes: u64,
}

impl QueueSummary {
    /// Age of the oldest item in whole seconds at `now`; `None` when empty.
    #[must_use]
    pub fn oldest_age_secs(&self, now: UnixMillis) -> Option<u64> {
        self.oldest_enqueued_at.map(|t| t.until_ms(now) / 1000)
    }
}

/// What a restart would replay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pending {
    /// Current term.
    pub term: Term,
    /// Last dispatched event.
    pub dispatched_through: Seq,
    /// Newest event (`Seq(0)`: none yet).
    pub last_seq: Seq,
    /// Events after `dispatched_through` (to dispatch again, in order).
    pub undispatched_events: u64,
    /// Every queue, in [`Queue::ALL`] order.
    pub queues: Vec<QueueSummary>,
    /// Schema 2: the Dataplane transactions this replica opened on endpoints and has not seen
    /// end (table `endpoint_transaction`), by URL: what may be left open on the pods.
    pub open_transactions: Vec<crate::pod::EndpointTransaction>,
}

/// Size of one table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableStat {
    /// Table name.
    pub name: &'static str,
    /// Entries.
    pub entries: u64,
    /// Sum of key and value lengths, bytes.
    pub live_bytes: u64,
    /// redb's stored bytes: keys and values in leaf pages (no page overhead).
    pub stored_bytes: u64,
    /// redb's metadata bytes: keys in branch pages and page headers.
    pub metadata_bytes: u64,
    /// redb's "fragmented" bytes: the unused part of the table's allocated pages (page slack).
    /// `stored + metadata + fragmented` = the table's pages; a non-empty table has at least one
    /// page (4 KiB), so a small table is mostly slack, which compaction cannot remove.
    pub fragmented_bytes: u64,
}

/// File and table sizes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stats {
    /// File size in bytes (`None` for custom backends).
    pub file_bytes: Option<u64>,
    /// Every table, in [`tables::ALL_TABLES`] order.
    pub tables: Vec<TableStat>,
    /// Queue summaries.
    pub queues: Vec<QueueSummary>,
    /// Events (count) and the oldest/newest `Seq`.
    pub first_seq: Option<Seq>,
    /// Newest event.
    pub last_seq: Option<Seq>,
}

impl Stats {
    /// Sum of live key+value bytes over all tables.
    #[must_use]
    pub fn live_bytes(&self) -> u64 {
        self.tables.iter().map(|t| t.live_bytes).sum()
    }
}

impl Journal {
    /// Group-commit counters since open.
    #[must_use]
    pub fn commit_stats(&self) -> CommitStats {
        use std::sync::atomic::Ordering::Relaxed;
        let c = &self.inner.counters;
        CommitStats {
            commits: c.commits.load(Relaxed),
            events: c.events.load(Relaxed),
            requests: c.requests.load(Relaxed),
            failed_commits: c.failed_commits.load(Relaxed),
        }
    }

    /// What a restart would replay: undispatched events, every queue's count and oldest item, and
    /// the open Dataplane transactions; one read snapshot.
    ///
    /// # Errors
    /// [`ReadError::Corrupt`] when a queue item or a transaction record is corrupt.
    pub fn pending(&self) -> Result<Pending, ReadError> {
        guarded(|| {
            let rtx = self.read_txn()?;
            let meta = read_meta(&rtx)?;
            let last_seq = Seq(meta.next_seq.0.saturating_sub(1));
            let mut queues = Vec::new();
            for q in Queue::ALL {
                queues.push(summarize(&rtx, *q)?);
            }
            Ok(Pending {
                term: meta.term,
                dispatched_through: meta.dispatched_through,
                last_seq,
                undispatched_events: last_seq.0.saturating_sub(meta.dispatched_through.0),
                queues,
                open_transactions: open_transactions(&rtx)?,
            })
        })
    }

    /// The bytes of the pages redb holds for this journal (its tables, redb's own trees and
    /// metadata; not free pages): what auto-compaction compares the file size with (the
    /// writer compacts when the file is larger than twice this plus
    /// [`JournalOptions::auto_compact_slack_bytes`](super::JournalOptions)). `None` when opened
    /// read-only. Counted once redb has released the pages the last commits freed (it commits
    /// up to three empty write transactions for that, no record written), so the figure is the
    /// one the next open reads; it waits for a commit in progress.
    #[must_use]
    pub fn held_bytes(&self) -> Option<u64> {
        crate::db::held_bytes(&self.inner)
    }

    /// File size, per-table counts and bytes, and queue summaries.
    ///
    /// # Errors
    /// [`ReadError`].
    pub fn stats(&self) -> Result<Stats, ReadError> {
        guarded(|| {
            let rtx = self.read_txn()?;
            let mut tables_out = Vec::new();
            for name in tables::ALL_TABLES {
                tables_out.push(table_stat(&rtx, name)?);
            }
            let mut queues = Vec::new();
            for q in Queue::ALL {
                queues.push(summarize(&rtx, *q)?);
            }
            crate::contain::at_table("events");
            let ev = rtx.open_table(tables::EVENTS).map_err(storage)?;
            let first_seq = ev.first().map_err(storage)?.map(|(k, _)| Seq(k.value()));
            let last_seq = ev.last().map_err(storage)?.map(|(k, _)| Seq(k.value()));
            let file_bytes = std::fs::metadata(&self.path).ok().map(|m| m.len());
            Ok(Stats {
                file_bytes,
                tables: tables_out,
                queues,
                first_seq,
                last_seq,
            })
        })
    }
}

fn summarize(rtx: &ReadTransaction, queue: Queue) -> Result<QueueSummary, ReadError> {
    let items = read_queue(rtx, queue)?;
    Ok(QueueSummary {
        queue,
        count: items.len() as u64,
        oldest_enqueued_at: items.iter().map(|e| e.record.enqueued_at).min(),
        value_bytes: items.iter().map(|e| e.header.size_bytes).sum(),
    })
}

/// Every record of `endpoint_transaction`, by URL.
fn open_transactions(
    rtx: &ReadTransaction,
) -> Result<Vec<crate::pod::EndpointTransaction>, ReadError> {
    crate::contain::at_table("endpoint_transaction");
    text_table(
        rtx,
        tables::ENDPOINT_TRANSACTION,
        "endpoint_transaction",
        crate::decode::endpoint_transaction,
    )
}

/// The tables keyed by text (`&str -> &[u8]`).
const TEXT_TABLES: [TableDefinition<&str, &[u8]>; 8] = [
    tables::META,
    tables::STATUS_PENDING,
    tables::STATUS_PARKED,
    tables::COMPONENT_STATE,
    tables::ENDPOINT_APPLIED,
    tables::ENDPOINT_FILES,
    tables::ENDPOINT_TRANSACTION,
    tables::PUBLISHED_CHECKPOINT,
];

/// The tables keyed by a `u64` (`Seq` or `WorkId`).
const ID_TABLES: [TableDefinition<u64, &[u8]>; 5] = [
    tables::EVENTS,
    tables::PUBLISH_VALIDATED,
    tables::PUBLISH_DEPLOYED,
    tables::INVALID_PUBLISH,
    tables::VERDICT,
];

/// The one-slot tables (key `()`).
const SLOT_TABLES: [TableDefinition<(), &[u8]>; 3] = [
    tables::DEPLOY_PENDING,
    tables::DEPLOY_INFLIGHT,
    tables::DRAIN_CHECKPOINT,
];

/// The table of `defs` called `name`.
fn named<K: redb::Key, V: redb::Value>(
    defs: &[TableDefinition<'static, K, V>],
    name: &str,
) -> Option<TableDefinition<'static, K, V>> {
    defs.iter().copied().find(|d| d.name() == name)
}

/// The counts and bytes of table `name` (any name not in [`tables::ALL_TABLES`] reads
/// `published_checkpoint`).
fn table_stat(rtx: &ReadTransaction, name: &'static str) -> Result<TableStat, ReadError> {
    crate::contain::at_table(name);
    let mut live = 0u64;
    let (entries, stats) = if let Some(def) = named(&ID_TABLES, name) {
        stat_of(rtx, def, &mut live, |_| 8, |v| v.len())?
    } else if let Some(def) = named(&SLOT_TABLES, name) {
        stat_of(rtx, def, &mut live, |_| 0, |v| v.len())?
    } else if name == "blobs" {
        stat_of(rtx, tables::BLOBS, &mut live, |k| k.len(), |v| v.len())?
    } else if name == "blob_refs" {
        stat_of(rtx, tables::BLOB_REFS, &mut live, |k| k.len(), |_| 16)?
    } else if name == "pod_history" {
        stat_of(
            rtx,
            tables::POD_HISTORY,
            &mut live,
            |(pod, _)| pod.len() + 8,
            |v| v.len(),
        )?
    } else {
        let def = named(&TEXT_TABLES, name).unwrap_or(tables::PUBLISHED_CHECKPOINT);
        stat_of(rtx, def, &mut live, |k| k.len(), |v| v.len())?
    };
    Ok(TableStat {
        name,
        entries,
        live_bytes: live,
        stored_bytes: stats.stored_bytes(),
        metadata_bytes: stats.metadata_bytes(),
        fragmented_bytes: stats.fragmented_bytes(),
    })
}

/// Opens `def`: its entries and stats; adds each entry's `klen + vlen` to `live`.
fn stat_of<K: redb::Key + 'static, V: redb::Value + 'static>(
    rtx: &ReadTransaction,
    def: TableDefinition<K, V>,
    live: &mut u64,
    klen: impl Fn(K::SelfType<'_>) -> usize,
    vlen: impl Fn(V::SelfType<'_>) -> usize,
) -> Result<(u64, redb::TableStats), ReadError> {
    let t = rtx.open_table(def).map_err(storage)?;
    let mut n = 0;
    for r in t.iter().map_err(storage)? {
        let (k, v) = r.map_err(storage)?;
        *live += (klen(k.value()) + vlen(v.value())) as u64;
        n += 1;
    }
    Ok((n, t.stats().map_err(storage)?))
}
