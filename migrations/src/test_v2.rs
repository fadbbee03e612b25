//! A test-only schema 2 and its `v1_to_v2` step (feature `test-v2`): proves the machinery
//! (J8) before any real schema change exists. Never part of [`crate::STEPS`].
//!
//! Schema 2 moves every event out of `events` into a new table `events_v2`
//! (`u64 Seq -> bincode(V2Event)`, the v1 envelope header fields plus the v1 event), then
//! deletes `events`. Half-way through, the crash point
//! `migrations::after_test_v2_half_rewritten` may abort the process: the step's one transaction
//! is then never committed and the file stays at schema 1, intact.

use haptic_journal::redb::{self, ReadableTable};
use serde::{Deserialize, Serialize};

use crate::{Step, StepError, v1};

/// The v1 -> v2 test step.
pub const V1_TO_V2: Step = Step {
    from: 1,
    to: 2,
    name: "test_v1_to_v2",
    summary: "test only: move events into events_v2 (header fields + v1 event), drop events",
    run: v1_to_v2,
};

/// The test chain: schema 1 baseline, then [`V1_TO_V2`].
pub const STEPS: &[Step] = &[V1_TO_V2];

/// The crash point inside [`V1_TO_V2`] (listed in `haptic_journal::failpoints::ALL`).
pub const CRASH_POINT: &str = "migrations::after_test_v2_half_rewritten";

/// `events_v2`: `u64 Seq -> bincode(V2Event)`.
pub const EVENTS_V2: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("events_v2");

/// A schema-2 event record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct V2Event {
    /// Record kind (dotted).
    pub kind: String,
    /// Accepted-at, unix ms.
    pub accepted_at: u64,
    /// Term.
    pub term: u64,
    /// The event, in the frozen v1 shape.
    pub event: v1::Event,
}

fn v1_to_v2(txn: &redb::WriteTransaction) -> Result<(), StepError> {
    let undecodable = |key: u64| StepError::Undecodable {
        table: "events",
        key: key.to_string(),
        version: 1,
    };
    let mut moved = Vec::new();
    {
        let events = txn.open_table(v1::tables::EVENTS)?;
        for r in events.iter()? {
            let (k, v) = r?;
            let raw = haptic_journal::codec::open(v.value()).map_err(|_| undecodable(k.value()))?;
            let event: v1::Event = v1::decode(raw.payload).ok_or_else(|| undecodable(k.value()))?;
            let rec = V2Event {
                kind: raw.kind.to_owned(),
                accepted_at: raw.accepted_at.0,
                term: raw.term.0,
                event,
            };
            let bytes = v1::encode(&rec).map_err(|_| undecodable(k.value()))?;
            moved.push((k.value(), bytes));
        }
    }
    let half = moved.len() / 2;
    {
        let mut out = txn.open_table(EVENTS_V2)?;
        let mut events = txn.open_table(v1::tables::EVENTS)?;
        for (i, (seq, bytes)) in moved.iter().enumerate() {
            out.insert(*seq, bytes.as_slice())?;
            events.remove(*seq)?;
            if i + 1 == half {
                haptic_journal::crash_point!("migrations::after_test_v2_half_rewritten");
            }
        }
    }
    txn.delete_table(v1::tables::EVENTS)?;
    Ok(())
}
