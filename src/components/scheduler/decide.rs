//! The scheduler's pure decision function: state plus one input plus `now` gives effects.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use haptic_journal::{
    Checksum, Correlation, DeployRequest, DeploymentCause, DeploymentId, DeploymentReason,
    Endpoint, EndpointApplied, EndpointUrl, InFlightDeployment, PodRef, RejectedRender,
    RuntimeConfigRef, SchedulerCheckpoint, Term,
};
use std::time::Instant;

/// Scheduler settings (DESIGN.md section 3 defaults).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchedulerSettings {
    /// Minimum time from the end of one deployment to the start of the next. Default: 2 s.
    pub min_deployment_interval: Duration,
    /// A deployment running longer is cancelled and retried. Default: 30 s.
    pub deployment_timeout: Duration,
    /// Timeout retries of the same render before its unfinished pods are marked failed. Default: 3.
    pub max_timeout_retries: u32,
    /// First retry delay of a failed endpoint, doubling per failure. Default: 1 s.
    pub backoff_initial: Duration,
    /// Upper bound of the retry delay. Default: 60 s.
    pub backoff_max: Duration,
}

impl Default for SchedulerSettings {
    fn default() -> Self {
        SchedulerSettings {
            min_deployment_interval: Duration::from_secs(2),
            deployment_timeout: Duration::from_secs(30),
            max_timeout_retries: 3,
            backoff_initial: Duration::from_secs(1),
            backoff_max: Duration::from_secs(60),
        }
    }
}

impl SchedulerSettings {
    /// The defaults with `--min-deployment-interval` and `--deployment-timeout` applied.
    #[must_use]
    pub fn with_intervals(min_deployment_interval: Duration, deployment_timeout: Duration) -> Self {
        SchedulerSettings {
            min_deployment_interval,
            deployment_timeout,
            ..SchedulerSettings::default()
        }
    }
}

/// What the scheduler is doing.
#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(clippy::large_enum_variant)] // one value per scheduler, never moved in bulk
pub enum Phase {
    /// Nothing running (a pending request may wait for the rate limit: see [`SchedulerState::ready_at`]).
    Idle,
    /// A deployment runs.
    Deploying {
        /// The request being executed.
        request: DeployRequest,
        /// When it started (timeout reference).
        started_at: Instant,
        /// Endpoints that reported a result (success or failure), by URL.
        finished: BTreeSet<EndpointUrl>,
        /// Endpoints that succeeded.
        succeeded: BTreeSet<EndpointUrl>,
        /// Endpoints whose failure was a permanent rejection of the render, with the message.
        rejected: BTreeMap<EndpointUrl, String>,
    },
}

/// Retry state of one failed endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// Consecutive failures.
    pub failures: u32,
    /// Earliest next try.
    pub next_at: Instant,
}

/// The scheduler's state, owned by its shell task.
#[derive(Clone, Debug)]
pub struct SchedulerState {
    /// Settings.
    pub settings: SchedulerSettings,
    /// Prefix of deployment ids (unique per process start), e.g. `d<unix ms>`.
    pub id_prefix: String,
    /// Deployments created so far (id suffix).
    pub next_id: u64,
    /// The last validated render and the correlation of its validation.
    pub last_validated: Option<(Checksum, Correlation)>,
    /// The admitted endpoints, as last discovered.
    pub endpoints: Vec<Endpoint>,
    /// The HAProxyCfg per-pod status goes to.
    pub runtime_config: Option<RuntimeConfigRef>,
    /// Current phase.
    pub phase: Phase,
    /// The pending request (latest wins); mirrored in the journal's `deploy-pending` slot.
    pub pending: Option<DeployRequest>,
    /// A journaled in-flight deployment interrupted by a restart or a lost Lease: resumed on
    /// the next `BecameLeader`.
    pub resume: Option<DeployRequest>,
    /// What each endpoint is known to run after a success (the skip cache; success only).
    pub applied: BTreeMap<EndpointUrl, Checksum>,
    /// Failed endpoints waiting for their bounded backoff.
    pub backoff: BTreeMap<EndpointUrl, Backoff>,
    /// Endpoints given up after the timeout retries (until a new render, pod change or drift).
    pub given_up: BTreeSet<EndpointUrl>,
    /// The quarantine: per endpoint, the render its Dataplane API rejected permanently and
    /// the message. The endpoint is not sent that render again (drift checks, new terms and
    /// restarts included) until a new render, a pod change or an operator's retry request.
    pub rejected: BTreeMap<EndpointUrl, (Checksum, String)>,
    /// Timeout retries of one render.
    pub timeout_retries: Option<(Checksum, u32)>,
    /// End of the last deployment (rate limit reference).
    pub last_end: Option<Instant>,
    /// Whether this replica leads (only a leader starts deployments).
    pub leader: Option<Term>,
}

