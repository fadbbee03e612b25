//! Journal benchmark (`cargo bench -p haptic-journal`): prints ONE table.
//!
//! Every figure comes from this run, on files in a temp dir under `target/tmp` (the repo's
//! disk), with `Durability::Immediate`. Commit-cost figures are measured in both redb
//! concurrency modes (ExclusiveWriter, the default, and SingleWriter, which lets
//! `haptic-journalctl` read a live journal); each target compares against the raw redb figure of
//! the same mode. The churn run (1,000,000 events, 64 producers, items acked and events trimmed
//! as a controller would) uses the default mode.
//!
//! `HAPTIC_BENCH_SCALE=0.05 cargo bench -p haptic-journal` scales every count down for a quick
//! run (default 1.0, about 3-4 minutes on 2 cores).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use haptic_journal::redb;
use haptic_journal::*;

const MIB: f64 = 1024.0 * 1024.0;

fn scale() -> f64 {
    std::env::var("HAPTIC_BENCH_SCALE")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| *s > 0.0)
        .unwrap_or(1.0)
}

fn n(base: u64) -> u64 {
    ((base as f64 * scale()).round() as u64).max(1)
}

fn small_event(i: u64) -> Event {
    Event::DriftPreventionTriggered {
        correlation: Correlation::new(format!("ev-{i:012}")),
        time_since_last_deployment_ms: i,
    }
}

/// The bytes the journal stores for [`small_event`] (for the raw redb runs).
fn small_value(i: u64) -> Vec<u8> {
    let payload = format!("{:0>60}", i).into_bytes();
    codec::seal(
        "drift.prevention.triggered",
        UnixMillis::now(),
        Term(1),
        &payload,
    )
}

#[derive(Clone, Copy)]
struct Lat {
    p50: Duration,
    p99: Duration,
}

fn lat(mut v: Vec<Duration>) -> Lat {
    v.sort();
    let at = |q: f64| v[((v.len() as f64 - 1.0) * q).round() as usize];
    Lat {
        p50: at(0.50),
        p99: at(0.99),
    }
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1000.0)
}

fn mode_name(c: Concurrency) -> &'static str {
    match c {
        Concurrency::Exclusive => "ExclusiveWriter",
        Concurrency::SingleWriter => "SingleWriter",
    }
}

fn raw_db(dir: &std::path::Path, c: Concurrency) -> redb::Database {
    let mut b = redb::Builder::new();
    b.set_concurrency_mode(match c {
        Concurrency::Exclusive => redb::ConcurrencyMode::ExclusiveWriter,
        Concurrency::SingleWriter => redb::ConcurrencyMode::SingleWriter,
    });
    b.create(dir.join(format!("raw-{}.redb", mode_name(c))))
        .unwrap()
}

const RAW: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("events");

/// One raw redb Immediate commit of one event.
fn raw_commit(db: &redb::Database, k: u64) -> Duration {
    let value = small_value(k);
    let t = Instant::now();
    let txn = db.begin_write().unwrap();
    txn.open_table(RAW)
        .unwrap()
        .insert(k, value.as_slice())
        .unwrap();
    txn.commit().unwrap();
    t.elapsed()
}

/// Raw redb: `batches` Immediate commits of 100 events each; events per second.
fn raw_batch(db: &redb::Database, first: u64, batches: u64) -> f64 {
    let t = Instant::now();
    for b in 0..batches {
        let txn = db.begin_write().unwrap();
        {
            let mut tab = txn.open_table(RAW).unwrap();
            for i in 0..100 {
                let k = first + b * 100 + i;
                tab.insert(k, small_value(k).as_slice()).unwrap();
            }
        }
        txn.commit().unwrap();
    }
    (batches * 100) as f64 / t.elapsed().as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn journal(path: &std::path::Path, c: Concurrency) -> Journal {
    Journal::open(
        &JournalOptions::new(path)
            .concurrency(c)
            .verify_on_open(false),
    )
    .unwrap()
}

/// `producers` threads each accept `per` single-event batches; (events/s, events per commit).
fn group_commit(j: &Arc<Journal>, producers: u64, per: u64) -> (f64, f64) {
    let before = j.commit_stats();
    let barrier = Arc::new(Barrier::new(producers as usize + 1));
    let threads: Vec<_> = (0..producers)
        .map(|p| {
            let j = j.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                for i in 0..per {
                    j.accept_events(vec![small_event(p * 1_000_000 + i)])
                        .unwrap();
                }
            })
        })
        .collect();
    barrier.wait();
    let t = Instant::now();
    for th in threads {
        th.join().unwrap();
    }
    let secs = t.elapsed().as_secs_f64();
    let after = j.commit_stats();
    let events = after.events - before.events;
    let commits = (after.commits - before.commits).max(1);
    (events as f64 / secs, events as f64 / commits as f64)
}

