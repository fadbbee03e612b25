//! Figure 4, recovery: from process start to ready, the journal's part (open with
//! `verify_on_open`, `pending()`, every queue read, the undispatched events read back for replay),
//! with 10,000 pending items; and (`--large`) a ~1 GiB journal reopened after the writer process
//! was killed with SIGKILL during a write burst (redb's repair, then verify).
//!
//! The controller's own start-up (`haptic::runtime::open`, the components' `Recovered` inputs)
//! adds its folds over these reads; it is not measured here. Before each timed open the file's
//! pages are dropped from the page cache (`posix_fadvise(DONTNEED)`), so the open reads the disk
//! as after a pod restart on a fresh node would.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use haptic_journal::*;

use super::Ctx;
use crate::report::{Row, Target, Unit};
use crate::stats::median;

/// Pending items in the 4.1 journal.
const ITEMS: u64 = 10_000;

fn runtime() -> RuntimeConfigRef {
    RuntimeConfigRef {
        namespace: Namespace::new("haptic"),
        name: ObjectName::new("demo-haproxycfg"),
    }
}

fn identity() -> ConfigIdentity {
    ConfigIdentity {
        name: ObjectName::new("demo"),
        namespace: Namespace::new("haptic"),
        source_uid: None,
        source_generation: None,
    }
}

/// A deterministic pseudo-random content of `len` bytes (xorshift), distinct per `seed`.
pub fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// The item for index `i`: 40 % status (one pod each), 30 % publish, 20 % verdict, 10 %
/// deploy-driven publish, all referencing `render`.
fn item(i: u64, render: Checksum, seq_hint: Seq) -> WorkItem {
    let corr = Correlation::new(format!("item-{i}"));
    match i % 10 {
        0..=3 => WorkItem::Status(PodStatusItem {
            runtime_config: runtime(),
            pod: PodRef {
                namespace: Namespace::new("haptic"),
                name: ObjectName::new(format!("haproxy-{i}")),
            },
            change: PodStatusChange::Applied {
                checksum: render,
                is_drift_check: false,
                sync: SyncMetadata::default(),
                observed_at: UnixMillis::now(),
            },
        }),
        4..=6 => WorkItem::Publish(PublishItem {
            identity: identity(),
            render,
            render_seq: seq_hint,
            rendered_at: UnixMillis::now(),
            validated_at: UnixMillis::now(),
            correlation: corr,
        }),
        7 | 8 => WorkItem::Verdict(VerdictItem {
            identity: identity(),
            render,
            render_seq: seq_hint,
            passed: true,
            pinned: false,
            messages: vec!["ok".into()],
            correlation: corr,
        }),
        _ => WorkItem::PublishDeployed(DeployedPublishItem {
            runtime_config: runtime(),
            render,
            render_seq: seq_hint,
            deployment: DeploymentId::new(format!("d-{i}")),
            deployed_at: UnixMillis::now(),
            correlation: corr,
        }),
    }
}

/// A journal with 20 renders (64 KiB config + a map file each) and [`ITEMS`] pending items, each
/// with its undispatched origin event.
fn build_pending(path: &Path) -> Result<()> {
    let j = Journal::open(&JournalOptions::new(path).verify_on_open(false))?;
    let mut renders = Vec::new();
    for r in 0..20u64 {
        let mut b = Batch::new();
        let render = b.put_render(
            noise(r, 64 * 1024),
            vec![(AuxKind::Map, "maps/hosts.map".into(), noise(1000 + r, 4096))],
        );
        b.hold_render(&render);
        j.accept(b)?;
        renders.push(render.checksum);
    }
    for chunk in 0..ITEMS / 100 {
        let mut b = Batch::new();
        for k in 0..100 {
            let i = chunk * 100 + k;
            let render = renders[(i % 20) as usize];
            let e = b.event(Event::TemplateRendered {
                correlation: Correlation::new(format!("ev-{i}")),
                render,
                config_bytes: 64 * 1024,
                auxiliary_file_count: 1,
                duration_ms: 1,
                trigger_reason: "bench".into(),
                coalescible: true,
            });
            b.enqueue(item(i, render, Seq(i + 1)), Origin::Batch(e));
        }
        j.accept(b)?;
    }
    let p = j.pending()?;
    let items: u64 = p.queues.iter().map(|q| q.count).sum();
    anyhow::ensure!(
        items == ITEMS,
        "built {items} pending items, wanted {ITEMS}"
    );
    Ok(())
}

