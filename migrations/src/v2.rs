//! Frozen copy of the schema-2 record types (DESIGN.md J8, STYLE.md 2.3).
//!
//! Schema 2 is schema 1 plus two tables (`endpoint_files`, `endpoint_transaction`) and their
//! record types, copied from `haptic-journal` (`pod.rs`, `ids.rs`) at schema 2: serde shape only,
//! no behaviour. Every schema-1 type is unchanged at schema 2 and re-exported from [`crate::v1`]
//! (`v2::Event` is `v1::Event`), so a later step `v2_to_v3` reads a v2 file with this module
//! alone. The payload codec is schema 1's ([`decode`], [`encode`], [`CODEC_NAME`]).
//!
//! Schema 2 also appends two variants to `SyncMode` (a field of `config.applied.to.pod`):
//! `RawResync` (bincode tag 6) and `NoRuntimeApi` (tag 7). Appending keeps every schema-1 event
//! decodable, so no step rewrites events; the re-exported v1 `Event` decodes every event of a
//! v2 file except one carrying those two modes, which a step out of schema 2 must freeze with
//! the event types (the fixture holds none, so the round-trip test cannot see it).
//!
//! Schema 2 also appends `PodStatusChange::Discovered` (bincode tag 2; a field of the
//! `status-pending`/`status-parked` work items, issue 27): the same rule, the re-exported v1
//! `WorkItem` decodes every item of a v2 file except a `Discovered` one, which a step out of
//! schema 2 must freeze with the work item types; a binary built before it refuses such a file
//! (its verify cannot decode the item) rather than misread it.
//!
//! Frozen: schema 3 exists ([`crate::v3`] re-exports these types and freezes again the ones
//! that changed), so nothing here may change and `fixtures/v2.redb` is never regenerated; the
//! test `fixture_v2::frozen_types_round_trip_every_payload` checks these types against that
//! file.

#![allow(missing_docs)]

use serde::{Deserialize, Serialize};

// Schema 2 = schema 1 + the items below (local items shadow `VERSION` and `tables`).
pub use crate::v1::*;

/// Schema version these types describe.
pub const VERSION: u32 = 2;

// ---- from journal/src/ids.rs ----

/// A Dataplane API configuration transaction id (`id` of `POST .../transactions`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TransactionId(pub String);

// ---- from journal/src/pod.rs ----

/// A Dataplane API storage area (variant order is the bincode tag).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum FileStore {
    /// `storage/ssl_certificates`.
    SslCertificate,
    /// `runtime/ssl_ca_files`.
    CaFile,
    /// `storage/general`.
    General,
    /// `storage/maps`.
    Map,
}

/// One stored file as the replica knew it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredFileState {
    /// The storage area.
    pub store: FileStore,
    /// The stored name.
    pub name: String,
    /// SHA-256 of the content on disk after the last write.
    pub written: Checksum,
    /// SHA-256 of the content HAProxy loaded, when known.
    pub loaded: Option<Checksum>,
}

/// The stored files of one endpoint (table `endpoint_files`, keyed by URL; record kind
/// [`EndpointFiles::RECORD_KIND`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointFiles {
    /// The endpoint.
    pub endpoint: EndpointUrl,
    /// The pod behind it when the record was written.
    pub pod: PodRef,
    /// Per stored file, sorted by (store, name).
    pub files: Vec<StoredFileState>,
    /// When it was written.
    pub updated_at: UnixMillis,
}

impl EndpointFiles {
    /// Record kind in the envelope.
    pub const RECORD_KIND: &'static str = "state.endpoint-files";
}

/// Where an open transaction stands (variant order is the bincode tag).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TransactionState {
    /// Started; changes are being written into it.
    Open,
    /// The commit was sent; its answer was not journaled.
    Committing,
    /// Its outcome is unknown.
    Unknown,
}

/// A configuration transaction the replica opened on an endpoint (table
/// `endpoint_transaction`, keyed by URL; record kind [`EndpointTransaction::RECORD_KIND`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointTransaction {
    /// The endpoint.
    pub endpoint: EndpointUrl,
    /// The pod behind it.
    pub pod: PodRef,
    /// The id the API assigned.
    pub id: TransactionId,
    /// The configuration version it was started at.
    pub version: ConfigVersion,
    /// Where it stands.
    pub state: TransactionState,
    /// When it was started.
    pub started_at: UnixMillis,
}

impl EndpointTransaction {
    /// Record kind in the envelope.
    pub const RECORD_KIND: &'static str = "state.endpoint-transaction";
}

/// The schema-2 tables: every schema-1 table ([`crate::v1::tables`], unchanged) plus the two
/// below, frozen.
pub mod tables {
    use redb::TableDefinition;

    pub use crate::v1::tables::*;

    /// `endpoint_files`: URL `-> envelope(EndpointFiles)`.
    pub const ENDPOINT_FILES: TableDefinition<&str, &[u8]> = TableDefinition::new("endpoint_files");
    /// `endpoint_transaction`: URL `-> envelope(EndpointTransaction)`.
    pub const ENDPOINT_TRANSACTION: TableDefinition<&str, &[u8]> =
        TableDefinition::new("endpoint_transaction");
    /// The tables schema 2 adds to schema 1, by name.
    pub const ADDED: [&str; 2] = ["endpoint_files", "endpoint_transaction"];
}
