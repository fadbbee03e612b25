//! The scheduler's start-up recovery (DESIGN.md J11): its checkpoint, the journaled pending and
//! in-flight slots and the `endpoint_applied` table, read once before the first input.

use haptic_journal::{ComponentState, Queue, WorkId, WorkItem};

use super::decide::Input;
use crate::dispatch::checkpoint::Checkpoints;

/// What the scheduler restores from the journal at start (DESIGN.md J11): its checkpoint
/// bookkeeping, the [`Input::Recovered`] to feed into [`decide`](super::decide::decide), and the work ids of the
/// journaled slots.
#[derive(Debug)]
pub struct Recovery {
    /// Checkpoint bookkeeping (replayed events it folded are skipped).
    pub checkpoints: Checkpoints,
    /// The recovery input.
    pub input: Input,
    /// Work id of the journaled pending slot.
    pub pending_id: Option<WorkId>,
    /// Work id of the journaled in-flight slot.
    pub inflight_id: Option<WorkId>,
}

/// The item of the slot queue `queue` (its first, the only one) as `of` takes it, with its work
/// id; `None` when the slot is empty or holds another kind.
fn slot<T>(
    journal: &haptic_journal::Journal,
    queue: Queue,
    of: impl FnOnce(WorkItem) -> Option<T>,
) -> Result<Option<(WorkId, T)>, haptic_journal::ReadError> {
    Ok(journal
        .queue(queue)?
        .into_iter()
        .next()
        .and_then(|e| of(e.record.item).map(|t| (e.record.id, t))))
}

/// Reads what the scheduler restores at start: its checkpoint, the pending and in-flight slots
/// and the `endpoint_applied` table. The one start-up recovery path (`haptic run` reaches it
/// through [`SchedulerShell::run`]; the restart-equivalence test calls it directly). Blocking:
/// short read transactions.
///
/// # Errors
/// [`haptic_journal::ReadError`] when the journal cannot be read.
pub fn recover(journal: &haptic_journal::Journal) -> Result<Recovery, haptic_journal::ReadError> {
    let (checkpoints, state) = Checkpoints::restore(journal, super::COMPONENT)?;
    let checkpoint = match state {
        Some(ComponentState::Scheduler(c)) => Some(c),
        _ => None,
    };
    let (pending_id, pending) = slot(journal, Queue::DeployPending, |item| match item {
        WorkItem::DeployPending(r) => Some(r),
        _ => None,
    })?
    .unzip();
    let (inflight_id, inflight) = slot(journal, Queue::DeployInflight, |item| match item {
        WorkItem::DeployInflight(f) => Some(f),
        _ => None,
    })?
    .unzip();
    let applied = journal.endpoints_applied()?;
    if pending.is_some() || inflight.is_some() || checkpoint.is_some() {
        tracing::info!(
            pending = pending.is_some(),
            inflight = inflight.is_some(),
            last_validated = ?checkpoint.as_ref().and_then(|c| c.last_validated.as_ref().map(|(r, _)| *r)),
            endpoints = checkpoint.as_ref().map_or(0, |c| c.endpoints.len()),
            "scheduler recovered its state"
        );
    }
    Ok(Recovery {
        checkpoints,
        input: Input::Recovered {
            checkpoint,
            pending,
            inflight,
            applied,
        },
        pending_id,
        inflight_id,
    })
}
