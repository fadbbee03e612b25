//! One pod's Data Plane API v3 stand-in plus the sandbox test hooks under `/_sandbox/`, served
//! by our own accept loop (hyper) so that a scripted `drop` fault can close a connection
//! without an answer. What it answers is held to what a real dataplaneapi 3.4 answered
//! (`shared/reference/dataplaneapi/observed-v3.4.md`) and to the published spec (`v32-spec.json`);
//! `../README.md` lists the operations served and the deviations left.
//!
//! ```text
//!  raw.rs       configuration/version, configuration/raw
//!  reloads.rs   the reload agent, reloads[/{id}]
//!  storage.rs   storage/{maps,ssl_certificates,general,ssl_crt_lists}, runtime/ssl_ca_files
//!  config/      configuration objects (a table of kinds), transactions
//!  runtime/     what HAProxy loaded (runtime views), runtime servers, runtime certificates
//!  info.rs      info, health, runtime/info, basic auth
//!  hooks.rs     /_sandbox/: faults, request log, drift, kill, credentials
//! ```
//!
//! State: the file on disk (`GET raw`), the API's in-memory configuration and version (object
//! reads and writes, `GET version`) and the last-known-good file. They agree except after a failed
//! reload: the file is reverted, memory and version keep the failed configuration.

mod certinfo;
mod config;
mod hooks;
mod info;
mod raw;
mod reloads;
mod runtime;
mod storage;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Request};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hyper_util::rt::TokioIo;
use md5::Digest as _;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;

use super::haproxy::{self, Master, PodFs, View};

pub use config::{SpecExtract, SpecModel, spec_extract, spec_models, spec_operation};
pub use hooks::MAX_RECORDED_REQUESTS;

/// Called with the pod name when `POST /_sandbox/kill` made a pod disappear (e.g. to delete its
/// Pod object).
pub type KillHook = Arc<dyn Fn(String) + Send + Sync>;

/// Settings shared by every pod of a sandbox.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Basic-auth user.
    pub username: String,
    /// Basic-auth password.
    pub password: String,
    /// Reload batching period (dataplaneapi `--reload-delay`, default 5 s; ecosystem.md §A.3).
    pub reload_delay: Duration,
    /// `haproxy` binary.
    pub haproxy_bin: String,
    /// Loopback mode: refuse renders naming outbound targets (safety.rs).
    pub loopback: bool,
    /// Stand-in pods validate pushed configurations with `haproxy -c`, as the real Dataplane
    /// API does (false: they take any configuration, so a fan-out benchmark measures the
    /// controller, not 100 concurrent `haproxy -c` runs).
    pub stand_in_validate: bool,
    /// Whether every exchange is held to the published spec (`super::spec`).
    pub spec_check: super::spec::SpecCheck,
}

pub use crate::sandbox::control::RequestRecord;

/// Configuration state serialised by one lock (client-native's commit mutex).
#[derive(Debug)]
pub(crate) struct CfgState {
    /// Last file HAProxy loaded successfully (copied back after a failed reload).
    lkg: String,
    /// The API's in-memory configuration (body, no header lines).
    memory: String,
    /// Stand-ins: what HAProxy would have loaded (runtime views).
    loaded: runtime::Loaded,
}

/// Everything one pod's endpoint works with.
pub struct PodCore {
    /// Pod name.
    pub name: String,
    /// The pod's files.
    pub fs: PodFs,
    /// How HAProxy (and `haproxy -c`) see the pod.
    pub view: View,
    /// Stand-in pod: no HAProxy process.
    pub stand_in: bool,
    /// Delay before every answer (stand-ins).
    pub answer_delay: Duration,
    settings: Arc<Settings>,
    /// The running master (None for stand-ins or once killed).
    pub master: tokio::sync::Mutex<Option<Master>>,
    cfg: tokio::sync::Mutex<CfgState>,
    version: AtomicU64,
    transactions: config::Transactions,
    txn_counter: AtomicU64,
    reloads: Mutex<reloads::ReloadAgent>,
    runtime_servers: runtime::RuntimeServers,
    faults: Mutex<hooks::Faults>,
    requests: Mutex<Vec<RequestRecord>>,
    /// Cancelled on shutdown or kill.
    pub cancel: CancellationToken,
    killed: AtomicBool,
    on_kill: Option<KillHook>,
    started: Instant,
    /// Basic-auth (user, password) this pod accepts; starts as the sandbox's, replaced by
    /// `POST /_sandbox/credentials` (a rotated password, as a restarted sidecar would take it).
    credentials: std::sync::RwLock<(String, String)>,
    /// `show info`'s `Version` of the pod's HAProxy (`haproxy -v`), read once.
    haproxy_version: tokio::sync::OnceCell<String>,
    /// The spec check of this pod's exchanges (`super::spec`).
    pub(crate) spec: super::spec::PodSpecLog,
}