fn render_batch(config: Vec<u8>, i: u64) -> Batch {
    let mut b = Batch::new();
    let r = b.put_render(config, vec![]);
    b.event(Event::TemplateRendered {
        correlation: Correlation::new(format!("r-{i}")),
        render: r.checksum,
        config_bytes: 500 * 1024,
        auxiliary_file_count: 0,
        duration_ms: 1,
        trigger_reason: "configmap_changed".into(),
        coalescible: true,
    });
    b
}

/// p50 of re-accepting an unchanged 500 KB render (hashing included, blob deduplicated) and of a
/// small event, interleaved so both see the same disk state.
fn render_dedup(j: &Journal, count: u64) -> (Lat, Lat) {
    let config: Vec<u8> = (0..500 * 1024u32)
        .map(|i| b"abcdefghijklmnopqrstuvwxyz \n"[(i % 28) as usize])
        .collect();
    j.accept(render_batch(config.clone(), 0)).unwrap();
    let (mut big, mut small) = (Vec::new(), Vec::new());
    for i in 0..count {
        let c = config.clone();
        let t = Instant::now();
        let a = j.accept(render_batch(c, i)).unwrap();
        big.push(t.elapsed());
        assert!(
            a.outcomes
                .iter()
                .all(|o| !matches!(o, OpOutcome::Blob { stored: true, .. })),
            "an unchanged render must not be written again"
        );
        let e = small_event(i);
        let t = Instant::now();
        j.accept_events(vec![e]).unwrap();
        small.push(t.elapsed());
    }
    (lat(big), lat(small))
}

struct Churn {
    events: u64,
    secs: f64,
    per_commit: f64,
    file_before: u64,
    live_before: u64,
    file_after: u64,
    live_after: u64,
    kept_events: u64,
}

/// 64 producers: each accepts an event plus the status item derived from it (keyed by pod,
/// last wins) and its render (a new one every 50 events), together with the ack
/// (compare-and-delete) of its previous item and the dispatch mark of its previous event, like a
/// worker and the dispatcher. The writer trims every 64 commits; each pod's last item stays pending.
fn churn(path: &std::path::Path, total: u64) -> Churn {
    let j = Arc::new(journal(path, Concurrency::Exclusive));
    let producers = 64u64;
    let per = total / producers;
    let before = j.commit_stats();
    let t = Instant::now();
    let threads: Vec<_> = (0..producers)
        .map(|p| {
            let j = j.clone();
            std::thread::spawn(move || {
                let pod = PodRef {
                    namespace: Namespace::new("haptic"),
                    name: ObjectName::new(format!("haproxy-{p}")),
                };
                let rc = RuntimeConfigRef {
                    namespace: Namespace::new("haptic"),
                    name: ObjectName::new("demo-haproxycfg"),
                };
                let key = WorkKey::Pod(PodStatusKey::new(&rc, &pod));
                let mut prev: Option<(Seq, WorkId)> = None;
                for i in 0..per {
                    let mut b = Batch::new();
                    // The worker's outcome for the previous item (compare-and-delete ack) and
                    // the dispatcher's mark commit with the next event.
                    if let Some((seq, id)) = prev {
                        b.ack(Queue::StatusPending, key.clone(), id);
                        b.push(Op::MarkDispatched(seq));
                    }
                    // A new render every 50 events; in between the same one (deduplicated
                    // while referenced, stored again after it was collected).
                    let render = b
                        .put_render(
                            format!("cfg {p} {}", i / 50).repeat(64).into_bytes(),
                            vec![],
                        )
                        .checksum;
                    let e = b.event(Event::ConfigAppliedToPod {
                        correlation: Correlation::new(format!("ev-{p}-{i}")),
                        runtime_config: rc.clone(),
                        pod: pod.clone(),
                        checksum: render,
                        is_drift_check: false,
                        sync: SyncMetadata::default(),
                    });
                    let item = WorkItem::Status(PodStatusItem {
                        runtime_config: rc.clone(),
                        pod: pod.clone(),
                        change: PodStatusChange::Applied {
                            checksum: render,
                            is_drift_check: false,
                            sync: SyncMetadata::default(),
                            observed_at: UnixMillis::now(),
                        },
                    });
                    b.enqueue(item, Origin::Batch(e));
                    let a = j.accept(b).unwrap();
                    prev = Some((a.seqs()[0], a.work_ids()[0]));
                }
                // The last item of each pod stays pending (live data, as in a running controller).
            })
        })
        .collect();
    for th in threads {
        th.join().unwrap();
    }
    let secs = t.elapsed().as_secs_f64();
    j.trim().unwrap();
    let after = j.commit_stats();
    let s = j.stats().unwrap();
    let (file_before, live_before) = (s.file_bytes.unwrap_or(0), s.live_bytes());
    for _ in 0..8 {
        if !j.compact().unwrap() {
            break;
        }
    }
    let s = j.stats().unwrap();
    let kept_events = s
        .tables
        .iter()
        .find(|t| t.name == "events")
        .unwrap()
        .entries;
    let rep = j.verify().unwrap();
    assert!(rep.is_clean(), "{:?}", rep.problems.first());
    Churn {
        events: after.events - before.events,
        secs,
        per_commit: (after.events - before.events) as f64
            / (after.commits - before.commits).max(1) as f64,
        file_before,
        live_before,
        file_after: s.file_bytes.unwrap_or(0),
        live_after: s.live_bytes(),
        kept_events,
    }
}

