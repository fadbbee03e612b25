//! Startup, liveness and readiness checks behind `/startupz`, `/healthz` and `/readyz`.
//!
//! The three answer different questions, as the kubelet asks them: startup "is the process up
//! and its journal open?" (the StatefulSet's startupProbe: failing past its budget restarts the
//! pod, so it must not depend on anything outside the pod: CRDs, RBAC or a Secret missing would
//! turn a recoverable wait into a CrashLoopBackOff, issue 27); liveness "is it stuck?"; readiness
//! "should it count as serving?" (every operator-facing reason: journal replaying, CRDs missing,
//! caches not synced).
//!
//! The runtime adds one named check per component ([`HealthRegistry::add_liveness`]: stall
//! checks such as `core::health::Health::stalled`, `DriftHandle::stalled`, the journal's
//! [`journal_writable_check`]; [`HealthRegistry::add_readiness`]: journal open and replayed,
//! journal writable ([`journal_fault_check`]), caches synced). A journal storage fault fails
//! readiness only: liveness stays 200 so Kubernetes does not restart the pod into the same
//! full or read-only volume. A check is a cheap synchronous function; the server runs them on a blocking
//! thread.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use haptic_journal::{Journal, UnixMillis};

/// Env var naming components to report stalled from start (`HAPTIC_TEST_STALL=deployer` or a
/// comma-separated list); honoured only with the crate feature `failpoints`.
pub const TEST_STALL_ENV: &str = "HAPTIC_TEST_STALL";

/// One check: `Ok(())` healthy, `Err(reason)` failing with a short lower-case reason (shown on
/// the probe's 503 body; never secret material).
pub type HealthCheck = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// Named liveness and readiness checks. Cheap to clone (an `Arc` inside); clones share the
/// checks.
#[derive(Clone)]
pub struct HealthRegistry {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Startup checks keyed by name (`/startupz` runs them with the liveness checks).
    startup: Mutex<BTreeMap<&'static str, HealthCheck>>,
    /// Liveness checks keyed by name (sorted, so reports are stable).
    liveness: Mutex<BTreeMap<&'static str, HealthCheck>>,
    /// Readiness checks keyed by name.
    readiness: Mutex<BTreeMap<&'static str, HealthCheck>>,
    /// Components marked stalled by the test hook (feature `failpoints`); sorted names.
    #[cfg(feature = "failpoints")]
    blocked: Mutex<std::collections::BTreeSet<String>>,
}

impl std::fmt::Debug for HealthRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HealthRegistry")
            .field(
                "liveness",
                &lock(&self.inner.liveness).keys().collect::<Vec<_>>(),
            )
            .field(
                "readiness",
                &lock(&self.inner.readiness).keys().collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Default for HealthRegistry {
    fn default() -> Self {
        HealthRegistry::new()
    }
}

/// The result of running one set of checks: the failing ones, sorted by name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HealthReport {
    /// `(check name, reason)` of every failing check, sorted by name.
    pub failures: Vec<(String, String)>,
}

impl HealthReport {
    /// Whether every check passed.
    #[must_use]
    pub fn is_healthy(&self) -> bool {
        self.failures.is_empty()
    }

    /// The probe body: `ok`, or one `<name>: <reason>` line per failing check.
    #[must_use]
    pub fn body(&self) -> String {
        if self.failures.is_empty() {
            return "ok\n".to_owned();
        }
        let mut out = String::new();
        for (name, reason) in &self.failures {
            out.push_str(name);
            out.push_str(": ");
            // One line per check: a reason's own line breaks would read as another check.
            out.push_str(&reason.replace(['\n', '\r'], " "));
            out.push('\n');
        }
        out
    }
}

impl HealthRegistry {
    /// An empty registry. With the feature `failpoints`, components named in the env var
    /// [`TEST_STALL_ENV`] start blocked (`HealthRegistry::block_for_test`); without it the
    /// variable is ignored (a warning is logged if it is set).
    #[must_use]
    pub fn new() -> Self {
        let registry = HealthRegistry {
            inner: Arc::new(Inner::default()),
        };
        if let Ok(value) = std::env::var(TEST_STALL_ENV) {
            registry.arm_from_env(&value);
        }
        registry
    }

