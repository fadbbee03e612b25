//! Figure 5.L (`--large`), the journal's size with full pod history at 1,000 pods: a real redb
//! journal filled through the product's API as a controller that deployed a render stream to
//! 1,000 pods would fill it, beside the same journal without history, built in the same run.
//!
//! ```text
//!  210 deployments (one unique render each: the corpus stream cycled, a comment line making
//!  each render distinct, its files shared with the others' (J4)), each to 1,000 pods:
//!    batch of 100 pods = put_render (first batch of the deployment) + per pod
//!      PutEndpointApplied (what the pod runs)          <- both journals
//!      append_history(SyncRecord, retention 200/14 d)  <- the history journal only
//!  then, as the deployer and the writer do: trim_history (the hourly whole-table trim),
//!  trim() (collects the renders nothing names any more), compact() until it reclaims nothing
//!  value     = file of the history journal (200,000 records, 200 renders kept alive)
//!  reference = file of the journal without history (1,000 endpoint records, 1 render)
//! ```
//!
//! The records have the deployer's shape (`history_record` in the deployer): a Deployment's pod
//! name, a pod-IP endpoint URL, a fine-grained sync with a few server and backend changes and a
//! reload (a runtime-only sync every 10th deployment, no reload; the first a raw initial push),
//! one failed sync in 50 with a Dataplane error message, 10 minutes between deployments (35 h
//! in all: inside the 14-day `max_age`, so the 200-entry limit is what trims). Commits are
//! durable (`Durability::Immediate`), one per 100 pods, as the deployer's group commits reach.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use haptic_journal::*;
use haptic_testkit::render::{batch_files, corpus, rejected, stream};

use super::Ctx;
use crate::report::{Row, Target, Unit};

/// Pods of the fleet.
const PODS: usize = 1_000;
/// Pods per commit.
const PER_COMMIT: usize = 100;
/// Time between two deployments (ms).
const EVERY_MS: u64 = 10 * 60 * 1000;
/// The namespace of the pods.
const NS: &str = "haptic";

/// Runs figure 5.L (only with `--large`).
///
/// # Errors
/// A journal commit, trim, compaction or `verify` fails.
pub fn run(ctx: &Ctx) -> Result<Vec<Row>> {
    let retention = HistoryRetention::default();
    let keep = retention.max_entries() as usize;
    // Past the retention, so appends trim and renders are released, as in a long-lived fleet.
    let rounds = keep + ctx.pick(2, 10);
    let dir = ctx.subdir("history-size")?;
    let open = |name: &str| -> Result<Journal> {
        Ok(Journal::open(
            &JournalOptions::new(dir.join(name)).verify_on_open(false),
        )?)
    };
    let with = open("history.redb")?;
    let without = open("no-history.redb")?;
    let renders: Vec<String> = stream().into_iter().filter(|n| !rejected(n)).collect();
    let now = UnixMillis::now();
    let (mut t_with, mut t_without) = (Duration::ZERO, Duration::ZERO);
    for r in 0..rounds {
        let name = &renders[r % renders.len()];
        let mut content = corpus(name);
        content
            .config
            .extend_from_slice(format!("# haptic-bench render {r} ({name})\n").as_bytes());
        let files = batch_files(&content);
        let at = UnixMillis(now.0 - (rounds - r) as u64 * EVERY_MS);
        let checksum = Batch::new()
            .put_render(content.config.clone(), files.clone())
            .checksum;
        for (n, chunk) in (0..PODS).collect::<Vec<_>>().chunks(PER_COMMIT).enumerate() {
            // The same operations in both journals, interleaved batch by batch (the disk's
            // drift falls on both), the history appends in one only.
            for history in [true, false] {
                let mut b = Batch::new();
                let render = checksum;
                if n == 0 {
                    b.put_render(content.config.clone(), files.clone());
                }
                for &i in chunk {
                    let rec = record(r, i, render, at);
                    b.push(Op::PutEndpointApplied(EndpointApplied {
                        endpoint: rec.endpoint.clone(),
                        pod: rec.pod.clone(),
                        render,
                        config_version: Some(ConfigVersion(r as i64 + 2)),
                        reload_id: rec.reload_id.clone(),
                        applied_at: rec.ended_at,
                    }));
                    if history {
                        b.append_history(rec, retention);
                    }
                }
                let t = Instant::now();
                if history {
                    with.accept(b)?;
                    t_with += t.elapsed();
                } else {
                    without.accept(b)?;
                    t_without += t.elapsed();
                }
            }
        }
    }
    let records = (PODS * rounds) as f64;
    let appended_per_sec = records / t_with.as_secs_f64();
    let plain_per_sec = records / t_without.as_secs_f64();
    let mut done = Vec::new();
    for (j, history) in [(&with, true), (&without, false)] {
        // The deployer's hourly whole-table trim, then the writer's trim and compaction.
        let mut b = Batch::new();
        b.trim_history(retention, UnixMillis::now());
        j.accept(b)?;
        j.trim()?;
        for _ in 0..8 {
            if !j.compact()? {
                break;
            }
        }
        let rep = j.verify()?;
        anyhow::ensure!(rep.is_clean(), "verify: {:?}", rep.problems.first());
        let s = j.stats()?;
        let table = |name: &str| s.tables.iter().find(|t| t.name == name).cloned();
        let hist = table("pod_history").context("table pod_history")?;
        let blobs = table("blobs").context("table blobs")?;
        if history {
            anyhow::ensure!(
                hist.entries as usize == PODS * keep,
                "{} history records kept, {} expected",
                hist.entries,
                PODS * keep
            );
        }
        done.push((s.file_bytes.unwrap_or(0), s.live_bytes(), hist, blobs));
    }
    let (file_h, live_h, hist, blobs_h) = done.remove(0);
    let (file_0, live_0, _, blobs_0) = done.remove(0);
    let kept = hist.entries as f64;
    let pages = (hist.stored_bytes + hist.metadata_bytes + hist.fragmented_bytes) as f64;
    let growth = file_h as f64 - file_0 as f64;
    let renders_extra = blobs_h.live_bytes as f64 - blobs_0.live_bytes as f64;
    let mib = |b: f64| b / (1024.0 * 1024.0);
    Ok(vec![
        Row::new(
            format!(
                "5.L journal with full history, {} pods x {keep} syncs, trim + compact",
                Unit::Count.format(PODS as f64)
            ),
            file_h as f64,
            Unit::Bytes,
            "the records (one per sync, ~kept x pods) + the renders they keep alive",
        )
        .vs("the same journal without history", file_0 as f64)
        .detail(format!(
            "{} records in {:.1} MiB of table pages, {} render blobs ({:.1} MiB) against \
             {} without history; {rounds} deployments",
            Unit::Count.format(kept),
            mib(pages),
            blobs_h.entries,
            mib(blobs_h.live_bytes as f64),
            blobs_0.entries
        )),
        Row::new(
            "5.L full-history journal, file against live bytes",
            file_h as f64,
            Unit::Bytes,
            "redb page granularity (leaf slack + branch pages of the history table)",
        )
        .vs("live bytes (keys + values)", live_h as f64)
        .target(Target::RatioAtMost(2.0))
        .detail(format!(
            "without history: {:.2} MiB file, {:.2} MiB live",
            mib(file_0 as f64),
            mib(live_0 as f64)
        )),
        Row::new(
            "5.L bytes per history record (B; the table's pages / records)",
            pages / kept,
            Unit::Count,
            "the record's envelope (pod, endpoint URL, render checksum, counts, message) + key",
        )
        .vs(
            "key + value bytes per record",
            hist.live_bytes as f64 / kept,
        )
        .detail(format!(
            "pages: {:.1} MiB keys and values, {:.1} MiB branch pages and headers, {:.1} MiB \
             unused in leaves; the file's growth per record, renders excluded: {:.0} B",
            mib(hist.stored_bytes as f64),
            mib(hist.metadata_bytes as f64),
            mib(hist.fragmented_bytes as f64),
            (growth - renders_extra) / kept,
        )),
        Row::new(
            "5.L append at full history (100 pods per commit)",
            appended_per_sec,
            Unit::EventsPerSec,
            "the append's read of the pod's kept records (up to 200 decodes) + fsync",
        )
        .vs(
            "the same batches without the history appends",
            plain_per_sec,
        )
        .detail(format!(
            "records/s; {} records appended",
            Unit::Count.format(records)
        )),
    ])
}

