//! Figure 2, durable accept: latency of one event, throughput with 1, 8 and 64 producers, and
//! re-accepting an unchanged 500 KB render; each beside raw redb and SQLite doing the same work
//! (same batch sizes, same bytes) in the same run.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use haptic_journal::{
    AuxKind, Batch, Checksum, Correlation, Event, Journal, JournalOptions, OpOutcome,
};

use super::Ctx;
use crate::peers::{RawRedb, Sqlite, small_event};
use crate::report::{Row, Target, Unit};
use crate::stats::{lat, median, paired_ratio};

fn journal(path: &std::path::Path) -> Result<Journal> {
    Journal::open(&JournalOptions::new(path).verify_on_open(false)).context("open journal")
}

fn journal_no_fsync(path: &std::path::Path) -> Result<Journal> {
    Journal::open(
        &JournalOptions::new(path)
            .verify_on_open(false)
            .durability(haptic_journal::Durability::None),
    )
    .context("open journal")
}

fn accept_one(j: &Journal, i: u64) -> Result<Duration> {
    let e = small_event(i);
    let t = Instant::now();
    j.accept_events(vec![e])?;
    Ok(t.elapsed())
}

/// `producers` threads accept single-event batches for `dur`; (events/s, events per commit).
fn producers(j: &Arc<Journal>, producers: u64, dur: Duration, base: u64) -> Result<(f64, f64)> {
    let before = j.commit_stats();
    let stop = Arc::new(AtomicBool::new(false));
    let failed = Arc::new(AtomicU64::new(0));
    let barrier = Arc::new(Barrier::new(producers as usize + 1));
    let threads: Vec<_> = (0..producers)
        .map(|p| {
            let (j, stop, barrier, failed) =
                (j.clone(), stop.clone(), barrier.clone(), failed.clone());
            std::thread::spawn(move || {
                barrier.wait();
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    if j.accept_events(vec![small_event(base + p * 10_000_000 + i)])
                        .is_err()
                    {
                        failed.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                    i += 1;
                }
            })
        })
        .collect();
    barrier.wait();
    let t = Instant::now();
    std::thread::sleep(dur);
    stop.store(true, Ordering::Relaxed);
    for th in threads {
        th.join()
            .map_err(|_| anyhow::anyhow!("producer panicked"))?;
    }
    let secs = t.elapsed().as_secs_f64();
    anyhow::ensure!(failed.load(Ordering::Relaxed) == 0, "an accept failed");
    let after = j.commit_stats();
    let events = (after.events - before.events) as f64;
    let commits = (after.commits - before.commits).max(1) as f64;
    Ok((events / secs, events / commits))
}

/// Commits of `k` events through `commit` for about `dur`; events/s.
fn batches(dur: Duration, k: u64, mut commit: impl FnMut(u64) -> Result<Duration>) -> Result<f64> {
    let t = Instant::now();
    let mut n = 0u64;
    while t.elapsed() < dur {
        commit(k)?;
        n += k;
    }
    Ok(n as f64 / t.elapsed().as_secs_f64())
}

fn render_event(i: u64, render: Checksum) -> Event {
    Event::TemplateRendered {
        correlation: Correlation::new(format!("r-{i}")),
        render,
        config_bytes: 500 * 1024,
        auxiliary_file_count: 0,
        duration_ms: 1,
        trigger_reason: "configmap_changed".into(),
        coalescible: true,
    }
}

/// A 500 KB config, text-like.
pub fn config_500k() -> Vec<u8> {
    (0..500 * 1024u32)
        .map(|i| b"abcdefghijklmnopqrstuvwxyz \n"[(i % 28) as usize])
        .collect()
}

fn no_new_blob(a: &haptic_journal::Accepted) -> Result<()> {
    anyhow::ensure!(
        a.outcomes
            .iter()
            .all(|o| !matches!(o, OpOutcome::Blob { stored: true, .. })),
        "an unchanged render was written again"
    );
    Ok(())
}

