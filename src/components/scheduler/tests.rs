//! Table-driven `decide` tests: one per seed row and upstream case (reference §5, DESIGN §3).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use haptic_journal::{
    Checksum, Correlation, DeployRequest, DeploymentCause, DeploymentId, Endpoint, EndpointApplied,
    EndpointUrl, InFlightDeployment, PodRef, RuntimeConfigRef, Term, UnixMillis,
};
use std::time::Instant;

use super::*;

fn render(n: u8) -> Checksum {
    Checksum::of(&[n])
}

fn ep(n: u8) -> Endpoint {
    Endpoint {
        url: EndpointUrl::new(format!("http://10.0.0.{n}:5555")),
        pod: PodRef {
            namespace: "ns".into(),
            name: format!("haproxy-{n}").into(),
        },
        detected_version: None,
    }
}

fn rc() -> RuntimeConfigRef {
    RuntimeConfigRef {
        namespace: "ns".into(),
        name: "cfg-haproxycfg".into(),
    }
}

fn validated(n: u8) -> Input {
    Input::Validated {
        render: render(n),
        correlation: Correlation::new(format!("v{n}")),
        trigger_reason: "configmap_changed".into(),
    }
}

/// A drift check (correlation `drift`).
fn drift() -> Input {
    Input::Drift {
        correlation: Correlation::new("drift"),
    }
}

/// A discovery of `endpoints`.
fn discovered(endpoints: Vec<Endpoint>) -> Input {
    Input::PodsDiscovered { endpoints }
}

/// The default settings with quarantine retries after `initial`, doubling up to `max`.
fn quarantine_settings(initial: Duration, max: Duration) -> SchedulerSettings {
    SchedulerSettings {
        quarantine_retry_initial: initial,
        quarantine_retry_max: max,
        ..SchedulerSettings::default()
    }
}

/// A restart's recovery from `s`'s checkpoint alone (nothing pending, nothing in flight).
fn recovered_from(s: &SchedulerState) -> Input {
    Input::Recovered {
        checkpoint: Some(s.checkpoint()),
        pending: None,
        inflight: None,
        applied: Vec::new(),
    }
}

/// A leader with a runtime config and pods 1..=k.
fn leader(k: u8) -> (SchedulerState, Instant) {
    leader_with(SchedulerSettings::default(), k)
}

/// [`leader`] with `settings`.
fn leader_with(settings: SchedulerSettings, k: u8) -> (SchedulerState, Instant) {
    let mut s = SchedulerState::new(settings, "d");
    let t0 = Instant::now();
    decide(&mut s, Input::RuntimeConfig(rc()), t0);
    decide(&mut s, Input::BecameLeader { term: Term(1) }, t0);
    decide(&mut s, discovered((1..=k).map(ep).collect()), t0);
    (s, t0)
}

fn started(fx: &[Effect]) -> Option<&DeployRequest> {
    fx.iter().find_map(|e| match e {
        Effect::Start { request, .. } => Some(request),
        _ => None,
    })
}

fn pending_written(fx: &[Effect]) -> Option<&DeployRequest> {
    fx.iter().find_map(|e| match e {
        Effect::PersistPending(r) => Some(r),
        _ => None,
    })
}

/// Asserts that `fx` neither starts a deployment nor writes a pending one.
#[track_caller]
fn assert_starts_nothing(fx: &[Effect]) {
    assert!(
        started(fx).is_none() && pending_written(fx).is_none(),
        "{fx:?}"
    );
}

/// Asserts that a tick at `at` starts nothing.
#[track_caller]
fn assert_tick_starts_nothing(s: &mut SchedulerState, at: Instant) {
    assert!(started(&decide(s, Input::Tick, at)).is_none());
}

/// Asserts that a tick 1 ms before `at` starts nothing.
#[track_caller]
fn assert_no_start_before(s: &mut SchedulerState, at: Instant) {
    assert_tick_starts_nothing(s, at - Duration::from_millis(1));
}

fn complete_all(s: &mut SchedulerState, req: &DeployRequest, now: Instant) -> Vec<Effect> {
    for e in &req.endpoints {
        decide(
            s,
            Input::InstanceDeployed {
                deployment: req.deployment.clone(),
                endpoint: e.url.clone(),
            },
            now,
        );
    }
    decide(
        s,
        Input::Completed {
            deployment: req.deployment.clone(),
        },
        now,
    )
}

/// The request of the deployment `validated(n)` starts at `now`.
fn start_validated(s: &mut SchedulerState, n: u8, now: Instant) -> DeployRequest {
    started(&decide(s, validated(n), now)).unwrap().clone()
}

/// Starts the deployment of `validated(n)` at `now` and completes it on every endpoint; returns
/// its request.
fn deploy_all(s: &mut SchedulerState, n: u8, now: Instant) -> DeployRequest {
    let req = start_validated(s, n, now);
    complete_all(s, &req, now);
    req
}

/// Reports each `(pod, retryable)` of `req` failed (a 400 rejection's message), then the
/// deployment completed; returns the completion's effects.
fn fail_then_complete(
    s: &mut SchedulerState,
    req: &DeployRequest,
    pods: &[(u8, bool)],
    now: Instant,
) -> Vec<Effect> {
    for &(n, retryable) in pods {
        decide(
            s,
            Input::InstanceFailed {
                deployment: req.deployment.clone(),
                endpoint: ep(n).url,
                retryable,
                error: "dataplane rejected the configuration with status 400: [ALERT] x".into(),
            },
            now,
        );
    }
    decide(
        s,
        Input::Completed {
            deployment: req.deployment.clone(),
        },
        now,
    )
}

/// Reports `deployed` pods of `req` deployed, then [`fail_then_complete`] with `failed`;
/// returns the completion's effects.
fn settle(
    s: &mut SchedulerState,
    req: &DeployRequest,
    deployed: &[u8],
    failed: &[(u8, bool)],
    now: Instant,
) -> Vec<Effect> {
    for &n in deployed {
        decide(
            s,
            Input::InstanceDeployed {
                deployment: req.deployment.clone(),
                endpoint: ep(n).url,
            },
            now,
        );
    }
    fail_then_complete(s, req, failed, now)
}

/// A quarantine of render `n`, rejected once, retried far in the future.
fn quarantine_of(n: u8, message: &str) -> Quarantine {
    Quarantine {
        render: render(n),
        message: message.into(),
        attempts: 1,
        next_retry_at: UnixMillis(u64::MAX / 2),
    }
}

/// The quarantine retry requests `fx` starts.
fn quarantine_retry(fx: &[Effect]) -> Option<&DeployRequest> {
    started(fx).filter(|r| r.reason.cause == DeploymentCause::QuarantineRetry)
}

/// The `Quarantined` effects of `fx`: (pod number's URL, attempts, next retry).
fn quarantined_fx(fx: &[Effect]) -> Vec<(EndpointUrl, u32, UnixMillis)> {
    fx.iter()
        .filter_map(|e| match e {
            Effect::Quarantined {
                endpoint,
                attempts,
                next_retry_at,
                ..
            } => Some((endpoint.url.clone(), *attempts, *next_retry_at)),
            _ => None,
        })
        .collect()
}