/// The record of deployment `r` to pod `i`, ending around `at`.
fn record(r: usize, i: usize, render: Checksum, at: UnixMillis) -> SyncRecord {
    let runtime_only = r > 0 && r.is_multiple_of(10);
    let failed = (r + i).is_multiple_of(50);
    let mode = match (r, runtime_only) {
        (0, _) => SyncMode::RawInitial,
        (_, true) => SyncMode::Runtime,
        _ => SyncMode::FineGrained,
    };
    let changes = |n: usize| ChangeCounts {
        added: 0,
        removed: 0,
        modified: n as u32,
    };
    let servers = 1 + r % 5;
    let backends = usize::from(r.is_multiple_of(3) && !runtime_only);
    let reloaded = !runtime_only && !failed;
    let started_at = UnixMillis(at.0 + (i as u64 % PER_COMMIT as u64) * 7);
    SyncRecord {
        pod: PodRef {
            namespace: Namespace::new(NS),
            name: ObjectName::new(format!("haproxy-7d9f8c6b5-{i:05}")),
        },
        endpoint: EndpointUrl::new(format!("http://10.244.{}.{}:5555", i / 250, i % 250 + 2)),
        render,
        started_at,
        ended_at: UnixMillis(started_at.0 + 120 + (i as u64 * 31 + r as u64 * 17) % 400),
        mode: Some(mode),
        operations: OperationCounts {
            total_api_operations: (servers + backends + 2) as u32,
            servers: changes(servers),
            backends: changes(backends),
            ..OperationCounts::default()
        },
        reloaded,
        reload_id: reloaded.then(|| ReloadId::new(format!("2026-12-04-{}", r + 1))),
        result: if failed {
            SyncResult::Failed {
                message: format!(
                    "dataplane: POST /v3/services/haproxy/transactions/{r:08x}-5c1e: 503 \
                     Service Unavailable (reload in progress)"
                ),
            }
        } else {
            SyncResult::Applied
        },
        term: Term(3),
        deployment: DeploymentId::new(format!("haptic-0-{}", r + 1)),
    }
}
