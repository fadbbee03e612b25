//! Figures 7.L and 9.L (`--large`): figure 7's fan-out at 1,000 stand-ins, and the resident
//! memory of the process that deploys to them.
//!
//! ```text
//!  bench process                               child process (this binary, `__fanout`)
//!  sandbox: 1,000 stand-ins, 50 ms each  ◄─HTTP─  journal (real redb, fsync) + dispatcher +
//!  clears / reads the request logs                haptic::components::deployer::Deployer
//!  reads the child's /proc/<pid>/status           stdin: `deploy <cap> <n> <render>`
//!                                                 stdout: `ok <wall s> <commits>` | `error ..`
//! ```
//!
//! The deployer runs in a child process so that its memory is its own: the stand-ins (1,000
//! listeners, their request logs and files) live in the bench process. The child holds what a
//! controller's deploying side holds (the journal with its writer thread, the dispatcher, one
//! `Deployer` per cap with its Dataplane client and its per-pod caches, a two-worker tokio
//! runtime) and nothing of the controller's Kubernetes side (no kube client, watchers or
//! publisher: figure 9 measures the whole controller with 3 pods).
//!
//! 7.L: the same measurement as 7.1/7.2 (requests counted in the stand-ins' logs, the same
//! ideal) with 1,000 stand-ins, `max_parallel` 10 then no cap, one warm-up deployment per
//! deployer (it reads every pod's `/v3/info`) and 2 samples each. 9.L: the child's `VmHWM`
//! (peak) after the capped deployments and after all of them, against its `VmRSS` before its
//! first deployment (runtime, journal, dispatcher), and its `VmRSS` 5 s after the last one.

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use haptic::dataplane::BasicAuth;
use haptic::dispatch::Dispatcher;
use haptic_journal::{Endpoint, Journal, JournalOptions};
use haptic_testkit::Pod;
use tokio_util::sync::CancellationToken;

use super::Ctx;
use super::fanout::{self, MAX_PARALLEL, NS, Sample};
use crate::report::{Row, Unit};
use crate::stats::median;

/// Stand-in pods.
const PODS: usize = 1_000;
/// Open files the figure needs at most in one process: in the bench, a listener and an
/// accepted connection per stand-in (and the request-log reads); in the child, one connection
/// per pod; plus the journals, the sandbox's files and slack.
const FILES_NEEDED: u64 = 3 * PODS as u64 + 256;
/// `/proc/<pid>/stat` times are in clock ticks of 1/100 s (`USER_HZ`, 100 on Linux).
const TICKS_PER_SEC: f64 = 100.0;

/// Runs figures 7.L and 9.L (only with `--large`).
///
/// # Errors
/// The sandbox or the child does not start, a deployment fails on any pod, the child's
/// `/proc` status cannot be read.
pub fn run(ctx: &Ctx) -> Result<Vec<Row>> {
    super::on_runtime(measure(ctx))
}