/// Issue 27: a quarantined render is retried after the drift interval, then at a doubling pace
/// up to the cap, to the rejecting pod only (`quarantine_retry`); each rejection is an
/// `Effect::Quarantined` naming the attempt and the next retry's wall-clock time, and the timer
/// is armed for it; an acceptance ends the quarantine.
#[test]
fn a_quarantined_render_is_retried_at_a_doubling_pace_up_to_the_cap() {
    let initial = Duration::from_secs(60);
    let settings = quarantine_settings(initial, Duration::from_secs(200));
    let (mut s, t0) = leader_with(settings, 2);
    let req = start_validated(&mut s, 1, t0);
    let fx = settle(&mut s, &req, &[1], &[(2, false)], t0);
    let first_retry = t0 + initial;
    assert_eq!(
        quarantined_fx(&fx),
        vec![(ep(2).url, 1, s.wall(first_retry))],
        "{fx:?}"
    );
    assert!(fx.contains(&Effect::ArmTimer(first_retry)), "{fx:?}");
    assert!(s.quarantined(&ep(2).url, &render(1)));
    // Each rejection in a row doubles the wait, capped: 60 s, 120 s, 200 s, 200 s.
    let mut at = t0;
    for (attempt, delay) in [(2u32, 120u64), (3, 200), (4, 200)] {
        let due = s.instant(s.rejected[&ep(2).url].next_retry_at, at);
        let before = due - Duration::from_millis(1);
        assert!(
            started(&decide(&mut s, Input::Tick, before)).is_none(),
            "retried before its time (attempt {attempt})"
        );
        let fx = decide(&mut s, Input::Tick, due);
        let retry = quarantine_retry(&fx).expect("quarantine retry").clone();
        assert_eq!(retry.endpoints, vec![ep(2)], "only the rejecting pod");
        assert_eq!(retry.render, render(1));
        at = due + Duration::from_secs(1);
        fail_then_complete(&mut s, &retry, &[(2, false)], at);
        let q = &s.rejected[&ep(2).url];
        assert_eq!(q.attempts, attempt);
        assert_eq!(q.next_retry_at, s.wall(at + Duration::from_secs(delay)));
        assert!(!s.backoff.contains_key(&ep(2).url));
    }
    // The pod accepts the next retry: the quarantine ends, the skip cache knows it.
    let due = s.instant(s.rejected[&ep(2).url].next_retry_at, at);
    let retry = quarantine_retry(&decide(&mut s, Input::Tick, due))
        .unwrap()
        .clone();
    complete_all(&mut s, &retry, due);
    assert!(s.rejected.is_empty());
    assert_eq!(s.applied.get(&ep(2).url), Some(&render(1)));
    assert_tick_starts_nothing(&mut s, due + Duration::from_secs(3600));
}

/// Issue 27 (J11): the quarantine's retry time is journaled wall-clock time. A restart before
/// it neither retries at once nor forgets it; a restart after a retry started (the checkpoint
/// of the start moved the schedule one step on) does not retry again at once either; a retry
/// that ends without a verdict (a 5xx) waits for that step, not the failure backoff.
#[test]
fn a_quarantine_retry_time_survives_a_restart() {
    let settings = quarantine_settings(Duration::from_secs(60), Duration::from_secs(3600));
    let (mut s, t0) = leader_with(settings.clone(), 1);
    let req = start_validated(&mut s, 1, t0);
    fail_then_complete(&mut s, &req, &[(1, false)], t0);
    let due = t0 + Duration::from_secs(60);
    // Killed 30 s later; the new process's clocks: its instants start anew, wall time goes on.
    let restart = t0 + Duration::from_secs(30);
    let restarted = |s: &SchedulerState, at: Instant| {
        let mut r = SchedulerState::new(settings.clone(), "d2");
        r.wall_anchor = Some((at, s.wall(at)));
        decide(&mut r, recovered_from(s), at);
        decide(&mut r, Input::RuntimeConfig(rc()), at);
        r
    };
    let mut r = restarted(&s, restart);
    let fx = decide(&mut r, Input::BecameLeader { term: Term(2) }, restart);
    assert!(
        started(&fx).is_none(),
        "retried at once after a restart: {fx:?}"
    );
    assert!(fx.contains(&Effect::ArmTimer(due)), "{fx:?}");
    assert_no_start_before(&mut r, due);
    let fx = decide(&mut r, Input::Tick, due);
    let retry = quarantine_retry(&fx).expect("retried at its time").clone();
    // Killed while the retry runs: the checkpoint journaled with its start holds the next step.
    let q = &r.rejected[&ep(1).url];
    assert_eq!(q.attempts, 1);
    assert_eq!(q.next_retry_at, r.wall(due + Duration::from_secs(120)));
    let mut r2 = restarted(&r, due + Duration::from_secs(1));
    let fx = decide(
        &mut r2,
        Input::BecameLeader { term: Term(3) },
        due + Duration::from_secs(1),
    );
    assert!(quarantine_retry(&fx).is_none(), "{fx:?}");
    // The retry fails with a 5xx (no verdict): no failure backoff, the next step holds, and
    // the status is told the pod is still quarantined (its report was a plain failure).
    let fx = fail_then_complete(&mut r, &retry, &[(1, true)], due + Duration::from_secs(2));
    assert_eq!(
        quarantined_fx(&fx),
        vec![(ep(1).url, 1, r.wall(due + Duration::from_secs(120)))]
    );
    assert!(!r.backoff.contains_key(&ep(1).url));
    assert!(r.quarantined(&ep(1).url, &render(1)));
    let next = due + Duration::from_secs(120);
    assert_no_start_before(&mut r, next);
    assert!(quarantine_retry(&decide(&mut r, Input::Tick, next)).is_some());
}

#[test]
fn validation_completed_persists_then_starts_a_deployment_to_every_endpoint() {
    let (mut s, t0) = leader(3);
    let fx = decide(&mut s, validated(1), t0);
    let p = pending_written(&fx).expect("pending slot written first");
    let r = started(&fx).expect("started");
    assert_eq!(p, r);
    assert!(
        matches!(fx[0], Effect::PersistPending(_)),
        "journal before acting: {fx:?}"
    );
    assert!(matches!(
        fx[1],
        Effect::Start {
            from_pending: true,
            ..
        }
    ));
    assert_eq!(r.endpoints.len(), 3);
    assert_eq!(r.reason.as_str(), "config_validation");
    assert_eq!(r.render, render(1));
    assert_eq!(s.phase_name(t0), "deploying");
}

#[test]
fn validation_is_skipped_when_every_endpoint_already_runs_the_checksum() {
    let (mut s, t0) = leader(2);
    let fx = decide(&mut s, validated(1), t0);
    let r = started(&fx).unwrap().clone();
    complete_all(&mut s, &r, t0);
    let t1 = t0 + Duration::from_secs(10);
    let fx = decide(&mut s, validated(1), t1);
    assert_starts_nothing(&fx);
    // ... unless it is a drift reconciliation.
    let fx = decide(
        &mut s,
        Input::Validated {
            render: render(1),
            correlation: Correlation::new("d"),
            trigger_reason: DRIFT_TRIGGER_REASON.into(),
        },
        t1,
    );
    let r = started(&fx).expect("drift bypasses the skip cache");
    assert_eq!(r.reason.as_str(), "drift_prevention");
    assert_eq!(r.endpoints.len(), 2);
}

/// A changed `--config-name` (issue 15): the new HAProxyCfg's status names no pod, so the
/// skip cache is dropped and every endpoint gets the last validated render again (the deployer
/// then writes nothing a pod runs, and each pod reports to the new HAProxyCfg); the same
/// HAProxyCfg named again changes nothing.
#[test]
fn another_runtime_config_redeploys_the_last_render_to_every_endpoint() {
    let (mut s, t0) = leader(2);
    let r = start_validated(&mut s, 1, t0);
    complete_all(&mut s, &r, t0);
    let t1 = t0 + Duration::from_secs(10);
    assert!(decide(&mut s, Input::RuntimeConfig(rc()), t1).is_empty());
    let other = RuntimeConfigRef {
        namespace: "ns".into(),
        name: "new-haproxycfg".into(),
    };
    let fx = decide(&mut s, Input::RuntimeConfig(other.clone()), t1);
    let r = started(&fx).expect("a deployment for the new HAProxyCfg");
    assert_eq!(r.runtime_config, other);
    assert_eq!(r.render, render(1));
    assert_eq!(r.endpoints.len(), 2);
    assert!(s.applied.is_empty(), "skip cache dropped");
}

#[test]
fn no_endpoints_or_no_runtime_config_or_follower_deploys_nothing() {
    let mut s = SchedulerState::new(SchedulerSettings::default(), "d");
    let t0 = Instant::now();
    decide(&mut s, Input::RuntimeConfig(rc()), t0);
    decide(&mut s, Input::BecameLeader { term: Term(1) }, t0);
    assert!(decide(&mut s, validated(1), t0).is_empty(), "no endpoints");
    let mut f = SchedulerState::new(SchedulerSettings::default(), "d");
    decide(&mut f, Input::RuntimeConfig(rc()), t0);
    decide(&mut f, discovered(vec![ep(1)]), t0);
    let fx = decide(&mut f, validated(1), t0);
    assert!(
        started(&fx).is_none(),
        "a follower only keeps the pending slot"
    );
    assert!(pending_written(&fx).is_some());
    let fx = decide(&mut f, Input::BecameLeader { term: Term(2) }, t0);
    assert!(
        started(&fx).is_some(),
        "leader starts the journaled pending request"
    );
}

