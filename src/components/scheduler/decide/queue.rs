//! How [`super::decide`] queues, starts and times out deployments: the request of a render,
//! the pending slot (latest wins), the pump that starts it when the rate limit and the phase
//! allow, and the timeout retries.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use haptic_journal::{
    Checksum, Correlation, DeployRequest, DeploymentCause, DeploymentId, DeploymentReason, Endpoint,
};

use super::state::{Phase, Quarantine, SchedulerSettings, SchedulerState};
use super::{Effect, reason};

/// The [`Effect::Quarantined`] that tells the status `endpoint` is still quarantined for
/// `request`'s render with schedule `q` (a quarantine retry that ended without a verdict: its
/// report was a plain failure).
pub(super) fn still_quarantined(
    request: &DeployRequest,
    endpoint: &Endpoint,
    q: &Quarantine,
) -> Effect {
    Effect::Quarantined {
        request: request.clone(),
        endpoint: endpoint.clone(),
        message: q.message.clone(),
        attempts: q.attempts,
        next_retry_at: q.next_retry_at,
    }
}

/// Quarantines `request`'s render for `endpoint` after a permanent rejection: one more
/// rejection in a row of the same render, the next retry one quarantine delay from `now`
/// (doubling per rejection, capped), and an [`Effect::Quarantined`] for the pod's status.
pub(super) fn quarantine(
    state: &mut SchedulerState,
    request: &DeployRequest,
    endpoint: &Endpoint,
    message: String,
    now: Instant,
    fx: &mut Vec<Effect>,
) {
    state.applied.remove(&endpoint.url);
    state.backoff.remove(&endpoint.url);
    if state.target().map(|(r, _)| r) != Some(request.render) {
        // A render superseded while the deployment ran: the new one goes to the pod anyway,
        // and a quarantine of the old one would never be retried (nor shown truthfully).
        return;
    }
    let attempts = match state.rejected.get(&endpoint.url) {
        Some(q) if q.render == request.render => q.attempts.saturating_add(1),
        _ => 1,
    };
    let next = now + state.quarantine_delay(attempts);
    let next_retry_at = state.wall(next);
    state.rejected.insert(
        endpoint.url.clone(),
        Quarantine {
            render: request.render,
            message: message.clone(),
            attempts,
            next_retry_at,
        },
    );
    fx.push(Effect::Quarantined {
        request: request.clone(),
        endpoint: endpoint.clone(),
        message,
        attempts,
        next_retry_at,
    });
}

/// Every endpoint not quarantined for `render`, in discovery order.
pub(super) fn not_quarantined(state: &SchedulerState, render: Checksum) -> Vec<Endpoint> {
    state
        .endpoints
        .iter()
        .filter(|e| !state.quarantined(&e.url, &render))
        .cloned()
        .collect()
}

/// Delay after `failures` consecutive failures: initial doubling, capped.
#[must_use]
pub fn backoff_delay(settings: &SchedulerSettings, failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(16);
    settings
        .backoff_initial
        .saturating_mul(1 << exp)
        .min(settings.backoff_max)
}

pub(super) fn new_request(
    state: &mut SchedulerState,
    render: Checksum,
    endpoints: Vec<Endpoint>,
    reason: DeploymentReason,
    correlation: Correlation,
) -> Option<DeployRequest> {
    let runtime_config = state.runtime_config.clone()?;
    let id = DeploymentId::new(format!("{}-{}", state.id_prefix, state.next_id));
    state.next_id += 1;
    Some(DeployRequest {
        deployment: id,
        render,
        endpoints,
        runtime_config,
        reason,
        correlation,
    })
}

/// Latest wins: the new request replaces the pending one (same render: targets are merged so
/// no endpoint loses its turn). Nothing when `endpoints` is empty.
pub(super) fn queue(
    state: &mut SchedulerState,
    render: Checksum,
    mut endpoints: Vec<Endpoint>,
    mut reason: DeploymentReason,
    mut correlation: Correlation,
    fx: &mut Vec<Effect>,
) {
    if endpoints.is_empty() {
        return;
    }
    if let Some(old) = &state.pending
        && old.render == render
    {
        // A drift check joins a pending rollout of the same render without turning it into a
        // drift run (issue 27, as for a timeout retry): the pods it is for never had the
        // render and would be reported drifted.
        if reason.cause == DeploymentCause::DriftPrevention
            && old.reason.cause != DeploymentCause::DriftPrevention
        {
            reason = old.reason;
            correlation = old.correlation.clone();
        }
        for e in &old.endpoints {
            if !endpoints.iter().any(|n| n.url == e.url)
                && state.endpoints.iter().any(|n| n.url == e.url)
            {
                endpoints.push(e.clone());
            }
        }
    }
    let Some(req) = new_request(state, render, endpoints, reason, correlation) else {
        // No HAProxyCfg name yet: nothing to attach status to. The render stays the last
        // validated one and is deployed once the name is known (next trigger).
        return;
    };
    state.pending = Some(req.clone());
    fx.push(Effect::PersistPending(req));
}

