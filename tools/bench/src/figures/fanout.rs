//! Figure 7, fan-out: one deployment of a corpus render to 100 Dataplane stand-ins (the
//! sandbox's endpoints without HAProxy) that each wait 50 ms before every answer, with
//! `max_parallel` 10, against the ideal wall time for the requests it made. The stand-ins skip
//! `haproxy -c` here (`SandboxConfig::stand_in_validate`: 100 concurrent validations would
//! measure the 2 cores, not the fan-out) and batch reloads every 50 ms.
//!
//! ```text
//!  journal + dispatcher + haptic::components::deployer::Deployer (the product's executor,
//!  DeployerSettings { max_parallel: 10 }) ──run(DeployRequest)──► 100 stand-ins, 50 ms each
//!  requests = Σ per pod (GET /_sandbox/requests, cleared before each deployment)
//!  ideal    = max(requests × 50 ms / 10, longest per-pod chain × 50 ms)
//! ```
//!
//! Each deployment pushes the next render of the corpus stream (a changed configuration and
//! changed files, so every pod gets a push). The ratio is the median of the per-deployment
//! `wall / ideal`; target <= 1.2x. A second row runs the same fleet without a cap
//! (`max_parallel` 0), whose ideal is the longest chain alone: what the per-endpoint work
//! costs beyond its requests (journal writes per endpoint, scheduling).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use futures::{StreamExt as _, TryStreamExt as _};
use haptic::components::deployer::{Deployer, DeployerSettings, RunOutcome};
use haptic::core::guard::AlwaysValid;
use haptic::dataplane::{BasicAuth, ClientSettings, Dataplane};
use haptic::dispatch::{DispatchHandle, Dispatcher};
use haptic_journal::{
    Batch, Correlation, DeployRequest, DeploymentCause, DeploymentId, DeploymentReason, Endpoint,
    Event, Journal, JournalOptions, RuntimeConfigRef,
};
use haptic_testkit::render::{batch_files, corpus, rejected, stream};
use haptic_testkit::{Pod, accept_inflight};
use haptic_tools::sandbox::pods::{Sandbox, SandboxConfig};
use tokio_util::sync::CancellationToken;

use super::Ctx;
use crate::report::{Row, Target, Unit};
use crate::stats::median;

/// Stand-in pods.
const PODS: usize = 100;
/// Each stand-in's delay before every answer.
pub(super) const DELAY: Duration = Duration::from_millis(50);
/// Requests in flight across the deployment.
pub(super) const MAX_PARALLEL: usize = 10;
/// The namespace of the Pod objects.
pub(super) const NS: &str = "haptic-bench";
/// Stand-ins asked at once for their request logs (outside the timed part).
const LOG_READS: usize = 50;

/// Runs figure 7.
///
/// # Errors
/// The sandbox does not start, a deployment fails on any pod.
pub fn run(ctx: &Ctx) -> Result<Vec<Row>> {
    super::on_runtime(measure(ctx))
}

/// What one deployment took.
pub(super) struct Sample {
    /// `Deployer::run`'s wall time.
    pub wall: Duration,
    /// Requests the stand-ins logged.
    pub requests: usize,
    /// The most requests one pod got (its chain).
    pub chain: usize,
    /// Median over pods of the time from a pod's first request's arrival to its last one's
    /// answer (s).
    pub span: f64,
}

impl Sample {
    /// The ideal wall time with `cap` requests in flight (0 = no cap).
    fn ideal(&self, cap: usize) -> Duration {
        let chain = DELAY * self.chain as u32;
        if cap == 0 {
            return chain;
        }
        let packed = DELAY * (self.requests.div_ceil(cap)) as u32;
        packed.max(chain)
    }
}

/// The sandbox with `pods` stand-ins answering after [`DELAY`] (no `haproxy -c`, no spec
/// check), and a handle on each.
pub(super) async fn stand_ins(pods: usize, dir: &Path) -> Result<(Sandbox, Vec<Pod>)> {
    let cfg = SandboxConfig {
        pods: 0,
        stand_in_pods: pods,
        stand_in_delay: DELAY,
        stand_in_validate: false,
        // The figure is the controller's fan-out, not the sandbox's spec check.
        spec_check: haptic_tools::sandbox::pods::spec::SpecCheck::Off,
        reload_delay: DELAY,
        dir: Some(dir.join("sandbox")),
        ..SandboxConfig::default()
    };
    let (username, password) = (cfg.username.clone(), cfg.password.clone());
    let sandbox = Sandbox::start(cfg)
        .await
        .with_context(|| format!("the sandbox with {pods} stand-in pods"))?;
    let handles = sandbox
        .pods()
        .into_iter()
        .map(|info| Pod {
            info,
            username: username.clone(),
            password: password.clone(),
            sandbox: true,
        })
        .collect();
    Ok((sandbox, handles))
}

