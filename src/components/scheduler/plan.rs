//! The scheduler's plan: one input's effects turned into what the shell does, in order (pure: no
//! I/O, no clock). Its batch is the only journal write of the input, so the effects and the
//! scheduler's checkpoint are durable together (DESIGN.md J1, J11).

use std::time::Instant;

use haptic_journal::{
    Batch, DeployRequest, DeploymentCause, Event, InFlightDeployment, Origin, Queue, SyncMetadata,
    UnixMillis, WorkId, WorkItem, WorkKey,
};

use super::decide::Effect;

/// What the shell knows when it turns one input's effects into a [`Plan`].
#[derive(Clone, Copy, Debug)]
pub struct PlanContext {
    /// Work id of the journaled pending slot, if any.
    pub pending_id: Option<WorkId>,
    /// Work id of the journaled in-flight slot, if any.
    pub inflight_id: Option<WorkId>,
    /// Whether a leader stop is draining (nothing new starts; a cancelled deployment keeps its
    /// in-flight slot for the next term).
    pub draining: bool,
    /// The term the in-flight slot is stamped with.
    pub term: haptic_journal::Term,
    /// Timeout retries before pods are given up (the give-up message names it).
    pub max_timeout_retries: u32,
    /// Wall clock for the in-flight slot's `started_at`.
    pub now: UnixMillis,
}

/// One input's effects, in the order the shell carries them out: stop the executor (a timeout's
/// cancel, a lost Lease, a new term), then **one** journal batch holding every record the input
/// caused (plus, added by the shell, the scheduler's checkpoint: the state and its effects are
/// durable together, J11), then start the executor and arm the timer. One commit per input, so
/// a kill lands either before the input took effect (it is replayed) or after all of it.
#[derive(Debug, Default)]
pub struct Plan {
    /// Stop (and await) the running executor before the batch.
    pub stop_executor: bool,
    /// Every journal record of the input (may be empty).
    pub batch: Batch,
    /// The batch enqueues a new in-flight slot (its work id is the first of `work_ids`).
    pub inflight_enqueued: bool,
    /// The batch enqueues the pending slot (its work id follows the in-flight one).
    pub pending_enqueued: bool,
    /// The batch acks the journaled in-flight slot.
    pub inflight_acked: bool,
    /// The batch acks the journaled pending slot.
    pub pending_acked: bool,
    /// The batch journals `deployment.scheduled` for `spawn`.
    pub scheduled: bool,
    /// Start the executor on this request after the commit.
    pub spawn: Option<DeployRequest>,
    /// Wake the shell at this time.
    pub timer: Option<Instant>,
    /// Deployments cancelled after their timeout.
    pub timeouts: u64,
    /// Endpoints given up after the timeout retries.
    pub given_up: u64,
    /// Quarantined renders sent again to an endpoint (one per endpoint of a
    /// `quarantine_retry` deployment started).
    pub quarantine_retries: u64,
    /// Permanent rejections that (re)quarantined a render for an endpoint.
    pub quarantined: u64,
}

impl Plan {
    /// The journaled slots' work ids once the plan's batch is committed: an acked slot is
    /// gone, an enqueued one takes the next of the batch's work ids (`work_ids`,
    /// `Accepted::work_ids`: the in-flight slot's first, then the pending one's).
    pub fn update_slot_ids(
        &self,
        work_ids: Vec<WorkId>,
        inflight: &mut Option<WorkId>,
        pending: &mut Option<WorkId>,
    ) {
        let mut ids = work_ids.into_iter();
        if self.inflight_acked {
            *inflight = None;
        }
        if self.pending_acked {
            *pending = None;
        }
        if self.inflight_enqueued {
            *inflight = ids.next();
        }
        if self.pending_enqueued {
            *pending = ids.next();
        }
    }
}

