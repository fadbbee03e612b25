//! [`Journal`]: open/create, the write calls (all through the writer thread) and the reads.

use std::path::{Path, PathBuf};
use std::sync::mpsc::{SyncSender, sync_channel};
use std::sync::{Arc, RwLock};
use std::thread::JoinHandle;

use redb::{
    Builder, ConcurrencyMode, Database, DatabaseError, ReadOnlyDatabase, ReadTransaction,
    ReadableDatabase, ReadableTable, ReadableTableMetadata, StorageBackend,
};

use crate::batch::{Accepted, Batch, BlobKind, Op, OpOutcome};
use crate::codec::RecordHeader;
use crate::corrupt::{Corrupt, CorruptReason, RecordKey};
use crate::db::{Counters, Db, Inner};
use crate::decode;
use crate::error::{AcceptError, CompactError, OpenError, ReadError, storage};
use crate::events::Event;
use crate::ids::{Checksum, EndpointUrl, Identity, Seq, Term, UnixMillis, WorkId};
use crate::meta::{Meta, SCHEMA_VERSION, init_tables, read_meta, read_schema_version};
use crate::render::Render;
use crate::tables;
use crate::work::{
    EndpointApplied, PodStatusKey, PublishedCheckpoint, Queue, QueueShape, WorkItem, WorkKey,
    WorkRecord,
};
use crate::writer::{self, Request, WriterConfig};

/// Commit durability.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Durability {
    /// Every commit is fsynced before `accept` returns (J1). The default and the only mode the
    /// controller may use.
    #[default]
    Immediate,
    /// No fsync: commits are lost on power failure. Tests and benchmarks only; refused in
    /// single-writer mode.
    None,
}

/// How processes may share the file (redb's `ConcurrencyMode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Concurrency {
    /// One process has the file; anyone else (even a read-only inspector) gets
    /// [`OpenError::InUse`]. One fsync per commit. The default.
    #[default]
    Exclusive,
    /// One writer process plus any number of read-only processes (opened in this mode too) that
    /// follow its commits, e.g. `haptic-journalctl` in a live pod. Every commit is two-phase (two
    /// fsyncs) and `Durability::None` is refused. Needs byte-range locks (no NFS).
    SingleWriter,
}

/// Options of [`Journal::open`].
#[derive(Clone, Debug)]
pub struct JournalOptions {
    /// The journal file.
    pub path: PathBuf,
    /// Create the file (mode 0600) when missing. Ignored read-only. Default: true.
    pub create: bool,
    /// Open read-only: no writer thread, every write returns [`AcceptError::ReadOnly`].
    /// Default: false.
    pub read_only: bool,
    /// Commit durability. Default: [`Durability::Immediate`].
    pub durability: Durability,
    /// Process sharing mode. Default: [`Concurrency::Exclusive`].
    pub concurrency: Concurrency,
    /// Run [`Journal::verify`] during open and fail with [`OpenError::Corrupt`] on any problem
    /// (J10). Default: true.
    pub verify_on_open: bool,
    /// Most requests that share one commit. Range 1..; default 1024.
    pub max_group_requests: usize,
    /// Trim events every this many commits (0: only on [`Journal::trim`]). Default: 64.
    pub trim_every_commits: u32,
    /// redb page cache size in bytes. Default: 64 MiB.
    pub cache_size_bytes: usize,
    /// After each periodic trim, compact (in the writer thread, between commits) when the file
    /// is larger than twice the bytes redb uses plus 8 MiB (J6). Default: true.
    pub auto_compact: bool,
}

