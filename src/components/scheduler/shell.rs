//! The scheduler's async shell: maps dispatched events to [`Input`]s, runs [`decide`], and
//! executes the effects (journal first, then act). It owns the executor task.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use haptic_journal::{
    Batch, ComponentState, Correlation, DeployRequest, Event, EventKind, Queue, RuntimeConfigRef,
    UnixMillis, WorkId, WorkKey,
};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
// The decision code takes std instants; the shell reads tokio's clock (paused in tests) and
// converts, so `decide` stays free of the runtime.
use std::time::Instant;
use tokio_util::sync::CancellationToken;

use super::decide::{
    Effect, Input, RollbackAsk, RollbackVerdict, SchedulerState, decide, resolve_rollback,
};
use super::plan::{PlanContext, plan};
use super::recover::recover;
use crate::components::deployer::{Deployer, RunOutcome};
use crate::core::health::Health;
use crate::dispatch::checkpoint::Checkpoints;
use crate::dispatch::{DispatchError, DispatchHandle, SubscribeOptions, Subscription};

/// The subscription the scheduler needs (every kind it reacts to; not leader-only: it keeps
/// its content state as a follower and gates deployments on leadership itself).
#[must_use]
pub fn subscribe_options() -> SubscribeOptions {
    SubscribeOptions::new(super::COMPONENT).kinds(&[
        EventKind::ValidationCompleted,
        EventKind::ValidationFailed,
        EventKind::HAProxyPodsDiscovered,
        EventKind::HAProxyPodTerminated,
        EventKind::DriftPreventionTriggered,
        EventKind::InstanceDeployed,
        EventKind::InstanceDeploymentFailed,
        EventKind::DeploymentCompleted,
        EventKind::ConfigPublished,
        EventKind::ConfigValidated,
        EventKind::BecameLeader,
        EventKind::LostLeadership,
        EventKind::DeploymentRetryRequest,
        EventKind::DeploymentRollbackRequest,
    ])
}

/// What a rollback's render is checked with before the fleet is held on it: the journal's copy
/// (the render store) and `haproxy -c` (the validator's binary and timeout).
#[derive(Clone, Debug)]
pub struct RollbackCheck {
    /// Where the render is loaded from.
    pub renders: crate::dispatch::render::RenderStore,
    /// `haproxy -c`.
    pub validator: crate::validate::Validator,
}

/// Counters.
#[derive(Debug, Default)]
pub struct SchedulerStats {
    /// Deployments started (incl. resumed).
    pub started: AtomicU64,
    /// Deployments cancelled after their timeout.
    pub timeouts: AtomicU64,
    /// Endpoints given up after the timeout retries.
    pub given_up: AtomicU64,
    /// Permanent rejections that (re)quarantined a render for a pod.
    pub quarantined: AtomicU64,
    /// Quarantined renders sent again after their backoff (per pod).
    pub quarantine_retries: AtomicU64,
}

struct Running {
    deployment: haptic_journal::DeploymentId,
    cancel: CancellationToken,
    task: JoinHandle<Result<RunOutcome, DispatchError>>,
}

/// Requests to a running shell.
#[derive(Clone, Debug)]
pub struct SchedulerHandle {
    /// Drain requests: (bound, reply). Capacity 1: one drain at a time is all a leader stop needs.
    drain: mpsc::Sender<(Duration, oneshot::Sender<()>)>,
    /// Counters.
    pub stats: Arc<SchedulerStats>,
    /// Stall check.
    pub health: Arc<Health>,
}

impl SchedulerHandle {
    /// Graceful leader stop: stop scheduling, let the in-flight deployment finish within
    /// `bound` (or cancel it and journal that, keeping its in-flight slot so the next
    /// `BecameLeader` on this journal resumes it: J2, J9), then return. Its outcome and final
    /// `DeployedConfigPublishRequest` are journaled by the executor before this returns. A shell
    /// that is not leader (term ended) returns at once.
    ///
    /// # Cancel safety
    /// Dropping the future does not undo the drain.
    pub async fn drain(&self, bound: Duration) {
        let (tx, rx) = oneshot::channel();
        if self.drain.send((bound, tx)).await.is_ok() {
            let _ = rx.await;
        }
    }
}

