//! The validator's decision (pure: no I/O, no clock): which verdict events a `haproxy -c`
//! result becomes, and the last render that passed (its checkpoint, DESIGN.md J11).

use haptic_journal::{Checksum, ComponentState, Event, ValidatorCheckpoint};

use crate::validate::verdict_events;

/// The validator's decision state (DESIGN.md J11): the last render that passed the gate.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ValidatorState {
    /// The last render that passed (the fleet's render while the gate is pinned).
    pub last_passed: Option<Checksum>,
}

impl ValidatorState {
    /// The state a checkpoint holds (or a fresh one).
    #[must_use]
    pub fn restored(checkpoint: Option<ComponentState>) -> Self {
        match checkpoint {
            Some(ComponentState::Validator(c)) => ValidatorState {
                last_passed: c.last_passed,
            },
            _ => ValidatorState::default(),
        }
    }

    /// The state as a checkpoint.
    #[must_use]
    pub fn checkpoint(&self) -> ComponentState {
        ComponentState::Validator(ValidatorCheckpoint {
            last_passed: self.last_passed,
        })
    }
}

/// A fact the validator folds.
#[derive(Clone, Debug)]
pub enum Input {
    /// `render.gate.completed` with verdict pass (its own or another replica's).
    GatePassed(Checksum),
    /// `haproxy -c` gave `validation` for the `template.rendered` of `render`.
    Validated {
        /// The `template.rendered` event's correlation.
        correlation: haptic_journal::Correlation,
        /// The render.
        render: Checksum,
        /// Its trigger reason.
        trigger: String,
        /// The verdict.
        validation: crate::validate::Validation,
    },
}

/// Applies one input; returns the verdict events to journal (with the state, in one batch).
pub fn decide(state: &mut ValidatorState, input: Input) -> Vec<Event> {
    match input {
        Input::GatePassed(render) => {
            state.last_passed = Some(render);
            Vec::new()
        }
        Input::Validated {
            correlation,
            render,
            trigger,
            validation,
        } => {
            let events = verdict_events(
                &correlation,
                render,
                &validation,
                &trigger,
                state.last_passed,
            );
            if validation.outcome.passed() {
                state.last_passed = Some(render);
            }
            events
        }
    }
}
