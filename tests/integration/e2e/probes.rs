//! The chart's probes as a kubelet runs them (issue 27, "The startup probe can crash-loop the
//! controller"): the chart is rendered with the startup and liveness budgets shortened through
//! its values, the controller runs against the real kube-apiserver with no CRDs installed, and a
//! small prober (there is no kubelet here) asks the rendered probes' paths at their periods with
//! the kubelet's rules: the startup probe until it passes, and a restart once it fails
//! `failureThreshold` times in a row (the same for liveness, after startup passed); readiness only
//! reports. Past the startup budget, startup and liveness have passed and readiness fails naming
//! the CRDs; once they are applied readiness passes, and the controller never restarted.
//!
//! Before issue 27 the startupProbe asked `/readyz`: 503 while the CRDs were missing, so the
//! prober here "restarted" the controller at the budget's end (a CrashLoopBackOff in a cluster).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use haptic_testkit::{Controller, http};
use serde_json::Value;

use super::{MAIN, Peers, bounds, kubectl_ok, published, solo_without_crds};
use crate::runtime::helm::template;

on_peers!(
    Real,
    probes_as_a_kubelet_runs_them_never_restart_a_controller_waiting_for_its_crds
        => never_restarted_for_missing_crds,
);

const CRDS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/crds");

/// One rendered probe: the fields a kubelet acts on.
#[derive(Clone, Debug)]
struct ProbeSpec {
    /// `startup`, `liveness` or `readiness` (for messages).
    kind: &'static str,
    /// `httpGet.path`.
    path: String,
    /// `periodSeconds`.
    period: Duration,
    /// `timeoutSeconds`.
    timeout: Duration,
    /// `failureThreshold` (the kubelet's default 3 when absent).
    failure_threshold: u32,
}

impl ProbeSpec {
    fn from_rendered(kind: &'static str, probe: &Value) -> ProbeSpec {
        let secs = |field: &str, default: u64| {
            Duration::from_secs(probe[field].as_u64().unwrap_or(default))
        };
        assert_eq!(
            probe["httpGet"]["port"], "metrics",
            "{kind} probe on the metrics port: {probe}"
        );
        ProbeSpec {
            kind,
            path: probe["httpGet"]["path"]
                .as_str()
                .unwrap_or_else(|| panic!("{kind} probe has an httpGet.path: {probe}"))
                .to_owned(),
            period: secs("periodSeconds", 10),
            timeout: secs("timeoutSeconds", 1),
            failure_threshold: probe["failureThreshold"]
                .as_u64()
                .map_or(3, |n| u32::try_from(n).unwrap()),
        }
    }

    /// `failureThreshold x periodSeconds`: how long it may fail before the kubelet restarts.
    fn budget(&self) -> Duration {
        self.period * self.failure_threshold
    }
}

/// The chart's three probes, rendered with the startup and liveness budgets shortened.
fn rendered_probes() -> [ProbeSpec; 3] {
    let docs = template(
        "haptic",
        "haptic-system",
        &[
            "--set",
            "probes.startup.periodSeconds=1",
            "--set",
            "probes.startup.failureThreshold=4",
            "--set",
            "probes.liveness.periodSeconds=1",
            "--set",
            "probes.liveness.failureThreshold=3",
            "--set",
            "probes.readiness.periodSeconds=1",
        ],
    );
    let sts = docs
        .iter()
        .find(|d| d["kind"] == "StatefulSet")
        .expect("the chart renders a StatefulSet");
    let c = &sts["spec"]["template"]["spec"]["containers"][0];
    [
        ProbeSpec::from_rendered("startup", &c["startupProbe"]),
        ProbeSpec::from_rendered("liveness", &c["livenessProbe"]),
        ProbeSpec::from_rendered("readiness", &c["readinessProbe"]),
    ]
}

/// The `--metrics-addr` once the controller logged it; `None` before (the kubelet's connect
/// would be refused: a failed probe).
fn logged_metrics_addr(ctl: &Controller) -> Option<SocketAddr> {
    ctl.log_text()
        .lines()
        .filter(|l| l.contains("serving /startupz"))
        .find_map(|l| l.split("addr=").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|a| a.trim_matches('"').parse().ok())
}

/// One probe as the kubelet's HTTP prober judges it: 200-399 within the timeout passes.
async fn run_probe(ctl: &Controller, spec: &ProbeSpec) -> Result<(), String> {
    let Some(addr) = logged_metrics_addr(ctl) else {
        return Err("not listening yet".to_owned());
    };
    let request = http()
        .get(format!("http://{addr}{}", spec.path))
        .timeout(spec.timeout)
        .send();
    match request.await {
        Ok(resp) => {
            let status = resp.status().as_u16();
            let body = resp.text().await.unwrap_or_default();
            if (200..400).contains(&status) {
                Ok(())
            } else {
                Err(format!("{status}: {}", body.trim()))
            }
        }
        Err(e) => Err(format!("GET {}: {e}", spec.path)),
    }
}