debug_fields!(PodCore { name });

/// The `# _version=N` line of a stored configuration (ecosystem.md §A.1).
pub fn parse_version(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix("# _version="))
        .and_then(|v| v.trim().parse().ok())
}

/// The body without its `# _version=` / `# _md5hash=` header lines.
pub fn strip_meta(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for l in text.lines() {
        let t = l.trim();
        if t.starts_with("# _version=") || t.starts_with("# _md5hash=") {
            continue;
        }
        out.push_str(l);
        out.push('\n');
    }
    out
}

/// The stored form the API writes: `# _md5hash=<md5 of the body>`, `# _version=N`, the body.
pub fn with_version(body: &str, v: u64) -> String {
    let body = strip_meta(body);
    format!(
        "# _md5hash={}\n# _version={v}\n{body}",
        md5_hex(body.as_bytes())
    )
}

/// Hex md5 (`# _md5hash=`, `Configuration-Checksum`).
pub fn md5_hex(bytes: &[u8]) -> String {
    hex::encode(md5::Md5::digest(bytes))
}

/// `{code, message}` error body (ecosystem.md §A.2: `code` mirrors the HTTP status).
pub fn error(status: u16, message: impl Into<String>) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        code,
        axum::Json(json!({"code": status, "message": message.into()})),
    )
        .into_response()
}

/// The real API's 409 message for a stale version.
pub(crate) fn version_mismatch(current: u64, given: u64) -> String {
    format!(
        "version mismatch: version in configuration file is {current}, given version is {given}"
    )
}

/// The answer with a `Reload-ID` header.
pub(crate) fn with_reload_id(mut r: Response, id: &str) -> Response {
    if let Ok(v) = HeaderValue::from_str(id) {
        r.headers_mut().insert("reload-id", v);
    }
    r
}

pub(crate) fn qbool(q: &HashMap<String, String>, k: &str) -> bool {
    q.get(k).is_some_and(|v| v == "true" || v == "1")
}

impl PodCore {
    #[allow(clippy::too_many_arguments)]
    /// Creates the core of a pod whose `haproxy.cfg` is already written at version 1.
    pub(crate) fn new(
        name: String,
        fs: PodFs,
        view: View,
        stand_in: bool,
        answer_delay: Duration,
        settings: Arc<Settings>,
        master: Option<Master>,
        on_kill: Option<KillHook>,
    ) -> anyhow::Result<Arc<PodCore>> {
        let text = std::fs::read_to_string(fs.config())?;
        let version = parse_version(&text).unwrap_or(1);
        let credentials = (settings.username.clone(), settings.password.clone());
        let memory = strip_meta(&text);
        let loaded = runtime::Loaded::capture(&fs.etc, &memory);
        let spec = super::spec::PodSpecLog::new(&name, settings.spec_check);
        Ok(Arc::new(PodCore {
            name,
            fs,
            view,
            stand_in,
            answer_delay,
            settings,
            master: tokio::sync::Mutex::new(master),
            cfg: tokio::sync::Mutex::new(CfgState {
                lkg: text,
                memory,
                loaded,
            }),
            version: AtomicU64::new(version),
            transactions: config::Transactions::default(),
            txn_counter: AtomicU64::new(0),
            reloads: Mutex::new(reloads::ReloadAgent::default()),
            runtime_servers: runtime::RuntimeServers::default(),
            faults: Mutex::new(hooks::Faults::default()),
            requests: Mutex::new(Vec::new()),
            cancel: CancellationToken::new(),
            killed: AtomicBool::new(false),
            on_kill,
            started: Instant::now(),
            credentials: std::sync::RwLock::new(credentials),
            haproxy_version: tokio::sync::OnceCell::new(),
            spec,
        }))
    }

