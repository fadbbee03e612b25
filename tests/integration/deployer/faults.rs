//! Scripted Dataplane faults: a 409 storm, a 500, a slow reload and a failed reload.

use std::time::Duration;

use haptic_journal::Event;
use serde_json::json;

use super::harness::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployer_handles_conflicts_server_errors_slow_and_failed_reloads() {
    let (sb, h, eps) = Harness::with_fleet(3, Knobs::default()).await;
    let pods = sb.pods();
    h.lead(&eps).await;

    // pod 0: a 409 storm (two conflicts, then the push goes through after re-reading).
    fault(&pods[0], push_answers(409, 2)).await;
    // pod 1: a 500 on the push: failed (retryable), retried with backoff, then succeeds.
    fault(&pods[1], push_answers(500, 1)).await;
    // pod 2: a slow reload: the poll waits for it.
    fault(&pods[2], json!({"reload":"slow","times":1,"delay_ms":1500})).await;
    let r1 = h.feed("01-basic", true).await;
    h.wait_applied(r1, &eps).await;
    let ev = h.events();
    let conflicts = ev.iter().find_map(|e| match e {
        Event::ConfigAppliedToPod {
            pod,
            sync,
            checksum,
            ..
        } if pod.name.as_str() == pods[0].name && *checksum == r1 && sync.error.is_none() => {
            Some(sync.version_conflict_retries)
        }
        _ => None,
    });
    assert_eq!(
        conflicts,
        Some(2),
        "409 storm retried after re-reading the version"
    );
    let failed_500 = ev.iter().any(|e| matches!(e,
        Event::InstanceDeploymentFailed { endpoint, retryable: true, .. } if endpoint.pod.name.as_str() == pods[1].name));
    assert!(failed_500, "500 reported as a retryable failure");
    for pod in &pods {
        wait_answer(pod, "render 01-basic", |p| curl(p, "http", 80, None, None)).await;
    }
    // The 500'd pod got exactly one successful push later (no hot loop).
    let pushes_1 = raw_pushes(&requests(&pods[1]).await);
    assert_eq!(pushes_1, 2, "one failed push + one retry");

    // A failed reload: the pod keeps last-known-good; retried with backoff, then converges.
    fault(&pods[0], json!({"reload":"fail","times":1})).await;
    for pod in &pods {
        clear_requests(pod).await;
    }
    let r2 = h.feed("02-maps", true).await;
    wait_for("reload failure reported", Duration::from_secs(30), || {
        h.events().iter().any(|e| matches!(e,
            Event::ConfigAppliedToPod { pod, sync, checksum, .. }
                if pod.name.as_str() == pods[0].name && *checksum == r2 && sync.error.as_deref().is_some_and(|m| m.contains("reload"))))
    })
    .await;
    h.wait_applied(r2, &eps).await;
    for pod in &pods {
        wait_answer(pod, "render 02-maps shop-v1", shop).await;
    }
    // 01-basic -> 02-maps is a modelled change since issue 14: each attempt is one
    // transaction commit (or a raw push), the writes that reload.
    let reqs_0 = requests(&pods[0]).await;
    let pushes_0 = config_writes(&reqs_0);
    assert!(
        (2..=3).contains(&pushes_0),
        "bounded retries after a failed reload: {pushes_0}: {:?}",
        writes(&reqs_0)
    );
    for pod in &pods[1..] {
        let reqs = requests(pod).await;
        assert_eq!(
            config_writes(&reqs),
            1,
            "healthy pods wrote the configuration once: {:?}",
            writes(&reqs)
        );
        clear_faults(pod).await;
    }
    h.stop().await;
}
