//! HAProxy sandbox pods with Dataplane API v3 endpoints (DESIGN.md §5, issue 3).
//!
//! A [`Sandbox`] runs N pods. As root (namespace mode) each pod is a network namespace
//! `hs<owner pid>-<k>` joined to the host by a veth /30 from `10.231.0.0/16` with no default route,
//! holding one real `haproxy -W -S master.sock` (private `/etc/haproxy` and `/var/run` through a
//! mount namespace) and that pod's Dataplane endpoint on `podIP:5555` (socket created inside the
//! namespace), like a Dataplane sidecar. An echo HTTP server listens on the host side of each link
//! (`<host ip>:8080`) for backends tests need.
//!
//! Without root (loopback mode) there are no namespaces: each pod gets its own loopback address
//! `127.232.x.y` (Dataplane on `:5555` there); the file HAProxy loads is a rewrite of the stored
//! configuration ([`haproxy::rewrite_for_loopback`]: bind addresses onto the pod's address, ports
//! below 1024 moved up by 10000 when they cannot be bound, `/etc/haproxy` and `/var/run` paths onto
//! the pod's directories), and renders naming outbound targets are refused ([`safety`]).
//!
//! Without `dir`, a sandbox works in `<tmp>/haptic-sandbox-*` and writes its pid to
//! [`OWNER_FILE`] there; each start removes the directories of dead owners
//! ([`cleanup_stale_dirs`]), as it removes their namespaces, since `kill -9` runs no destructor.
//!
//! Stand-in pods answer like the others but run no HAProxy (validation still runs `haproxy -c`).
//! They listen on `127.233.x.y:5555` (host network, no namespace); in namespace mode their
//! `haproxy -c` runs in a link-less validation namespace so a host name in a config cannot cause a
//! DNS query.
//!
//! # Test hooks on every pod's Dataplane endpoint (no auth)
//! ```text
//! POST   /_sandbox/faults   {"method":"<regex>","path":"<regex>","status":503,"times":1,
//!                            "retry_after_s":2,"delay_ms":0,"drop":false}
//!        regexes unanchored, matched on the method and the path without query; times 0/absent =
//!        always; first matching fault applies; delay_ms then `status` (body {code,message}, plus
//!        Retry-After) or, without status, the real answer; drop closes the connection unanswered
//! POST   /_sandbox/faults   {"reload":"slow"|"fail","times":N,"delay_ms":D}
//!        slow: the next N reloads finish D ms later; fail: HAProxy rejects them (an invalid line is
//!        added for that reload) and last-known-good is restored
//! GET    /_sandbox/faults   armed faults as posted plus "remaining" (null = every time);
//!        used-up faults are dropped
//! DELETE /_sandbox/faults
//! GET    /_sandbox/requests  [{"method","path","query","status","at"}] (status 0 = dropped)
//! DELETE /_sandbox/requests
//! POST   /_sandbox/bump-version            version + 1, content unchanged
//! POST   /_sandbox/edit-config[?bump_version=true]   body = new config, written behind the API's
//!        back and reloaded; the version moves only with bump_version
//! POST   /_sandbox/edit-file?path=/etc/haproxy/maps/x.map   body = new content (no reload)
//! POST   /_sandbox/kill                    HAProxy killed, endpoint closed, Pod object deleted
//! POST   /_sandbox/credentials  {"username":U,"password":P}   the endpoint accepts these
//!        basic-auth credentials from the next request on (a rotated password), the old ones no more
//! GET    /_sandbox/spec-violations  {"mode","spec","violations":[...],"dropped","allowed":[...]}:
//!        the exchanges of this pod that broke the Data Plane API's published spec ([`spec`]),
//!        and the allowed differences used, each with its count
//! DELETE /_sandbox/spec-violations  forgets them, answering what it forgot:
//!        {"ok":true,"cleared":N,"violations":[...]}
//! ```
//! Example: `curl -X POST $URL/_sandbox/faults -d '{"path":"configuration/raw","status":500,"times":1}'`.
//! Bodies are JSON whatever the content type; `POST /_sandbox/faults` answers
//! `201 {"ok":true,"faults":N}`, the DELETEs `200 {"ok":true}`, as on the API emulator; unknown
//! fields, a status outside 100..=599 and contradictions answer 400 naming the field
//! ([`crate::sandbox::control`]).
//!
//! # The Dataplane API stand-in
//! What each pod's endpoint answers is held to what a real dataplaneapi 3.4 answered and to the
//! published spec; the operations served, their tests and the deviations left are in
//! `tools/src/sandbox/pods/README.md`.

