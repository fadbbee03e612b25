//! The scheduler's pure decision function: state plus one input plus `now` gives effects.
//! Its state is `state`'s; how a request is queued, started and timed out is `queue`'s.

use std::collections::{BTreeMap, BTreeSet};

use haptic_journal::{
    Checksum, Correlation, DeployRequest, DeploymentCause, DeploymentId, DeploymentReason,
    Endpoint, EndpointApplied, EndpointUrl, InFlightDeployment, PodRef, RollbackChange,
    RuntimeConfigRef, SchedulerCheckpoint, Term,
};
use std::time::Instant;

mod queue;
mod rollback;
mod state;

pub use queue::backoff_delay;
use queue::{not_quarantined, pump, quarantine, queue, still_quarantined};
pub use rollback::{ROLLBACK_PREVIOUS, RollbackAsk, RollbackVerdict, resolve_rollback};
use rollback::{holding, rollback};
pub use state::{Backoff, Phase, Quarantine, SchedulerSettings, SchedulerState};

/// A fact the scheduler reacts to.
#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(clippy::large_enum_variant)] // recovery happens once; boxing buys nothing
pub enum Input {
    /// Journal state at start: the scheduler's checkpoint, the pending slot, the in-flight slot,
    /// per-endpoint applied state (the skip cache of a journal without a checkpoint).
    Recovered {
        /// The scheduler's checkpoint (its state as of the last event it folded).
        checkpoint: Option<SchedulerCheckpoint>,
        /// The `deploy-pending` slot.
        pending: Option<DeployRequest>,
        /// The `deploy-inflight` slot.
        inflight: Option<InFlightDeployment>,
        /// The `endpoint_applied` table.
        applied: Vec<EndpointApplied>,
    },
    /// The HAProxyCfg the statuses go to (`config.published`, or derived from `config.validated`).
    RuntimeConfig(RuntimeConfigRef),
    /// `validation.completed`.
    Validated {
        /// The render.
        render: Checksum,
        /// The validation's correlation.
        correlation: Correlation,
        /// The trigger reason (`drift_prevention` bypasses the skip cache).
        trigger_reason: String,
    },
    /// `validation.failed`: redeploy the last good render (the fleet stays pinned).
    ValidationFailed {
        /// The failed validation's correlation.
        correlation: Correlation,
    },
    /// `haproxy.pods.discovered`.
    PodsDiscovered {
        /// Every admitted endpoint.
        endpoints: Vec<Endpoint>,
    },
    /// `haproxy.pod.terminated`.
    PodTerminated {
        /// The pod.
        pod: PodRef,
    },
    /// `drift.prevention.triggered`.
    Drift {
        /// The trigger's correlation.
        correlation: Correlation,
    },
    /// `instance.deployed`.
    InstanceDeployed {
        /// Deployment.
        deployment: DeploymentId,
        /// Endpoint.
        endpoint: EndpointUrl,
    },
    /// `instance.deployment.failed`.
    InstanceFailed {
        /// Deployment.
        deployment: DeploymentId,
        /// Endpoint.
        endpoint: EndpointUrl,
        /// Whether a retry may help; `false`: the render was rejected permanently, so the
        /// endpoint is quarantined for it instead of backing off.
        retryable: bool,
        /// The error (HAProxy's message for a rejection).
        error: String,
    },
    /// `deployment.rollback.request`, resolved by [`resolve_rollback`] and, for a render, checked
    /// by the shell (in the journal, `haproxy -c`).
    Rollback {
        /// The request's correlation.
        correlation: Correlation,
        /// The HAProxyCfg that carries the annotation.
        runtime_config: RuntimeConfigRef,
        /// What the request comes to.
        verdict: RollbackVerdict,
    },
    /// `deployment.retry.request`: an operator asks to retry the quarantined renders.
    RetryRejected {
        /// The request's correlation.
        correlation: Correlation,
    },
    /// `deployment.completed`.
    Completed {
        /// Deployment (a completion of another deployment is stale and ignored).
        deployment: DeploymentId,
    },
    /// A live `leader.became`.
    BecameLeader {
        /// The new term.
        term: Term,
    },
    /// A live `leader.lost`.
    LostLeadership,
    /// The timer armed by [`Effect::ArmTimer`] fired (or any periodic tick).
    Tick,
}