async fn measure(ctx: &Ctx) -> Result<Vec<Row>> {
    let dir = ctx.subdir("fleet")?;
    let limit = open_files_limit()?;
    let t = Instant::now();
    let (sandbox, pods) = fanout::stand_ins(PODS, &dir).await?;
    let started = t.elapsed();
    // What the child needs: the endpoints and their credentials.
    let first = pods.first().context("no stand-in")?;
    let endpoints: Vec<Endpoint> = pods.iter().map(|p| p.endpoint(NS)).collect();
    let fleet = serde_json::json!({
        "username": first.username,
        "password": first.password,
        "endpoints": endpoints,
    });
    let spec = dir.join("fleet.json");
    std::fs::write(&spec, serde_json::to_vec(&fleet)?)?;
    let result = drive(ctx, &dir, &spec, &pods).await;
    sandbox.shutdown().await;
    let (rows_7, mem, journal_bytes) = result?;
    let mib = |kib: u64| kib as f64 * 1024.0;
    let mut rows = rows_7
        .into_iter()
        .map(|(cap, samples, cpu)| {
            let note = format!(
                "; CPU per deployment (median): deployer {:.1} s, stand-ins + bench {:.1} s; \
                 {:.0} journal commits; {} stand-ins started in {:.1} s; open files at most \
                 {} (bench) and {} (deployer), limit {limit}",
                cpu.deployer_s,
                cpu.stand_ins_s,
                cpu.commits,
                Unit::Count.format(PODS as f64),
                started.as_secs_f64(),
                mem.files_bench,
                mem.files_child
            );
            let limit = if cap == 0 {
                "the journal's commits, one at a time through its writer (2-3 per pod: \
                 pod-truth records before the writes, the result after), and CPU (deployer and \
                 stand-ins on 2 shared cores)"
            } else {
                "the stand-ins' 50 ms x requests / cap (by design)"
            };
            fanout::row("7.L", PODS, cap, &samples, &note, limit)
        })
        .collect::<Vec<_>>();
    let per_pod = (mem.peak_kib.saturating_sub(mem.baseline_kib)) as f64 / PODS as f64;
    rows.push(
        Row::new(
            "9.L deployer process peak RSS (VmHWM), deploying to 1,000 stand-ins, capped then not",
            mib(mem.peak_kib),
            Unit::Bytes,
            "per-pod state kept (caches, one pooled connection per pod and client) + no cap: \
             1,000 syncs in flight at once",
        )
        .vs(
            "the same process before its first deployment",
            mib(mem.baseline_kib),
        )
        .detail(format!(
            "{:.1} MiB after the capped deployments; {per_pod:.0} KiB per pod above the \
             baseline; journal, dispatcher, Deployer, 2 tokio workers; no Kubernetes side",
            mib(mem.capped_peak_kib) / (1024.0 * 1024.0)
        )),
    );
    rows.push(
        Row::new(
            "9.L deployer process RSS 5 s after the last deployment (VmRSS)",
            mib(mem.idle_kib),
            Unit::Bytes,
            "freed memory not returned to the OS (the allocator) + the per-pod state kept",
        )
        .vs(
            "the same process before its first deployment",
            mib(mem.baseline_kib),
        )
        .detail(format!(
            "its journal {:.1} MiB after {} deployments (history of every sync)",
            journal_bytes as f64 / (1024.0 * 1024.0),
            mem.deployments
        )),
    );
    Ok(rows)
}

/// The child's memory at the points the figures name (KiB), and the open files seen.
struct Memory {
    baseline_kib: u64,
    capped_peak_kib: u64,
    peak_kib: u64,
    idle_kib: u64,
    deployments: usize,
    /// The most open files of the bench process after a deployment.
    files_bench: usize,
    /// The most open files of the child after a deployment.
    files_child: usize,
}

/// CPU time and commits per sampled deployment (medians).
struct Cpu {
    /// The child's user + system time (s).
    deployer_s: f64,
    /// The bench process's (the stand-ins and the log reads) user + system time (s).
    stand_ins_s: f64,
    /// The child's journal commits.
    commits: f64,
}

/// Per cap: its samples and their CPU.
type FanoutSamples = Vec<(usize, Vec<Sample>, Cpu)>;

/// The soft limit of open files, raised to the hard one (`setrlimit`, nix's safe wrapper) when
/// it is below [`FILES_NEEDED`]; the child inherits it.
///
/// # Errors
/// The hard limit is below [`FILES_NEEDED`], or the limit cannot be read or raised.
fn open_files_limit() -> Result<u64> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).context("the open files limit")?;
    if soft >= FILES_NEEDED {
        return Ok(soft);
    }
    if hard < FILES_NEEDED {
        bail!(
            "figure 7.L needs {FILES_NEEDED} open files ({PODS} stand-ins: a listener and a \
             connection each, and the deployer's connection to each) and the hard limit is \
             {hard}: raise it (ulimit -Hn as root, LimitNOFILE in a unit)"
        );
    }
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard).context("raising the open files limit")?;
    let (soft, _) = getrlimit(Resource::RLIMIT_NOFILE).context("the open files limit")?;
    anyhow::ensure!(
        soft >= FILES_NEEDED,
        "the open files limit is {soft} after raising it; figure 7.L needs {FILES_NEEDED}"
    );
    eprintln!("haptic-bench: open files limit raised to {soft} for 7.L");
    Ok(soft)
}

