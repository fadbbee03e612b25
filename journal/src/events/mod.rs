//! The accepted events (DESIGN.md section 1): one Rust enum, variants named as in HAPTIC without
//! the `Event` suffix, record kinds as HAPTIC's dotted type strings.
//!
//! Events reference render contents by checksum only ([`Checksum`], a blob key); they never
//! carry a config body, a file or a credential.

mod values;

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::ids::{BlobRefs, Checksum, DeploymentId, Identity, Term, UnixMillis};

pub use values::{
    ChangeCounts, ConfigIdentity, Correlation, DeploymentCause, DeploymentReason, Endpoint,
    GateVerdict, OperationCounts, PodRef, RollbackChange, RuntimeConfigRef, SyncMetadata, SyncMode,
};

/// The stable record kind of each event (HAPTIC's dotted type string).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum EventKind {
    /// `template.rendered`
    TemplateRendered,
    /// `validation.completed`
    ValidationCompleted,
    /// `validation.failed`
    ValidationFailed,
    /// `render.gate.completed`
    RenderGateCompleted,
    /// `config.validated`
    ConfigValidated,
    /// `haproxy.pods.discovered`
    HAProxyPodsDiscovered,
    /// `haproxy.pod.terminated`
    HAProxyPodTerminated,
    /// `deployment.scheduled`
    DeploymentScheduled,
    /// `deployment.cancel.request`
    DeploymentCancelRequest,
    /// `deployment.started`
    DeploymentStarted,
    /// `instance.deployed`
    InstanceDeployed,
    /// `instance.deployment.failed`
    InstanceDeploymentFailed,
    /// `deployment.completed`
    DeploymentCompleted,
    /// `drift.prevention.triggered`
    DriftPreventionTriggered,
    /// `config.applied.to.pod`
    ConfigAppliedToPod,
    /// `deployed.config.publish.request`
    DeployedConfigPublishRequest,
    /// `config.published`
    ConfigPublished,
    /// `leader.became`
    BecameLeader,
    /// `leader.lost`
    LostLeadership,
    /// `deployment.retry.request`
    DeploymentRetryRequest,
    /// `deployment.quarantined` (schema 3)
    DeploymentQuarantined,
    /// `deployment.rollback.request` (schema 4)
    DeploymentRollbackRequest,
    /// `deployment.rollback` (schema 4)
    DeploymentRollback,
}

