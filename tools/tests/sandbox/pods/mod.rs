//! Sandbox pod and Dataplane stand-in tests, by role:
//!
//! ```text
//!  raw.rs          observed rows: raw configuration, version, auth, common headers
//!  reloads.rs      observed rows: reload ids and the failed-reload state
//!  storage.rs      observed rows: maps, certificates, general files, CA files
//!  transactions.rs observed rows: transactions, runtime server fields, object bodies
//!  objects.rs      the spec's objects: fields accepted or refused 501, global/defaults
//!  runtime.rs      what HAProxy loaded: runtime views, runtime servers
//!  traffic.rs      renders served through HAProxy, network safety
//!  hooks.rs        /_sandbox/ faults, request log, drift, curl -d
//!  lifecycle.rs    sandboxes started, killed and cleaned up
//! ```
//!
//! Most tests borrow a pod of one of two shared sandboxes (real HAProxy pods, stand-in pods),
//! each on its own runtime on a background thread, so HAProxy starts once per test binary; a
//! borrowed pod is [`Dp::reset`] to a known state first. Bounded waits only; no timed
//! assertions.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod cli;
mod hooks;
mod lifecycle;
mod objects;
mod raw;
mod reloads;
mod runtime;
mod storage;
mod traffic;
mod transactions;

use std::path::PathBuf;
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::Duration;

use haptic_tools::sandbox::pods::{PodInfo, Sandbox, SandboxConfig};
use serde_json::Value;

pub const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/corpus/haproxy");
pub const RENDERS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/corpus/renders");
pub const REFERENCE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/reference/dataplaneapi"
);

/// A shared sandbox and which of its pods are free.
struct Pool {
    _rt: tokio::runtime::Runtime,
    sandbox: Sandbox,
    free: Mutex<Vec<usize>>,
    cv: Condvar,
}

impl Pool {
    fn start(cfg: SandboxConfig) -> Pool {
        // Built on a plain thread: the tests calling this run inside their own runtimes.
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("runtime");
            let sandbox = rt.block_on(Sandbox::start(cfg)).expect("sandbox starts");
            let n = sandbox.pods().len();
            Pool {
                _rt: rt,
                sandbox,
                free: Mutex::new((0..n).collect()),
                cv: Condvar::new(),
            }
        })
        .join()
        .expect("sandbox thread")
    }

    fn borrow(&'static self) -> BorrowedPod {
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(idx) = free.pop() {
                return BorrowedPod {
                    pool: self,
                    idx,
                    pod: self.sandbox.pods()[idx].clone(),
                };
            }
            free = self.cv.wait(free).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// A borrowed pod and its client, [`Dp::reset`] to a known state.
    async fn borrow_reset(&'static self) -> (BorrowedPod, Dp) {
        let l = self.borrow();
        let dp = Dp::new(&l.pod);
        dp.reset().await;
        (l, dp)
    }
}

/// Exclusive use of one shared pod for the duration of a test (given back on drop).
pub struct BorrowedPod {
    pool: &'static Pool,
    idx: usize,
    pub pod: PodInfo,
}

impl Drop for BorrowedPod {
    fn drop(&mut self) {
        // The shared sandbox never ends, so each borrow answers for its pod's spec violations.
        let found = self.pool.sandbox.take_pod_spec_violations(&self.pod.name);
        self.pool
            .free
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(self.idx);
        self.pool.cv.notify_one();
        if !found.is_empty() && !std::thread::panicking() {
            panic!("{}", haptic_tools::sandbox::pods::spec::report(&found));
        }
    }
}

/// The reload delay of the shared sandboxes.
pub const RELOAD_DELAY: Duration = Duration::from_millis(300);

/// A pod with a real HAProxy, reset to a known state.
pub async fn real_pod() -> (BorrowedPod, Dp) {
    static POOL: OnceLock<Pool> = OnceLock::new();
    let pool = POOL.get_or_init(|| {
        Pool::start(SandboxConfig {
            pods: 4,
            reload_delay: RELOAD_DELAY,
            ..SandboxConfig::default()
        })
    });
    pool.borrow_reset().await
}

