//! The references: raw redb (the floor the journal is built on) and SQLite in WAL mode with
//! `synchronous=FULL` (the peer a user would pick instead), writing the same bytes the journal
//! writes, one transaction per batch, from one thread.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use haptic_journal::redb;
use haptic_journal::{Checksum, Correlation, Event, Term, UnixMillis, codec};

const EVENTS: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("events");
const BLOBS: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new("blobs");

/// The small event every latency and throughput figure accepts.
#[must_use]
pub fn small_event(i: u64) -> Event {
    Event::DriftPreventionTriggered {
        correlation: Correlation::new(format!("ev-{i:012}")),
        time_since_last_deployment_ms: i,
    }
}

/// The exact value the journal stores for [`small_event`] (envelope and payload), encoded here so
/// the references pay the same encoding cost as the journal.
#[must_use]
pub fn sealed(i: u64) -> Vec<u8> {
    let e = small_event(i);
    codec::seal(
        e.kind().as_str(),
        UnixMillis::now(),
        Term(0),
        &codec::encode_payload(&e),
    )
}

/// A raw redb database with an `events` table (and `blobs` for the render figure).
#[derive(Debug)]
pub struct RawRedb {
    db: redb::Database,
    next: u64,
    durability: redb::Durability,
}

impl RawRedb {
    /// Creates `path` (default options: ExclusiveWriter, Immediate durability).
    ///
    /// # Errors
    /// redb's.
    pub fn create(path: &Path) -> Result<Self> {
        Self::create_with(path, redb::Durability::Immediate)
    }

    /// Creates `path` with commits of `durability` (`None`: the CPU-only comparison).
    ///
    /// # Errors
    /// redb's.
    pub fn create_with(path: &Path, durability: redb::Durability) -> Result<Self> {
        let db = redb::Database::create(path).context("create raw redb")?;
        Ok(RawRedb {
            db,
            next: 1,
            durability,
        })
    }

    /// One commit of `k` events; returns its duration.
    ///
    /// # Errors
    /// redb's.
    pub fn commit(&mut self, k: u64) -> Result<Duration> {
        let t = Instant::now();
        let mut txn = self.db.begin_write()?;
        txn.set_durability(self.durability)?;
        {
            let mut table = txn.open_table(EVENTS)?;
            for _ in 0..k {
                table.insert(self.next, sealed(self.next).as_slice())?;
                self.next += 1;
            }
        }
        txn.commit()?;
        Ok(t.elapsed())
    }

    /// Stores a blob under its SHA-256 (set-up of the render figure).
    ///
    /// # Errors
    /// redb's.
    pub fn put_blob(&mut self, content: &[u8]) -> Result<()> {
        let txn = self.db.begin_write()?;
        txn.open_table(BLOBS)?
            .insert(Checksum::of(content).as_bytes().as_slice(), content)?;
        txn.commit()?;
        Ok(())
    }
}

/// SQLite, WAL, `synchronous=FULL` (an fsync of the WAL per commit), with the same two tables.
#[derive(Debug)]
pub struct Sqlite {
    conn: rusqlite::Connection,
    next: i64,
}

impl Sqlite {
    /// Creates the database at `path`.
    ///
    /// # Errors
    /// SQLite's, or WAL refused.
    pub fn create(path: &Path) -> Result<Self> {
        let conn = rusqlite::Connection::open(path).context("open sqlite")?;
        let mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
        anyhow::ensure!(
            mode.eq_ignore_ascii_case("wal"),
            "sqlite refused WAL: {mode}"
        );
        conn.execute_batch(
            "PRAGMA synchronous=FULL;
             CREATE TABLE events (seq INTEGER PRIMARY KEY, value BLOB NOT NULL);
             CREATE TABLE blobs (hash BLOB PRIMARY KEY, content BLOB NOT NULL) WITHOUT ROWID;",
        )?;
        Ok(Sqlite { conn, next: 1 })
    }

    /// One transaction of `k` event rows; returns its duration.
    ///
    /// # Errors
    /// SQLite's.
    pub fn commit(&mut self, k: u64) -> Result<Duration> {
        let t = Instant::now();
        let tx = self.conn.transaction()?;
        {
            let mut st = tx.prepare_cached("INSERT INTO events (seq, value) VALUES (?1, ?2)")?;
            for _ in 0..k {
                st.execute(rusqlite::params![self.next, sealed(self.next as u64)])?;
                self.next += 1;
            }
        }
        tx.commit()?;
        Ok(t.elapsed())
    }

    /// Stores a blob under its SHA-256 (set-up of the render figure).
    ///
    /// # Errors
    /// SQLite's.
    pub fn put_blob(&mut self, content: &[u8]) -> Result<()> {
        self.conn.execute(
            "INSERT OR IGNORE INTO blobs (hash, content) VALUES (?1, ?2)",
            rusqlite::params![Checksum::of(content).as_bytes().as_slice(), content],
        )?;
        Ok(())
    }

    /// The render workload on SQLite: hash the content (content addressing needs it), look the
    /// blob up (present: nothing to store), insert the event row, commit.
    ///
    /// # Errors
    /// SQLite's.
    pub fn reaccept(&mut self, content: &[u8]) -> Result<Duration> {
        let t = Instant::now();
        let hash = Checksum::of(content);
        let tx = self.conn.transaction()?;
        {
            let present: bool = tx
                .prepare_cached("SELECT 1 FROM blobs WHERE hash = ?1")?
                .exists([hash.as_bytes().as_slice()])?;
            if !present {
                tx.prepare_cached("INSERT INTO blobs (hash, content) VALUES (?1, ?2)")?
                    .execute(rusqlite::params![hash.as_bytes().as_slice(), content])?;
            }
            tx.prepare_cached("INSERT INTO events (seq, value) VALUES (?1, ?2)")?
                .execute(rusqlite::params![self.next, sealed(self.next as u64)])?;
            self.next += 1;
        }
        tx.commit()?;
        Ok(t.elapsed())
    }
}

/// The SQLite library version linked (bundled).
#[must_use]
pub fn sqlite_version() -> &'static str {
    rusqlite::version()
}
