//! Figure 6, status coalescing: 1,000 pods report 10 deployment outcomes each (9 failures with
//! distinct errors, then success) within one throttle window; the per-pod status writes the
//! publisher makes to the Kubernetes API emulator, against one write per object per throttle
//! interval plus the status worker's retries.
//!
//! ```text
//!  journal (Durability::None: the figure is about API writes, not fsync) + the product's
//!  haptic::components::publisher::ConfigPublisher (publish_interval = the window)
//!    render + gate pass ─► HAProxyCfg and its auxiliary objects published
//!    10 x 1,000 ConfigAppliedToPod, accepted 100 per commit, each delivered (on_event)
//!  writes    = PUT/PATCH .../status the emulator logged from the burst on
//!  reference = objects x (throttle intervals the burst and its trailing round span) + retries
//! ```
//!
//! Target: writes / reference <= 1.0x. The detail names what writing each update would cost.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use haptic::components::publisher::{ConfigPublisher, PublisherConfig};
use haptic_journal::{
    Batch, Checksum, ConfigIdentity, Correlation, Durability, Event, GateVerdict, Identity,
    Journal, JournalOptions, PodRef, Queue, RuntimeConfigRef, Seq, SyncMetadata, Term,
};
use haptic_testkit::render::{batch_files, corpus};
use haptic_testkit::{Fleet, FleetConfig};

use super::Ctx;
use crate::report::{Row, Target, Unit};

/// The namespace of every object.
const NS: &str = "haptic-bench";
/// `--config-name`.
const CONFIG: &str = "bench";
/// Updates per pod.
const UPDATES: usize = 10;
/// The corpus render published (a certificate and a crt-list: an auxiliary object with per-pod
/// status of its own, and a Secret).
const RENDER: &str = "06-crtlist";

/// Runs figure 6.
///
/// # Errors
/// The emulator does not start, a journal commit or a publication fails, the status does not
/// converge within its bound.
pub fn run(ctx: &Ctx) -> Result<Vec<Row>> {
    super::on_runtime(measure(ctx))
}

fn pod(i: usize) -> PodRef {
    PodRef {
        namespace: NS.into(),
        name: format!("haproxy-{i:04}").into(),
    }
}

