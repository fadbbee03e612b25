//! A test-only schema 3 and its `v2_to_v3` step (feature `test-v3`): proves the machinery (J8)
//! on a step after the real chain, with a crash in its middle. Never part of [`crate::STEPS`].
//!
//! Schema 3 moves every event out of `events` into a new table `events_v3`
//! (`u64 Seq -> bincode(V3Event)`, the envelope header fields plus the frozen v2 event), then
//! deletes `events`. Half-way through, the crash point
//! `migrations::after_test_v3_half_rewritten` may abort the process: the step's one transaction
//! is then never committed and the file stays at schema 2, intact (with any earlier step of the
//! same run, such as the real `v1_to_v2`, committed).

use haptic_journal::redb::{self, ReadableTable};
use serde::{Deserialize, Serialize};

use crate::{Step, StepError, v2};

/// The v2 -> v3 test step.
pub const V2_TO_V3: Step = Step {
    from: 2,
    to: 3,
    name: "test_v2_to_v3",
    summary: "test only: move events into events_v3 (header fields + v2 event), drop events",
    run: v2_to_v3,
};

/// The test chain: the production [`crate::STEPS`] (`v1_to_v2`), then [`V2_TO_V3`].
pub const STEPS: &[Step] = &[crate::V1_TO_V2, V2_TO_V3];

/// The crash point inside [`V2_TO_V3`] (listed in `haptic_journal::failpoints::ALL`).
pub const CRASH_POINT: &str = "migrations::after_test_v3_half_rewritten";

/// `events_v3`: `u64 Seq -> bincode(V3Event)`.
pub const EVENTS_V3: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("events_v3");

/// A schema-3 event record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct V3Event {
    /// Record kind (dotted).
    pub kind: String,
    /// Accepted-at, unix ms.
    pub accepted_at: u64,
    /// Term.
    pub term: u64,
    /// The event, in the frozen v2 shape.
    pub event: v2::Event,
}

fn v2_to_v3(txn: &redb::WriteTransaction) -> Result<(), StepError> {
    let undecodable = |key: u64| StepError::Undecodable {
        table: "events",
        key: key.to_string(),
        version: 2,
    };
    let mut moved = Vec::new();
    {
        let events = txn.open_table(v2::tables::EVENTS)?;
        for r in events.iter()? {
            let (k, v) = r?;
            let raw = haptic_journal::codec::open(v.value()).map_err(|_| undecodable(k.value()))?;
            let event: v2::Event = v2::decode(raw.payload).ok_or_else(|| undecodable(k.value()))?;
            let rec = V3Event {
                kind: raw.kind.to_owned(),
                accepted_at: raw.accepted_at.0,
                term: raw.term.0,
                event,
            };
            let bytes = v2::encode(&rec).map_err(|_| undecodable(k.value()))?;
            moved.push((k.value(), bytes));
        }
    }
    let half = moved.len() / 2;
    {
        let mut out = txn.open_table(EVENTS_V3)?;
        let mut events = txn.open_table(v2::tables::EVENTS)?;
        for (i, (seq, bytes)) in moved.iter().enumerate() {
            out.insert(*seq, bytes.as_slice())?;
            events.remove(*seq)?;
            if i + 1 == half {
                haptic_journal::crash_point!("migrations::after_test_v3_half_rewritten");
            }
        }
    }
    txn.delete_table(v2::tables::EVENTS)?;
    Ok(())
}