impl JournalOptions {
    /// Defaults for `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        JournalOptions {
            path: path.into(),
            create: true,
            read_only: false,
            durability: Durability::Immediate,
            concurrency: Concurrency::Exclusive,
            verify_on_open: true,
            max_group_requests: 1024,
            trim_every_commits: 64,
            cache_size_bytes: 64 * 1024 * 1024,
            auto_compact: true,
        }
    }

    /// Sets [`Self::read_only`].
    #[must_use]
    pub fn read_only(mut self, yes: bool) -> Self {
        self.read_only = yes;
        self
    }

    /// Sets [`Self::create`].
    #[must_use]
    pub fn create(mut self, yes: bool) -> Self {
        self.create = yes;
        self
    }

    /// Sets [`Self::durability`].
    #[must_use]
    pub fn durability(mut self, d: Durability) -> Self {
        self.durability = d;
        self
    }

    /// Sets [`Self::concurrency`].
    #[must_use]
    pub fn concurrency(mut self, c: Concurrency) -> Self {
        self.concurrency = c;
        self
    }

    /// Sets [`Self::verify_on_open`].
    #[must_use]
    pub fn verify_on_open(mut self, yes: bool) -> Self {
        self.verify_on_open = yes;
        self
    }

    /// Sets [`Self::trim_every_commits`].
    #[must_use]
    pub fn trim_every_commits(mut self, n: u32) -> Self {
        self.trim_every_commits = n;
        self
    }

    /// Sets [`Self::auto_compact`].
    #[must_use]
    pub fn auto_compact(mut self, yes: bool) -> Self {
        self.auto_compact = yes;
        self
    }

    /// Sets [`Self::max_group_requests`] (at least 1).
    #[must_use]
    pub fn max_group_requests(mut self, n: usize) -> Self {
        self.max_group_requests = n.max(1);
        self
    }

    fn builder(&self) -> Builder {
        let mut b = Builder::new();
        b.set_cache_size(self.cache_size_bytes);
        b.set_concurrency_mode(match self.concurrency {
            Concurrency::Exclusive => ConcurrencyMode::ExclusiveWriter,
            Concurrency::SingleWriter => ConcurrencyMode::SingleWriter,
        });
        b
    }
}

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

/// A work item as read from its queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkEntry {
    /// The queue.
    pub queue: Queue,
    /// Its key (pass it back to ack).
    pub key: WorkKey,
    /// Envelope header (term, time of the last write).
    pub header: RecordHeader,
    /// The record (pass `record.id` back to ack).
    pub record: WorkRecord,
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

/// Blob reference counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlobCounts {
    /// References from records (events, work items, render manifests).
    pub refs: u64,
    /// Explicit holds ([`Journal::put_blob`]).
    pub holds: u64,
}

/// A haptic journal: one redb file, one writer thread.
///
/// `Send + Sync`: share it with `Arc`. Every write goes to the writer thread, which commits
/// concurrent requests together (group commit) and answers each only after the commit.
/// Dropping the journal stops the writer after the requests already sent.
pub struct Journal {
    inner: Arc<Inner>,
    /// Requests to the writer thread; `None` read-only. Bounded (4096): producers block when the
    /// writer falls behind rather than growing memory.
    tx: Option<SyncSender<Request>>,
    /// The writer thread, joined on drop.
    thread: Option<JoinHandle<()>>,
    path: PathBuf,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal")
            .field("path", &self.path)
            .field("read_only", &self.tx.is_none())
            .finish()
    }
}

impl Drop for Journal {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn map_db_err(path: &Path, e: DatabaseError) -> OpenError {
    match e {
        DatabaseError::DatabaseAlreadyOpen => OpenError::InUse {
            path: path.to_owned(),
        },
        other => OpenError::Storage {
            path: path.to_owned(),
            source: other.into(),
        },
    }
}

/// Opens the file as a raw redb database with the journal's locking, mode and error mapping, for
/// `haptic-migrations` (which must read old schemas the [`Journal`] refuses). No schema check.
///
/// # Errors
/// [`OpenError::NotFound`], [`OpenError::InUse`], [`OpenError::Storage`].
pub fn open_raw(options: &JournalOptions) -> Result<Database, OpenError> {
    let path = &options.path;
    if !path.exists() {
        return Err(OpenError::NotFound { path: path.clone() });
    }
    check_regular(path)?;
    guarded_open(path, || {
        options
            .builder()
            .open(path)
            .map_err(|e| map_db_err(path, e))
    })
}

/// Opens the file as a raw read-only redb database (same mode and error mapping as
/// [`open_raw`]), e.g. for `migrate --dry-run`. No schema check.
///
/// # Errors
/// [`OpenError::NotFound`], [`OpenError::InUse`] (an exclusive writer holds it),
/// [`OpenError::Storage`].
pub fn open_raw_read_only(options: &JournalOptions) -> Result<ReadOnlyDatabase, OpenError> {
    let path = &options.path;
    if !path.exists() {
        return Err(OpenError::NotFound { path: path.clone() });
    }
    check_regular(path)?;
    guarded_open(path, || {
        options
            .builder()
            .open_read_only(path)
            .map_err(|e| map_db_err(path, e))
    })
}

impl Journal {
    /// Opens (or creates, mode 0600) the journal file and starts the writer thread.
    ///
    /// A new file gets every table and meta (schema [`SCHEMA_VERSION`]). With
    /// `verify_on_open` every record is checked first (J10).
    ///
    /// # Errors
    /// [`OpenError::InUse`] when another process has the file (never waits);
    /// [`OpenError::NotFound`]; [`OpenError::SchemaTooNew`] / [`OpenError::SchemaTooOld`] (run
    /// the migration); [`OpenError::NotAJournal`]; [`OpenError::Corrupt`] with the verify report;
    /// [`OpenError::Storage`] / [`OpenError::Io`]; [`OpenError::InvalidOptions`] for
    /// `Durability::None` with `Concurrency::SingleWriter`.
    pub fn open(options: &JournalOptions) -> Result<Journal, OpenError> {
        guarded_open(&options.path, || Self::open_unguarded(options))
    }