/// The scheduler task.
pub struct SchedulerShell {
    state: SchedulerState,
    dispatch: DispatchHandle,
    deployer: Arc<Deployer>,
    sub: Subscription,
    timer: Option<Instant>,
    running: Option<Running>,
    pending_id: Option<WorkId>,
    inflight_id: Option<WorkId>,
    draining: bool,
    /// Drain requests from [`SchedulerHandle::drain`].
    drain_rx: mpsc::Receiver<(Duration, oneshot::Sender<()>)>,
    stats: Arc<SchedulerStats>,
    health: Arc<Health>,
    /// The scheduler's checkpoint (DESIGN.md J11): restored at start, written with the effects
    /// of every input that changes the durable state.
    checkpoints: Checkpoints,
    /// How a rollback's render is checked; `None`: rollback requests are refused, saying so.
    rollback_check: Option<RollbackCheck>,
}

debug_non_exhaustive!(SchedulerShell, |x| "state" => x.state);

impl SchedulerShell {
    /// A shell over `sub` (subscribed with [`subscribe_options`]).
    #[must_use]
    pub fn new(
        mut state: SchedulerState,
        dispatch: DispatchHandle,
        deployer: Arc<Deployer>,
        sub: Subscription,
    ) -> (Self, SchedulerHandle) {
        // The clocks the pure decision converts the journaled retry times with.
        state.wall_anchor = Some((tokio::time::Instant::now().into_std(), UnixMillis::now()));
        let (drain, drain_rx) = mpsc::channel(1);
        let stats = Arc::new(SchedulerStats::default());
        let health = Arc::new(Health::default());
        let handle = SchedulerHandle {
            drain,
            stats: stats.clone(),
            health: health.clone(),
        };
        (
            SchedulerShell {
                state,
                dispatch,
                deployer,
                sub,
                timer: None,
                running: None,
                pending_id: None,
                inflight_id: None,
                draining: false,
                drain_rx,
                stats,
                health,
                checkpoints: Checkpoints::fresh(super::COMPONENT),
                rollback_check: None,
            },
            handle,
        )
    }

    /// Checks the render of each rollback request with `check` (the controller always sets
    /// it; without it a request is refused, naming why).
    #[must_use]
    pub fn with_rollback_check(mut self, check: RollbackCheck) -> Self {
        self.rollback_check = Some(check);
        self
    }

    /// The input of a `deployment.rollback.request`: [`resolve_rollback`] against the state,
    /// then, for a render, the journal's copy loaded and validated with `haproxy -c`. Folded
    /// again after a restart when its event is replayed: the state it resolves against is the
    /// checkpoint's, so `previous` names the same render.
    async fn rollback_input(
        &self,
        correlation: &Correlation,
        runtime_config: &RuntimeConfigRef,
        value: Option<&str>,
        shown: Option<&(String, haptic_journal::Checksum)>,
    ) -> Input {
        let verdict = match resolve_rollback(&self.state, value, shown) {
            RollbackAsk::Unchanged => RollbackVerdict::Unchanged,
            RollbackAsk::Release => RollbackVerdict::Release {
                shown: shown.map(|(_, c)| *c),
            },
            RollbackAsk::Refuse { value, reason } => RollbackVerdict::Refuse { value, reason },
            RollbackAsk::Check { value, render } => match self.check_rollback(render).await {
                Ok(()) => RollbackVerdict::Hold { value, render },
                Err(reason) => RollbackVerdict::Refuse { value, reason },
            },
        };
        Input::Rollback {
            correlation: correlation.clone(),
            runtime_config: runtime_config.clone(),
            verdict,
        }
    }

