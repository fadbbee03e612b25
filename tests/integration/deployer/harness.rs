//! A controller slice for tests: journal, dispatcher, scheduler shell, deployer, drift monitor.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use haptic::components::deployer::{Deployer, DeployerSettings};
use haptic::components::drift::{self, DriftHandle};
use haptic::components::scheduler::{
    SchedulerHandle, SchedulerSettings, SchedulerShell, SchedulerState, subscribe_options,
};
use haptic::core::guard::{AlwaysValid, LeaseGuard};
use haptic::dataplane::{ClientSettings, Dataplane};
use haptic::dispatch::{DispatchHandle, Dispatcher, SubscribeOptions};
use haptic_journal::{
    AuxKind, Batch, Checksum, Correlation, Endpoint, Event, Identity, Journal, JournalOptions,
    SyncMetadata, Term,
};
pub use haptic_testkit::{Fleet, Pod, eventually};
use haptic_tools::sandbox::pods::PodInfo;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub const NS: &str = "haptic-test";

/// The `global` and `defaults` sections the hand-written renders start with: the admin runtime
/// socket (runtime server updates), HTTP mode, short timeouts.
pub const HEAD: &str = "global
    stats socket /var/run/haproxy.sock mode 600 level admin
defaults
    mode http
    timeout connect 1s
    timeout client 5s
    timeout server 5s
";

/// A fleet of `pods` HAProxy pods on the emulator, objects in [`NS`] (on real peers
/// `NS-<n>`: [`Fleet::namespace`]; the harness needs no CRDs: it runs no publisher).
pub async fn sandbox(pods: usize) -> Fleet {
    sandbox_on(haptic_testkit::Peers::Emulator, pods).await
}

/// [`sandbox`] on `peers`.
pub async fn sandbox_on(peers: haptic_testkit::Peers, pods: usize) -> Fleet {
    Fleet::start(haptic_testkit::FleetConfig {
        peers,
        namespace: NS.to_owned(),
        ..haptic_testkit::FleetConfig::pods(pods).without_crds()
    })
    .await
}

/// Where [`Harness::on`] keeps the journal: `<fleet dir>/j.redb`.
pub fn journal_path(sb: &Fleet) -> std::path::PathBuf {
    sb.dir().join("j.redb")
}

/// The journal's endpoints of every pod of `sb`, in pod order.
pub fn endpoints(sb: &Fleet) -> Vec<Endpoint> {
    sb.pods()
        .iter()
        .map(|p| p.endpoint(sb.namespace()))
        .collect()
}

/// Settings with short intervals.
pub struct Knobs {
    pub min_interval: Duration,
    pub timeout: Duration,
    pub drift: Duration,
    pub max_parallel: usize,
    pub raw_push_threshold: u32,
    pub lease: Arc<dyn LeaseGuard>,
    /// Bound of one endpoint's sync (`DeployerSettings::endpoint_timeout`); below `timeout`.
    pub endpoint_timeout: Duration,
}

impl Knobs {
    /// The defaults with a drift interval of `d`.
    pub fn drift(d: Duration) -> Knobs {
        Knobs {
            drift: d,
            ..Knobs::default()
        }
    }

    /// The defaults with a deployment timeout of `d`.
    pub fn timeout(d: Duration) -> Knobs {
        Knobs {
            timeout: d,
            ..Knobs::default()
        }
    }
}

impl Default for Knobs {
    fn default() -> Self {
        Knobs {
            min_interval: Duration::from_millis(200),
            timeout: Duration::from_secs(20),
            drift: Duration::from_secs(600),
            max_parallel: 4,
            raw_push_threshold: 100,
            lease: Arc::new(AlwaysValid),
            endpoint_timeout: Duration::from_secs(15),
        }
    }
}

