//! `max_parallel` caps the Dataplane requests in flight across one deployment.

use std::time::Duration;

use haptic_testkit::FleetConfig;

use super::harness::*;

const DELAY: Duration = Duration::from_millis(300);

/// Seconds of the day of an RFC 3339 UTC timestamp (`...T07:20:00.123Z`).
fn secs(at: &str) -> f64 {
    let t = at.split('T').nth(1).unwrap().trim_end_matches('Z');
    let mut parts = t.split(':');
    let h: f64 = parts.next().unwrap().parse().unwrap();
    let m: f64 = parts.next().unwrap().parse().unwrap();
    let s: f64 = parts.next().unwrap().parse().unwrap();
    h * 3600.0 + m * 60.0 + s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployer_max_parallel_caps_requests_in_flight_across_the_deployment() {
    let sb = Fleet::start(
        FleetConfig {
            stand_in_pods: 6,
            stand_in_delay: DELAY,
            ..FleetConfig::default()
        }
        .without_crds(),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let knobs = Knobs {
        max_parallel: 2,
        timeout: Duration::from_secs(60),
        ..Knobs::default()
    };
    let h = Harness::start(&dir.path().join("j.redb"), &sb, knobs).await;
    let eps = endpoints(&sb);
    h.lead(&eps).await;
    let r = h.feed("01-basic", true).await;
    h.wait_applied(r, &eps).await;
    let mut times = Vec::new();
    for pod in &sb.pods() {
        for r in pod.faults().requests().await.unwrap() {
            times.push(secs(&r.at));
        }
    }
    times.sort_by(f64::total_cmp);
    assert!(times.len() >= 6 * 5, "{} requests", times.len());
    // Each request takes at least DELAY; with 2 permits, no 3 requests fall in one DELAY window.
    let slack = 0.05;
    for w in times.windows(3) {
        assert!(
            w[2] - w[0] >= DELAY.as_secs_f64() - slack,
            "3 requests within {:.3}s: more than 2 in flight",
            w[2] - w[0]
        );
    }
    h.stop().await;
}
