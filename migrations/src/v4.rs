//! Frozen copy of the schema-4 record types (DESIGN.md J8, STYLE.md 2.3).
//!
//! Schema 4 is schema 3 plus one table, `pod_history` (issue 28): per pod, one
//! [`SyncRecord`] per sync, keyed by `("<namespace>/<pod>", u64 sequence)` (see
//! [`tables::POD_HISTORY`]), record kind [`SyncRecord::RECORD_KIND`]. Its types are copied from
//! `haptic-journal` (`history.rs`) at schema 4: [`SyncRecord`], [`SyncResult`], and
//! [`SyncMode`] frozen again with every variant schema 4 knows (schema 2 appended `RawResync`
//! and `NoRuntimeApi` to schema 1's, see [`crate::v2`]; a history record may carry any of
//! them).
//!
//! Schema 4 also appends two fields to the scheduler's checkpoint for the operator's rollback
//! (issue 28): `previous_validated` (the render validated before the newest) and `rollback`
//! (the hold, a [`RollbackHold`]). bincode is not self-describing, so the types that hold a
//! `SchedulerCheckpoint` change shape with it and are frozen again here, copied from
//! `haptic-journal` (`checkpoint.rs`) at schema 4: [`SchedulerCheckpoint`], [`RollbackHold`],
//! [`ComponentState`], [`ComponentCheckpoint`] (table `component_state`, record kind
//! [`ComponentCheckpoint::RECORD_KIND`]); the step `v3_to_v4` rewrites the scheduler's record
//! into this shape. [`RejectedRender`] stays schema 3's, `ValidatorCheckpoint` and
//! `PublisherCheckpoint` schema 1's (re-exported).
//!
//! Every other type is unchanged at schema 4 and re-exported from [`crate::v3`] (which still
//! names schema 1's `SyncMode` inside `v1::Event`: that is the v1 event's frozen shape), so a
//! later step `v4_to_v5` reads a v4 file with this module alone. The payload codec is schema
//! 1's ([`decode`], [`encode`], [`CODEC_NAME`]).
//!
//! Schema 4 also appends enum variants, which need no rewrite (bincode numbers variants in
//! order, so every schema-3 record decodes unchanged):
//! - `Event::DeploymentRollbackRequest { correlation, runtime_config, value: Option<String>,
//!   shown: Option<(String, Checksum)> }` (bincode tag 21, record kind
//!   `deployment.rollback.request`);
//! - `Event::DeploymentRollback { correlation, runtime_config, change: RollbackChange }` (tag
//!   22, record kind `deployment.rollback`), with the new enum `RollbackChange` (`Held { value:
//!   String, render: Checksum, newest: Option<Checksum> }` tag 0, `Released { render: Checksum,
//!   newest: Option<Checksum> }` tag 1, `Refused { value: String, reason: String, held:
//!   Option<(String, Checksum)> }` tag 2, `Holding { value: String, render: Checksum, newest:
//!   Option<Checksum> }` tag 3; `journal/src/events/values.rs`);
//! - `DeploymentCause::Rollback` (tag 6; a field of `deployment.scheduled` and of the
//!   `deploy-pending` / `deploy-inflight` work items).
//!
//! The re-exported v1 `Event` and `WorkItem` decode every event and item of a v4 file except
//! one carrying these variants (or those schema 2 and 3 appended, see [`crate::v2`],
//! [`crate::v3`]), which a step out of schema 4 that reads events or work items must freeze
//! with the event and work item types (the fixture holds none: the re-exported v1 `Event` of its
//! round trip could not decode them).
//!
//! Until schema 4 is released (`v0.1.0`), when one of these types changes in the journal
//! crate, copy it again (keep variant and field order: it is the bincode layout) and regenerate
//! `fixtures/v4.redb`; `fixture_v4::frozen_types_round_trip_every_payload` fails while they
//! disagree.

#![allow(missing_docs)]

use serde::{Deserialize, Serialize};

// Schema 4 = schema 3 + the items below (local items shadow `VERSION`, `SyncMode`, the three
// checkpoint types that hold the scheduler's and `tables`).
pub use crate::v3::*;

/// Schema version these types describe.
pub const VERSION: u32 = 4;

// ---- from journal/src/events/values.rs ----

/// How one endpoint sync applied a configuration change (variant order is the bincode tag;
/// schema 1's six, then schema 2's two).
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
    /// Raw push to resync an API whose in-memory configuration differs from its file.
    RawResync,
    /// A transaction with one reload: the pod has no runtime API.
    NoRuntimeApi,
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

impl ComponentCheckpoint {
    /// Record kind in the envelope (unchanged since schema 1).
    pub const RECORD_KIND: &'static str = "state.component-checkpoint";
}

/// The decision state of one component, by component (variant order is the bincode tag).
// A frozen serde shape read once per migration: the scheduler's variant is the largest by far
// since schema 4, and boxing it would not change a byte of the encoding (serde serializes a
// `Box<T>` as `T`), so either shape reads the same records.
#[allow(clippy::large_enum_variant)]
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

/// The scheduler's durable state. Schema 4 appended `previous_validated` and `rollback`.
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
    /// The quarantine, sorted by endpoint (schema 3's entries).
    pub rejected: Vec<RejectedRender>,
    /// The render validated before `last_validated` (what a rollback to `previous` names).
    pub previous_validated: Option<Checksum>,
    /// The operator's rollback, while it holds.
    pub rollback: Option<RollbackHold>,
}

/// A rollback the scheduler holds (the annotation `haproxy-haptic.org/rollback-to`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RollbackHold {
    /// The annotation's value that asked for it (`sha256:<hex>` or `previous`).
    pub value: String,
    /// The held render.
    pub render: Checksum,
    /// The request's correlation.
    pub correlation: Correlation,
    /// When the scheduler folded the request, unix ms.
    pub since: UnixMillis,
}

// ---- from journal/src/history.rs ----

/// How one sync ended (variant order is the bincode tag).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SyncResult {
    /// Applied.
    Applied,
    /// Failed, retried.
    Failed { message: String },
    /// Rejected permanently.
    Rejected { message: String },
}

/// One sync of one pod (table `pod_history`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncRecord {
    pub pod: PodRef,
    pub endpoint: EndpointUrl,
    pub render: Checksum,
    pub started_at: UnixMillis,
    pub ended_at: UnixMillis,
    pub mode: Option<SyncMode>,
    pub operations: OperationCounts,
    pub reloaded: bool,
    pub reload_id: Option<ReloadId>,
    pub result: SyncResult,
    pub term: Term,
    pub deployment: DeploymentId,
}

impl SyncRecord {
    /// Record kind in the envelope.
    pub const RECORD_KIND: &'static str = "history.sync";
}

/// The tables of schema 4: schema 3's (= schema 2's) plus `pod_history`.
pub mod tables {
    use redb::TableDefinition;

    pub use crate::v3::tables::*;

    /// `pod_history`: `("<namespace>/<pod>", u64 sequence) -> envelope(SyncRecord)`.
    pub const POD_HISTORY: TableDefinition<(&str, u64), &[u8]> =
        TableDefinition::new("pod_history");
    /// The tables schema 4 adds to schema 3, by name.
    pub const ADDED: [&str; 1] = ["pod_history"];
}
