//! A controller slice for tests: journal, dispatcher, scheduler shell, deployer, drift monitor.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use haptic::components::deployer::{Deployer, DeployerSettings};
use haptic::components::drift::{self, DriftHandle};
use haptic::components::scheduler::{
    SchedulerHandle, SchedulerSettings, SchedulerShell, SchedulerState, subscribe_options,
};
use haptic::core::guard::{AlwaysValid, LeaseGuard};
use haptic::dataplane::{BasicAuth, ClientSettings, Dataplane};
use haptic::dispatch::{DispatchHandle, Dispatcher, SubscribeOptions};
use haptic_journal::{
    AuxKind, Batch, Checksum, Correlation, Endpoint, EndpointUrl, Event, Identity, Journal,
    JournalOptions, PodRef, Term,
};
use haptic_tools::sandbox::pods::{PodInfo, Sandbox, SandboxConfig};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub const RENDERS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/corpus/renders");
pub const NS: &str = "haptic-test";

pub async fn sandbox(pods: usize) -> Sandbox {
    Sandbox::start(SandboxConfig {
        pods,
        reload_delay: Duration::from_millis(100),
        ..SandboxConfig::default()
    })
    .await
    .expect("sandbox starts")
}

pub fn endpoints(sb: &Sandbox) -> Vec<Endpoint> {
    sb.pods()
        .iter()
        .map(|p| Endpoint {
            url: EndpointUrl::new(p.dataplane_url.clone()),
            pod: PodRef {
                namespace: NS.into(),
                name: p.name.clone().into(),
            },
            detected_version: None,
        })
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
    cancel: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl Harness {
    pub async fn start(path: &Path, sb: &Sandbox, knobs: Knobs) -> Harness {
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
                endpoint_timeout: Duration::from_secs(15),
                credentials: Some(BasicAuth {
                    username: sb.username().to_owned(),
                    password: sb.password().to_owned(),
                }),
                ..DeployerSettings::default()
            },
            knobs.lease.clone(),
            None,
        ));
        let state = SchedulerState::new(
            SchedulerSettings {
                min_deployment_interval: knobs.min_interval,
                deployment_timeout: knobs.timeout,
                ..SchedulerSettings::default()
            },
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
            cancel,
            tasks,
        };
        h.publish(Event::ConfigPublished {
            correlation: Correlation::new("cp"),
            runtime_config: haptic_journal::RuntimeConfigRef {
                namespace: NS.into(),
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
        let mut b = Batch::new();
        b.set_term(Term(term), Identity::new("test"));
        b.event(Event::BecameLeader {
            correlation: Correlation::new(format!("leader-{term}")),
            identity: Identity::new("test"),
            term: Term(term),
        });
        self.dispatch.accept(b).await.expect("leader");
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
        let mut b = Batch::new();
        let r = b.put_render(config.as_bytes().to_vec(), vec![]);
        b.event(Event::ValidationCompleted {
            correlation: Correlation::new(format!("render-{tag}")),
            render: r.checksum,
            warnings: vec![],
            duration_ms: 1,
            trigger_reason: "test".into(),
            coalescible: false,
        });
        self.dispatch.accept(b).await.expect("feed");
        r.checksum
    }

    /// Stores a corpus render and journals TemplateRendered + the validation verdict.
    pub async fn feed(&self, name: &str, valid: bool) -> Checksum {
        let (config, files) = read_render(&Path::new(RENDERS).join(name));
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
            b.event(Event::ValidationCompleted {
                correlation: corr,
                render: r.checksum,
                warnings: vec![],
                duration_ms: 1,
                trigger_reason: "test".into(),
                coalescible: false,
            });
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

    pub fn events(&self) -> Vec<Event> {
        self.events.lock().unwrap().clone()
    }

    /// Waits until every endpoint's journaled state runs `render` and the deployment that got
    /// there completed (bounded).
    pub async fn wait_applied(&self, render: Checksum, endpoints: &[Endpoint]) {
        wait_for("every pod runs the render", Duration::from_secs(60), || {
            let applied = self.journal.endpoints_applied().unwrap();
            let all = endpoints.iter().all(|e| {
                applied
                    .iter()
                    .any(|a| a.endpoint == e.url && a.render == render)
            });
            let idle = self
                .journal
                .queue(haptic_journal::Queue::DeployInflight)
                .unwrap()
                .is_empty()
                && self
                    .journal
                    .queue(haptic_journal::Queue::DeployPending)
                    .unwrap()
                    .is_empty();
            all && idle
        })
        .await;
        self.settle().await;
    }

    /// Waits until every committed event was processed by every subscriber (the observer too).
    pub async fn settle(&self) {
        wait_for("events dispatched", Duration::from_secs(10), || {
            let m = self.journal.meta().unwrap();
            m.dispatched_through.0 + 1 >= m.next_seq.0
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

pub async fn wait_for(what: &str, bound: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + bound;
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting: {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub type RenderFiles = Vec<(AuxKind, String, Vec<u8>)>;

pub fn read_render(dir: &Path) -> (Vec<u8>, RenderFiles) {
    let config = std::fs::read(dir.join("haproxy.cfg")).expect("haproxy.cfg");
    let mut files = Vec::new();
    for (folder, kind) in [
        ("maps", AuxKind::Map),
        ("ssl", AuxKind::Ssl),
        ("ca", AuxKind::Ca),
        ("general", AuxKind::General),
        ("crt-lists", AuxKind::CrtList),
    ] {
        let Ok(rd) = std::fs::read_dir(dir.join(folder)) else {
            continue;
        };
        let mut paths: Vec<PathBuf> = rd.map(|e| e.unwrap().path()).collect();
        paths.sort();
        for p in paths {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            files.push((kind, format!("{folder}/{name}"), std::fs::read(&p).unwrap()));
        }
    }
    (config, files)
}

/// Sandbox hook client.
pub fn http() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

/// `/v3` requests a pod saw: (method, path).
pub async fn requests(pod: &PodInfo) -> Vec<(String, String)> {
    let v: serde_json::Value = http()
        .get(format!("{}/_sandbox/requests", pod.dataplane_url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["method"].as_str().unwrap_or_default().to_owned(),
                r["path"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

pub async fn clear_requests(pod: &PodInfo) {
    http()
        .delete(format!("{}/_sandbox/requests", pod.dataplane_url))
        .send()
        .await
        .unwrap();
}

pub async fn fault(pod: &PodInfo, body: serde_json::Value) {
    let r = http()
        .post(format!("{}/_sandbox/faults", pod.dataplane_url))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "fault accepted: {}", r.status());
}

pub async fn clear_faults(pod: &PodInfo) {
    http()
        .delete(format!("{}/_sandbox/faults", pod.dataplane_url))
        .send()
        .await
        .unwrap();
}

/// Writes (method, path) pairs that change a pod: raw pushes and storage writes.
pub fn writes(reqs: &[(String, String)]) -> Vec<(String, String)> {
    reqs.iter().filter(|(m, _)| m != "GET").cloned().collect()
}

/// Configuration writes that reload: raw pushes plus transaction commits (a fine-grained repair
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

/// Waits until `curl` answers `want` (the reload may lag the API's answer by a moment).
pub async fn wait_answer(pod: &PodInfo, want: &str, req: impl Fn(&PodInfo) -> String) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let got = req(pod);
        if got.contains(want) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "pod {} answers {got:?}, want {want:?}",
            pod.name
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
