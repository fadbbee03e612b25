//! The one bounded wait of the kit: [`eventually`].
//!
//! ```text
//!  loop: probe f() ──Ok(v) / Some(v) / true──► return v
//!            │
//!            └─Err(seen) / None / false: remember `seen`; past `bound`? ──► panic:
//!                  what was awaited, the bound, the last `seen`, each attached log's tail
//!              else sleep (the probe's own time, 50..300 ms) and probe again
//! ```
//!
//! A probe says what it saw when it is not yet satisfied (`Err(String)`), so a timeout names the
//! state the test got stuck in rather than just "timed out". Bounds are the caller's: derive them
//! from the intervals the peers and the controller were configured with (see
//! [`crate::controller::Intervals`]), not round numbers.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Lines of each attached log printed when a wait fails.
pub const LOG_TAIL_LINES: usize = 40;

/// What a probe of [`eventually`] returns: done with a value, or not yet with a description of
/// what it saw.
///
/// Implemented for `Result<T, String>` (`Err` describes the state seen), `Option<T>` (`None`
/// is described as "nothing yet") and `bool` (`false`: "the condition is false").
pub trait Probe<T> {
    /// `Ok(value)` when the awaited state holds, else `Err(what was seen)`.
    ///
    /// # Errors
    /// The description of the state seen when the awaited one does not hold yet.
    fn seen(self) -> Result<T, String>;
}

impl<T> Probe<T> for Result<T, String> {
    fn seen(self) -> Result<T, String> {
        self
    }
}

impl<T> Probe<T> for Option<T> {
    fn seen(self) -> Result<T, String> {
        self.ok_or_else(|| "nothing yet (the probe returned None)".to_owned())
    }
}

impl Probe<()> for bool {
    fn seen(self) -> Result<(), String> {
        if self {
            Ok(())
        } else {
            Err("the condition is false".to_owned())
        }
    }
}

/// Logs whose tails a failed wait prints (the controllers a test started).
///
/// Shape: log file paths in the order they were attached; cloning shares nothing (the paths are
/// copied).
#[derive(Debug, Clone, Default)]
pub struct Logs(pub Vec<PathBuf>);

impl Logs {
    /// No logs: a failed wait prints the last state seen only.
    #[must_use]
    pub fn none() -> Logs {
        Logs(Vec::new())
    }

    /// The tails of every log, each headed by its path.
    #[must_use]
    pub fn tails(&self, lines: usize) -> String {
        self.0
            .iter()
            .map(|p| {
                format!(
                    "--- last {lines} lines of {} ---\n{}",
                    p.display(),
                    log_tail(p, lines)
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// The last `lines` lines of the file at `path`, joined by newlines (empty when unreadable).
#[must_use]
pub fn log_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read(path).unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let v: Vec<&str> = text.lines().collect();
    v[v.len().saturating_sub(lines)..].join("\n")
}

/// Probes `f` until it is satisfied and returns its value, within `bound` (no logs attached;
/// [`crate::Fleet::eventually`] and [`crate::Controller::eventually`] attach the controllers'
/// logs).
///
/// # Panics
/// When `bound` passes first, with what was awaited, the bound and the last state seen.
///
/// # Cancel safety
/// Cancel safe (it only probes and sleeps).
pub async fn eventually<T, P, F, Fut>(bound: Duration, what: &str, f: F) -> T
where
    P: Probe<T>,
    F: FnMut() -> Fut,
    Fut: Future<Output = P>,
{
    eventually_with(&Logs::none(), bound, what, f).await
}

/// [`eventually`] printing the tails of `logs` when it fails.
///
/// # Panics
/// When `bound` passes first: what was awaited, the bound, the last state seen and the last
/// [`LOG_TAIL_LINES`] lines of each log.
///
/// # Cancel safety
/// Cancel safe (it only probes and sleeps).
pub async fn eventually_with<T, P, F, Fut>(logs: &Logs, bound: Duration, what: &str, mut f: F) -> T
where
    P: Probe<T>,
    F: FnMut() -> Fut,
    Fut: Future<Output = P>,
{
    let started = Instant::now();
    let deadline = started + bound;
    loop {
        let probed = Instant::now();
        let last = match f().await.seen() {
            Ok(v) => return v,
            Err(seen) => seen,
        };
        if Instant::now() >= deadline {
            let mut msg = format!(
                "timed out waiting for {what} (bound {bound:?}, waited {:?})\nlast seen: {last}",
                started.elapsed()
            );
            if !logs.0.is_empty() {
                msg.push('\n');
                msg.push_str(&logs.tails(LOG_TAIL_LINES));
            }
            panic!("{msg}");
        }
        let pause = probed
            .elapsed()
            .clamp(Duration::from_millis(50), Duration::from_millis(300));
        tokio::time::sleep(pause.min(deadline.saturating_duration_since(Instant::now()))).await;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn log_tail_keeps_the_last_lines() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log");
        std::fs::write(&p, "a\nb\nc\n").unwrap();
        assert_eq!(log_tail(&p, 2), "b\nc");
        assert_eq!(log_tail(&p, 10), "a\nb\nc");
        assert!(log_tail(&dir.path().join("absent"), 3).is_empty());
    }

    #[tokio::test]
    async fn eventually_returns_the_value_once_the_probe_holds() {
        let mut n = 0;
        let v = eventually(Duration::from_secs(5), "the third probe", || {
            n += 1;
            std::future::ready(if n >= 3 { Ok(n) } else { Err(format!("n={n}")) })
        })
        .await;
        assert_eq!(v, 3);
    }

    #[tokio::test]
    async fn a_failed_wait_names_what_was_awaited_the_last_state_and_the_log_tail() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("controller.log");
        std::fs::write(&log, "line 1\nline 2: the last one\n").unwrap();
        let logs = Logs(vec![log]);
        let failed = tokio::spawn(async move {
            eventually_with(
                &logs,
                Duration::from_millis(200),
                "pod-0 on render 02",
                || std::future::ready(Err::<(), _>("pod-0 on render 01".to_owned())),
            )
            .await;
        })
        .await
        .unwrap_err();
        let msg = failed.into_panic();
        let msg = msg.downcast_ref::<String>().unwrap();
        assert!(
            msg.contains("timed out waiting for pod-0 on render 02 (bound 200ms"),
            "{msg}"
        );
        assert!(msg.contains("last seen: pod-0 on render 01"), "{msg}");
        assert!(msg.contains("line 2: the last one"), "{msg}");
    }
}