/// Drops the file's pages from the page cache (after syncing them).
fn evict(path: &Path) -> Result<()> {
    let f = std::fs::File::open(path)?;
    f.sync_all()?;
    nix::fcntl::posix_fadvise(
        &f,
        0,
        0,
        nix::fcntl::PosixFadviseAdvice::POSIX_FADV_DONTNEED,
    )
    .context("posix_fadvise")?;
    Ok(())
}

/// What a start-up reads: every queue, and the events after `dispatched_through`.
fn read_for_start(j: &Journal) -> Result<(u64, u64)> {
    let p = j.pending()?;
    let mut items = 0u64;
    for q in Queue::ALL {
        items += j.queue(*q)?.len() as u64;
    }
    let events = j.events(p.dispatched_through.next(), usize::MAX)?.len() as u64;
    Ok((items, events))
}

/// Times one start: (total, of which open with redb's repair, of which verify).
fn timed_start(path: &Path) -> Result<(Duration, Duration, Duration, u64)> {
    evict(path)?;
    let t = Instant::now();
    let j = Journal::open(&JournalOptions::new(path).verify_on_open(false))?;
    let open = t.elapsed();
    let rep = j.verify()?;
    let verify = t.elapsed() - open;
    anyhow::ensure!(rep.is_clean(), "verify found {:?}", rep.problems.first());
    let (items, _) = read_for_start(&j)?;
    Ok((t.elapsed(), open, verify, items))
}

/// Size of each render the burst writes.
const BURST_BLOB: u64 = 1024 * 1024;

/// The `__burst` child: accepts 1 MiB renders (live, each held by a pending publish item) until
/// killed, printing each acknowledged `Seq` on its own line after `accept` returned (durable).
/// Stops by itself past `max_bytes` of renders.
pub fn burst_child(path: &Path, max_bytes: u64) -> Result<()> {
    use std::io::Write;
    let j = Journal::open(&JournalOptions::new(path).verify_on_open(false))?;
    let mut out = std::io::stdout().lock();
    for i in 0u64.. {
        let mut b = Batch::new();
        let render = b.put_render(noise(i, BURST_BLOB as usize), vec![]);
        let e = b.event(Event::TemplateRendered {
            correlation: Correlation::new(format!("burst-{i}")),
            render: render.checksum,
            config_bytes: 1024 * 1024,
            auxiliary_file_count: 0,
            duration_ms: 1,
            trigger_reason: "bench".into(),
            coalescible: true,
        });
        b.enqueue(item(4, render.checksum, Seq(i + 1)), Origin::Batch(e));
        let a = j.accept(b)?;
        if let Some(s) = a.seqs().first() {
            writeln!(out, "{}", s.0)?;
            out.flush()?;
        }
        if (i + 1) * BURST_BLOB > max_bytes {
            break;
        }
    }
    Ok(())
}