#[test]
fn in_progress_queueing_latest_wins_then_rate_limit() {
    let (mut s, t0) = leader(1);
    let r1 = start_validated(&mut s, 1, t0);
    // Two renders arrive while deploying: only the latest stays pending.
    let fx = decide(&mut s, validated(2), t0 + Duration::from_millis(100));
    assert!(started(&fx).is_none(), "waits for the running deployment");
    let fx = decide(&mut s, validated(3), t0 + Duration::from_millis(200));
    assert_eq!(pending_written(&fx).unwrap().render, render(3));
    assert_eq!(s.pending.as_ref().unwrap().render, render(3));
    // Completion: the pending one waits for the rate limit (2 s from the end).
    let t_end = t0 + Duration::from_secs(1);
    let fx = complete_all(&mut s, &r1, t_end);
    assert!(started(&fx).is_none());
    assert!(
        fx.contains(&Effect::ArmTimer(t_end + Duration::from_secs(2))),
        "{fx:?}"
    );
    assert_eq!(s.phase_name(t_end), "rate_limiting");
    assert_tick_starts_nothing(&mut s, t_end + Duration::from_millis(1999));
    let fx = decide(&mut s, Input::Tick, t_end + Duration::from_secs(2));
    let r = started(&fx).expect("released after the interval");
    assert_eq!(r.render, render(3));
    assert!(s.pending.is_none());
}

#[test]
fn first_deployment_has_no_rate_limit_and_a_completion_far_in_the_past_neither() {
    let (mut s, t0) = leader(1);
    deploy_all(&mut s, 1, t0);
    let fx = decide(&mut s, validated(2), t0 + Duration::from_secs(5));
    assert!(started(&fx).is_some());
}

#[test]
fn stale_completion_is_ignored() {
    let (mut s, t0) = leader(1);
    let r1 = start_validated(&mut s, 1, t0);
    let fx = decide(
        &mut s,
        Input::Completed {
            deployment: DeploymentId::new("someone-else"),
        },
        t0,
    );
    assert!(started(&fx).is_none());
    assert_eq!(s.phase_name(t0), "deploying");
    assert!(
        matches!(&s.phase, Phase::Deploying { request, .. } if request.deployment == r1.deployment)
    );
}

#[test]
fn timeout_cancels_and_retries_the_same_render_at_most_three_times_then_gives_up() {
    let (mut s, t0) = leader(2);
    let r = start_validated(&mut s, 1, t0);
    // Endpoint 1 finished, endpoint 2 hangs.
    decide(
        &mut s,
        Input::InstanceDeployed {
            deployment: r.deployment.clone(),
            endpoint: ep(1).url,
        },
        t0,
    );
    let mut now = t0;
    let mut last = r.clone();
    for attempt in 1..=3 {
        now += Duration::from_secs(30);
        let fx = decide(&mut s, Input::Tick, now);
        assert_eq!(
            fx[0],
            Effect::Cancel {
                deployment: last.deployment.clone(),
                correlation: last.correlation.clone()
            },
            "attempt {attempt}: {fx:?}"
        );
        let retry = started(&fx).expect("retried").clone();
        assert_eq!(retry.reason.as_str(), "config_validation_timeout_retry");
        assert_eq!(retry.render, render(1));
        if attempt == 1 {
            assert_eq!(retry.endpoints, vec![ep(2)], "only unfinished endpoints");
        }
        last = retry;
    }
    now += Duration::from_secs(30);
    let fx = decide(&mut s, Input::Tick, now);
    assert!(matches!(fx[0], Effect::Cancel { .. }));
    assert!(started(&fx).is_none(), "no fourth retry: {fx:?}");
    assert!(
        fx.iter()
            .any(|e| matches!(e, Effect::GiveUp { endpoints, .. } if endpoints == &vec![ep(2)]))
    );
    // A re-validation of the same render does not retry the given-up pod...
    assert!(started(&decide(&mut s, validated(1), now)).is_none());
    // ...a drift check does.
    assert!(started(&decide(&mut s, drift(), now)).is_some());
}

#[test]
fn timeout_prefers_the_pending_slot_with_the_retry_suffix() {
    let (mut s, t0) = leader(1);
    started(&decide(&mut s, validated(1), t0)).unwrap();
    decide(&mut s, validated(2), t0 + Duration::from_secs(1));
    let fx = decide(&mut s, Input::Tick, t0 + Duration::from_secs(30));
    let r = started(&fx).unwrap();
    assert_eq!(r.render, render(2));
    assert_eq!(r.reason.as_str(), "config_validation_timeout_retry");
    assert!(matches!(
        fx[1],
        Effect::Start {
            from_pending: true,
            ..
        }
    ));
}

/// Issue 27: a drift check that times out while a new render is pending: the retry deploys
/// the render as a render (`config_validation_timeout_retry`, no drift run), to the pending
/// request's pods and to the drift check's unfinished ones.
#[test]
fn a_timed_out_drift_check_retries_the_pending_render_under_its_own_cause() {
    let (mut s, t0) = leader(3);
    deploy_all(&mut s, 1, t0);
    let t1 = t0 + Duration::from_secs(10);
    let drift = started(&decide(&mut s, drift(), t1))
        .expect("a drift check starts")
        .clone();
    assert_eq!(drift.reason.as_str(), "drift_prevention");
    // Pod 1 finishes the drift check; pods 2 and 3 hang. Meanwhile render 2 arrives, pending
    // for pod 2 only (as a pod-scoped request would be).
    decide(
        &mut s,
        Input::InstanceDeployed {
            deployment: drift.deployment.clone(),
            endpoint: ep(1).url,
        },
        t1,
    );
    decide(&mut s, validated(2), t1 + Duration::from_secs(1));
    s.pending.as_mut().unwrap().endpoints = vec![ep(2)];
    let fx = decide(
        &mut s,
        Input::Tick,
        t1 + SchedulerSettings::default().deployment_timeout,
    );
    let retry = started(&fx).expect("retried").clone();
    assert_eq!(retry.render, render(2));
    assert_eq!(
        retry.reason.as_str(),
        "config_validation_timeout_retry",
        "named by the pending render's cause, not the drift check's"
    );
    let mut urls: Vec<_> = retry.endpoints.iter().map(|e| e.url.clone()).collect();
    urls.sort();
    assert_eq!(
        urls,
        vec![ep(2).url, ep(3).url],
        "the pending pod and the drift check's unfinished pod 3"
    );
}

#[test]
fn rate_limiting_is_never_timed_out() {
    // A rate-limit wait longer than the deployment timeout (issue 27: the old version ticked
    // 1 s in, before any timeout could fire, so it could not fail).
    let settings = SchedulerSettings {
        min_deployment_interval: Duration::from_secs(90),
        deployment_timeout: Duration::from_secs(30),
        ..SchedulerSettings::default()
    };
    let (mut s, t0) = leader_with(settings, 1);
    deploy_all(&mut s, 1, t0);
    decide(&mut s, validated(2), t0);
    for after in [1, 31, 60, 89] {
        let fx = decide(&mut s, Input::Tick, t0 + Duration::from_secs(after));
        assert!(
            !fx.iter().any(|e| matches!(e, Effect::Cancel { .. })) && started(&fx).is_none(),
            "{after} s into the rate-limit wait: {fx:?}"
        );
        assert_eq!(
            s.phase_name(t0 + Duration::from_secs(after)),
            "rate_limiting"
        );
    }
    let fx = decide(&mut s, Input::Tick, t0 + Duration::from_secs(90));
    assert_eq!(started(&fx).map(|r| r.render), Some(render(2)));
}