    /// Current (in-memory) configuration version.
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::SeqCst)
    }

    /// Transactions still kept (`in_progress`, `outdated` or `failed`: not committed or
    /// deleted), what a real API keeps under `--transaction-dir` (dataplaneapi#339).
    pub fn open_transactions(&self) -> usize {
        self.transactions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len()
    }

    /// Replaces the basic-auth credentials this pod accepts (from the next request on).
    pub fn set_credentials(&self, username: &str, password: &str) {
        *self
            .credentials
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            (username.to_owned(), password.to_owned());
    }

    /// Whether `POST /_sandbox/kill` was called.
    pub fn is_killed(&self) -> bool {
        self.killed.load(Ordering::SeqCst)
    }

    fn read_config(&self) -> String {
        std::fs::read_to_string(self.fs.config()).unwrap_or_default()
    }

    fn write_config(&self, text: &str) -> std::io::Result<()> {
        write_atomic(&self.fs.config(), text.as_bytes())
    }

    /// Writes `body` as the configuration at `version`: the file (with its header lines), the
    /// in-memory configuration and the version.
    pub(crate) fn store_config(
        &self,
        st: &mut CfgState,
        body: &str,
        version: u64,
    ) -> std::io::Result<()> {
        self.write_config(&with_version(body, version))?;
        st.memory = strip_meta(body);
        self.version.store(version, Ordering::SeqCst);
        Ok(())
    }

    /// Validates a candidate with `haproxy -c` (and, in loopback mode, the outbound refusal);
    /// the message as the real API words it (`validation error: exit status 1: [ALERT] ...`).
    pub(crate) async fn validate(&self, text: &str) -> Result<(), String> {
        if self.stand_in && !self.settings.stand_in_validate {
            return Ok(());
        }
        if self.settings.loopback {
            super::safety::check_outbound(text)?;
        }
        haproxy::validate(&self.settings.haproxy_bin, &self.fs, &self.view, text)
            .await
            .map_err(|e| format!("validation error: {e}"))
    }

    /// The `Configuration-Version` of an answer: the transaction's version when the request
    /// names one (0 for an unknown one), else the current version.
    fn answer_version(&self, query: &str) -> u64 {
        let txn = query
            .split('&')
            .find_map(|kv| kv.strip_prefix("transaction_id="));
        match txn {
            Some(id) => self
                .transactions
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(id)
                .map_or(0, |t| t.version),
            None => self.version(),
        }
    }

    /// Kills the pod: HAProxy stopped, endpoint closed, kill hook called.
    pub(crate) async fn kill(self: &Arc<Self>) {
        self.killed.store(true, Ordering::SeqCst);
        self.cancel.cancel();
        stop_master(&self.master).await;
        if let Some(hook) = &self.on_kill {
            hook(self.name.clone());
        }
    }
}