    fn open_unguarded(options: &JournalOptions) -> Result<Journal, OpenError> {
        check_options(options)?;
        check_regular(&options.path)?;
        let path = options.path.clone();
        let exists = path.exists();
        let b = options.builder();
        let db = if options.read_only {
            if !exists {
                return Err(OpenError::NotFound { path });
            }
            Db::Ro(b.open_read_only(&path).map_err(|e| map_db_err(&path, e))?)
        } else if exists {
            Db::Rw(b.open(&path).map_err(|e| map_db_err(&path, e))?)
        } else {
            if !options.create {
                return Err(OpenError::NotFound { path });
            }
            let file = create_private(&path)?;
            let backend =
                redb::backends::FileBackend::new(file).map_err(|e| map_db_err(&path, e))?;
            Db::Rw(
                b.create_with_backend(backend)
                    .map_err(|e| map_db_err(&path, e))?,
            )
        };
        Self::finish_open(db, true, path, options)
    }

    /// Opens (or creates) a journal on a custom redb storage backend (tests: lost-write and I/O
    /// error injection). `options.path` only names the journal in errors.
    ///
    /// # Errors
    /// As [`Journal::open`].
    pub fn open_with_backend(
        backend: impl StorageBackend,
        options: &JournalOptions,
    ) -> Result<Journal, OpenError> {
        guarded_open(&options.path, || {
            Self::open_with_backend_unguarded(backend, options)
        })
    }

    fn open_with_backend_unguarded(
        backend: impl StorageBackend,
        options: &JournalOptions,
    ) -> Result<Journal, OpenError> {
        check_options(options)?;
        let path = options.path.clone();
        let b = options.builder();
        let db = if options.read_only {
            Db::Ro(
                b.open_read_only_with_backend(backend)
                    .map_err(|e| map_db_err(&path, e))?,
            )
        } else {
            Db::Rw(
                b.create_with_backend(backend)
                    .map_err(|e| map_db_err(&path, e))?,
            )
        };
        Self::finish_open(db, false, path, options)
    }

