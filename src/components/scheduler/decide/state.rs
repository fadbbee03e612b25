//! The scheduler's state, owned by its shell task: settings, phase, the pending and resumed
//! requests, the skip cache, backoff, quarantine, and the durable part (its checkpoint).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use haptic_journal::{
    Checksum, Correlation, DeployRequest, Endpoint, EndpointUrl, RejectedRender, RollbackHold,
    RuntimeConfigRef, SchedulerCheckpoint, Term, UnixMillis,
};

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
    /// First retry of a quarantined render, doubling per rejection in a row (issue 27; upstream
    /// retries a rejected render at every drift check). Default: the drift interval, 60 s.
    pub quarantine_retry_initial: Duration,
    /// Upper bound of the quarantine's retry delay (`--quarantine-retry-max`). Default: 1 h.
    pub quarantine_retry_max: Duration,
}

impl Default for SchedulerSettings {
    fn default() -> Self {
        SchedulerSettings {
            min_deployment_interval: Duration::from_secs(2),
            deployment_timeout: Duration::from_secs(30),
            max_timeout_retries: 3,
            backoff_initial: Duration::from_secs(1),
            backoff_max: Duration::from_secs(60),
            quarantine_retry_initial: Duration::from_secs(60),
            quarantine_retry_max: Duration::from_secs(3600),
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

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
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

/// One quarantined render of one endpoint (its Dataplane API rejected it permanently), with
/// its retry schedule; journaled in the checkpoint as a [`RejectedRender`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quarantine {
    /// The rejected render.
    pub render: Checksum,
    /// HAProxy's message.
    pub message: String,
    /// Rejections of `render` by the endpoint in a row (1 at the first).
    pub attempts: u32,
    /// Wall-clock time of the next retry (a retry that starts moves it one step further, so
    /// a retry that fails for another reason waits for the next step, not the backoff's).
    pub next_retry_at: UnixMillis,
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
    /// The render validated before `last_validated` (what a rollback to `previous` names).
    pub previous_validated: Option<Checksum>,
    /// The operator's rollback while it holds: the fleet is deployed its render instead of
    /// `last_validated` ([`SchedulerState::target`]).
    pub rollback: Option<RollbackHold>,
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
    /// The quarantine: per endpoint, the render its Dataplane API rejected permanently, the
    /// message and the retry schedule. The endpoint is not sent that render again (drift
    /// checks, new terms and restarts included) before its retry time, a new render, a pod
    /// change or an operator's retry request.
    pub rejected: BTreeMap<EndpointUrl, Quarantine>,
    /// The wall clock at one instant, `(instant, unix ms)`: how the pure decision turns the
    /// journaled wall-clock retry times into [`Instant`]s and back. Set by the shell from the
    /// clocks before the first input; unset, the first input's `now` is taken as unix ms 0.
    pub wall_anchor: Option<(Instant, UnixMillis)>,
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
            previous_validated: None,
            rollback: None,
            endpoints: Vec::new(),
            runtime_config: None,
            phase: Phase::Idle,
            pending: None,
            resume: None,
            applied: BTreeMap::new(),
            backoff: BTreeMap::new(),
            given_up: BTreeSet::new(),
            rejected: BTreeMap::new(),
            wall_anchor: None,
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
    /// the last validated render and the one before it, the rollback hold, the endpoints, the
    /// HAProxyCfg, the skip cache, the given-up endpoints and the quarantine. The slots (pending, in-flight) are journaled by their own effects;
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
                .map(|(endpoint, q)| RejectedRender {
                    endpoint: endpoint.clone(),
                    render: q.render,
                    message: q.message.clone(),
                    attempts: q.attempts,
                    next_retry_at: q.next_retry_at,
                })
                .collect(),
            previous_validated: self.previous_validated,
            rollback: self.rollback.clone(),
        }
    }

    /// The render the fleet is deployed, with the correlation its deployments carry: the held
    /// render while a rollback holds, else the last validated render.
    #[must_use]
    pub fn target(&self) -> Option<(Checksum, Correlation)> {
        match &self.rollback {
            Some(h) => Some((h.render, h.correlation.clone())),
            None => self.last_validated.clone(),
        }
    }

    /// Whether `endpoint` is quarantined for `render` (its Dataplane API rejected it
    /// permanently).
    #[must_use]
    pub fn quarantined(&self, endpoint: &EndpointUrl, render: &Checksum) -> bool {
        self.rejected
            .get(endpoint)
            .is_some_and(|q| q.render == *render)
    }

    /// The wall-clock time of `at` (unix ms), by [`SchedulerState::wall_anchor`].
    #[must_use]
    pub fn wall(&self, at: Instant) -> UnixMillis {
        let (i0, w0) = self.wall_anchor.unwrap_or((at, UnixMillis(0)));
        if at >= i0 {
            UnixMillis(w0.0.saturating_add(millis(at - i0)))
        } else {
            UnixMillis(w0.0.saturating_sub(millis(i0 - at)))
        }
    }

    /// The instant of the wall-clock time `wall`, by [`SchedulerState::wall_anchor`]; a time
    /// before the anchor is the anchor's instant when it cannot be represented.
    #[must_use]
    pub fn instant(&self, wall: UnixMillis, now: Instant) -> Instant {
        let (i0, w0) = self.wall_anchor.unwrap_or((now, UnixMillis(0)));
        if wall.0 >= w0.0 {
            i0 + Duration::from_millis(wall.0 - w0.0)
        } else {
            i0.checked_sub(Duration::from_millis(w0.0 - wall.0))
                .unwrap_or(i0)
        }
    }

    /// Delay before the retry of a render rejected `attempts` times in a row: the initial
    /// delay doubling per attempt, capped by [`SchedulerSettings::quarantine_retry_max`].
    #[must_use]
    pub fn quarantine_delay(&self, attempts: u32) -> Duration {
        let exp = attempts.saturating_sub(1).min(20);
        self.settings
            .quarantine_retry_initial
            .saturating_mul(1 << exp)
            .min(self.settings.quarantine_retry_max)
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
