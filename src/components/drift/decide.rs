//! The drift monitor's decision (pure: no I/O, no clock; `now` is passed in as a
//! `std::time::Instant`, which the shell reads from tokio's clock).

use std::time::{Duration, Instant};

/// The monitor's state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DriftState {
    /// Drift interval. Default 60 s.
    pub interval: Duration,
    /// When the timer fires; `None` when stopped (not leader).
    pub next_fire: Option<Instant>,
    /// Last successful deployment (or leadership start).
    pub last_success: Option<Instant>,
    /// Triggers published (correlation ids).
    pub fired: u64,
}

impl DriftState {
    /// A stopped monitor.
    #[must_use]
    pub fn new(interval: Duration) -> Self {
        DriftState {
            interval,
            next_fire: None,
            last_success: None,
            fired: 0,
        }
    }

    /// Stalled: running and its timer is late by more than half an interval (it has not fired
    /// for 1.5x the interval while it should have).
    #[must_use]
    pub fn stalled(&self, now: Instant) -> bool {
        self.next_fire.is_some_and(|t| now > t + self.interval / 2)
    }
}

/// Facts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input {
    /// Live `BecameLeader`.
    BecameLeader,
    /// Live `LostLeadership`.
    LostLeadership,
    /// `DeploymentCompleted` with this many successes.
    Completed {
        /// Endpoints that succeeded.
        succeeded: u32,
    },
    /// The timer fired.
    Tick,
}

/// What the shell does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Publish `DriftPreventionTriggered`.
    Trigger {
        /// Time since the last successful deployment.
        since: Duration,
    },
}

/// Applies one input.
pub fn decide(state: &mut DriftState, input: Input, now: Instant) -> Vec<Effect> {
    match input {
        Input::BecameLeader => {
            state.last_success = Some(now);
            state.next_fire = Some(now + state.interval);
            Vec::new()
        }
        Input::LostLeadership => {
            state.next_fire = None;
            Vec::new()
        }
        Input::Completed { succeeded } => {
            if succeeded > 0 && state.next_fire.is_some() {
                state.last_success = Some(now);
                state.next_fire = Some(now + state.interval);
            }
            Vec::new()
        }
        Input::Tick => match state.next_fire {
            Some(t) if t <= now => {
                state.next_fire = Some(now + state.interval);
                state.fired += 1;
                let since = now.duration_since(state.last_success.unwrap_or(now));
                vec![Effect::Trigger { since }]
            }
            _ => Vec::new(),
        },
    }
}