/// `impl Debug` showing the named fields only (the rest as `..`: secrets, hooks, handles).
macro_rules! debug_fields {
    ($ty:ident { $($field:ident),+ $(,)? }) => {
        impl std::fmt::Debug for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($ty))
                    $(.field(stringify!($field), &self.$field))+
                    .finish_non_exhaustive()
            }
        }
    };
}

pub mod dataplane;
pub mod demo;
pub mod haproxy;
pub mod netns;
pub mod safety;
pub mod spec;

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, Result};
use serde::Serialize;

pub use dataplane::KillHook;
use dataplane::{PodCore, Settings};
use haproxy::{PodFs, View};

/// Default Dataplane port (`haproxy-haptic.org/dataplane-port` is set when another is used).
pub const DEFAULT_DATAPLANE_PORT: u16 = 5555;
/// Port of the echo server on the host side of each pod link.
pub const ECHO_PORT: u16 = 8080;

/// The configuration every pod starts with, at configuration version 1.
pub const INITIAL_CONFIG: &str = "global
    stats socket /var/run/haproxy.sock mode 600 level admin
defaults
    mode http
    timeout connect 1s
    timeout client 5s
    timeout server 5s
frontend sandbox_initial
    bind *:8404
    http-request return status 200 content-type text/plain string \"haptic-sandbox initial configuration\"
";

/// How a sandbox runs its pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Root: one network + mount namespace per pod.
    Netns,
    /// No root: loopback addresses and rewrites.
    Loopback,
}

/// Settings of a sandbox.
#[derive(Clone)]
pub struct SandboxConfig {
    /// Pods with a real HAProxy.
    pub pods: usize,
    /// Stand-in pods (no HAProxy).
    pub stand_in_pods: usize,
    /// Delay before each answer of a stand-in pod.
    pub stand_in_delay: Duration,
    /// Stand-in pods check pushed configurations with `haproxy -c` as the real Dataplane API
    /// does. Default: true (false for fan-out benchmarks: see `dataplane::Settings`).
    pub stand_in_validate: bool,
    /// Working directory (a temporary one when `None`).
    pub dir: Option<PathBuf>,
    /// Dataplane port.
    pub dataplane_port: u16,
    /// Dataplane user.
    pub username: String,
    /// Dataplane password.
    pub password: String,
    /// Reload batching delay (real default 5 s).
    pub reload_delay: Duration,
    /// Use loopback mode even as root.
    pub force_loopback: bool,
    /// The `haproxy` binary.
    pub haproxy_bin: String,
    /// Called when `POST /_sandbox/kill` removed a pod.
    pub on_kill: Option<KillHook>,
    /// Hold every pod's exchanges to the Data Plane API's published spec ([`spec`]). Default:
    /// [`spec::SpecCheck::Enforce`] (the sandbox's end panics when a violation was recorded).
    pub spec_check: spec::SpecCheck,
}

debug_fields!(SandboxConfig {
    pods,
    stand_in_pods,
    dir,
    dataplane_port,
    reload_delay,
    force_loopback,
    spec_check,
});

impl Default for SandboxConfig {
    fn default() -> Self {
        Self {
            pods: 1,
            stand_in_pods: 0,
            stand_in_delay: Duration::ZERO,
            stand_in_validate: true,
            dir: None,
            dataplane_port: DEFAULT_DATAPLANE_PORT,
            username: "admin".into(),
            password: "haptic-sandbox".into(),
            reload_delay: Duration::from_secs(5),
            force_loopback: false,
            haproxy_bin: "haproxy".into(),
            on_kill: None,
            spec_check: spec::SpecCheck::default(),
        }
    }
}

