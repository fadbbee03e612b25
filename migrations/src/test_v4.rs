//! A test-only schema 4 and its `v3_to_v4` step (feature `test-v4`): proves the machinery (J8)
//! on a step after the real chain, with a crash in its middle. Never part of [`crate::STEPS`].
//!
//! Schema 4 moves every event out of `events` into a new table `events_v4`
//! (`u64 Seq -> bincode(V4Event)`, the envelope header fields plus the frozen v3 event), then
//! deletes `events`. Half-way through, the crash point
//! `migrations::after_test_v4_half_rewritten` may abort the process: the step's one transaction
//! is then never committed and the file stays at schema 3, intact (with any earlier step of the
//! same run, such as the real `v1_to_v2` and `v2_to_v3`, committed).

use haptic_journal::redb::{self, ReadableTable};
use serde::{Deserialize, Serialize};

use crate::{Step, StepError, v3};

/// The v3 -> v4 test step.
pub const V3_TO_V4: Step = Step {
    from: 3,
    to: 4,
    name: "test_v3_to_v4",
    summary: "test only: move events into events_v4 (header fields + v3 event), drop events",
    run: v3_to_v4,
};

/// The test chain: the production [`crate::STEPS`] (`v1_to_v2`, `v2_to_v3`), then
/// [`V3_TO_V4`].
pub const STEPS: &[Step] = &[crate::V1_TO_V2, crate::V2_TO_V3, V3_TO_V4];

/// The crash point inside [`V3_TO_V4`] (listed in `haptic_journal::failpoints::ALL`).
pub const CRASH_POINT: &str = "migrations::after_test_v4_half_rewritten";

/// `events_v4`: `u64 Seq -> bincode(V4Event)`.
pub const EVENTS_V4: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("events_v4");

/// A schema-4 event record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct V4Event {
    /// Record kind (dotted).
    pub kind: String,
    /// Accepted-at, unix ms.
    pub accepted_at: u64,
    /// Term.
    pub term: u64,
    /// The event, in the frozen v3 shape.
    pub event: v3::Event,
}

fn v3_to_v4(txn: &redb::WriteTransaction) -> Result<(), StepError> {
    let undecodable = |key: u64| StepError::Undecodable {
        table: "events",
        key: key.to_string(),
        version: 3,
    };
    let mut moved = Vec::new();
    {
        let events = txn.open_table(v3::tables::EVENTS)?;
        for r in events.iter()? {
            let (k, v) = r?;
            let raw = haptic_journal::codec::open(v.value()).map_err(|_| undecodable(k.value()))?;
            let event: v3::Event = v3::decode(raw.payload).ok_or_else(|| undecodable(k.value()))?;
            let rec = V4Event {
                kind: raw.kind.to_owned(),
                accepted_at: raw.accepted_at.0,
                term: raw.term.0,
                event,
            };
            let bytes = v3::encode(&rec).map_err(|_| undecodable(k.value()))?;
            moved.push((k.value(), bytes));
        }
    }
    let half = moved.len() / 2;
    {
        let mut out = txn.open_table(EVENTS_V4)?;
        let mut events = txn.open_table(v3::tables::EVENTS)?;
        for (i, (seq, bytes)) in moved.iter().enumerate() {
            out.insert(*seq, bytes.as_slice())?;
            events.remove(*seq)?;
            if i + 1 == half {
                haptic_journal::crash_point!("migrations::after_test_v4_half_rewritten");
            }
        }
    }
    txn.delete_table(v3::tables::EVENTS)?;
    Ok(())
}
