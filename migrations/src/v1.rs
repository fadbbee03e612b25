//! Frozen copy of the schema-1 record types (DESIGN.md J8, STYLE.md 2.3).
//!
//! Copied from `haptic-journal` (ids.rs, events.rs, work.rs, render.rs) at schema 1: the serde
//! shape of every payload stored in a v1 file, without behaviour. Frozen: schema 2 exists
//! ([`crate::v2`] re-exports these types unchanged and adds its own), so nothing here may change
//! and `fixtures/v1.redb` is never regenerated; the test
//! `fixture_v1::frozen_types_round_trip_every_payload` checks these types against that file.
//!
//! Payload codec at schema 1 (meta `codec` = [`CODEC_NAME`]): bincode 2 through serde,
//! little-endian, fixed-width integers, 256 MiB limit, no trailing bytes ([`decode`], [`encode`]).

#![allow(missing_docs)]

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// Schema version these types describe.
pub const VERSION: u32 = 1;

/// Payload codec name stored in meta at schema 1.
pub const CODEC_NAME: &str = "bincode2-serde-le-fixint";

fn config() -> bincode::config::Configuration<
    bincode::config::LittleEndian,
    bincode::config::Fixint,
    bincode::config::Limit<{ 256 * 1024 * 1024 }>,
> {
    bincode::config::standard()
        .with_little_endian()
        .with_fixed_int_encoding()
        .with_limit::<{ 256 * 1024 * 1024 }>()
}

/// Decodes a v1 payload as `T`; `None` when it does not decode or has trailing bytes.
#[must_use]
pub fn decode<T: DeserializeOwned>(payload: &[u8]) -> Option<T> {
    let (v, used) = bincode::serde::decode_from_slice(payload, config()).ok()?;
    (used == payload.len()).then_some(v)
}

/// Encodes a v1 payload.
///
/// # Errors
/// bincode's error (a value over the 256 MiB limit).
pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, bincode::error::EncodeError> {
    bincode::serde::encode_to_vec(value, config())
}

// ---- from journal/src/ids.rs ----

/// Position of an accepted event in the events log.
///
/// Shape: gap-free, starting at 1, assigned by the journal in commit order; never reused, even
/// after the event is trimmed (the next value lives in meta). Events are dispatched in `Seq` order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Seq(pub u64);

/// Version of one work item: the value a worker takes with the item and hands back to ack it.
///
/// Shape: one counter for all queues, starting at 1, strictly increasing, never reused. Every
/// write of a work item (enqueue, replace-latest, reschedule is *not* a new write) gets a fresh
/// `WorkId`, so a compare-and-delete ack on an older id leaves a newer value alone (DESIGN.md J3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct WorkId(pub u64);

/// Leadership term number, taken from the Lease (DESIGN.md J7). Term 0 means "never led".
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Term(pub u64);

/// Wall-clock time in milliseconds since the Unix epoch (UTC).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct UnixMillis(pub u64);

/// A SHA-256 digest, printed and parsed as `sha256:<64 lower-case hex>` (DESIGN.md section 1).
///
/// Used for the identity of a whole render (see `crate::render_checksum`) and for the key of
/// every blob (single files: the digest of their content).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Checksum(pub [u8; 32]);

/// The Dataplane API configuration `version` (the `version` query parameter and
/// `Configuration-Version` header).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ConfigVersion(pub i64);

/// A Kubernetes object generation (`metadata.generation`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Generation(pub i64);

// ---- from journal/src/events/ (mod.rs, values.rs) ----

/// Correlation of an event in a reconciliation chain (HAPTIC `Correlation`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Correlation {
    /// This event's own unique id.
    pub event_id: EventId,
    /// The chain this event belongs to; `None` for events outside a chain.
    pub correlation_id: Option<CorrelationId>,
    /// The event id of the direct cause; `None` at the start of a chain.
    pub causation_id: Option<EventId>,
}

/// A pod, by namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PodRef {
    /// Pod namespace.
    pub namespace: Namespace,
    /// Pod name.
    pub name: ObjectName,
}

/// The published HAProxyCfg a deployment or status belongs to (`<config-name>-haproxycfg`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RuntimeConfigRef {
    /// Namespace of the HAProxyCfg.
    pub namespace: Namespace,
    /// Name of the HAProxyCfg.
    pub name: ObjectName,
}

/// The config identity the publications belong to (DESIGN.md section 1, "Identity and names").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigIdentity {
    /// `--config-name`.
    pub name: ObjectName,
    /// The controller's namespace.
    pub namespace: Namespace,
    /// Uid of the render source object (ConfigMap/Secret), when there is one.
    pub source_uid: Option<ObjectUid>,
    /// Generation of the render source object, when there is one.
    pub source_generation: Option<Generation>,
}