/// User + system CPU time of process `pid` (`"self"` for this one), seconds.
fn cpu_s(pid: &str) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name (which may hold spaces): state is the first; utime and
    // stime are fields 14 and 15 of the line.
    let rest = stat.rsplit_once(')').context("/proc stat")?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 =
        f.get(11).context("utime")?.parse::<u64>()? + f.get(12).context("stime")?.parse::<u64>()?;
    Ok(ticks as f64 / TICKS_PER_SEC)
}

/// Open files of process `pid` (`"self"` for this one).
fn open_files(pid: &str) -> Result<usize> {
    Ok(std::fs::read_dir(format!("/proc/{pid}/fd"))?.count())
}

/// Starts the child, runs the deployments through it, reads its memory; returns the samples,
/// the memory and the child's journal size.
async fn drive(
    ctx: &Ctx,
    dir: &Path,
    spec: &Path,
    pods: &[Pod],
) -> Result<(FanoutSamples, Memory, u64)> {
    let mut child = Command::new(&ctx.exe)
        .arg("__fanout")
        .arg(dir.join("deployer"))
        .arg(spec)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("start the deployer child")?;
    let pid = i32::try_from(child.id())?;
    let mut to = child.stdin.take().context("child stdin")?;
    let mut from = BufReader::new(child.stdout.take().context("child stdout")?);
    let mut answer = move || -> Result<String> {
        let mut line = String::new();
        from.read_line(&mut line)?;
        Ok(line.trim().to_owned())
    };
    let ready = answer()?;
    if ready != "ready" {
        bail!("the deployer child said {ready:?}, not ready");
    }
    let baseline_kib = super::e2e::proc_kib(pid, "VmRSS")?;
    let renders = fanout::renders();
    let per_cap = ctx.pick(1, 2);
    let (mut next, mut all, mut capped_peak_kib) = (0usize, Vec::new(), 0);
    let (mut files_bench, mut files_child) = (0, 0);
    let child_pid = pid.to_string();
    for cap in [MAX_PARALLEL, 0] {
        let mut samples = Vec::new();
        let (mut deployer_s, mut stand_ins_s, mut commits) = (vec![], vec![], vec![]);
        for round in 0..=per_cap {
            let name = &renders[next % renders.len()];
            next += 1;
            fanout::clear(pods).await?;
            let (c0, s0) = (cpu_s(&child_pid)?, cpu_s("self")?);
            writeln!(to, "deploy {cap} {next} {name}")?;
            to.flush()?;
            let line = tokio::task::block_in_place(&mut answer)?;
            let (c1, s1) = (cpu_s(&child_pid)?, cpu_s("self")?);
            files_bench = files_bench.max(open_files("self")?);
            files_child = files_child.max(open_files(&child_pid)?);
            let mut words = line.split(' ');
            let (wall, n_commits) = match (words.next(), words.next(), words.next()) {
                (Some("ok"), Some(w), Some(c)) => {
                    (Duration::from_secs_f64(w.parse()?), c.parse::<f64>()?)
                }
                _ => bail!("deployment {next} (cap {cap}) in the child: {line}"),
            };
            let s = fanout::count(pods, wall).await?;
            eprintln!(
                "haptic-bench: 7.L cap {cap} deployment {next}: {:.2} s, {} requests",
                wall.as_secs_f64(),
                s.requests
            );
            if round > 0 {
                samples.push(s);
                deployer_s.push(c1 - c0);
                stand_ins_s.push(s1 - s0);
                commits.push(n_commits);
            }
        }
        if cap != 0 {
            capped_peak_kib = super::e2e::proc_kib(pid, "VmHWM")?;
        }
        let cpu = Cpu {
            deployer_s: median(deployer_s),
            stand_ins_s: median(stand_ins_s),
            commits: median(commits),
        };
        all.push((cap, samples, cpu));
    }
    let peak_kib = super::e2e::proc_kib(pid, "VmHWM")?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let idle_kib = super::e2e::proc_kib(pid, "VmRSS")?;
    drop(to);
    let status = child.wait()?;
    anyhow::ensure!(status.success(), "the deployer child exited with {status}");
    let journal_bytes = std::fs::metadata(dir.join("deployer").join("j.redb"))?.len();
    Ok((
        all,
        Memory {
            baseline_kib,
            capped_peak_kib,
            peak_kib,
            idle_kib,
            deployments: next,
            files_bench,
            files_child,
        },
        journal_bytes,
    ))
}