    fn finish_open(
        db: Db,
        is_file: bool,
        path: PathBuf,
        options: &JournalOptions,
    ) -> Result<Journal, OpenError> {
        let st = |e: redb::Error| OpenError::Storage {
            path: path.clone(),
            source: e,
        };
        let found = {
            let rtx = db.begin_read().map_err(|e| st(e.into()))?;
            match read_schema_version(&rtx) {
                Ok(v) => v,
                Err(ReadError::Storage(e)) => return Err(st(e)),
                Err(ReadError::Corrupt(c)) => {
                    return Err(OpenError::Corrupt {
                        path,
                        report: Box::new(crate::report::VerifyReport::single(c)),
                    });
                }
                Err(ReadError::Damaged(d)) => {
                    return Err(OpenError::Corrupt {
                        path,
                        report: Box::new(crate::report::VerifyReport::damaged(d)),
                    });
                }
            }
        };
        match (found, &db) {
            (None, Db::Rw(d)) => {
                // An empty database (fresh file, or a custom backend) becomes a journal; anything
                // with tables but no meta is someone else's file.
                let rtx = d.begin_read().map_err(|e| st(e.into()))?;
                let empty = rtx
                    .list_tables()
                    .map_err(|e| st(e.into()))?
                    .next()
                    .is_none();
                drop(rtx);
                if !empty {
                    return Err(OpenError::NotAJournal { path });
                }
                let txn = d.begin_write().map_err(|e| st(e.into()))?;
                init_tables(&txn).map_err(st)?;
                txn.commit().map_err(|e| st(e.into()))?;
            }
            (None, Db::Ro(_)) => return Err(OpenError::NotAJournal { path }),
            (Some(v), _) if v > SCHEMA_VERSION => {
                return Err(OpenError::SchemaTooNew {
                    path,
                    found: v,
                    supported: SCHEMA_VERSION,
                });
            }
            (Some(v), _) if v < SCHEMA_VERSION => {
                return Err(OpenError::SchemaTooOld {
                    path,
                    found: v,
                    supported: SCHEMA_VERSION,
                });
            }
            _ => {}
        }
        let inner = Arc::new(Inner {
            db: RwLock::new(db),
            counters: Counters::default(),
        });
        let mut journal = Journal {
            inner,
            tx: None,
            thread: None,
            path: path.clone(),
        };
        if options.verify_on_open {
            let report = journal.verify().map_err(|e| match e {
                ReadError::Corrupt(c) => OpenError::Corrupt {
                    path: path.clone(),
                    report: Box::new(crate::report::VerifyReport::single(c)),
                },
                ReadError::Storage(e) => st(e),
                ReadError::Damaged(d) => OpenError::Corrupt {
                    path: path.clone(),
                    report: Box::new(crate::report::VerifyReport::damaged(d)),
                },
            })?;
            if !report.is_clean() {
                return Err(OpenError::Corrupt {
                    path,
                    report: Box::new(report),
                });
            }
        }
        if !options.read_only {
            // Bounded: 4096 requests in flight is far above any realistic producer count; a full
            // channel blocks producers (backpressure) instead of growing memory.
            let (tx, rx) = sync_channel(4096);
            let cfg = WriterConfig {
                durability: match options.durability {
                    Durability::Immediate => redb::Durability::Immediate,
                    Durability::None => redb::Durability::None,
                },
                max_group: options.max_group_requests.max(1),
                trim_every_commits: options.trim_every_commits,
                auto_compact_path: (options.auto_compact && is_file).then(|| path.clone()),
            };
            let inner = journal.inner.clone();
            let thread = std::thread::Builder::new()
                .name("journal-writer".into())
                .spawn(move || writer::run(inner, rx, cfg))
                .map_err(|source| OpenError::Io {
                    path: path.clone(),
                    source,
                })?;
            journal.tx = Some(tx);
            journal.thread = Some(thread);
        }
        Ok(journal)
    }

    /// The journal file path.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the journal was opened read-only.
    #[must_use]
    pub fn is_read_only(&self) -> bool {
        self.tx.is_none()
    }

    // ----- writes -----

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
        let (reply, rx) = sync_channel(1);
        tx.send(Request::Batch {
            ops: batch.ops,
            reply,
        })
        .map_err(|_| AcceptError::WriterGone)?;
        rx.recv().map_err(|_| AcceptError::WriterGone)?
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

    // ----- reads -----

    pub(crate) fn read_txn(&self) -> Result<ReadTransaction, ReadError> {
        // A poisoned lock only means a thread panicked while holding it; the database is intact.
        let db = self
            .inner
            .db
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        db.begin_read().map_err(storage)
    }

    /// The meta values.
    ///
    /// # Errors
    /// [`ReadError`].
    pub fn meta(&self) -> Result<Meta, ReadError> {
        guarded(|| read_meta(&self.read_txn()?))
    }

    /// The current leadership term.
    ///
    /// # Errors
    /// [`ReadError`].
    pub fn term(&self) -> Result<Term, ReadError> {
        guarded(|| Ok(self.meta()?.term))
    }

    /// One event.
    ///
    /// # Errors
    /// [`ReadError::Corrupt`] when it fails its CRC or decode.
    pub fn event(&self, seq: Seq) -> Result<Option<(RecordHeader, Event)>, ReadError> {
        guarded(|| {
            let rtx = self.read_txn()?;
            let t = rtx.open_table(tables::EVENTS).map_err(storage)?;
            let Some(v) = t.get(seq.0).map_err(storage)? else {
                return Ok(None);
            };
            decode::event(v.value()).map(Some).map_err(|reason| {
                ReadError::Corrupt(Corrupt {
                    table: "events",
                    key: RecordKey::Seq(seq.0),
                    reason,
                })
            })
        })
    }

