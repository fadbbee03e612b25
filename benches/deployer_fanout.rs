//! Fan-out benchmark: one render deployed to 100 sandbox stand-in pods (no HAProxy, 50 ms per
//! answer) with `max_parallel` 10, against the ideal (one pod's time, measured in the same run,
//! times 100 / 10). Prints a table. Run: `cargo bench -p haptic --bench deployer_fanout`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use haptic::components::deployer::{Deployer, DeployerSettings, RunOutcome};
use haptic::core::guard::AlwaysValid;
use haptic::dataplane::{ClientSettings, Dataplane};
use haptic::dispatch::Dispatcher;
use haptic_journal::{
    Batch, Correlation, DeployRequest, DeploymentId, DeploymentReason, Endpoint, Journal,
    JournalOptions, RuntimeConfigRef,
};
use haptic_testkit::{Fleet, FleetConfig, accept_inflight};
use tokio_util::sync::CancellationToken;

const PODS: usize = 100;
const MAX_PARALLEL: usize = 10;
const DELAY: Duration = Duration::from_millis(50);

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let sb = Fleet::start(
        FleetConfig {
            stand_in_pods: PODS,
            stand_in_delay: DELAY,
            ..FleetConfig::default()
        }
        .without_crds(),
    )
    .await;
    let journal = Arc::new(Journal::open(&JournalOptions::new(sb.dir().join("j.redb"))).unwrap());
    let d = Dispatcher::new(journal.clone());
    let dispatch = d.handle();
    let cancel = CancellationToken::new();
    let task = tokio::spawn(d.run(cancel.clone()));
    let eps: Vec<Endpoint> = sb.pods().iter().map(|p| p.endpoint("bench")).collect();
    let cfg = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/corpus/renders/01-basic/haproxy.cfg"
    ))
    .unwrap();
    let mut b = Batch::new();
    let render = b.put_render(cfg, vec![]).checksum;
    b.event(haptic_journal::Event::ValidationCompleted {
        correlation: Correlation::new("bench"),
        render,
        warnings: vec![],
        duration_ms: 0,
        trigger_reason: "bench".into(),
        coalescible: false,
    });
    dispatch.accept(b).await.unwrap();
    let deployer = Deployer::new(
        dispatch.clone(),
        Dataplane::new(&ClientSettings::default()).unwrap(),
        DeployerSettings {
            max_parallel: MAX_PARALLEL,
            endpoint_timeout: Duration::from_secs(120),
            credentials: sb.pods().first().map(haptic_testkit::Pod::credentials),
            ..DeployerSettings::default()
        },
        Arc::new(AlwaysValid),
        None,
    );
    let mut n = 0;
    let mut run = |targets: Vec<Endpoint>| {
        n += 1;
        let request = DeployRequest {
            deployment: DeploymentId::new(format!("bench-{n}")),
            render,
            endpoints: targets,
            runtime_config: RuntimeConfigRef {
                namespace: "bench".into(),
                name: "bench-haproxycfg".into(),
            },
            reason: DeploymentReason::parse("config_validation").unwrap(),
            correlation: Correlation::new("bench"),
        };
        let dispatch = dispatch.clone();
        let deployer = &deployer;
        async move {
            let id = accept_inflight(&dispatch, Batch::new(), &request)
                .await
                .unwrap();
            let t = Instant::now();
            let out = deployer
                .run(id, request, CancellationToken::new())
                .await
                .unwrap();
            (t.elapsed(), out)
        }
    };
    // One pod alone (push + reload), then the other 99 pods, then a no-op check of all 100.
    let (one, o1) = run(eps[..1].to_vec()).await;
    let (fan, o2) = run(eps[1..].to_vec()).await;
    let (noop, o3) = run(eps.clone()).await;
    let ideal = one.mul_f64((PODS - 1) as f64 / MAX_PARALLEL as f64);
    println!("| run | pods | max_parallel | wall (ms) | ideal (ms) | wall/ideal | outcome |");
    println!("|---|---|---|---|---|---|---|");
    println!(
        "| one pod | 1 | {MAX_PARALLEL} | {} | - | - | {o1:?} |",
        one.as_millis()
    );
    println!(
        "| fan-out | {} | {MAX_PARALLEL} | {} | {} | {:.2} | {o2:?} |",
        PODS - 1,
        fan.as_millis(),
        ideal.as_millis(),
        fan.as_secs_f64() / ideal.as_secs_f64()
    );
    println!(
        "| no-op check | {PODS} | {MAX_PARALLEL} | {} | - | - | {o3:?} |",
        noop.as_millis()
    );
    assert!(matches!(o2, RunOutcome::Completed { failed: 0, .. }));
    cancel.cancel();
    task.await.unwrap().unwrap();
}
