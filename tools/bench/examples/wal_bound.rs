//! Design check behind figures 2.3/2.4 against SQLite (issue 12): could the journal beat SQLite
//! WAL `synchronous=FULL` at the same batch sizes by changing how it uses redb? Three writers
//! commit the same sealed events, interleaved commit by commit for about 2 s per round, 3 rounds
//! per batch size k:
//!
//! - `raw`: raw redb, one row per event, `Durability::Immediate` (the figures' reference);
//! - `packed`: raw redb, the k events in one value (one row per commit), `Immediate`;
//! - `wal`: redb rows at `Durability::None` behind an append-only, preallocated log file
//!   (CRC32 per record, one `fdatasync` per commit; a durable redb commit every 64): what the
//!   journal would be with its own write-ahead log in front of redb;
//! - SQLite WAL `synchronous=FULL`, one transaction per batch.
//!
//! `cargo run --release -p haptic-bench --example wal_bound [DIR]` (DIR: the disk under test,
//! default the current directory). Prints events/s and each writer's ratio to SQLite.

use std::os::unix::fs::FileExt as _;
use std::time::{Duration, Instant};

use haptic_bench::peers::{RawRedb, Sqlite, sealed};
use haptic_journal::redb;

const EVENTS: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("events");
const LOG_BYTES: u64 = 256 << 20;

fn main() -> anyhow::Result<()> {
    let base = std::env::args().nth(1).unwrap_or_else(|| ".".into());
    let dir = tempfile::tempdir_in(base)?;
    let mut raw = RawRedb::create(&dir.path().join("raw.redb"))?;
    let mut sqlite = Sqlite::create(&dir.path().join("sqlite.db"))?;
    let packed = redb::Database::create(dir.path().join("packed.redb"))?;
    let wal_db = redb::Database::create(dir.path().join("wal.redb"))?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(dir.path().join("wal.log"))?;
    // Preallocated and written once, so an append's fdatasync carries no size or extent change.
    let zeros = vec![0u8; 1 << 20];
    for i in 0..(LOG_BYTES >> 20) {
        log.write_all_at(&zeros, i << 20)?;
    }
    log.sync_all()?;
    let (mut next_packed, mut next_wal, mut off, mut wal_commits) = (1u64, 1u64, 0u64, 0u64);
    println!(
        "| k | raw redb ev/s | packed ev/s | wal + redb ev/s | SQLite ev/s | raw/SQLite | packed/SQLite | wal/SQLite |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for k in [1u64, 6, 41, 100] {
        for _round in 0..3 {
            let mut t = [0f64; 4];
            let mut n = 0u64;
            let started = Instant::now();
            while started.elapsed() < Duration::from_secs(2) {
                t[0] += raw.commit(k)?.as_secs_f64();
                t[3] += sqlite.commit(k)?.as_secs_f64();

                let s = Instant::now();
                let mut value = Vec::new();
                for _ in 0..k {
                    let v = sealed(next_packed);
                    value.extend_from_slice(&u32::try_from(v.len())?.to_le_bytes());
                    value.extend_from_slice(&v);
                    next_packed += 1;
                }
                let txn = packed.begin_write()?;
                txn.open_table(EVENTS)?
                    .insert(next_packed, value.as_slice())?;
                txn.commit()?;
                t[1] += s.elapsed().as_secs_f64();

                let s = Instant::now();
                let mut txn = wal_db.begin_write()?;
                wal_commits += 1;
                txn.set_durability(if wal_commits % 64 == 0 {
                    redb::Durability::Immediate
                } else {
                    redb::Durability::None
                })?;
                let mut record = Vec::new();
                {
                    let mut table = txn.open_table(EVENTS)?;
                    for _ in 0..k {
                        let v = sealed(next_wal);
                        record.extend_from_slice(&u32::try_from(v.len())?.to_le_bytes());
                        record.extend_from_slice(&v);
                        table.insert(next_wal, v.as_slice())?;
                        next_wal += 1;
                    }
                }
                let crc = crc32fast::hash(&record);
                record.extend_from_slice(&crc.to_le_bytes());
                if off + record.len() as u64 > LOG_BYTES {
                    off = 0;
                }
                log.write_all_at(&record, off)?;
                off += record.len() as u64;
                log.sync_data()?;
                txn.commit()?;
                t[2] += s.elapsed().as_secs_f64();
                n += k;
            }
            let rate = t.map(|s| n as f64 / s);
            println!(
                "| {k} | {:.0} | {:.0} | {:.0} | {:.0} | {:.2}x | {:.2}x | {:.2}x |",
                rate[0],
                rate[1],
                rate[2],
                rate[3],
                rate[0] / rate[3],
                rate[1] / rate[3],
                rate[2] / rate[3]
            );
        }
    }
    Ok(())
}