    /// Events from `from` (inclusive) in `Seq` order, at most `limit`.
    ///
    /// # Errors
    /// [`ReadError::Corrupt`] at the first corrupt event (never skipped).
    pub fn events(
        &self,
        from: Seq,
        limit: usize,
    ) -> Result<Vec<(Seq, RecordHeader, Event)>, ReadError> {
        guarded(|| {
            let rtx = self.read_txn()?;
            let t = rtx.open_table(tables::EVENTS).map_err(storage)?;
            let mut out = Vec::new();
            for r in t.range(from.0..).map_err(storage)?.take(limit) {
                let (k, v) = r.map_err(storage)?;
                let (h, e) = decode::event(v.value()).map_err(|reason| {
                    ReadError::Corrupt(Corrupt {
                        table: "events",
                        key: RecordKey::Seq(k.value()),
                        reason,
                    })
                })?;
                out.push((Seq(k.value()), h, e));
            }
            Ok(out)
        })
    }

    /// Every item of a queue in queue order (FIFO by id; status queues by key; slots: 0 or 1).
    ///
    /// # Errors
    /// [`ReadError::Corrupt`] at the first corrupt item.
    pub fn queue(&self, queue: Queue) -> Result<Vec<WorkEntry>, ReadError> {
        guarded(|| read_queue(&self.read_txn()?, queue))
    }

    /// Items of `queue` due at `now` (`next_attempt_at <= now`), in queue order, at most `limit`.
    ///
    /// # Errors
    /// [`ReadError::Corrupt`] at the first corrupt item.
    pub fn peek_due(
        &self,
        queue: Queue,
        now: UnixMillis,
        limit: usize,
    ) -> Result<Vec<WorkEntry>, ReadError> {
        guarded(|| {
            Ok(self
                .queue(queue)?
                .into_iter()
                .filter(|e| e.record.next_attempt_at <= now)
                .take(limit)
                .collect())
        })
    }

    /// A blob's content (for renders: the encoded manifest; use [`Journal::get_render`]).
    ///
    /// # Errors
    /// [`ReadError::Corrupt`] when the envelope or the content hash is wrong.
    pub fn get_blob(&self, hash: Checksum) -> Result<Option<Vec<u8>>, ReadError> {
        guarded(|| {
            let rtx = self.read_txn()?;
            let t = rtx.open_table(tables::BLOBS).map_err(storage)?;
            let Some(v) = t.get(hash.as_bytes().as_slice()).map_err(storage)? else {
                return Ok(None);
            };
            let (_, content) = decode::blob_checked(hash, v.value()).map_err(|reason| {
                ReadError::Corrupt(Corrupt {
                    table: "blobs",
                    key: RecordKey::Blob(hash),
                    reason,
                })
            })?;
            Ok(Some(content.to_vec()))
        })
    }

    /// A render manifest by render checksum.
    ///
    /// # Errors
    /// [`ReadError::Corrupt`] when it is not a valid manifest.
    pub fn get_render(&self, checksum: Checksum) -> Result<Option<Render>, ReadError> {
        guarded(|| {
            let Some(content) = self.get_blob(checksum)? else {
                return Ok(None);
            };
            decode::render(&content).map(Some).map_err(|reason| {
                ReadError::Corrupt(Corrupt {
                    table: "blobs",
                    key: RecordKey::Blob(checksum),
                    reason,
                })
            })
        })
    }

    /// Every stored render manifest, by render checksum. Tools use it to find which files are
    /// secret ([`crate::AuxKind::is_secret`]) before printing a blob.
    ///
    /// # Errors
    /// [`ReadError::Corrupt`] at the first corrupt manifest.
    pub fn renders(&self) -> Result<Vec<Render>, ReadError> {
        guarded(|| {
            let mut out = Vec::new();
            for (hash, kind, _, _) in self.blobs()? {
                if kind == BlobKind::Render
                    && let Some(r) = self.get_render(hash)?
                {
                    out.push(r);
                }
            }
            Ok(out)
        })
    }

    /// A blob's reference counts; `None` when it is not stored.
    ///
    /// # Errors
    /// [`ReadError`].
    pub fn blob_counts(&self, hash: Checksum) -> Result<Option<BlobCounts>, ReadError> {
        guarded(|| {
            let rtx = self.read_txn()?;
            let t = rtx.open_table(tables::BLOB_REFS).map_err(storage)?;
            Ok(t.get(hash.as_bytes().as_slice())
                .map_err(storage)?
                .map(|v| {
                    let (refs, holds) = v.value();
                    BlobCounts { refs, holds }
                }))
        })
    }