/// One HAProxy pod's Dataplane API endpoint, as discovery reports it.
///
/// Credentials are deliberately absent: they stay in the Secret they came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    /// Dataplane API base URL.
    pub url: EndpointUrl,
    /// The pod behind it.
    pub pod: PodRef,
    /// HAProxy version detected through `/v3/info`, e.g. `3.2.4`, when known.
    pub detected_version: Option<String>,
}

/// Why a deployment was scheduled (DESIGN.md section 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DeploymentCause {
    /// A render passed validation.
    ConfigValidation,
    /// The pod set changed.
    PodDiscovery,
    /// Validation failed; the last passed render is redeployed.
    ValidationFallback,
    /// The drift timer fired.
    DriftPrevention,
    /// This replica became leader.
    BecameLeader,
}

/// A deployment reason: a cause, optionally retried after a deployment timeout.
///
/// Text form: `config_validation`, `pod_discovery`, `validation_fallback`, `drift_prevention`,
/// `became_leader`, each optionally suffixed `_timeout_retry`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DeploymentReason {
    /// The cause.
    pub cause: DeploymentCause,
    /// Whether this is the retry after a deployment timeout.
    pub timeout_retry: bool,
}

/// Added/removed/modified counts of one configuration section.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeCounts {
    /// Objects added.
    pub added: u32,
    /// Objects removed.
    pub removed: u32,
    /// Objects modified.
    pub modified: u32,
}

/// Operation counts of one endpoint sync (HAPTIC `OperationCounts`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperationCounts {
    /// Total Dataplane API operations.
    pub total_api_operations: u32,
    /// Backends.
    pub backends: ChangeCounts,
    /// Servers.
    pub servers: ChangeCounts,
    /// Frontends.
    pub frontends: ChangeCounts,
    /// Map files.
    pub maps: ChangeCounts,
    /// SSL certificates.
    pub ssl_certs: ChangeCounts,
    /// General files.
    pub general_files: ChangeCounts,
}

/// How one endpoint sync applied a configuration change (frozen copy).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SyncMode {
    /// One transaction.
    FineGrained,
    /// Runtime server updates.
    Runtime,
    /// Raw push at version 1.
    RawInitial,
    /// Raw push above the threshold.
    RawThreshold,
    /// Raw push after a failure.
    RawFallback,
    /// Raw push of an unmodelled change.
    RawUnmodelled,
}

/// What one endpoint sync did (HAPTIC `SyncMetadata`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncMetadata {
    /// Whether HAProxy reloaded.
    pub reload_triggered: bool,
    /// The `Reload-ID`, when a reload happened.
    pub reload_id: Option<ReloadId>,
    /// Duration of the sync in milliseconds.
    pub sync_duration_ms: u64,
    /// 409 version conflicts retried.
    pub version_conflict_retries: u32,
    /// Whether a raw configuration push was used as the fallback of a failed fine-grained
    /// attempt (true only for `SyncMode::RawFallback`).
    pub fallback_used: bool,
    /// How the configuration was applied; `None` for a failed sync or an event that reports
    /// no sync (a deployment given up).
    pub sync_mode: Option<SyncMode>,
    /// Operation counts.
    pub operation_counts: OperationCounts,
    /// The error, when the sync failed.
    pub error: Option<String>,
    /// The failure is a permanent rejection (the render is quarantined for the pod).
    pub rejected: bool,
}

/// Verdict of the render gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum GateVerdict {
    /// The render passed `haproxy -c`; the gate releases it.
    Pass,
    /// The render failed; the gate stays pinned to the last passed render.
    Fail,
}

/// An accepted event. Durable once `crate::Journal::accept` returns its `crate::Seq`.
///
/// Field names follow HAPTIC's events (reference/upstream-behaviour.md section 2) with our fixes:
/// renders by checksum, deployments by `DeploymentId`, no credentials, no parsed config.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
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
    /// An operator asked to retry rejected renders (`deployment.retry.request`).
    DeploymentRetryRequest {
        /// Correlation.
        correlation: Correlation,
        /// The HAProxyCfg that carries the annotation.
        runtime_config: RuntimeConfigRef,
        /// The annotation's new value.
        value: String,
    },
}

// ---- from journal/src/work.rs ----