impl EventKind {
    /// Every kind, in declaration order.
    pub const ALL: &'static [EventKind] = &[
        EventKind::TemplateRendered,
        EventKind::ValidationCompleted,
        EventKind::ValidationFailed,
        EventKind::RenderGateCompleted,
        EventKind::ConfigValidated,
        EventKind::HAProxyPodsDiscovered,
        EventKind::HAProxyPodTerminated,
        EventKind::DeploymentScheduled,
        EventKind::DeploymentCancelRequest,
        EventKind::DeploymentStarted,
        EventKind::InstanceDeployed,
        EventKind::InstanceDeploymentFailed,
        EventKind::DeploymentCompleted,
        EventKind::DriftPreventionTriggered,
        EventKind::ConfigAppliedToPod,
        EventKind::DeployedConfigPublishRequest,
        EventKind::ConfigPublished,
        EventKind::BecameLeader,
        EventKind::LostLeadership,
        EventKind::DeploymentRetryRequest,
        EventKind::DeploymentQuarantined,
        EventKind::DeploymentRollbackRequest,
        EventKind::DeploymentRollback,
    ];

    /// The dotted record kind, stable for tools.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::TemplateRendered => "template.rendered",
            EventKind::ValidationCompleted => "validation.completed",
            EventKind::ValidationFailed => "validation.failed",
            EventKind::RenderGateCompleted => "render.gate.completed",
            EventKind::ConfigValidated => "config.validated",
            EventKind::HAProxyPodsDiscovered => "haproxy.pods.discovered",
            EventKind::HAProxyPodTerminated => "haproxy.pod.terminated",
            EventKind::DeploymentScheduled => "deployment.scheduled",
            EventKind::DeploymentCancelRequest => "deployment.cancel.request",
            EventKind::DeploymentStarted => "deployment.started",
            EventKind::InstanceDeployed => "instance.deployed",
            EventKind::InstanceDeploymentFailed => "instance.deployment.failed",
            EventKind::DeploymentCompleted => "deployment.completed",
            EventKind::DriftPreventionTriggered => "drift.prevention.triggered",
            EventKind::ConfigAppliedToPod => "config.applied.to.pod",
            EventKind::DeployedConfigPublishRequest => "deployed.config.publish.request",
            EventKind::ConfigPublished => "config.published",
            EventKind::BecameLeader => "leader.became",
            EventKind::LostLeadership => "leader.lost",
            EventKind::DeploymentRetryRequest => "deployment.retry.request",
            EventKind::DeploymentQuarantined => "deployment.quarantined",
            EventKind::DeploymentRollbackRequest => "deployment.rollback.request",
            EventKind::DeploymentRollback => "deployment.rollback",
        }
    }

    /// Parses a dotted kind; `None` for unknown text.
    #[must_use]
    pub fn parse(text: &str) -> Option<EventKind> {
        EventKind::ALL.iter().copied().find(|k| k.as_str() == text)
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An accepted event. Durable once [`crate::Journal::accept`] returns its [`crate::Seq`].
///
/// Field names follow HAPTIC's events (reference/upstream-behaviour.md section 2) with our fixes:
/// renders by checksum, deployments by [`DeploymentId`], no credentials, no parsed config.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Event {
    /// A render was read from the render source (`template.rendered`).
    TemplateRendered {
        /// Correlation.
        correlation: Correlation,
        /// Render checksum (blob key of the manifest).
        render: Checksum,
        /// Size of `haproxy.cfg` in bytes.
        config_bytes: u64,
        /// Number of auxiliary files.
        auxiliary_file_count: u32,
        /// Time to read the render, milliseconds.
        duration_ms: u64,
        /// What triggered it (free text from the source, e.g. `configmap_changed`).
        trigger_reason: String,
        /// Whether a newer render may supersede it before it is handled.
        coalescible: bool,
    },
    /// `haproxy -c` accepted the render (`validation.completed`).
    ValidationCompleted {
        /// Correlation (same correlation id as the render).
        correlation: Correlation,
        /// The validated render.
        render: Checksum,
        /// HAProxy's warnings.
        warnings: Vec<String>,
        /// Validation time, milliseconds.
        duration_ms: u64,
        /// Trigger reason carried over from the render.
        trigger_reason: String,
        /// Whether a newer validation may supersede it.
        coalescible: bool,
    },
    /// `haproxy -c` rejected the render, or it is empty (`validation.failed`).
    ValidationFailed {
        /// Correlation.
        correlation: Correlation,
        /// The rejected render, when it was stored.
        render: Option<Checksum>,
        /// HAProxy's error messages.
        errors: Vec<String>,
        /// Validation time, milliseconds.
        duration_ms: u64,
        /// Trigger reason carried over from the render.
        trigger_reason: String,
    },
    /// The render gate's verdict (`render.gate.completed`).
    RenderGateCompleted {
        /// Correlation.
        correlation: Correlation,
        /// The render judged.
        render: Checksum,
        /// Pass or fail.
        verdict: GateVerdict,
        /// HAProxy's messages (warnings on pass, errors on fail).
        messages: Vec<String>,
        /// The last passed render the gate stays pinned to after a failure; `None` on pass.
        pinned_to: Option<Checksum>,
    },
    /// The config identity publications belong to (`config.validated`).
    ConfigValidated {
        /// Correlation.
        correlation: Correlation,
        /// The identity.
        identity: ConfigIdentity,
    },
    /// The admitted pod set (`haproxy.pods.discovered`); may be empty.
    HAProxyPodsDiscovered {
        /// Correlation.
        correlation: Correlation,
        /// Every admitted endpoint.
        endpoints: Vec<Endpoint>,
        /// Whether discovery is synced and authoritative (an empty set may wipe status only then).
        authoritative: bool,
    },
    /// A pod left the admitted set (`haproxy.pod.terminated`).
    HAProxyPodTerminated {
        /// Correlation.
        correlation: Correlation,
        /// The pod.
        pod: PodRef,
    },
    /// The scheduler released a deployment (`deployment.scheduled`).
    DeploymentScheduled {
        /// Correlation (correlation id = causation id = the validation's).
        correlation: Correlation,
        /// Deployment id.
        deployment: DeploymentId,
        /// The render to deploy.
        render: Checksum,
        /// Target endpoints.
        endpoints: Vec<Endpoint>,
        /// The HAProxyCfg per-pod status goes to.
        runtime_config: RuntimeConfigRef,
        /// Why.
        reason: DeploymentReason,
        /// Whether a newer scheduled deployment may supersede it.
        coalescible: bool,
    },
    /// The scheduler asks to cancel a deployment after its timeout (`deployment.cancel.request`).
    DeploymentCancelRequest {
        /// Correlation.
        correlation: Correlation,
        /// The deployment to cancel.
        deployment: DeploymentId,
        /// Why, e.g. `deployment_timeout`.
        reason: String,
    },
    /// The deployer started a deployment (`deployment.started`).
    DeploymentStarted {
        /// Correlation.
        correlation: Correlation,
        /// Deployment id.
        deployment: DeploymentId,
        /// Target endpoints.
        endpoints: Vec<Endpoint>,
    },
    /// One endpoint succeeded (`instance.deployed`).
    InstanceDeployed {
        /// Correlation.
        correlation: Correlation,
        /// Deployment id.
        deployment: DeploymentId,
        /// The endpoint.
        endpoint: Endpoint,
        /// Time spent on this endpoint, milliseconds.
        duration_ms: u64,
        /// Whether HAProxy reloaded.
        reload_required: bool,
    },
    /// One endpoint failed (`instance.deployment.failed`).
    InstanceDeploymentFailed {
        /// Correlation.
        correlation: Correlation,
        /// Deployment id.
        deployment: DeploymentId,
        /// The endpoint.
        endpoint: Endpoint,
        /// The error.
        error: String,
        /// Whether retrying may help.
        retryable: bool,
    },
    /// A deployment finished (`deployment.completed`).
    DeploymentCompleted {
        /// Correlation.
        correlation: Correlation,
        /// Deployment id (the scheduler ignores a completion of another deployment).
        deployment: DeploymentId,
        /// Endpoints attempted.
        total: u32,
        /// Endpoints that succeeded.
        succeeded: u32,
        /// Endpoints that failed.
        failed: u32,
        /// Wall time, milliseconds.
        duration_ms: u64,
        /// Reloads triggered.
        reloads_triggered: u32,
        /// Dataplane API operations.
        total_api_operations: u32,
        /// Operations by `<section>_<type>`, sorted by key.
        operation_breakdown: BTreeMap<String, u32>,
    },
    /// The drift timer fired (`drift.prevention.triggered`).
    DriftPreventionTriggered {
        /// Correlation.
        correlation: Correlation,
        /// Time since the last successful deployment, milliseconds.
        time_since_last_deployment_ms: u64,
    },
    /// A deployment reached one pod (`config.applied.to.pod`).
    ConfigAppliedToPod {
        /// Correlation.
        correlation: Correlation,
        /// The HAProxyCfg the status belongs to.
        runtime_config: RuntimeConfigRef,
        /// The pod.
        pod: PodRef,
        /// The render applied (same format as `spec.checksum`).
        checksum: Checksum,
        /// Whether this was a drift check.
        is_drift_check: bool,
        /// What the sync did; `error` is set on failure.
        sync: SyncMetadata,
    },
    /// Publish exactly what the deployer applied (`deployed.config.publish.request`).
    DeployedConfigPublishRequest {
        /// Correlation.
        correlation: Correlation,
        /// Deployment id.
        deployment: DeploymentId,
        /// The applied render.
        render: Checksum,
        /// The HAProxyCfg to write.
        runtime_config: RuntimeConfigRef,
    },
    /// The publisher wrote a HAProxyCfg (`config.published`).
    ConfigPublished {
        /// Correlation.
        correlation: Correlation,
        /// The HAProxyCfg.
        runtime_config: RuntimeConfigRef,
        /// The published render.
        render: Checksum,
        /// Map files published.
        map_file_count: u32,
        /// Secrets published.
        secret_count: u32,
    },
    /// This replica acquired the Lease (`leader.became`).
    BecameLeader {
        /// Correlation.
        correlation: Correlation,
        /// Replica identity.
        identity: Identity,
        /// The new term (also written to meta in the same commit).
        term: Term,
    },
    /// This replica lost the Lease (`leader.lost`).
    LostLeadership {
        /// Correlation.
        correlation: Correlation,
        /// Replica identity.
        identity: Identity,
        /// Why, e.g. `lease_lost`.
        reason: String,
    },
    /// An operator asked to retry the renders pods rejected permanently
    /// (`deployment.retry.request`): the annotation `haproxy-haptic.org/retry-rejected` on the
    /// HAProxyCfg got a new value. The scheduler clears its quarantine and deploys the last
    /// validated render to those pods again.
    DeploymentRetryRequest {
        /// Correlation.
        correlation: Correlation,
        /// The HAProxyCfg that carries the annotation.
        runtime_config: RuntimeConfigRef,
        /// The annotation's new value (any text; only a change matters).
        value: String,
    },
    /// The scheduler quarantined a render for one pod, or kept it quarantined after a retry
    /// the pod rejected again (`deployment.quarantined`, issue 27; appended in schema 3): the
    /// pod's Dataplane API rejected the render permanently, and the scheduler retries it at
    /// `next_retry_at` (the quarantine backoff: the drift interval doubling per attempt, capped
    /// by `--quarantine-retry-max`). The publisher shows the time in the pod's status entry
    /// (`nextRetryAt`).
    DeploymentQuarantined {
        /// Correlation (the rejected deployment's).
        correlation: Correlation,
        /// The HAProxyCfg the pod's status belongs to.
        runtime_config: RuntimeConfigRef,
        /// The pod.
        pod: PodRef,
        /// The quarantined render.
        render: Checksum,
        /// What the pod's Dataplane API answered (HAProxy's message).
        message: String,
        /// Rejections of this render by this pod in a row (1 at the first).
        attempts: u32,
        /// Wall-clock time of the next retry, unix ms.
        next_retry_at: UnixMillis,
    },
    /// The annotation `haproxy-haptic.org/rollback-to` on the HAProxyCfg was read with a value
    /// that differs from the last one this process journaled (`deployment.rollback.request`,
    /// issue 28; appended in schema 4). The scheduler resolves it (a checksum, or `previous`:
    /// the render validated before the newest, fixed when it folds this event), validates the
    /// render again and holds the fleet on it, or ends the hold (`value: None`), or refuses it;
    /// it journals what it decided as [`Event::DeploymentRollback`].
    DeploymentRollbackRequest {
        /// Correlation.
        correlation: Correlation,
        /// The HAProxyCfg that carries the annotation.
        runtime_config: RuntimeConfigRef,
        /// The annotation's value; `None`: the annotation was removed.
        value: Option<String>,
        /// The hold the HAProxyCfg's `RolledBack=True` condition showed when the annotation
        /// was read (its annotation value and render), if any: the fleet's record of a hold
        /// another replica or an earlier process decided, so a new leader continues it (the
        /// same render, validated again) instead of resolving `previous` against its own
        /// journal.
        shown: Option<(String, Checksum)>,
    },
    /// What the scheduler decided on a rollback request (`deployment.rollback`, issue 28;
    /// appended in schema 4): a hold began (or moved to another render), ended, or a request
    /// was refused (the fleet unchanged). The leader turns it into the `RolledBack` condition
    /// and a Kubernetes Event.
    DeploymentRollback {
        /// Correlation (the request's).
        correlation: Correlation,
        /// The HAProxyCfg the condition goes to.
        runtime_config: RuntimeConfigRef,
        /// What changed.
        change: RollbackChange,
    },
}