    #[cfg(feature = "failpoints")]
    fn arm_from_env(&self, value: &str) {
        for name in parse_stall_list(value) {
            tracing::warn!(component = %name, "component blocked by test hook");
            self.block_for_test(&name);
        }
    }

    #[cfg(not(feature = "failpoints"))]
    #[allow(clippy::unused_self)]
    fn arm_from_env(&self, value: &str) {
        if !parse_stall_list(value).is_empty() {
            tracing::warn!(
                env = TEST_STALL_ENV,
                "test stall hook ignored (built without the failpoints feature)"
            );
        }
    }

    /// Adds (or replaces, by `name`) a startup check: failing means the process has not
    /// finished starting (the journal is still opening). Only what the pod itself decides
    /// belongs here: the startupProbe restarts the pod when it fails past its budget.
    pub fn add_startup(
        &self,
        name: &'static str,
        check: impl Fn() -> Result<(), String> + Send + Sync + 'static,
    ) {
        lock(&self.inner.startup).insert(name, Arc::new(check));
    }

    /// Adds (or replaces, by `name`) a liveness check: failing means the process should be
    /// restarted (a stalled component, an unwritable journal).
    pub fn add_liveness(
        &self,
        name: &'static str,
        check: impl Fn() -> Result<(), String> + Send + Sync + 'static,
    ) {
        lock(&self.inner.liveness).insert(name, Arc::new(check));
    }

    /// Adds (or replaces, by `name`) a readiness check: failing means do not send traffic yet
    /// (journal not replayed, caches not synced).
    pub fn add_readiness(
        &self,
        name: &'static str,
        check: impl Fn() -> Result<(), String> + Send + Sync + 'static,
    ) {
        lock(&self.inner.readiness).insert(name, Arc::new(check));
    }

    /// Removes the liveness check `name` (a leader-only component that stopped); returns
    /// whether one was there.
    pub fn remove_liveness(&self, name: &str) -> bool {
        lock(&self.inner.liveness).remove(name).is_some()
    }

    /// Removes the readiness check `name`; returns whether one was there.
    pub fn remove_readiness(&self, name: &str) -> bool {
        lock(&self.inner.readiness).remove(name).is_some()
    }

    /// Runs every liveness check (and, with `failpoints`, reports blocked components, also
    /// those with no check). No checks: healthy.
    ///
    /// Blocking: runs the checks on the calling thread.
    #[must_use]
    pub fn liveness(&self) -> HealthReport {
        #[allow(unused_mut)]
        let mut report = run(&self.inner.liveness);
        #[cfg(feature = "failpoints")]
        {
            for name in lock(&self.inner.blocked).iter() {
                report.failures.retain(|(n, _)| n != name);
                report
                    .failures
                    .push((name.clone(), "stalled (blocked by test hook)".to_owned()));
            }
            report.failures.sort();
        }
        report
    }

    /// Runs every startup check and every liveness check (a stalled component fails startup
    /// too). No checks: started.
    ///
    /// Blocking: runs the checks on the calling thread.
    #[must_use]
    pub fn startup(&self) -> HealthReport {
        let mut report = run(&self.inner.startup);
        report.failures.extend(self.liveness().failures);
        report.failures.sort();
        report
    }

    /// Runs every readiness check. No checks registered: not ready (`readiness: no checks
    /// registered`), so a server started before the runtime wired its checks does not report
    /// a replica ready too early.
    ///
    /// Blocking: runs the checks on the calling thread.
    #[must_use]
    pub fn readiness(&self) -> HealthReport {
        if lock(&self.inner.readiness).is_empty() {
            return HealthReport {
                failures: vec![("readiness".to_owned(), "no checks registered".to_owned())],
            };
        }
        run(&self.inner.readiness)
    }

    /// Test hook: reports `component` stalled on `/healthz` until
    /// [`HealthRegistry::unblock_for_test`]. Only with the crate feature `failpoints`.
    #[cfg(feature = "failpoints")]
    pub fn block_for_test(&self, component: &str) {
        lock(&self.inner.blocked).insert(component.to_owned());
    }

    /// Test hook: undoes `HealthRegistry::block_for_test`. Only with `failpoints`.
    #[cfg(feature = "failpoints")]
    pub fn unblock_for_test(&self, component: &str) {
        lock(&self.inner.blocked).remove(component);
    }
}