/// Issue 27: a drift check that arrives while a rollout of the same render waits for the rate
/// limit joins it (every pod) without turning it into a drift run: the pods the rollout is for
/// never had the render, so a drift run would report them drifted (`DriftDetected`).
#[test]
fn a_drift_check_during_a_rate_limit_wait_keeps_the_rollouts_cause() {
    let (mut s, t0) = leader(2);
    deploy_all(&mut s, 1, t0);
    let fx = decide(&mut s, validated(2), t0);
    let rollout = pending_written(&fx).unwrap().clone();
    let fx = decide(&mut s, drift(), t0 + Duration::from_millis(500));
    let merged = pending_written(&fx)
        .expect("the drift check is queued")
        .clone();
    assert_eq!(merged.reason.cause, DeploymentCause::ConfigValidation);
    assert_eq!(merged.correlation, rollout.correlation);
    assert_eq!(merged.endpoints, vec![ep(1), ep(2)]);
    let fx = decide(&mut s, Input::Tick, t0 + Duration::from_secs(2));
    assert_eq!(
        started(&fx).map(|r| r.reason.cause),
        Some(DeploymentCause::ConfigValidation)
    );
}

#[test]
fn validation_failed_redeploys_the_last_good_render_to_current_endpoints() {
    let (mut s, t0) = leader(2);
    deploy_all(&mut s, 7, t0);
    let fx = decide(
        &mut s,
        Input::ValidationFailed {
            correlation: Correlation::new("bad8"),
        },
        t0 + Duration::from_secs(5),
    );
    let r = started(&fx).unwrap();
    assert_eq!(r.render, render(7), "pinned to the last good render");
    assert_eq!(r.reason.as_str(), "validation_fallback");
    assert_eq!(r.correlation, Correlation::new("bad8"));
    assert_eq!(r.endpoints.len(), 2);
    // Without a valid render, nothing.
    let (mut fresh, t) = leader(1);
    assert!(
        decide(
            &mut fresh,
            Input::ValidationFailed {
                correlation: Correlation::new("x")
            },
            t
        )
        .is_empty()
    );
}

#[test]
fn pod_discovery_deploys_only_to_new_or_changed_endpoints() {
    let (mut s, t0) = leader(2);
    deploy_all(&mut s, 1, t0);
    let t1 = t0 + Duration::from_secs(5);
    let fx = decide(&mut s, discovered(vec![ep(1), ep(2), ep(3)]), t1);
    let r = started(&fx).unwrap();
    assert_eq!(r.endpoints, vec![ep(3)]);
    assert_eq!(r.reason.as_str(), "pod_discovery");
    // Same set again: nothing new (after completion).
    let r = r.clone();
    complete_all(&mut s, &r, t1);
    let fx = decide(
        &mut s,
        discovered(vec![ep(1), ep(2), ep(3)]),
        t1 + Duration::from_secs(5),
    );
    assert_starts_nothing(&fx);
    // A pod replaced behind the same URL (new pod name) is redeployed.
    let mut moved = ep(2);
    moved.pod.name = "haproxy-2b".into();
    let fx = decide(
        &mut s,
        discovered(vec![ep(1), moved.clone(), ep(3)]),
        t1 + Duration::from_secs(10),
    );
    assert_eq!(started(&fx).unwrap().endpoints, vec![moved]);
}

#[test]
fn pod_terminated_drops_the_endpoint() {
    let (mut s, t0) = leader(2);
    decide(&mut s, Input::PodTerminated { pod: ep(2).pod }, t0);
    assert_eq!(s.endpoints, vec![ep(1)]);
    assert_eq!(
        started(&decide(&mut s, validated(1), t0))
            .unwrap()
            .endpoints,
        vec![ep(1)]
    );
}

#[test]
fn drift_checks_every_endpoint_without_the_skip_cache() {
    let (mut s, t0) = leader(3);
    deploy_all(&mut s, 1, t0);
    let fx = decide(&mut s, drift(), t0 + Duration::from_secs(60));
    let r = started(&fx).unwrap();
    assert_eq!(r.reason.cause, DeploymentCause::DriftPrevention);
    assert_eq!(r.endpoints.len(), 3);
    assert_eq!(r.render, render(1));
}

#[test]
fn failed_endpoints_retry_with_bounded_exponential_backoff_and_success_resets() {
    let (mut s, t0) = leader(2);
    let mut req = start_validated(&mut s, 1, t0);
    let mut now = t0;
    let mut delays = Vec::new();
    for _ in 0..9 {
        for e in &req.endpoints {
            let input = if e.url == ep(1).url {
                Input::InstanceDeployed {
                    deployment: req.deployment.clone(),
                    endpoint: e.url.clone(),
                }
            } else {
                Input::InstanceFailed {
                    deployment: req.deployment.clone(),
                    endpoint: e.url.clone(),
                    retryable: true,
                    error: "500".into(),
                }
            };
            decide(&mut s, input, now);
        }
        let fx = decide(
            &mut s,
            Input::Completed {
                deployment: req.deployment.clone(),
            },
            now,
        );
        let Some(Effect::ArmTimer(at)) = fx
            .iter()
            .find(|e| matches!(e, Effect::ArmTimer(_)))
            .cloned()
        else {
            panic!("no retry timer: {fx:?}");
        };
        let backoff = s.backoff[&ep(2).url].next_at - now;
        delays.push(backoff.as_secs());
        assert!(at >= now + backoff.min(Duration::from_secs(2)));
        now = s.backoff[&ep(2).url]
            .next_at
            .max(now + Duration::from_secs(2));
        let fx = decide(&mut s, Input::Tick, now);
        req = started(&fx)
            .expect("retry without waiting for drift")
            .clone();
        assert_eq!(req.endpoints, vec![ep(2)], "only the failed endpoint");
    }
    assert_eq!(delays, vec![1, 2, 4, 8, 16, 32, 60, 60, 60]);
    complete_all(&mut s, &req, now);
    assert!(s.backoff.is_empty(), "success resets the backoff");
    assert_eq!(s.applied.get(&ep(2).url), Some(&render(1)));
}

#[test]
fn lost_leadership_clears_the_phase_and_keeps_journaled_work_for_the_next_term() {
    let (mut s, t0) = leader(1);
    let r1 = start_validated(&mut s, 1, t0);
    decide(&mut s, validated(2), t0);
    let fx = decide(&mut s, Input::LostLeadership, t0);
    assert_eq!(fx, vec![Effect::StopExecutor]);
    assert_eq!(s.phase, Phase::Idle);
    assert!(s.pending.is_some(), "pending stays (it is journaled)");
    // Nothing starts while follower.
    assert!(decide(&mut s, Input::Tick, t0 + Duration::from_secs(100)).is_empty());
    // New term: the interrupted deployment resumes first (same id), then the pending one.
    let fx = decide(
        &mut s,
        Input::BecameLeader { term: Term(2) },
        t0 + Duration::from_secs(100),
    );
    assert_eq!(fx[0], Effect::Resume(r1.clone()));
    let fx = complete_all(&mut s, &r1, t0 + Duration::from_secs(101));
    assert!(started(&fx).is_none(), "rate limit");
    let fx = decide(&mut s, Input::Tick, t0 + Duration::from_secs(103));
    assert_eq!(started(&fx).unwrap().render, render(2));
}

#[test]
fn recovery_resumes_the_inflight_deployment_and_keeps_applied_state() {
    let t0 = Instant::now();
    let mut s = SchedulerState::new(SchedulerSettings::default(), "d2");
    let req = DeployRequest {
        deployment: DeploymentId::new("d1-4"),
        render: render(5),
        endpoints: vec![ep(1), ep(2)],
        runtime_config: rc(),
        reason: haptic_journal::DeploymentReason::parse("config_validation").unwrap(),
        correlation: Correlation::new("v5"),
    };
    decide(
        &mut s,
        Input::Recovered {
            checkpoint: None,
            pending: None,
            inflight: Some(InFlightDeployment {
                request: req.clone(),
                started_at: UnixMillis(1),
                term: Term(1),
            }),
            applied: vec![EndpointApplied {
                endpoint: ep(1).url,
                pod: ep(1).pod,
                render: render(5),
                config_version: None,
                reload_id: None,
                applied_at: UnixMillis(1),
            }],
        },
        t0,
    );
    assert_eq!(s.last_validated.as_ref().unwrap().0, render(5));
    let fx = decide(&mut s, Input::BecameLeader { term: Term(2) }, t0);
    assert_eq!(fx[0], Effect::Resume(req.clone()));
    complete_all(&mut s, &req, t0);
    assert_eq!(s.phase, Phase::Idle);
}

