//! Figure 1, the commit floor: how fast the journal's disk syncs, and what a raw redb commit
//! (and SQLite's) costs on it.

use std::io::{Seek, SeekFrom, Write};
use std::time::{Duration, Instant};

use anyhow::Result;

use super::Ctx;
use crate::peers::{RawRedb, Sqlite};
use crate::report::{Row, Unit};
use crate::stats::{lat, median, paired_ratio};

/// `fdatasync` of a rewritten 4 KiB block, `n` times; the samples.
fn fdatasync_samples(ctx: &Ctx, n: usize) -> Result<Vec<Duration>> {
    let path = ctx.subdir("floor")?.join("fsync.bin");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)?;
    f.write_all(&[0u8; 16 * 4096])?;
    f.sync_all()?;
    let block = [0x5Au8; 4096];
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        f.seek(SeekFrom::Start((i % 16) as u64 * 4096))?;
        f.write_all(&block)?;
        let t = Instant::now();
        f.sync_data()?;
        out.push(t.elapsed());
    }
    Ok(out)
}

/// Measures figure 1.
pub fn run(ctx: &Ctx) -> Result<Vec<Row>> {
    let n = ctx.pick(200, 1000);
    let sync = fdatasync_samples(ctx, n)?;
    let mean_s = sync.iter().map(Duration::as_secs_f64).sum::<f64>() / sync.len().max(1) as f64;
    let sync = lat(sync);

    let dir = ctx.subdir("floor-db")?;
    let mut raw = RawRedb::create(&dir.join("raw.redb"))?;
    let mut lite = Sqlite::create(&dir.join("peer.sqlite"))?;
    for _ in 0..20 {
        raw.commit(1)?;
        lite.commit(1)?;
    }
    // Interleaved, so both see the same disk moment.
    let (mut r1, mut s1) = (Vec::new(), Vec::new());
    for _ in 0..n {
        r1.push(raw.commit(1)?);
        s1.push(lite.commit(1)?);
    }
    let p14 = paired_ratio(&s1, &r1);
    let (r1, s1) = (lat(r1), lat(s1));
    // 100-event commits, interleaved in rounds; events per second of each round, median.
    let rounds = ctx.pick(5, 9);
    let per_round = ctx.pick(10, 30);
    let (mut r100, mut s100) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let t: Duration = (0..per_round)
            .map(|_| raw.commit(100))
            .sum::<Result<Duration>>()?;
        r100.push((per_round * 100) as f64 / t.as_secs_f64());
        let t: Duration = (0..per_round)
            .map(|_| lite.commit(100))
            .sum::<Result<Duration>>()?;
        s100.push((per_round * 100) as f64 / t.as_secs_f64());
    }
    let (r100, s100) = (median(r100), median(s100));
    Ok(vec![
        Row::new(
            "1.1 fdatasync of a 4 KiB rewrite, journal's directory: p50",
            sync.p50,
            Unit::Ms,
            "disk",
        )
        .detail(format!("p99 {:.3} ms", sync.p99)),
        Row::new(
            "1.1 fdatasync rate, journal's directory",
            1.0 / mean_s.max(1e-9),
            Unit::PerSec,
            "disk",
        ),
        Row::new(
            "1.2 raw redb commit, 1 event: p50",
            r1.p50,
            Unit::Ms,
            "fsync",
        )
        .vs("fdatasync p50", sync.p50),
        Row::new(
            "1.2 raw redb commit, 1 event: p99",
            r1.p99,
            Unit::Ms,
            "fsync",
        )
        .vs("fdatasync p99", sync.p99),
        Row::new(
            "1.3 raw redb, 100-event commits",
            r100,
            Unit::EventsPerSec,
            "fsync + CPU",
        )
        .vs("SQLite WAL FULL, 100 rows/commit", s100),
        Row::new(
            "1.4 SQLite WAL FULL commit, 1 row: p50",
            s1.p50,
            Unit::Ms,
            "fsync",
        )
        .vs("raw redb commit p50", r1.p50)
        .paired(p14),
    ])
}
