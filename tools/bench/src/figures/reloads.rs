//! Figure 8: reloads per 100 server changes across 10 pods, fine-grained against raw push,
//! measured side by side in one run against the sandbox (real HAProxy pods behind its Dataplane
//! endpoints).
//!
//! ```text
//!  fleet (haptic-testkit, the sandbox's emulator peers): 2 x 10 pods (real HAProxy, reload
//!  batching 50 ms)
//!  a stream of renders, each changing one existing server (weight, port, state in turn):
//!    group A: the deployer's per-pod sync (haptic::components::deployer::sync_endpoint:
//!             read, plan, execute) -> server PUTs at runtime
//!    group B: what every deployment did before issue 14: POST .../configuration/raw?version=N
//!             of the render, wait for its Reload-ID
//!  reloads per pod = succeeded reload records after - before (GET .../reloads)
//! ```
//!
//! The two groups get the same render at the same moment (change by change, A then B), so the
//! machine's load is shared by both. Target: 0 reloads per pod on the fine-grained side (the
//! raw side is the reference: one per change).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use haptic::components::deployer::{
    NoPodJournal, PodLedger, PodSync, SyncLimits, SyncOutcome, SyncPolicy, sync_endpoint,
};
use haptic::core::guard::AlwaysValid;
use haptic::core::render::{JournaledRender, RenderContent};
use haptic::dataplane::{ConfigVersion, DataplaneClient, PushOptions, ReloadStatus};
use haptic_journal::SyncMode;
use haptic_testkit::{Fleet, FleetConfig, Pod};
use tokio::sync::Semaphore;

use super::Ctx;
use crate::report::{Row, Target, Unit};

/// Pods per group.
const PODS: usize = 10;

/// Runs figure 8.
///
/// # Errors
/// The sandbox does not start (no `haproxy`), a sync or a push fails.
pub fn run(ctx: &Ctx) -> Result<Vec<Row>> {
    super::on_runtime(measure(ctx))
}

/// The render after change `i`: four server slots; change `i` (from 1) changes exactly one
/// field of one existing server: web-1's weight (`i % 3 == 0`), web-1's port (1), web-2's
/// state (2). Change 0 is the starting render.
fn render(i: usize) -> String {
    let (mut weight, mut port, mut web2_off) = (10, 9101, false);
    for step in 1..=i {
        match step % 3 {
            0 => weight = 10 + step % 7,
            1 => port = if port == 9101 { 9102 } else { 9101 },
            _ => web2_off = !web2_off,
        }
    }
    let mut s = String::from(
        "global\n    stats socket /var/run/haproxy.sock mode 600 level admin\n\
         defaults\n    mode http\n    timeout connect 1s\n    timeout client 5s\n    timeout server 5s\n\
         frontend fe_http\n    bind *:80\n    default_backend be_app\n\
         frontend fe_s1\n    bind 127.0.0.1:9101\n    http-request return status 200 content-type text/plain string s1\n\
         frontend fe_s2\n    bind 127.0.0.1:9102\n    http-request return status 200 content-type text/plain string s2\n\
         backend be_app\n    balance roundrobin\n",
    );
    s.push_str(&format!(
        "    server web-1 127.0.0.1:{port} weight {weight}\n"
    ));
    let off = if web2_off { " disabled" } else { "" };
    s.push_str(&format!("    server web-2 127.0.0.1:9102{off}\n"));
    s.push_str("    server web-3 127.0.0.1:1 disabled\n    server web-4 127.0.0.1:1 disabled\n");
    s
}

fn loaded(config: &str) -> JournaledRender {
    JournaledRender::of(&RenderContent::new(config.into(), Vec::new()))
}

/// Succeeded reloads of one pod (`GET .../reloads`; the sandbox keeps every reload).
async fn reload_count(client: &DataplaneClient) -> Result<usize> {
    Ok(client
        .reloads()
        .await?
        .iter()
        .filter(|r| r.status == ReloadStatus::Succeeded)
        .count())
}

/// What every deployment did before issue 14: one raw push of the render, then its reload.
async fn raw_push(client: &DataplaneClient, config: &str) -> Result<()> {
    let version: ConfigVersion = client.configuration_version().await?;
    let out = client
        .push_raw_configuration(config, version, PushOptions::default())
        .await?;
    if let Some(id) = out.reload_id {
        client
            .wait_for_reload(&id, Duration::from_millis(20), Duration::from_secs(20))
            .await?;
    }
    Ok(())
}