struct ModeFigures {
    raw1: Lat,
    raw100: f64,
    acc: Lat,
    gc: Vec<(u64, f64, f64)>,
    big: Lat,
    small: Lat,
}

/// Every comparison interleaves the raw redb run and ours (same mode, same disk, same moment),
/// because the disk is shared and its fsync latency drifts during a run.
fn measure_mode(dir: &std::path::Path, c: Concurrency) -> ModeFigures {
    let db = raw_db(dir, c);
    let j = Arc::new(journal(&dir.join(format!("j-{}.redb", mode_name(c))), c));
    // Warm up both files (the first commits allocate).
    for i in 0..20 {
        raw_commit(&db, i);
        j.accept_events(vec![small_event(i)]).unwrap();
    }
    // Single-event latency: raw commit and accept alternately.
    let (mut raw, mut ours) = (Vec::new(), Vec::new());
    for i in 0..n(1000) {
        raw.push(raw_commit(&db, 1_000 + i));
        let e = small_event(i);
        let t = Instant::now();
        j.accept_events(vec![e]).unwrap();
        ours.push(t.elapsed());
    }
    let (raw1, acc) = (lat(raw), lat(ours));
    // Throughput: rounds of (raw 100-batches, group commit with 1, 8, 64 producers); medians.
    let rounds = 5;
    let mut raw_rates = Vec::new();
    let mut gc_rates: Vec<Vec<(f64, f64)>> = vec![Vec::new(); 3];
    for r in 0..rounds {
        raw_rates.push(raw_batch(&db, 10_000_000 + r * 1_000_000, n(40)));
        for (i, (p, per)) in [(1u64, n(200)), (8, n(60)), (64, n(20))].iter().enumerate() {
            gc_rates[i].push(group_commit(&j, *p, *per));
        }
    }
    let raw100 = median(raw_rates);
    let gc = [1u64, 8, 64]
        .iter()
        .zip(gc_rates)
        .map(|(p, v)| {
            (
                *p,
                median(v.iter().map(|x| x.0).collect()),
                median(v.iter().map(|x| x.1).collect()),
            )
        })
        .collect();
    drop(db);
    let (big, small) = render_dedup(&j, n(300));
    ModeFigures {
        raw1,
        raw100,
        acc,
        gc,
        big,
        small,
    }
}