impl Event {
    /// The event's record kind.
    #[must_use]
    pub fn kind(&self) -> EventKind {
        match self {
            Event::TemplateRendered { .. } => EventKind::TemplateRendered,
            Event::ValidationCompleted { .. } => EventKind::ValidationCompleted,
            Event::ValidationFailed { .. } => EventKind::ValidationFailed,
            Event::RenderGateCompleted { .. } => EventKind::RenderGateCompleted,
            Event::ConfigValidated { .. } => EventKind::ConfigValidated,
            Event::HAProxyPodsDiscovered { .. } => EventKind::HAProxyPodsDiscovered,
            Event::HAProxyPodTerminated { .. } => EventKind::HAProxyPodTerminated,
            Event::DeploymentScheduled { .. } => EventKind::DeploymentScheduled,
            Event::DeploymentCancelRequest { .. } => EventKind::DeploymentCancelRequest,
            Event::DeploymentStarted { .. } => EventKind::DeploymentStarted,
            Event::InstanceDeployed { .. } => EventKind::InstanceDeployed,
            Event::InstanceDeploymentFailed { .. } => EventKind::InstanceDeploymentFailed,
            Event::DeploymentCompleted { .. } => EventKind::DeploymentCompleted,
            Event::DriftPreventionTriggered { .. } => EventKind::DriftPreventionTriggered,
            Event::ConfigAppliedToPod { .. } => EventKind::ConfigAppliedToPod,
            Event::DeployedConfigPublishRequest { .. } => EventKind::DeployedConfigPublishRequest,
            Event::ConfigPublished { .. } => EventKind::ConfigPublished,
            Event::BecameLeader { .. } => EventKind::BecameLeader,
            Event::LostLeadership { .. } => EventKind::LostLeadership,
            Event::DeploymentRetryRequest { .. } => EventKind::DeploymentRetryRequest,
            Event::DeploymentQuarantined { .. } => EventKind::DeploymentQuarantined,
            Event::DeploymentRollbackRequest { .. } => EventKind::DeploymentRollbackRequest,
            Event::DeploymentRollback { .. } => EventKind::DeploymentRollback,
        }
    }

