//! One pod's Dataplane API v3 subset (ecosystem.md §A) plus the sandbox test hooks under
//! `/_sandbox/`. Served by our own accept loop (hyper) so that a scripted `drop` fault can close a
//! connection without an answer.

mod certinfo;
mod config;
mod hooks;
mod raw;
mod storage;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine as _;
use hyper_util::rt::TokioIo;
use md5::Digest as _;
use regex::Regex;
use serde::Serialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;

use super::haproxy::{self, Master, PodFs, View};

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

/// The request log keeps the newest requests only (long benchmark runs).
pub const MAX_RECORDED_REQUESTS: usize = 100_000;

pub use crate::sandbox::control::RequestRecord;

#[derive(Debug)]
struct RequestFault {
    method: Regex,
    path: Regex,
    status: Option<u16>,
    times: u32,
    used: u32,
    retry_after_s: Option<u64>,
    delay_ms: u64,
    drop: bool,
    spec: hooks::FaultSpec,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReloadFaultKind {
    Slow,
    Fail,
}

#[derive(Debug)]
struct ReloadFault {
    kind: ReloadFaultKind,
    times: u32,
    used: u32,
    delay_ms: u64,
    spec: hooks::FaultSpec,
}

#[derive(Debug, Default)]
struct Faults {
    requests: Vec<RequestFault>,
    reloads: Vec<ReloadFault>,
}

impl Faults {
    /// Faults armed (request and reload).
    fn len(&self) -> usize {
        self.requests.len() + self.reloads.len()
    }

    /// As `GET /_sandbox/faults` lists them.
    fn listed(&self) -> serde_json::Value {
        let left = |times: u32, used: u32| (times > 0).then(|| times.saturating_sub(used));
        let mut out: Vec<serde_json::Value> = self
            .requests
            .iter()
            .map(|r| r.spec.listed(left(r.times, r.used)))
            .collect();
        out.extend(
            self.reloads
                .iter()
                .map(|r| r.spec.listed(left(r.times, r.used))),
        );
        serde_json::Value::Array(out)
    }
}

/// A reload as `GET /v3/services/haproxy/reloads/{id}` reports it (ecosystem.md §A.3).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ReloadRecord {
    id: String,
    status: String,
    response: String,
    reload_timestamp: i64,
}

#[derive(Debug, Default)]
struct ReloadAgent {
    counter: u64,
    next: Option<String>,
    records: BTreeMap<String, ReloadRecord>,
}

/// Configuration state serialised by one lock (client-native's commit mutex).
#[derive(Debug)]
pub(crate) struct CfgState {
    /// Last configuration HAProxy loaded successfully (restored after a failed reload).
    lkg: String,
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
    /// Open configuration transactions (config.rs).
    transactions: config::Transactions,
    /// Counter behind transaction ids.
    txn_counter: AtomicU64,
    reloads: Mutex<ReloadAgent>,
    faults: Mutex<Faults>,
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

impl std::fmt::Debug for PodCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodCore")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// The first line of a stored configuration: `# _version=N` (ecosystem.md §A.1).
pub fn parse_version(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix("# _version="))
        .and_then(|v| v.trim().parse().ok())
}

/// The body without `# _version=` / `# _md5hash=` comment lines.
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

/// Stored form: version line, then the body.
pub fn with_version(body: &str, v: u64) -> String {
    format!("# _version={v}\n{}", strip_meta(body))
}

/// `Configuration-Checksum`: md5 of the file (ecosystem.md §A.2).
pub fn md5_hex(bytes: &[u8]) -> String {
    hex::encode(md5::Md5::digest(bytes))
}

