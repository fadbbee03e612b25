//! Figure 3, end to end in the sandbox, and figure 9, the controller's memory.
//!
//! ```text
//!  kit fleet: Kubernetes API emulator + 3 real HAProxy pods (reload batching 100 ms)
//!  controller: this binary re-entered as `haptic run` (hidden `__controller`), render-dir
//!              source, the kit's intervals (its text log: timestamps in µs)
//!  N renders of the corpus stream (20 quick, 200 full), each made unique by a comment line,
//!  written one at a time (the next once the last is everywhere):
//!    written (bench clock) ─► "render read from directory" ─► "render valid"
//!      ─► "deployment completed" (render) ─► HAProxyCfg status: 3 pods on it (bench poll, 25 ms)
//!  stage times from the controller's log lines (same machine, same clock)
//!  journal share = Δ haptic_journal_commit_duration_seconds_sum / Σ end-to-end latency
//!  memory: VmHWM (peak) and VmRSS after 5 s idle from /proc/<pid>/status
//! ```
//!
//! Floors printed beside: the directory source's poll (200 ms) + debounce (500 ms); `haproxy -c`
//! of the same render, timed here; the sandbox's reload batching (100 ms) plus the
//! `--min-deployment-interval` (300 ms).

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use haptic_journal::Checksum;
use haptic_testkit::render::{corpus, rejected, stream, write_render};
use haptic_testkit::{ControllerOpts, Fleet, FleetConfig, Intervals, Published};

use super::Ctx;
use crate::report::{Row, Target, Unit};
use crate::stats::{Lat, lat};

/// `--config-name`.
const CONFIG: &str = "bench";
/// The HAProxyCfg it publishes.
const MAIN: &str = "bench-haproxycfg";
/// HAProxy pods.
const PODS: usize = 3;
/// How often the bench looks at the HAProxyCfg.
const POLL: Duration = Duration::from_millis(25);

/// Runs figures 3 and 9.
///
/// # Errors
/// The sandbox or the controller does not start, a render does not converge within its bound.
pub fn run(ctx: &Ctx) -> Result<Vec<Row>> {
    super::on_runtime(measure(ctx))
}

/// One render's way through the controller (unix ms).
#[derive(Debug, Default, Clone, Copy)]
struct Trace {
    written: i64,
    read: Option<i64>,
    valid: Option<i64>,
    deployed: Option<i64>,
    status: i64,
}

fn now_ms() -> i64 {
    jiff::Timestamp::now().as_millisecond()
}

