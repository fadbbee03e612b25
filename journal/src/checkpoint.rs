//! Component checkpoints: the decision state of each component, as of one event (DESIGN.md J11).
//!
//! Every component's pure `decide` folds over the events the dispatcher delivers. What it needs
//! after a restart is restored from one record per component (table `component_state`, keyed by
//! the component's name) plus the events after it: the record says through which [`Seq`] it
//! folded (`through`), and a component skips replayed events at or below it. A component writes
//! its checkpoint in the same batch as the effects or acks that change it (or alone, before it
//! lets go of the event that changed it), so the dispatcher never marks an event dispatched
//! whose effect on the state is not durable.
//!
//! What is *not* in a checkpoint, on purpose: what another table already holds (the pending and
//! in-flight deployment slots, `endpoint_applied`, the publisher's queues and
//! `published_checkpoint`), per-process ids (deployment id counters), and the per-term state that
//! J7 resets at every leadership change (rate limits, retry timers and backoff, throttles,
//! leadership itself).

use serde::{Deserialize, Serialize};

use crate::events::{ConfigIdentity, Correlation, Endpoint, PodRef, RuntimeConfigRef};
use crate::ids::{Checksum, EndpointUrl, Seq, UnixMillis};

/// One component's checkpoint (table `component_state`, key [`ComponentState::component`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ComponentCheckpoint {
    /// The last event folded into `state`; replayed events at or below it are skipped.
    pub through: Seq,
    /// The state.
    pub state: ComponentState,
}

impl ComponentCheckpoint {
    /// Record kind in the envelope.
    pub const RECORD_KIND: &'static str = "state.component-checkpoint";
}

/// The decision state of one component, by component.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[allow(clippy::large_enum_variant)] // one record per component, read once at start
pub enum ComponentState {
    /// `deployment-scheduler`.
    Scheduler(SchedulerCheckpoint),
    /// `validator`.
    Validator(ValidatorCheckpoint),
    /// `config-publisher` (its event router; the workers' state is in their queues).
    Publisher(PublisherCheckpoint),
}

impl ComponentState {
    /// The component name, the table key (`deployment-scheduler`, `validator`,
    /// `config-publisher`).
    #[must_use]
    pub fn component(&self) -> &'static str {
        match self {
            ComponentState::Scheduler(_) => "deployment-scheduler",
            ComponentState::Validator(_) => "validator",
            ComponentState::Publisher(_) => "config-publisher",
        }
    }

    /// The renders whose blobs this state needs (each a reference, journal/DESIGN.md invariant
    /// 4): the scheduler's last validated render, which drift checks, new pods, validation
    /// fallback and a new term deploy long after its events were trimmed; the render validated
    /// before it (what a rollback to `previous` names) and the held render of a rollback.
    #[must_use]
    pub fn renders(&self) -> Vec<Checksum> {
        match self {
            ComponentState::Scheduler(s) => {
                let mut r: Vec<Checksum> = s.last_validated.iter().map(|(c, _)| *c).collect();
                r.extend(s.previous_validated);
                r.extend(s.rollback.as_ref().map(|h| h.render));
                r.sort();
                r.dedup();
                r
            }
            ComponentState::Validator(_) | ComponentState::Publisher(_) => Vec::new(),
        }
    }
}

/// The scheduler's durable state: what its `SchedulerState` holds besides the slots (pending,
/// in-flight), the per-process deployment ids and the per-term state a leadership change resets
/// (rate limit, backoff, timeout retries, the running phase).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchedulerCheckpoint {
    /// The last validated render and the correlation of its validation.
    pub last_validated: Option<(Checksum, Correlation)>,
    /// The admitted endpoints, as last discovered, in discovery order.
    pub endpoints: Vec<Endpoint>,
    /// The HAProxyCfg per-pod status goes to, once known.
    pub runtime_config: Option<RuntimeConfigRef>,
    /// The skip cache: what each endpoint is known to run after a success, sorted by URL.
    pub applied: Vec<(EndpointUrl, Checksum)>,
    /// Endpoints given up after the timeout retries, sorted.
    pub given_up: Vec<EndpointUrl>,
    /// The quarantine: renders endpoints rejected permanently, one per endpoint, sorted by
    /// endpoint. Not sent again (drift checks included) before its `next_retry_at`, a new
    /// render, a pod change or an operator's retry request (`deployment.retry.request`).
    pub rejected: Vec<RejectedRender>,
    /// The render validated before `last_validated` (schema 4): what the rollback annotation's
    /// value `previous` names, fixed when the scheduler folds the request.
    pub previous_validated: Option<Checksum>,
    /// The operator's rollback, while it holds (schema 4): the fleet is deployed this render,
    /// not `last_validated`, until the annotation is removed.
    pub rollback: Option<RollbackHold>,
}