fn run(checks: &Mutex<BTreeMap<&'static str, HealthCheck>>) -> HealthReport {
    // Clone the checks out: a check must not run under the lock (it may take its own locks or
    // read the journal, and a slow one would block registrations).
    let checks: Vec<(&'static str, HealthCheck)> =
        lock(checks).iter().map(|(n, c)| (*n, c.clone())).collect();
    let failures = checks
        .into_iter()
        .filter_map(|(name, check)| check().err().map(|reason| (name.to_owned(), reason)))
        .collect();
    HealthReport { failures }
}

/// The component names in a [`TEST_STALL_ENV`] value: comma-separated, trimmed, empty ones
/// dropped.
fn parse_stall_list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// A poisoned lock only means a check registration panicked; the map is still valid.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The journal's liveness check: fails only when the journal was opened read-only (a wiring
/// error a restart fixes). It never fails for a storage fault (a full or read-only volume, a
/// removed file): a restart would meet the same volume, so the process stays up and
/// [`journal_fault_check`] takes the replica out of readiness instead. No I/O, never writes.
pub fn journal_writable_check(
    journal: Arc<Journal>,
) -> impl Fn() -> Result<(), String> + Send + Sync + 'static {
    move || {
        if journal.is_read_only() {
            Err("journal is open read-only".to_owned())
        } else {
            Ok(())
        }
    }
}

/// The journal's readiness check for storage faults: fails while the journal reports one
/// (`Journal::storage_fault`), naming the file, the OS error and the fix
/// ([`crate::dispatch::fault::describe`]). No I/O, never writes.
pub fn journal_fault_check(
    journal: Arc<Journal>,
) -> impl Fn() -> Result<(), String> + Send + Sync + 'static {
    move || match journal.storage_fault() {
        Some(fault) => Err(crate::dispatch::fault::describe(journal.path(), &fault)),
        None => Ok(()),
    }
}

/// Wraps a stall check so that it passes while the journal is not writable and for
/// [`crate::core::health::STALL_AFTER`] after it took commits again: a component waiting for the
/// journal is not stalled, and a restart would not help (`last_fault_ms` is the last time, in
/// Unix milliseconds, the journal watch saw a storage fault; 0 = never).
pub fn excused_while_journal_faulted(
    check: impl Fn() -> Result<(), String> + Send + Sync + 'static,
    last_fault_ms: Arc<AtomicU64>,
) -> impl Fn() -> Result<(), String> + Send + Sync + 'static {
    move || {
        let last = last_fault_ms.load(Ordering::Relaxed);
        let window = crate::core::health::STALL_AFTER.as_millis() as u64;
        if last != 0 && UnixMillis::now().0.saturating_sub(last) < window {
            return Ok(());
        }
        check()
    }
}

/// A liveness check over a component's [`crate::core::health::Health`] (scheduler:
/// `SchedulerHandle::health`): fails while one handler has been running longer than
/// [`crate::core::health::STALL_AFTER`].
pub fn component_stall_check(
    health: Arc<crate::core::health::Health>,
) -> impl Fn() -> Result<(), String> + Send + Sync + 'static {
    handler_stall_check(move |now_ms| health.stalled(now_ms))
}

/// A liveness check over a handler stall (same rule and text as [`component_stall_check`])
/// that `stalled(now_ms)` (unix ms) tells, e.g. the deployer's `health.stalled`.
pub fn handler_stall_check(
    stalled: impl Fn(u64) -> bool + Send + Sync + 'static,
) -> impl Fn() -> Result<(), String> + Send + Sync + 'static {
    move || stall_verdict(stalled(UnixMillis::now().0), handler_stall_reason())
}

/// A liveness check over a timer (`timer`, e.g. `drift timer`): fails while
/// `late(now_ms)` (unix ms) says it is running and late by more than half an interval
/// (`DriftHandle::stalled`).
pub fn timer_stall_check(
    timer: &'static str,
    late: impl Fn(u64) -> bool + Send + Sync + 'static,
) -> impl Fn() -> Result<(), String> + Send + Sync + 'static {
    move || {
        stall_verdict(
            late(UnixMillis::now().0),
            format!("{timer} late by more than half an interval"),
        )
    }
}