/// What a client needs to know about one pod.
#[derive(Debug, Clone, Serialize)]
pub struct PodInfo {
    /// Pod name.
    pub name: String,
    /// `status.podIP`.
    pub pod_ip: Ipv4Addr,
    /// Dataplane port.
    pub dataplane_port: u16,
    /// `http://<pod_ip>:<port>`.
    pub dataplane_url: String,
    /// Where the pod's frontends listen (on the ports their config binds, plus `port_offset`).
    pub traffic_address: Ipv4Addr,
    /// Added to bind ports below 1024 (loopback mode without root only; else 0).
    pub port_offset: u16,
    /// Echo server for backends (host side of the pod link).
    pub echo_address: SocketAddr,
    /// Network namespace (namespace mode).
    pub netns: Option<String>,
    /// The pod's directory on the host (`etc-haproxy/` is its `/etc/haproxy`).
    pub dir: PathBuf,
    /// A stand-in pod (no HAProxy).
    pub stand_in: bool,
}

/// A running sandbox; [`Sandbox::shutdown`] (or drop) removes its processes and namespaces.
pub struct Sandbox {
    mode: Mode,
    dir: PathBuf,
    _tempdir: Option<tempfile::TempDir>,
    pods: Vec<(PodInfo, Arc<PodCore>)>,
    namespaces: Vec<String>,
    janitor: Mutex<Option<netns::Janitor>>,
    username: String,
    password: String,
    echo_cancel: tokio_util::sync::CancellationToken,
    closed: bool,
    spec_check: spec::SpecCheck,
}

debug_fields!(Sandbox {
    mode,
    dir,
    namespaces
});

static INSTANCE: AtomicU32 = AtomicU32::new(0);

/// Prefix of the temporary directory of a sandbox started without `dir`.
pub const TEMPDIR_PREFIX: &str = "haptic-sandbox-";
/// File in that directory holding the owner's pid, for [`cleanup_stale_dirs`].
pub const OWNER_FILE: &str = ".haptic-sandbox-owner";
/// An unmarked directory (made before owner files existed) must be at least this old, and
/// referenced by no process, to be removed.
const UNMARKED_MIN_AGE: Duration = Duration::from_secs(600);

/// Removes the temporary directories (`<tmp>/haptic-sandbox-*`) of sandboxes whose owner process
/// is dead: after `kill -9` no destructor runs, and the directory holds a kubeconfig, the pods'
/// files and uploaded private keys. A directory names its owner in [`OWNER_FILE`]; one without
/// (left by an older sandbox) is removed when it is older than ten minutes and no process refers to
/// it (command line, working directory, open files or mounts, as a pod's bind mounts would).
/// Directories given with `dir` are never touched.
pub fn cleanup_stale_dirs(tmp: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return Vec::new();
    };
    let candidates: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(TEMPDIR_PREFIX))
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect();
    let mut in_use: Option<Vec<String>> = None;
    let mut removed = Vec::new();
    for dir in candidates {
        let stale = match std::fs::read_to_string(dir.join(OWNER_FILE)) {
            Ok(pid) => pid
                .trim()
                .parse::<u32>()
                .is_ok_and(|pid| !netns::pid_alive(pid)),
            Err(_) => {
                let old = std::fs::metadata(&dir)
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|age| age >= UNMARKED_MIN_AGE);
                let refs = in_use.get_or_insert_with(process_references);
                let d = dir.to_string_lossy();
                old && !refs.iter().any(|r| r.contains(d.as_ref()))
            }
        };
        if stale && std::fs::remove_dir_all(&dir).is_ok() {
            removed.push(dir);
        }
    }
    removed
}

/// Per live process: its command line, working directory, open files and mounts, as text.
fn process_references() -> Vec<String> {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    procs
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .map(|e| {
            let p = e.path();
            let mut s = std::fs::read(p.join("cmdline"))
                .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
                .unwrap_or_default();
            if let Ok(cwd) = std::fs::read_link(p.join("cwd")) {
                s.push('\n');
                s.push_str(&cwd.to_string_lossy());
            }
            if let Ok(fds) = std::fs::read_dir(p.join("fd")) {
                for fd in fds.flatten() {
                    if let Ok(t) = std::fs::read_link(fd.path()) {
                        s.push('\n');
                        s.push_str(&t.to_string_lossy());
                    }
                }
            }
            s.push('\n');
            s.push_str(&std::fs::read_to_string(p.join("mountinfo")).unwrap_or_default());
            s
        })
        .collect()
}