/// A rollback the scheduler holds (the annotation `haproxy-haptic.org/rollback-to`, issue 28).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RollbackHold {
    /// The annotation's value that asked for it (`sha256:<hex>` or `previous`): a request with
    /// the same value (the watch after a restart) changes nothing, so `previous` stays fixed.
    pub value: String,
    /// The held render (validated again with `haproxy -c` when the request was folded).
    pub render: Checksum,
    /// The request's correlation (the hold's deployments carry it).
    pub correlation: Correlation,
    /// When the scheduler folded the request, unix ms.
    pub since: UnixMillis,
}

/// One quarantined (render, endpoint): the pod's Dataplane API rejected the render
/// permanently (a 400/422 on the configuration push that persisted after its files were
/// synced again).
///
/// Schema 3 added `attempts` and `next_retry_at` (issue 27: a quarantine is retried with
/// backoff); the step `v2_to_v3` gives a schema-2 record `attempts: 1` and the step's own time
/// as `next_retry_at`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RejectedRender {
    /// The endpoint.
    pub endpoint: EndpointUrl,
    /// The rejected render.
    pub render: Checksum,
    /// What the Dataplane API answered (HAProxy's message).
    pub message: String,
    /// Rejections of this render by this endpoint in a row (1 at the first).
    pub attempts: u32,
    /// Wall-clock time of the next retry, unix ms: a restart (or a new leader reading this
    /// checkpoint) retries then, neither at once nor never.
    pub next_retry_at: UnixMillis,
}

/// The validator's durable state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValidatorCheckpoint {
    /// The last render that passed the gate (the fleet's pinned render after a failure).
    pub last_passed: Option<Checksum>,
}

/// A render's place in render order, as the publisher remembers it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RenderPlace {
    /// The render.
    pub render: Checksum,
    /// `Seq` of its `template.rendered` event (or the durable stand-in it was placed by).
    pub seq: Seq,
    /// When it was rendered.
    pub at: UnixMillis,
}

/// The publisher's event router state: what it must know when it next leads, kept up to date
/// while following too (the router folds every event; only a leader, or a replay, queues work).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublisherCheckpoint {
    /// The identity publications belong to, from the last `config.validated` (`None`: the
    /// identity the publisher was started with).
    pub identity: Option<ConfigIdentity>,
    /// Recent renders in render order, oldest first (bounded).
    pub rendered: Vec<RenderPlace>,
    /// Pods known to exist (discovered, or reported by a deployment), sorted by name.
    pub known_pods: Vec<PodRef>,
    /// Whether an authoritative discovery was folded: `known_pods` then holds every live pod,
    /// so a pod listed elsewhere (the published status) and not known is gone.
    pub discovered: bool,
    /// Pods that went away while this replica did not lead, oldest first, names unique
    /// (bounded): their status entries are owed a removal, queued when it next leads.
    pub gone: Vec<PodRef>,
    /// Mirror of the render gate's latch.
    pub pinned: bool,
    /// The last event the router folded while queueing (a leader's live delivery or a
    /// replay): the work of every event up to it is in the queues, whether or not that event
    /// queued any itself; `None`: none yet.
    pub queued_through: Option<Seq>,
    /// Whether this replica led as of the last event folded (the live term for a live
    /// delivery, the log's leadership events for a replay): a replayed event becomes work
    /// exactly when it did for the process that delivered it live.
    pub leading: bool,
    /// The value of the HAProxyCfg annotation `haproxy-haptic.org/retry-rejected` of the last
    /// `deployment.retry.request` folded: a value the heal watch sees that differs from it is
    /// a new request (so a restart does not repeat an old one).
    pub retry_rejected: Option<String>,
}
