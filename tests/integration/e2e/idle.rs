//! An idle fleet costs no writes (issue 15): once a render is deployed and published, ten drift
//! intervals in which nothing changed send no write to the Kubernetes API (no status, no
//! condition, no object; the Lease renewals and nothing else) and none to any pod. A drift check
//! that rewrote `deployedAt`, `syncDuration` or the operation summary would show here as one
//! status write per interval.

use std::time::Duration;

use super::telemetry::scrape;
use super::{Peers, bounds, pod_writes, published};

on_peers!(
    Emulator,
    ten_idle_drift_intervals_write_nothing_to_the_api_or_the_pods => idle_drift_writes_nothing,
);

/// The drift interval of this test: short, so ten of them pass quickly.
const DRIFT: Duration = Duration::from_millis(1000);

/// Ten idle drift rounds (counted by the controller's own `haptic_drift_triggers_total` and
/// `haptic_deployment_total`) after `01-basic` converged on two pods: no non-GET request to the
/// API server other than the Lease's, none to a pod.
pub async fn idle_drift_writes_nothing(peers: Peers) {
    let (world, _render_dir, mut o) = super::fed(peers, 2, "01-basic", "idle").await;
    o.extra.extend([
        "--drift-prevention-interval".to_owned(),
        format!("{}ms", DRIFT.as_millis()),
    ]);
    let ctl = world.controller(o);
    published(&world, "01-basic", 2).await;
    let metrics = ctl.metrics_addr().await;
    // Quiet first: the first drift round after the deployment is done (status written).
    let first = scrape(metrics).await.value("haptic_drift_triggers_total");
    world
        .eventually(
            bounds().follow_up() + DRIFT * 2,
            "a first drift round",
            || async {
                let s = scrape(metrics).await;
                (s.value("haptic_drift_triggers_total") > first)
                    .then_some(())
                    .ok_or(format!("{first} drift triggers"))
            },
        )
        .await;
    tokio::time::sleep(bounds().deployment()).await;
    world.clear_api_requests().unwrap();
    for pod in &world.pods() {
        pod.faults().clear_requests().await.unwrap();
    }
    let s = scrape(metrics).await;
    let (triggers, deployments) = (
        s.value("haptic_drift_triggers_total"),
        s.value("haptic_deployment_total"),
    );
    // Ten rounds: each an interval and a deployment that may run to its bound.
    world
        .eventually(
            (DRIFT + bounds().deployment()) * 11,
            "ten more drift rounds, each deployed",
            || async {
                let s = scrape(metrics).await;
                let t = s.value("haptic_drift_triggers_total") - triggers;
                let d = s.value("haptic_deployment_total") - deployments;
                (t >= 10.0 && d >= 10.0)
                    .then_some(())
                    .ok_or(format!("{t} triggers, {d} deployments"))
            },
        )
        .await;
    let writes: Vec<String> = world
        .api_requests()
        .unwrap()
        .into_iter()
        .filter(|r| r.method != "GET" && !r.path.contains("/leases/"))
        .map(|r| format!("{} {} {}", r.method, r.path, r.status))
        .collect();
    assert_eq!(
        writes,
        Vec::<String>::new(),
        "idle drift rounds wrote to the API\n{}",
        ctl.log_tail(30)
    );
    for pod in &world.pods() {
        let sent: Vec<String> = pod_writes(pod)
            .await
            .into_iter()
            .map(|r| format!("{} {}", r.method, r.path))
            .collect();
        assert_eq!(
            sent,
            Vec::<String>::new(),
            "idle drift wrote to {}",
            pod.name
        );
    }
    drop(ctl);
    world.shutdown().await;
}