    /// Every stored blob with its kind, size and counts, by key.
    ///
    /// # Errors
    /// [`ReadError::Corrupt`] at the first corrupt blob.
    pub fn blobs(&self) -> Result<Vec<(Checksum, BlobKind, u64, BlobCounts)>, ReadError> {
        guarded(|| {
            let rtx = self.read_txn()?;
            crate::contain::at_table("blobs");
            let t = rtx.open_table(tables::BLOBS).map_err(storage)?;
            let refs = rtx.open_table(tables::BLOB_REFS).map_err(storage)?;
            let mut out = Vec::new();
            for r in t.iter().map_err(storage)? {
                let (k, v) = r.map_err(storage)?;
                let key = Checksum::from_key(k.value()).ok_or_else(|| {
                    ReadError::Corrupt(Corrupt {
                        table: "blobs",
                        key: RecordKey::BadBlobKey(k.value().to_vec()),
                        reason: CorruptReason::BadMeta,
                    })
                })?;
                let (_, kind, content) = decode::blob(v.value()).map_err(|reason| {
                    ReadError::Corrupt(Corrupt {
                        table: "blobs",
                        key: RecordKey::Blob(key),
                        reason,
                    })
                })?;
                let (r, h) = refs
                    .get(k.value())
                    .map_err(storage)?
                    .map(|v| v.value())
                    .unwrap_or((0, 0));
                out.push((
                    key,
                    kind,
                    content.len() as u64,
                    BlobCounts { refs: r, holds: h },
                ));
            }
            Ok(out)
        })
    }

    /// Every endpoint's last-applied state, by URL.
    ///
    /// # Errors
    /// [`ReadError::Corrupt`] at the first corrupt record.
    pub fn endpoints_applied(&self) -> Result<Vec<EndpointApplied>, ReadError> {
        guarded(|| {
            let rtx = self.read_txn()?;
            let t = rtx.open_table(tables::ENDPOINT_APPLIED).map_err(storage)?;
            let mut out = Vec::new();
            for r in t.iter().map_err(storage)? {
                let (k, v) = r.map_err(storage)?;
                let (_, e) = decode::endpoint_applied(v.value()).map_err(|reason| {
                    ReadError::Corrupt(Corrupt {
                        table: "endpoint_applied",
                        key: RecordKey::Text(k.value().to_owned()),
                        reason,
                    })
                })?;
                out.push(e);
            }
            Ok(out)
        })
    }

    /// Every HAProxyCfg's published checkpoint, by name.
    ///
    /// # Errors
    /// [`ReadError::Corrupt`] at the first corrupt record.
    pub fn published_checkpoints(&self) -> Result<Vec<PublishedCheckpoint>, ReadError> {
        guarded(|| {
            let rtx = self.read_txn()?;
            let t = rtx
                .open_table(tables::PUBLISHED_CHECKPOINT)
                .map_err(storage)?;
            let mut out = Vec::new();
            for r in t.iter().map_err(storage)? {
                let (k, v) = r.map_err(storage)?;
                let (_, p) = decode::published_checkpoint(v.value()).map_err(|reason| {
                    ReadError::Corrupt(Corrupt {
                        table: "published_checkpoint",
                        key: RecordKey::Text(k.value().to_owned()),
                        reason,
                    })
                })?;
                out.push(p);
            }
            Ok(out)
        })
    }

    /// Raw `(key, value)` pairs of any table except `blob_refs` (use [`Journal::blobs`]), for
    /// dumping with [`crate::decode::any`] even when records are corrupt. `meta` values are the raw
    /// little-endian/UTF-8 bytes. `from`/`limit` apply to `events` (by `Seq`) and to all tables
    /// (by position).
    ///
    /// # Errors
    /// [`ReadError::Storage`]; an unknown table name gives an empty list.
    pub fn raw_table(
        &self,
        table: &str,
        from: Option<Seq>,
        limit: usize,
    ) -> Result<Vec<(RecordKey, Vec<u8>)>, ReadError> {
        guarded(|| {
            let rtx = self.read_txn()?;
            raw_table(&rtx, table, from, limit)
        })
    }

    /// What a restart would replay: undispatched events and every queue's count and oldest item.
    ///
    /// # Errors
    /// [`ReadError::Corrupt`] when a queue item is corrupt.
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
            })
        })
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

    /// Walks every table: envelopes and CRCs, blob hashes, the gap-free event log, and the
    /// cross-references (every referenced blob exists; every blob's stored counts equal the
    /// references found). Never stops at the first problem.
    ///
    /// # Errors
    /// [`ReadError::Storage`] when redb itself fails.
    pub fn verify(&self) -> Result<crate::verify::VerifyReport, ReadError> {
        guarded(|| crate::verify::verify(&self.read_txn()?))
    }
}