/// The product's deployer with `cap` requests in flight (0 = no cap).
///
/// # Errors
/// The Dataplane client cannot be built.
pub(super) fn deployer(
    dispatch: &DispatchHandle,
    cap: usize,
    credentials: Option<BasicAuth>,
) -> Result<Deployer> {
    Ok(Deployer::new(
        dispatch.clone(),
        Dataplane::new(&ClientSettings::default())?,
        DeployerSettings {
            max_parallel: cap,
            endpoint_timeout: Duration::from_secs(120),
            credentials,
            ..DeployerSettings::default()
        },
        Arc::new(AlwaysValid),
        None,
    ))
}

/// The corpus renders the deployments cycle through (the stream, rejected ones left out).
pub(super) fn renders() -> Vec<String> {
    stream().into_iter().filter(|n| !rejected(n)).collect()
}

async fn measure(ctx: &Ctx) -> Result<Vec<Row>> {
    let dir = ctx.subdir("fanout")?;
    let (sandbox, pods) = stand_ins(PODS, &dir).await?;
    let endpoints: Vec<Endpoint> = pods.iter().map(|p| p.endpoint(NS)).collect();
    let journal = Arc::new(Journal::open(&JournalOptions::new(dir.join("j.redb")))?);
    let d = Dispatcher::new(journal.clone());
    let dispatch = d.handle();
    let cancel = CancellationToken::new();
    let c = cancel.clone();
    let dispatcher = tokio::spawn(async move { d.run(c).await });
    let renders = renders();
    let per_cap = ctx.pick(2, 5);
    let mut rows = Vec::new();
    let mut next = 0usize;
    for cap in [MAX_PARALLEL, 0] {
        let deployer = deployer(&dispatch, cap, pods.first().map(Pod::credentials))?;
        // The first deployment of each deployer reads every pod's /v3/info (cached after):
        // a warm-up, not a sample.
        let mut samples = Vec::new();
        for round in 0..=per_cap {
            let name = &renders[next % renders.len()];
            next += 1;
            clear(&pods).await?;
            let wall = deploy_once(&dispatch, &deployer, &endpoints, name, next).await?;
            let s = count(&pods, wall).await?;
            if round > 0 {
                samples.push(s);
            }
        }
        let id = if cap == 0 { "7.2" } else { "7.1" };
        rows.push(row(id, PODS, cap, &samples, "", LIMIT));
    }
    cancel.cancel();
    let _ = dispatcher.await;
    sandbox.shutdown().await;
    Ok(rows)
}

/// What limits 7.1 and 7.2.
const LIMIT: &str = "the stand-ins' 50 ms (by design); no cap: reload waits, one commit per pod";

/// The row of `samples` deployed to `pods` stand-ins with `cap` (0 = no cap); `note` is added
/// to the detail.
pub(super) fn row(
    id: &str,
    pods: usize,
    cap: usize,
    samples: &[Sample],
    note: &str,
    limit: &'static str,
) -> Row {
    let ratios: Vec<f64> = samples
        .iter()
        .map(|s| s.wall.as_secs_f64() / s.ideal(cap).as_secs_f64())
        .collect();
    let wall: Vec<f64> = samples.iter().map(|s| s.wall.as_secs_f64()).collect();
    let ideal: Vec<f64> = samples.iter().map(|s| s.ideal(cap).as_secs_f64()).collect();
    let requests: Vec<f64> = samples.iter().map(|s| s.requests as f64).collect();
    let chain = samples.iter().map(|s| s.chain).max().unwrap_or(0);
    let span = median(samples.iter().map(|s| s.span).collect());
    let pods_text = if pods >= 1000 {
        format!("{},{:03}", pods / 1000, pods % 1000)
    } else {
        pods.to_string()
    };
    let (figure, reference) = if cap == 0 {
        (
            format!("{id} fan-out, {pods_text} stand-ins at 50 ms, no cap"),
            "ideal: the longest chain x 50 ms",
        )
    } else {
        (
            format!("{id} fan-out, {pods_text} stand-ins at 50 ms, max_parallel {cap}"),
            "ideal: max(requests / cap, longest chain) x 50 ms",
        )
    };
    let row = Row::new(figure, median(wall), Unit::S, limit)
        .vs(reference, median(ideal))
        .paired(median(ratios))
        .detail(format!(
            "{:.0} requests per deployment, chain {chain}, one pod's sync {span:.2} s (median), \
         {} deployments{note}",
            median(requests),
            samples.len()
        ));
    if cap == 0 {
        row
    } else {
        row.target(Target::RatioAtMost(1.2))
    }
}