impl SchedulerState {
    /// A fresh state.
    #[must_use]
    pub fn new(settings: SchedulerSettings, id_prefix: impl Into<String>) -> Self {
        SchedulerState {
            settings,
            id_prefix: id_prefix.into(),
            next_id: 1,
            last_validated: None,
            endpoints: Vec::new(),
            runtime_config: None,
            phase: Phase::Idle,
            pending: None,
            resume: None,
            applied: BTreeMap::new(),
            backoff: BTreeMap::new(),
            given_up: BTreeSet::new(),
            rejected: BTreeMap::new(),
            timeout_retries: None,
            last_end: None,
            leader: None,
        }
    }

    /// When the next deployment may start (rate limit).
    #[must_use]
    pub fn ready_at(&self, now: Instant) -> Instant {
        match self.last_end {
            Some(end) => (end + self.settings.min_deployment_interval).max(now),
            None => now,
        }
    }

    /// The durable part of the state (DESIGN.md J11), journaled as the scheduler's checkpoint:
    /// the last validated render, the endpoints, the HAProxyCfg, the skip cache, the
    /// given-up endpoints and the quarantine. The slots (pending, in-flight) are journaled by their own effects;
    /// ids are per process; the phase, the rate limit, backoff and timeout retries are per term
    /// (J7: reset at every leadership change, which every restart is).
    #[must_use]
    pub fn checkpoint(&self) -> SchedulerCheckpoint {
        SchedulerCheckpoint {
            last_validated: self.last_validated.clone(),
            endpoints: self.endpoints.clone(),
            runtime_config: self.runtime_config.clone(),
            applied: self.applied.iter().map(|(u, c)| (u.clone(), *c)).collect(),
            given_up: self.given_up.iter().cloned().collect(),
            rejected: self
                .rejected
                .iter()
                .map(|(endpoint, (render, message))| RejectedRender {
                    endpoint: endpoint.clone(),
                    render: *render,
                    message: message.clone(),
                })
                .collect(),
        }
    }

    /// Whether `endpoint` is quarantined for `render` (its Dataplane API rejected it
    /// permanently).
    #[must_use]
    pub fn quarantined(&self, endpoint: &EndpointUrl, render: &Checksum) -> bool {
        self.rejected
            .get(endpoint)
            .is_some_and(|(r, _)| r == render)
    }