/// Runs a read walk with redb panics contained ([`crate::contain`]): a damaged page is
/// [`ReadError::Damaged`], never a panic.
fn guarded<T>(f: impl FnOnce() -> Result<T, ReadError>) -> Result<T, ReadError> {
    crate::contain::contain(f).unwrap_or_else(|d| Err(ReadError::Damaged(d)))
}

/// Runs an open with redb panics contained: a damaged page is [`OpenError::Corrupt`] (J10).
fn guarded_open<T>(path: &Path, f: impl FnOnce() -> Result<T, OpenError>) -> Result<T, OpenError> {
    crate::contain::contain(f).unwrap_or_else(|d| {
        Err(OpenError::Corrupt {
            path: path.to_owned(),
            report: Box::new(crate::report::VerifyReport::damaged(d)),
        })
    })
}

/// An existing journal path must be a regular file: redb would block forever opening a FIFO.
fn check_regular(path: &Path) -> Result<(), OpenError> {
    match std::fs::metadata(path) {
        Ok(m) if !m.is_file() => Err(OpenError::Io {
            path: path.to_owned(),
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a regular file (a directory, FIFO, socket or device): give the journal file",
            ),
        }),
        _ => Ok(()),
    }
}

fn check_options(o: &JournalOptions) -> Result<(), OpenError> {
    if o.concurrency == Concurrency::SingleWriter
        && o.durability == Durability::None
        && !o.read_only
    {
        return Err(OpenError::InvalidOptions {
            reason: "single-writer mode refuses Durability::None",
        });
    }
    Ok(())
}

fn create_private(path: &Path) -> Result<std::fs::File, OpenError> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|source| OpenError::Io {
            path: path.to_owned(),
            source,
        })
}

