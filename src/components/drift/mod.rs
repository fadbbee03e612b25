//! `drift-monitor`: publishes `DriftPreventionTriggered` when no deployment succeeded for
//! `drift_prevention_interval`; each successful deployment resets the timer (the seed's
//! wording). Runs only while this replica leads: stops on `LostLeadership`, restarts on
//! `BecameLeader` (upstream's closed-channel quirk after LostLeadership is not reproduced).
//!
//! ```text
//!  BecameLeader ─► arm(now + interval)        DeploymentCompleted{succeeded > 0} ─► re-arm
//!  timer fires  ─► DriftPreventionTriggered (journaled) ─► re-arm   LostLeadership ─► disarm
//! ```
//!
//! The scheduler turns the trigger into a drift check of every endpoint; the deployer reports
//! what differed (`DriftDetected` log, metric and the [`crate::core::guard::DriftHook`]
//! the runtime wires to a Kubernetes Event).
//!
//! # Inputs
//! [`Input`]: live `BecameLeader` / `LostLeadership`, `DeploymentCompleted`, timer ticks.
//!
//! # Effects
//! [`Effect`]: publish the trigger, arm or disarm the timer.
//!
//! # Journal records
//! Event `drift.prevention.triggered`.
//!
//! # Failpoints
//! None.
//!
//! # Metrics
//! [`DriftHandle::triggers`]; stall check [`DriftHandle::stalled`] (timer late by 1.5x interval).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use haptic_journal::{Correlation, Event, EventKind, UnixMillis};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::dispatch::{DispatchError, DispatchHandle, SubscribeOptions, Subscription};

#[cfg(test)]
mod tests;

/// Component identifier (logs, metrics, health).
pub const COMPONENT: &str = "drift-monitor";

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

/// Subscription the monitor needs.
#[must_use]
pub fn subscribe_options() -> SubscribeOptions {
    SubscribeOptions::new(COMPONENT).kinds(&[
        EventKind::DeploymentCompleted,
        EventKind::BecameLeader,
        EventKind::LostLeadership,
    ])
}

/// Observing a running monitor.
#[derive(Clone, Debug, Default)]
pub struct DriftHandle {
    /// Triggers published.
    pub triggers: Arc<AtomicU64>,
    /// Unix ms the timer is due; 0 when stopped.
    due_ms: Arc<AtomicU64>,
    /// Interval in ms.
    interval_ms: Arc<AtomicU64>,
}

impl DriftHandle {
    /// Health: stalled when running and late by half an interval at `now_ms` (unix ms).
    #[must_use]
    pub fn stalled(&self, now_ms: u64) -> bool {
        let due = self.due_ms.load(Ordering::Relaxed);
        due != 0 && now_ms > due + self.interval_ms.load(Ordering::Relaxed) / 2
    }
}

/// Runs the monitor until `cancel`.
///
/// # Errors
/// [`DispatchError`] when journaling a trigger fails.
///
/// # Cancel safety
/// Cancel through `cancel`; a trigger being journaled completes (blocking task).
pub async fn run(
    interval: Duration,
    dispatch: DispatchHandle,
    mut sub: Subscription,
    handle: DriftHandle,
    cancel: CancellationToken,
) -> Result<(), DispatchError> {
    let mut state = DriftState::new(interval);
    handle
        .interval_ms
        .store(interval.as_millis() as u64, Ordering::Relaxed);
    loop {
        let next = state.next_fire;
        let input = tokio::select! {
            () = cancel.cancelled() => return Ok(()),
            d = sub.recv() => {
                let Some(d) = d else { return Ok(()) };
                match &*d.event {
                    Event::BecameLeader { .. } if !d.replayed => Input::BecameLeader,
                    Event::LostLeadership { .. } if !d.replayed => Input::LostLeadership,
                    Event::DeploymentCompleted { succeeded, .. } => Input::Completed { succeeded: *succeeded },
                    _ => continue,
                }
            }
            () = async { match next { Some(t) => tokio::time::sleep_until(t).await, None => std::future::pending().await } } => Input::Tick,
        };
        let now = Instant::now();
        for effect in decide(&mut state, input, now) {
            let Effect::Trigger { since } = effect;
            handle.triggers.fetch_add(1, Ordering::Relaxed);
            tracing::info!(
                since_ms = since.as_millis() as u64,
                "drift prevention triggered"
            );
            dispatch
                .publish(Event::DriftPreventionTriggered {
                    correlation: Correlation::new(format!(
                        "drift-{}-{}",
                        UnixMillis::now().0,
                        state.fired
                    )),
                    time_since_last_deployment_ms: since.as_millis() as u64,
                })
                .await?;
        }
        let due = state.next_fire.map_or(0, |t| {
            UnixMillis::now().0 + t.saturating_duration_since(Instant::now()).as_millis() as u64
        });
        handle.due_ms.store(due, Ordering::Relaxed);
    }
}
