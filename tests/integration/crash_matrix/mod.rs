//! The crash matrix (issue 13): every crash point of [`haptic_journal::failpoints::ALL`] and a
//! fixed set of seeded random SIGKILLs, each against the real binary on its own fleet of the
//! test kit (3 sandbox HAProxy pods behind Dataplane endpoints, the Kubernetes API emulator).
//!
//! ```text
//!  for each point (at most PARALLEL at a time, each its own fleet):
//!    haptic run, CRASH_AT=<point>  ── feed the shortest corpus stream reaching it ──► SIGABRT
//!    the journal at the moment of death (a copy, the original untouched) ─► the point's position
//!    haptic run (same journal, unarmed) ─► quiescence ─► checks 1-7 ─► SIGTERM ─► journal
//!    +churn: a pod killed and one added before the last render (or while dead: +churn(down))
//!    +leader change: a successor replica (own journal) follows, takes over at the death and
//!      converges; the crashed one restarts, the successor stops, the first leads again
//!  for each seed: the stream with a churn, SIGKILL while a deployment / publication / status
//!    round runs, restart, the same checks
//!  matrix: row x result x time to converge; last line
//!    `crash matrix: P/T failpoints passed, K/R random kills passed`
//! ```
//!
//! Checks after the restart (the issue's numbering): (1) the last render fed before the crash
//! (every earlier one is superseded by it) is deployed to every live pod and published; (2) one
//! `ConfigPublished` per checksum per HAProxyCfg (per journal), and no pod receives a
//! configuration or a file it already runs: per pod, successful raw pushes and storage writes
//! (sandbox request logs, every process) never exceed what an uninterrupted run of the renders
//! it could receive makes; (3) the status has exactly one entry per live pod, naming the render
//! with a non-zero `deployedAt`, and none for a pod that is gone; (4) every live pod answers the
//! render's HTTP checks; (5) quiescent (nothing queued, every event dispatched: the live journal
//! read-only, the restarted controller runs `--journal-concurrency single-writer` for it), then
//! after a clean stop the journal verifies and nothing is pending (what `haptic-journalctl
//! verify` and `pending` call); (6) the stopped journal's file is within the writer's
//! auto-compaction bound (twice the pages redb holds plus the slack); (7) all of it within
//! [`Intervals::takeover`] + [`Intervals::follow_up`] (+ `--publish-interval` where a row
//! throttles) of the restart. Drift checks are off (`--drift-prevention-interval 10m`), so
//! drift repairs nothing.
//!
//! `HAPTIC_SOAK=1` runs more random seeds. Needs the `failpoints` feature (`--all-features`).

#![cfg(feature = "failpoints")]

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use haptic_journal::{Checksum, Event, Journal, JournalOptions, Queue, Seq};
use haptic_testkit::render::{checksum, corpus, feed, rejected};
use haptic_testkit::{
    Controller, ControllerOpts, Fleet, FleetConfig, Intervals, Published, RequestRecord,
};

mod cases;
mod checks;
mod drive;
mod runner;
mod world;

use cases::*;
use checks::*;
use drive::*;
use runner::*;
use world::*;

pub(crate) use checks::{journal_after_stop, pod_writes_within, write_bounds};

const BIN: &str = env!("CARGO_BIN_EXE_haptic");
const CONFIG: &str = "crash";
const MAIN: &str = "crash-haproxycfg";
const INVALID: &str = "crash-haproxycfg-invalid";
const PODS: usize = 3;
/// The identity of the armed controller, and of the second replica of the rows that change
/// leaders.
const IDENTITY: &str = "solo";
const SUCCESSOR: &str = "successor";
/// The controller's Lease (its `--lease-name` default).
const LEASE: &str = "haptic-leader";
/// Fleets at a time (2 cores: each fleet runs 3 HAProxy pods, the emulator and a controller).
const PARALLEL: usize = 2;
/// Random-kill seeds of the normal run; `HAPTIC_SOAK=1` runs [`SOAK_SEEDS`].
const SEEDS: &[u64] = &[7, 19, 42];
const SOAK_SEEDS: &[u64] = &[7, 19, 42, 101, 202, 303, 404, 505, 606, 707, 808, 909];
/// Points no stream of the binary reaches; their own crate tests them.
const ELSEWHERE: &[(&str, &str)] = &[(
    "migrations::after_test_v5_half_rewritten",
    "haptic-migrations' test-only v4->v5 step (migrations/tests)",
)];

/// The intervals of every controller here (the real flags); every bound derives from them.
fn intervals() -> Intervals {
    Intervals {
        deployment_timeout: Duration::from_secs(10),
        drain_timeout: Duration::from_secs(5),
        ..Intervals::default()
    }
}

