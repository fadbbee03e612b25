//! Frozen copy of the schema-3 record types (DESIGN.md J8, STYLE.md 2.3).
//!
//! Schema 3 is schema 2 with two fields appended to the scheduler's quarantine entry,
//! [`RejectedRender`]: `attempts` (rejections in a row) and `next_retry_at` (when the scheduler
//! retries it; issue 27). bincode is not self-describing, so every type that holds a
//! `RejectedRender` changes shape with it and is frozen again here, copied from
//! `haptic-journal` (`checkpoint.rs`) at schema 3: [`SchedulerCheckpoint`], [`ComponentState`],
//! [`ComponentCheckpoint`] (table `component_state`, record kind
//! [`ComponentCheckpoint::RECORD_KIND`]). Every other schema-2 type is unchanged at schema 3 and
//! re-exported from [`crate::v2`] (`v3::Event` is `v1::Event`, `v3::ValidatorCheckpoint` and
//! `v3::PublisherCheckpoint` are schema 1's), so a later step `v3_to_v4` reads a v3 file with
//! this module alone. The payload codec is schema 1's ([`decode`], [`encode`], [`CODEC_NAME`]);
//! the tables are schema 2's ([`tables`]).
//!
//! Schema 3 also appends three enum variants, which need no rewrite (bincode numbers variants
//! in order, so every schema-2 record decodes unchanged):
//! - `Event::DeploymentQuarantined { correlation, runtime_config, pod, render, message,
//!   attempts, next_retry_at }` (bincode tag 20, record kind `deployment.quarantined`);
//! - `DeploymentCause::QuarantineRetry` (tag 5; a field of `deployment.scheduled` and of the
//!   `deploy-pending` / `deploy-inflight` work items);
//! - `PodStatusChange::Quarantined { checksum, message, attempts, next_retry_at }` (tag 3; the
//!   `status-pending` / `status-parked` work items, queued under the pod's key plus
//!   `#quarantine`).
//!
//! The re-exported v1 `Event` and `WorkItem` decode every event and item of a v3 file except
//! one carrying these variants (or schema 2's appended `SyncMode` and
//! `PodStatusChange::Discovered` variants, see [`crate::v2`]), which a step out of schema 3 that
//! reads events or work items must freeze with the event and work item types (the fixture holds
//! none, so the round-trip test cannot see it); a binary built before schema 3 refuses such a
//! file (its verify cannot decode the record) rather than misread it.
//!
//! Frozen: schema 4 exists ([`crate::v4`] re-exports these types), so nothing here may change
//! and `fixtures/v3.redb` is never regenerated; the test
//! `fixture_v3::frozen_types_round_trip_every_payload` checks these types against that file.

#![allow(missing_docs)]

use serde::{Deserialize, Serialize};

// Schema 3 = schema 2 + the items below (local items shadow `VERSION` and the four checkpoint
// types).
pub use crate::v2::*;

/// Schema version these types describe.
pub const VERSION: u32 = 3;

// ---- from journal/src/checkpoint.rs ----

/// One component's checkpoint (table `component_state`, keyed by component name).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ComponentCheckpoint {
    /// The last event folded into `state`.
    pub through: Seq,
    /// The state.
    pub state: ComponentState,
}

impl ComponentCheckpoint {
    /// Record kind in the envelope (unchanged since schema 1).
    pub const RECORD_KIND: &'static str = "state.component-checkpoint";
}

/// The decision state of one component, by component (variant order is the bincode tag).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ComponentState {
    /// `deployment-scheduler`.
    Scheduler(SchedulerCheckpoint),
    /// `validator`.
    Validator(ValidatorCheckpoint),
    /// `config-publisher`.
    Publisher(PublisherCheckpoint),
}

impl ComponentState {
    /// The component name, the table key.
    #[must_use]
    pub fn component(&self) -> &'static str {
        match self {
            ComponentState::Scheduler(_) => "deployment-scheduler",
            ComponentState::Validator(_) => "validator",
            ComponentState::Publisher(_) => "config-publisher",
        }
    }
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

/// One quarantined (render, endpoint). Schema 3 appended `attempts` and `next_retry_at`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RejectedRender {
    /// The endpoint.
    pub endpoint: EndpointUrl,
    /// The rejected render.
    pub render: Checksum,
    /// What the Dataplane API answered.
    pub message: String,
    /// Rejections of this render by this endpoint in a row (1 at the first).
    pub attempts: u32,
    /// Wall-clock time of the next retry, unix ms.
    pub next_retry_at: UnixMillis,
}