/// Runs the burst child until it has acknowledged `bytes` of renders (live data), then SIGKILLs
/// it mid-burst; returns the acknowledged `Seq`s.
fn burst_and_kill(ctx: &Ctx, path: &Path, bytes: u64) -> Result<Vec<u64>> {
    let mut child = Command::new(&ctx.exe)
        .arg("__burst")
        .arg(path)
        .arg((bytes * 2).to_string())
        .stdout(Stdio::piped())
        .spawn()
        .context("start the burst child")?;
    let stdout = child.stdout.take().context("child stdout")?;
    let mut acked = Vec::new();
    let mut killed = false;
    for line in BufReader::new(stdout).lines() {
        acked.push(line?.trim().parse::<u64>()?);
        if !killed && acked.len() as u64 * BURST_BLOB >= bytes {
            // The child is in the middle of its next commit: kill -9 now.
            child.kill()?;
            killed = true;
        }
    }
    let status = child.wait()?;
    anyhow::ensure!(
        killed && !status.success(),
        "the burst child was not killed"
    );
    Ok(acked)
}

fn large(ctx: &Ctx, rows: &mut Vec<Row>) -> Result<()> {
    let dir: PathBuf = ctx.subdir("recovery-large")?;
    let path = dir.join("journal.redb");
    let bytes = 1024 * 1024 * 1024;
    let t = Instant::now();
    let acked = burst_and_kill(ctx, &path, bytes)?;
    let built = t.elapsed();
    let size = std::fs::metadata(&path)?.len();
    let (total, open, verify, _) = timed_start(&path)?;
    let live = Journal::open(&JournalOptions::new(&path).verify_on_open(false))?
        .stats()?
        .live_bytes();
    let j = Journal::open(&JournalOptions::new(&path).verify_on_open(false))?;
    let found = acked
        .iter()
        .filter(|s| matches!(j.event(Seq(**s)), Ok(Some(_))))
        .count();
    rows.push(
        Row::new(
            format!(
                "4.2 reopen after kill -9 during a write burst, {:.2} GiB journal ({:.2} GiB live): open (redb repair) + verify + queues",
                size as f64 / (1024.0 * 1024.0 * 1024.0),
                live as f64 / (1024.0 * 1024.0 * 1024.0)
            ),
            total.as_secs_f64(),
            Unit::S,
            "disk read + SHA-256 of every blob (CPU)",
        )
        .detail(format!(
            "repair {:.2} s, verify {:.2} s; built in {:.0} s",
            open.as_secs_f64(),
            verify.as_secs_f64(),
            built.as_secs_f64()
        ))
        .target(Target::ValueBelow(60.0)),
    );
    rows.push(
        Row::new(
            "4.2 acknowledged events found after the kill",
            found as f64,
            Unit::Count,
            "durability (J1)",
        )
        .vs("acknowledged before the kill", acked.len() as f64)
        .target(Target::RatioAtLeast(1.0)),
    );
    Ok(())
}

/// Measures figure 4.
pub fn run(ctx: &Ctx) -> Result<Vec<Row>> {
    let dir = ctx.subdir("recovery")?;
    let path = dir.join("journal.redb");
    build_pending(&path)?;
    let file = std::fs::metadata(&path)?.len();
    let (mut totals, mut opens, mut verifies) = (vec![], vec![], vec![]);
    for _ in 0..ctx.pick(3, 5) {
        let (total, open, verify, items) = timed_start(&path)?;
        anyhow::ensure!(items == ITEMS, "read {items} items");
        totals.push(total.as_secs_f64() * 1000.0);
        opens.push(open.as_secs_f64() * 1000.0);
        verifies.push(verify.as_secs_f64() * 1000.0);
    }
    let mut rows = vec![
        Row::new(
            "4.1 start to ready, journal side, 10,000 pending items: open + verify + pending + queues + undispatched events",
            median(totals),
            Unit::Ms,
            "disk read + verify (CPU)",
        )
        .detail(format!(
            "open {:.1} ms, verify {:.1} ms; {:.1} MiB file, cold cache",
            median(opens),
            median(verifies),
            file as f64 / (1024.0 * 1024.0)
        ))
        .target(Target::ValueBelow(1000.0)),
    ];
    if ctx.large {
        large(ctx, &mut rows)?;
    }
    Ok(rows)
}
