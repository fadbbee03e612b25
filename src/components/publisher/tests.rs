//! Table-driven tests of the pure core: routing, retry policy, throttle, status merge.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use haptic_journal::{
    Checksum, ConfigIdentity, Correlation, DeploymentId, Endpoint, Event, GateVerdict, PodRef,
    PodStatusChange, RuntimeConfigRef, Seq, SyncMetadata, UnixMillis, WorkItem,
};

use super::decide::{self, Effect, Retry, RetryPolicy, RouterState};
use crate::core::ErrorKind;
use crate::k8s::writer::PodStatusInput;

fn state() -> RouterState {
    RouterState::new(
        ConfigIdentity {
            name: "edge".into(),
            namespace: "ns".into(),
            source_uid: None,
            source_generation: None,
        },
        RuntimeConfigRef {
            namespace: "ns".into(),
            name: "edge-haproxycfg".into(),
        },
    )
}

fn sum(n: u8) -> Checksum {
    Checksum([n; 32])
}

fn pod(name: &str) -> PodRef {
    PodRef {
        namespace: "ns".into(),
        name: name.into(),
    }
}

fn items(effects: Vec<Effect>) -> Vec<WorkItem> {
    effects
        .into_iter()
        .filter_map(|e| match e {
            Effect::Enqueue(i) => Some(*i),
            Effect::ClearCaches => None,
        })
        .collect()
}

fn rendered(render: Checksum) -> Event {
    Event::TemplateRendered {
        correlation: Correlation::new("r"),
        render,
        config_bytes: 1,
        auxiliary_file_count: 0,
        duration_ms: 1,
        trigger_reason: "t".into(),
        coalescible: true,
    }
}

fn gate(render: Checksum, verdict: GateVerdict) -> Event {
    Event::RenderGateCompleted {
        correlation: Correlation::new("g"),
        render,
        verdict,
        messages: vec!["m".into()],
        pinned_to: None,
    }
}

#[test]
fn a_pass_queues_verdict_and_publication_with_the_render_seq() {
    let mut s = state();
    assert!(decide::route(&mut s, Seq(3), UnixMillis(100), &rendered(sum(1))).is_empty());
    let out = items(decide::route(
        &mut s,
        Seq(5),
        UnixMillis(200),
        &gate(sum(1), GateVerdict::Pass),
    ));
    assert_eq!(out.len(), 2);
    let WorkItem::Verdict(v) = &out[0] else {
        panic!()
    };
    assert!(v.passed && !v.pinned);
    let WorkItem::Publish(p) = &out[1] else {
        panic!()
    };
    assert_eq!(
        (p.render_seq, p.rendered_at, p.validated_at),
        (Seq(3), UnixMillis(100), UnixMillis(200))
    );
}

#[test]
fn a_fail_pins_and_queues_only_the_verdict() {
    let mut s = state();
    let out = items(decide::route(
        &mut s,
        Seq(5),
        UnixMillis(1),
        &gate(sum(2), GateVerdict::Fail),
    ));
    assert_eq!(out.len(), 1);
    assert!(matches!(&out[0], WorkItem::Verdict(v) if !v.passed && v.pinned));
    assert!(s.pinned);
}

#[test]
fn deploy_requests_and_validation_failures_are_queued() {
    let mut s = state();
    let rc = s.runtime_config.clone();
    let out = items(decide::route(
        &mut s,
        Seq(9),
        UnixMillis(1),
        &Event::DeployedConfigPublishRequest {
            correlation: Correlation::new("d"),
            deployment: DeploymentId::new("d1"),
            render: sum(1),
            runtime_config: rc.clone(),
        },
    ));
    assert!(matches!(&out[..], [WorkItem::PublishDeployed(d)] if d.render_seq == Seq(9)));
    let out = items(decide::route(
        &mut s,
        Seq(10),
        UnixMillis(1),
        &Event::ValidationFailed {
            correlation: Correlation::new("v"),
            render: Some(sum(3)),
            errors: vec!["e".into()],
            duration_ms: 1,
            trigger_reason: "t".into(),
        },
    ));
    assert!(matches!(&out[..], [WorkItem::Invalid(i)] if i.errors.len() == 1));
}

#[test]
fn discovery_removes_pods_that_left_and_an_unsynced_empty_set_removes_nothing() {
    let mut s = state();
    let rc = s.runtime_config.clone();
    for p in ["a", "b"] {
        decide::route(
            &mut s,
            Seq(1),
            UnixMillis(1),
            &Event::ConfigAppliedToPod {
                correlation: Correlation::new("c"),
                runtime_config: rc.clone(),
                pod: pod(p),
                checksum: sum(1),
                is_drift_check: false,
                sync: SyncMetadata::default(),
            },
        );
    }
    let disc = |eps: Vec<&str>, authoritative| Event::HAProxyPodsDiscovered {
        correlation: Correlation::new("d"),
        endpoints: eps
            .into_iter()
            .map(|n| Endpoint {
                url: format!("http://{n}:5555").into(),
                pod: pod(n),
                detected_version: None,
            })
            .collect(),
        authoritative,
    };
    assert!(decide::route(&mut s, Seq(2), UnixMillis(1), &disc(vec![], false)).is_empty());
    let out = items(decide::route(
        &mut s,
        Seq(3),
        UnixMillis(1),
        &disc(vec!["a"], true),
    ));
    assert!(
        matches!(&out[..], [WorkItem::Status(st)] if st.pod.name.as_str() == "b" && st.change == PodStatusChange::Removed)
    );
    let out = items(decide::route(
        &mut s,
        Seq(4),
        UnixMillis(1),
        &disc(vec![], true),
    ));
    assert_eq!(out.len(), 1);
}