#[test]
fn became_leader_deploys_only_to_endpoints_not_known_to_run_the_render() {
    let mut s = SchedulerState::new(SchedulerSettings::default(), "d");
    let t0 = Instant::now();
    decide(&mut s, Input::RuntimeConfig(rc()), t0);
    decide(&mut s, discovered(vec![ep(1), ep(2)]), t0);
    s.applied.insert(ep(1).url, render(1));
    // Follower: the validation is kept as pending; becoming leader starts it with the targets.
    decide(&mut s, validated(1), t0);
    let fx = decide(&mut s, Input::BecameLeader { term: Term(3) }, t0);
    assert_eq!(started(&fx).unwrap().endpoints, vec![ep(2)]);
}

#[test]
fn backoff_is_bounded() {
    let st = SchedulerSettings::default();
    assert_eq!(backoff_delay(&st, 1), Duration::from_secs(1));
    assert_eq!(backoff_delay(&st, 3), Duration::from_secs(4));
    assert_eq!(backoff_delay(&st, 100), Duration::from_secs(60));
}

mod model {
    //! Property test: random input sequences (with "crash" steps that rebuild the state from
    //! what the journal would hold) keep the scheduler's invariants.
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Op {
        Validate(u8),
        Fail,
        Pods(u8),
        Drift,
        FinishOk,
        FinishErr,
        Stale,
        Advance(u16),
        Lose,
        Gain,
        Crash,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (1u8..4).prop_map(Op::Validate),
            Just(Op::Fail),
            (1u8..4).prop_map(Op::Pods),
            Just(Op::Drift),
            Just(Op::FinishOk),
            Just(Op::FinishErr),
            Just(Op::Stale),
            (1u16..40_000).prop_map(Op::Advance),
            Just(Op::Lose),
            Just(Op::Gain),
            Just(Op::Crash),
        ]
    }

    proptest! {
        #[test]
        fn at_most_one_deployment_runs_and_only_a_leader_starts_one(ops in proptest::collection::vec(op(), 1..60)) {
            let rt = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
            rt.block_on(async move {
                let (mut s, t0) = leader(2);
                let mut now = t0;
                let mut term = 1;
                // What the journal holds: pending slot and in-flight slot.
                let mut journal_pending: Option<DeployRequest> = None;
                let mut journal_inflight: Option<DeployRequest> = None;
                let mut running: Option<DeployRequest> = None;
                for op in ops {
                    let input = match op {
                        Op::Validate(n) => validated(n),
                        Op::Fail => Input::ValidationFailed { correlation: Correlation::new("f") },
                        Op::Pods(k) => Input::PodsDiscovered { endpoints: (1..=k).map(ep).collect() },
                        Op::Drift => Input::Drift { correlation: Correlation::new("d") },
                        Op::FinishOk | Op::FinishErr => {
                            let Some(r) = running.clone() else { continue };
                            for e in &r.endpoints {
                                let i = if matches!(op, Op::FinishOk) {
                                    Input::InstanceDeployed { deployment: r.deployment.clone(), endpoint: e.url.clone() }
                                } else {
                                    Input::InstanceFailed { deployment: r.deployment.clone(), endpoint: e.url.clone(), retryable: true, error: "500".into() }
                                };
                                decide(&mut s, i, now);
                            }
                            running = None;
                            journal_inflight = None;
                            Input::Completed { deployment: r.deployment }
                        }
                        Op::Stale => Input::Completed { deployment: DeploymentId::new("stale") },
                        Op::Advance(ms) => { now += Duration::from_millis(u64::from(ms)); Input::Tick }
                        Op::Lose => Input::LostLeadership,
                        Op::Gain => { term += 1; Input::BecameLeader { term: Term(term) } }
                        Op::Crash => {
                            s = SchedulerState::new(SchedulerSettings::default(), format!("c{term}"));
                            decide(&mut s, Input::RuntimeConfig(rc()), now);
                            running = None;
                            Input::Recovered {
                                checkpoint: None,
                                pending: journal_pending.clone(),
                                inflight: journal_inflight.clone().map(|request| InFlightDeployment { request, started_at: UnixMillis(0), term: Term(term) }),
                                applied: Vec::new(),
                            }
                        }
                    };
                    let was_leader = s.leader.is_some();
                    let fx = decide(&mut s, input, now);
                    for e in fx {
                        match e {
                            Effect::PersistPending(r) => journal_pending = Some(r),
                            Effect::Start { request, from_pending } => {
                                prop_assert!(s.leader.is_some(), "only a leader starts");
                                prop_assert!(running.is_none(), "two deployments at once");
                                prop_assert!(!request.endpoints.is_empty());
                                if from_pending { journal_pending = None; }
                                journal_inflight = Some(request.clone());
                                running = Some(request);
                            }
                            Effect::DropPending(_) => {
                                prop_assert!(journal_pending.is_some(), "a drop without a pending slot");
                                journal_pending = None;
                            }
                            Effect::Resume(request) => {
                                prop_assert!(running.is_none(), "resume while running");
                                prop_assert_eq!(Some(&request), journal_inflight.as_ref());
                                running = Some(request);
                            }
                            Effect::Cancel { deployment, .. } => {
                                prop_assert_eq!(running.as_ref().map(|r| &r.deployment), Some(&deployment));
                                running = None;
                                journal_inflight = None;
                            }
                            Effect::StopExecutor => {
                                prop_assert!(was_leader);
                                running = None;
                            }
                            Effect::GiveUp { .. } | Effect::ArmTimer(_) | Effect::Quarantined { .. } | Effect::Rollback { .. } => {}
                        }
                    }
                    // The in-memory phase agrees with the executor.
                    prop_assert_eq!(matches!(s.phase, Phase::Deploying { .. }), running.is_some());
                }
                Ok(())
            })?;
        }
    }
}

/// A permanent rejection (`retryable: false`) quarantines the (render, endpoint): no backoff
/// retry, no drift retry, none in a new term or after a restart (checkpoint), until an
/// operator's retry request, a pod change or a new render.
#[test]
fn a_permanent_rejection_is_quarantined_not_retried() {
    // The quarantine's own retry (issue 27) is far off here: see
    // `a_quarantined_render_is_retried_at_a_doubling_pace_up_to_the_cap`.
    let settings = quarantine_settings(Duration::from_secs(3600), Duration::from_secs(3600));
    let (mut s, t0) = leader_with(settings.clone(), 2);
    let fx = decide(&mut s, validated(1), t0);
    let req = started(&fx).expect("deployment started").clone();
    decide(
        &mut s,
        Input::InstanceDeployed {
            deployment: req.deployment.clone(),
            endpoint: ep(1).url,
        },
        t0,
    );
    decide(
        &mut s,
        Input::InstanceFailed {
            deployment: req.deployment.clone(),
            endpoint: ep(2).url,
            retryable: false,
            error: "[ALERT] parsing".into(),
        },
        t0,
    );
    decide(
        &mut s,
        Input::Completed {
            deployment: req.deployment.clone(),
        },
        t0,
    );
    assert!(s.quarantined(&ep(2).url, &render(1)));
    assert!(!s.backoff.contains_key(&ep(2).url));
    // Long past any backoff: nothing starts.
    let later = t0 + s.settings.backoff_max * 4;
    assert!(started(&decide(&mut s, Input::Tick, later)).is_none());
    // A drift check goes to the pod that took it only.
    let fx = decide(&mut s, drift(), later);
    let drift = started(&fx).expect("drift check").clone();
    assert_eq!(drift.endpoints, vec![ep(1)]);
    complete_all(&mut s, &drift, later);
    // The quarantine survives a restart (the checkpoint) and a new term.
    let mut r = SchedulerState::new(settings, "d2");
    r.wall_anchor = s.wall_anchor;
    decide(&mut r, recovered_from(&s), later);
    assert_eq!(r.rejected, s.rejected);
    assert_eq!(r.checkpoint(), s.checkpoint());
    let fx = decide(&mut r, Input::BecameLeader { term: Term(2) }, later);
    assert_starts_nothing(&fx);
    // The same render validated again: still quarantined.
    let fx = decide(&mut r, validated(1), later);
    assert_starts_nothing(&fx);
    // An operator's retry request clears it and deploys the render to that pod.
    let fx = decide(
        &mut r,
        Input::RetryRejected {
            correlation: Correlation::new("retry"),
        },
        later + Duration::from_secs(10),
    );
    let retry = started(&fx).or(pending_written(&fx)).expect("retried");
    assert_eq!(retry.endpoints, vec![ep(2)]);
    assert!(r.rejected.is_empty());
    // A new render is not quarantined, and drops the old quarantine.
    s.rejected
        .insert(ep(2).url, quarantine_of(1, "[ALERT] parsing"));
    let fx = decide(&mut s, validated(2), later + Duration::from_secs(20));
    let next = started(&fx).or(pending_written(&fx)).expect("new render");
    assert!(next.endpoints.contains(&ep(2)), "{next:?}");
    assert!(s.rejected.is_empty());
}

