//! End to end: the real `haptic` binary (`haptic run`, a child process) against the sandbox (the
//! Kubernetes API emulator and real HAProxy pods behind Dataplane endpoints), fed the render
//! stream of `tests/corpus/renders/`; every pod must answer what `tests/corpus/renders/README.md`
//! lists for each render (issue 6 "Tests").

mod install;
mod rbac;
mod replicas;
mod restart;
mod sources;
mod startup;
mod stream;
mod telemetry;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use haptic::k8s::crd::{self, HAProxyCfg};
use haptic::source::dir::read_render;
use haptic_tools::sandbox::cluster::{Cluster, ClusterConfig, SECRET};
use haptic_tools::sandbox::pods::demo::{checks_for, matches, run_check};
use haptic_tools::sandbox::pods::{PodInfo, SandboxConfig};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::PostParams;

pub const RENDERS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/corpus/renders");
pub const BIN: &str = env!("CARGO_BIN_EXE_haptic");

/// Every render of the stream, in order.
pub fn stream() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(RENDERS)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.path().join("haproxy.cfg").exists())
        .map(|e| e.file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

/// Whether the README says `render` must be rejected.
pub fn rejected(render: &str) -> bool {
    !checks_for(render, &Path::new(RENDERS).join(render)).0
}

/// The checksum of a corpus render.
pub fn checksum(render: &str) -> String {
    read_render(&Path::new(RENDERS).join(render))
        .unwrap()
        .checksum()
        .to_string()
}

/// Puts a corpus render into `dir` the way the stable interface says: auxiliary folders first
/// (replaced whole), then `haproxy.cfg` renamed into place.
pub fn feed(dir: &Path, render: &str) {
    let src = Path::new(RENDERS).join(render);
    std::fs::create_dir_all(dir).unwrap();
    for folder in ["maps", "ssl", "ca", "general", "crt-lists"] {
        let to = dir.join(folder);
        let _ = std::fs::remove_dir_all(&to);
        let from = src.join(folder);
        if from.is_dir() {
            std::fs::create_dir_all(&to).unwrap();
            for e in std::fs::read_dir(&from).unwrap() {
                let e = e.unwrap();
                std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
            }
        }
    }
    let tmp = dir.join(".haproxy.cfg.tmp");
    std::fs::copy(src.join("haproxy.cfg"), &tmp).unwrap();
    std::fs::rename(&tmp, dir.join("haproxy.cfg")).unwrap();
}

/// A sandbox with the CRDs installed and a client for it.
pub struct World {
    pub cluster: Cluster,
    pub client: kube::Client,
    pub dir: tempfile::TempDir,
}

impl World {
    pub async fn start(pods: usize) -> World {
        let cluster = Cluster::start(ClusterConfig {
            sandbox: SandboxConfig {
                pods,
                reload_delay: Duration::from_millis(100),
                ..SandboxConfig::default()
            },
            ..ClusterConfig::default()
        })
        .await
        .expect("sandbox starts");
        let client = haptic::k8s::client::from_kubeconfig(&cluster.kubeconfig)
            .await
            .unwrap();
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        for c in crd::crds() {
            crds.create(&PostParams::default(), &c).await.unwrap();
        }
        World {
            cluster,
            client,
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub fn pods(&self) -> Vec<PodInfo> {
        self.cluster.sandbox.pods()
    }

    pub fn ns(&self) -> &str {
        &self.cluster.namespace
    }

    /// The HAProxyCfg `name`, if it exists.
    pub async fn hpcfg(&self, name: &str) -> Option<HAProxyCfg> {
        Api::<HAProxyCfg>::namespaced(self.client.clone(), self.ns())
            .get_opt(name)
            .await
            .unwrap_or(None)
    }

    /// The Lease holder.
    pub async fn lease_holder(&self, lease: &str) -> Option<String> {
        Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(self.client.clone(), self.ns())
            .get_opt(lease)
            .await
            .ok()
            .flatten()
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
            .filter(|h| !h.is_empty())
    }

    /// Starts a controller.
    pub fn controller(&self, opts: Opts) -> Controller {
        Controller::spawn(self, opts)
    }

    /// Waits until every pod answers what the README lists for `render` (for a rejected
    /// render: still the last passed one), within `bound`.
    pub async fn pods_answer(&self, render: &str, bound: Duration) -> Result<(), String> {
        let (_, checks) = checks_for(render, &Path::new(RENDERS).join(render));
        let deadline = Instant::now() + bound;
        loop {
            let mut wrong = Vec::new();
            for pod in self.pods() {
                for c in &checks {
                    let body = run_check(&pod, c).await;
                    if !matches(c, &body) {
                        wrong.push(format!(
                            "{}: {} -> {body:?} (want {:?})",
                            pod.name, c.what, c.expect
                        ));
                    }
                }
            }
            if wrong.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(wrong.join("; "));
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    /// Polls `f` until it returns `Some`, within `bound`.
    pub async fn until<T, F, Fut>(&self, bound: Duration, what: &str, mut f: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Option<T>>,
    {
        let deadline = Instant::now() + bound;
        loop {
            if let Some(v) = f().await {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "timed out after {bound:?} waiting for {what}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// How a controller is started.
#[derive(Clone, Debug)]
pub struct Opts {
    pub identity: String,
    pub journal: PathBuf,
    /// Source flags, e.g. `--render-dir D`.
    pub source: Vec<String>,
    pub config_name: String,
    pub extra: Vec<String>,
    pub env: Vec<(String, String)>,
}

impl Opts {
    /// A controller named `identity` on the render directory `render_dir`.
    pub fn dir(world: &World, identity: &str, render_dir: &Path) -> Opts {
        Opts {
            identity: identity.to_owned(),
            journal: world.dir.path().join(identity).join("journal.redb"),
            source: vec!["--render-dir".into(), render_dir.display().to_string()],
            config_name: "e2e".into(),
            extra: Vec::new(),
            env: Vec::new(),
        }
    }

    /// A controller named `identity` on the ConfigMap `configmap` (plus the certificate Secret
    /// `secret`, when given): `--source configmap`.
    pub fn configmap(world: &World, identity: &str, configmap: &str, secret: Option<&str>) -> Opts {
        let mut source: Vec<String> = vec![
            "--source".into(),
            "configmap".into(),
            "--configmap".into(),
            configmap.into(),
        ];
        if let Some(s) = secret {
            source.extend(["--configmap-secret".into(), s.into()]);
        }
        Opts {
            source,
            ..Opts::dir(world, identity, Path::new("/nonexistent"))
        }
    }

    /// Adds the HTTP ingest endpoint on a free loopback port, its token in the Secret
    /// `token_secret` (key `token`); find the port with [`Controller::ingest_addr`].
    pub fn ingest(mut self, token_secret: &str) -> Opts {
        self.extra.extend([
            "--ingest-addr".into(),
            "127.0.0.1:0".into(),
            "--ingest-token-secret".into(),
            token_secret.into(),
        ]);
        self
    }
}

/// The files of a corpus render: (render-relative path, content), `haproxy.cfg` first.
pub fn render_files(render: &str) -> Vec<(String, Vec<u8>)> {
    let content = read_render(&Path::new(RENDERS).join(render)).unwrap();
    let mut v = vec![("haproxy.cfg".to_owned(), content.config.clone())];
    v.extend(content.files.into_iter().map(|f| (f.path, f.content)));
    v
}

/// An HTTP client for loopback only (no proxy), with a per-request bound.
pub fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

/// A running `haptic run` child.
pub struct Controller {
    pub child: Child,
    pub log: PathBuf,
    pub opts: Opts,
}

/// Short intervals through the real flags.
pub const FAST: &[&str] = &[
    "--min-deployment-interval",
    "300ms",
    "--lease-duration",
    "4s",
    "--lease-renew-deadline",
    "3s",
    "--lease-retry-period",
    "500ms",
    "--deployment-timeout",
    "20s",
    "--drain-timeout",
    "10s",
];

/// The value of a [`FAST`] flag.
pub fn fast(flag: &str) -> Duration {
    let at = FAST.iter().position(|f| *f == flag).expect("a FAST flag");
    humantime::parse_duration(FAST[at + 1]).unwrap()
}

/// How long a restarted controller may take to run and publish the newest passed render on
/// every pod, derived from the configured intervals: the dead one's Lease must expire, then one
/// deployment (bounded by its timeout) after the rate limit, then the publication. A drift
/// interval longer than this (see [`SLOW_DRIFT`]) cannot be what repairs the fleet.
pub fn restart_bound() -> Duration {
    fast("--lease-duration")
        + fast("--lease-retry-period")
        + fast("--min-deployment-interval")
        + fast("--deployment-timeout")
}

/// A drift interval no restart test can wait for (drift must not rescue a restart bug).
pub const SLOW_DRIFT: [&str; 2] = ["--drift-prevention-interval", "10m"];

impl Controller {
    fn spawn(world: &World, opts: Opts) -> Controller {
        std::fs::create_dir_all(opts.journal.parent().unwrap()).unwrap();
        let log = opts.journal.parent().unwrap().join(format!(
            "controller-{}.log",
            haptic_journal::UnixMillis::now().0
        ));
        let file = std::fs::File::create(&log).unwrap();
        let mut cmd = Command::new(BIN);
        cmd.arg("run")
            .arg("--kubeconfig")
            .arg(&world.cluster.kubeconfig)
            .args(["--namespace", world.ns()])
            .arg("--journal")
            .arg(&opts.journal)
            .args(&opts.source)
            .args(["--pod-selector", &world.cluster.selector()])
            .args(["--dataplane-secret", SECRET])
            .args(["--metrics-addr", "127.0.0.1:0"])
            .args(["--identity", &opts.identity])
            .args(["--config-name", &opts.config_name])
            .args(FAST)
            .args(&opts.extra)
            .env("RUST_LOG", "info,kube=warn,haptic=debug")
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file);
        for (k, v) in &opts.env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("haptic starts");
        Controller { child, log, opts }
    }

    pub fn pid(&self) -> nix::unistd::Pid {
        nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).unwrap())
    }

    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        let _ = nix::sys::signal::kill(self.pid(), sig);
    }

    /// SIGTERM, then waits (bounded) for the exit status.
    pub fn stop(&mut self, bound: Duration) -> Option<std::process::ExitStatus> {
        self.signal(nix::sys::signal::Signal::SIGTERM);
        self.wait(bound)
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn wait(&mut self, bound: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + bound;
        loop {
            if let Ok(Some(s)) = self.child.try_wait() {
                return Some(s);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The address a log line `<message> ... addr=<ip:port>` names (the first such line),
    /// polled within `bound` (the line appears once the listener is bound).
    pub fn logged_addr(&self, message: &str, bound: Duration) -> std::net::SocketAddr {
        let deadline = Instant::now() + bound;
        loop {
            let log = self.log_text();
            let found = log
                .lines()
                .filter(|l| l.contains(message))
                .find_map(|l| l.split("addr=").nth(1))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|a| a.trim_matches('"').parse().ok());
            if let Some(addr) = found {
                return addr;
            }
            assert!(
                Instant::now() < deadline,
                "no `{message} addr=` line within {bound:?}\n{}",
                self.log_tail(40)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The `--metrics-addr` the controller bound (`/healthz`, `/readyz`, `/metrics`).
    pub fn metrics_addr(&self) -> std::net::SocketAddr {
        self.logged_addr(
            "serving /healthz, /readyz and /metrics",
            Duration::from_secs(60),
        )
    }

    /// The `--ingest-addr` the controller bound (see [`Opts::ingest`]).
    pub fn ingest_addr(&self) -> std::net::SocketAddr {
        self.logged_addr(
            "ingest endpoint listening (POST /v1/renders)",
            Duration::from_secs(60),
        )
    }

    pub fn log_tail(&self, lines: usize) -> String {
        let t = self.log_text();
        let v: Vec<&str> = t.lines().collect();
        v[v.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.signal(nix::sys::signal::Signal::SIGCONT);
            self.kill();
        }
    }
}

/// The main HAProxyCfg's state as the tests compare it: spec checksum, conditions
/// (type=status), and each pod's checksum.
pub fn summary(cfg: &HAProxyCfg) -> (String, Vec<String>, Vec<(String, String)>) {
    let status = cfg.status.clone().unwrap_or_default();
    let mut conditions: Vec<String> = status
        .conditions
        .iter()
        .map(|c| format!("{}={}", c.type_, c.status))
        .collect();
    conditions.sort();
    let mut pods: Vec<(String, String)> = status
        .deployed_to_pods
        .iter()
        .map(|p| {
            (
                p.pod_name.clone(),
                p.checksum.map(|c| c.to_string()).unwrap_or_default(),
            )
        })
        .collect();
    pods.sort();
    (cfg.spec.checksum.to_string(), conditions, pods)
}