/// Stops a master: SIGTERM (workers follow), bounded wait, then SIGKILL; reaps it.
pub(crate) async fn stop_master(m: &tokio::sync::Mutex<Option<Master>>) {
    let Some(mut master) = m.lock().await.take() else {
        return;
    };
    let workers = haproxy::show_proc(&master.sock)
        .await
        .map(|p| p.workers)
        .unwrap_or_default();
    let pid = nix::unistd::Pid::from_raw(master.pid as i32);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    if tokio::time::timeout(Duration::from_secs(3), master.child.wait())
        .await
        .is_err()
    {
        let _ = master.child.kill().await;
    }
    for w in workers {
        for _ in 0..60 {
            if !super::netns::pid_alive(w) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if super::netns::pid_alive(w) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(w as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// Writes a file atomically (temp + rename), as client-native's storage does (renameio).
pub fn write_atomic(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_file_name(format!(
        ".{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("f")
    ));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

#[derive(Debug)]
struct Dropped;
impl std::fmt::Display for Dropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("connection dropped by a scripted fault")
    }
}
impl std::error::Error for Dropped {}

/// A path the stand-in does not route: 501 when the spec lists it, else 404.
async fn unserved(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    config::unserved(&method, uri.path())
}

/// The axum router of one pod.
fn router(core: Arc<PodCore>) -> Router {
    let v3 = Router::new()
        .merge(info::routes())
        .merge(raw::routes())
        .merge(storage::routes())
        .merge(config::routes())
        .merge(runtime::routes())
        .fallback(unserved)
        .layer(axum::middleware::from_fn_with_state(
            core.clone(),
            info::auth,
        ));
    let sandbox = Router::new()
        .route(
            "/_sandbox/faults",
            post(hooks::add_fault)
                .get(hooks::list_faults)
                .delete(hooks::clear_faults),
        )
        .route(
            "/_sandbox/requests",
            get(hooks::get_requests).delete(hooks::clear_requests),
        )
        .route("/_sandbox/bump-version", post(hooks::bump_version))
        .route("/_sandbox/edit-config", post(hooks::edit_config))
        .route("/_sandbox/edit-file", post(hooks::edit_file))
        .route("/_sandbox/kill", post(hooks::kill))
        .route("/_sandbox/credentials", post(hooks::set_credentials))
        .route(
            "/_sandbox/spec-violations",
            get(super::spec::list).delete(super::spec::clear),
        );
    v3.merge(sandbox)
        .layer(DefaultBodyLimit::max(1 << 30))
        .with_state(core)
}

/// One exchange, held to the published spec when the pod's check is on (`super::spec`): the
/// request and the answer are buffered and checked after the answer is made.
async fn handle(
    core: Arc<PodCore>,
    router: Router,
    req: Request<hyper::body::Incoming>,
) -> Result<Response, Dropped> {
    let req = req.map(Body::new);
    if !core.spec.enabled() || req.uri().path().starts_with("/_sandbox/") {
        return answer(core, router, req).await;
    }
    let (req, seen) = super::spec::capture_request(req)
        .await
        .map_err(|_| Dropped)?;
    match answer(core.clone(), router, req).await {
        Ok(resp) => {
            let (resp, seen_answer) = super::spec::capture_answer(resp).await;
            core.spec.record(&seen, seen_answer.as_ref());
            Ok(resp)
        }
        Err(d) => {
            core.spec.record(&seen, None);
            Err(d)
        }
    }
}

async fn answer(core: Arc<PodCore>, router: Router, req: Request) -> Result<Response, Dropped> {
    if core.is_killed() {
        return Err(Dropped);
    }
    let seen = hooks::Seen::of(&req);
    if !seen.is_sandbox_hook() {
        if !core.answer_delay.is_zero() {
            tokio::time::sleep(core.answer_delay).await;
        }
        if let Some(scripted) = core.scripted_fault(&seen).await {
            // A scripted error carries the version header too, as every real answer does.
            return scripted.map(|mut r| {
                if let Ok(v) = HeaderValue::from_str(&core.answer_version(&seen.query).to_string())
                {
                    r.headers_mut().entry("configuration-version").or_insert(v);
                }
                r
            });
        }
    }
    let resp = router.oneshot(req).await;
    let mut resp = match resp {
        Ok(r) => r,
        Err(e) => match e {},
    };
    if seen.path.starts_with("/v3/") {
        // ConfigVersionMiddleware: on every answer, errors included.
        let v = core.answer_version(&seen.query);
        if let Ok(v) = HeaderValue::from_str(&v.to_string()) {
            resp.headers_mut()
                .entry("configuration-version")
                .or_insert(v);
        }
    }
    core.record(&seen, resp.status().as_u16());
    Ok(resp)
}

/// Serves the pod's endpoint on `listener` until the pod is cancelled.
pub(crate) async fn serve(core: Arc<PodCore>, listener: tokio::net::TcpListener) {
    let router = router(core.clone());
    loop {
        let accepted = tokio::select! {
            _ = core.cancel.cancelled() => return,
            r = listener.accept() => r,
        };
        let Ok((stream, _)) = accepted else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let core = core.clone();
        let router = router.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req| {
                let core = core.clone();
                let router = router.clone();
                async move { handle(core, router, req).await }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}