/// One row of the matrix.
#[derive(Debug, Clone)]
struct Row {
    name: String,
    /// The failpoint the row arms (rows of random kills: their name).
    point: String,
    result: Result<(), String>,
    converge: Option<Duration>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn crash_matrix() {
    let cases = cases();
    // Every listed point is driven here or named as tested elsewhere.
    let driven: Vec<String> = cases.iter().map(|c| point_of(&c.spec).to_owned()).collect();
    let missing: Vec<&&str> = haptic_journal::failpoints::ALL
        .iter()
        .filter(|p| !driven.iter().any(|d| d == *p) && !ELSEWHERE.iter().any(|(e, _)| e == *p))
        .collect();
    assert!(missing.is_empty(), "points no case drives: {missing:?}");
    // A debugging aid: `CRASH_MATRIX_ONLY=<substring>` runs the matching rows only (the summary
    // then counts those).
    let only = std::env::var("CRASH_MATRIX_ONLY").ok();
    let keep = |name: &str| only.as_deref().is_none_or(|o| name.contains(o));
    let cases: Vec<Case> = cases.into_iter().filter(|c| keep(&c.name())).collect();
    let started = Instant::now();
    let jobs = cases
        .into_iter()
        .map(|c| ((c.name(), point_of(&c.spec).to_owned()), run_case(c)))
        .collect();
    let rows = run_all(jobs).await;
    let seeds = if std::env::var_os("HAPTIC_SOAK").is_some() {
        SOAK_SEEDS
    } else {
        SEEDS
    };
    let kills = run_all(
        seeds
            .iter()
            .filter(|s| keep(&format!("seed {s}")))
            .map(|s| ((format!("seed {s}"), format!("seed {s}")), run_kill(*s)))
            .collect(),
    )
    .await;
    print_rows("crash matrix: failpoint x result x time to converge", &rows);
    for (p, why) in ELSEWHERE {
        println!("  {p:<60} elsewhere: {why}");
    }
    print_rows("random kills:", &kills);
    // A point passes when every row arming it passes.
    let mut points: BTreeMap<&str, bool> = BTreeMap::new();
    for r in &rows {
        *points.entry(r.point.as_str()).or_insert(true) &= r.result.is_ok();
    }
    let passed = points.values().filter(|ok| **ok).count();
    let total = points.len();
    let rows_passed = rows.iter().filter(|r| r.result.is_ok()).count();
    let k = kills.iter().filter(|r| r.result.is_ok()).count();
    let worst = rows
        .iter()
        .chain(&kills)
        .filter_map(|r| r.converge)
        .max()
        .unwrap_or_default();
    println!(
        "worst convergence {:.1}s (bound {:.1}s), wall {:.0}s",
        worst.as_secs_f64(),
        (intervals().takeover() + intervals().follow_up()).as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    println!("crash runs: {rows_passed}/{} passed", rows.len());
    println!(
        "crash matrix: {passed}/{total} failpoints passed, {k}/{} random kills passed",
        kills.len()
    );
    assert!(
        rows_passed == rows.len() && k == kills.len(),
        "crash matrix failures (see the matrix above)"
    );
}

/// The suspected flake "journal ... is in use by another process" on a restart right after a
/// SIGKILL (soak only, `HAPTIC_SOAK=1`): 60 kills at seeded moments 0-900 ms into a run (start-up,
/// validation with its `haproxy -c` children, deployment), each followed at once by a restart;
/// every restart must open the journal. Nothing can hold redb's locks (OFD range locks plus the
/// legacy flock, on one open file description whose fds are all `O_CLOEXEC`) once the killed
/// process is reaped.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_then_restart_at_once_always_opens_the_journal() {
    if std::env::var_os("HAPTIC_SOAK").is_none() {
        eprintln!("skipped: set HAPTIC_SOAK=1");
        return;
    }
    let mut w = World::start(&[], None, None, false).await;
    w.feed("01-basic");
    let mut x = 12345u64;
    let renders = ["02-maps", "03-maps-changed", "04-errors", "05-tls"];
    let mut refused = Vec::new();
    for n in 0..60 {
        w.feed(renders[n % renders.len()]);
        let mut ctl = w.fleet.controller(w.opts.clone());
        let d = Duration::from_millis(mix(&mut x) % 900);
        tokio::time::sleep(d).await;
        ctl.kill();
        if ctl.log_text().contains("in use by another process") {
            refused.push(format!("run {n} (+{d:?}):\n{}", ctl.log_tail(5)));
        }
    }
    w.fleet.shutdown().await;
    assert!(refused.is_empty(), "refused opens: {refused:#?}");
}