    /// Loads `render` from the journal and runs `haproxy -c` on it; the refusal's reason when
    /// it is missing or rejected.
    async fn check_rollback(&self, render: haptic_journal::Checksum) -> Result<(), String> {
        let Some(check) = &self.rollback_check else {
            return Err("this scheduler was started without a validator; no rollback".to_owned());
        };
        let content = match check.renders.load(render).await {
            Ok(r) => r.into_content(),
            Err(e) => {
                tracing::warn!(%render, error = %e, "rollback: render not loadable");
                return Err(format!(
                    "render {render} is not in this replica's journal (trimmed, or never rendered here): pick one that `haptic-journalctl history FILE` or GET /debug/history lists ({e})"
                ));
            }
        };
        match check.validator.validate(&content).await {
            Ok(v) if v.outcome.passed() => Ok(()),
            Ok(v) => Err(format!(
                "render {render} fails haproxy -c now: {}",
                v.outcome.messages().join("; ")
            )),
            Err(e) => Err(format!("render {render} could not be validated: {e}")),
        }
    }

    /// Runs until `cancel` or until the dispatcher stops. Recovers the scheduler's checkpoint
    /// and the journaled pending and in-flight slots first (resumed on the next `BecameLeader`);
    /// replayed events the checkpoint already folded are skipped.
    ///
    /// # Errors
    /// [`DispatchError`] when the journal fails (stop and reopen).
    ///
    /// # Cancel safety
    /// Use `cancel`: the executor is stopped and awaited; the in-flight slot stays for recovery.
    pub async fn run(mut self, cancel: CancellationToken) -> Result<(), DispatchError> {
        self.recover().await?;
        let result = self.serve(&cancel).await;
        self.stop_executor().await;
        result
    }

    async fn recover(&mut self) -> Result<(), DispatchError> {
        let j = self.dispatch.journal().clone();
        let r = tokio::task::spawn_blocking(move || recover(&j))
            .await
            .map_err(DispatchError::Join)?
            .map_err(DispatchError::Read)?;
        self.checkpoints = r.checkpoints;
        self.pending_id = r.pending_id;
        self.inflight_id = r.inflight_id;
        self.step(r.input).await
    }

    async fn serve(&mut self, cancel: &CancellationToken) -> Result<(), DispatchError> {
        loop {
            let timer = self.timer;
            tokio::select! {
                () = cancel.cancelled() => return Ok(()),
                d = self.sub.recv() => {
                    let Some(d) = d else { return Ok(()) };
                    if self.checkpoints.folded(d.seq) {
                        continue;
                    }
                    self.checkpoints.saw(d.seq);
                    if let Event::DeploymentRollbackRequest { correlation, runtime_config, value, shown } = &*d.event {
                        let input = self.rollback_input(correlation, runtime_config, value.as_deref(), shown.as_ref()).await;
                        self.step(input).await?;
                    } else if let Some(input) = to_input(&d.event, d.replayed, &self.state) {
                        if matches!(input, Input::BecameLeader { .. }) {
                            haptic_journal::crash_point!("leadership::before_replay");
                        }
                        self.step(input).await?;
                    }
                    // Dropped only now: the state this event produced is durable (J11).
                    drop(d);
                }
                () = sleep_until(timer) => {
                    self.timer = None;
                    self.step(Input::Tick).await?;
                }
                r = join_running(&mut self.running) => {
                    let deployment = self.running.take().map(|r| r.deployment);
                    match r {
                        Ok(Ok(outcome)) => tracing::debug!(?deployment, ?outcome, "executor finished"),
                        Ok(Err(e)) => {
                            tracing::error!(error = %e, "executor failed to journal");
                            return Err(e);
                        }
                        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                        Err(_) => {}
                    }
                }
                req = self.drain_rx.recv() => {
                    if let Some((bound, reply)) = req {
                        self.drain(bound).await?;
                        let _ = reply.send(());
                    }
                }
            }
        }
    }