/// What the shell must do, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Write the `deploy-pending` slot (latest wins).
    PersistPending(DeployRequest),
    /// Journal `deployment.scheduled` plus the `deploy-inflight` slot (acking the pending slot
    /// when `from_pending`), then run the executor on it.
    Start {
        /// The request.
        request: DeployRequest,
        /// Whether it came from the pending slot (ack it in the same batch).
        from_pending: bool,
    },
    /// Ack the journaled pending slot without starting anything: every pod the pending request
    /// named is quarantined for its render (or gone) by the time it could start, so there is
    /// nothing to deploy (issue 27: before, an empty deployment was started and journaled).
    DropPending(DeployRequest),
    /// Run the executor again on the journaled in-flight deployment (no new journal records).
    Resume(DeployRequest),
    /// Cancel the running executor for real, then journal `deployment.cancel.request` and
    /// clear the in-flight slot.
    Cancel {
        /// The deployment.
        deployment: DeploymentId,
        /// Its correlation.
        correlation: Correlation,
    },
    /// Stop the running executor without touching the journal (Lease lost: the in-flight
    /// slot stays for the next term).
    StopExecutor,
    /// Report endpoints given up after the timeout retries (per-pod status with the reason).
    GiveUp {
        /// The request that timed out.
        request: DeployRequest,
        /// The endpoints that did not finish.
        endpoints: Vec<Endpoint>,
    },
    /// Wake the shell with [`Input::Tick`] at this time (replaces any earlier timer).
    ArmTimer(Instant),
    /// Journal `deployment.quarantined`: `endpoint` rejected `request`'s render (again) and is
    /// retried at `next_retry_at` (the publisher shows it as the pod's `nextRetryAt`).
    Quarantined {
        /// The deployment the pod rejected.
        request: DeployRequest,
        /// The endpoint.
        endpoint: Endpoint,
        /// HAProxy's message.
        message: String,
        /// Rejections in a row.
        attempts: u32,
        /// Wall-clock time of the next retry.
        next_retry_at: haptic_journal::UnixMillis,
    },
    /// Journal `deployment.rollback`: a hold began, moved or ended, or a request was refused.
    Rollback {
        /// The request's correlation.
        correlation: Correlation,
        /// The HAProxyCfg the condition goes to (the request's).
        runtime_config: RuntimeConfigRef,
        /// What changed.
        change: RollbackChange,
    },
}

/// Reason text a drift-triggered validation carries (upstream `drift_prevention`).
pub const DRIFT_TRIGGER_REASON: &str = "drift_prevention";

fn reason(cause: DeploymentCause) -> DeploymentReason {
    DeploymentReason {
        cause,
        timeout_retry: false,
    }
}

