//! Work items: what each worker queue holds (DESIGN.md J2), and the per-endpoint and
//! per-HAProxyCfg state the workers keep.
//!
//! Every queue is a journal table; [`Queue`] names them (the names are the ones
//! `haptic-journalctl pending` prints). A work item is stored as a [`WorkRecord`]: the item plus
//! its [`WorkId`] (the version a worker acks, J3), the event it derives from, its attempt count and
//! its next-attempt time.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::events::{
    ConfigIdentity, Correlation, DeploymentReason, Endpoint, PodRef, RuntimeConfigRef, SyncMetadata,
};
use crate::ids::{
    BlobRefs, Checksum, ConfigVersion, DeploymentId, EndpointUrl, ObjectName, ReloadId,
    ResourceVersion, Seq, Term, UnixMillis, WorkId,
};

/// One worker queue (a journal table each).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Queue {
    /// Validation-driven publications, FIFO by [`WorkId`].
    Publish,
    /// Deploy-driven publications, FIFO by [`WorkId`].
    PublishDeployed,
    /// `-invalid` publications of rejected renders, FIFO.
    Invalid,
    /// Render-gate verdicts to mirror as HAProxyCfg conditions, FIFO.
    Verdict,
    /// Per-pod status updates waiting to be written, keyed by [`PodStatusKey`], last wins.
    StatusPending,
    /// Per-pod status updates the HAProxyCfg cannot take yet, same key, last wins.
    StatusParked,
    /// The one pending deployment, latest wins.
    DeployPending,
    /// The deployment being executed (at most one).
    DeployInflight,
    /// The publisher drain checkpoint (one).
    DrainCheckpoint,
}

/// How a queue is keyed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueShape {
    /// FIFO by [`WorkId`]; every enqueue adds an item.
    Fifo,
    /// Keyed by [`PodStatusKey`]; an enqueue replaces the item under its key (last wins).
    ByPod,
    /// A single slot; an enqueue replaces it (latest wins).
    Slot,
}

impl Queue {
    /// Every queue, in the order tools print them.
    pub const ALL: &'static [Queue] = &[
        Queue::Publish,
        Queue::PublishDeployed,
        Queue::Invalid,
        Queue::Verdict,
        Queue::StatusPending,
        Queue::StatusParked,
        Queue::DeployPending,
        Queue::DeployInflight,
        Queue::DrainCheckpoint,
    ];

    /// Stable name (`publish`, `publish-deployed`, `invalid`, `verdict`, `status-pending`,
    /// `status-parked`, `deploy-pending`, `deploy-inflight`, `drain-checkpoint`).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Queue::Publish => "publish",
            Queue::PublishDeployed => "publish-deployed",
            Queue::Invalid => "invalid",
            Queue::Verdict => "verdict",
            Queue::StatusPending => "status-pending",
            Queue::StatusParked => "status-parked",
            Queue::DeployPending => "deploy-pending",
            Queue::DeployInflight => "deploy-inflight",
            Queue::DrainCheckpoint => "drain-checkpoint",
        }
    }

    /// Parses a stable name.
    #[must_use]
    pub fn parse(text: &str) -> Option<Queue> {
        Queue::ALL.iter().copied().find(|q| q.as_str() == text)
    }

    /// How the queue is keyed.
    #[must_use]
    pub fn shape(self) -> QueueShape {
        match self {
            Queue::Publish | Queue::PublishDeployed | Queue::Invalid | Queue::Verdict => {
                QueueShape::Fifo
            }
            Queue::StatusPending | Queue::StatusParked => QueueShape::ByPod,
            Queue::DeployPending | Queue::DeployInflight | Queue::DrainCheckpoint => {
                QueueShape::Slot
            }
        }
    }

    /// The redb table holding this queue.
    #[must_use]
    pub fn table_name(self) -> &'static str {
        match self {
            Queue::Publish => "publish_validated",
            Queue::PublishDeployed => "publish_deployed",
            Queue::Invalid => "invalid_publish",
            Queue::Verdict => "verdict",
            Queue::StatusPending => "status_pending",
            Queue::StatusParked => "status_parked",
            Queue::DeployPending => "deploy_pending",
            Queue::DeployInflight => "deploy_inflight",
            Queue::DrainCheckpoint => "drain_checkpoint",
        }
    }
}