async fn measure(ctx: &Ctx) -> Result<Vec<Row>> {
    let n = ctx.pick(20, 200);
    let dir = ctx.subdir("e2e")?;
    let fleet = Fleet::try_start(FleetConfig::pods(PODS).without_spec_check())
        .await
        .context("the sandbox (3 HAProxy pods) and the API emulator")?;
    let render_dir = dir.join("render");
    std::fs::create_dir_all(&render_dir)?;
    let mut opts = ControllerOpts::dir(&fleet, &ctx.exe, "bench", CONFIG, &render_dir);
    opts.pre_args = vec![crate::CONTROLLER_ARG.into()];
    let intervals: Intervals = opts.intervals;
    let mut ctl = fleet.controller(opts);
    let pid = ctl.pid().as_raw();
    let metrics = ctl.metrics_addr().await;
    let renders: Vec<String> = stream().into_iter().filter(|r| !rejected(r)).collect();
    let bound = intervals.converge() + Duration::from_secs(2);

    // Warm-up: the first render (every file new, the pods' first push) is not a sample.
    let first = unique(&renders[0], usize::MAX);
    converge(&fleet, &render_dir, &first, bound).await?;
    let journal_before = scrape(metrics, "haptic_journal_commit_duration_seconds_sum").await?;
    let started = Instant::now();
    let mut traces: Vec<(Checksum, Trace)> = Vec::with_capacity(n);
    for i in 0..n {
        let content = unique(&renders[(i + 1) % renders.len()], i);
        let (sum, written, status) = converge(&fleet, &render_dir, &content, bound).await?;
        traces.push((
            sum,
            Trace {
                written,
                status,
                ..Trace::default()
            },
        ));
    }
    let stream_wall = started.elapsed();
    let journal_after = scrape(metrics, "haptic_journal_commit_duration_seconds_sum").await?;
    let peak = proc_kib(pid, "VmHWM")?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let idle = proc_kib(pid, "VmRSS")?;
    let _ = ctl.stop(intervals.stop());
    let log = ctl.log_text();
    fleet.shutdown().await;

    stage_times(&log, &mut traces);
    let mut stages: [Vec<Duration>; 5] = Default::default();
    let mut e2e_total = 0.0;
    for (sum, t) in &traces {
        let (Some(read), Some(valid), Some(deployed)) = (t.read, t.valid, t.deployed) else {
            bail!("render {sum}: a stage is missing from the controller's log");
        };
        let ms = |a: i64, b: i64| Duration::from_millis(u64::try_from(b - a).unwrap_or(0));
        stages[0].push(ms(t.written, read));
        stages[1].push(ms(read, valid));
        stages[2].push(ms(valid, deployed));
        stages[3].push(ms(deployed, t.status));
        stages[4].push(ms(t.written, t.status));
        e2e_total += (t.status - t.written) as f64 / 1000.0;
    }
    let check = haproxy_check_floor("01-basic", &dir, ctx.pick(10, 30))?;
    let names = [
        (
            "3.1 written -> read (source detection + journal accept)",
            "poll 200 ms + debounce 500 ms (ours, fixed)".to_owned(),
            0.7,
        ),
        (
            "3.2 read -> valid (haproxy -c)",
            format!("haproxy -c of 01-basic (no files), p50 {:.0} ms", check.p50),
            check.p50 / 1000.0,
        ),
        (
            "3.3 valid -> deployed to 3 pods",
            "--min-deployment-interval 300 ms + reload batching 100 ms".to_owned(),
            0.4,
        ),
        (
            "3.4 deployed -> per-pod status published",
            "none (a status round; the bench polls every 25 ms)".to_owned(),
            0.0,
        ),
        (
            "3.5 written -> every pod on it, status published",
            "the floors above, summed".to_owned(),
            0.7 + check.p50 / 1000.0 + 0.4,
        ),
    ];
    let mut rows = Vec::new();
    for (i, (name, floor, floor_s)) in names.iter().enumerate() {
        let l: Lat = lat(stages[i].clone());
        let mut row = Row::new(format!("{name}: p50"), l.p50 / 1000.0, Unit::S, limit(i))
            .detail(format!("p99 {:.2} s, {} renders", l.p99 / 1000.0, n));
        if *floor_s > 0.0 {
            row = row.vs(floor.clone(), *floor_s);
        } else {
            row = row.detail(format!("p99 {:.2} s, {n} renders; {floor}", l.p99 / 1000.0));
        }
        rows.push(row);
    }
    let journal_s = journal_after - journal_before;
    rows.push(
        Row::new(
            "3.6 share of end-to-end time spent in journal commits",
            journal_s,
            Unit::S,
            "fsync (commits on the path)",
        )
        .vs("end-to-end latency, summed over the renders", e2e_total)
        .target(Target::RatioAtMost(0.10))
        .detail(format!(
            "commit time summed (overlapping commits counted each); stream of {n} in {:.0} s",
            stream_wall.as_secs_f64()
        )),
    );
    rows.push(
        Row::new(
            "9.1 controller peak RSS during 3 (VmHWM)",
            peak as f64 * 1024.0,
            Unit::Bytes,
            "allocator + kube client caches",
        )
        .target(Target::ValueBelow(48.0 * 1024.0 * 1024.0)),
    );
    rows.push(Row::new(
        "9.2 controller idle RSS, 5 s after the stream",
        idle as f64 * 1024.0,
        Unit::Bytes,
        "allocator + kube client caches",
    ));
    Ok(rows)
}

fn limit(stage: usize) -> &'static str {
    match stage {
        0 => "the source's poll + debounce (ours)",
        1 => "haproxy -c (CPU)",
        2 => "min interval + Dataplane push + HAProxy reload",
        3 => "status write round trip",
        _ => "all of the above",
    }
}

