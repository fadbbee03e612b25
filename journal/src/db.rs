//! The redb database shared by the readers and the writer thread, and the counters the writer
//! updates.

use std::sync::RwLock;
use std::sync::atomic::AtomicU64;

use redb::{Database, ReadOnlyDatabase, ReadTransaction, ReadableDatabase};

pub(crate) enum Db {
    Rw(Database),
    Ro(ReadOnlyDatabase),
}

impl Db {
    pub(crate) fn begin_read(&self) -> Result<ReadTransaction, redb::TransactionError> {
        match self {
            Db::Rw(d) => d.begin_read(),
            Db::Ro(d) => d.begin_read(),
        }
    }
}

pub(crate) struct Inner {
    /// The database. Readers and the writer take the read lock only to begin a transaction;
    /// compaction takes the write lock (it needs `&mut Database`).
    pub db: RwLock<Db>,
    pub counters: Counters,
}

/// Counters readable while the journal runs.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub commits: AtomicU64,
    pub events: AtomicU64,
    pub requests: AtomicU64,
    pub failed_commits: AtomicU64,
}