fn verdict(ok: bool) -> &'static str {
    if ok { "PASS" } else { "MISS" }
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument is accepted and ignored.
    let started = Instant::now();
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let modes = [Concurrency::Exclusive, Concurrency::SingleWriter];
    let figs: Vec<ModeFigures> = modes.iter().map(|c| measure_mode(dir.path(), *c)).collect();
    // Context for the 500 KB target: `Batch::put_render` hashes the content twice (the config
    // blob key and the render checksum of DESIGN.md section 1).
    let sha = {
        let data = vec![7u8; 500 * 1024];
        let v = (0..n(300))
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(Checksum::of(std::hint::black_box(&data)));
                t.elapsed()
            })
            .collect();
        lat(v)
    };
    let churn_events = n(1_000_000);
    let ch = churn(&dir.path().join("churn.redb"), churn_events);

    let mut out = String::new();
    let mut row = |a: &str, b: String, c: String| {
        out.push_str(&format!("{a:<50} {b:>26} {c:>26}\n"));
    };
    println!(
        "haptic-journal benchmark: redb 4.6, Durability::Immediate, scale {}, files in {}",
        scale(),
        env!("CARGO_TARGET_TMPDIR")
    );
    row(
        "figure",
        "ExclusiveWriter (default)".into(),
        "SingleWriter".into(),
    );
    let both = |f: &dyn Fn(&ModeFigures) -> String| (f(&figs[0]), f(&figs[1]));
    let (a, b) = both(&|m| format!("{} / {}", ms(m.raw1.p50), ms(m.raw1.p99)));
    row("raw redb commit, 1 event: p50 / p99", a, b);
    let (a, b) = both(&|m| format!("{:.0} ev/s", m.raw100));
    row("raw redb, 100-event batches", a, b);
    let (a, b) = both(&|m| format!("{} / {}", ms(m.acc.p50), ms(m.acc.p99)));
    row("accept, 1 event: p50 / p99", a, b);
    for (i, p) in [1, 8, 64].iter().enumerate() {
        let (a, b) = both(&|m| format!("{:.0} ev/s ({:.1}/commit)", m.gc[i].1, m.gc[i].2));
        row(&format!("group commit, {p} producer(s)"), a, b);
    }
    let (a, b) = both(&|m| format!("{} / {}", ms(m.big.p50), ms(m.big.p99)));
    row("accept unchanged 500 KB render: p50 / p99", a, b);
    let (a, b) = both(&|m| format!("{} / {}", ms(m.small.p50), ms(m.small.p99)));
    row("accept small event (same run): p50 / p99", a, b);
    row(
        "SHA-256 of 500 KB (put_render does 2): p50",
        ms(sha.p50),
        String::new(),
    );
    row(
        &format!("churn: {} events, 64 producers", ch.events),
        format!(
            "{:.0} ev/s ({:.1}/commit)",
            ch.events as f64 / ch.secs,
            ch.per_commit
        ),
        "-".into(),
    );
    row(
        "churn: file / live before compact",
        format!(
            "{:.2} / {:.2} MiB",
            ch.file_before as f64 / MIB,
            ch.live_before as f64 / MIB
        ),
        "-".into(),
    );
    row(
        "churn: file / live after compact",
        format!(
            "{:.2} / {:.2} MiB",
            ch.file_after as f64 / MIB,
            ch.live_after as f64 / MIB
        ),
        format!("({} events kept)", ch.kept_events),
    );
    // Targets: each ratio against the raw figure of the same mode, same run.
    let target = |m: &ModeFigures, which: u8| -> String {
        let (r, ok) = match which {
            0 => {
                let r = m.gc[2].1 / m.raw100;
                (r, r >= 0.5)
            }
            1 => {
                let r = m.acc.p50.as_secs_f64() / m.raw1.p50.as_secs_f64();
                (r, r <= 1.3)
            }
            _ => {
                let r = m.big.p50.as_secs_f64() / m.small.p50.as_secs_f64();
                (r, r <= 2.0)
            }
        };
        format!("{r:.2}x {}", verdict(ok))
    };
    let (a, b) = both(&|m| target(m, 0));
    row("TARGET group commit 64 / raw 100-batch >= 0.5x", a, b);
    let (a, b) = both(&|m| target(m, 1));
    row("TARGET accept p50 / raw commit p50 <= 1.3x", a, b);
    let (a, b) = both(&|m| target(m, 2));
    row("TARGET 500 KB render p50 / small p50 <= 2x", a, b);
    let margin = ch.file_after as f64 - ch.live_after as f64;
    row(
        "TARGET churn+compact: file - live <= 8 MiB",
        format!("{:.2} MiB {}", margin / MIB, verdict(margin <= 8.0 * MIB)),
        "-".into(),
    );
    let (x, y) = (&figs[0], &figs[1]);
    row(
        "mode cost: raw commit p50 (vs ExclusiveWriter)",
        "1.00x".into(),
        format!(
            "{:.2}x",
            y.raw1.p50.as_secs_f64() / x.raw1.p50.as_secs_f64()
        ),
    );
    row(
        "mode cost: accept p50 (vs ExclusiveWriter)",
        "1.00x".into(),
        format!("{:.2}x", y.acc.p50.as_secs_f64() / x.acc.p50.as_secs_f64()),
    );
    row(
        "mode cost: 64-producer throughput (vs Exclusive)",
        "1.00x".into(),
        format!("{:.2}x", y.gc[2].1 / x.gc[2].1),
    );
    row(
        "total run time",
        format!("{:.0} s", started.elapsed().as_secs_f64()),
        String::new(),
    );
    print!("{out}");
}