    /// The event's correlation.
    #[must_use]
    pub fn correlation(&self) -> &Correlation {
        match self {
            Event::TemplateRendered { correlation, .. }
            | Event::ValidationCompleted { correlation, .. }
            | Event::ValidationFailed { correlation, .. }
            | Event::RenderGateCompleted { correlation, .. }
            | Event::ConfigValidated { correlation, .. }
            | Event::HAProxyPodsDiscovered { correlation, .. }
            | Event::HAProxyPodTerminated { correlation, .. }
            | Event::DeploymentScheduled { correlation, .. }
            | Event::DeploymentCancelRequest { correlation, .. }
            | Event::DeploymentStarted { correlation, .. }
            | Event::InstanceDeployed { correlation, .. }
            | Event::InstanceDeploymentFailed { correlation, .. }
            | Event::DeploymentCompleted { correlation, .. }
            | Event::DriftPreventionTriggered { correlation, .. }
            | Event::ConfigAppliedToPod { correlation, .. }
            | Event::DeployedConfigPublishRequest { correlation, .. }
            | Event::ConfigPublished { correlation, .. }
            | Event::BecameLeader { correlation, .. }
            | Event::LostLeadership { correlation, .. }
            | Event::DeploymentRetryRequest { correlation, .. }
            | Event::DeploymentQuarantined { correlation, .. }
            | Event::DeploymentRollbackRequest { correlation, .. }
            | Event::DeploymentRollback { correlation, .. } => correlation,
        }
    }

    /// Every render checksum (blob key) the event references; the journal counts these as blob
    /// references while the event is in the log.
    #[must_use]
    pub fn blob_refs(&self) -> BlobRefs {
        match self {
            Event::TemplateRendered { render, .. }
            | Event::ValidationCompleted { render, .. }
            | Event::DeploymentScheduled { render, .. }
            | Event::DeployedConfigPublishRequest { render, .. }
            | Event::ConfigPublished { render, .. } => BlobRefs::one(*render),
            Event::ValidationFailed { render, .. } => BlobRefs::maybe(*render),
            Event::RenderGateCompleted {
                render, pinned_to, ..
            } => BlobRefs::with(*render, *pinned_to),
            Event::ConfigAppliedToPod { checksum, .. } => BlobRefs::one(*checksum),
            Event::DeploymentQuarantined { render, .. } => BlobRefs::one(*render),
            _ => BlobRefs::none(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip() {
        for k in EventKind::ALL {
            assert_eq!(EventKind::parse(k.as_str()), Some(*k));
        }
        assert_eq!(EventKind::ALL.len(), 23);
    }
}
