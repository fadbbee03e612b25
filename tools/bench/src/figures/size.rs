//! Figure 5, size: file bytes against live bytes (`Journal::stats`) after 1,000,000 events of
//! churn with the controller's trimming and compaction (`journal/DESIGN.md`, "Trimming").
//!
//! 64 producers, one pod each: every batch acks the pod's previous status item
//! (compare-and-delete) and marks its previous event dispatched, like a worker and the
//! dispatcher, then accepts a `ConfigAppliedToPod` event and the status item derived from it, with
//! its render (a new one every 50 events; deduplicated while referenced). The writer trims every
//! 64 commits and compacts when free space dominates (default options); each pod's last item stays
//! pending (live data). Then one `trim()` and `compact()` until it reclaims nothing.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use haptic_journal::*;

use super::Ctx;
use crate::report::{Row, Target, Unit};

const PRODUCERS: u64 = 64;

fn producer(j: &Journal, p: u64, per: u64) -> Result<()> {
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
        if let Some((seq, id)) = prev {
            b.ack(Queue::StatusPending, key.clone(), id);
            b.mark_dispatched(seq);
        }
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
        b.enqueue(
            WorkItem::Status(PodStatusItem {
                runtime_config: rc.clone(),
                pod: pod.clone(),
                change: PodStatusChange::Applied {
                    checksum: render,
                    is_drift_check: false,
                    sync: SyncMetadata::default(),
                    observed_at: UnixMillis::now(),
                },
            }),
            Origin::Batch(e),
        );
        let a = j.accept(b)?;
        let seq = *a.seqs().first().context("no seq")?;
        let id = *a.work_ids().first().context("no work id")?;
        prev = Some((seq, id));
    }
    Ok(())
}

/// Measures figure 5.
pub fn run(ctx: &Ctx) -> Result<Vec<Row>> {
    let dir = ctx.subdir("size")?;
    let path = dir.join("journal.redb");
    let total: u64 = ctx.pick(100_000, 1_000_000);
    let per = total / PRODUCERS;
    let j = Arc::new(Journal::open(
        &JournalOptions::new(&path).verify_on_open(false),
    )?);
    let before = j.commit_stats();
    let t = Instant::now();
    let threads: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let j = j.clone();
            std::thread::spawn(move || producer(&j, p, per))
        })
        .collect();
    for th in threads {
        th.join()
            .map_err(|_| anyhow::anyhow!("producer panicked"))??;
    }
    let secs = t.elapsed().as_secs_f64();
    let after = j.commit_stats();
    let events = after.events - before.events;
    j.trim()?;
    let s = j.stats()?;
    let (file_before, live_before) = (s.file_bytes.unwrap_or(0), s.live_bytes());
    for _ in 0..8 {
        if !j.compact()? {
            break;
        }
    }
    let s = j.stats()?;
    let (file_after, live_after) = (s.file_bytes.unwrap_or(0), s.live_bytes());
    let kept = s
        .tables
        .iter()
        .find(|t| t.name == "events")
        .map_or(0, |t| t.entries);
    let rep = j.verify()?;
    anyhow::ensure!(rep.is_clean(), "verify: {:?}", rep.problems.first());
    let n = if total >= 1_000_000 {
        format!("{},000,000", total / 1_000_000)
    } else {
        format!("{},000", total / 1000)
    };
    Ok(vec![
        Row::new(
            format!("5.1 file after {n} events of churn, trim + compact"),
            file_after as f64,
            Unit::Bytes,
            "redb page granularity (4 KiB pages, 15 tables)",
        )
        .detail(format!("{kept} events kept"))
        .vs("live bytes (keys + values)", live_after as f64)
        .target(Target::RatioAtMost(2.0)),
        Row::new(
            format!("5.1 file after {n} events of churn, before the final compact"),
            file_before as f64,
            Unit::Bytes,
            "auto-compaction threshold (2x + 8 MiB)",
        )
        .vs("live bytes (keys + values)", live_before as f64),
        Row::new(
            "5.1 churn throughput (64 producers: ack + mark + event + item + render)",
            events as f64 / secs,
            Unit::EventsPerSec,
            "fsync + writer thread CPU",
        )
        .detail(format!(
            "{:.1} ev/commit",
            events as f64 / (after.commits - before.commits).max(1) as f64
        )),
    ])
}