pub struct Harness {
    pub journal: Arc<Journal>,
    pub dispatch: DispatchHandle,
    pub events: Arc<Mutex<Vec<Event>>>,
    pub scheduler: SchedulerHandle,
    pub drift: DriftHandle,
    pub deployer: Arc<Deployer>,
    /// Bound of [`Harness::wait_applied`]: three deployments (`min_interval + timeout` each).
    pub converge: Duration,
    /// Bound of [`Harness::settle`]: half a deployment timeout.
    pub settle: Duration,
    cancel: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl Harness {
    /// [`Harness::on`], leading, with the corpus render `name` fed (valid) and applied to every
    /// pod; returns its checksum too.
    pub async fn deployed(
        sb: &Fleet,
        knobs: Knobs,
        name: &str,
    ) -> (Harness, Vec<Endpoint>, Checksum) {
        let (h, eps) = Harness::on(sb, knobs).await;
        h.lead(&eps).await;
        let r = h.feed(name, true).await;
        h.wait_applied(r, &eps).await;
        (h, eps, r)
    }

    /// A fleet of `pods` pods whose next reload takes `slow_ms` longer, a leading harness on it,
    /// and `02-maps` fed; returns once the deployment started (it is then in flight).
    pub async fn in_flight(pods: usize, slow_ms: u64) -> (Fleet, Harness, Vec<Endpoint>, Checksum) {
        let sb = sandbox(pods).await;
        slow_reloads(&sb.pods(), slow_ms).await;
        let (h, eps) = Harness::on(&sb, Knobs::default()).await;
        h.lead(&eps).await;
        let r = h.feed("02-maps", true).await;
        h.wait_started("the deployment to start").await;
        (sb, h, eps, r)
    }

    /// A fleet of `pods` pods, a harness on it, and the endpoints of its pods.
    pub async fn with_fleet(pods: usize, knobs: Knobs) -> (Fleet, Harness, Vec<Endpoint>) {
        let sb = sandbox(pods).await;
        let (h, eps) = Harness::on(&sb, knobs).await;
        (sb, h, eps)
    }

    /// A harness on `sb` (journal `<fleet dir>/j.redb`) and the endpoints of its pods.
    pub async fn on(sb: &Fleet, knobs: Knobs) -> (Harness, Vec<Endpoint>) {
        let h = Harness::start(&journal_path(sb), sb, knobs).await;
        (h, endpoints(sb))
    }

    pub async fn start(path: &Path, sb: &Fleet, knobs: Knobs) -> Harness {
        let journal = Arc::new(Journal::open(&JournalOptions::new(path)).expect("journal opens"));
        let mut d = Dispatcher::new(journal.clone());
        let sched_sub = d.subscribe(subscribe_options());
        let drift_sub = d.subscribe(drift::subscribe_options());
        let mut all = d.subscribe(SubscribeOptions::new("test-observer"));
        let dispatch = d.handle();
        let cancel = CancellationToken::new();
        let mut tasks = Vec::new();
        let c = cancel.clone();
        tasks.push(tokio::spawn(async move {
            d.run(c).await.expect("dispatcher");
        }));
        let events = Arc::new(Mutex::new(Vec::new()));
        let ev = events.clone();
        tasks.push(tokio::spawn(async move {
            while let Some(d) = all.recv().await {
                ev.lock().unwrap().push((*d.event).clone());
            }
        }));
        let dataplane = Dataplane::new(&ClientSettings::default()).expect("client");
        let deployer = Arc::new(Deployer::new(
            dispatch.clone(),
            dataplane,
            DeployerSettings {
                max_parallel: knobs.max_parallel,
                raw_push_threshold: knobs.raw_push_threshold,
                endpoint_timeout: knobs.endpoint_timeout,
                credentials: sb.pods().first().map(Pod::credentials),
                ..DeployerSettings::default()
            },
            knobs.lease.clone(),
            None,
        ));
        let state = SchedulerState::new(
            SchedulerSettings::with_intervals(knobs.min_interval, knobs.timeout),
            format!("d{}", haptic_journal::UnixMillis::now().0),
        );
        let (shell, scheduler) =
            SchedulerShell::new(state, dispatch.clone(), deployer.clone(), sched_sub);
        let c = cancel.clone();
        tasks.push(tokio::spawn(async move {
            shell.run(c).await.expect("scheduler");
        }));
        let drift = DriftHandle::default();
        let (dh, dd, c) = (drift.clone(), dispatch.clone(), cancel.clone());
        let interval = knobs.drift;
        tasks.push(tokio::spawn(async move {
            drift::run(interval, dd, drift_sub, dh, c)
                .await
                .expect("drift");
        }));
        let h = Harness {
            journal,
            dispatch,
            events,
            scheduler,
            drift,
            deployer,
            converge: (knobs.min_interval + knobs.timeout) * 3,
            settle: knobs.timeout / 2,
            cancel,
            tasks,
        };
        h.publish(Event::ConfigPublished {
            correlation: Correlation::new("cp"),
            runtime_config: haptic_journal::RuntimeConfigRef {
                namespace: sb.namespace().into(),
                name: "test-haproxycfg".into(),
            },
            render: h.empty_render().await,
            map_file_count: 0,
            secret_count: 0,
        })
        .await;
        h
    }

    async fn empty_render(&self) -> Checksum {
        let mut b = Batch::new();
        let r = b.put_render(b"# placeholder".to_vec(), vec![]);
        b.event(Event::TemplateRendered {
            correlation: Correlation::new("placeholder"),
            render: r.checksum,
            config_bytes: 13,
            auxiliary_file_count: 0,
            duration_ms: 0,
            trigger_reason: "test".into(),
            coalescible: false,
        });
        self.dispatch.accept(b).await.expect("accept");
        r.checksum
    }

    pub async fn publish(&self, e: Event) {
        self.dispatch.publish(e).await.expect("publish");
    }

    /// Leadership for `term` (set_term + BecameLeader in one batch).
    pub async fn become_leader(&self, term: u64) {
        let b = Batch::became_leader(
            Correlation::new(format!("leader-{term}")),
            Identity::new("test"),
            Term(term),
        );
        self.dispatch.accept(b).await.expect("leader");
    }

    /// Leadership for term 1, then `endpoints` discovered.
    pub async fn lead(&self, endpoints: &[Endpoint]) {
        self.become_leader(1).await;
        self.discover(endpoints.to_vec()).await;
    }

    pub async fn discover(&self, endpoints: Vec<Endpoint>) {
        self.publish(Event::HAProxyPodsDiscovered {
            correlation: Correlation::new("disc"),
            endpoints,
            authoritative: true,
        })
        .await;
    }

    /// Journals a render of `config` (no files) as validated.
    pub async fn feed_config(&self, config: &str, tag: &str) -> Checksum {
        self.feed_files(config, vec![], tag).await
    }

    /// Journals a render of `config` and `files` as validated (as the validator would; a test
    /// so bypasses validation).
    pub async fn feed_files(
        &self,
        config: impl AsRef<[u8]>,
        files: RenderFiles,
        tag: &str,
    ) -> Checksum {
        let mut b = Batch::new();
        let r = b.put_render(config.as_ref().to_vec(), files);
        b.event(validated(
            Correlation::new(format!("render-{tag}")),
            r.checksum,
        ));
        self.dispatch.accept(b).await.expect("feed");
        r.checksum
    }

    /// Stores a corpus render and journals TemplateRendered + the validation verdict.
    pub async fn feed(&self, name: &str, valid: bool) -> Checksum {
        let (config, files) = read_render(name);
        let mut b = Batch::new();
        let r = b.put_render(config, files);
        let corr = Correlation::new(format!("render-{name}"));
        b.event(Event::TemplateRendered {
            correlation: corr.clone(),
            render: r.checksum,
            config_bytes: r.config_size_bytes,
            auxiliary_file_count: r.files.len() as u32,
            duration_ms: 1,
            trigger_reason: "test".into(),
            coalescible: false,
        });
        if valid {
            b.event(validated(corr, r.checksum));
        } else {
            b.event(Event::ValidationFailed {
                correlation: corr,
                render: Some(r.checksum),
                errors: vec!["rejected".into()],
                duration_ms: 1,
                trigger_reason: "test".into(),
            });
        }
        self.dispatch.accept(b).await.expect("feed");
        r.checksum
    }

    /// Waits until a deployment started (bound: half of [`Harness::converge`], the former 30 s).
    pub async fn wait_started(&self, what: &str) {
        wait_for(what, self.converge / 2, || {
            self.events()
                .iter()
                .any(|e| matches!(e, Event::DeploymentStarted { .. }))
        })
        .await;
    }

    /// An out-of-band edit of `pod`'s `hosts.map`; waits until the deployer counted `detected`
    /// drifts in all (bound: half of [`Harness::converge`], the former 30 s).
    pub async fn tamper_map(&self, pod: &Pod, detected: u64) {
        pod.faults()
            .edit_file("/etc/haproxy/maps/hosts.map", "shop.haptic.test tampered\n")
            .await
            .unwrap();
        wait_for("drift detected", self.converge / 2, || {
            let n = self
                .deployer
                .stats
                .drift_detected
                .load(std::sync::atomic::Ordering::Relaxed);
            (n >= detected)
                .then_some(())
                .ok_or(format!("{n} drifts detected"))
        })
        .await;
    }

    /// `DeploymentCompleted` events seen so far.
    pub fn completed(&self) -> usize {
        self.events()
            .iter()
            .filter(|e| matches!(e, Event::DeploymentCompleted { .. }))
            .count()
    }

    /// Waits until `rounds` more drift checks fired and completed, none in flight (bound: one
    /// deployment per round past a drift interval, three rounds' worth).
    pub async fn wait_drift_rounds(&self, rounds: usize) {
        let start = self.completed();
        let trig = self.drift_triggers();
        wait_for("drift rounds", self.converge / 2, || {
            let fired = self.drift_triggers();
            let done = self.completed();
            let idle = self.nothing_in_flight();
            (fired >= trig + rounds && done >= start + rounds && idle)
                .then_some(())
                .ok_or(format!(
                    "{} triggers, {} completed, in flight: {}",
                    fired - trig,
                    done - start,
                    !idle
                ))
        })
        .await;
    }

    /// Waits until `rounds` more drift checks fired with nothing in flight, whether or not
    /// they deployed (a drift check leaves quarantined pods alone; bound as
    /// [`Harness::wait_drift_rounds`]).
    pub async fn wait_drift_triggers(&self, rounds: usize) {
        let trig = self.drift_triggers();
        wait_for("drift checks", self.converge / 2, || {
            let fired = self.drift_triggers();
            let idle = self.nothing_in_flight();
            (fired >= trig + rounds && idle)
                .then_some(())
                .ok_or(format!("{} triggers, in flight: {}", fired - trig, !idle))
        })
        .await;
    }

    /// Drift checks the drift monitor fired so far.
    fn drift_triggers(&self) -> usize {
        self.drift
            .triggers
            .load(std::sync::atomic::Ordering::Relaxed) as usize
    }

    /// Whether the journal holds no deployment in flight.
    fn nothing_in_flight(&self) -> bool {
        self.journal
            .queue(haptic_journal::Queue::DeployInflight)
            .unwrap()
            .is_empty()
    }

    pub fn events(&self) -> Vec<Event> {
        self.events.lock().unwrap().clone()
    }

    /// Waits until every endpoint's journaled state runs `render` and the deployment that got
    /// there completed (bounded).
    pub async fn wait_applied(&self, render: Checksum, endpoints: &[Endpoint]) {
        wait_for("every pod runs the render", self.converge, || {
            let applied = self.journal.endpoints_applied().unwrap();
            let missing: Vec<&str> = endpoints
                .iter()
                .filter(|e| {
                    !applied
                        .iter()
                        .any(|a| a.endpoint == e.url && a.render == render)
                })
                .map(|e| e.url.as_str())
                .collect();
            let idle = self.nothing_in_flight()
                && self
                    .journal
                    .queue(haptic_journal::Queue::DeployPending)
                    .unwrap()
                    .is_empty();
            if missing.is_empty() && idle {
                Ok(())
            } else {
                // The last failure of each missing endpoint names what blocks it.
                let events = self.events();
                let failures: Vec<String> = missing
                    .iter()
                    .filter_map(|url| {
                        events.iter().rev().find_map(|e| match e {
                            Event::InstanceDeploymentFailed {
                                endpoint, error, ..
                            } if endpoint.url.as_str() == *url => Some(format!("{url}: {error}")),
                            _ => None,
                        })
                    })
                    .collect();
                Err(format!(
                    "not yet on the render: {missing:?}; queues idle: {idle}; last failures: \
                     {failures:?}"
                ))
            }
        })
        .await;
        self.settle().await;
    }

    /// Waits until every committed event was processed by every subscriber (the observer too).
    pub async fn settle(&self) {
        wait_for("events dispatched", self.settle, || {
            let m = self.journal.meta().unwrap();
            (m.dispatched_through.0 + 1 >= m.next_seq.0)
                .then_some(())
                .ok_or(format!(
                    "dispatched through {:?}, next seq {:?}",
                    m.dispatched_through, m.next_seq
                ))
        })
        .await;
    }

    pub async fn stop(mut self) {
        self.cancel.cancel();
        for t in self.tasks.drain(..) {
            t.await.expect("task");
        }
    }
}

/// The validator's verdict that `render` is valid.
fn validated(correlation: Correlation, render: Checksum) -> Event {
    Event::ValidationCompleted {
        correlation,
        render,
        warnings: vec![],
        duration_ms: 1,
        trigger_reason: "test".into(),
        coalescible: false,
    }
}

/// [`eventually`] over a synchronous probe (journal reads).
pub async fn wait_for<P: haptic_testkit::Probe<()>>(
    what: &str,
    bound: Duration,
    mut cond: impl FnMut() -> P,
) {
    eventually(bound, what, || std::future::ready(cond())).await;
}

pub type RenderFiles = Vec<(AuxKind, String, Vec<u8>)>;

/// The corpus render `name` as `Batch::put_render` takes it.
pub fn read_render(name: &str) -> (Vec<u8>, RenderFiles) {
    let r = haptic_testkit::render::corpus(name);
    let files = haptic_testkit::render::batch_files(&r);
    (r.config, files)
}

/// The sync metadata each pod reported for `render` (last one per pod).
pub fn syncs(h: &Harness, render: Checksum) -> Vec<(String, SyncMetadata)> {
    let mut out: Vec<(String, SyncMetadata)> = Vec::new();
    for e in h.events() {
        if let Event::ConfigAppliedToPod {
            pod,
            checksum,
            sync,
            ..
        } = e
            && checksum == render
        {
            out.retain(|(p, _)| p != pod.name.as_str());
            out.push((pod.name.to_string(), sync));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// `/v3` requests a pod saw: (method, path).
pub async fn requests(pod: &Pod) -> Vec<(String, String)> {
    pod.faults()
        .requests()
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.method, r.path))
        .collect()
}

pub async fn clear_requests(pod: &Pod) {
    pod.faults().clear_requests().await.unwrap();
}

pub async fn fault(pod: &Pod, body: serde_json::Value) {
    pod.faults().arm(body).await.unwrap();
}

/// A fault row ([`fault`]): the next `times` raw pushes (`POST configuration/raw`) answered
/// `status`.
pub fn push_answers(status: u16, times: u32) -> serde_json::Value {
    serde_json::json!({"method":"POST","path":"configuration/raw$","status":status,"times":times})
}

/// The next reload of every one of `pods` takes `delay_ms` longer (keeps a deployment in flight).
pub async fn slow_reloads(pods: &[Pod], delay_ms: u64) {
    for pod in pods {
        fault(
            pod,
            serde_json::json!({"reload": "slow", "times": 1, "delay_ms": delay_ms}),
        )
        .await;
    }
}

/// Clears the request log of every pod of `pods` and returns their succeeded reloads, in pod
/// order: the mark a step's writes and reloads are then counted from.
pub async fn mark(pods: &[Pod]) -> Vec<usize> {
    let mut reloads = Vec::new();
    for p in pods {
        clear_requests(p).await;
        reloads.push(p.reload_count().await);
    }
    reloads
}

pub async fn clear_faults(pod: &Pod) {
    pod.faults().clear().await.unwrap();
}

/// Writes (method, path) pairs that change a pod: raw pushes and storage writes.
pub fn writes(reqs: &[(String, String)]) -> Vec<(String, String)> {
    reqs.iter().filter(|(m, _)| m != "GET").cloned().collect()
}

/// Configuration writes that reload: raw pushes plus transaction commits (a fine-grained repair
/// Every pod of `pods` received the configuration in exactly one raw push (`why`: what that
/// proves, in the message) and answers `want` to `req`.
pub async fn each_pushed_once_answering(
    pods: &[Pod],
    why: &str,
    want: &str,
    req: impl Fn(&PodInfo) -> String + Copy,
) {
    for pod in pods {
        let n = raw_pushes(&requests(pod).await);
        assert_eq!(n, 1, "{}: {why}", pod.name);
        wait_answer(pod, want, req).await;
    }
}

/// is one commit).
pub fn config_writes(reqs: &[(String, String)]) -> usize {
    raw_pushes(reqs)
        + reqs
            .iter()
            .filter(|(m, p)| m == "PUT" && p.contains("/services/haproxy/transactions/"))
            .count()
}

pub fn raw_pushes(reqs: &[(String, String)]) -> usize {
    reqs.iter()
        .filter(|(m, p)| m == "POST" && p.ends_with("/configuration/raw"))
        .count()
}

/// A real HTTP(S) request through the pod's traffic address (curl, as the sandbox tests do).
pub fn curl(
    pod: &PodInfo,
    scheme: &str,
    port: u16,
    host: Option<&str>,
    sni: Option<&str>,
) -> String {
    let port = if port < 1024 {
        port + pod.port_offset
    } else {
        port
    };
    let mut cmd = std::process::Command::new("curl");
    cmd.args(["-sk", "--noproxy", "*", "--max-time", "5"]);
    if let Some(h) = host {
        cmd.args(["-H", &format!("Host: {h}")]);
    }
    let url = match sni {
        Some(name) => {
            cmd.args([
                "--resolve",
                &format!("{name}:{port}:{}", pod.traffic_address),
            ]);
            format!("{scheme}://{name}:{port}/")
        }
        None => format!("{scheme}://{}:{port}/", pod.traffic_address),
    };
    cmd.arg(url);
    let out = cmd.output().expect("curl");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// `GET http://<pod>:80/` with `Host: shop.haptic.test` (the corpus map's key).
pub fn shop(pod: &PodInfo) -> String {
    curl(pod, "http", 80, Some("shop.haptic.test"), None)
}

/// Waits until `curl` answers `want` (the reload may lag the API's answer by a moment; bound:
/// the harness's deployment timeout, [`Knobs::default`]).
pub async fn wait_answer(pod: &PodInfo, want: &str, req: impl Fn(&PodInfo) -> String) {
    eventually(
        Knobs::default().timeout,
        &format!("pod {} to answer {want:?}", pod.name),
        || {
            let got = req(pod);
            std::future::ready(if got.contains(want) { Ok(()) } else { Err(got) })
        },
    )
    .await;
}