/// Empties every stand-in's request log ([`LOG_READS`] at a time).
///
/// # Errors
/// A stand-in does not answer.
pub(super) async fn clear(pods: &[Pod]) -> Result<()> {
    futures::stream::iter(
        pods.iter()
            .map(|p| async move { p.faults().clear_requests().await }),
    )
    .buffer_unordered(LOG_READS)
    .try_collect::<Vec<()>>()
    .await?;
    Ok(())
}

/// Accepts the corpus render `name` with its in-flight slot (as the scheduler writes them),
/// then runs the deployment of it to `endpoints`; returns `Deployer::run`'s wall time.
///
/// # Errors
/// The journal refuses the batch, the deployment fails on any pod.
pub(super) async fn deploy_once(
    dispatch: &DispatchHandle,
    deployer: &Deployer,
    endpoints: &[Endpoint],
    name: &str,
    n: usize,
) -> Result<Duration> {
    let content = corpus(name);
    let mut b = Batch::new();
    let render = b.put_render(content.config.clone(), batch_files(&content));
    b.event(Event::TemplateRendered {
        correlation: Correlation::new(format!("fanout-{n}")),
        render: render.checksum,
        config_bytes: content.config.len() as u64,
        auxiliary_file_count: content.files.len() as u32,
        duration_ms: 0,
        trigger_reason: "bench".into(),
        coalescible: true,
    });
    let request = DeployRequest {
        deployment: DeploymentId::new(format!("fanout-{n}")),
        render: render.checksum,
        endpoints: endpoints.to_vec(),
        runtime_config: RuntimeConfigRef {
            namespace: NS.into(),
            name: "bench-haproxycfg".into(),
        },
        reason: DeploymentReason {
            cause: DeploymentCause::ConfigValidation,
            timeout_retry: false,
        },
        correlation: Correlation::new(format!("fanout-{n}")),
    };
    let inflight = accept_inflight(dispatch, b, &request).await?;
    let t = Instant::now();
    let outcome = deployer
        .run(inflight, request, CancellationToken::new())
        .await?;
    let wall = t.elapsed();
    match outcome {
        RunOutcome::Completed { failed: 0, .. } => Ok(wall),
        other => bail!(
            "deployment of {name} to {} stand-ins: {other:?}",
            endpoints.len()
        ),
    }
}

/// The deployment's requests, counted in the stand-ins' logs ([`LOG_READS`] at a time).
///
/// # Errors
/// A stand-in does not answer.
pub(super) async fn count(pods: &[Pod], wall: Duration) -> Result<Sample> {
    let logs = futures::stream::iter(
        pods.iter()
            .map(|p| async move { p.faults().requests().await }),
    )
    .buffer_unordered(LOG_READS)
    .try_collect::<Vec<_>>()
    .await?;
    let (mut requests, mut chain, mut spans) = (0, 0, Vec::new());
    for log in logs {
        requests += log.len();
        chain = chain.max(log.len());
        let at: Vec<jiff::Timestamp> = log.iter().filter_map(|r| r.at.parse().ok()).collect();
        if let (Some(first), Some(last)) = (at.iter().min(), at.iter().max()) {
            let span = last.duration_since(*first).as_secs_f64() + DELAY.as_secs_f64();
            spans.push(span);
        }
    }
    Ok(Sample {
        wall,
        requests,
        chain,
        span: median(spans),
    })
}