/// A stand-in pod (no HAProxy; `haproxy -c` validation on), reset to a known state.
pub async fn stand_in_pod() -> (BorrowedPod, Dp) {
    static POOL: OnceLock<Pool> = OnceLock::new();
    let pool = POOL.get_or_init(|| {
        Pool::start(SandboxConfig {
            pods: 0,
            stand_in_pods: 2,
            reload_delay: RELOAD_DELAY,
            ..SandboxConfig::default()
        })
    });
    pool.borrow_reset().await
}

/// A sandbox of its own with one stand-in pod that validates nothing (`stand_in_validate:
/// false`, the fan-out benchmark's set-up), and a client for that pod.
pub async fn unvalidated_stand_in() -> (Sandbox, Dp) {
    let sb = Sandbox::start(SandboxConfig {
        pods: 0,
        stand_in_pods: 1,
        stand_in_validate: false,
        reload_delay: Duration::from_millis(50),
        ..SandboxConfig::default()
    })
    .await
    .expect("start");
    let dp = Dp::new(&sb.pods()[0]);
    (sb, dp)
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client")
}

/// A request body.
pub enum Body<'a> {
    None,
    Text(&'a str),
    Json(Value),
    /// A multipart `file_upload` part: file name and content.
    File(&'a str, Vec<u8>),
}

/// An answer, read whole.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub text: String,
}

