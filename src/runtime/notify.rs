//! Kubernetes Events (kube's event recorder) on the HAProxyCfg for what an operator should see
//! in `kubectl describe`: deployment failures, pinning and release of the render gate,
//! leadership changes and journal recovery. Drift Events come from the deployer's hook
//! ([`crate::k8s::events::notice_hook`]).
//!
//! Live events only (a replay after a restart writes no Event twice). Deployment and gate
//! Events are written by the leader only; leadership Events by the replica they concern. Writes
//! are detached and bounded by [`crate::k8s::events::EVENT_WRITE_TIMEOUT`]: an Event that cannot
//! be written is logged, never retried and never blocks the controller.

use std::sync::Arc;

use haptic_journal::{Event, EventKind, GateVerdict, RollbackChange, RuntimeConfigRef};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};

use crate::core::text::truncate_with_ellipsis;
use crate::dispatch::{DispatchHandle, SubscribeOptions, Subscription};
use crate::k8s::events::{CONTROLLER, EVENT_WRITE_TIMEOUT, haproxycfg_reference};

/// Event reasons (CamelCase).
pub mod reasons {
    /// A pod could not be given a render.
    pub const DEPLOYMENT_FAILED: &str = "DeploymentFailed";
    /// A render was rejected: the fleet stays on the last render that passed.
    pub const CONFIG_PINNED: &str = "ConfigPinned";
    /// A render passed after a rejection: the gate is released.
    pub const CONFIG_RELEASED: &str = "ConfigReleased";
    /// This replica became the leader.
    pub const LEADER_ELECTED: &str = "LeaderElected";
    /// This replica lost the Lease.
    pub const LEADERSHIP_LOST: &str = "LeadershipLost";
    /// The journal was damaged and rebuilt empty.
    pub const JOURNAL_REBUILT: &str = "JournalRebuilt";
    /// The journal cannot take commits (its volume is full or read-only, or the file was
    /// removed): input is refused and the fleet keeps what it runs; the note names the fix.
    pub const JOURNAL_NOT_WRITABLE: &str = "JournalNotWritable";
    /// The journal takes commits again after [`JOURNAL_NOT_WRITABLE`].
    pub const JOURNAL_WRITABLE: &str = "JournalWritable";
    /// Pods run another HAProxy major.minor than the validator (see
    /// [`crate::k8s::crd::conditions::VALIDATOR_VERSION_MISMATCH`]).
    pub const VALIDATOR_VERSION_MISMATCH: &str = "ValidatorVersionMismatch";
    /// An operator's rollback holds the fleet on an earlier render (or moved the hold).
    pub const ROLLBACK_STARTED: &str = "RollbackStarted";
    /// The rollback annotation was removed: the fleet gets the newest render again.
    pub const ROLLBACK_ENDED: &str = "RollbackEnded";
    /// A rollback request was refused; the fleet unchanged.
    pub const ROLLBACK_REFUSED: &str = "RollbackRefused";
}

/// Writes Events on one HAProxyCfg.
#[derive(Clone)]
pub struct Notifier {
    recorder: Arc<Recorder>,
    reference: Arc<ObjectReference>,
    /// The condition writer's queue ([`Notifier::set_condition`]).
    conditions: tokio::sync::mpsc::UnboundedSender<ConditionWrite>,
}

/// One condition write of [`Notifier::set_condition`].
struct ConditionWrite {
    runtime_config: RuntimeConfigRef,
    type_: &'static str,
    status: bool,
    reason: &'static str,
    message: String,
}

/// Writes the queued conditions one after the other until the queue closes.
async fn write_conditions(
    client: kube::Client,
    mut queue: tokio::sync::mpsc::UnboundedReceiver<ConditionWrite>,
) {
    while let Some(w) = queue.recv().await {
        let mut written = false;
        for attempt in 1..=5 {
            let write = crate::k8s::crd::write_cfg_condition(
                &client,
                &w.runtime_config,
                (w.type_, w.status, w.reason),
                &w.message,
            );
            match tokio::time::timeout(EVENT_WRITE_TIMEOUT, write).await {
                Ok(Ok(true)) => {
                    written = true;
                    break;
                }
                Ok(Ok(false)) => {
                    tracing::debug!(type_ = w.type_, attempt, "condition not written yet")
                }
                Ok(Err(error)) => {
                    tracing::debug!(type_ = w.type_, attempt, %error, "condition not written")
                }
                Err(_) => tracing::debug!(type_ = w.type_, attempt, "condition write timed out"),
            }
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        }
        if !written {
            tracing::warn!(
                type_ = w.type_,
                reason = w.reason,
                "condition not written after 5 attempts"
            );
        }
    }
}

debug_non_exhaustive!(Notifier, |x| "reference" => x.reference.name);

impl Notifier {
    /// A notifier reporting as `haptic` instance `identity` on the HAProxyCfg `runtime_config`.
    #[must_use]
    pub fn new(client: kube::Client, identity: &str, runtime_config: &RuntimeConfigRef) -> Self {
        let (conditions, queue) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(write_conditions(client.clone(), queue));
        Notifier {
            conditions,
            recorder: Arc::new(Recorder::new(
                client,
                Reporter {
                    controller: CONTROLLER.to_owned(),
                    instance: Some(identity.to_owned()),
                },
            )),
            reference: Arc::new(haproxycfg_reference(runtime_config)),
        }
    }

