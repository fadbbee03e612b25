//! A render a pod's Dataplane API rejects permanently (400 on the configuration push, again
//! after the pod's files were synced again) is quarantined for that pod: reported as not
//! retryable, not retried by backoff or drift checks, retried once per operator request; a
//! rejection that a resync cures is not quarantined.

use std::time::Duration;

use haptic_journal::{Batch, Correlation, Event};
use serde_json::json;

use super::harness::*;

/// Every configuration write of the pod answers 400: transaction starts and commits (the
/// fine-grained path) and raw pushes (its fallback). `times` 0: always.
fn reject_config_writes(times: u32) -> serde_json::Value {
    json!({"method":"POST|PUT","path":"transactions|configuration/raw$","status":400,"times":times})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployer_quarantines_a_render_a_pod_rejects_after_a_resync_and_retries_it_on_request() {
    let drift = Duration::from_millis(700);
    let sb = sandbox(3).await;
    let (h, eps, _r1) = Harness::deployed(&sb, Knobs::drift(drift), "01-basic").await;
    let pods = sb.pods();
    // pod 0 rejects every configuration write; pod 1 rejects the first attempt only (each of
    // its two steps once), which the resync cures.
    fault(&pods[0], reject_config_writes(0)).await;
    fault(
        &pods[1],
        json!({"method":"POST","path":"transactions$","status":400,"times":1}),
    )
    .await;
    fault(&pods[1], push_answers(400, 1)).await;
    for pod in &pods {
        clear_requests(pod).await;
    }
    let r2 = h.feed("02-maps", true).await;
    h.wait_applied(r2, &eps[1..]).await;
    wait_for("pod 0 reported rejected", h.converge, || {
        h.events().iter().any(|e| {
            matches!(e, Event::ConfigAppliedToPod { pod, checksum, sync, .. }
                if pod.name.as_str() == pods[0].name && *checksum == r2 && sync.rejected)
        })
    })
    .await;
    let ev = h.events();
    let failed: Vec<bool> = ev
        .iter()
        .filter_map(|e| match e {
            Event::InstanceDeploymentFailed {
                endpoint,
                retryable,
                ..
            } => Some((endpoint.pod.name.as_str().to_owned(), *retryable)),
            _ => None,
        })
        .map(|(pod, retryable)| {
            assert_eq!(pod, pods[0].name, "only pod 0 failed");
            retryable
        })
        .collect();
    assert_eq!(failed, vec![false], "one failure, not retryable");
    let rejected = ev.iter().find_map(|e| match e {
        Event::ConfigAppliedToPod { pod, sync, .. } if pod.name.as_str() == pods[0].name => {
            sync.error.clone()
        }
        _ => None,
    });
    assert!(
        rejected
            .as_deref()
            .is_some_and(|m| m.contains("status 400")),
        "the error carries the API's answer: {rejected:?}"
    );
    // The push was tried, then tried again after the resync: two raw pushes.
    assert_eq!(
        raw_pushes(&requests(&pods[0]).await),
        2,
        "{:?}",
        writes(&requests(&pods[0]).await)
    );
    // pod 1's rejection was cured by the resync: it runs the render, never reported failed.
    wait_answer(&pods[1], "render 02-maps shop-v1", shop).await;
    // pod 0 keeps what it ran.
    wait_answer(&pods[0], "render 01-basic", |p| {
        curl(p, "http", 80, None, None)
    })
    .await;

    // Past the first backoff delay and over several drift checks: pod 0 gets no request.
    clear_requests(&pods[0]).await;
    h.wait_drift_rounds(3).await;
    let reqs = requests(&pods[0]).await;
    assert_eq!(reqs, vec![], "a quarantined pod is left alone");

    // An operator's retry request: one more attempt (push, resync, push), quarantined again.
    let runtime_config = ev
        .iter()
        .find_map(|e| match e {
            Event::ConfigAppliedToPod { runtime_config, .. } => Some(runtime_config.clone()),
            _ => None,
        })
        .expect("a runtime config");
    let mut b = Batch::new();
    b.event(Event::DeploymentRetryRequest {
        correlation: Correlation::new("retry-1"),
        runtime_config,
        value: "1".into(),
    });
    h.dispatch.accept(b).await.unwrap();
    sb.eventually(h.converge, "the retry pushed twice", || async {
        let n = raw_pushes(&requests(&pods[0]).await);
        (n == 2).then_some(()).ok_or(format!("{n} pushes"))
    })
    .await;
    h.wait_drift_rounds(3).await;
    assert_eq!(raw_pushes(&requests(&pods[0]).await), 2, "retried once");
    let failures = h
        .events()
        .iter()
        .filter(|e| {
            matches!(
                e,
                Event::InstanceDeploymentFailed {
                    retryable: false,
                    ..
                }
            )
        })
        .count();
    assert_eq!(failures, 2, "each attempt reported once");
    h.stop().await;
}