/// Starts what may start now, handles the timeout, and arms the next timer.
pub(super) fn pump(state: &mut SchedulerState, now: Instant, fx: &mut Vec<Effect>) {
    if state.leader.is_none() {
        return;
    }
    if let Phase::Deploying { started_at, .. } = &state.phase {
        let deadline = *started_at + state.settings.deployment_timeout;
        if now < deadline {
            fx.push(Effect::ArmTimer(deadline));
            return;
        }
        on_timeout(state, now, fx);
        if matches!(state.phase, Phase::Deploying { .. }) {
            return;
        }
    }
    let ready = state.ready_at(now);
    if state.pending.is_some() {
        if ready > now {
            fx.push(Effect::ArmTimer(ready));
            return;
        }
        if let Some(mut req) = state.pending.take() {
            // A pod may have been quarantined for this render since the request was queued
            // (a deployment that completed meanwhile): it is not sent the render again.
            let render = req.render;
            req.endpoints
                .retain(|e| !state.quarantined(&e.url, &render));
            if !req.endpoints.is_empty() {
                start(state, req, true, now, fx);
                return;
            }
            // Every pod it named is quarantined for the render: nothing to deploy; the
            // backoff retries below still get their turn (and their timer).
            fx.push(Effect::DropPending(req));
        }
    }
    // Failed endpoints due for their retry.
    let due: Vec<Endpoint> = state
        .endpoints
        .iter()
        .filter(|e| state.backoff.get(&e.url).is_some_and(|b| b.next_at <= now))
        .cloned()
        .collect();
    if !due.is_empty()
        && let Some((render, corr)) = state.target()
        && let Some(req) = due_request(
            state,
            render,
            due,
            DeploymentCause::ConfigValidation,
            corr,
            now,
            fx,
        )
    {
        if let Some(req) = req {
            start(state, req, false, now, fx);
        }
        return;
    }
    // Quarantined renders due for their retry (issue 27): only the render the fleet is
    // deployed (a quarantine of another one is dropped when a new render passes), to
    // discovered pods.
    if let Some((render, corr)) = state.target() {
        let wall_now = state.wall(now);
        let due: Vec<Endpoint> = state
            .endpoints
            .iter()
            .filter(|e| {
                state
                    .rejected
                    .get(&e.url)
                    .is_some_and(|q| q.render == render && q.next_retry_at <= wall_now)
            })
            .cloned()
            .collect();
        if !due.is_empty()
            && let Some(req) = due_request(
                state,
                render,
                due,
                DeploymentCause::QuarantineRetry,
                corr,
                now,
                fx,
            )
        {
            if let Some(req) = req {
                // The retry moves each schedule one step on: a retry that ends without a
                // verdict (a timeout, a 5xx) waits for that step, and a restart meanwhile
                // does not retry at once (the checkpoint is journaled with the start).
                for e in &req.endpoints {
                    let attempts = state.rejected.get(&e.url).map_or(1, |q| q.attempts);
                    let next = state.wall(now + state.quarantine_delay(attempts.saturating_add(1)));
                    if let Some(q) = state.rejected.get_mut(&e.url) {
                        q.next_retry_at = next;
                    }
                }
                start(state, req, false, now, fx);
            }
            return;
        }
    }
    let backoff_next = state
        .backoff
        .iter()
        .filter(|(u, _)| state.endpoints.iter().any(|e| &e.url == *u))
        .map(|(_, b)| b.next_at);
    let quarantine_next = state
        .target()
        .map(|(render, _)| {
            state
                .rejected
                .iter()
                .filter(|(u, q)| q.render == render && state.endpoints.iter().any(|e| &e.url == *u))
                .map(|(_, q)| state.instant(q.next_retry_at, now))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    if let Some(next) = backoff_next.chain(quarantine_next).min() {
        fx.push(Effect::ArmTimer(next.max(ready)));
    }
}

/// The request of retries due at `now` (`Some(None)`: wait for the rate limit, the timer is
/// armed; `None`: no HAProxyCfg to report to yet, nothing to do).
fn due_request(
    state: &mut SchedulerState,
    render: Checksum,
    due: Vec<Endpoint>,
    cause: DeploymentCause,
    correlation: Correlation,
    now: Instant,
    fx: &mut Vec<Effect>,
) -> Option<Option<DeployRequest>> {
    let ready = state.ready_at(now);
    if ready > now {
        fx.push(Effect::ArmTimer(ready));
        return Some(None);
    }
    new_request(state, render, due, reason(cause), correlation).map(Some)
}

pub(super) fn start(
    state: &mut SchedulerState,
    request: DeployRequest,
    from_pending: bool,
    now: Instant,
    fx: &mut Vec<Effect>,
) {
    state.phase = Phase::Deploying {
        request: request.clone(),
        started_at: now,
        finished: BTreeSet::new(),
        succeeded: BTreeSet::new(),
        rejected: BTreeMap::new(),
    };
    fx.push(Effect::Start {
        request,
        from_pending,
    });
    fx.push(Effect::ArmTimer(now + state.settings.deployment_timeout));
}

pub(super) fn on_timeout(state: &mut SchedulerState, now: Instant, fx: &mut Vec<Effect>) {
    let Phase::Deploying {
        request,
        finished,
        succeeded,
        rejected,
        ..
    } = std::mem::replace(&mut state.phase, Phase::Idle)
    else {
        return;
    };
    // Endpoints that succeeded before the timeout run the render (their state is journaled).
    for url in succeeded {
        state.backoff.remove(&url);
        state.applied.insert(url, request.render);
    }
    // Endpoints that rejected it are quarantined as at a completion.
    for (url, message) in rejected {
        if let Some(e) = request.endpoints.iter().find(|e| e.url == url) {
            quarantine(state, &request, e, message, now, fx);
        }
    }
    fx.push(Effect::Cancel {
        deployment: request.deployment.clone(),
        correlation: request.correlation.clone(),
    });
    let pending = state.pending.take();
    let unfinished: Vec<Endpoint> = request
        .endpoints
        .iter()
        .filter(|e| !finished.contains(&e.url))
        .cloned()
        .collect();
    // The retry is named by what it deploys (upstream: `<reason>_timeout_retry` of the pending
    // item): a pending render is retried as its own cause, not the timed-out one's (a drift
    // check that timed out must not turn the next render's rollout into a drift run), except
    // that a pending drift check does not turn a timed-out rollout into one either (its pods
    // that never got the render would be reported drifted). It goes to the pending request's
    // pods and the timed-out deployment's unfinished ones, each still discovered and not
    // quarantined for the render (a pod that rejected it during the timed-out deployment is
    // quarantined above), so none waits for the next drift check (issue 27).
    let (retry_render, retry_endpoints, retry_corr, retry_cause) = match &pending {
        Some(p) => {
            let mut endpoints: Vec<Endpoint> = Vec::new();
            for e in p.endpoints.iter().chain(&unfinished) {
                if !endpoints.iter().any(|n| n.url == e.url)
                    && state.endpoints.iter().any(|n| n.url == e.url)
                    && !state.quarantined(&e.url, &p.render)
                {
                    endpoints.push(e.clone());
                }
            }
            let cause = if p.reason.cause == DeploymentCause::DriftPrevention
                && !matches!(
                    request.reason.cause,
                    DeploymentCause::DriftPrevention | DeploymentCause::QuarantineRetry
                ) {
                request.reason.cause
            } else {
                p.reason.cause
            };
            (p.render, endpoints, p.correlation.clone(), cause)
        }
        // The fleet's target moved off the timed-out render meanwhile (a rollback began or
        // ended): the retry deploys the target.
        None if state.target().is_some_and(|(t, _)| t != request.render) => {
            let (t, corr) = state
                .target()
                .unwrap_or((request.render, request.correlation.clone()));
            (
                t,
                unfinished
                    .iter()
                    .filter(|e| !state.quarantined(&e.url, &t))
                    .cloned()
                    .collect(),
                corr,
                DeploymentCause::Rollback,
            )
        }
        // A pod quarantined for the render (the unfinished pods of a timed-out
        // `quarantine_retry`) waits for its quarantine's next step, not a timeout retry.
        None => (
            request.render,
            unfinished
                .iter()
                .filter(|e| !state.quarantined(&e.url, &request.render))
                .cloned()
                .collect(),
            request.correlation.clone(),
            request.reason.cause,
        ),
    };
    // The timed-out quarantine retry's pods keep their quarantine: say so again (their
    // reports, if any, were failures the status would take for a plain retry).
    for e in &unfinished {
        if let Some(q) = state.rejected.get(&e.url)
            && q.render == request.render
        {
            fx.push(still_quarantined(&request, e, q));
        }
    }
    let unfinished: Vec<Endpoint> = unfinished
        .into_iter()
        .filter(|e| !state.quarantined(&e.url, &request.render))
        .collect();
    let retry_reason = DeploymentReason {
        cause: retry_cause,
        timeout_retry: true,
    };
    let count = match state.timeout_retries {
        Some((r, n)) if r == retry_render => n + 1,
        _ => 1,
    };
    if count > state.settings.max_timeout_retries {
        for e in &unfinished {
            state.given_up.insert(e.url.clone());
            state.applied.remove(&e.url);
        }
        state.timeout_retries = None;
        fx.push(Effect::GiveUp {
            request,
            endpoints: unfinished,
        });
        // The pending slot was taken for this retry: journal and memory drop it together.
        if let Some(p) = pending {
            fx.push(Effect::DropPending(p));
        }
        return;
    }
    state.timeout_retries = Some((retry_render, count));
    let from_pending = pending.is_some();
    match new_request(
        state,
        retry_render,
        retry_endpoints,
        retry_reason,
        retry_corr,
    ) {
        Some(req) if !req.endpoints.is_empty() => start(state, req, from_pending, now, fx),
        // Nothing to deploy: the pending slot taken for the retry is acked.
        _ => {
            if let Some(p) = pending {
                fx.push(Effect::DropPending(p));
            }
        }
    }
}
