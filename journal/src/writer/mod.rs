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
//!
//! - `group.rs`: the loop: drain a group of requests, commit it once, answer every caller.
//! - `reply.rs`: the one-shot reply slot each caller waits on (reused per calling thread).
//! - `tx.rs`: [`Tx`], the tables of one write transaction, and [`Ctx`], the meta counters.
//! - `apply.rs`: validating and applying one request's operations.
//! - `blobs.rs`: blob reference counts and collection of unreferenced blobs.
//! - `trim.rs`: trimming events below the watermark, and compaction.
//! - `history.rs`: appending to a pod's history and trimming it to its retention (schema 4).

mod apply;
mod blobs;
mod group;
mod history;
mod reply;
mod trim;
mod tx;

use std::sync::mpsc::SyncSender;

use crate::batch::{Accepted, Op};
use crate::error::{AcceptError, CompactError};

pub(crate) use group::run;
pub(crate) use reply::{BatchReply, batch_reply, send_group};
use tx::{Ctx, Tx};

/// What the writer hands back for one batch: its result, and its operations (so the caller's
/// thread, not the writer, frees them).
pub(crate) type BatchResult = (Result<Accepted, AcceptError>, Vec<Op>);

pub(crate) enum Request {
    Batch {
        ops: Vec<Op>,
        reply: BatchReply,
    },
    Compact {
        reply: SyncSender<Result<bool, CompactError>>,
    },
}

/// Opens the journal's file again (same builder options) after a failed I/O.
pub(crate) type Reopen = Box<dyn Fn() -> Result<redb::Database, redb::DatabaseError> + Send>;

/// The file a file journal was opened on: its path and identity (device, inode), compared before
/// each commit so a removed or replaced file is never written to.
pub(crate) struct FileId {
    pub path: std::path::PathBuf,
    pub dev: u64,
    pub ino: u64,
}

pub(crate) struct WriterConfig {
    pub durability: redb::Durability,
    pub max_group: usize,
    pub trim_every_commits: u32,
    /// The file, when the journal is a file: auto-compaction compares its size with live data.
    pub auto_compact_path: Option<std::path::PathBuf>,
    /// Bytes the file may exceed twice the used bytes by before auto-compaction.
    pub auto_compact_slack: u64,
    /// Compact after every periodic trim, whatever the sizes.
    pub auto_compact_always: bool,
    /// Reopens the database after a failed I/O; `None` (a custom backend): the failed database
    /// stays as it is (redb refuses every later operation).
    pub reopen: Option<Reopen>,
    /// The file and its identity; `None` for a custom backend.
    pub file: Option<FileId>,
}