    async fn drain(&mut self, bound: Duration) -> Result<(), DispatchError> {
        if self.state.leader.is_none() {
            return Ok(());
        }
        self.draining = true;
        let Some(running) = self.running.as_mut() else {
            return Ok(());
        };
        match tokio::time::timeout(bound, &mut running.task).await {
            Ok(_) => {
                self.running = None;
            }
            Err(_) => {
                let deployment = running.deployment.clone();
                let corr = self.state.last_validated.as_ref().map(|(_, c)| c.clone());
                self.stop_executor().await;
                // The slot stays (J2, J9): the next `BecameLeader` (this replica restarted or
                // the next leader on this journal) resumes the deployment.
                self.journal_cancel(
                    deployment,
                    corr.unwrap_or_else(|| Correlation::new("drain")),
                    "drain",
                    true,
                )
                .await?;
            }
        }
        Ok(())
    }

    async fn step(&mut self, input: Input) -> Result<(), DispatchError> {
        self.health.begin(UnixMillis::now().0);
        let now = tokio::time::Instant::now().into_std();
        let effects = decide(&mut self.state, input, now);
        self.checkpoints
            .note(ComponentState::Scheduler(self.state.checkpoint()));
        let r = match self.apply(effects).await {
            Ok(()) => match self.checkpoints.leftover() {
                Some(b) => self.dispatch.accept(b).await.map(|_| ()),
                None => Ok(()),
            },
            Err(e) => Err(e),
        };
        self.health.end();
        r
    }

    async fn apply(&mut self, effects: Vec<Effect>) -> Result<(), DispatchError> {
        let mut plan = plan(
            effects,
            &PlanContext {
                pending_id: self.pending_id,
                inflight_id: self.inflight_id,
                draining: self.draining,
                term: self.state.leader.unwrap_or_default(),
                max_timeout_retries: self.state.settings.max_timeout_retries,
                now: UnixMillis::now(),
            },
        );
        let st = &self.stats;
        st.timeouts.fetch_add(plan.timeouts, Relaxed);
        st.given_up.fetch_add(plan.given_up, Relaxed);
        st.quarantined.fetch_add(plan.quarantined, Relaxed);
        st.quarantine_retries
            .fetch_add(plan.quarantine_retries, Relaxed);
        if plan.stop_executor {
            self.stop_executor().await;
        }
        if !plan.batch.is_empty() {
            // The checkpoint rides along with every batch, so a restart never replays an input
            // whose records are durable.
            self.checkpoints
                .touch(ComponentState::Scheduler(self.state.checkpoint()));
        }
        self.checkpoints.attach(&mut plan.batch);
        if !plan.batch.is_empty() {
            let accepted = self
                .dispatch
                .accept(std::mem::take(&mut plan.batch))
                .await?;
            plan.update_slot_ids(
                accepted.work_ids(),
                &mut self.inflight_id,
                &mut self.pending_id,
            );
            if plan.pending_enqueued {
                haptic_journal::crash_point!("scheduler::after_pending_journaled");
            }
        }
        if let Some(request) = plan.spawn {
            if plan.scheduled {
                haptic_journal::crash_point!("scheduler::after_scheduled_journaled");
            }
            self.spawn_executor(request);
        }
        if let Some(at) = plan.timer {
            self.timer = Some(self.timer.map_or(at, |t| t.min(at)));
        }
        Ok(())
    }

    fn spawn_executor(&mut self, request: DeployRequest) {
        let Some(inflight) = self.inflight_id else {
            tracing::error!("no in-flight slot id: deployment not started");
            return;
        };
        self.stats.started.fetch_add(1, Ordering::Relaxed);
        let cancel = CancellationToken::new();
        let deployer = self.deployer.clone();
        let deployment = request.deployment.clone();
        let token = cancel.clone();
        tracing::info!(deployment = %deployment, reason = %request.reason, endpoints = request.endpoints.len(), "deployment started");
        let task = tokio::spawn(async move { deployer.run(inflight, request, token).await });
        self.running = Some(Running {
            deployment,
            cancel,
            task,
        });
    }