/// A pod change (a new pod behind the endpoint) clears its quarantine.
#[test]
fn a_pod_change_clears_the_quarantine() {
    let (mut s, t0) = leader(1);
    decide(&mut s, validated(1), t0);
    s.phase = Phase::Idle;
    s.pending = None;
    s.rejected.insert(ep(1).url, quarantine_of(1, "rejected"));
    let mut moved = ep(1);
    moved.pod.name = "haproxy-1-new".into();
    let fx = decide(
        &mut s,
        discovered(vec![moved.clone()]),
        t0 + Duration::from_secs(5),
    );
    assert!(s.rejected.is_empty());
    let req = started(&fx).or(pending_written(&fx)).expect("deployed");
    assert_eq!(req.endpoints, vec![moved]);
}

/// A request queued while the deployment that gets a rejection runs (a drift check, here) does
/// not send the render to the pod quarantined meanwhile; a retryable failure still backs off.
#[test]
fn a_pending_request_skips_a_pod_quarantined_meanwhile() {
    let (mut s, t0) = leader(3);
    let fx = decide(&mut s, validated(1), t0);
    let req = started(&fx).expect("deployment started").clone();
    let fx = decide(&mut s, drift(), t0);
    assert_eq!(pending_written(&fx).expect("queued").endpoints.len(), 3);
    settle(&mut s, &req, &[1], &[(2, false), (3, true)], t0);
    assert!(s.quarantined(&ep(2).url, &render(1)));
    assert!(!s.quarantined(&ep(3).url, &render(1)));
    assert!(
        s.backoff.contains_key(&ep(3).url),
        "a retryable failure backs off"
    );
    let later = t0 + s.settings.min_deployment_interval * 2;
    let fx = decide(&mut s, Input::Tick, later);
    let drift = started(&fx).expect("the queued drift check starts");
    assert_eq!(drift.endpoints, vec![ep(1), ep(3)]);
}

/// Issue 27: a pending request whose every pod was quarantined for its render meanwhile starts
/// no (empty) deployment: the pending slot is acked, nothing is scheduled.
#[test]
fn a_pending_request_whose_pods_all_rejected_the_render_starts_nothing() {
    let (mut s, t0) = leader(2);
    let req = start_validated(&mut s, 1, t0);
    let fx = decide(&mut s, drift(), t0);
    assert_eq!(pending_written(&fx).expect("queued").endpoints.len(), 2);
    fail_then_complete(&mut s, &req, &[(1, false), (2, false)], t0);
    let later = t0 + s.settings.min_deployment_interval * 2;
    let fx = decide(&mut s, Input::Tick, later);
    assert!(started(&fx).is_none(), "no empty deployment: {fx:?}");
    assert!(
        fx.iter()
            .any(|e| matches!(e, Effect::DropPending(r) if r.render == render(1))),
        "{fx:?}"
    );
    assert!(s.pending.is_none());
    assert_eq!(s.phase_name(t0), "idle");
    // The plan acks the journaled slot and schedules nothing.
    let p = plan(
        fx,
        &PlanContext {
            pending_id: Some(haptic_journal::WorkId(7)),
            inflight_id: None,
            draining: false,
            term: Term(1),
            max_timeout_retries: 3,
            now: UnixMillis(0),
        },
    );
    assert!(
        p.pending_acked && !p.scheduled && p.spawn.is_none(),
        "{p:?}"
    );
}

/// Issue 27 (review): a render rollout that times out while a drift check of the same render is
/// pending is retried as a rollout (no drift run for pods that never got it), and a pod that
/// rejected the render during the timed-out deployment is quarantined, not sent it again.
#[test]
fn a_timed_out_rollout_with_a_pending_drift_check_stays_a_rollout_and_skips_rejecters() {
    let (mut s, t0) = leader(3);
    let req = start_validated(&mut s, 1, t0);
    decide(&mut s, drift(), t0);
    decide(
        &mut s,
        Input::InstanceFailed {
            deployment: req.deployment.clone(),
            endpoint: ep(1).url,
            retryable: false,
            error: "dataplane rejected the configuration with status 400: [ALERT] x".into(),
        },
        t0,
    );
    let fx = decide(
        &mut s,
        Input::Tick,
        t0 + SchedulerSettings::default().deployment_timeout,
    );
    let retry = started(&fx).expect("retried").clone();
    assert_eq!(retry.reason.as_str(), "config_validation_timeout_retry");
    assert_eq!(retry.endpoints, vec![ep(2), ep(3)], "pod 1 is quarantined");
    assert!(s.quarantined(&ep(1).url, &render(1)));
}

/// Issue 27 (review): a dropped pending request leaves the backoff retries their timer.
#[test]
fn a_dropped_pending_request_keeps_the_backoff_timer() {
    let (mut s, t0) = leader(3);
    let req = start_validated(&mut s, 1, t0);
    decide(&mut s, drift(), t0);
    s.pending.as_mut().unwrap().endpoints = vec![ep(1), ep(2)];
    fail_then_complete(&mut s, &req, &[(1, false), (2, false), (3, true)], t0);
    let later = t0 + s.settings.min_deployment_interval * 2;
    let fx = decide(&mut s, Input::Tick, later);
    assert!(
        fx.iter().any(|e| matches!(e, Effect::DropPending(_))),
        "{fx:?}"
    );
    // Pod 3's backoff retry still gets its turn: started now when due, else its timer armed.
    let retry_at = s.backoff.get(&ep(3).url).expect("pod 3 backs off").next_at;
    if retry_at <= later {
        assert!(
            started(&fx).is_some_and(|r| r.endpoints == vec![ep(3)]),
            "the due backoff retry starts: {fx:?}"
        );
    } else {
        assert!(
            fx.iter()
                .any(|e| matches!(e, Effect::ArmTimer(at) if *at == retry_at)),
            "the backoff timer is armed: {fx:?}"
        );
    }
}

/// The deployer reads the scheduler's checkpoint by the name it knows it under.
#[test]
fn the_deployer_names_the_schedulers_checkpoint() {
    assert_eq!(
        super::COMPONENT,
        crate::components::deployer::SCHEDULER_COMPONENT
    );
}