async fn measure(ctx: &Ctx) -> Result<Vec<Row>> {
    let pods = ctx.pick(1_000, 1_000);
    let window = Duration::from_secs(ctx.pick(5, 10));
    let dir = ctx.subdir("status")?;
    let fleet = Fleet::try_start(FleetConfig::api_only(NS))
        .await
        .context("the Kubernetes API emulator")?;
    let journal = Arc::new(Journal::open(
        &JournalOptions::new(dir.join("j.redb")).durability(Durability::None),
    )?);
    journal.set_term(Term(1), Identity::new("bench-0"))?;
    let mut cfg = PublisherConfig::new(
        ConfigIdentity {
            name: CONFIG.into(),
            namespace: NS.into(),
            source_uid: None,
            source_generation: None,
        },
        NS,
    );
    cfg.publish_interval = window;
    cfg.self_heal = false;
    let runtime_config: RuntimeConfigRef = cfg.runtime_config();
    let p = ConfigPublisher::new(journal.clone(), fleet.client(), cfg);
    let term = p.start(Term(1));

    // Publish the render (its own leading-edge write opens a throttle window: wait it out).
    let content = corpus(RENDER);
    let mut b = Batch::new();
    let render = b
        .put_render(content.config.clone(), batch_files(&content))
        .checksum;
    b.event(Event::TemplateRendered {
        correlation: Correlation::new("render"),
        render,
        config_bytes: content.config.len() as u64,
        auxiliary_file_count: content.files.len() as u32,
        duration_ms: 0,
        trigger_reason: "bench".into(),
        coalescible: true,
    });
    b.event(Event::RenderGateCompleted {
        correlation: Correlation::new("gate"),
        render,
        verdict: GateVerdict::Pass,
        messages: vec![],
        pinned_to: None,
    });
    deliver(&journal, &p, b, 2).await?;
    let bound = window * 4 + Duration::from_secs(60);
    let t = Instant::now();
    while p.counters().config_published.load(Ordering::Relaxed) == 0 {
        if t.elapsed() > bound {
            bail!("the render was not published within {bound:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let objects = 1 + fleet_aux_objects(&fleet).await?;
    tokio::time::sleep(window).await;
    fleet.clear_api_requests()?;
    let retries_before = p.counters().worker_retries.status.load(Ordering::Relaxed);

    // The burst: update k of every pod, 100 events per commit.
    let started = Instant::now();
    for k in 0..UPDATES {
        for chunk in (0..pods).collect::<Vec<_>>().chunks(100) {
            let mut b = Batch::new();
            for &i in chunk {
                b.event(applied(&runtime_config, i, k, render));
            }
            deliver(&journal, &p, b, chunk.len()).await?;
        }
    }
    let burst = started.elapsed();
    // Quiescence: no status work left, every pod listed without an error.
    let t = Instant::now();
    loop {
        let pending = journal.queue(Queue::StatusPending)?.len();
        let done = pending == 0 && all_succeeded(&fleet, &runtime_config, pods).await;
        if done {
            break;
        }
        if t.elapsed() > bound {
            bail!("status of {pods} pods not converged within {bound:?} ({pending} pending)");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let converged = started.elapsed();
    let writes = fleet
        .api_requests()?
        .iter()
        .filter(|r| (r.method == "PUT" || r.method == "PATCH") && r.path.ends_with("/status"))
        .count();
    let retries = p.counters().worker_retries.status.load(Ordering::Relaxed) - retries_before;
    let intervals = converged.as_secs_f64() / window.as_secs_f64();
    let rounds = intervals.ceil().max(1.0) + 1.0;
    let reference = objects as f64 * rounds + retries as f64;
    term.stop().await;
    fleet.shutdown().await;
    Ok(vec![
        Row::new(
            format!("6 status coalescing, {pods} pods x {UPDATES} updates"),
            writes as f64,
            Unit::Count,
            "the throttle window (by design), then API round trips",
        )
        .vs(
            format!("{objects} objects x {rounds:.0} intervals + {retries} retries"),
            reference,
        )
        .target(Target::RatioAtMost(1.0))
        .detail(format!(
            "{} updates in {:.2} s, converged in {:.2} s, window {:.0} s; one write per update \
             would be {}{}",
            pods * UPDATES,
            burst.as_secs_f64(),
            converged.as_secs_f64(),
            window.as_secs_f64(),
            pods * UPDATES,
            if ctx.large {
                "; this row is also 6.L: 1,000 pods in every run, unchanged by --large"
            } else {
                ""
            }
        )),
    ])
}

fn applied(rc: &RuntimeConfigRef, i: usize, k: usize, render: Checksum) -> Event {
    let last = k + 1 == UPDATES;
    Event::ConfigAppliedToPod {
        correlation: Correlation::new(format!("u{k}-{i}")),
        runtime_config: rc.clone(),
        pod: pod(i),
        checksum: render,
        is_drift_check: false,
        sync: SyncMetadata {
            reload_triggered: last,
            sync_duration_ms: 10,
            error: (!last).then(|| format!("attempt {k}: 503 from the Dataplane API")),
            ..SyncMetadata::default()
        },
    }
}

/// Accepts `b` (whose `n` operations are all events), then hands its events to the publisher
/// in order, as the dispatcher does.
async fn deliver(journal: &Journal, p: &ConfigPublisher, b: Batch, n: usize) -> Result<()> {
    let acc = journal.accept(b)?;
    let seqs: Vec<Seq> = acc.seqs().to_vec();
    if seqs.len() != n {
        bail!("{} events accepted, {n} sent", seqs.len());
    }
    for seq in seqs {
        let Some((_, ev)) = journal.event(seq)? else {
            bail!("event {seq} not in the journal after its commit");
        };
        p.on_event(seq, &ev).await?;
        journal.mark_dispatched(seq)?;
    }
    Ok(())
}

/// The auxiliary objects (maps, general files, crt-lists) the emulator holds.
async fn fleet_aux_objects(fleet: &Fleet) -> Result<usize> {
    use haptic::k8s::crd::{HAProxyCRTListFile, HAProxyGeneralFile, HAProxyMapFile};
    let c = fleet.client();
    let lp = kube::api::ListParams::default();
    let maps = kube::Api::<HAProxyMapFile>::namespaced(c.clone(), NS)
        .list(&lp)
        .await?;
    let general = kube::Api::<HAProxyGeneralFile>::namespaced(c.clone(), NS)
        .list(&lp)
        .await?;
    let lists = kube::Api::<HAProxyCRTListFile>::namespaced(c, NS)
        .list(&lp)
        .await?;
    Ok(maps.items.len() + general.items.len() + lists.items.len())
}

async fn all_succeeded(fleet: &Fleet, rc: &RuntimeConfigRef, pods: usize) -> bool {
    let Some(cfg) = fleet.hpcfg(rc.name.as_str()).await else {
        return false;
    };
    let Some(st) = cfg.status else { return false };
    st.deployed_to_pods.len() == pods
        && st
            .deployed_to_pods
            .iter()
            .all(|e| e.last_error.is_none() && e.checksum.is_some())
}