    /// Sets one condition on the HAProxyCfg `runtime_config`'s status, detached but in order:
    /// one writer task takes the writes one after the other (a later decision's condition is
    /// never overwritten by an earlier one's retry), each up to five attempts a second apart
    /// (a missing object, conflicts, an API error), each bounded by [`EVENT_WRITE_TIMEOUT`];
    /// then logged and dropped, like an Event.
    pub fn set_condition(
        &self,
        runtime_config: RuntimeConfigRef,
        (type_, status, reason): (&'static str, bool, &'static str),
        message: String,
    ) {
        let write = ConditionWrite {
            runtime_config,
            type_,
            status,
            reason,
            message: truncate_with_ellipsis(message, 1024),
        };
        if self.conditions.send(write).is_err() {
            tracing::warn!(type_, reason, "condition not written: its writer stopped");
        }
    }

    /// Writes one Event, detached (see the module doc).
    pub fn emit(&self, type_: EventType, reason: &str, action: &str, note: String) {
        let event = KubeEvent {
            type_,
            reason: reason.to_owned(),
            note: Some(truncate_with_ellipsis(note, 1024)),
            action: action.to_owned(),
            secondary: None,
        };
        let (recorder, reference) = (self.recorder.clone(), self.reference.clone());
        let reason = reason.to_owned();
        tokio::spawn(async move {
            match tokio::time::timeout(EVENT_WRITE_TIMEOUT, recorder.publish(&event, &reference))
                .await
            {
                Ok(Ok(())) => {}
                Ok(Err(error)) => tracing::warn!(%reason, %error, "kubernetes event not written"),
                Err(_) => tracing::warn!(%reason, "kubernetes event not written: timed out"),
            }
        });
    }
}

/// The Kubernetes Event of one rollback decision, `(type, reason)`; `None` for a hold said
/// again ([`RollbackChange::Holding`]: the condition only). The note is the condition's message
/// ([`crate::k8s::crd::rolled_back_condition`]).
#[must_use]
pub fn rollback_event(change: &RollbackChange) -> Option<(EventType, &'static str)> {
    match change {
        RollbackChange::Held { .. } => Some((EventType::Normal, reasons::ROLLBACK_STARTED)),
        RollbackChange::Released { .. } => Some((EventType::Normal, reasons::ROLLBACK_ENDED)),
        RollbackChange::Refused { .. } => Some((EventType::Warning, reasons::ROLLBACK_REFUSED)),
        RollbackChange::Holding { .. } => None,
    }
}

/// The subscription of [`run`].
#[must_use]
pub fn subscribe_options() -> SubscribeOptions {
    SubscribeOptions::new("events").kinds(&[
        EventKind::InstanceDeploymentFailed,
        EventKind::RenderGateCompleted,
        EventKind::BecameLeader,
        EventKind::LostLeadership,
        EventKind::DeploymentRollback,
    ])
}

/// Turns live journal events into Kubernetes Events until the subscription ends.
///
/// # Cancel safety
/// Cancel safe.
pub async fn run(mut sub: Subscription, dispatch: DispatchHandle, notifier: Notifier) {
    let leadership = dispatch.leadership();
    let mut pinned = false;
    while let Some(d) = sub.recv().await {
        let leader = leadership.borrow().is_leader();
        match &*d.event {
            Event::RenderGateCompleted {
                render,
                verdict,
                messages,
                pinned_to,
                ..
            } => {
                let was = pinned;
                pinned = *verdict == GateVerdict::Fail;
                if d.replayed || !leader {
                    continue;
                }
                if pinned {
                    let first = messages.first().cloned().unwrap_or_default();
                    let to = pinned_to.map_or_else(|| "none".to_owned(), |c| c.to_string());
                    notifier.emit(
                        EventType::Warning,
                        reasons::CONFIG_PINNED,
                        "Validate",
                        format!(
                            "render {render} rejected by haproxy -c, fleet pinned to {to}: {first}"
                        ),
                    );
                } else if was {
                    notifier.emit(
                        EventType::Normal,
                        reasons::CONFIG_RELEASED,
                        "Validate",
                        format!("render {render} passed: the gate is released"),
                    );
                }
            }
            Event::InstanceDeploymentFailed {
                endpoint, error, ..
            } if !d.replayed && leader => notifier.emit(
                EventType::Warning,
                reasons::DEPLOYMENT_FAILED,
                "Deploy",
                format!(
                    "pod {}/{}: {error}",
                    endpoint.pod.namespace, endpoint.pod.name
                ),
            ),
            Event::DeploymentRollback {
                change,
                runtime_config,
                ..
            } if !d.replayed && leader => {
                let (on, reason, message) = crate::k8s::crd::rolled_back_condition(change);
                if let Some((type_, event_reason)) = rollback_event(change) {
                    notifier.emit(type_, event_reason, "Rollback", message.clone());
                }
                notifier.set_condition(
                    runtime_config.clone(),
                    (crate::k8s::crd::conditions::ROLLED_BACK, on, reason),
                    message,
                );
            }
            Event::BecameLeader { identity, term, .. } if !d.replayed => notifier.emit(
                EventType::Normal,
                reasons::LEADER_ELECTED,
                "Lead",
                format!("{identity} leads term {}", term.0),
            ),
            Event::LostLeadership {
                identity, reason, ..
            } if !d.replayed => notifier.emit(
                EventType::Normal,
                reasons::LEADERSHIP_LOST,
                "Lead",
                format!("{identity} stopped leading: {reason}"),
            ),
            _ => {}
        }
    }
}
