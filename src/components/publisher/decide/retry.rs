//! The retry rule of every worker and the throttle: what a failed attempt leads to, by error
//! class ([`crate::core::error`]). Work is never acked unfinished (DESIGN.md J3, J11): a
//! transient failure backs off to a cap and goes on, forever; only a permanent rejection ends an
//! item; fencing stops the term.

use std::time::{Duration, Instant};

use crate::core::error::ErrorClass;

/// Retry policy of every worker: exponential backoff from `initial`, capped at `max_delay`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// First delay (`--publish-retry-initial`). Default: 200 ms.
    pub initial: Duration,
    /// Upper bound of one delay (`--publish-retry-max`); a server's `Retry-After` is honoured
    /// up to it. Default: 30 s.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            initial: Duration::from_millis(200),
            max_delay: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// The delay after failed attempt number `attempt` (1-based): `initial` doubling per
    /// attempt, at most `max_delay`, and at least a server's `retry_after` (itself capped).
    #[must_use]
    pub fn delay(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        let exp = attempt.saturating_sub(1).min(20);
        let delay = self.initial.saturating_mul(1u32 << exp).min(self.max_delay);
        retry_after.map_or(delay, |r| r.min(self.max_delay).max(delay))
    }
}

/// What to do after a failed attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retry {
    /// Try again after this delay (the item stays queued).
    After(Duration),
    /// A permanent rejection: record and show it, then ack the item.
    Reject,
    /// This term may not write any more (fenced): stop its workers at once; nothing is acked,
    /// the item stays queued for the next term.
    StopTerm,
}

/// The decision after failed attempt number `attempt` (1-based) of class `class`.
#[must_use]
pub fn on_failure(
    policy: &RetryPolicy,
    class: ErrorClass,
    attempt: u32,
    retry_after: Option<Duration>,
) -> Retry {
    if class == ErrorClass::Fenced {
        return Retry::StopTerm;
    }
    if class.is_permanent() {
        return Retry::Reject;
    }
    Retry::After(policy.delay(attempt, retry_after))
}

/// Leading-edge refractory throttle: `None` = go now; `Some(wait)` = the interval since the
/// last write has not passed. `interval` zero disables it.
#[must_use]
pub fn throttle_wait(interval: Duration, last: Option<Instant>, now: Instant) -> Option<Duration> {
    let last = last?;
    if interval.is_zero() {
        return None;
    }
    let end = last + interval;
    (end > now).then(|| end - now)
}