/// Why a sandbox runs in loopback mode, for the start-up banner.
fn loopback_reason(forced: bool, root: bool) -> &'static str {
    match (forced, root) {
        (true, true) => "loopback mode forced (--loopback) although running as root",
        (true, false) => "loopback mode forced (--loopback), and not running as root anyway",
        (false, _) => "not running as root",
    }
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Port offset for loopback mode: 10000 when ports below 1024 cannot be bound.
fn loopback_port_offset() -> u16 {
    if is_root() {
        return 0;
    }
    let start: u32 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_unprivileged_port_start")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1024);
    if start <= 80 { 0 } else { 10000 }
}

/// Loopback slot `s` → (host-side, pod-side) addresses in `127.<octet>.0.0/16`.
fn loopback_addrs(octet: u8, s: u32) -> (Ipv4Addr, Ipv4Addr) {
    let base = u32::from(Ipv4Addr::new(127, octet, 0, 0)) + (s % 16000) * 4;
    (Ipv4Addr::from(base + 1), Ipv4Addr::from(base + 2))
}

/// Binds `port` on the first free loopback slot from a pid-derived start (two sandboxes never
/// share an address).
fn bind_loopback(
    octet: u8,
    start: &mut u32,
    port: u16,
) -> Result<(std::net::TcpListener, Ipv4Addr, Ipv4Addr)> {
    for _ in 0..16000 {
        let (host, pod) = loopback_addrs(octet, *start);
        *start += 1;
        if let Ok(l) = std::net::TcpListener::bind((pod, port)) {
            l.set_nonblocking(true)?;
            return Ok((l, host, pod));
        }
    }
    anyhow::bail!("no free loopback address in 127.{octet}.0.0/16 for port {port}")
}

async fn serve_echo(
    name: String,
    listener: tokio::net::TcpListener,
    cancel: tokio_util::sync::CancellationToken,
) {
    let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
        let name = name.clone();
        async move {
            let host = req
                .headers()
                .get("host")
                .and_then(|h| h.to_str().ok())
                .unwrap_or_default()
                .to_string();
            format!("echo {name} {} {} host={host}\n", req.method(), req.uri())
        }
    });
    let _ = axum::serve(listener, app)
        .with_graceful_shutdown(async move { cancel.cancelled().await })
        .await;
}

