//! redb table definitions and the meta keys (layout in `journal/DESIGN.md`).
//!
//! Public so that `haptic-migrations` and `haptic-journalctl` can open the same tables on a raw
//! [`redb::Database`]. Values of every table except `meta` and `blob_refs` are envelopes
//! ([`crate::codec`]).

use redb::TableDefinition;

use crate::work::Queue;

/// `meta`: `&str -> &[u8]`; see the `META_*` keys for each value's encoding.
pub const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
/// `events`: `u64 Seq -> envelope(Event)`, gap-free from the oldest kept event to the newest.
pub const EVENTS: TableDefinition<u64, &[u8]> = TableDefinition::new("events");
/// `blobs`: `[u8; 32] sha256 -> envelope(blob.file raw bytes | blob.render Render)`.
pub const BLOBS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("blobs");
/// `blob_refs`: `[u8; 32] sha256 -> (record references u64, explicit holds u64)`.
pub const BLOB_REFS: TableDefinition<&[u8], (u64, u64)> = TableDefinition::new("blob_refs");
/// `publish_validated`: `u64 WorkId -> envelope(WorkRecord)`, FIFO.
pub const PUBLISH_VALIDATED: TableDefinition<u64, &[u8]> =
    TableDefinition::new("publish_validated");
/// `publish_deployed`: `u64 WorkId -> envelope(WorkRecord)`, FIFO.
pub const PUBLISH_DEPLOYED: TableDefinition<u64, &[u8]> = TableDefinition::new("publish_deployed");
/// `invalid_publish`: `u64 WorkId -> envelope(WorkRecord)`, FIFO.
pub const INVALID_PUBLISH: TableDefinition<u64, &[u8]> = TableDefinition::new("invalid_publish");
/// `verdict`: `u64 WorkId -> envelope(WorkRecord)`, FIFO.
pub const VERDICT: TableDefinition<u64, &[u8]> = TableDefinition::new("verdict");
/// `status_pending`: `"<ns>/<runtimeConfig>/<pod>" -> envelope(WorkRecord)`, last wins.
pub const STATUS_PENDING: TableDefinition<&str, &[u8]> = TableDefinition::new("status_pending");
/// `status_parked`: same key and value as `status_pending`.
pub const STATUS_PARKED: TableDefinition<&str, &[u8]> = TableDefinition::new("status_parked");
/// `deploy_pending`: `() -> envelope(WorkRecord)`, one slot, latest wins.
pub const DEPLOY_PENDING: TableDefinition<(), &[u8]> = TableDefinition::new("deploy_pending");
/// `deploy_inflight`: `() -> envelope(WorkRecord)`, one slot.
pub const DEPLOY_INFLIGHT: TableDefinition<(), &[u8]> = TableDefinition::new("deploy_inflight");
/// `drain_checkpoint`: `() -> envelope(WorkRecord)`, one slot.
pub const DRAIN_CHECKPOINT: TableDefinition<(), &[u8]> = TableDefinition::new("drain_checkpoint");
/// `endpoint_applied`: `endpoint URL -> envelope(EndpointApplied)`.
pub const ENDPOINT_APPLIED: TableDefinition<&str, &[u8]> = TableDefinition::new("endpoint_applied");
/// `endpoint_files` (schema 2): `endpoint URL -> envelope(EndpointFiles)`.
pub const ENDPOINT_FILES: TableDefinition<&str, &[u8]> = TableDefinition::new("endpoint_files");
/// `endpoint_transaction` (schema 2): `endpoint URL -> envelope(EndpointTransaction)`.
pub const ENDPOINT_TRANSACTION: TableDefinition<&str, &[u8]> =
    TableDefinition::new("endpoint_transaction");
/// `published_checkpoint`: `HAProxyCfg name -> envelope(PublishedCheckpoint)`.
pub const PUBLISHED_CHECKPOINT: TableDefinition<&str, &[u8]> =
    TableDefinition::new("published_checkpoint");
/// `component_state`: `component name -> envelope(ComponentCheckpoint)` (DESIGN.md J11).
pub const COMPONENT_STATE: TableDefinition<&str, &[u8]> = TableDefinition::new("component_state");
/// `pod_history` (schema 4): `("<namespace>/<pod>", u64 sequence) -> envelope(SyncRecord)`, one
/// pod's records contiguous and in append order (sequences from 1 per pod).
pub const POD_HISTORY: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("pod_history");

/// Every table name, in the order tools print them.
pub const ALL_TABLES: &[&str] = &[
    "meta",
    "events",
    "blobs",
    "blob_refs",
    "publish_validated",
    "publish_deployed",
    "invalid_publish",
    "verdict",
    "status_pending",
    "status_parked",
    "deploy_pending",
    "deploy_inflight",
    "drain_checkpoint",
    "endpoint_applied",
    "endpoint_files",
    "endpoint_transaction",
    "published_checkpoint",
    "component_state",
    "pod_history",
];

/// The table of a queue.
#[must_use]
pub fn queue_table_name(queue: Queue) -> &'static str {
    queue.table_name()
}

pub(crate) fn fifo_def(queue: Queue) -> TableDefinition<'static, u64, &'static [u8]> {
    match queue {
        Queue::PublishDeployed => PUBLISH_DEPLOYED,
        Queue::Invalid => INVALID_PUBLISH,
        Queue::Verdict => VERDICT,
        _ => PUBLISH_VALIDATED,
    }
}

pub(crate) fn pod_def(queue: Queue) -> TableDefinition<'static, &'static str, &'static [u8]> {
    match queue {
        Queue::StatusParked => STATUS_PARKED,
        _ => STATUS_PENDING,
    }
}

pub(crate) fn slot_def(queue: Queue) -> TableDefinition<'static, (), &'static [u8]> {
    match queue {
        Queue::DeployInflight => DEPLOY_INFLIGHT,
        Queue::DrainCheckpoint => DRAIN_CHECKPOINT,
        _ => DEPLOY_PENDING,
    }
}

/// Meta key: schema version, `u32` LE.
pub const META_SCHEMA_VERSION: &str = "schema_version";
/// Meta key: payload codec name, UTF-8 (see [`crate::codec::CODEC_NAME`]).
pub const META_CODEC: &str = "codec";
/// Meta key: current leadership term, `u64` LE.
pub const META_TERM: &str = "term";
/// Meta key: identity of the replica that holds the term, UTF-8.
pub const META_IDENTITY: &str = "identity";
/// Meta key: creation time of the file, unix ms `u64` LE.
pub const META_CREATED_AT: &str = "created_at_ms";
/// Meta key: next event `Seq`, `u64` LE (never reused, survives trimming).
pub const META_NEXT_SEQ: &str = "next_seq";
/// Meta key: next `WorkId`, `u64` LE.
pub const META_NEXT_WORK_ID: &str = "next_work_id";
/// Meta key: last `Seq` the controller dispatched to its components, `u64` LE (0 = none).
pub const META_DISPATCHED: &str = "dispatched_through";
