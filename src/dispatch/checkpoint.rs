//! One component's checkpoint bookkeeping (DESIGN.md J11, journal table `component_state`).
//!
//! ```text
//!  start:    restore()  --> the state as of `through` (or none) ; replayed deliveries with
//!                           seq <= through are skipped (`folded`): they are in the state already
//!  each delivery:  saw(seq) -> decide -> note(state)  (changed? -> a checkpoint is carried)
//!                  effects: every journal batch the shell writes takes it along (`attach`)
//!                  none took it? -> `leftover()` is committed alone, before the delivery drops
//! ```
//!
//! The rule this keeps: a delivery is dropped (and so may be marked dispatched) only once the
//! state it produced is durable, in the same commit as the effects it caused. A restart then
//! restores exactly the state an uninterrupted run had: the checkpoint plus the replay of every
//! undispatched event after it.

use haptic_journal::{Batch, ComponentCheckpoint, ComponentState, Journal, ReadError, Seq};

/// Checkpoint bookkeeping of one component; owned by its shell task.
#[derive(Clone, Debug)]
pub struct Checkpoints {
    component: &'static str,
    /// Through which `Seq` the restored checkpoint folded (0: none).
    restored_through: Seq,
    /// The last event folded into the state.
    last_seq: Seq,
    /// The state last handed to the journal (or restored).
    written: Option<ComponentState>,
    /// A checkpoint not yet in a batch.
    carry: Option<ComponentCheckpoint>,
}

impl Checkpoints {
    /// Reads `component`'s checkpoint (a short read transaction: call it from a blocking
    /// context) and returns the bookkeeping plus the restored state, if any.
    ///
    /// # Errors
    /// [`ReadError`] when the record cannot be read (J10: refuse to start).
    pub fn restore(
        journal: &Journal,
        component: &'static str,
    ) -> Result<(Checkpoints, Option<ComponentState>), ReadError> {
        let found = journal.component_checkpoint(component)?;
        let through = found.as_ref().map_or(Seq(0), |c| c.through);
        let state = found.map(|c| c.state);
        Ok((
            Checkpoints {
                component,
                restored_through: through,
                last_seq: through,
                written: state.clone(),
                carry: None,
            },
            state,
        ))
    }

    /// Bookkeeping without a journal (a component started fresh, tests).
    #[must_use]
    pub fn fresh(component: &'static str) -> Checkpoints {
        Checkpoints {
            component,
            restored_through: Seq(0),
            last_seq: Seq(0),
            written: None,
            carry: None,
        }
    }

    /// The component this bookkeeping is for.
    #[must_use]
    pub fn component(&self) -> &'static str {
        self.component
    }

    /// Whether the event at `seq` is already folded into the restored state (a replayed
    /// delivery to skip).
    #[must_use]
    pub fn folded(&self, seq: Seq) -> bool {
        seq <= self.restored_through
    }

    /// Records that the event at `seq` is being folded in now.
    pub fn saw(&mut self, seq: Seq) {
        self.last_seq = self.last_seq.max(seq);
    }

    /// The state after the last input: when it differs from the one last written, a
    /// checkpoint through the last event seen is carried to the next batch.
    pub fn note(&mut self, state: ComponentState) {
        debug_assert_eq!(state.component(), self.component);
        if self.written.as_ref() == Some(&state) {
            return;
        }
        self.carry = Some(ComponentCheckpoint {
            through: self.last_seq,
            state: state.clone(),
        });
        self.written = Some(state);
    }

    /// Like [`Checkpoints::note`], but carries a checkpoint even when the state did not change,
    /// so that `through` moves past the current event: for an input that writes a batch anyway
    /// (the checkpoint rides along for free), a restart then never replays it.
    pub fn touch(&mut self, state: ComponentState) {
        self.written = None;
        self.note(state);
    }

    /// Puts the carried checkpoint, if any, into `batch` (the batch of an effect the same input
    /// caused, so state and effect are durable together).
    pub fn attach(&mut self, batch: &mut Batch) {
        if let Some(c) = self.carry.take() {
            batch.put_component_checkpoint(c);
        }
    }

    /// A batch holding the carried checkpoint when no effect batch took it; commit it before
    /// dropping the delivery.
    #[must_use]
    pub fn leftover(&mut self) -> Option<Batch> {
        let c = self.carry.take()?;
        let mut b = Batch::new();
        b.put_component_checkpoint(c);
        Some(b)
    }
}