    /// The phase name for logs and health (`idle`, `rate_limiting`, `deploying`).
    #[must_use]
    pub fn phase_name(&self, now: Instant) -> &'static str {
        match (&self.phase, &self.pending) {
            (Phase::Deploying { .. }, _) => "deploying",
            (Phase::Idle, Some(_)) if self.ready_at(now) > now => "rate_limiting",
            _ => "idle",
        }
    }
}

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
    match input {
        Input::Recovered {
            checkpoint,
            pending,
            inflight,
            applied,
        } => {
            if let Some(c) = checkpoint {
                state.last_validated = c.last_validated;
                state.endpoints = c.endpoints;
                state.runtime_config = c.runtime_config;
                state.applied = c.applied.into_iter().collect();
                state.given_up = c.given_up.into_iter().collect();
                state.rejected = c
                    .rejected
                    .into_iter()
                    .map(|r| (r.endpoint, (r.render, r.message)))
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
                if let Some((render, correlation)) = state.last_validated.clone()
                    && !state.endpoints.is_empty()
                {
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
            let new_render = state.last_validated.as_ref().map(|(r, _)| *r) != Some(render);
            if new_render {
                state.given_up.clear();
                state.timeout_retries = None;
            }
            // A quarantine holds for its render only.
            state.rejected.retain(|_, (r, _)| *r == render);
            state.last_validated = Some((render, correlation.clone()));
            let drift = trigger_reason == DRIFT_TRIGGER_REASON;
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
            if !targets.is_empty() {
                queue(state, render, targets, reason(cause), correlation, &mut fx);
            }
        }
        Input::ValidationFailed { correlation } => {
            if let Some((render, _)) = state.last_validated.clone() {
                let all = not_quarantined(state, render);
                if !all.is_empty() {
                    let r = reason(DeploymentCause::ValidationFallback);
                    queue(state, render, all, r, correlation, &mut fx);
                }
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
            if let Some((render, corr)) = state.last_validated.clone() {
                let targets: Vec<Endpoint> = state
                    .endpoints
                    .iter()
                    .filter(|e| state.applied.get(&e.url) != Some(&render))
                    .filter(|e| !state.backoff.contains_key(&e.url))
                    .filter(|e| !state.given_up.contains(&e.url))
                    .filter(|e| !state.quarantined(&e.url, &render))
                    .cloned()
                    .collect();
                if !targets.is_empty() {
                    let r = reason(DeploymentCause::PodDiscovery);
                    queue(state, render, targets, r, corr, &mut fx);
                }
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
            if let Some((render, _)) = state.last_validated.clone() {
                let all = not_quarantined(state, render);
                if !all.is_empty() {
                    let r = reason(DeploymentCause::DriftPrevention);
                    queue(state, render, all, r, correlation, &mut fx);
                }
            }
        }
        Input::RetryRejected { correlation } => {
            let cleared: BTreeSet<EndpointUrl> =
                std::mem::take(&mut state.rejected).into_keys().collect();
            if let Some((render, _)) = state.last_validated.clone() {
                let targets: Vec<Endpoint> = state
                    .endpoints
                    .iter()
                    .filter(|e| cleared.contains(&e.url))
                    .cloned()
                    .collect();
                if !targets.is_empty() {
                    let r = reason(DeploymentCause::ConfigValidation);
                    queue(state, render, targets, r, correlation, &mut fx);
                }
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
                        // Quarantined, not backed off: retrying cannot help.
                        state.applied.remove(&e.url);
                        state.backoff.remove(&e.url);
                        state
                            .rejected
                            .insert(e.url.clone(), (request.render, message));
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
                && let Some((render, corr)) = state.last_validated.clone()
            {
                let targets: Vec<Endpoint> = state
                    .endpoints
                    .iter()
                    .filter(|e| state.applied.get(&e.url) != Some(&render))
                    .filter(|e| !state.quarantined(&e.url, &render))
                    .cloned()
                    .collect();
                if !targets.is_empty() {
                    let r = reason(DeploymentCause::BecameLeader);
                    queue(state, render, targets, r, corr, &mut fx);
                }
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

/// Every endpoint not quarantined for `render`, in discovery order.
fn not_quarantined(state: &SchedulerState, render: Checksum) -> Vec<Endpoint> {
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

fn new_request(
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
/// no endpoint loses its turn).
fn queue(
    state: &mut SchedulerState,
    render: Checksum,
    mut endpoints: Vec<Endpoint>,
    reason: DeploymentReason,
    correlation: Correlation,
    fx: &mut Vec<Effect>,
) {
    if let Some(old) = &state.pending
        && old.render == render
    {
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
fn pump(state: &mut SchedulerState, now: Instant, fx: &mut Vec<Effect>) {
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
            start(state, req, true, now, fx);
        }
        return;
    }
    // Failed endpoints due for their retry.
    let due: Vec<Endpoint> = state
        .endpoints
        .iter()
        .filter(|e| state.backoff.get(&e.url).is_some_and(|b| b.next_at <= now))
        .cloned()
        .collect();
    if !due.is_empty()
        && let Some((render, corr)) = state.last_validated.clone()
    {
        if ready > now {
            fx.push(Effect::ArmTimer(ready));
            return;
        }
        if let Some(req) = new_request(
            state,
            render,
            due,
            reason(DeploymentCause::ConfigValidation),
            corr,
        ) {
            start(state, req, false, now, fx);
            return;
        }
    }
    if let Some(next) = state
        .backoff
        .iter()
        .filter(|(u, _)| state.endpoints.iter().any(|e| &e.url == *u))
        .map(|(_, b)| b.next_at)
        .min()
    {
        fx.push(Effect::ArmTimer(next.max(ready)));
    }
}

fn start(
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

fn on_timeout(state: &mut SchedulerState, now: Instant, fx: &mut Vec<Effect>) {
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
        state.backoff.remove(&url);
        state.applied.remove(&url);
        state.rejected.insert(url, (request.render, message));
    }
    fx.push(Effect::Cancel {
        deployment: request.deployment.clone(),
        correlation: request.correlation.clone(),
    });
    let retry_reason = DeploymentReason {
        cause: request.reason.cause,
        timeout_retry: true,
    };
    let from_pending = state.pending.is_some();
    let unfinished: Vec<Endpoint> = request
        .endpoints
        .iter()
        .filter(|e| !finished.contains(&e.url))
        .cloned()
        .collect();
    let (retry_render, retry_endpoints, retry_corr) = match state.pending.take() {
        Some(p) => (p.render, p.endpoints, p.correlation),
        None => (
            request.render,
            unfinished.clone(),
            request.correlation.clone(),
        ),
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
        return;
    }
    state.timeout_retries = Some((retry_render, count));
    if retry_endpoints.is_empty() {
        return;
    }
    if let Some(req) = new_request(
        state,
        retry_render,
        retry_endpoints,
        retry_reason,
        retry_corr,
    ) {
        start(state, req, from_pending, now, fx);
    }
}
