//! What the steps that change the shape of the scheduler's checkpoint share (`v2_to_v3`,
//! `v3_to_v4`): read `component_state["deployment-scheduler"]` with the old schema's frozen
//! types, write it back in the new shape, in the same envelope; and the checkpoint around the
//! scheduler's state, carried over unchanged ([`upgrade_checkpoint`]).
//!
//! ```text
//!  component_state["deployment-scheduler"]     (no table, no record: nothing to do)
//!      codec::open(envelope)                    fails -> StepError::Undecodable
//!      kind == ComponentCheckpoint::RECORD_KIND else  -> StepError::Undecodable
//!      decode payload as the old schema's type  fails -> StepError::Undecodable
//!      upgrade(old)                             None: not a scheduler checkpoint, left as is
//!      encode the new type, seal with the same kind, accepted_at and term; insert
//! ```
//!
//! Only the `deployment-scheduler` record holds a `SchedulerCheckpoint` (a checkpoint's key is
//! its component), so only it is read. The envelope's CRC and length are recomputed for the new
//! payload; nothing else is written.

use haptic_journal::codec;
use haptic_journal::redb::{self, ReadableTable, TableHandle};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::{StepError, v1};

/// The `component_state` key of the scheduler's checkpoint.
pub(crate) const SCHEDULER: &str = "deployment-scheduler";

/// Rewrites the scheduler's checkpoint: decodes it as `Old` (schema `version`, frozen codec),
/// and, when `upgrade` returns the new shape, writes that in its place with the same envelope
/// kind (`kind`, which the record must have), accepted-at and term.
///
/// # Errors
/// [`StepError::Undecodable`] (table `component_state`, key `deployment-scheduler`, `version`)
/// when the record does not open, has another kind or does not decode as `Old`;
/// [`StepError::Storage`].
pub(crate) fn scheduler_checkpoint<Old, New>(
    txn: &redb::WriteTransaction,
    version: u32,
    kind: &str,
    upgrade: impl FnOnce(Old) -> Option<New>,
) -> Result<(), StepError>
where
    Old: DeserializeOwned,
    New: Serialize,
{
    let table = v1::tables::COMPONENT_STATE;
    // Every journal file has the table (`init_tables`); a file without it has nothing to
    // convert, and opening it here would create it.
    if !txn.list_tables()?.any(|t| t.name() == table.name()) {
        return Ok(());
    }
    let mut states = txn.open_table(table)?;
    let sealed = {
        let Some(value) = states.get(SCHEDULER)? else {
            return Ok(());
        };
        let undecodable = || StepError::Undecodable {
            table: "component_state",
            key: SCHEDULER.to_owned(),
            version,
        };
        let raw = codec::open(value.value()).map_err(|_| undecodable())?;
        if raw.kind != kind {
            return Err(undecodable());
        }
        let old: Old = v1::decode(raw.payload).ok_or_else(undecodable)?;
        let Some(new) = upgrade(old) else {
            return Ok(());
        };
        let payload = v1::encode(&new).map_err(|_| undecodable())?;
        codec::seal(raw.kind, raw.accepted_at, raw.term, &payload)
    };
    states.insert(SCHEDULER, sealed.as_slice())?;
    Ok(())
}

/// `$old`, a frozen `$from::ComponentCheckpoint`, in the shape of `$to::ComponentCheckpoint`:
/// the same `through`, the scheduler's state `$s` (a `$from::SchedulerCheckpoint`) as
/// `$scheduler` makes it (a `$to::SchedulerCheckpoint`), the validator's and the publisher's
/// carried over as they are (their types are the same in both schemas).
macro_rules! upgrade_checkpoint {
    ($old:expr, $from:ident => $to:ident, |$s:ident| $scheduler:expr) => {{
        let old: $from::ComponentCheckpoint = $old;
        $to::ComponentCheckpoint {
            through: old.through,
            state: match old.state {
                $from::ComponentState::Scheduler($s) => $to::ComponentState::Scheduler($scheduler),
                $from::ComponentState::Validator(v) => $to::ComponentState::Validator(v),
                $from::ComponentState::Publisher(p) => $to::ComponentState::Publisher(p),
            },
        }
    }};
}
pub(crate) use upgrade_checkpoint;