impl Sandbox {
    /// Starts the pods; returns once every endpoint accepts connections.
    pub async fn start(cfg: SandboxConfig) -> Result<Sandbox> {
        let version = haproxy::check_installed(&cfg.haproxy_bin).await?;
        tracing::info!("using {version}");
        if cfg.spec_check != spec::SpecCheck::Off {
            // Parsed once per process; a missing document fails here, naming the path and the fix.
            spec::Contract::load(spec::SpecVersion::V32)?;
        }
        let mode = if is_root() && !cfg.force_loopback {
            Mode::Netns
        } else {
            Mode::Loopback
        };
        let (dir, tempdir) = match &cfg.dir {
            Some(d) => {
                std::fs::create_dir_all(d)?;
                (d.clone(), None)
            }
            None => {
                // Same stale-cleanup pass as the namespaces: directories of dead sandboxes go
                // (they hold kubeconfigs, pod files and uploaded private keys).
                let tmp = std::env::temp_dir();
                let removed = tokio::task::spawn_blocking(move || cleanup_stale_dirs(&tmp)).await?;
                if !removed.is_empty() {
                    tracing::info!("removed directories of dead sandboxes: {removed:?}");
                }
                let t = tempfile::Builder::new().prefix(TEMPDIR_PREFIX).tempdir()?;
                std::fs::write(t.path().join(OWNER_FILE), std::process::id().to_string())?;
                (t.path().to_path_buf(), Some(t))
            }
        };
        let owner = std::process::id();
        let settings = Arc::new(Settings {
            username: cfg.username.clone(),
            password: cfg.password.clone(),
            reload_delay: cfg.reload_delay,
            haproxy_bin: cfg.haproxy_bin.clone(),
            loopback: mode == Mode::Loopback,
            stand_in_validate: cfg.stand_in_validate,
            spec_check: cfg.spec_check,
        });
        let mut janitor = netns::Janitor::start()?;
        let echo_cancel = tokio_util::sync::CancellationToken::new();
        let mut sb = Sandbox {
            mode,
            dir: dir.clone(),
            _tempdir: tempdir,
            pods: Vec::new(),
            namespaces: Vec::new(),
            janitor: Mutex::new(None),
            username: cfg.username.clone(),
            password: cfg.password.clone(),
            echo_cancel: echo_cancel.clone(),
            closed: false,
            spec_check: cfg.spec_check,
        };

        // Lay out every pod: (name, fs, view, netns, pod ip, host ip, dataplane listener, stand_in)
        struct Plan {
            name: String,
            fs: PodFs,
            view: View,
            netns: Option<String>,
            pod_ip: Ipv4Addr,
            host_ip: Ipv4Addr,
            port_offset: u16,
            listener: std::net::TcpListener,
            stand_in: bool,
        }
        let mut plans = Vec::new();
        let total = cfg.pods + cfg.stand_in_pods;
        let mut lo_slot = owner.wrapping_mul(37) % 15000;
        let mut so_slot = owner.wrapping_mul(37) % 15000;
        let pod_name = |i: usize| {
            if i < cfg.pods {
                format!("haproxy-{i}")
            } else {
                format!("haproxy-standin-{}", i - cfg.pods)
            }
        };
        match mode {
            Mode::Netns => {
                let removed = tokio::task::spawn_blocking(netns::cleanup_stale).await??;
                if !removed.is_empty() {
                    tracing::info!("removed stale namespaces of dead sandboxes: {removed:?}");
                }
                let mut names = Vec::new();
                for _ in 0..cfg.pods {
                    let k = INSTANCE.fetch_add(1, Ordering::SeqCst);
                    names.push((netns::netns_name(owner, &k.to_string()), true));
                }
                if cfg.stand_in_pods > 0 {
                    let k = INSTANCE.fetch_add(1, Ordering::SeqCst);
                    names.push((netns::netns_name(owner, &format!("v{k}")), false));
                }
                for (n, _) in &names {
                    janitor.watch_netns(n);
                }
                sb.namespaces = names.iter().map(|(n, _)| n.clone()).collect();
                let names2 = names.clone();
                let links = tokio::task::spawn_blocking(move || netns::create_namespaces(&names2))
                    .await??;
                for i in 0..total {
                    let name = pod_name(i);
                    let fs = PodFs::create(&dir.join(&name))?;
                    if i < cfg.pods {
                        let ns = names[i].0.clone();
                        let link = links[i].clone().context("pod link missing")?;
                        let listener = netns::bind_in_netns(
                            &ns,
                            SocketAddr::from((link.pod_ip, cfg.dataplane_port)),
                        )?;
                        plans.push(Plan {
                            name,
                            fs,
                            view: View::Namespaced { netns: ns.clone() },
                            netns: Some(ns),
                            pod_ip: link.pod_ip,
                            host_ip: link.host_ip,
                            port_offset: 0,
                            listener,
                            stand_in: false,
                        });
                    } else {
                        let vns = names.last().map(|n| n.0.clone()).unwrap_or_default();
                        let (listener, host_ip, pod_ip) =
                            bind_loopback(233, &mut so_slot, cfg.dataplane_port)?;
                        plans.push(Plan {
                            name,
                            fs,
                            view: View::Namespaced { netns: vns },
                            netns: None,
                            pod_ip,
                            host_ip,
                            port_offset: 0,
                            listener,
                            stand_in: true,
                        });
                    }
                }
            }
            Mode::Loopback => {
                eprintln!(
                    "haptic-sandbox: {}: LOOPBACK MODE (no network namespaces). Each pod \
                     gets its own 127.232.x.y address; bind addresses are rewritten onto it{}, \
                     /etc/haproxy and /var/run paths onto the pod's directory, and renders naming \
                     non-loopback servers, nameservers, peers, mailers or log targets are refused.",
                    loopback_reason(cfg.force_loopback, is_root()),
                    if loopback_port_offset() > 0 {
                        " (ports below 1024 + 10000)"
                    } else {
                        ""
                    }
                );
                for i in 0..total {
                    let name = pod_name(i);
                    let fs = PodFs::create(&dir.join(&name))?;
                    let stand_in = i >= cfg.pods;
                    let (listener, host_ip, pod_ip) = if stand_in {
                        bind_loopback(233, &mut so_slot, cfg.dataplane_port)?
                    } else {
                        bind_loopback(232, &mut lo_slot, cfg.dataplane_port)?
                    };
                    let port_offset = loopback_port_offset();
                    plans.push(Plan {
                        name,
                        fs,
                        view: View::Loopback {
                            addr: pod_ip,
                            port_offset,
                        },
                        netns: None,
                        pod_ip,
                        host_ip,
                        port_offset,
                        listener,
                        stand_in,
                    });
                }
            }
        }
        *sb.janitor.lock().unwrap_or_else(|p| p.into_inner()) = Some(janitor);

        // Start HAProxy everywhere at once.
        for p in &plans {
            std::fs::write(p.fs.config(), dataplane::with_version(INITIAL_CONFIG, 1))?;
        }
        let starts = plans.iter().map(|p| {
            let bin = cfg.haproxy_bin.clone();
            async move {
                if p.stand_in {
                    Ok(None)
                } else {
                    haproxy::start(&bin, &p.fs, &p.view).await.map(Some)
                }
            }
        });
        let masters = futures::future::join_all(starts).await;
        let mut started = Vec::new();
        let mut first_err = None;
        for m in masters {
            match m {
                Ok(m) => {
                    if let Some(m) = &m {
                        sb.watch_pid(m.pid);
                    }
                    started.push(m);
                }
                Err(e) => {
                    first_err.get_or_insert(e);
                    started.push(None);
                }
            }
        }
        for (p, master) in plans.into_iter().zip(started) {
            let core = PodCore::new(
                p.name.clone(),
                p.fs.clone(),
                p.view.clone(),
                p.stand_in,
                if p.stand_in {
                    cfg.stand_in_delay
                } else {
                    Duration::ZERO
                },
                settings.clone(),
                master,
                cfg.on_kill.clone(),
            )?;
            let listener = tokio::net::TcpListener::from_std(p.listener)?;
            tokio::spawn(dataplane::serve(core.clone(), listener));
            tokio::spawn(core.clone().reload_agent());
            let echo_address = SocketAddr::from((p.host_ip, ECHO_PORT));
            if !p.stand_in {
                let l = std::net::TcpListener::bind(echo_address)
                    .with_context(|| format!("binding echo server {echo_address}"))?;
                l.set_nonblocking(true)?;
                let l = tokio::net::TcpListener::from_std(l)?;
                tokio::spawn(serve_echo(p.name.clone(), l, echo_cancel.clone()));
            }
            let info = PodInfo {
                name: p.name,
                pod_ip: p.pod_ip,
                dataplane_port: cfg.dataplane_port,
                dataplane_url: format!("http://{}:{}", p.pod_ip, cfg.dataplane_port),
                traffic_address: p.pod_ip,
                port_offset: p.port_offset,
                echo_address,
                netns: p.netns,
                dir: p.fs.root.clone(),
                stand_in: p.stand_in,
            };
            sb.pods.push((info, core));
        }
        if let Some(e) = first_err {
            sb.shutdown_inner().await;
            return Err(e);
        }
        Ok(sb)
    }