fn handler_stall_reason() -> String {
    format!(
        "handler running longer than {} s",
        crate::core::health::STALL_AFTER.as_secs()
    )
}

fn stall_verdict(stalled: bool, reason: String) -> Result<(), String> {
    if stalled { Err(reason) } else { Ok(()) }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn failures_are_sorted_named_and_one_line_each() {
        let h = HealthRegistry {
            inner: Arc::new(Inner::default()),
        };
        assert!(h.liveness().is_healthy());
        h.add_liveness("zeta", || Err("slow\nreally".to_owned()));
        h.add_liveness("alpha", || Err("stalled".to_owned()));
        h.add_liveness("ok", || Ok(()));
        let r = h.liveness();
        assert_eq!(r.body(), "alpha: stalled\nzeta: slow really\n");
        h.add_liveness("zeta", || Ok(()));
        assert!(h.remove_liveness("alpha"));
        assert_eq!(h.liveness().body(), "ok\n");
    }

    #[test]
    fn readiness_needs_a_check() {
        let h = HealthRegistry {
            inner: Arc::new(Inner::default()),
        };
        assert!(!h.readiness().is_healthy());
        h.add_readiness("journal", || Ok(()));
        assert!(h.readiness().is_healthy());
    }

    #[test]
    fn startup_runs_its_own_checks_and_liveness_never_readiness() {
        let h = HealthRegistry {
            inner: Arc::new(Inner::default()),
        };
        assert!(h.startup().is_healthy(), "no checks: started");
        h.add_readiness("crds", || Err("haproxycfgs missing".to_owned()));
        h.add_startup("journal", || Err("journal opening".to_owned()));
        h.add_liveness("deployer", || Err("stalled".to_owned()));
        assert_eq!(
            h.startup().body(),
            "deployer: stalled\njournal: journal opening\n"
        );
        h.add_startup("journal", || Ok(()));
        h.add_liveness("deployer", || Ok(()));
        assert!(
            h.startup().is_healthy(),
            "readiness reasons never fail startup"
        );
        assert!(!h.readiness().is_healthy());
    }

    #[cfg(feature = "failpoints")]
    #[test]
    fn env_hook_blocks_named_components_even_without_a_check() {
        let h = HealthRegistry {
            inner: Arc::new(Inner::default()),
        };
        h.add_liveness("deployer", || Ok(()));
        h.arm_from_env("deployer,drift-monitor");
        assert_eq!(
            h.liveness().body(),
            "deployer: stalled (blocked by test hook)\n\
             drift-monitor: stalled (blocked by test hook)\n"
        );
        h.unblock_for_test("deployer");
        h.unblock_for_test("drift-monitor");
        assert!(h.liveness().is_healthy());
    }

    #[test]
    fn component_stall_check_follows_the_handler() {
        let health = Arc::new(crate::core::health::Health::default());
        let check = component_stall_check(health.clone());
        assert!(check().is_ok());
        health.begin(UnixMillis::now().0);
        assert!(
            check().is_ok(),
            "a handler that just started is not stalled"
        );
        let long_ago =
            UnixMillis::now().0 - crate::core::health::STALL_AFTER.as_millis() as u64 - 1000;
        health.begin(long_ago);
        assert_eq!(check(), Err("handler running longer than 120 s".to_owned()));
        health.end();
        assert!(check().is_ok());
    }

    #[test]
    fn stall_list_parsing() {
        assert_eq!(
            parse_stall_list(" deployer, ,publisher "),
            ["deployer", "publisher"]
        );
        assert!(parse_stall_list("").is_empty());
    }

    #[test]
    fn journal_check_is_read_only_and_healthy_on_a_fresh_journal() {
        let dir = tempfile::tempdir().unwrap();
        let j = Arc::new(
            Journal::open(&haptic_journal::JournalOptions::new(
                dir.path().join("j.redb"),
            ))
            .unwrap(),
        );
        let check = journal_writable_check(j.clone());
        let before = j.commit_stats();
        for _ in 0..3 {
            check().unwrap();
        }
        assert_eq!(j.commit_stats(), before, "a probe must not write");
    }
}
