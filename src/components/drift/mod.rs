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
//! what differed (`DriftDetected` log, metric and the [`crate::core::guard::NoticeHook`]
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
//! [`DriftHandle::triggers`] (`haptic_drift_triggers_total`, the monitor's own family:
//! `metrics.rs`); stall check [`DriftHandle::stalled`] (timer late by 1.5x interval).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use haptic_journal::{Correlation, Event, EventKind, UnixMillis};
use tokio_util::sync::CancellationToken;

use crate::dispatch::{DispatchError, DispatchHandle, SubscribeOptions, Subscription};

pub mod decide;
mod metrics;
#[cfg(test)]
mod tests;

pub use decide::{DriftState, Effect, Input, decide};

/// Component identifier (logs, metrics, health).
pub const COMPONENT: &str = "drift-monitor";

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
            () = async { match next { Some(t) => tokio::time::sleep_until(t.into()).await, None => std::future::pending().await } } => Input::Tick,
        };
        // The decision takes std instants; tokio's clock (paused in tests) is converted.
        let now = tokio::time::Instant::now().into_std();
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
            let now = tokio::time::Instant::now().into_std();
            UnixMillis::now().0 + t.saturating_duration_since(now).as_millis() as u64
        });
        handle.due_ms.store(due, Ordering::Relaxed);
    }
}