    fn watch_pid(&self, pid: u32) {
        if let Some(j) = self
            .janitor
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_mut()
        {
            j.watch_pid(pid);
        }
    }

    /// Namespace or loopback mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The working directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Dataplane user.
    pub fn username(&self) -> &str {
        &self.username
    }

    /// Dataplane password.
    pub fn password(&self) -> &str {
        &self.password
    }

    /// Every pod, in order (real pods, then stand-ins).
    pub fn pods(&self) -> Vec<PodInfo> {
        self.pods.iter().map(|(i, _)| i.clone()).collect()
    }

    /// The namespaces this sandbox created.
    pub fn namespaces(&self) -> &[String] {
        &self.namespaces
    }

    /// Pids of every process this sandbox started and that is running now: HAProxy masters and
    /// workers (and anything else inside its namespaces) and the janitor.
    pub async fn pids(&self) -> Vec<u32> {
        let mut out = Vec::new();
        for (_, core) in &self.pods {
            if let Some(m) = core.master.lock().await.as_ref() {
                out.push(m.pid);
                if let Ok(p) = haproxy::show_proc(&m.sock).await {
                    out.extend(p.workers);
                }
            }
        }
        for ns in &self.namespaces {
            out.extend(netns::netns_pids(ns));
        }
        if let Some(j) = self
            .janitor
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            out.extend(j.pid());
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Kills one pod as `POST /_sandbox/kill` would.
    pub async fn kill_pod(&self, name: &str) {
        if let Some((_, core)) = self.pods.iter().find(|(i, _)| i.name == name) {
            core.kill().await;
        }
    }

    async fn shutdown_inner(&mut self) {
        if self.closed {
            return;
        }
        self.echo_cancel.cancel();
        for (_, core) in &self.pods {
            core.cancel.cancel();
        }
        let stops = self
            .pods
            .iter()
            .map(|(_, c)| dataplane::stop_master(&c.master));
        futures::future::join_all(stops).await;
        let namespaces = self.namespaces.clone();
        let _ = tokio::task::spawn_blocking(move || {
            for ns in namespaces {
                netns::delete_netns(&ns);
            }
        })
        .await;
        let janitor = self
            .janitor
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(mut j) = janitor {
            let _ = tokio::task::spawn_blocking(move || j.finish()).await;
        }
    }

    /// Stops everything: HAProxy processes killed and reaped, namespaces deleted, janitor ended.
    ///
    /// # Panics
    /// With [`spec::SpecCheck::Enforce`], when a pod recorded a spec violation (after stopping;
    /// not when already panicking).
    pub async fn shutdown(mut self) {
        self.shutdown_inner().await;
        self.enforce_spec();
    }

    /// Whether the pods' exchanges are held to the published spec.
    pub fn spec_check(&self) -> spec::SpecCheck {
        self.spec_check
    }

    /// Every spec violation the pods recorded so far (pod order, then time).
    pub fn spec_violations(&self) -> Vec<spec::Violation> {
        self.spec_logs(None, spec::PodSpecLog::violations)
    }

    /// [`Sandbox::spec_violations`], forgotten by the pods: for a test that planted them.
    pub fn take_spec_violations(&self) -> Vec<spec::Violation> {
        self.spec_logs(None, spec::PodSpecLog::take)
    }

    /// The spec violations pod `name` recorded so far (empty for an unknown pod).
    pub fn pod_spec_violations(&self, name: &str) -> Vec<spec::Violation> {
        self.spec_logs(Some(name), spec::PodSpecLog::violations)
    }

    /// [`Sandbox::pod_spec_violations`], forgotten by the pod.
    pub fn take_pod_spec_violations(&self, name: &str) -> Vec<spec::Violation> {
        self.spec_logs(Some(name), spec::PodSpecLog::take)
    }

    /// `read` of each pod's spec log (pod `name`'s only, when named), in pod order.
    fn spec_logs(
        &self,
        name: Option<&str>,
        read: fn(&spec::PodSpecLog) -> Vec<spec::Violation>,
    ) -> Vec<spec::Violation> {
        self.pods
            .iter()
            .filter(|(i, _)| name.is_none_or(|n| i.name == n))
            .flat_map(|(_, c)| read(&c.spec))
            .collect()
    }

    /// Panics with the report when enforcing and a violation was recorded (once: they are taken).
    fn enforce_spec(&self) {
        if self.spec_check != spec::SpecCheck::Enforce || std::thread::panicking() {
            return;
        }
        let found = self.take_spec_violations();
        if !found.is_empty() {
            panic!(
                "the sandbox's pods saw exchanges that break the Data Plane API spec ({}): {}",
                spec::SPEC_DIR,
                spec::report(&found)
            );
        }
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        if self.closed {
            return;
        }
        self.echo_cancel.cancel();
        for (_, core) in &self.pods {
            core.cancel.cancel();
            if let Ok(mut m) = core.master.try_lock()
                && let Some(mut master) = m.take()
            {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(master.pid as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
                let _ = master.child.start_kill();
            }
        }
        for ns in &self.namespaces {
            netns::delete_netns(ns);
        }
        // The janitor's own clean-up (at end of input) kills whatever is left.
        drop(
            self.janitor
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take(),
        );
        self.enforce_spec();
    }
}