/// The p50 row of `ours` (figure, samples, limit) beside the p50 of `base` (what, samples taken
/// in turn with `ours`'s), with their paired ratio.
fn p50_vs(ours: (&str, &[Duration], &'static str), base: (&str, &[Duration])) -> Row {
    let ((figure, samples, limit), (what, reference)) = (ours, base);
    Row::new(figure, lat(samples.to_vec()).p50, Unit::Ms, limit)
        .vs(what, lat(reference.to_vec()).p50)
        .paired(paired_ratio(samples, reference))
}

/// Measures figure 2.
pub fn run(ctx: &Ctx) -> Result<Vec<Row>> {
    let dir = ctx.subdir("accept")?;
    let j = Arc::new(journal(&dir.join("journal.redb"))?);
    let mut raw = RawRedb::create(&dir.join("raw.redb"))?;
    let mut lite = Sqlite::create(&dir.join("peer.sqlite"))?;
    for i in 0..20 {
        raw.commit(1)?;
        lite.commit(1)?;
        accept_one(&j, i)?;
    }
    let mut rows = Vec::new();

    // 2.1 one event: raw commit, accept and SQLite commit in turn.
    let n = ctx.pick(300, 1500);
    let (mut r, mut a, mut s) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..n {
        r.push(raw.commit(1)?);
        a.push(accept_one(&j, 1_000 + i)?);
        s.push(lite.commit(1)?);
    }
    rows.push(
        p50_vs(
            ("2.1 accept 1 event: p50", &a, "fsync + writer hand-off"),
            ("raw redb commit p50", &r),
        )
        .target(Target::RatioAtMost(1.2)),
    );
    rows.push(
        Row::new(
            "2.1 accept 1 event: p99",
            lat(a.clone()).p99,
            Unit::Ms,
            "fsync tail",
        )
        .vs("raw redb commit p99", lat(r).p99),
    );
    rows.push(p50_vs(
        (
            "2.1 accept 1 event vs SQLite's lone commit (floor, not a target): p50",
            &a,
            "redb commit protocol",
        ),
        ("SQLite WAL FULL 1-row commit p50", &s),
    ));

    // 2.7 the same single accept in redb's SingleWriter mode (live read-only inspection; every
    // commit two-phase), beside the default ExclusiveWriter journal (journal/DESIGN.md,
    // "Concurrency modes").
    {
        let sw = Journal::open(
            &JournalOptions::new(dir.join("journal-single-writer.redb"))
                .verify_on_open(false)
                .concurrency(haptic_journal::Concurrency::SingleWriter),
        )?;
        for i in 0..20 {
            accept_one(&sw, i)?;
        }
        let (mut ex, mut single) = (Vec::new(), Vec::new());
        for i in 0..ctx.pick(150, 600) {
            ex.push(accept_one(&j, 2_000_000 + i)?);
            single.push(accept_one(&sw, 2_000_000 + i)?);
        }
        rows.push(p50_vs(
            (
                "2.7 accept 1 event, Concurrency::SingleWriter (2-phase commit): p50",
                &single,
                "2 fsyncs per commit",
            ),
            ("Exclusive (default) p50", &ex),
        ));
    }

    // 2.2-2.4 throughput: producers, then raw redb and SQLite at the batch size they reached.
    // Short slices, alternated (ours, raw redb, SQLite) many times: the shared disk's fsync
    // latency drifts over seconds, and each ratio must compare the same moments.
    let dur = Duration::from_millis(ctx.pick(250, 400));
    let rounds = ctx.pick(6, 15);
    for (fig, p) in [("2.2", 1u64), ("2.3", 8), ("2.4", 64)] {
        let (mut ours, mut per, mut raws, mut lites) = (vec![], vec![], vec![], vec![]);
        for round in 0..rounds {
            let (rate, k) = producers(&j, p, dur, 100_000_000 * (round + 1) + p)?;
            let kb = k.round().max(1.0) as u64;
            ours.push(rate);
            per.push(k);
            raws.push(batches(dur, kb, |k| raw.commit(k))?);
            lites.push(batches(dur, kb, |k| lite.commit(k))?);
        }
        let (ours, k) = (median(ours), median(per));
        let kb = k.round().max(1.0) as u64;
        let (raws, lites) = (median(raws), median(lites));
        let name = format!(
            "{fig} accept, {p} producer{}",
            if p == 1 { "" } else { "s" }
        );
        let limit = if p == 1 {
            "fsync (1 event per commit)"
        } else {
            "fsync + writer thread CPU"
        };
        let (t_raw, t_lite) = if p == 1 {
            (None, None)
        } else {
            (
                Some(Target::RatioAtLeast(0.8)),
                Some(Target::RatioAtLeast(1.0)),
            )
        };
        let mut row = Row::new(name.clone(), ours, Unit::EventsPerSec, limit)
            .detail(format!("{k:.1} ev/commit"))
            .vs(format!("raw redb, {kb}-event commits"), raws);
        if let Some(t) = t_raw {
            row = row.target(t);
        }
        rows.push(row);
        let mut row = Row::new(format!("{name} vs SQLite"), ours, Unit::EventsPerSec, limit)
            .vs(format!("SQLite WAL FULL, {kb} rows/commit"), lites);
        if let Some(t) = t_lite {
            row = row.target(t);
        }
        rows.push(row);
        // What bounds the SQLite target: redb's own commit against SQLite's, same batches.
        rows.push(
            Row::new(
                format!("{fig} raw redb vs SQLite, {kb}-event commits (bounds the SQLite target)"),
                raws,
                Unit::EventsPerSec,
                "redb commit protocol vs SQLite WAL append",
            )
            .vs(format!("SQLite WAL FULL, {kb} rows/commit"), lites),
        );
    }

    // 2.6 the same without fsync (journal and raw redb with Durability::None): what the CPU
    // allows, i.e. the journal's own cost over redb's, whatever the disk does meanwhile.
    {
        let j0 = Arc::new(journal_no_fsync(&dir.join("journal-nofsync.redb"))?);
        let mut raw0 = RawRedb::create_with(
            &dir.join("raw-nofsync.redb"),
            haptic_journal::redb::Durability::None,
        )?;
        for i in 0..200 {
            raw0.commit(1)?;
            accept_one(&j0, i)?;
        }
        let (mut r, mut a) = (Vec::new(), Vec::new());
        for i in 0..ctx.pick(2000, 10_000) {
            r.push(raw0.commit(1)?);
            a.push(accept_one(&j0, 1_000 + i)?);
        }
        rows.push(p50_vs(
            (
                "2.6 without fsync (Durability::None, CPU only, not durable): accept 1 event p50",
                &a,
                "CPU: writer hand-off (2 thread wake-ups)",
            ),
            ("raw redb commit p50, no fsync", &r),
        ));
        for p in [8u64, 64] {
            let (mut ours, mut per, mut raws) = (vec![], vec![], vec![]);
            for round in 0..rounds {
                let (rate, k) = producers(&j0, p, dur, 900_000_000 * (round + 1) + p)?;
                ours.push(rate);
                per.push(k);
                raws.push(batches(dur, k.round().max(1.0) as u64, |k| raw0.commit(k))?);
            }
            let k = median(per);
            rows.push(
                Row::new(
                    format!("2.6 without fsync: accept, {p} producers"),
                    median(ours),
                    Unit::EventsPerSec,
                    "CPU: 2 cores for the writer and the producers' wake-ups",
                )
                .detail(format!("{k:.1} ev/commit"))
                .vs(
                    format!("raw redb, {}-event commits, no fsync", k.round().max(1.0)),
                    median(raws),
                ),
            );
        }
    }

    // 2.5 re-accepting an unchanged 500 KB render, beside a small event (same moment).
    let config = config_500k();
    let config_hash = Checksum::of(&config);
    {
        let mut b = Batch::new();
        let r = b.put_render(config.clone(), Vec::<(AuxKind, String, Vec<u8>)>::new());
        b.event(render_event(0, r.checksum));
        j.accept(b)?;
    }
    raw.put_blob(&config)?;
    lite.put_blob(&config)?;
    let n = ctx.pick(100, 400);
    let (mut big, mut hashed, mut small, mut lite_big, mut lite_small, mut sha) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    for i in 0..n {
        let c = config.clone();
        let t = Instant::now();
        let mut b = Batch::new();
        let r = b.put_render(c, vec![]);
        b.event(render_event(i, r.checksum));
        let acc = j.accept(b)?;
        big.push(t.elapsed());
        no_new_blob(&acc)?;

        let c = config.clone();
        let t = Instant::now();
        let mut b = Batch::new();
        let r = b.put_render_hashed(c, config_hash, vec![]);
        b.event(render_event(i, r.checksum));
        let acc = j.accept(b)?;
        hashed.push(t.elapsed());
        no_new_blob(&acc)?;

        small.push(accept_one(&j, 5_000_000 + i)?);
        lite_big.push(lite.reaccept(&config)?);
        lite_small.push(lite.commit(1)?);
        let t = Instant::now();
        std::hint::black_box(Checksum::of(std::hint::black_box(&config)));
        sha.push(t.elapsed());
    }
    let (p_big, p_hashed, p_lite) = (
        paired_ratio(&big, &small),
        paired_ratio(&hashed, &small),
        paired_ratio(&lite_big, &lite_small),
    );
    let (big, hashed, small) = (lat(big), lat(hashed), lat(small));
    let (lite_big, lite_small, sha) = (lat(lite_big), lat(lite_small), lat(sha));
    // (how the render is put, its p50, what bounds it, paired ratio to a small accept)
    for (how, p50, limit, paired) in [
        (
            "put_render (hashes it once)",
            big.p50,
            "fsync + SHA-256 (CPU)",
            p_big,
        ),
        (
            "put_render_hashed (hashed by the source)",
            hashed.p50,
            "fsync",
            p_hashed,
        ),
    ] {
        rows.push(
            Row::new(
                format!("2.5 re-accept unchanged 500 KB render, {how}: p50"),
                p50,
                Unit::Ms,
                limit,
            )
            .vs("accept small event p50", small.p50)
            .paired(paired)
            .target(Target::RatioAtMost(1.2)),
        );
    }
    rows.push(
        Row::new(
            "2.5 SQLite: hash, look up, insert event (same render): p50",
            lite_big.p50,
            Unit::Ms,
            "fsync + SHA-256 (CPU)",
        )
        .vs("SQLite 1-row commit p50", lite_small.p50)
        .paired(p_lite),
    );
    rows.push(
        Row::new(
            "2.5 SHA-256 of 500 KB (one pass): p50",
            sha.p50,
            Unit::Ms,
            "CPU",
        )
        .vs("accept small event p50", small.p50),
    );
    Ok(rows)
}