/// The `__fanout` child: opens a journal in `dir` and its dispatcher, reads the fleet from
/// `spec`, says `ready`, then runs each `deploy <cap> <n> <render>` line of stdin as one
/// deployment (one `Deployer` per cap, kept), answering `ok <wall s> <journal commits>` or
/// `error <text>`.
/// Stops at the end of stdin.
///
/// # Errors
/// The runtime, the journal or the spec cannot be opened; a line is malformed.
pub fn child(dir: &Path, spec: &Path) -> Result<()> {
    let fleet: serde_json::Value = serde_json::from_slice(&std::fs::read(spec)?)?;
    let text = |k: &str| fleet[k].as_str().map(str::to_owned).context(k.to_owned());
    let credentials = Some(BasicAuth {
        username: text("username")?,
        password: text("password")?,
    });
    let endpoints: Vec<Endpoint> = serde_json::from_value(fleet["endpoints"].clone())?;
    std::fs::create_dir_all(dir)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let journal = Arc::new(Journal::open(&JournalOptions::new(
        PathBuf::from(dir).join("j.redb"),
    ))?);
    let (dispatch, cancel, dispatcher) = rt.block_on(async {
        let d = Dispatcher::new(journal.clone());
        let dispatch = d.handle();
        let cancel = CancellationToken::new();
        let c = cancel.clone();
        (
            dispatch,
            cancel,
            tokio::spawn(async move { d.run(c).await }),
        )
    });
    let mut deployers = std::collections::HashMap::new();
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready")?;
    out.flush()?;
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        let mut words = line.splitn(4, ' ');
        let (Some("deploy"), Some(cap), Some(n), Some(name)) =
            (words.next(), words.next(), words.next(), words.next())
        else {
            bail!("the deployer child got {line:?}");
        };
        let (cap, n): (usize, usize) = (cap.parse()?, n.parse()?);
        if let std::collections::hash_map::Entry::Vacant(slot) = deployers.entry(cap) {
            let d = rt.block_on(async { fanout::deployer(&dispatch, cap, credentials.clone()) })?;
            slot.insert(d);
        }
        let deployer = &deployers[&cap];
        let commits = journal.commit_stats().commits;
        let r = rt.block_on(fanout::deploy_once(
            &dispatch, deployer, &endpoints, name, n,
        ));
        match r {
            Ok(wall) => writeln!(
                out,
                "ok {} {}",
                wall.as_secs_f64(),
                journal.commit_stats().commits - commits
            )?,
            Err(e) => writeln!(out, "error {}", format!("{e:#}").replace('\n', " "))?,
        }
        out.flush()?;
    }
    drop(deployers);
    cancel.cancel();
    let _ = rt.block_on(dispatcher);
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};

    use super::{FILES_NEEDED, open_files_limit};

    /// A soft limit below what 7.L needs is raised to the hard one (when the hard one allows).
    #[test]
    fn a_low_open_files_limit_is_raised() {
        let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        if hard < FILES_NEEDED {
            assert!(
                open_files_limit().is_err(),
                "a hard limit below the need is refused"
            );
            return;
        }
        setrlimit(Resource::RLIMIT_NOFILE, 1024, hard).unwrap();
        assert_eq!(open_files_limit().unwrap(), hard);
        assert_eq!(getrlimit(Resource::RLIMIT_NOFILE).unwrap().0, hard);
    }
}