/// Validation-driven publication of a render the gate released.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublishItem {
    /// Whose HAProxyCfg.
    pub identity: ConfigIdentity,
    /// The render to publish.
    pub render: Checksum,
    /// `Seq` of the render's `template.rendered` event; the spec never moves backwards in it.
    pub render_seq: Seq,
    /// When the render was read.
    pub rendered_at: UnixMillis,
    /// When it passed validation.
    pub validated_at: UnixMillis,
    /// Correlation of the render.
    pub correlation: Correlation,
}

/// Deploy-driven publication: the exact render the deployer applied.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeployedPublishItem {
    /// Whose HAProxyCfg.
    pub runtime_config: RuntimeConfigRef,
    /// The applied render.
    pub render: Checksum,
    /// `Seq` of the render's `template.rendered` event.
    pub render_seq: Seq,
    /// The deployment that applied it.
    pub deployment: DeploymentId,
    /// When it was applied.
    pub deployed_at: UnixMillis,
    /// Correlation.
    pub correlation: Correlation,
}

/// Publication of a rejected render as `<name>-haproxycfg-invalid`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InvalidPublishItem {
    /// Whose HAProxyCfg.
    pub identity: ConfigIdentity,
    /// The rejected render, when stored.
    pub render: Option<Checksum>,
    /// `Seq` of the render's event.
    pub render_seq: Seq,
    /// HAProxy's errors.
    pub errors: Vec<String>,
    /// Correlation.
    pub correlation: Correlation,
}

/// A render-gate verdict to mirror as `ConfigValidated` / `ConfigPinned` conditions.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerdictItem {
    /// Whose HAProxyCfg.
    pub identity: ConfigIdentity,
    /// The render judged.
    pub render: Checksum,
    /// `Seq` of the render's event.
    pub render_seq: Seq,
    /// Whether it passed.
    pub passed: bool,
    /// Whether the gate is pinned to an older render after this verdict.
    pub pinned: bool,
    /// HAProxy's messages.
    pub messages: Vec<String>,
    /// Correlation.
    pub correlation: Correlation,
}

/// What to do to one pod's status entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PodStatusChange {
    /// A deployment reached the pod (from `config.applied.to.pod`).
    Applied {
        /// The applied render.
        checksum: Checksum,
        /// Whether this was a drift check.
        is_drift_check: bool,
        /// What the sync did.
        sync: SyncMetadata,
        /// When it was applied (`deployedAt` when the sync succeeded).
        observed_at: UnixMillis,
    },
    /// The pod left the admitted set: remove its entry.
    Removed,
}

/// A per-pod status update (queues `status-pending` / `status-parked`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodStatusItem {
    /// The HAProxyCfg whose status holds the entry.
    pub runtime_config: RuntimeConfigRef,
    /// The pod.
    pub pod: PodRef,
    /// The change.
    pub change: PodStatusChange,
}

/// A deployment request: the pending slot's content, latest wins.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeployRequest {
    /// Deployment id it will run as.
    pub deployment: DeploymentId,
    /// The render to deploy.
    pub render: Checksum,
    /// Target endpoints.
    pub endpoints: Vec<Endpoint>,
    /// The HAProxyCfg per-pod status goes to.
    pub runtime_config: RuntimeConfigRef,
    /// Why.
    pub reason: DeploymentReason,
    /// Correlation.
    pub correlation: Correlation,
}

/// The deployment being executed (the in-flight slot).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InFlightDeployment {
    /// The request being executed.
    pub request: DeployRequest,
    /// When execution started.
    pub started_at: UnixMillis,
    /// The term it runs under (fencing, J7).
    pub term: Term,
}

/// The publisher drain checkpoint: the newest deploy-driven render whose publication committed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrainCheckpoint {
    /// The HAProxyCfg.
    pub runtime_config: RuntimeConfigRef,
    /// The render.
    pub render: Checksum,
    /// `Seq` of its render event.
    pub render_seq: Seq,
    /// The deployment that applied it.
    pub deployment: DeploymentId,
}

/// A work item, by queue.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WorkItem {
    /// Queue `publish`.
    Publish(PublishItem),
    /// Queue `publish-deployed`.
    PublishDeployed(DeployedPublishItem),
    /// Queue `invalid`.
    Invalid(InvalidPublishItem),
    /// Queue `verdict`.
    Verdict(VerdictItem),
    /// Queue `status-pending` (and `status-parked` once parked).
    Status(PodStatusItem),
    /// Queue `deploy-pending`.
    DeployPending(DeployRequest),
    /// Queue `deploy-inflight`.
    DeployInflight(InFlightDeployment),
    /// Queue `drain-checkpoint`.
    DrainCheckpoint(DrainCheckpoint),
}