pub(crate) fn read_queue(rtx: &ReadTransaction, queue: Queue) -> Result<Vec<WorkEntry>, ReadError> {
    let name = queue.table_name();
    crate::contain::at_table(name);
    let mut out = Vec::new();
    let mut push = |key: WorkKey, rk: RecordKey, bytes: &[u8]| -> Result<(), ReadError> {
        let (header, record) = decode::work(bytes).map_err(|reason| {
            ReadError::Corrupt(Corrupt {
                table: name,
                key: rk,
                reason,
            })
        })?;
        out.push(WorkEntry {
            queue,
            key,
            header,
            record,
        });
        Ok(())
    };
    match queue.shape() {
        QueueShape::Fifo => {
            let t = rtx.open_table(tables::fifo_def(queue)).map_err(storage)?;
            for r in t.iter().map_err(storage)? {
                let (k, v) = r.map_err(storage)?;
                push(
                    WorkKey::Id(WorkId(k.value())),
                    RecordKey::WorkId(k.value()),
                    v.value(),
                )?;
            }
        }
        QueueShape::ByPod => {
            let t = rtx.open_table(tables::pod_def(queue)).map_err(storage)?;
            for r in t.iter().map_err(storage)? {
                let (k, v) = r.map_err(storage)?;
                push(
                    WorkKey::Pod(PodStatusKey(k.value().to_owned())),
                    RecordKey::Text(k.value().to_owned()),
                    v.value(),
                )?;
            }
        }
        QueueShape::Slot => {
            let t = rtx.open_table(tables::slot_def(queue)).map_err(storage)?;
            if let Some(v) = t.get(()).map_err(storage)? {
                push(WorkKey::Slot, RecordKey::Slot, v.value())?;
            }
        }
    }
    Ok(out)
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

fn table_stat(rtx: &ReadTransaction, name: &'static str) -> Result<TableStat, ReadError> {
    crate::contain::at_table(name);
    let mut live = 0u64;
    let (entries, stats) = match name {
        "meta" => stat_of(
            rtx.open_table(tables::META).map_err(storage)?,
            &mut live,
            |k| k.len(),
            |v| v.len(),
        )?,
        "events" => stat_of(
            rtx.open_table(tables::EVENTS).map_err(storage)?,
            &mut live,
            |_| 8,
            |v| v.len(),
        )?,
        "blobs" => stat_of(
            rtx.open_table(tables::BLOBS).map_err(storage)?,
            &mut live,
            |k| k.len(),
            |v| v.len(),
        )?,
        "blob_refs" => stat_of(
            rtx.open_table(tables::BLOB_REFS).map_err(storage)?,
            &mut live,
            |k| k.len(),
            |_| 16,
        )?,
        "publish_validated" | "publish_deployed" | "invalid_publish" | "verdict" => {
            let q = Queue::ALL
                .iter()
                .copied()
                .find(|q| q.table_name() == name)
                .unwrap_or(Queue::Publish);
            stat_of(
                rtx.open_table(tables::fifo_def(q)).map_err(storage)?,
                &mut live,
                |_| 8,
                |v| v.len(),
            )?
        }
        "status_pending" | "status_parked" => {
            let q = if name == "status_parked" {
                Queue::StatusParked
            } else {
                Queue::StatusPending
            };
            stat_of(
                rtx.open_table(tables::pod_def(q)).map_err(storage)?,
                &mut live,
                |k| k.len(),
                |v| v.len(),
            )?
        }
        "deploy_pending" | "deploy_inflight" | "drain_checkpoint" => {
            let q = Queue::ALL
                .iter()
                .copied()
                .find(|q| q.table_name() == name)
                .unwrap_or(Queue::DeployPending);
            stat_of(
                rtx.open_table(tables::slot_def(q)).map_err(storage)?,
                &mut live,
                |_| 0,
                |v| v.len(),
            )?
        }
        "endpoint_applied" => stat_of(
            rtx.open_table(tables::ENDPOINT_APPLIED).map_err(storage)?,
            &mut live,
            |k| k.len(),
            |v| v.len(),
        )?,
        _ => stat_of(
            rtx.open_table(tables::PUBLISHED_CHECKPOINT)
                .map_err(storage)?,
            &mut live,
            |k| k.len(),
            |v| v.len(),
        )?,
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

fn stat_of<K: redb::Key + 'static, V: redb::Value + 'static>(
    t: redb::ReadOnlyTable<K, V>,
    live: &mut u64,
    klen: impl Fn(K::SelfType<'_>) -> usize,
    vlen: impl Fn(V::SelfType<'_>) -> usize,
) -> Result<(u64, redb::TableStats), ReadError> {
    let mut n = 0;
    for r in t.iter().map_err(storage)? {
        let (k, v) = r.map_err(storage)?;
        *live += (klen(k.value()) + vlen(v.value())) as u64;
        n += 1;
    }
    Ok((n, t.stats().map_err(storage)?))
}

pub(crate) fn raw_table(
    rtx: &ReadTransaction,
    table: &str,
    from: Option<Seq>,
    limit: usize,
) -> Result<Vec<(RecordKey, Vec<u8>)>, ReadError> {
    if let Some(t) = tables::ALL_TABLES.iter().find(|t| **t == table) {
        crate::contain::at_table(t);
    }
    let mut out = Vec::new();
    macro_rules! dump {
        ($def:expr, $key:expr) => {{
            let t = rtx.open_table($def).map_err(storage)?;
            for r in t.iter().map_err(storage)?.take(limit) {
                let (k, v) = r.map_err(storage)?;
                out.push(($key(k.value()), v.value().to_vec()));
            }
        }};
    }
    match table {
        "meta" => dump!(tables::META, |k: &str| RecordKey::Text(k.to_owned())),
        "events" => {
            let t = rtx.open_table(tables::EVENTS).map_err(storage)?;
            for r in t
                .range(from.map_or(0, |s| s.0)..)
                .map_err(storage)?
                .take(limit)
            {
                let (k, v) = r.map_err(storage)?;
                out.push((RecordKey::Seq(k.value()), v.value().to_vec()));
            }
        }
        "blobs" => dump!(tables::BLOBS, |k: &[u8]| Checksum::from_key(k)
            .map_or_else(|| RecordKey::BadBlobKey(k.to_vec()), RecordKey::Blob)),
        "endpoint_applied" => dump!(tables::ENDPOINT_APPLIED, |k: &str| RecordKey::Text(
            k.to_owned()
        )),
        "published_checkpoint" => dump!(tables::PUBLISHED_CHECKPOINT, |k: &str| RecordKey::Text(
            k.to_owned()
        )),
        other => {
            let Some(q) = Queue::ALL.iter().copied().find(|q| q.table_name() == other) else {
                return Ok(out);
            };
            match q.shape() {
                QueueShape::Fifo => dump!(tables::fifo_def(q), |k: u64| RecordKey::WorkId(k)),
                QueueShape::ByPod => {
                    dump!(tables::pod_def(q), |k: &str| RecordKey::Text(k.to_owned()))
                }
                QueueShape::Slot => dump!(tables::slot_def(q), |_k: ()| RecordKey::Slot),
            }
        }
    }
    Ok(out)
}