/// `{code, message}` error body (ecosystem.md §A.2: `code` mirrors the HTTP status, v3.3.6+).
pub fn error(status: u16, message: impl Into<String>) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        code,
        axum::Json(json!({"code": status, "message": message.into()})),
    )
        .into_response()
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
        let spec = super::spec::PodSpecLog::new(&name, settings.spec_check);
        Ok(Arc::new(PodCore {
            name,
            fs,
            view,
            stand_in,
            answer_delay,
            settings,
            master: tokio::sync::Mutex::new(master),
            cfg: tokio::sync::Mutex::new(CfgState { lkg: text }),
            version: AtomicU64::new(version),
            transactions: config::Transactions::default(),
            txn_counter: AtomicU64::new(0),
            reloads: Mutex::new(ReloadAgent::default()),
            faults: Mutex::new(Faults::default()),
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

    /// Current (in-memory parser) configuration version.
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::SeqCst)
    }

    /// A fresh number for a transaction id.
    fn next_txn_id(&self) -> u64 {
        self.txn_counter.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Transactions still open (`in_progress` or `outdated`, not committed or deleted): what a
    /// real API would keep under `--transaction-dir` (dataplaneapi#339).
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

    /// The HAProxy version as `show info` reports it (`2.6.12-1+deb12u4`): the first line of
    /// `haproxy -v` of the pod's binary, read once; empty when it cannot be run.
    pub async fn haproxy_version(&self) -> String {
        self.haproxy_version
            .get_or_init(|| async {
                let out = tokio::process::Command::new(&self.settings.haproxy_bin)
                    .arg("-v")
                    .output()
                    .await;
                out.ok()
                    .and_then(|o| {
                        String::from_utf8_lossy(&o.stdout)
                            .lines()
                            .next()
                            .and_then(|l| l.strip_prefix("HAProxy version "))
                            .and_then(|r| r.split_whitespace().next())
                            .map(str::to_owned)
                    })
                    .unwrap_or_default()
            })
            .await
            .clone()
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

    /// Validates a candidate with `haproxy -c` (and, in loopback mode, the outbound refusal).
    pub(crate) async fn validate(&self, text: &str) -> Result<(), String> {
        if self.stand_in && !self.settings.stand_in_validate {
            return Ok(());
        }
        if self.settings.loopback {
            super::safety::check_outbound(text)?;
        }
        haproxy::validate(&self.settings.haproxy_bin, &self.fs, &self.view, text).await
    }

    /// Schedules a batched reload and returns its id (`YYYY-MM-DD-n`; changes before the next tick
    /// share one id; ecosystem.md §A.3).
    pub(crate) fn schedule_reload(&self) -> String {
        let mut ra = self.reloads.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(id) = &ra.next {
            return id.clone();
        }
        ra.counter += 1;
        let date = jiff::Zoned::now().date();
        let id = format!("{date}-{}", ra.counter);
        ra.next = Some(id.clone());
        ra.records.insert(
            id.clone(),
            ReloadRecord {
                id: id.clone(),
                status: "in_progress".into(),
                response: String::new(),
                reload_timestamp: 0,
            },
        );
        id
    }

    fn finish_reload(&self, id: &str, res: &Result<(), String>) {
        let mut ra = self.reloads.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(r) = ra.records.get_mut(id) {
            r.status = if res.is_ok() { "succeeded" } else { "failed" }.into();
            r.response = res.clone().err().unwrap_or_default();
            r.reload_timestamp = jiff::Timestamp::now().as_second();
        }
    }

    fn take_reload_fault(&self) -> Option<(ReloadFaultKind, u64)> {
        let mut f = self.faults.lock().unwrap_or_else(|p| p.into_inner());
        let i = f
            .reloads
            .iter()
            .position(|r| r.times == 0 || r.used < r.times)?;
        let r = &mut f.reloads[i];
        r.used += 1;
        let out = (r.kind, r.delay_ms);
        if r.times != 0 && r.used >= r.times {
            f.reloads.remove(i);
        }
        Some(out)
    }

    /// Reloads HAProxy now (caller holds the config lock). On failure the last-known-good file is
    /// copied back over `haproxy.cfg` (reload_agent.go `reloadHAProxy`; ecosystem.md §A.3); the
    /// in-memory version is left as it is, as in the real API.
    pub(crate) async fn reload_locked(&self, st: &mut CfgState) -> Result<(), String> {
        let fault = self.take_reload_fault();
        if let Some((_, delay)) = fault
            && delay > 0
        {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        self.reload_with_fault(st, fault).await
    }

    async fn reload_with_fault(
        &self,
        st: &mut CfgState,
        fault: Option<(ReloadFaultKind, u64)>,
    ) -> Result<(), String> {
        let current = self.read_config();
        let scripted_fail = matches!(fault, Some((ReloadFaultKind::Fail, _)));
        let res = if self.stand_in {
            if scripted_fail {
                Err("[ALERT] haptic-sandbox: scripted reload failure (stand-in pod)".to_string())
            } else {
                Ok(())
            }
        } else {
            if scripted_fail {
                // Make HAProxy itself reject this reload.
                let bad = format!("{current}    haptic-sandbox-scripted-reload-failure\n");
                self.write_config(&bad).map_err(|e| e.to_string())?;
            }
            let r = match self.master.lock().await.as_ref() {
                Some(_) => haproxy::reload(&self.fs, &self.view).await,
                None => Err("HAProxy is not running".to_string()),
            };
            if scripted_fail {
                self.write_config(&current).map_err(|e| e.to_string())?;
                r.and(Err("scripted reload failure did not fail".into()))
            } else {
                r
            }
        };
        match &res {
            Ok(()) => st.lkg = current,
            Err(_) => {
                let _ = self.write_config(&st.lkg);
            }
        }
        res
    }

    /// The reload agent: every reload delay, performs the pending batched reload.
    pub(crate) async fn reload_agent(self: Arc<Self>) {
        loop {
            tokio::select! {
                _ = self.cancel.cancelled() => return,
                _ = tokio::time::sleep(self.settings.reload_delay) => {}
            }
            let pending = {
                let ra = self.reloads.lock().unwrap_or_else(|p| p.into_inner());
                ra.next.clone()
            };
            let Some(id) = pending else { continue };
            // A slow reload waits without the config lock: pushes meanwhile join this batch.
            let fault = self.take_reload_fault();
            if let Some((_, delay)) = fault
                && delay > 0
            {
                tokio::select! {
                    _ = self.cancel.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_millis(delay)) => {}
                }
            }
            let mut st = self.cfg.lock().await;
            // Changes scheduled from here on get a new id.
            {
                let mut ra = self.reloads.lock().unwrap_or_else(|p| p.into_inner());
                ra.next = None;
            }
            let res = self.reload_with_fault(&mut st, fault).await;
            drop(st);
            self.finish_reload(&id, &res);
        }
    }

    fn record(&self, method: &str, path: &str, query: &str, status: u16, user_agent: &str) {
        if path.starts_with("/_sandbox/") {
            return;
        }
        let mut r = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        if r.len() >= MAX_RECORDED_REQUESTS {
            r.drain(..MAX_RECORDED_REQUESTS / 10);
        }
        r.push(RequestRecord {
            method: method.into(),
            path: path.into(),
            query: query.into(),
            status,
            at: jiff::Timestamp::now().to_string(),
            user_agent: user_agent.into(),
        });
    }

    fn match_fault(
        &self,
        method: &str,
        path: &str,
    ) -> Option<(Option<u16>, Option<u64>, u64, bool)> {
        let mut f = self.faults.lock().unwrap_or_else(|p| p.into_inner());
        let i = f.requests.iter().position(|r| {
            (r.times == 0 || r.used < r.times) && r.method.is_match(method) && r.path.is_match(path)
        })?;
        let r = &mut f.requests[i];
        r.used += 1;
        let out = (r.status, r.retry_after_s, r.delay_ms, r.drop);
        if r.times != 0 && r.used >= r.times {
            f.requests.remove(i);
        }
        Some(out)
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
    let workers = haproxy::show_proc(&master_sock_of(&master))
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

fn master_sock_of(m: &Master) -> std::path::PathBuf {
    m.sock.clone()
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

async fn auth(State(core): State<Arc<PodCore>>, req: Request, next: Next) -> Response {
    let expected = {
        let (user, pass) = &*core
            .credentials
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"))
        )
    };
    let ok = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == expected);
    if !ok {
        let mut r = error(401, "authentication failed");
        r.headers_mut().insert(
            "www-authenticate",
            HeaderValue::from_static("Basic realm=\"HAProxy Data Plane API\""),
        );
        return r;
    }
    next.run(req).await
}

async fn not_found() -> Response {
    error(404, "not found")
}

async fn info(State(core): State<Arc<PodCore>>) -> Response {
    axum::Json(json!({
        "api": {"version": "v3.2.6 haptic-sandbox", "build_date": "2026-11-30T00:00:00.000Z"},
        "system": {
            "hostname": core.name,
            "os_string": "Linux (haptic-sandbox pod)",
            "time": jiff::Timestamp::now().as_second(),
            "uptime": core.started.elapsed().as_secs(),
        }
    }))
    .into_response()
}

/// `GET /v3/services/haproxy/runtime/info`: the v3 `process_info` model (HAProxy's `show info`
/// subset: `version`, `release_date`, `pid`, `uptime`) with the runtime socket it was read from.
async fn runtime_info(State(core): State<Arc<PodCore>>) -> Response {
    let version = core.haproxy_version().await;
    let pid = core.master.lock().await.as_ref().map(|m| m.pid);
    axum::Json(json!({
        "runtimeAPI": "/var/run/haproxy/master.sock",
        "info": {
            "version": version,
            "pid": pid,
            "uptime": core.started.elapsed().as_secs(),
        }
    }))
    .into_response()
}

async fn health(State(core): State<Arc<PodCore>>) -> Response {
    // ecosystem.md §A.7: always 200.
    let up = core.stand_in
        || core
            .master
            .lock()
            .await
            .as_ref()
            .is_some_and(|m| super::netns::pid_alive(m.pid));
    axum::Json(json!({"haproxy": if up { "up" } else { "down" }})).into_response()
}

/// The axum router of one pod.
fn router(core: Arc<PodCore>) -> Router {
    let v3 = Router::new()
        .route("/v3/info", get(info))
        .route("/v3/health", get(health))
        .route("/v3/services/haproxy/runtime/info", get(runtime_info))
        .route(
            "/v3/services/haproxy/configuration/version",
            get(raw::get_version),
        )
        .route(
            "/v3/services/haproxy/configuration/raw",
            get(raw::get_raw).post(raw::post_raw),
        )
        .route("/v3/services/haproxy/reloads", get(raw::list_reloads))
        .route("/v3/services/haproxy/reloads/{id}", get(raw::get_reload))
        .merge(storage::routes())
        .merge(config::routes())
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(core.clone(), auth));
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
    let method = req.method().to_string();
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or_default().to_string();
    let user_agent = req
        .headers()
        .get(hyper::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let sandbox_path = path.starts_with("/_sandbox/");
    if !sandbox_path {
        if !core.answer_delay.is_zero() {
            tokio::time::sleep(core.answer_delay).await;
        }
        if let Some((status, retry_after, delay_ms, drop)) = core.match_fault(&method, &path) {
            if delay_ms > 0 {
                tokio::time::sleep(Duration::from_millis(delay_ms)).await;
            }
            if drop {
                core.record(&method, &path, &query, 0, &user_agent);
                return Err(Dropped);
            }
            if let Some(status) = status {
                let mut r = error(
                    status,
                    format!("haptic-sandbox scripted fault: {method} {path}"),
                );
                if let Some(s) = retry_after
                    && let Ok(v) = HeaderValue::from_str(&s.to_string())
                {
                    r.headers_mut().insert("retry-after", v);
                }
                core.record(&method, &path, &query, status, &user_agent);
                return Ok(r);
            }
        }
    }
    let resp = router.oneshot(req).await;
    let mut resp = match resp {
        Ok(r) => r,
        Err(e) => match e {},
    };
    if path.starts_with("/v3/") && !resp.headers().contains_key("configuration-version") {
        // ConfigVersionMiddleware (ecosystem.md §A.1)
        if let Ok(v) = HeaderValue::from_str(&core.version().to_string()) {
            resp.headers_mut().insert("configuration-version", v);
        }
    }
    core.record(&method, &path, &query, resp.status().as_u16(), &user_agent);
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