/// The corpus render `name` with a comment line that makes it unique (`i`).
fn unique(name: &str, i: usize) -> haptic::core::render::RenderContent {
    let mut c = corpus(name);
    c.config
        .extend_from_slice(format!("# haptic-bench render {i} ({name})\n").as_bytes());
    c
}

/// Writes `content` and waits until the HAProxyCfg's spec is it and its status has every pod
/// on it; returns (checksum, written at, converged at) in unix ms.
async fn converge(
    fleet: &Fleet,
    render_dir: &Path,
    content: &haptic::core::render::RenderContent,
    bound: Duration,
) -> Result<(Checksum, i64, i64)> {
    let sum = content.checksum();
    let written = now_ms();
    write_render(content, render_dir).map_err(|e| anyhow::anyhow!("writing a render: {e:?}"))?;
    let t = Instant::now();
    loop {
        if let Some(cfg) = fleet.hpcfg(MAIN).await
            && Published::of(&cfg).on(&sum, PODS)
        {
            return Ok((sum, written, now_ms()));
        }
        if t.elapsed() > bound {
            bail!("render {sum} not on {PODS} pods within {bound:?} (intervals.converge())");
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Fills each trace's stages from the controller's log lines (tracing's text format:
/// `<RFC 3339 timestamp>  INFO <target>: <message> <field>=<value> ...`).
fn stage_times(log: &str, traces: &mut [(Checksum, Trace)]) {
    let index: HashMap<String, usize> = traces
        .iter()
        .enumerate()
        .map(|(i, (s, _))| (s.to_string(), i))
        .collect();
    const MARKERS: [&str; 3] = [
        "render read from directory",
        "render valid",
        "deployment completed",
    ];
    for line in log.lines() {
        let Some(marker) = MARKERS.iter().position(|m| line.contains(m)) else {
            continue;
        };
        let Some(render) = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("render="))
        else {
            continue;
        };
        let Some(&i) = index.get(render) else {
            continue;
        };
        let Some(at) = line
            .split_whitespace()
            .next()
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        else {
            continue;
        };
        let at = at.as_millisecond();
        let t = &mut traces[i].1;
        // The first occurrence of each marker counts.
        let slot = match marker {
            0 => &mut t.read,
            1 => &mut t.valid,
            _ => &mut t.deployed,
        };
        slot.get_or_insert(at);
    }
}

/// `haproxy -c -q` of the corpus render `name`'s configuration, `samples` times (a render
/// without files: the check needs no pod layout).
fn haproxy_check_floor(name: &str, dir: &Path, samples: usize) -> Result<Lat> {
    let d = dir.join("check");
    std::fs::create_dir_all(&d)?;
    let c = corpus(name);
    let cfg = d.join("haproxy.cfg");
    std::fs::write(&cfg, &c.config)?;
    let mut v = Vec::with_capacity(samples);
    for _ in 0..samples {
        let t = Instant::now();
        let out = std::process::Command::new("haproxy")
            .arg("-c")
            .arg("-q")
            .arg("-f")
            .arg(&cfg)
            .output()
            .context("haproxy -c")?;
        v.push(t.elapsed());
        let _ = out;
    }
    Ok(lat(v))
}

/// A field of `/proc/<pid>/status` in KiB.
pub(super) fn proc_kib(pid: i32, field: &str) -> Result<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    text.lines()
        .find_map(|l| {
            l.strip_prefix(field)
                .and_then(|r| r.trim_start_matches(':').trim().strip_suffix("kB"))
                .and_then(|n| n.trim().parse().ok())
        })
        .with_context(|| format!("{field} in /proc/{pid}/status"))
}

/// One sample value of the controller's metrics endpoint.
async fn scrape(addr: std::net::SocketAddr, name: &str) -> Result<f64> {
    let body = haptic_testkit::http()
        .get(format!("http://{addr}/metrics"))
        .send()
        .await?
        .text()
        .await?;
    body.lines()
        .find_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            (k == name || k.starts_with(&format!("{name}{{"))).then(|| v.parse().ok())?
        })
        .with_context(|| format!("{name} in /metrics"))
}
