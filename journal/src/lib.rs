//! `haptic-journal`: the durable redb journal under every haptic queue (DESIGN.md section 2).
//!
//! Every accepted event and every queued piece of work is committed to one redb file with
//! `Durability::Immediate` before anything acts on it. Readers and tools decode every record
//! with this crate alone ([`decode`]), without the controller.
//!
//! ```text
//!  render source / discovery / Lease / components
//!        |  Batch { events, blob puts, enqueue/ack/park/unpark, term, dispatch mark }
//!        v
//!  Journal::accept(batch) ---- sync_channel(4096) ----> writer thread (one per journal)
//!        ^                                                 | begin_write, Immediate
//!        |                                                 | validate + apply every request
//!        |                                                 | of the group: Seq, WorkId, blob
//!        |                                                 | ref counts, GC, periodic trim
//!        |                                                 | commit (one fsync for the group)
//!        +------------ reply: durable Seqs/WorkIds <-------+
//!        |
//!  dispatch in Seq order ---> components ---> external effect ---> ack (compare-and-delete,
//!                                                                  same commit as the outcome)
//!  readers: peek_due / queue / events / get_blob / pending / stats / verify (read txns, any thread)
//!  haptic-journalctl: Journal::open(read_only) or decode::* on raw_table() values
//! ```
//!
//! # Inputs
//! [`Batch`]es (events, blob puts, enqueue / ack / reschedule / park / unpark, term, dispatch
//! mark, trim, history appends and trims) through [`Journal::accept`] and its one-operation
//! shorthands.
//!
//! # Effects
//! One redb write transaction per group of requests, committed with `Durability::Immediate`
//! (one fsync; two in [`Concurrency::SingleWriter`]); periodic trimming and compaction.
//!
//! # Invariants
//! - An event's `Seq` is gap-free and never reused (meta `next_seq` survives trimming).
//! - A work item's [`WorkId`] changes on every replacing write; acks compare it (J3).
//! - A blob exists exactly while something references it: events, work items, render manifests,
//!   state records, per-pod history records ([`history`]) or explicit holds
//!   ([`Journal::put_blob`]); its stored count equals those references.
//! - Every value carries a format version and a CRC32 ([`codec`]); a mismatch is reported with
//!   table and key, never skipped.
//! - A record is stamped with the term current when it was written.
//!
//! # Journal records
//! See `journal/DESIGN.md` for every table's key/value layout, invariants and recovery rules.
//!
//! # Failpoints
//! [`crash_point!`]: `journal::before_commit`, `journal::after_commit`,
//! `journal::before_compact`, `journal::after_compact` (registry: [`failpoints::ALL`]).
//!
//! # Metrics
//! [`Journal::commit_stats`]: commits, events, requests, failed commits (events per commit).

#![warn(missing_docs)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod batch;
pub mod checkpoint;
pub mod codec;
pub mod contain;
mod corrupt;
mod db;
pub mod decode;
pub mod error;
pub mod events;
pub mod failpoints;
pub mod history;
pub mod ids;
mod journal;
mod meta;
pub mod pod;
pub mod render;
mod report;
pub mod tables;
pub mod verify;
pub mod work;
mod writer;

pub use batch::{Accepted, Batch, BlobKind, EventRef, Op, OpOutcome, Origin};
pub use checkpoint::{
    ComponentCheckpoint, ComponentState, PublisherCheckpoint, RejectedRender, RenderPlace,
    RollbackHold, SchedulerCheckpoint, ValidatorCheckpoint,
};
pub use codec::RecordHeader;
pub use contain::Damage;
pub use error::{
    AcceptError, CompactError, Corrupt, CorruptReason, ErrorKind, FaultKind, OpenError, ReadError,
    RecordKey, StorageFault,
};
pub use events::{
    ChangeCounts, ConfigIdentity, Correlation, DeploymentCause, DeploymentReason, Endpoint, Event,
    EventKind, GateVerdict, OperationCounts, PodRef, RollbackChange, RuntimeConfigRef,
    SyncMetadata, SyncMode,
};
pub use history::{
    HistoryQuery, HistoryRetention, SyncRecord, SyncResult, TimelineLine, pod_key, rfc3339,
    timeline,
};
pub use ids::{
    BlobRefs, Checksum, ConfigVersion, CorrelationId, DeploymentId, EndpointUrl, EventId,
    Generation, HaproxyVersion, Identity, Namespace, ObjectName, ObjectUid, ReloadId,
    ResourceVersion, Seq, Term, TransactionId, UnixMillis, WorkId,
};
pub use journal::{
    BlobCounts, CommitStats, Concurrency, Durability, Journal, JournalOptions, Pending,
    QueueSummary, Stats, TableStat, WorkEntry, open_raw, open_raw_read_only,
};
pub use meta::{
    Meta, SCHEMA_VERSION, init_tables, read_meta, read_schema_version, write_schema_version,
};
pub use pod::{EndpointFiles, EndpointTransaction, FileStore, StoredFileState, TransactionState};
pub use render::{AuxFile, AuxKind, Render, render_checksum, render_checksum_of_hashes};
pub use verify::{Problem, ProblemKind, VerifyReport};
pub use work::{
    DeployRequest, DeployedPublishItem, DrainCheckpoint, EndpointApplied, InFlightDeployment,
    InvalidPublishItem, PodStatusChange, PodStatusItem, PodStatusKey, PublishItem,
    PublishedCheckpoint, Queue, QueueShape, VerdictItem, WorkItem, WorkKey, WorkRecord,
};

/// Re-export of the redb version this crate is built on (tools must use the same version).
pub use redb;