/// Review of issue 27: a quarantine retry that times out is neither retried at once (as a
/// timeout retry) nor given up: the pod keeps its quarantine, the status is told again, and the
/// next step retries it. A drift check pending meanwhile runs as a drift run to its own pods.
#[test]
fn a_timed_out_quarantine_retry_waits_for_the_next_step() {
    let settings = quarantine_settings(Duration::from_secs(60), Duration::from_secs(3600));
    let (mut s, t0) = leader_with(settings, 2);
    let req = start_validated(&mut s, 1, t0);
    settle(&mut s, &req, &[1], &[(2, false)], t0);
    let due = t0 + Duration::from_secs(60);
    let retry = quarantine_retry(&decide(&mut s, Input::Tick, due))
        .unwrap()
        .clone();
    // A drift check arrives while the retry runs (pod 1 only: pod 2 is quarantined).
    decide(&mut s, drift(), due + Duration::from_secs(1));
    let timeout = due + s.settings.deployment_timeout;
    let fx = decide(&mut s, Input::Tick, timeout);
    assert!(
        fx.iter().any(|e| matches!(e, Effect::Cancel { .. })),
        "{fx:?}"
    );
    assert!(
        !fx.iter().any(|e| matches!(e, Effect::GiveUp { .. })),
        "the quarantined pod is not given up: {fx:?}"
    );
    assert_eq!(
        quarantined_fx(&fx),
        vec![(ep(2).url, 1, s.wall(due + Duration::from_secs(120)))],
        "the status is told the pod is still quarantined"
    );
    let next = started(&fx).expect("the pending drift check").clone();
    assert_eq!(next.endpoints, vec![ep(1)], "not the quarantined pod");
    assert_eq!(
        next.reason.cause,
        DeploymentCause::DriftPrevention,
        "a drift run, not a quarantine retry"
    );
    complete_all(&mut s, &next, timeout);
    assert!(s.quarantined(&ep(2).url, &render(1)));
    assert!(!s.given_up.contains(&ep(2).url));
    let step = due + Duration::from_secs(120);
    assert_no_start_before(&mut s, step);
    assert_eq!(
        quarantine_retry(&decide(&mut s, Input::Tick, step)).map(|r| r.endpoints.clone()),
        Some(vec![ep(2)])
    );
    let _ = retry;
}

/// Review of issue 27: a rejection of a render superseded while the deployment ran quarantines
/// nothing (the new render goes to the pod anyway; a quarantine of the old one would never be
/// retried, and the status would name it).
#[test]
fn a_rejection_of_a_superseded_render_quarantines_nothing() {
    let (mut s, t0) = leader(1);
    let req = start_validated(&mut s, 1, t0);
    decide(&mut s, validated(2), t0 + Duration::from_millis(10));
    let fx = decide(
        &mut s,
        Input::InstanceFailed {
            deployment: req.deployment.clone(),
            endpoint: ep(1).url,
            retryable: false,
            error: "[ALERT] x".into(),
        },
        t0 + Duration::from_millis(20),
    );
    assert!(quarantined_fx(&fx).is_empty());
    let fx = decide(
        &mut s,
        Input::Completed {
            deployment: req.deployment.clone(),
        },
        t0 + Duration::from_millis(30),
    );
    assert!(quarantined_fx(&fx).is_empty(), "{fx:?}");
    assert!(s.rejected.is_empty());
    let fx = decide(&mut s, Input::Tick, t0 + Duration::from_secs(3));
    assert_eq!(started(&fx).map(|r| r.render), Some(render(2)));
}

/// Review of issue 27: with nothing pending, a timed-out quarantine retry starts no timeout
/// retry (before: `quarantine_retry_timeout_retry` at once, three times, then a give-up whose
/// report cleared the quarantine from the status).
#[test]
fn a_timed_out_quarantine_retry_alone_starts_nothing() {
    let (mut s, t0) = leader(1);
    let req = start_validated(&mut s, 1, t0);
    fail_then_complete(&mut s, &req, &[(1, false)], t0);
    let due = s.instant(s.rejected[&ep(1).url].next_retry_at, t0);
    quarantine_retry(&decide(&mut s, Input::Tick, due)).expect("the retry");
    let timeout = due + s.settings.deployment_timeout;
    let fx = decide(&mut s, Input::Tick, timeout);
    assert!(started(&fx).is_none(), "{fx:?}");
    assert!(
        !fx.iter().any(|e| matches!(e, Effect::GiveUp { .. })),
        "{fx:?}"
    );
    assert!(s.quarantined(&ep(1).url, &render(1)));
}

// ---- rollback (issue 28) ----

/// A checked rollback request.
fn rollback(verdict: RollbackVerdict) -> Input {
    Input::Rollback {
        correlation: Correlation::new("rb"),
        runtime_config: rc(),
        verdict,
    }
}

fn hold(n: u8) -> RollbackVerdict {
    RollbackVerdict::Hold {
        value: render(n).to_string(),
        render: render(n),
    }
}

fn rollback_change(fx: &[Effect]) -> Option<&haptic_journal::RollbackChange> {
    fx.iter().find_map(|e| match e {
        Effect::Rollback { change, .. } => Some(change),
        _ => None,
    })
}

#[test]
fn previous_is_the_render_validated_before_the_newest_and_a_repeat_changes_nothing() {
    let (mut s, t0) = leader(2);
    assert!(matches!(
        resolve_rollback(&s, Some(ROLLBACK_PREVIOUS), None),
        RollbackAsk::Refuse { ref reason, .. } if reason.contains("no render was validated before")
    ));
    deploy_all(&mut s, 1, t0);
    let t1 = t0 + Duration::from_secs(10);
    deploy_all(&mut s, 2, t1);
    // The same render validated again (a drift check) does not move `previous`.
    decide(&mut s, validated(2), t1 + Duration::from_secs(10));
    assert_eq!(
        resolve_rollback(&s, Some("previous"), None),
        RollbackAsk::Check {
            value: "previous".into(),
            render: render(1)
        }
    );
    assert!(matches!(
        resolve_rollback(&s, Some("sha256:nothex"), None),
        RollbackAsk::Refuse { ref reason, .. } if reason.contains("neither a render checksum")
    ));
    assert_eq!(resolve_rollback(&s, None, None), RollbackAsk::Unchanged);
    decide(
        &mut s,
        rollback(RollbackVerdict::Hold {
            value: "previous".into(),
            render: render(1),
        }),
        t1 + Duration::from_secs(20),
    );
    // The watch after a restart reads the same value: nothing moves, though `previous` would
    // now resolve elsewhere.
    assert_eq!(
        resolve_rollback(&s, Some("previous"), None),
        RollbackAsk::Unchanged
    );
    assert_eq!(resolve_rollback(&s, None, None), RollbackAsk::Release);
}

#[test]
fn a_hold_deploys_its_render_and_newer_renders_wait_until_it_ends() {
    let (mut s, t0) = leader(2);
    deploy_all(&mut s, 1, t0);
    let mut t = t0 + Duration::from_secs(10);
    deploy_all(&mut s, 2, t);
    t += Duration::from_secs(10);
    let fx = decide(&mut s, rollback(hold(1)), t);
    assert!(matches!(
        rollback_change(&fx),
        Some(haptic_journal::RollbackChange::Held { render: r, newest: Some(n), .. }) if *r == render(1) && *n == render(2)
    ));
    let req = started(&fx).expect("the held render is deployed").clone();
    assert_eq!(req.render, render(1));
    assert_eq!(req.endpoints.len(), 2);
    assert_eq!(req.reason.cause, DeploymentCause::Rollback);
    complete_all(&mut s, &req, t);
    // A newer render is validated and remembered, not deployed.
    t += Duration::from_secs(10);
    assert_starts_nothing(&decide(&mut s, validated(3), t));
    assert_eq!(s.last_validated.as_ref().map(|(r, _)| *r), Some(render(3)));
    // New pods, drift checks and a new term get the held render.
    t += Duration::from_secs(10);
    let fx = decide(&mut s, discovered(vec![ep(1), ep(2), ep(3)]), t);
    let req = started(&fx).unwrap().clone();
    assert_eq!((req.render, req.endpoints.len()), (render(1), 1));
    complete_all(&mut s, &req, t);
    t += Duration::from_secs(10);
    let req = started(&decide(&mut s, drift(), t)).unwrap().clone();
    assert_eq!((req.render, req.endpoints.len()), (render(1), 3));
    complete_all(&mut s, &req, t);
    // A restart restores the hold from the checkpoint.
    let mut r = SchedulerState::new(SchedulerSettings::default(), "d2");
    decide(&mut r, recovered_from(&s), t);
    assert_eq!(r.target().map(|(c, _)| c), Some(render(1)));
    assert_starts_nothing(&decide(&mut r, Input::BecameLeader { term: Term(2) }, t));
    // The end deploys the newest.
    t += Duration::from_secs(10);
    let fx = decide(
        &mut s,
        rollback(RollbackVerdict::Release { shown: None }),
        t,
    );
    assert!(matches!(
        rollback_change(&fx),
        Some(haptic_journal::RollbackChange::Released { render: r, newest: Some(n) }) if *r == render(1) && *n == render(3)
    ));
    let req = started(&fx).unwrap();
    assert_eq!((req.render, req.endpoints.len()), (render(3), 3));
    assert!(s.rollback.is_none());
}

