//! `deployment-scheduler`: decides *when* a render is deployed to which endpoints.
//!
//! ```text
//!  ValidationCompleted / ValidationFailed / HAProxyPodsDiscovered / HAProxyPodTerminated /
//!  DriftPreventionTriggered / InstanceDeployed / InstanceDeploymentFailed / DeploymentCompleted /
//!  ConfigPublished / ConfigValidated / BecameLeader / LostLeadership /
//!  DeploymentRetryRequest / DeploymentRollbackRequest (resolved, checked) (dispatcher, Seq order)
//!        │                                     timer (rate limit, timeout, backoff)
//!        ▼                                        │
//!  decide(&mut SchedulerState, Input, now) ───────┘──► Vec<Effect>
//!        │ PersistPending      → journal slot deploy-pending (latest wins)
//!        │ Start               → journal DeploymentScheduled + slot deploy-inflight (+ ack pending),
//!        │                        then the Deployer runs as a task (cancellable)
//!        │ Cancel (timeout)    → cancel the task for real, journal DeploymentCancelRequest + ack
//!        │ Resume              → rerun the journaled in-flight deployment (restart, new term)
//!        │ GiveUp              → ConfigAppliedToPod with the reason, for pods that never finished
//!        │ Quarantined         → DeploymentQuarantined (attempt, next retry time) for the status
//!        ▼ Rollback            → DeploymentRollback (held, ended, refused) for the condition
//! ```
//!
//! Fixes over upstream (DESIGN.md section 3): completions match the deployment id (stale ones are
//! ignored); a pending deployment waits for the running one, then for `min_deployment_interval`;
//! a timeout cancels the executor task and retries (`_timeout_retry`) at most 3 times per render;
//! the skip cache holds per-endpoint successes only; failed endpoints retry with a bounded
//! exponential backoff (1 s doubling to 60 s); drift checks every endpoint (no skip cache).
//!
//! Quarantine (issue 15): a failure reported not `retryable` (the pod's Dataplane API rejected
//! the configuration push with 400/422, again after its files were synced again) quarantines
//! the (render, endpoint) in [`SchedulerState::rejected`] instead of backing off. The endpoint
//! is not sent that render again by backoff, drift checks, validation fallbacks, pod discovery
//! or new terms (the quarantine is in the checkpoint) until a new render passes, the
//! endpoint's pod changes, `deployment.retry.request` (the HAProxyCfg annotation
//! `haproxy-haptic.org/retry-rejected`) asks for one more attempt, or its retry time comes
//! (issue 27: a transient cause, such as a server name the pod briefly cannot resolve, must not
//! pin the pod on the old render; upstream retries at every drift check). The retry
//! (`quarantine_retry`) goes to the quarantined pods only, the drift interval after the first
//! rejection, doubling per rejection in a row up to `--quarantine-retry-max` (default 1 h). The
//! retry time is wall-clock time in the checkpoint ([`haptic_journal::RejectedRender`]), moved
//! one step on when a retry starts, so a restart or a new leader neither retries at once nor
//! forgets it; a retry that ends without a verdict (a timeout, a 5xx) waits for that step.
//! Each rejection journals `deployment.quarantined` (attempt, next retry), which the publisher
//! shows as the pod's `nextRetryAt`.
//!
//! Rollback (issue 28): `deployment.rollback.request` (the HAProxyCfg annotation
//! `haproxy-haptic.org/rollback-to`) is resolved by [`decide::resolve_rollback`] (a checksum, or
//! `previous`: [`SchedulerState::previous_validated`], fixed here), checked by the shell (the
//! journal's copy, `haproxy -c`: [`shell::RollbackCheck`]) and folded as
//! [`decide::Input::Rollback`]: the hold ([`SchedulerState::rollback`], in the checkpoint) makes
//! [`SchedulerState::target`] the held render for every deployment decision; newer renders
//! update `last_validated` only; removing the annotation deploys the newest again.
//!
//! # Inputs
//! [`decide::Input`]: the events above, journal recovery, timer ticks.
//!
//! # Effects
//! [`decide::Effect`].
//!
//! # Journal records
//! Queues `deploy-pending` (one slot, latest wins) and `deploy-inflight` (one slot); events
//! `deployment.scheduled`, `deployment.cancel.request`, `config.applied.to.pod` (give-up),
//! `deployment.quarantined`, `deployment.rollback`;
//! reads table `endpoint_applied` at start.
//!
//! # Failpoints
//! `scheduler::after_scheduled_journaled` (scheduled + in-flight committed, executor not started).
//!
//! # Metrics
//! [`shell::SchedulerStats`]: deployments scheduled, timeouts, stale completions ignored;
//! exported as `haptic_scheduler_*_total` and `haptic_retries_total{component="deployment-scheduler"}`
//! (the scheduler's own families: `metrics.rs`).

pub mod decide;
mod metrics;
pub mod plan;
mod recover;
pub mod shell;
#[cfg(test)]
mod tests;

pub use decide::{
    Backoff, DRIFT_TRIGGER_REASON, Effect, Input, Phase, Quarantine, ROLLBACK_PREVIOUS,
    RollbackAsk, RollbackVerdict, SchedulerSettings, SchedulerState, backoff_delay, decide,
    resolve_rollback,
};
pub use plan::{Plan, PlanContext, plan};
pub use recover::{Recovery, recover};
pub use shell::{
    RollbackCheck, SchedulerHandle, SchedulerShell, SchedulerStats, subscribe_options, to_input,
};

/// Component identifier (logs, metrics, health).
pub const COMPONENT: &str = "deployment-scheduler";
