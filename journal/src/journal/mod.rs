//! [`Journal`]: open/create, the write calls (all through the writer thread) and the reads.
//!
//! - `options.rs`: [`JournalOptions`], [`Durability`], [`Concurrency`].
//! - `open.rs`: opening and creating a journal, and the raw opens for migrations.
//! - `write.rs`: [`Journal::accept`] and its one-operation shorthands, trim and compact.
//! - `read.rs`: the reads (events, queues, blobs, state tables, raw tables) and verify.
//! - `stats.rs`: summaries (pending, stats, commit counters).

mod history;
mod open;
mod options;
mod read;
mod stats;
mod write;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::SyncSender;
use std::thread::JoinHandle;

use crate::db::Inner;
use crate::error::ReadError;
use crate::writer::Request;

pub use open::{open_raw, open_raw_read_only};
pub use options::{Concurrency, Durability, JournalOptions};
pub use read::{BlobCounts, WorkEntry};
pub use stats::{CommitStats, Pending, QueueSummary, Stats, TableStat};

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

impl Journal {
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

    /// The storage fault of the current episode: `Some` from a commit that failed for a storage
    /// reason (a full or read-only volume, an I/O error, the file removed) until the next commit
    /// succeeds; `None` while commits succeed. No I/O (a lock and a clone).
    ///
    /// While a fault lasts, the writer thread reopens the database before the next commit
    /// (redb refuses every operation after a failed I/O until it is reopened; the reopen runs
    /// redb's repair, which restores the last committed state), and on a full volume compacts
    /// once per episode. A removed or replaced file is never reopened nor written
    /// ([`crate::AcceptError::Removed`]). Reads fail between the failure and a successful
    /// reopen.
    #[must_use]
    pub fn storage_fault(&self) -> Option<crate::error::StorageFault> {
        self.inner
            .fault
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// Runs a read walk with redb panics contained ([`crate::contain`]): a damaged page is
/// [`ReadError::Damaged`], never a panic.
fn guarded<T>(f: impl FnOnce() -> Result<T, ReadError>) -> Result<T, ReadError> {
    crate::contain::contain(f).unwrap_or_else(|d| Err(ReadError::Damaged(d)))
}