/// One sync of `c` to `r` through the deployer's path, as a fresh pod with no journal and a lease
/// always valid.
async fn sync_fine(
    c: &DataplaneClient,
    r: &JournaledRender,
    permits: &Arc<Semaphore>,
    limits: &SyncLimits,
    policy: &SyncPolicy,
) -> SyncOutcome {
    sync_endpoint(
        c,
        r,
        fresh(c),
        &NoPodJournal,
        permits,
        &AlwaysValid,
        limits,
        policy,
    )
    .await
}

/// A pod with no journal record (the figure measures the Dataplane side only).
fn fresh(c: &DataplaneClient) -> PodSync {
    let url = haptic_journal::EndpointUrl::new(c.endpoint().url().as_str());
    let pod = haptic_journal::PodRef {
        namespace: "bench".into(),
        name: url.as_str().into(),
    };
    PodSync {
        ledger: PodLedger::new(&url, &pod, None, None),
        clean_transactions: false,
    }
}

async fn measure(ctx: &Ctx) -> Result<Vec<Row>> {
    let changes = ctx.pick(20, 100);
    let sb = Fleet::try_start(FleetConfig {
        pods: 2 * PODS,
        reload_delay: Duration::from_millis(50),
        ..FleetConfig::default().without_crds().without_spec_check()
    })
    .await
    .context("fleet (needs haproxy; root for namespaces)")?;
    let clients: Vec<DataplaneClient> = sb.pods().iter().map(Pod::dataplane).collect();
    let (fine, raw) = clients.split_at(PODS);
    let permits = Arc::new(Semaphore::new(Semaphore::MAX_PERMITS));
    let limits = SyncLimits {
        reload_poll_interval: Duration::from_millis(20),
        ..SyncLimits::default()
    };
    let policy = SyncPolicy::default();
    // The starting render everywhere (a fresh pod gets one raw push on both sides).
    let base = loaded(&render(0));
    for c in fine {
        sync_fine(c, &base, &permits, &limits, &policy)
            .await
            .result?;
    }
    for c in raw {
        raw_push(c, &base.config_text()).await?;
    }
    let mut before = Vec::new();
    for c in &clients {
        before.push(reload_count(c).await?);
    }
    let (mut fine_time, mut raw_time) = (Duration::ZERO, Duration::ZERO);
    let mut modes = std::collections::BTreeMap::<&'static str, usize>::new();
    for i in 1..=changes {
        let r = loaded(&render(i));
        let t = Instant::now();
        let reports = futures::future::join_all(
            fine.iter()
                .map(|c| sync_fine(c, &r, &permits, &limits, &policy)),
        )
        .await;
        fine_time += t.elapsed();
        for rep in reports {
            let rep = rep.result?;
            *modes.entry(rep.mode.as_str()).or_default() += 1;
            if rep.mode != SyncMode::Runtime {
                bail!("change {i}: mode {} (want runtime)", rep.mode);
            }
        }
        let t = Instant::now();
        let text = r.config_text();
        for res in futures::future::join_all(raw.iter().map(|c| raw_push(c, &text))).await {
            res?;
        }
        raw_time += t.elapsed();
    }
    let mut after = Vec::new();
    for c in &clients {
        after.push(reload_count(c).await?);
    }
    sb.shutdown().await;
    let per_pod: Vec<usize> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    let scale = 100.0 / changes as f64;
    let mean = |v: &[usize]| v.iter().sum::<usize>() as f64 / v.len() as f64 * scale;
    let (f, r) = (&per_pod[..PODS], &per_pod[PODS..]);
    let fmax = f.iter().max().copied().unwrap_or(0);
    Ok(vec![
        Row::new(
            "8.1 reloads per 100 server changes, fine-grained (runtime), per pod",
            mean(f),
            Unit::Count,
            "the Dataplane API's runtime rule (server fields it sets through the runtime socket)",
        )
        .vs("raw push per change, per pod", mean(r))
        .target(Target::ValueBelow(1.0))
        .detail(format!(
            "{changes} changes x {PODS} pods each side; max {fmax} per pod fine-grained, {} raw; modes {modes:?}",
            r.iter().max().copied().unwrap_or(0)
        )),
        Row::new(
            "8.2 one server change to 10 pods, fine-grained: mean",
            fine_time.as_secs_f64() * 1000.0 / changes as f64,
            Unit::Ms,
            "reads of the pod (listings, raw config) + haproxy -c of each write on 2 cores",
        )
        .vs(
            "raw push + reload wait, mean",
            raw_time.as_secs_f64() * 1000.0 / changes as f64,
        ),
    ])
}