/// The kubelet's view of one container: consecutive failures per probe, and the last answers.
#[derive(Debug, Default)]
struct Kubelet {
    started: bool,
    startup_failures: u32,
    liveness_failures: u32,
    /// The last readiness answer (`Ok` ready, `Err` the body).
    readiness: Option<Result<(), String>>,
    /// Every startup/liveness failure seen (for the panic message).
    seen: Vec<String>,
}

impl Kubelet {
    /// One period of probing (the three probes share the 1 s period here): startup until it
    /// passes, then liveness and readiness. Panics where the kubelet would restart the container.
    async fn tick(&mut self, ctl: &Controller, probes: &[ProbeSpec; 3], since: Instant) {
        let [startup, liveness, readiness] = probes;
        if self.started {
            match run_probe(ctl, liveness).await {
                Ok(()) => self.liveness_failures = 0,
                Err(e) => {
                    self.liveness_failures += 1;
                    self.seen
                        .push(format!("liveness at {:?}: {e}", since.elapsed()));
                }
            }
            assert!(
                self.liveness_failures < liveness.failure_threshold,
                "the kubelet would restart the controller (liveness failed {} times in a row): \
                 {:#?}\n{}",
                self.liveness_failures,
                self.seen,
                ctl.log_tail(40)
            );
            self.readiness = Some(run_probe(ctl, readiness).await);
        } else {
            match run_probe(ctl, startup).await {
                Ok(()) => self.started = true,
                Err(e) => {
                    self.startup_failures += 1;
                    self.seen
                        .push(format!("startup at {:?}: {e}", since.elapsed()));
                }
            }
            assert!(
                self.startup_failures < startup.failure_threshold,
                "the kubelet would restart the controller (startup probe {} failed {} times in \
                 a row, budget {:?}): {:#?}\n{}",
                startup.path,
                self.startup_failures,
                startup.budget(),
                self.seen,
                ctl.log_tail(40)
            );
        }
    }
}

pub async fn never_restarted_for_missing_crds(peers: Peers) {
    let probes = rendered_probes();
    let [startup, liveness, readiness] = &probes;
    for p in &probes {
        assert_eq!(
            p.period,
            Duration::from_secs(1),
            "{} period from the values: {p:?}",
            p.kind
        );
    }
    assert_eq!(startup.path, "/startupz");
    assert_eq!(liveness.path, "/healthz");
    assert_eq!(readiness.path, "/readyz");

    let (world, ctl) = solo_without_crds(peers, 1, "02-maps").await;
    let since = Instant::now();
    let mut kubelet = Kubelet::default();

    // Past the startup budget, plus a liveness budget after it: startup passed, liveness never
    // reached its threshold, and readiness names the CRDs (the controller has seen them missing
    // by then, within a follow-up of its first deployment).
    let past = startup.budget() + liveness.budget();
    let deadline = since + past.max(bounds().follow_up()) + startup.period;
    loop {
        let tick = Instant::now();
        kubelet.tick(&ctl, &probes, since).await;
        let names_crds = matches!(&kubelet.readiness, Some(Err(body))
            if body.contains("haproxycfgs") || body.contains("CRD"));
        if since.elapsed() > past && names_crds {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "within {:?}: readiness names the missing CRDs; last: {kubelet:?}\n{}",
            deadline - since,
            ctl.log_tail(40)
        );
        tokio::time::sleep_until((tick + startup.period).into()).await;
    }
    assert!(kubelet.started, "startup passed: {kubelet:?}");
    assert!(world.hpcfg(MAIN).await.is_none(), "nothing published yet");

    // The CRDs applied: readiness passes with no restart, the HAProxyCfg is published.
    kubectl_ok(&world, &["apply", "-f", CRDS]);
    let applied = Instant::now();
    let bound = bounds().converge() + bounds().follow_up();
    loop {
        let tick = Instant::now();
        kubelet.tick(&ctl, &probes, since).await;
        if matches!(kubelet.readiness, Some(Ok(()))) {
            break;
        }
        assert!(
            applied.elapsed() < bound,
            "readiness within {bound:?} of the CRDs applied; last: {kubelet:?}\n{}",
            ctl.log_tail(40)
        );
        tokio::time::sleep_until((tick + readiness.period).into()).await;
    }
    published(&world, "02-maps", 1).await;
    let mut ctl = ctl;
    assert!(
        ctl.wait(Duration::ZERO).is_none(),
        "the controller process never exited: {}",
        ctl.log_tail(40)
    );
    drop(ctl);
    world.shutdown().await;
}