    /// Cancels the executor task and waits for it to stop (it stops at the next await point).
    async fn stop_executor(&mut self) {
        if let Some(r) = self.running.take() {
            r.cancel.cancel();
            let _ = r.task.await;
        }
    }

    async fn journal_cancel(
        &mut self,
        deployment: haptic_journal::DeploymentId,
        correlation: Correlation,
        reason: &str,
        keep_slot: bool,
    ) -> Result<(), DispatchError> {
        let mut b = Batch::new();
        self.checkpoints.attach(&mut b);
        b.event(Event::DeploymentCancelRequest {
            correlation,
            deployment,
            reason: reason.to_owned(),
        });
        if !keep_slot && let Some(id) = self.inflight_id.take() {
            b.ack(Queue::DeployInflight, WorkKey::Slot, id);
        }
        self.dispatch.accept(b).await?;
        Ok(())
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(tokio::time::Instant::from_std(t)).await,
        None => std::future::pending().await,
    }
}

async fn join_running(
    running: &mut Option<Running>,
) -> Result<Result<RunOutcome, DispatchError>, tokio::task::JoinError> {
    match running {
        Some(r) => (&mut r.task).await,
        None => std::future::pending().await,
    }
}

/// Maps a dispatched event to the scheduler's input. Replayed leadership events are not
/// leadership (the replica re-acquires the Lease after a restart).
pub fn to_input(event: &Event, replayed: bool, state: &SchedulerState) -> Option<Input> {
    Some(match event {
        Event::ValidationCompleted {
            render,
            correlation,
            trigger_reason,
            ..
        } => Input::Validated {
            render: *render,
            correlation: correlation.clone(),
            trigger_reason: trigger_reason.clone(),
        },
        Event::ValidationFailed { correlation, .. } => Input::ValidationFailed {
            correlation: correlation.clone(),
        },
        Event::HAProxyPodsDiscovered { endpoints, .. } => Input::PodsDiscovered {
            endpoints: endpoints.clone(),
        },
        Event::HAProxyPodTerminated { pod, .. } => Input::PodTerminated { pod: pod.clone() },
        Event::DriftPreventionTriggered { correlation, .. } => Input::Drift {
            correlation: correlation.clone(),
        },
        Event::InstanceDeployed {
            deployment,
            endpoint,
            ..
        } => Input::InstanceDeployed {
            deployment: deployment.clone(),
            endpoint: endpoint.url.clone(),
        },
        Event::InstanceDeploymentFailed {
            deployment,
            endpoint,
            error,
            retryable,
            ..
        } => Input::InstanceFailed {
            deployment: deployment.clone(),
            endpoint: endpoint.url.clone(),
            retryable: *retryable,
            error: error.clone(),
        },
        Event::DeploymentRetryRequest { correlation, .. } => Input::RetryRejected {
            correlation: correlation.clone(),
        },
        Event::DeploymentCompleted { deployment, .. } => Input::Completed {
            deployment: deployment.clone(),
        },
        Event::ConfigPublished { runtime_config, .. }
            if !runtime_config.name.as_str().ends_with("-invalid") =>
        {
            Input::RuntimeConfig(runtime_config.clone())
        }
        // The HAProxyCfg of the validated identity: the first one, or another one after a
        // changed `--config-name` (issue 15).
        Event::ConfigValidated { identity, .. }
            if state.runtime_config.as_ref() != Some(&identity_runtime_config(identity)) =>
        {
            Input::RuntimeConfig(identity_runtime_config(identity))
        }
        Event::BecameLeader { term, .. } if !replayed => Input::BecameLeader { term: *term },
        Event::LostLeadership { .. } if !replayed => Input::LostLeadership,
        _ => return None,
    })
}

/// The main HAProxyCfg of a validated identity (`<config-name>-haproxycfg` in its namespace).
fn identity_runtime_config(identity: &haptic_journal::ConfigIdentity) -> RuntimeConfigRef {
    RuntimeConfigRef {
        namespace: identity.namespace.clone(),
        name: crate::core::naming::haproxycfg_name(identity.name.as_str()).into(),
    }
}