impl fmt::Display for Queue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Key of a per-pod status item: `<runtime namespace>/<runtime config>/<pod name>` (HAPTIC's
/// `statusWorkPending` key).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PodStatusKey(pub String);

impl PodStatusKey {
    /// Builds the key from its parts.
    #[must_use]
    pub fn new(runtime_config: &RuntimeConfigRef, pod: &PodRef) -> Self {
        PodStatusKey(format!(
            "{}/{}/{}",
            runtime_config.namespace, runtime_config.name, pod.name
        ))
    }
}

impl fmt::Display for PodStatusKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where a work item sits in its queue.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum WorkKey {
    /// FIFO queues: the item's own id.
    Id(WorkId),
    /// Status queues: the pod key.
    Pod(PodStatusKey),
    /// Single-slot queues.
    Slot,
}

impl fmt::Display for WorkKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WorkKey::Id(id) => write!(f, "{id}"),
            WorkKey::Pod(k) => write!(f, "{k}"),
            WorkKey::Slot => f.write_str("slot"),
        }
    }
}

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
    /// Discovery lists the pod: it gets an entry (no checksum yet) when it has none, so the
    /// `Synced` condition counts it pending until its first sync is reported (issue 27: a
    /// scale-up is not `Synced` while a new pod has no configuration). Added at the end of the
    /// enum in schema 2: every file of schema 2 written before it decodes unchanged (bincode
    /// numbers the variants in order); an older binary cannot read an item of this variant.
    Discovered,
    /// The scheduler quarantined `checksum` for the pod and retries it at `next_retry_at`
    /// (from `deployment.quarantined`; appended in schema 3). Queued under its own key
    /// ([`PodStatusItem::key`]: the pod's key plus [`QUARANTINE_KEY_SUFFIX`]), so it neither
    /// replaces nor is replaced by the pod's deployment report; it only sets the entry's
    /// `rejected`, `lastError` and `nextRetryAt` (never a failure count).
    Quarantined {
        /// The quarantined render.
        checksum: Checksum,
        /// HAProxy's message.
        message: String,
        /// Rejections in a row.
        attempts: u32,
        /// Wall-clock time of the next retry.
        next_retry_at: UnixMillis,
    },
}

/// Suffix of a [`PodStatusChange::Quarantined`] item's queue key.
pub const QUARANTINE_KEY_SUFFIX: &str = "#quarantine";

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

impl PodStatusItem {
    /// The item's queue key.
    #[must_use]
    pub fn key(&self) -> PodStatusKey {
        let key = PodStatusKey::new(&self.runtime_config, &self.pod);
        match self.change {
            PodStatusChange::Quarantined { .. } => PodStatusKey(key.0 + QUARANTINE_KEY_SUFFIX),
            _ => key,
        }
    }
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
#[non_exhaustive]
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

impl WorkItem {
    /// The queue an enqueue of this item goes to.
    #[must_use]
    pub fn queue(&self) -> Queue {
        match self {
            WorkItem::Publish(_) => Queue::Publish,
            WorkItem::PublishDeployed(_) => Queue::PublishDeployed,
            WorkItem::Invalid(_) => Queue::Invalid,
            WorkItem::Verdict(_) => Queue::Verdict,
            WorkItem::Status(_) => Queue::StatusPending,
            WorkItem::DeployPending(_) => Queue::DeployPending,
            WorkItem::DeployInflight(_) => Queue::DeployInflight,
            WorkItem::DrainCheckpoint(_) => Queue::DrainCheckpoint,
        }
    }

    /// Record kind in the envelope (`work.<queue>`).
    #[must_use]
    pub fn record_kind(&self) -> &'static str {
        match self {
            WorkItem::Publish(_) => "work.publish",
            WorkItem::PublishDeployed(_) => "work.publish-deployed",
            WorkItem::Invalid(_) => "work.invalid",
            WorkItem::Verdict(_) => "work.verdict",
            WorkItem::Status(_) => "work.status",
            WorkItem::DeployPending(_) => "work.deploy-pending",
            WorkItem::DeployInflight(_) => "work.deploy-inflight",
            WorkItem::DrainCheckpoint(_) => "work.drain-checkpoint",
        }
    }

    /// Every blob (render checksum) the item references.
    #[must_use]
    pub fn blob_refs(&self) -> BlobRefs {
        match self {
            WorkItem::Publish(i) => BlobRefs::one(i.render),
            WorkItem::PublishDeployed(i) => BlobRefs::one(i.render),
            WorkItem::Invalid(i) => BlobRefs::maybe(i.render),
            WorkItem::Verdict(i) => BlobRefs::one(i.render),
            WorkItem::Status(i) => match &i.change {
                PodStatusChange::Applied { checksum, .. }
                | PodStatusChange::Quarantined { checksum, .. } => BlobRefs::one(*checksum),
                PodStatusChange::Removed | PodStatusChange::Discovered => BlobRefs::none(),
            },
            WorkItem::DeployPending(r) => BlobRefs::one(r.render),
            WorkItem::DeployInflight(f) => BlobRefs::one(f.request.render),
            WorkItem::DrainCheckpoint(c) => BlobRefs::one(c.render),
        }
    }
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

impl EndpointApplied {
    /// Record kind in the envelope.
    pub const RECORD_KIND: &'static str = "state.endpoint-applied";
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

impl PublishedCheckpoint {
    /// Record kind in the envelope.
    pub const RECORD_KIND: &'static str = "state.published-checkpoint";
}
