//! A resumed deployment whose pushes had already landed before the stop still reports every
//! pod: each synced endpoint gets its `ConfigAppliedToPod`, a no-op included, so the publisher
//! learns each pod's new state at once rather than at the next drift check.

use std::time::Duration;

use haptic_journal::{Event, Queue};
use serde_json::json;

use super::harness::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployer_resumed_deployment_whose_pushes_landed_reports_every_pod() {
    let sb = sandbox(3).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    let eps = endpoints(&sb);
    let pods = sb.pods();
    let knobs = Knobs::default();
    // Waits are bounded by the configured deployment timeout, well below the drift interval:
    // a drift check cannot be what reports the pods.
    let bound = knobs.timeout;
    assert!(bound * 2 < knobs.drift);
    // A reload slower than the wait for the pushes keeps the deployment in flight after every
    // push landed.
    let slow_reload = bound / 4;
    for pod in &pods {
        fault(
            pod,
            json!({"reload":"slow","times":1,"delay_ms": slow_reload.as_millis() as u64}),
        )
        .await;
    }
    let h = Harness::start(&path, &sb, knobs).await;
    h.become_leader(1).await;
    h.discover(eps.clone()).await;
    let r = h.feed("02-maps", true).await;
    let deadline = tokio::time::Instant::now() + bound;
    loop {
        let mut all = true;
        for pod in &pods {
            all &= raw_pushes(&requests(pod).await) == 1;
        }
        if all {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "pushes did not arrive"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        h.journal.queue(Queue::DeployInflight).unwrap().len(),
        1,
        "in flight"
    );
    h.stop().await;

    // Restart on the same journal: the in-flight deployment resumes, finds every pod already
    // on the render, writes nothing, and reports each pod.
    let h = Harness::start(&path, &sb, Knobs::default()).await;
    h.become_leader(2).await;
    wait_for("every pod reported after the resume", bound * 2, || {
        let ev = h.events();
        pods.iter().all(|pod| {
            ev.iter().any(|e| {
                matches!(e, Event::ConfigAppliedToPod { pod: p, checksum, sync, .. }
                    if p.name.as_str() == pod.name && *checksum == r && sync.error.is_none())
            })
        }) && ev
            .iter()
            .any(|e| matches!(e, Event::DeploymentCompleted { succeeded: 3, .. }))
    })
    .await;
    each_pushed_once_answering(
        &pods,
        "the resumed deployment pushed nothing again",
        "render 02-maps shop-v1",
        shop,
    )
    .await;
    h.stop().await;
}
