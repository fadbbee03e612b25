//! Deployment timeout with a real cancel and bounded `_timeout_retry`; a revoked Lease; drain.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use haptic::core::guard::LeaseGuard;
use haptic_journal::{Correlation, Event, Queue};
use serde_json::json;

use super::harness::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployer_timeout_cancels_retries_three_times_then_gives_up_until_drift() {
    // A deployment timeout of 2 s (1 s timed out the drift repair below on a loaded machine:
    // a pod's first push and reload with 2 cores shared); the fault hangs past it either way.
    let timeout = Duration::from_millis(2000);
    let (sb, h, eps) = Harness::with_fleet(2, Knobs::timeout(timeout)).await;
    let pods = sb.pods();
    // Every read of pod 0's configuration hangs longer than the deployment timeout.
    let hang = timeout * 5 / 2;
    fault(
        &pods[0],
        json!({"method":"GET","path":"configuration/raw$","delay_ms":hang.as_millis() as u64}),
    )
    .await;
    h.lead(&eps).await;
    let r = h.feed("01-basic", true).await;
    // Four attempts (the first and three timeout retries), each a deployment: within two
    // `converge` bounds (six deployments).
    wait_for("given up", h.converge * 2, || {
        h.events().iter().any(|e| matches!(e,
            Event::ConfigAppliedToPod { pod, sync, .. }
                if pod.name.as_str() == pods[0].name && sync.error.as_deref().is_some_and(|m| m.contains("timed out"))))
    })
    .await;
    h.settle().await;
    let ev = h.events();
    let reasons: Vec<String> = ev
        .iter()
        .filter_map(|e| match e {
            Event::DeploymentScheduled { reason, .. } => Some(reason.as_str().to_owned()),
            _ => None,
        })
        .collect();
    assert_eq!(
        reasons,
        vec![
            "config_validation",
            "config_validation_timeout_retry",
            "config_validation_timeout_retry",
            "config_validation_timeout_retry"
        ]
    );
    let cancels = ev
        .iter()
        .filter(|e| matches!(e, Event::DeploymentCancelRequest { reason, .. } if reason == "deployment_timeout"))
        .count();
    assert_eq!(cancels, 4);
    assert!(
        h.journal.queue(Queue::DeployInflight).unwrap().is_empty(),
        "cancel acked the slot"
    );
    // Pod 1 finished in the first attempt and was not retried.
    let applied = h.journal.endpoints_applied().unwrap();
    assert!(
        applied
            .iter()
            .any(|a| a.endpoint == eps[1].url && a.render == r)
    );
    // A drift check gives the given-up pod another try; with the fault gone it converges.
    clear_faults(&pods[0]).await;
    h.publish(Event::DriftPreventionTriggered {
        correlation: Correlation::new("manual-drift"),
        time_since_last_deployment_ms: 0,
    })
    .await;
    h.wait_applied(r, &eps).await;
    wait_answer(&pods[0], "render 01-basic", |p| {
        curl(p, "http", 80, None, None)
    })
    .await;
    h.stop().await;
}

#[derive(Debug)]
struct Revoked;

impl LeaseGuard for Revoked {
    fn is_valid(&self) -> bool {
        false
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployer_with_a_revoked_lease_writes_nothing_and_keeps_the_inflight_slot() {
    let sb = sandbox(2).await;
    let knobs = Knobs {
        lease: Arc::new(Revoked),
        ..Knobs::default()
    };
    let h = Harness::start(&sb.dir().join("j.redb"), &sb, knobs).await;
    h.become_leader(1).await;
    h.discover(endpoints(&sb)).await;
    h.feed("01-basic", true).await;
    wait_for("deposed", Duration::from_secs(20), || {
        h.deployer.stats.deposed.load(Ordering::Relaxed) >= 1
    })
    .await;
    for pod in &sb.pods() {
        assert_eq!(
            writes(&requests(pod).await),
            vec![],
            "deposed leader wrote to {}",
            pod.name
        );
    }
    assert_eq!(
        h.journal.queue(Queue::DeployInflight).unwrap().len(),
        1,
        "left for the next term"
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployer_drain_cancels_an_overlong_deployment_and_journals_it() {
    let sb = sandbox(2).await;
    let h = Harness::start(&sb.dir().join("j.redb"), &sb, Knobs::default()).await;
    let pods = sb.pods();
    for pod in &pods {
        fault(
            pod,
            json!({"method":"GET","path":"configuration/raw$","delay_ms":5000}),
        )
        .await;
    }
    h.become_leader(1).await;
    h.discover(endpoints(&sb)).await;
    h.feed("01-basic", true).await;
    wait_for("in flight", Duration::from_secs(20), || {
        !h.journal.queue(Queue::DeployInflight).unwrap().is_empty()
    })
    .await;
    h.scheduler.drain(Duration::from_millis(300)).await;
    // The cancelled deployment keeps its slot for the next leader (J2, J9; drain.rs).
    assert_eq!(h.journal.queue(Queue::DeployInflight).unwrap().len(), 1);
    h.settle().await;
    assert!(
        h.events().iter().any(
            |e| matches!(e, Event::DeploymentCancelRequest { reason, .. } if reason == "drain")
        )
    );
    // While drained no new deployment starts; the request waits in the journal's pending slot.
    h.feed("02-maps", true).await;
    h.settle().await;
    let scheduled = h
        .events()
        .iter()
        .filter(|e| matches!(e, Event::DeploymentScheduled { .. }))
        .count();
    assert_eq!(scheduled, 1);
    assert_eq!(h.journal.queue(Queue::DeployPending).unwrap().len(), 1);
    h.stop().await;
}