#[test]
fn lost_leadership_clears_caches() {
    let mut s = state();
    decide::route(&mut s, Seq(1), UnixMillis(1), &rendered(sum(1)));
    let out = decide::route(
        &mut s,
        Seq(2),
        UnixMillis(1),
        &Event::LostLeadership {
            correlation: Correlation::new("l"),
            identity: "x".into(),
            reason: "lease_lost".into(),
        },
    );
    assert_eq!(out, vec![Effect::ClearCaches]);
    // The render's seq is forgotten: a later gate uses its own.
    let out = items(decide::route(
        &mut s,
        Seq(7),
        UnixMillis(1),
        &gate(sum(1), GateVerdict::Pass),
    ));
    assert!(matches!(&out[1], WorkItem::Publish(p) if p.render_seq == Seq(7)));
}

#[test]
fn retry_policy_is_bounded_and_honours_retry_after() {
    let p = RetryPolicy {
        initial: Duration::from_millis(100),
        max_delay: Duration::from_secs(2),
        max_attempts: 5,
    };
    let cases = [
        (
            ErrorKind::Retryable,
            1,
            None,
            Retry::After(Duration::from_millis(100)),
        ),
        (
            ErrorKind::Retryable,
            3,
            None,
            Retry::After(Duration::from_millis(400)),
        ),
        (
            ErrorKind::Retryable,
            4,
            None,
            Retry::After(Duration::from_millis(800)),
        ),
        (
            ErrorKind::Conflict,
            2,
            None,
            Retry::After(Duration::from_millis(200)),
        ),
        (
            ErrorKind::Retryable,
            1,
            Some(Duration::from_secs(1)),
            Retry::After(Duration::from_secs(1)),
        ),
        (
            ErrorKind::Retryable,
            1,
            Some(Duration::from_secs(60)),
            Retry::After(Duration::from_secs(2)),
        ),
        (ErrorKind::Retryable, 5, None, Retry::GiveUp),
        (ErrorKind::Fatal, 1, None, Retry::GiveUp),
    ];
    for (kind, attempt, ra, want) in cases {
        assert_eq!(
            decide::on_failure(&p, kind, attempt, ra),
            want,
            "{kind:?} {attempt} {ra:?}"
        );
    }
    let big = RetryPolicy {
        max_attempts: 100,
        ..p
    };
    assert_eq!(
        decide::on_failure(&big, ErrorKind::Retryable, 60, None),
        Retry::After(Duration::from_secs(2))
    );
}

#[test]
fn throttle_is_leading_edge() {
    let t0 = Instant::now();
    let i = Duration::from_secs(5);
    assert_eq!(decide::throttle_wait(i, None, t0), None);
    assert_eq!(
        decide::throttle_wait(i, Some(t0), t0 + Duration::from_secs(2)),
        Some(Duration::from_secs(3))
    );
    assert_eq!(
        decide::throttle_wait(i, Some(t0), t0 + Duration::from_secs(5)),
        None
    );
    assert_eq!(decide::throttle_wait(Duration::ZERO, Some(t0), t0), None);
}

#[test]
fn merge_keeps_deployed_at_on_failure_and_counts_errors() {
    let input = |error: Option<&str>, at: u64| PodStatusInput {
        pod: "a".into(),
        namespace: "ns".into(),
        change: PodStatusChange::Applied {
            checksum: sum(1),
            is_drift_check: false,
            sync: SyncMetadata {
                error: error.map(str::to_owned),
                ..SyncMetadata::default()
            },
            observed_at: UnixMillis(at),
        },
    };
    let first_fail = decide::merge_pod_entry(None, &input(Some("x"), 1_000));
    assert!(first_fail.deployed_at.is_none());
    assert_eq!(first_fail.consecutive_errors, Some(1));
    let ok = decide::merge_pod_entry(Some(&first_fail), &input(None, 2_000));
    assert!(ok.deployed_at.is_some() && ok.last_error.is_none());
    assert_eq!(ok.consecutive_errors, Some(0));
    let fail = decide::merge_pod_entry(Some(&ok), &input(Some("y"), 3_000));
    assert_eq!(fail.deployed_at, ok.deployed_at);
    assert_eq!(fail.consecutive_errors, Some(1));
    assert!(fail.last_error_at.is_some());
}