/// Turns one input's effects into the shell's [`Plan`] (pure: no I/O, no clock).
#[must_use]
pub fn plan(effects: Vec<Effect>, ctx: &PlanContext) -> Plan {
    let mut p = Plan::default();
    let mut inflight_id = ctx.inflight_id;
    let mut pending_id = ctx.pending_id;
    // A pending request written by this input: enqueued at the end unless a start takes it.
    let mut pending_written: Option<DeployRequest> = None;
    for effect in effects {
        match effect {
            Effect::PersistPending(req) => pending_written = Some(req),
            Effect::Start {
                request,
                from_pending,
            } => {
                if ctx.draining {
                    continue;
                }
                if request.reason.cause == DeploymentCause::QuarantineRetry {
                    p.quarantine_retries += request.endpoints.len() as u64;
                }
                p.batch.event(Event::DeploymentScheduled {
                    correlation: request.correlation.clone(),
                    deployment: request.deployment.clone(),
                    render: request.render,
                    endpoints: request.endpoints.clone(),
                    runtime_config: request.runtime_config.clone(),
                    reason: request.reason,
                    coalescible: false,
                });
                if from_pending {
                    // The journaled pending slot is what starts now, or was superseded by a
                    // request this same input wrote and starts at once (never journaled).
                    if pending_written.as_ref() == Some(&request) {
                        pending_written = None;
                    }
                    if let Some(id) = pending_id.take() {
                        p.batch.ack(Queue::DeployPending, WorkKey::Slot, id);
                        p.pending_acked = true;
                    }
                }
                p.batch.enqueue(
                    WorkItem::DeployInflight(InFlightDeployment {
                        request: request.clone(),
                        started_at: ctx.now,
                        term: ctx.term,
                    }),
                    Origin::None,
                );
                p.inflight_enqueued = true;
                p.scheduled = true;
                p.spawn = Some(request);
            }
            Effect::DropPending(request) => {
                if pending_written.as_ref() == Some(&request) {
                    pending_written = None;
                }
                if let Some(id) = pending_id.take() {
                    p.batch.ack(Queue::DeployPending, WorkKey::Slot, id);
                    p.pending_acked = true;
                }
            }
            Effect::Resume(request) => {
                if !ctx.draining {
                    p.spawn = Some(request);
                    p.scheduled = false;
                }
            }
            Effect::Cancel {
                deployment,
                correlation,
            } => {
                p.timeouts += 1;
                p.stop_executor = true;
                tracing::warn!(deployment = %deployment, "deployment timed out: cancelling");
                p.batch.event(Event::DeploymentCancelRequest {
                    correlation,
                    deployment,
                    reason: "deployment_timeout".to_owned(),
                });
                // While draining nothing restarts it here: keep the slot for the next term.
                if !ctx.draining
                    && let Some(id) = inflight_id.take()
                {
                    p.batch.ack(Queue::DeployInflight, WorkKey::Slot, id);
                    p.inflight_acked = true;
                }
            }
            Effect::StopExecutor => p.stop_executor = true,
            Effect::GiveUp { request, endpoints } => {
                p.given_up += endpoints.len() as u64;
                for e in endpoints {
                    tracing::warn!(pod = %e.pod.name, "deployment given up after timeout retries");
                    p.batch.event(Event::ConfigAppliedToPod {
                        correlation: request.correlation.clone(),
                        runtime_config: request.runtime_config.clone(),
                        pod: e.pod.clone(),
                        checksum: request.render,
                        is_drift_check: false,
                        sync: SyncMetadata {
                            error: Some(format!(
                                "deployment timed out {} times; waiting for a new render, a pod change or a drift check",
                                ctx.max_timeout_retries + 1
                            )),
                            ..SyncMetadata::default()
                        },
                    });
                }
            }
            Effect::ArmTimer(at) => {
                p.timer = Some(p.timer.map_or(at, |t: Instant| t.min(at)));
            }
            Effect::Quarantined {
                request,
                endpoint,
                message,
                attempts,
                next_retry_at,
            } => {
                p.quarantined += 1;
                tracing::warn!(
                    pod = %endpoint.pod.name,
                    render = %request.render,
                    attempts,
                    next_retry_in_ms = ctx.now.until_ms(next_retry_at),
                    "render rejected by the pod: quarantined until its next retry"
                );
                p.batch.event(Event::DeploymentQuarantined {
                    correlation: request.correlation.clone(),
                    runtime_config: request.runtime_config.clone(),
                    pod: endpoint.pod.clone(),
                    render: request.render,
                    message,
                    attempts,
                    next_retry_at,
                });
            }
            Effect::Rollback {
                correlation,
                runtime_config,
                change,
            } => {
                tracing::info!(?change, "rollback");
                p.batch.event(Event::DeploymentRollback {
                    correlation,
                    runtime_config,
                    change,
                });
            }
        }
    }
    if let Some(req) = pending_written {
        p.batch.enqueue(WorkItem::DeployPending(req), Origin::None);
        p.pending_enqueued = true;
    }
    p
}
