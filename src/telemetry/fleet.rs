//! The fleet as the metrics see it (issue 16): a fold over journal events, read at scrape time.
//!
//! ```text
//!  haproxy.pods.discovered / haproxy.pod.terminated --> managed pods
//!  render.gate.completed (pass: target = render; fail: pinned, target = pinned_to)
//!  config.applied.to.pod (no error) --> what each pod runs
//!     => haptic_managed_pods, haptic_fleet_pinned, haptic_pods_not_on_spec_checksum
//! ```
//!
//! The target is the newest render that passed the gate: the render `HAProxyCfg.spec.checksum`
//! converges to. A pod counts as not on it until a `config.applied.to.pod` without an error
//! names it with the target (drift checks report every synced pod, no-ops included). Only the
//! leader deploys, so only the leader's `haptic_pods_not_on_spec_checksum` is meaningful: alerts
//! join it with `haptic_leader_election_is_leader`.

use std::collections::{BTreeMap, BTreeSet};

use std::sync::Arc;

use haptic_journal::{Checksum, Event, EventKind, GateVerdict, Journal, PodRef, Seq};

use crate::dispatch::{DispatchHandle, SubscribeOptions, Subscription};
use crate::telemetry::Metrics;

/// The event kinds [`run`] folds.
pub const KINDS: [EventKind; 5] = [
    EventKind::HAProxyPodsDiscovered,
    EventKind::HAProxyPodTerminated,
    EventKind::RenderGateCompleted,
    EventKind::ConfigAppliedToPod,
    EventKind::DeploymentCompleted,
];

/// The subscription of [`run`].
#[must_use]
pub fn subscribe_options() -> SubscribeOptions {
    SubscribeOptions::new("telemetry").kinds(&KINDS)
}

/// Folds the events the journal still holds (start-up: the gauges start from what the journal
/// knows, not from zero; trimmed events are gone, and the next drift check reports every pod).
/// Reads one range of the event log: call it from a blocking context.
pub fn fold_journal(journal: &Journal, metrics: &Metrics) {
    match journal.events(Seq(1), usize::MAX) {
        Ok(events) => {
            for (_, _, e) in &events {
                if KINDS.contains(&e.kind()) {
                    metrics.observe_event(e, true);
                }
            }
        }
        Err(error) => tracing::warn!(%error, "fleet metrics: journal read failed"),
    }
}

/// Folds delivered events into `metrics` and follows this replica's leadership until the
/// subscription ends.
///
/// # Cancel safety
/// Cancel safe.
pub async fn run(mut sub: Subscription, dispatch: DispatchHandle, metrics: Arc<Metrics>) {
    let mut leadership = dispatch.leadership();
    metrics.leadership(leadership.borrow_and_update().is_leader());
    loop {
        tokio::select! {
            d = sub.recv() => match d {
                Some(d) => metrics.observe_event(&d.event, d.replayed),
                None => return,
            },
            r = leadership.changed() => {
                if r.is_err() {
                    // The dispatcher is gone; keep folding what is still delivered.
                    while let Some(d) = sub.recv().await {
                        metrics.observe_event(&d.event, d.replayed);
                    }
                    return;
                }
                metrics.leadership(leadership.borrow_and_update().is_leader());
            }
        }
    }
}

/// The folded view. Shape: discovered pods sorted by pod; per pod its last successfully applied
/// render.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FleetView {
    /// The pods of the last discovery (the set that deployments target).
    pods: BTreeSet<PodRef>,
    /// The last render each pod took without an error.
    on: BTreeMap<PodRef, Checksum>,
    /// The newest render that passed the gate, if any.
    target: Option<Checksum>,
    /// Whether the gate is pinned (the newest render was rejected).
    pinned: bool,
}

impl FleetView {
    /// Folds one event; events of other kinds change nothing.
    pub fn apply(&mut self, event: &Event) {
        match event {
            Event::HAProxyPodsDiscovered { endpoints, .. } => {
                self.pods = endpoints.iter().map(|e| e.pod.clone()).collect();
                self.on.retain(|p, _| self.pods.contains(p));
            }
            Event::HAProxyPodTerminated { pod, .. } => {
                self.pods.remove(pod);
                self.on.remove(pod);
            }
            Event::RenderGateCompleted {
                render,
                verdict,
                pinned_to,
                ..
            } => match verdict {
                GateVerdict::Pass => {
                    self.pinned = false;
                    self.target = Some(*render);
                }
                GateVerdict::Fail => {
                    self.pinned = true;
                    if pinned_to.is_some() {
                        self.target = *pinned_to;
                    }
                }
            },
            Event::ConfigAppliedToPod {
                pod,
                checksum,
                sync,
                ..
            } if sync.error.is_none() => {
                self.on.insert(pod.clone(), *checksum);
            }
            _ => {}
        }
    }

    /// Pods of the last discovery.
    #[must_use]
    pub fn managed_pods(&self) -> u64 {
        self.pods.len() as u64
    }