impl Answer {
    /// Reads a response whole (a body that cannot be read is empty).
    async fn read(r: reqwest::Response) -> Answer {
        Answer {
            status: r.status().as_u16(),
            headers: r.headers().clone(),
            text: r.text().await.unwrap_or_default(),
        }
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or(Value::Null)
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The `Reload-ID` header (panics naming the answer when missing).
    pub fn reload_id(&self) -> String {
        self.header("reload-id")
            .unwrap_or_else(|| panic!("no Reload-ID: {self:?}"))
            .to_owned()
    }

    /// `message` of an error body.
    pub fn message(&self) -> String {
        self.json()["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }
}

/// A break of the published spec a request makes on purpose ([`Dp::call_off_spec`]): the
/// operation the validator matched (`operationId`) and the field it names.
pub type OffSpec<'a> = (&'a str, &'a str);

/// The operation of an [`OffSpec`] whose path the spec does not list.
pub const NO_OPERATION: &str = "(no operation)";

/// A Dataplane client for one pod. Paths without a leading `/` are under
/// `/v3/services/haproxy/`.
pub struct Dp {
    pub c: reqwest::Client,
    pub base: String,
    pub user: String,
    pub pass: String,
}

impl Dp {
    pub fn new(pod: &PodInfo) -> Dp {
        Dp {
            c: client(),
            base: pod.dataplane_url.clone(),
            user: "admin".into(),
            pass: "haptic-sandbox".into(),
        }
    }

    pub fn url(&self, path: &str) -> String {
        if path.starts_with('/') {
            format!("{}{path}", self.base)
        } else {
            format!("{}/v3/services/haproxy/{path}", self.base)
        }
    }

    /// One request with the pod's credentials.
    pub async fn call(&self, method: &str, path: &str, body: Body<'_>) -> Answer {
        let m = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let mut req = self
            .c
            .request(m, self.url(path))
            .basic_auth(&self.user, Some(&self.pass));
        req = match body {
            Body::None => req,
            Body::Text(t) => req.header("content-type", "text/plain").body(t.to_owned()),
            Body::Json(v) => req.json(&v),
            Body::File(name, bytes) => req.multipart(reqwest::multipart::Form::new().part(
                "file_upload",
                reqwest::multipart::Part::bytes(bytes).file_name(name.to_owned()),
            )),
        };
        let r = req
            .send()
            .await
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        Answer::read(r).await
    }

    /// [`Dp::call`] for a request that breaks the published spec on purpose (a row of the
    /// observed table about bad input: the real API's answer to it is what the test pins down).
    /// `expected` names each break, as the pod's validator must name it: the operation
    /// (`operationId`, [`NO_OPERATION`] for a path the spec does not list) and the field
    /// (`/parameters/query/version`, `/body/admin_state`). Asserts that the validator saw
    /// exactly these on this request's side, and nothing else since the pod's violations were
    /// last taken; then they are forgotten (so the borrow's end does not fail the test for them).
    /// Panics naming what is missing or unexpected.
    pub async fn call_off_spec(
        &self,
        method: &str,
        path: &str,
        body: Body<'_>,
        expected: &[OffSpec<'_>],
    ) -> Answer {
        assert!(
            !expected.is_empty(),
            "{method} {path}: an off-spec call names what it breaks (else use call)"
        );
        let r = self.call(method, path, body).await;
        self.take_off_spec(method, path, expected).await;
        r
    }

    /// Takes the pod's violations (`DELETE /_sandbox/spec-violations`) and holds them to
    /// `expected` for the request `method path` (see [`Dp::call_off_spec`]).
    async fn take_off_spec(&self, method: &str, path: &str, expected: &[OffSpec<'_>]) {
        let url = reqwest::Url::parse(&self.url(path)).expect("url");
        let line = match url.query() {
            Some(q) => format!("{method} {}?{q}", url.path()),
            None => format!("{method} {}", url.path()),
        };
        let taken: Value = self
            .c
            .delete(format!("{}/_sandbox/spec-violations", self.base))
            .send()
            .await
            .expect("DELETE /_sandbox/spec-violations")
            .json()
            .await
            .expect("the violations taken, as JSON");
        let seen: Vec<&Value> = taken["violations"]
            .as_array()
            .expect("violations")
            .iter()
            .collect();
        let key = |v: &Value| -> (String, String) {
            (
                v["operation"]["id"]
                    .as_str()
                    .unwrap_or(NO_OPERATION)
                    .to_owned(),
                v["field"].as_str().unwrap_or_default().to_owned(),
            )
        };
        let ours = |v: &Value| v["side"] == "request" && v["request"] == line.as_str();
        let unexpected: Vec<String> = seen
            .iter()
            .filter(|v| {
                let (op, field) = key(v);
                !ours(v) || !expected.contains(&(op.as_str(), field.as_str()))
            })
            .map(|v| v.to_string())
            .collect();
        let missing: Vec<&OffSpec<'_>> = expected
            .iter()
            .filter(|(op, field)| {
                !seen
                    .iter()
                    .any(|v| ours(v) && key(v) == ((*op).to_owned(), (*field).to_owned()))
            })
            .collect();
        assert!(
            unexpected.is_empty() && missing.is_empty(),
            "{line}: the spec validator did not see exactly the expected breaks\n\
             missing (operation, field): {missing:?}\nunexpected: {unexpected:#?}"
        );
    }

    pub async fn get(&self, path: &str) -> Answer {
        self.call("GET", path, Body::None).await
    }

    pub async fn delete(&self, path: &str) -> Answer {
        self.call("DELETE", path, Body::None).await
    }

    /// `PUT path` with a `text/plain` body.
    pub async fn put_text(&self, path: &str, text: &str) -> Answer {
        self.call("PUT", path, Body::Text(text)).await
    }

    /// `PUT storage/ssl_certificates/site.pem<query>`: [`reissued_pem`].
    pub async fn put_reissued_site_pem(&self, query: &str) -> Answer {
        let path = format!("storage/ssl_certificates/site.pem{query}");
        self.put_text(&path, &reissued_pem()).await
    }

    /// `POST .../<kind>` multipart: a new storage file.
    pub async fn upload(&self, kind: &str, name: &str, bytes: impl Into<Vec<u8>>) -> Answer {
        self.call("POST", kind, Body::File(name, bytes.into()))
            .await
    }

    /// `POST storage/maps`: render 02-maps' `hosts.map`.
    pub async fn upload_hosts_map(&self) -> Answer {
        self.upload(
            "storage/maps",
            "hosts.map",
            render("02-maps", "maps/hosts.map"),
        )
        .await
    }

    /// `POST storage/ssl_certificates`: render 05-tls' `site.pem`, stored as `name`.
    pub async fn upload_site_pem(&self, name: &str) -> Answer {
        self.upload(
            "storage/ssl_certificates",
            name,
            render("05-tls", "ssl/site.pem"),
        )
        .await
    }

    /// `POST runtime/ssl_ca_files`: render 07-ca's `clients-ca.pem`.
    pub async fn upload_clients_ca(&self) -> Answer {
        self.upload(
            "runtime/ssl_ca_files",
            "clients-ca.pem",
            render("07-ca", "ca/clients-ca.pem"),
        )
        .await
    }

    /// `method path` conditional on the current version (`?version=N` added, read first).
    pub async fn at_version(&self, method: &str, path: &str, body: Body<'_>) -> Answer {
        let v = self.version().await;
        let sep = if path.contains('?') { '&' } else { '?' };
        self.call(method, &format!("{path}{sep}version={v}"), body)
            .await
    }

    pub async fn version(&self) -> u64 {
        self.get("configuration/version")
            .await
            .json()
            .as_u64()
            .expect("a bare number")
    }

    /// The file on disk (`GET .../raw`).
    pub async fn raw(&self) -> String {
        self.get("configuration/raw").await.text
    }

    /// `POST .../raw` at the current version, with extra query `flags` (`&skip_reload=true`).
    pub async fn push(&self, cfg: &str, flags: &str) -> Answer {
        let v = self.version().await;
        let path = format!("configuration/raw?version={v}{flags}");
        self.call("POST", &path, Body::Text(cfg)).await
    }

    /// [`Dp::push`] of `cfg` (no flags), then [`Dp::wait_reload`] on the reload it started.
    pub async fn push_and_wait(&self, cfg: &str) -> Value {
        let id = self.push(cfg, "").await.reload_id();
        self.wait_reload(&id).await
    }

    /// Polls a reload until it is no longer in progress (bounded: 200 polls of 50 ms).
    pub async fn wait_reload(&self, id: &str) -> Value {
        for _ in 0..200 {
            let r = self.get(&format!("reloads/{id}")).await.json();
            if r["status"] != "in_progress" {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("reload {id} still in progress after 10 s");
    }

    /// Asserts that `r` is a 202 whose reload (its `Reload-ID`) then succeeds.
    pub async fn assert_reloaded(&self, r: &Answer) {
        assert_eq!(r.status, 202, "{}", r.text);
        assert_eq!(
            self.wait_reload(&r.reload_id()).await["status"],
            "succeeded"
        );
    }

    /// A `/_sandbox/` hook (no auth).
    pub async fn hook(&self, path: &str, body: Value) -> Answer {
        let r = self
            .c
            .post(format!("{}{path}", self.base))
            .json(&body)
            .send()
            .await
            .expect("sandbox hook");
        Answer::read(r).await
    }

    /// The `Succeeded` reloads the pod lists.
    pub async fn reload_count(&self) -> usize {
        let list = self.get("reloads").await.json();
        list.as_array()
            .expect("reloads")
            .iter()
            .filter(|r| r["status"] == "succeeded")
            .count()
    }

    /// A known state: no faults, no reload pending, no transactions, render 01-basic loaded, no
    /// stored files.
    pub async fn reset(&self) {
        let _ = self
            .c
            .delete(format!("{}/_sandbox/faults", self.base))
            .send()
            .await;
        // A reload a previous test left queued would land in this one (bounded wait).
        for _ in 0..200 {
            let list = self.get("reloads").await.json();
            let pending = list
                .as_array()
                .into_iter()
                .flatten()
                .any(|r| r["status"] == "in_progress");
            if !pending {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        for t in self
            .get("transactions")
            .await
            .json()
            .as_array()
            .into_iter()
            .flatten()
        {
            let id = t["id"].as_str().unwrap_or_default();
            self.delete(&format!("transactions/{id}")).await;
        }
        let r = self
            .push(&render("01-basic", "haproxy.cfg"), "&force_reload=true")
            .await;
        assert_eq!(r.status, 201, "reset push: {}", r.text);
        for kind in [
            "storage/maps",
            "storage/ssl_certificates",
            "storage/general",
            "storage/ssl_crt_lists",
            "runtime/ssl_ca_files",
        ] {
            for f in self.get(kind).await.json().as_array().into_iter().flatten() {
                let name = f["storage_name"].as_str().unwrap_or_default();
                if !name.starts_with('@') {
                    // skip_reload only where the spec declares it (certificates, crt-lists);
                    // the other deletes never reload.
                    let flags = if kind.ends_with("ssl_certificates") || kind.ends_with("crt_lists")
                    {
                        "?skip_reload=true"
                    } else {
                        ""
                    };
                    let d = self.delete(&format!("{kind}/{name}{flags}")).await;
                    assert!(d.status < 300, "reset delete {kind}/{name}: {d:?}");
                }
            }
        }
    }
}

pub fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

pub fn render(name: &str, file: &str) -> String {
    read(&format!("{RENDERS}/{name}/{file}"))
}

/// The certificate of render 05-tls reissued (same names, serial [`REISSUED_SERIAL`]).
pub fn reissued_pem() -> String {
    read(&format!(
        "{}/../tests/integration/deployer/fixtures/site-reissued.pem",
        env!("CARGO_MANIFEST_DIR")
    ))
}

/// The serial of render 05-tls' `site.pem`.
pub const SITE_SERIAL: &str = "6D480BD9A95DF8A7594DDA5A5D4AB7DAEDF11939";
/// The serial of [`reissued_pem`].
pub const REISSUED_SERIAL: &str = "5EC0DD0000000000000000000000000000000001";

pub fn corpus_dir(sub: &str) -> PathBuf {
    PathBuf::from(CORPUS).join(sub)
}

/// A real HTTP(S) request with curl to the pod's traffic address: the body.
pub fn curl(pod: &PodInfo, scheme: &str, port: u16, host: Option<&str>, path: &str) -> String {
    run_curl(curl_command(pod, scheme, port, host, path))
}

/// A real HTTP request with curl to the pod's traffic address: the status code.
pub fn curl_status(pod: &PodInfo, port: u16, path: &str) -> String {
    let mut cmd = curl_command(pod, "http", port, None, path);
    cmd.args(["-o", "/dev/null", "-w", "%{http_code}"]);
    run_curl(cmd)
}

fn curl_command(
    pod: &PodInfo,
    scheme: &str,
    port: u16,
    host: Option<&str>,
    path: &str,
) -> std::process::Command {
    let mut cmd = std::process::Command::new("curl");
    cmd.args(["-sk", "--noproxy", "*", "--max-time", "5"]);
    if let Some(h) = host {
        cmd.args(["-H", &format!("Host: {h}")]);
    }
    let port = if port < 1024 {
        port + pod.port_offset
    } else {
        port
    };
    cmd.arg(format!("{scheme}://{}:{port}{path}", pod.traffic_address));
    cmd
}

fn run_curl(mut cmd: std::process::Command) -> String {
    let out = cmd.output().expect("curl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The serial (upper-case hex) of the certificate HAProxy presents on the pod's port 443.
pub fn presented_serial(pod: &PodInfo) -> String {
    let port = 443 + pod.port_offset;
    let script = format!(
        "openssl s_client -connect {}:{port} -servername site.haptic.test </dev/null 2>/dev/null | openssl x509 -noout -serial",
        pod.traffic_address
    );
    let out = std::process::Command::new("sh")
        .args(["-c", &script])
        .output()
        .expect("openssl");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .trim_start_matches("serial=")
        .to_owned()
}

pub fn md5_hex(b: &[u8]) -> String {
    haptic_tools::sandbox::pods::dataplane::md5_hex(b)
}

pub fn nix_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}

pub fn dead_pid() -> u32 {
    let mut c = std::process::Command::new("true").spawn().expect("true");
    let pid = c.id();
    c.wait().expect("wait");
    pid
}

/// Pids of every descendant of `root` (from /proc).
pub fn descendants(root: u32) -> Vec<u32> {
    let mut parent = std::collections::HashMap::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            && let Some((_, rest)) = stat.rsplit_once(')')
            && let Some(ppid) = rest
                .split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<u32>().ok())
        {
            parent.insert(pid, ppid);
        }
    }
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        out.extend(parent.iter().filter(|(_, pp)| **pp == p).map(|(c, _)| *c));
        i += 1;
    }
    out
}

/// Ends a spawned sandbox process even when an assertion fails first (SIGTERM, bounded wait,
/// SIGKILL); a process already gone (or reaped) is left alone.
pub struct Reap(pub u32);

impl Drop for Reap {
    fn drop(&mut self) {
        use haptic_tools::sandbox::pods::netns;
        use nix::sys::signal::{Signal, kill};
        let pid = nix::unistd::Pid::from_raw(self.0 as i32);
        let ours = std::fs::read(format!("/proc/{}/cmdline", self.0))
            .is_ok_and(|c| String::from_utf8_lossy(&c).contains("haptic-sandbox"));
        if !ours || !netns::pid_alive(self.0) {
            return;
        }
        let _ = kill(pid, Signal::SIGTERM);
        for _ in 0..200 {
            if !netns::pid_alive(self.0) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = kill(pid, Signal::SIGKILL);
    }
}

/// The `haptic-sandbox` binary built for these tests.
pub fn sandbox_bin() -> &'static std::path::Path {
    std::path::Path::new(env!("CARGO_BIN_EXE_haptic-sandbox"))
}

/// Starts `haptic-sandbox <args>` (stderr piped when `stderr`) and reads its one JSON line
/// (bounded: 60 s); the child, its reaper and, when piped, a thread collecting stderr.
pub fn spawn_up(
    bin: &std::path::Path,
    args: &[&str],
    wrap: Option<&[&str]>,
    stderr: bool,
) -> (
    std::process::Child,
    Reap,
    Value,
    Option<std::thread::JoinHandle<String>>,
) {
    use std::io::BufRead as _;
    let mut cmd = match wrap {
        Some(w) => {
            let mut c = std::process::Command::new(w[0]);
            c.args(&w[1..]).arg(bin);
            c
        }
        None => std::process::Command::new(bin),
    };
    if let Some(dir) = bin.parent() {
        cmd.current_dir(dir);
    }
    let mut child = cmd
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(if stderr {
            std::process::Stdio::piped()
        } else {
            std::process::Stdio::null()
        })
        .spawn()
        .expect("spawn haptic-sandbox");
    let reap = Reap(child.id());
    let stdout = child.stdout.take().expect("stdout");
    let err_log = child.stderr.take().map(|e| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = std::io::Read::read_to_string(&mut std::io::BufReader::new(e), &mut s);
            s
        })
    });
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the JSON line within 60 s");
    let up = match serde_json::from_str(&line) {
        Ok(v) => v,
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            let log = err_log
                .map(|h| h.join().unwrap_or_default())
                .unwrap_or_default();
            panic!("one JSON line on stdout, got {line:?} ({e}); stderr:\n{log}")
        }
    };
    (child, reap, up, err_log)
}