/// A stored work item: the item plus its queue bookkeeping.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkRecord {
    /// The version a worker acks (compare-and-delete).
    pub id: WorkId,
    /// The event this item derives from, if any; the event log keeps it while the item lives.
    pub origin: Option<Seq>,
    /// When the item was written (unix ms).
    pub enqueued_at: UnixMillis,
    /// Failed attempts so far (0 for a fresh item).
    pub attempt: u32,
    /// Earliest time the next attempt may run; `peek_due` skips the item before it.
    pub next_attempt_at: UnixMillis,
    /// The item.
    pub item: WorkItem,
}

/// What a pod's Dataplane endpoint was last seen running (table `endpoint_applied`, keyed by URL).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointApplied {
    /// The endpoint.
    pub endpoint: EndpointUrl,
    /// The pod behind it.
    pub pod: PodRef,
    /// The render it runs.
    pub render: Checksum,
    /// Dataplane configuration version after the push, when known.
    pub config_version: Option<ConfigVersion>,
    /// Reload id of the last reload, when one happened.
    pub reload_id: Option<ReloadId>,
    /// When it was applied.
    pub applied_at: UnixMillis,
}

/// The last publication of one HAProxyCfg (table `published_checkpoint`, keyed by object name).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublishedCheckpoint {
    /// HAProxyCfg name (`<config-name>-haproxycfg` or `...-invalid`).
    pub name: ObjectName,
    /// The render in its spec.
    pub render: Checksum,
    /// `Seq` of that render's event (the spec never moves backwards in it).
    pub render_seq: Seq,
    /// `resourceVersion` after the write, when known.
    pub resource_version: Option<ResourceVersion>,
    /// When it was published.
    pub published_at: UnixMillis,
}

// ---- from journal/src/checkpoint.rs ----

/// One component's checkpoint (table `component_state`, keyed by component name).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ComponentCheckpoint {
    /// The last event folded into `state`.
    pub through: Seq,
    /// The state.
    pub state: ComponentState,
}

/// The decision state of one component, by component.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ComponentState {
    /// `deployment-scheduler`.
    Scheduler(SchedulerCheckpoint),
    /// `validator`.
    Validator(ValidatorCheckpoint),
    /// `config-publisher`.
    Publisher(PublisherCheckpoint),
}

/// The scheduler's durable state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchedulerCheckpoint {
    /// The last validated render and the correlation of its validation.
    pub last_validated: Option<(Checksum, Correlation)>,
    /// The admitted endpoints.
    pub endpoints: Vec<Endpoint>,
    /// The HAProxyCfg per-pod status goes to.
    pub runtime_config: Option<RuntimeConfigRef>,
    /// The skip cache.
    pub applied: Vec<(EndpointUrl, Checksum)>,
    /// Endpoints given up after the timeout retries.
    pub given_up: Vec<EndpointUrl>,
    /// The quarantine, sorted by endpoint.
    pub rejected: Vec<RejectedRender>,
}

/// One quarantined (render, endpoint).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RejectedRender {
    /// The endpoint.
    pub endpoint: EndpointUrl,
    /// The rejected render.
    pub render: Checksum,
    /// What the Dataplane API answered.
    pub message: String,
}

/// The validator's durable state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValidatorCheckpoint {
    /// The last render that passed the gate.
    pub last_passed: Option<Checksum>,
}

/// A render's place in render order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RenderPlace {
    /// The render.
    pub render: Checksum,
    /// `Seq` of its `template.rendered` event.
    pub seq: Seq,
    /// When it was rendered.
    pub at: UnixMillis,
}

/// The publisher's event router state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublisherCheckpoint {
    /// The identity publications belong to.
    pub identity: Option<ConfigIdentity>,
    /// Recent renders in render order.
    pub rendered: Vec<RenderPlace>,
    /// Pods known to exist.
    pub known_pods: Vec<PodRef>,
    /// Whether an authoritative discovery was folded.
    pub discovered: bool,
    /// Pods that went away while this replica did not lead.
    pub gone: Vec<PodRef>,
    /// Mirror of the render gate's latch.
    pub pinned: bool,
    /// The last event whose work the router queued.
    pub queued_through: Option<Seq>,
    /// Whether this replica led as of the last event folded.
    pub leading: bool,
    /// The annotation value of the last `deployment.retry.request` folded.
    pub retry_rejected: Option<String>,
}

// ---- from journal/src/render.rs ----