/// Applies one input; returns the effects for the shell, in order.
pub fn decide(state: &mut SchedulerState, input: Input, now: Instant) -> Vec<Effect> {
    let mut fx = Vec::new();
    state
        .wall_anchor
        .get_or_insert((now, haptic_journal::UnixMillis(0)));
    match input {
        Input::Recovered {
            checkpoint,
            pending,
            inflight,
            applied,
        } => {
            if let Some(c) = checkpoint {
                state.last_validated = c.last_validated;
                state.previous_validated = c.previous_validated;
                state.rollback = c.rollback;
                state.endpoints = c.endpoints;
                state.runtime_config = c.runtime_config;
                state.applied = c.applied.into_iter().collect();
                state.given_up = c.given_up.into_iter().collect();
                state.rejected = c
                    .rejected
                    .into_iter()
                    .map(|r| {
                        let q = Quarantine {
                            render: r.render,
                            message: r.message,
                            attempts: r.attempts,
                            next_retry_at: r.next_retry_at,
                        };
                        (r.endpoint, q)
                    })
                    .collect();
            } else {
                for a in applied {
                    state.applied.insert(a.endpoint, a.render);
                }
            }
            if let Some(f) = inflight {
                state
                    .runtime_config
                    .get_or_insert(f.request.runtime_config.clone());
                state.resume = Some(f.request);
            }
            if let Some(p) = pending {
                state.runtime_config.get_or_insert(p.runtime_config.clone());
                state.pending = Some(p);
            }
            let known = state.pending.as_ref().or(state.resume.as_ref());
            if let Some(r) = known
                && state.last_validated.is_none()
            {
                state.last_validated = Some((r.render, r.correlation.clone()));
                state.endpoints = r.endpoints.clone();
            }
        }
        Input::RuntimeConfig(rc) => {
            let changed = state.runtime_config.as_ref().is_some_and(|old| *old != rc);
            state.runtime_config = Some(rc);
            if changed {
                // Another HAProxyCfg (a changed `--config-name`): its status names no pod yet,
                // so the skip cache says nothing about it. Every endpoint gets the last
                // validated render again: the deployer writes nothing a pod already runs, and
                // each pod then reports to the new HAProxyCfg. A quarantine is dropped too (like
                // a pod change): a pod that still rejects the render is quarantined again after
                // one attempt, and the new HAProxyCfg shows it.
                state.applied.clear();
                state.given_up.clear();
                state.rejected.clear();
                if let Some((render, correlation)) = state.target() {
                    let all = state.endpoints.clone();
                    let r = reason(DeploymentCause::ConfigValidation);
                    queue(state, render, all, r, correlation, &mut fx);
                }
            }
        }
        Input::Validated {
            render,
            correlation,
            trigger_reason,
        } => {
            let old = state.last_validated.as_ref().map(|(r, _)| *r);
            let new_render = old != Some(render);
            if new_render && old.is_some() {
                state.previous_validated = old;
            }
            state.last_validated = Some((render, correlation.clone()));
            let drift = trigger_reason == DRIFT_TRIGGER_REASON;
            if let Some(held) = state.rollback.as_ref().map(|h| h.render) {
                // A rollback holds: the render is validated and journaled, not deployed. A
                // drift check still repairs every pod, with the held render.
                if new_render {
                    holding(state, &mut fx);
                }
                if drift {
                    let all = not_quarantined(state, held);
                    let r = reason(DeploymentCause::DriftPrevention);
                    queue(state, held, all, r, correlation, &mut fx);
                }
                pump(state, now, &mut fx);
                return fx;
            }
            if new_render {
                state.given_up.clear();
                state.timeout_retries = None;
            }
            // A quarantine holds for its render only.
            state.rejected.retain(|_, q| q.render == render);
            let targets: Vec<Endpoint> = state
                .endpoints
                .iter()
                .filter(|e| drift || state.applied.get(&e.url) != Some(&render))
                .filter(|e| drift || !state.given_up.contains(&e.url))
                .filter(|e| !state.quarantined(&e.url, &render))
                .cloned()
                .collect();
            let cause = if drift {
                DeploymentCause::DriftPrevention
            } else {
                DeploymentCause::ConfigValidation
            };
            queue(state, render, targets, reason(cause), correlation, &mut fx);
        }
        Input::ValidationFailed { correlation } => {
            if let Some((render, _)) = state.target() {
                let all = not_quarantined(state, render);
                let r = reason(DeploymentCause::ValidationFallback);
                queue(state, render, all, r, correlation, &mut fx);
            }
        }
        Input::PodsDiscovered { endpoints } => {
            let known: BTreeSet<EndpointUrl> = endpoints.iter().map(|e| e.url.clone()).collect();
            state.applied.retain(|u, _| known.contains(u));
            state.backoff.retain(|u, _| known.contains(u));
            state.rejected.retain(|u, _| known.contains(u));
            let old: BTreeMap<EndpointUrl, PodRef> = state
                .endpoints
                .iter()
                .map(|e| (e.url.clone(), e.pod.clone()))
                .collect();
            for e in &endpoints {
                if old.get(&e.url) != Some(&e.pod) {
                    state.given_up.remove(&e.url);
                    state.applied.remove(&e.url);
                    state.rejected.remove(&e.url);
                }
            }
            state.endpoints = endpoints;
            if let Some((render, corr)) = state.target() {
                let targets: Vec<Endpoint> = state
                    .endpoints
                    .iter()
                    .filter(|e| state.applied.get(&e.url) != Some(&render))
                    .filter(|e| !state.backoff.contains_key(&e.url))
                    .filter(|e| !state.given_up.contains(&e.url))
                    .filter(|e| !state.quarantined(&e.url, &render))
                    .cloned()
                    .collect();
                let r = reason(DeploymentCause::PodDiscovery);
                queue(state, render, targets, r, corr, &mut fx);
            }
        }
        Input::PodTerminated { pod } => {
            let gone: Vec<EndpointUrl> = state
                .endpoints
                .iter()
                .filter(|e| e.pod == pod)
                .map(|e| e.url.clone())
                .collect();
            state.endpoints.retain(|e| e.pod != pod);
            for u in gone {
                state.applied.remove(&u);
                state.backoff.remove(&u);
                state.given_up.remove(&u);
                state.rejected.remove(&u);
            }
        }
        Input::Drift { correlation } => {
            state.given_up.clear();
            // A drift check repairs what differs, but never retries a quarantined render: the
            // pod keeps what it runs.
            if let Some((render, _)) = state.target() {
                let all = not_quarantined(state, render);
                let r = reason(DeploymentCause::DriftPrevention);
                queue(state, render, all, r, correlation, &mut fx);
            }
        }
        Input::Rollback {
            correlation,
            runtime_config,
            verdict,
        } => rollback(state, (correlation, runtime_config), verdict, now, &mut fx),
        Input::RetryRejected { correlation } => {
            let cleared: BTreeSet<EndpointUrl> =
                std::mem::take(&mut state.rejected).into_keys().collect();
            if let Some((render, _)) = state.target() {
                let targets: Vec<Endpoint> = state
                    .endpoints
                    .iter()
                    .filter(|e| cleared.contains(&e.url))
                    .cloned()
                    .collect();
                let r = reason(DeploymentCause::ConfigValidation);
                queue(state, render, targets, r, correlation, &mut fx);
            }
        }
        Input::InstanceDeployed {
            deployment,
            endpoint,
        } => {
            if let Phase::Deploying {
                request,
                finished,
                succeeded,
                ..
            } = &mut state.phase
                && request.deployment == deployment
            {
                finished.insert(endpoint.clone());
                succeeded.insert(endpoint);
            }
        }
        Input::InstanceFailed {
            deployment,
            endpoint,
            retryable,
            error,
        } => {
            if let Phase::Deploying {
                request,
                finished,
                rejected,
                ..
            } = &mut state.phase
                && request.deployment == deployment
            {
                if !retryable {
                    rejected.insert(endpoint.clone(), error);
                }
                finished.insert(endpoint);
            }
        }
        Input::Completed { deployment } => {
            let matches = matches!(&state.phase, Phase::Deploying { request, .. } if request.deployment == deployment);
            if matches {
                let Phase::Deploying {
                    request,
                    succeeded,
                    mut rejected,
                    ..
                } = std::mem::replace(&mut state.phase, Phase::Idle)
                else {
                    return fx;
                };
                state.last_end = Some(now);
                state.timeout_retries = None;
                for e in &request.endpoints {
                    if succeeded.contains(&e.url) {
                        state.applied.insert(e.url.clone(), request.render);
                        state.backoff.remove(&e.url);
                        state.rejected.remove(&e.url);
                    } else if let Some(message) = rejected.remove(&e.url) {
                        // Quarantined, not backed off: retried only at the quarantine's pace.
                        quarantine(state, &request, e, message, now, &mut fx);
                    } else if let Some(q) = state
                        .rejected
                        .get(&e.url)
                        .filter(|q| q.render == request.render)
                    {
                        // A quarantine retry that failed for another reason (a timeout, a
                        // 5xx): the quarantine's next step, not the backoff, retries it, and
                        // the status says so again (the report was a plain failure).
                        fx.push(still_quarantined(&request, e, q));
                        state.applied.remove(&e.url);
                    } else {
                        state.applied.remove(&e.url);
                        let failures = state.backoff.get(&e.url).map_or(0, |b| b.failures) + 1;
                        let delay = backoff_delay(&state.settings, failures);
                        state.backoff.insert(
                            e.url.clone(),
                            Backoff {
                                failures,
                                next_at: now + delay,
                            },
                        );
                    }
                }
            } else if state
                .resume
                .as_ref()
                .is_some_and(|r| r.deployment == deployment)
            {
                // The interrupted deployment's executor finished after all.
                state.resume = None;
            }
        }
        Input::BecameLeader { term } => {
            state.leader = Some(term);
            holding(state, &mut fx);
            // A new term gets fresh throttles and retry timers (J7). A deployment still running
            // from the previous term is stopped and resumed under the new one.
            if let Phase::Deploying { request, .. } =
                std::mem::replace(&mut state.phase, Phase::Idle)
            {
                fx.push(Effect::StopExecutor);
                state.resume = Some(request);
            }
            state.backoff.clear();
            state.given_up.clear();
            state.timeout_retries = None;
            state.last_end = None;
            if let Some(r) = state.resume.take() {
                state.phase = Phase::Deploying {
                    request: r.clone(),
                    started_at: now,
                    finished: BTreeSet::new(),
                    succeeded: BTreeSet::new(),
                    rejected: BTreeMap::new(),
                };
                fx.push(Effect::Resume(r));
            } else if state.pending.is_none()
                && let Some((render, corr)) = state.target()
            {
                let targets: Vec<Endpoint> = state
                    .endpoints
                    .iter()
                    .filter(|e| state.applied.get(&e.url) != Some(&render))
                    .filter(|e| !state.quarantined(&e.url, &render))
                    .cloned()
                    .collect();
                let r = reason(DeploymentCause::BecameLeader);
                queue(state, render, targets, r, corr, &mut fx);
            }
        }
        Input::LostLeadership => {
            state.leader = None;
            if let Phase::Deploying { request, .. } =
                std::mem::replace(&mut state.phase, Phase::Idle)
            {
                fx.push(Effect::StopExecutor);
                state.resume = Some(request);
            }
            state.backoff.clear();
            state.timeout_retries = None;
        }
        Input::Tick => {}
    }
    pump(state, now, &mut fx);
    fx
}
