//! The production step `v3_to_v4` (schema 3 -> 4, issue 28): creates the per-pod history
//! table of [`crate::v4::tables`], `pod_history`, empty.
//!
//! ```text
//!  one write transaction (migrate_with):
//!      open_table(pod_history)           created empty (kept as is if somehow present)
//!      meta.schema_version = 4           written by migrate_with in the same transaction
//!  commit (Durability::Immediate)
//! ```
//!
//! Nothing else is read or written: events, queues, blobs, counts, meta (but `schema_version`)
//! and the schema-3 state tables stay byte for byte what they were. An empty `pod_history`
//! means "no sync recorded" (a schema-3 controller kept no history); since no record exists,
//! no blob gains a reference. Uses the frozen table definition, so it keeps meaning the same
//! when the journal's tables change.

use haptic_journal::redb;

use crate::{Step, StepError, v4};

/// Schema 3 -> 4: create `pod_history`.
pub const V3_TO_V4: Step = Step {
    from: 3,
    to: 4,
    name: "v3_to_v4",
    summary: "create the empty per-pod history table pod_history",
    run,
};

fn run(txn: &redb::WriteTransaction) -> Result<(), StepError> {
    txn.open_table(v4::tables::POD_HISTORY)?;
    Ok(())
}