/// Kind of an auxiliary file; decides the directory it is mapped to on the pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum AuxKind {
    /// `maps/` -> `/etc/haproxy/maps/`.
    Map,
    /// `ssl/` (certificate + key PEM) -> `/etc/haproxy/ssl/`. Secret material.
    Ssl,
    /// `ca/` (CA PEM) -> `/etc/haproxy/ssl/`.
    Ca,
    /// `general/` -> `/etc/haproxy/general/`.
    General,
    /// `crt-lists/` -> `/etc/haproxy/general/`.
    CrtList,
}

/// One auxiliary file of a render.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuxFile {
    /// What kind of file this is.
    pub kind: AuxKind,
    /// Path relative to the render root, e.g. `maps/hosts.map`; unique within a render.
    pub path: String,
    /// Blob key: SHA-256 of the file content.
    pub blob: Checksum,
    /// Content length in bytes.
    pub size_bytes: u64,
}

/// A render manifest: the config blob plus auxiliary files, sorted by `path`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Render {
    /// Render identity: `render_checksum` over the config and every file.
    pub checksum: Checksum,
    /// Blob key of `haproxy.cfg`.
    pub config: Checksum,
    /// Length of `haproxy.cfg` in bytes.
    pub config_size_bytes: u64,
    /// Auxiliary files, sorted by `path`.
    pub files: Vec<AuxFile>,
}

/// A unique event id (HAPTIC: a UUID per event).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct EventId(pub String);

/// A correlation id: the event id of the event that started a reconciliation chain.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct CorrelationId(pub String);

/// The id of one deployment, chosen by the scheduler; `DeploymentCompleted` carries it so
/// stale completions can be ignored.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct DeploymentId(pub String);

/// A Kubernetes namespace.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Namespace(pub String);

/// A Kubernetes object name (pod, HAProxyCfg, ConfigMap, ...).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ObjectName(pub String);

/// A Kubernetes object uid.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ObjectUid(pub String);

/// The base URL of a pod's Dataplane API endpoint, e.g. `http://10.0.0.7:5555`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct EndpointUrl(pub String);

/// The Dataplane API `Reload-ID` header value.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ReloadId(pub String);

/// The identity of a controller replica (the pod name, or `standalone`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Identity(pub String);

/// A Kubernetes `resourceVersion`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ResourceVersion(pub String);

/// The schema-1 tables (names and key/value types), frozen. Values of every table but `meta` and
/// `blob_refs` are envelopes (`journal/DESIGN.md`, "Record envelope", format version 1).
pub mod tables {
    use redb::TableDefinition;

    /// `meta`: `&str -> &[u8]` (`schema_version` u32 LE, `codec`, `term` u64 LE, `identity`,
    /// `created_at_ms`, `next_seq`, `next_work_id`, `dispatched_through` u64 LE).
    pub const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
    /// `events`: `u64 Seq -> envelope(Event)`.
    pub const EVENTS: TableDefinition<u64, &[u8]> = TableDefinition::new("events");
    /// `blobs`: `[u8; 32] -> envelope(blob.file | blob.render)`.
    pub const BLOBS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("blobs");
    /// `blob_refs`: `[u8; 32] -> (refs u64, holds u64)`.
    pub const BLOB_REFS: TableDefinition<&[u8], (u64, u64)> = TableDefinition::new("blob_refs");
    /// FIFO queue tables: `u64 WorkId -> envelope(WorkRecord)`.
    pub const FIFO: [&str; 4] = [
        "publish_validated",
        "publish_deployed",
        "invalid_publish",
        "verdict",
    ];
    /// Per-pod status tables: `"<ns>/<runtimeConfig>/<pod>" -> envelope(WorkRecord)`.
    pub const BY_POD: [&str; 2] = ["status_pending", "status_parked"];
    /// Single-slot tables: `() -> envelope(WorkRecord)`.
    pub const SLOTS: [&str; 3] = ["deploy_pending", "deploy_inflight", "drain_checkpoint"];
    /// `endpoint_applied`: URL `-> envelope(EndpointApplied)`.
    pub const ENDPOINT_APPLIED: TableDefinition<&str, &[u8]> =
        TableDefinition::new("endpoint_applied");
    /// `published_checkpoint`: HAProxyCfg name `-> envelope(PublishedCheckpoint)`.
    pub const PUBLISHED_CHECKPOINT: TableDefinition<&str, &[u8]> =
        TableDefinition::new("published_checkpoint");
    /// `component_state`: component name `-> envelope(ComponentCheckpoint)`.
    pub const COMPONENT_STATE: TableDefinition<&str, &[u8]> =
        TableDefinition::new("component_state");
}
