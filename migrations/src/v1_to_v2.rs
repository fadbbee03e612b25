//! The production step `v1_to_v2` (schema 1 -> 2, issue 24): creates the two pod-truth tables
//! of [`crate::v2::tables`], `endpoint_files` and `endpoint_transaction`, empty.
//!
//! ```text
//!  one write transaction (migrate_with):
//!      open_table(endpoint_files)        created empty (kept as is if somehow present)
//!      open_table(endpoint_transaction)  created empty
//!      meta.schema_version = 2           written by migrate_with in the same transaction
//!  commit (Durability::Immediate)
//! ```
//!
//! Nothing else is read or written: events, queues, blobs, counts, meta (but `schema_version`)
//! and the schema-1 state tables stay byte for byte what they were. An empty `endpoint_files`
//! means "no stored file known to be written or loaded"; an empty `endpoint_transaction` means
//! "no transaction of ours open" (a schema-1 controller never opened one). Uses the frozen
//! table definitions, so it keeps meaning the same when the journal's tables change.

use haptic_journal::redb;

use crate::{Step, StepError, v2};

/// Schema 1 -> 2: create `endpoint_files` and `endpoint_transaction`.
pub const V1_TO_V2: Step = Step {
    from: 1,
    to: 2,
    name: "v1_to_v2",
    summary: "create the empty pod-truth tables endpoint_files and endpoint_transaction",
    run,
};

fn run(txn: &redb::WriteTransaction) -> Result<(), StepError> {
    txn.open_table(v2::tables::ENDPOINT_FILES)?;
    txn.open_table(v2::tables::ENDPOINT_TRANSACTION)?;
    Ok(())
}