#[test]
fn a_refused_request_changes_nothing_and_keeps_a_hold() {
    let (mut s, t0) = leader(1);
    deploy_all(&mut s, 1, t0);
    let before = s.checkpoint();
    let refuse = RollbackVerdict::Refuse {
        value: "sha256:00".into(),
        reason: "not in the journal".into(),
    };
    let fx = decide(
        &mut s,
        rollback(refuse.clone()),
        t0 + Duration::from_secs(5),
    );
    assert_starts_nothing(&fx);
    assert!(matches!(
        rollback_change(&fx),
        Some(haptic_journal::RollbackChange::Refused { held: None, .. })
    ));
    assert_eq!(s.checkpoint(), before);
    let t = t0 + Duration::from_secs(10);
    deploy_all(&mut s, 2, t);
    let req = started(&decide(
        &mut s,
        rollback(hold(1)),
        t + Duration::from_secs(5),
    ))
    .unwrap()
    .clone();
    complete_all(&mut s, &req, t + Duration::from_secs(5));
    let fx = decide(&mut s, rollback(refuse), t + Duration::from_secs(10));
    assert_starts_nothing(&fx);
    assert!(matches!(
        rollback_change(&fx),
        Some(haptic_journal::RollbackChange::Refused { held: Some((_, h)), .. }) if *h == render(1)
    ));
    assert_eq!(s.target().map(|(c, _)| c), Some(render(1)));
}

/// Review of issue 28: a newer render waiting in the pending slot when the hold begins is not
/// deployed (the pending request is dropped when every pod runs the held render already).
#[test]
fn a_pending_newer_render_is_dropped_by_the_hold() {
    let (mut s, t0) = leader(2);
    deploy_all(&mut s, 1, t0);
    // Within the rate limit: render 2 waits in the pending slot.
    let fx = decide(&mut s, validated(2), t0);
    assert!(pending_written(&fx).is_some());
    let fx = decide(&mut s, rollback(hold(1)), t0);
    assert!(
        fx.iter()
            .any(|e| matches!(e, Effect::DropPending(r) if r.render == render(2))),
        "{fx:?}"
    );
    assert!(s.pending.is_none());
    for dt in [5, 30, 300] {
        assert_starts_nothing(&decide(&mut s, Input::Tick, t0 + Duration::from_secs(dt)));
    }
}

/// A deployment of the newer render running when the hold begins: its pods get the held
/// render right after it (queued at the hold), also across a restart (the pending slot is
/// journaled with the hold), and a timeout of it retries the held render, not the newer one.
#[test]
fn an_inflight_newer_render_is_followed_by_the_held_one() {
    let (mut s, t0) = leader(2);
    deploy_all(&mut s, 1, t0);
    let t1 = t0 + Duration::from_secs(10);
    let newer = start_validated(&mut s, 2, t1);
    let fx = decide(&mut s, rollback(hold(1)), t1);
    let queued = pending_written(&fx).expect("the held render queued behind the running one");
    assert_eq!((queued.render, queued.endpoints.len()), (render(1), 2));
    // A restart now: the in-flight newer render is resumed, then the held one starts.
    let mut r = SchedulerState::new(SchedulerSettings::default(), "d2");
    decide(
        &mut r,
        Input::Recovered {
            checkpoint: Some(s.checkpoint()),
            pending: s.pending.clone(),
            inflight: Some(InFlightDeployment {
                request: newer.clone(),
                started_at: UnixMillis(1),
                term: Term(1),
            }),
            applied: Vec::new(),
        },
        t1,
    );
    let fx = decide(&mut r, Input::BecameLeader { term: Term(2) }, t1);
    assert!(
        fx.iter()
            .any(|e| matches!(e, Effect::Resume(q) if q.render == render(2)))
    );
    complete_all(&mut r, &newer, t1 + Duration::from_secs(1));
    let fx = decide(&mut r, Input::Tick, t1 + Duration::from_secs(10));
    assert_eq!(started(&fx).map(|q| q.render), Some(render(1)), "{fx:?}");
    // The same process: the running deployment times out; the retry is the held render.
    let timeout = s.settings.deployment_timeout;
    let fx = decide(&mut s, Input::Tick, t1 + timeout + Duration::from_secs(1));
    let retried: Vec<Checksum> = fx
        .iter()
        .filter_map(|e| match e {
            Effect::Start { request, .. } | Effect::PersistPending(request) => Some(request.render),
            _ => None,
        })
        .collect();
    assert!(
        !retried.is_empty() && retried.iter().all(|r| *r == render(1)),
        "{fx:?}"
    );
}

/// The end of a hold while the held render still waits in the pending slot (every pod runs
/// the newest): the pending request is dropped, nothing starts.
#[test]
fn a_release_drops_the_pending_held_render() {
    let (mut s, t0) = leader(2);
    deploy_all(&mut s, 1, t0);
    let t1 = t0 + Duration::from_secs(10);
    deploy_all(&mut s, 2, t1);
    let fx = decide(&mut s, rollback(hold(1)), t1);
    assert!(pending_written(&fx).is_some(), "rate limited: pending");
    let fx = decide(
        &mut s,
        rollback(RollbackVerdict::Release { shown: None }),
        t1,
    );
    assert!(
        fx.iter()
            .any(|e| matches!(e, Effect::DropPending(r) if r.render == render(1))),
        "{fx:?}"
    );
    for dt in [5, 30] {
        assert_starts_nothing(&decide(&mut s, Input::Tick, t1 + Duration::from_secs(dt)));
    }
}

/// A hold the condition shows (decided by another replica or an earlier process) is continued
/// with its render, not `previous` resolved here; its absence ends it; a new term and a newer
/// render say the hold again for the condition.
#[test]
fn a_shown_hold_is_continued_and_said_again() {
    let (mut s, t0) = leader(2);
    deploy_all(&mut s, 1, t0);
    let t1 = t0 + Duration::from_secs(10);
    deploy_all(&mut s, 2, t1);
    deploy_all(&mut s, 3, t1 + Duration::from_secs(10));
    let shown = ("previous".to_owned(), render(1));
    assert_eq!(
        resolve_rollback(&s, Some("previous"), Some(&shown)),
        RollbackAsk::Check {
            value: "previous".into(),
            render: render(1)
        },
        "not this replica's previous (render 2)"
    );
    assert_eq!(
        resolve_rollback(&s, None, Some(&shown)),
        RollbackAsk::Release
    );
    let fx = decide(
        &mut s,
        rollback(RollbackVerdict::Release {
            shown: Some(render(1)),
        }),
        t1 + Duration::from_secs(30),
    );
    assert!(matches!(
        rollback_change(&fx),
        Some(haptic_journal::RollbackChange::Released { render: r, .. }) if *r == render(1)
    ));
    let t = t1 + Duration::from_secs(40);
    let req = started(&decide(&mut s, rollback(hold(1)), t))
        .unwrap()
        .clone();
    complete_all(&mut s, &req, t);
    let fx = decide(&mut s, validated(4), t + Duration::from_secs(10));
    assert!(matches!(
        rollback_change(&fx),
        Some(haptic_journal::RollbackChange::Holding { newest: Some(n), .. }) if *n == render(4)
    ));
    decide(&mut s, Input::LostLeadership, t + Duration::from_secs(11));
    let fx = decide(
        &mut s,
        Input::BecameLeader { term: Term(3) },
        t + Duration::from_secs(12),
    );
    assert!(matches!(
        rollback_change(&fx),
        Some(haptic_journal::RollbackChange::Holding { render: r, .. }) if *r == render(1)
    ));
    assert_starts_nothing(&fx);
}
