//! A test-only schema 5 and its `v4_to_v5` step (feature `test-v5`): proves the machinery (J8)
//! on a step after the real chain, with a crash in its middle. Never part of [`crate::STEPS`].
//!
//! Schema 5 moves every event out of `events` into a new table `events_v5`
//! (`u64 Seq -> bincode(V5Event)`, the envelope header fields plus the frozen v4 event), then
//! deletes `events`. Half-way through, the crash point
//! `migrations::after_test_v5_half_rewritten` may abort the process: the step's one transaction
//! is then never committed and the file stays at schema 4, intact (with any earlier step of the
//! same run, such as the real `v1_to_v2`, `v2_to_v3` and `v3_to_v4`, committed).

use haptic_journal::redb::{self, ReadableTable};
use serde::{Deserialize, Serialize};

use crate::{Step, StepError, v4};

/// The v4 -> v5 test step.
pub const V4_TO_V5: Step = Step {
    from: 4,
    to: 5,
    name: "test_v4_to_v5",
    summary: "test only: move events into events_v5 (header fields + v4 event), drop events",
    run: v4_to_v5,
};

/// The test chain: the production [`crate::STEPS`] (`v1_to_v2`, `v2_to_v3`, `v3_to_v4`), then
/// [`V4_TO_V5`].
pub const STEPS: &[Step] = &[crate::V1_TO_V2, crate::V2_TO_V3, crate::V3_TO_V4, V4_TO_V5];

/// The crash point inside [`V4_TO_V5`] (listed in `haptic_journal::failpoints::ALL`).
pub const CRASH_POINT: &str = "migrations::after_test_v5_half_rewritten";

/// `events_v5`: `u64 Seq -> bincode(V5Event)`.
pub const EVENTS_V5: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("events_v5");

/// A schema-5 event record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct V5Event {
    /// Record kind (dotted).
    pub kind: String,
    /// Accepted-at, unix ms.
    pub accepted_at: u64,
    /// Term.
    pub term: u64,
    /// The event, in the frozen v4 shape.
    pub event: v4::Event,
}

fn v4_to_v5(txn: &redb::WriteTransaction) -> Result<(), StepError> {
    let undecodable = |key: u64| StepError::Undecodable {
        table: "events",
        key: key.to_string(),
        version: 4,
    };
    let mut moved = Vec::new();
    {
        let events = txn.open_table(v4::tables::EVENTS)?;
        for r in events.iter()? {
            let (k, v) = r?;
            let raw = haptic_journal::codec::open(v.value()).map_err(|_| undecodable(k.value()))?;
            let event: v4::Event = v4::decode(raw.payload).ok_or_else(|| undecodable(k.value()))?;
            let rec = V5Event {
                kind: raw.kind.to_owned(),
                accepted_at: raw.accepted_at.0,
                term: raw.term.0,
                event,
            };
            let bytes = v4::encode(&rec).map_err(|_| undecodable(k.value()))?;
            moved.push((k.value(), bytes));
        }
    }
    let half = moved.len() / 2;
    {
        let mut out = txn.open_table(EVENTS_V5)?;
        let mut events = txn.open_table(v4::tables::EVENTS)?;
        for (i, (seq, bytes)) in moved.iter().enumerate() {
            out.insert(*seq, bytes.as_slice())?;
            events.remove(*seq)?;
            if i + 1 == half {
                haptic_journal::crash_point!("migrations::after_test_v5_half_rewritten");
            }
        }
    }
    txn.delete_table(v4::tables::EVENTS)?;
    Ok(())
}
