//! Frozen copy of the schema-4 record types (DESIGN.md J8, STYLE.md 2.3).
//!
//! Schema 4 is schema 3 plus one table, `pod_history` (issue 28): per pod, one
//! [`SyncRecord`] per sync, keyed by `("<namespace>/<pod>", u64 sequence)` (see
//! [`tables::POD_HISTORY`]), record kind [`SyncRecord::RECORD_KIND`]. Its types are copied from
//! `haptic-journal` (`history.rs`) at schema 4: [`SyncRecord`], [`SyncResult`], and
//! [`SyncMode`] frozen again with every variant schema 4 knows (schema 2 appended `RawResync`
//! and `NoRuntimeApi` to schema 1's, see [`crate::v2`]; a history record may carry any of
//! them). Every other type is unchanged at schema 4 and re-exported from [`crate::v3`] (which
//! still names schema 1's `SyncMode` inside `v1::Event`: that is the v1 event's frozen shape),
//! so a later step `v4_to_v5` reads a v4 file with this module alone. The payload codec is
//! schema 1's ([`decode`], [`encode`], [`CODEC_NAME`]).
//!
//! Until schema 4 is released (`v0.1.0`), when one of these types changes in the journal
//! crate, copy it again (keep variant and field order: it is the bincode layout) and regenerate
//! `fixtures/v4.redb`; `fixture_v4::frozen_types_round_trip_every_payload` fails while they
//! disagree.

#![allow(missing_docs)]

use serde::{Deserialize, Serialize};

// Schema 4 = schema 3 + the items below (local items shadow `VERSION`, `SyncMode` and
// `tables`).
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