    /// Discovered pods not known to run the target render (all of them while no render passed).
    #[must_use]
    pub fn pods_not_on_target(&self) -> u64 {
        self.pods
            .iter()
            .filter(|p| self.target.is_none() || self.on.get(*p) != self.target.as_ref())
            .count() as u64
    }

    /// Whether the gate is pinned.
    #[must_use]
    pub fn pinned(&self) -> bool {
        self.pinned
    }
}

/// Time as leader and leadership transitions of this process (upstream's
/// `haptic_leader_election_*` counters).
#[derive(Debug, Default, Clone)]
pub struct LeaderClock {
    /// Changes of leadership seen (acquired or lost).
    pub transitions: u64,
    /// Seconds led in finished stints.
    pub led_secs: f64,
    /// Start of the current stint, while leading.
    pub since: Option<std::time::Instant>,
}

impl LeaderClock {
    /// Records the leadership now; a change counts one transition.
    pub fn set(&mut self, leading: bool, now: std::time::Instant) {
        match (self.since, leading) {
            (None, true) => {
                self.transitions += 1;
                self.since = Some(now);
            }
            (Some(since), false) => {
                self.transitions += 1;
                self.led_secs += now.saturating_duration_since(since).as_secs_f64();
                self.since = None;
            }
            _ => {}
        }
    }

    /// Seconds led up to `now`, the current stint included.
    #[must_use]
    pub fn led_secs_at(&self, now: std::time::Instant) -> f64 {
        self.led_secs
            + self
                .since
                .map_or(0.0, |s| now.saturating_duration_since(s).as_secs_f64())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use haptic_journal::{Correlation, Endpoint, EndpointUrl, Namespace, ObjectName, SyncMetadata};

    use super::*;

    fn pod(n: &str) -> PodRef {
        PodRef {
            namespace: Namespace::new("ns"),
            name: ObjectName::new(n),
        }
    }

    fn sum(b: u8) -> Checksum {
        Checksum::of(&[b])
    }

    fn discovered(names: &[&str]) -> Event {
        Event::HAProxyPodsDiscovered {
            correlation: Correlation::new("d"),
            endpoints: names
                .iter()
                .map(|n| Endpoint {
                    url: EndpointUrl::new(format!("http://{n}:5555")),
                    pod: pod(n),
                    detected_version: None,
                })
                .collect(),
            authoritative: true,
        }
    }

    fn gate(render: u8, pass: bool, pinned_to: Option<u8>) -> Event {
        Event::RenderGateCompleted {
            correlation: Correlation::new("g"),
            render: sum(render),
            verdict: if pass {
                GateVerdict::Pass
            } else {
                GateVerdict::Fail
            },
            messages: Vec::new(),
            pinned_to: pinned_to.map(sum),
        }
    }

    fn applied(p: &str, render: u8, error: Option<&str>) -> Event {
        Event::ConfigAppliedToPod {
            correlation: Correlation::new("a"),
            runtime_config: haptic_journal::RuntimeConfigRef {
                namespace: Namespace::new("ns"),
                name: ObjectName::new("x-haproxycfg"),
            },
            pod: pod(p),
            checksum: sum(render),
            is_drift_check: false,
            sync: SyncMetadata {
                error: error.map(str::to_owned),
                ..SyncMetadata::default()
            },
        }
    }

    #[test]
    fn counts_pods_off_the_newest_passed_render_and_the_pin() {
        let mut v = FleetView::default();
        v.apply(&discovered(&["a", "b"]));
        assert_eq!((v.managed_pods(), v.pods_not_on_target()), (2, 2));
        v.apply(&gate(1, true, None));
        v.apply(&applied("a", 1, None));
        v.apply(&applied("b", 1, Some("refused")));
        assert_eq!(v.pods_not_on_target(), 1);
        v.apply(&applied("b", 1, None));
        assert_eq!(v.pods_not_on_target(), 0);
        // A rejected render pins the fleet to 1: nobody is off it.
        v.apply(&gate(2, false, Some(1)));
        assert!(v.pinned());
        assert_eq!(v.pods_not_on_target(), 0);
        v.apply(&gate(3, true, None));
        assert!(!v.pinned());
        assert_eq!(v.pods_not_on_target(), 2);
        v.apply(&Event::HAProxyPodTerminated {
            correlation: Correlation::new("t"),
            pod: pod("a"),
        });
        assert_eq!((v.managed_pods(), v.pods_not_on_target()), (1, 1));
    }

    #[test]
    fn the_leader_clock_counts_transitions_and_time() {
        let t0 = std::time::Instant::now();
        let mut c = LeaderClock::default();
        c.set(false, t0);
        assert_eq!(c.transitions, 0);
        c.set(true, t0);
        c.set(true, t0 + std::time::Duration::from_secs(1));
        assert_eq!(c.transitions, 1);
        assert!((c.led_secs_at(t0 + std::time::Duration::from_secs(2)) - 2.0).abs() < 1e-9);
        c.set(false, t0 + std::time::Duration::from_secs(3));
        assert_eq!(c.transitions, 2);
        assert!((c.led_secs_at(t0 + std::time::Duration::from_secs(9)) - 3.0).abs() < 1e-9);
    }
}
