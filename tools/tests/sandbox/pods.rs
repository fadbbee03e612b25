//! Sandbox pod and Dataplane endpoint tests.
//!
//! Most tests borrow a pod of one shared sandbox (its own runtime on a background thread), so the
//! HAProxy processes start once per test binary. Bounded waits only; no timed assertions.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::PathBuf;
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::Duration;

use haptic_tools::sandbox::pods::{Mode, PodInfo, Sandbox, SandboxConfig, netns};

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/corpus/haproxy");
const RENDERS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/corpus/renders");
const SHARED_PODS: usize = 4;

struct Shared {
    _rt: tokio::runtime::Runtime,
    sandbox: Sandbox,
    free: Mutex<Vec<usize>>,
    cv: Condvar,
}

fn shared() -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(|| {
        // Built on a plain thread: the tests calling this run inside their own runtimes.
        std::thread::spawn(|| {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("runtime");
            let sandbox = rt
                .block_on(Sandbox::start(SandboxConfig {
                    pods: SHARED_PODS,
                    reload_delay: Duration::from_millis(300),
                    ..SandboxConfig::default()
                }))
                .expect("sandbox starts");
            Shared {
                _rt: rt,
                sandbox,
                free: Mutex::new((0..SHARED_PODS).collect()),
                cv: Condvar::new(),
            }
        })
        .join()
        .expect("sandbox thread")
    })
}

/// Exclusive use of one shared pod for the duration of a test (given back on drop).
struct BorrowedPod {
    idx: usize,
    pod: PodInfo,
}

impl Drop for BorrowedPod {
    fn drop(&mut self) {
        let s = shared();
        // The shared sandbox never ends, so each borrow answers for its pod's spec violations.
        let found = s.sandbox.take_pod_spec_violations(&self.pod.name);
        if !found.is_empty() && !std::thread::panicking() {
            s.free
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(self.idx);
            s.cv.notify_one();
            panic!("{}", haptic_tools::sandbox::pods::spec::report(&found));
        }
        s.free
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(self.idx);
        s.cv.notify_one();
    }
}

fn borrow_pod() -> BorrowedPod {
    let s = shared();
    let mut free = s.free.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        if let Some(idx) = free.pop() {
            return BorrowedPod {
                idx,
                pod: s.sandbox.pods()[idx].clone(),
            };
        }
        free = s.cv.wait(free).unwrap_or_else(|p| p.into_inner());
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client")
}

struct Dp {
    c: reqwest::Client,
    base: String,
    user: String,
    pass: String,
}

impl Dp {
    fn new(pod: &PodInfo) -> Dp {
        Dp {
            c: client(),
            base: pod.dataplane_url.clone(),
            user: "admin".into(),
            pass: "haptic-sandbox".into(),
        }
    }
    fn req(&self, m: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.c
            .request(m, format!("{}{path}", self.base))
            .basic_auth(&self.user, Some(&self.pass))
    }
    async fn version(&self) -> u64 {
        self.req(
            reqwest::Method::GET,
            "/v3/services/haproxy/configuration/version",
        )
        .send()
        .await
        .expect("version")
        .json()
        .await
        .expect("json")
    }
    async fn push(&self, cfg: &str, query: &str) -> reqwest::Response {
        let v = self.version().await;
        self.req(
            reqwest::Method::POST,
            &format!("/v3/services/haproxy/configuration/raw?version={v}{query}"),
        )
        .header("content-type", "text/plain")
        .body(cfg.to_string())
        .send()
        .await
        .expect("post raw")
    }
    async fn upload(&self, kind: &str, name: &str, bytes: Vec<u8>) -> reqwest::Response {
        let form = reqwest::multipart::Form::new().part(
            "file_upload",
            reqwest::multipart::Part::bytes(bytes).file_name(name.to_string()),
        );
        self.req(
            reqwest::Method::POST,
            &format!("/v3/services/haproxy/{kind}"),
        )
        .multipart(form)
        .send()
        .await
        .expect("upload")
    }
    async fn wait_reload(&self, id: &str) -> serde_json::Value {
        for _ in 0..200 {
            let r: serde_json::Value = self
                .req(
                    reqwest::Method::GET,
                    &format!("/v3/services/haproxy/reloads/{id}"),
                )
                .send()
                .await
                .expect("reload")
                .json()
                .await
                .expect("json");
            if r["status"] != "in_progress" {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("reload {id} still in progress after 10 s");
    }
    async fn sandbox(&self, path: &str, body: serde_json::Value) -> reqwest::Response {
        self.c
            .post(format!("{}{path}", self.base))
            .json(&body)
            .send()
            .await
            .expect("sandbox hook")
    }
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn render(name: &str, file: &str) -> String {
    read(&format!("{RENDERS}/{name}/{file}"))
}

/// A real HTTP(S) request with curl to the pod's traffic address.
fn curl(pod: &PodInfo, scheme: &str, port: u16, host: Option<&str>, path: &str) -> String {
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
    let out = cmd.output().expect("curl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn md5_hex(b: &[u8]) -> String {
    haptic_tools::sandbox::pods::dataplane::md5_hex(b)
}

#[tokio::test]
async fn pods_version_conflict_and_auth() {
    let l = borrow_pod();
    let dp = Dp::new(&l.pod);
    let v = dp.version().await;
    let r = dp
        .req(
            reqwest::Method::POST,
            &format!("/v3/services/haproxy/configuration/raw?version={}", v + 5),
        )
        .header("content-type", "text/plain")
        .body(render("01-basic", "haproxy.cfg"))
        .send()
        .await
        .expect("post");
    assert_eq!(r.status(), 409);
    let hv = r.headers()["configuration-version"]
        .to_str()
        .expect("hdr")
        .to_string();
    let hc = r.headers()["configuration-checksum"]
        .to_str()
        .expect("hdr")
        .to_string();
    let body: serde_json::Value = r.json().await.expect("json");
    assert_eq!(body["code"], 409);
    assert_eq!(
        body["message"],
        format!(
            "version in configuration file is {v}, given version is {}",
            v + 5
        )
    );
    assert_eq!(hv, v.to_string());
    let raw = dp
        .req(
            reqwest::Method::GET,
            "/v3/services/haproxy/configuration/raw",
        )
        .send()
        .await
        .expect("raw");
    assert_eq!(
        raw.headers()["configuration-checksum"].to_str().expect("h"),
        hc
    );
    let text = raw.text().await.expect("text");
    assert_eq!(md5_hex(text.as_bytes()), hc);
    assert!(text.starts_with(&format!("# _version={v}\n")), "{text}");
    // no version → 400; no credentials → 401
    let r = dp
        .req(
            reqwest::Method::POST,
            "/v3/services/haproxy/configuration/raw",
        )
        .header("content-type", "text/plain")
        .body(render("01-basic", "haproxy.cfg"))
        .send()
        .await
        .expect("post");
    assert_eq!(r.status(), 400);
    let r =
        dp.c.get(format!("{}/v3/info", dp.base))
            .send()
            .await
            .expect("info");
    assert_eq!(r.status(), 401);
    let info: serde_json::Value = dp
        .req(reqwest::Method::GET, "/v3/info")
        .send()
        .await
        .expect("info")
        .json()
        .await
        .expect("json");
    assert!(
        info["api"]["version"]
            .as_str()
            .expect("v")
            .starts_with("v3.")
    );
    let h: serde_json::Value = dp
        .req(reqwest::Method::GET, "/v3/health")
        .send()
        .await
        .expect("h")
        .json()
        .await
        .expect("j");
    assert_eq!(h["haproxy"], "up");
}

#[tokio::test]
async fn pods_invalid_config_rejected_with_haproxy_message() {
    let l = borrow_pod();
    let dp = Dp::new(&l.pod);
    let v = dp.version().await;
    let r = dp.push(&render("08-invalid", "haproxy.cfg"), "").await;
    assert_eq!(r.status(), 400);
    let body: serde_json::Value = r.json().await.expect("json");
    let msg = body["message"].as_str().expect("message");
    assert!(
        msg.contains("[ALERT]") && msg.contains("unknown keyword 'no-such-directive'"),
        "{msg}"
    );
    assert_eq!(body["code"], 400);
    // 09: a map the render does not carry
    let r = dp.push(&render("09-missing-map", "haproxy.cfg"), "").await;
    assert_eq!(r.status(), 400);
    let msg = r.text().await.expect("t");
    assert!(msg.contains("absent.map"), "{msg}");
    assert_eq!(
        dp.version().await,
        v,
        "a rejected config does not move the version"
    );
    // only_validate: 202, nothing applied
    let r = dp
        .push(&render("01-basic", "haproxy.cfg"), "&only_validate=true")
        .await;
    assert_eq!(r.status(), 202);
    assert!(r.headers().get("reload-id").is_none());
    assert_eq!(dp.version().await, v);
}

#[tokio::test]
async fn pods_reload_lifecycle_and_last_known_good() {
    let l = borrow_pod();
    let dp = Dp::new(&l.pod);
    // A slow reload keeps the id in progress long enough to see it.
    let r = dp
        .sandbox(
            "/_sandbox/faults",
            serde_json::json!({"reload": "slow", "times": 1, "delay_ms": 1500}),
        )
        .await;
    assert_eq!(r.status(), 201);
    let cfg = render("01-basic", "haproxy.cfg");
    let r = dp.push(&cfg, "").await;
    assert_eq!(r.status(), 202);
    let id = r.headers()["reload-id"].to_str().expect("id").to_string();
    let re = regex::Regex::new(r"^\d{4}-\d{2}-\d{2}-\d+$").expect("re");
    assert!(re.is_match(&id), "{id}");
    let first: serde_json::Value = dp
        .req(
            reqwest::Method::GET,
            &format!("/v3/services/haproxy/reloads/{id}"),
        )
        .send()
        .await
        .expect("get")
        .json()
        .await
        .expect("json");
    assert_eq!(first["status"], "in_progress");
    assert_eq!(dp.wait_reload(&id).await["status"], "succeeded");
    assert_eq!(curl(&l.pod, "http", 80, None, "/"), "render 01-basic");
    let good_raw = dp
        .req(
            reqwest::Method::GET,
            "/v3/services/haproxy/configuration/raw",
        )
        .send()
        .await
        .expect("raw")
        .text()
        .await
        .expect("t");

    // Scripted failure: HAProxy rejects the reload, last-known-good is restored and still serves.
    let r = dp
        .sandbox(
            "/_sandbox/faults",
            serde_json::json!({"reload": "fail", "times": 1}),
        )
        .await;
    assert_eq!(r.status(), 201);
    let r = dp
        .push(
            &cfg.replace("render 01-basic", "render 01-basic changed"),
            "",
        )
        .await;
    assert_eq!(r.status(), 202);
    let id2 = r.headers()["reload-id"].to_str().expect("id").to_string();
    assert_ne!(id, id2);
    let res = dp.wait_reload(&id2).await;
    assert_eq!(res["status"], "failed");
    assert!(
        res["response"].as_str().expect("r").contains("[ALERT]"),
        "{res}"
    );
    assert_eq!(curl(&l.pod, "http", 80, None, "/"), "render 01-basic");
    let raw = dp
        .req(
            reqwest::Method::GET,
            "/v3/services/haproxy/configuration/raw",
        )
        .send()
        .await
        .expect("raw")
        .text()
        .await
        .expect("t");
    assert_eq!(raw, good_raw, "last-known-good file restored");
    let missing = dp
        .req(
            reqwest::Method::GET,
            "/v3/services/haproxy/reloads/1999-01-01-7",
        )
        .send()
        .await
        .expect("get");
    assert_eq!(missing.status(), 404);

    // force_reload: synchronous, 201, no Reload-ID
    let r = dp.push(&cfg, "&force_reload=true").await;
    assert_eq!(r.status(), 201);
    assert!(r.headers().get("reload-id").is_none());
}

#[tokio::test]
async fn pods_storage_rules() {
    let l = borrow_pod();
    let dp = Dp::new(&l.pod);
    // Start from a config that references nothing.
    let r = dp
        .push(&render("01-basic", "haproxy.cfg"), "&skip_reload=true")
        .await;
    assert_eq!(r.status(), 201);
    for (kind, name) in [
        ("storage/maps", "hosts.map"),
        ("storage/ssl_certificates", "site.pem"),
        ("storage/general", "403.http"),
        ("runtime/ssl_ca_files", "clients-ca.pem"),
        ("storage/ssl_crt_lists", "sites.crtlist"),
    ] {
        let _ = dp
            .req(
                reqwest::Method::DELETE,
                &format!("/v3/services/haproxy/{kind}/{name}"),
            )
            .send()
            .await;
    }
    let map = render("02-maps", "maps/hosts.map");
    let r = dp
        .upload("storage/maps", "hosts.map", map.clone().into_bytes())
        .await;
    assert_eq!(r.status(), 201);
    let meta: serde_json::Value = r.json().await.expect("json");
    assert_eq!(meta["storage_name"], "hosts.map");
    let r = dp
        .upload("storage/maps", "hosts.map", map.clone().into_bytes())
        .await;
    assert_eq!(r.status(), 409);
    let body: serde_json::Value = r.json().await.expect("json");
    assert_eq!(body["code"], 409);
    // name rule: .map appended
    let r = dp.upload("storage/maps", "extra", b"a b\n".to_vec()).await;
    assert_eq!(r.status(), 201);
    let meta: serde_json::Value = r.json().await.expect("json");
    assert_eq!(meta["storage_name"], "extra.map");
    // replace (text/plain), read back
    let r = dp
        .req(
            reqwest::Method::PUT,
            "/v3/services/haproxy/storage/maps/hosts.map?skip_reload=true",
        )
        .header("content-type", "text/plain")
        .body(render("03-maps-changed", "maps/hosts.map"))
        .send()
        .await
        .expect("put");
    assert_eq!(r.status(), 204);
    let got = dp
        .req(
            reqwest::Method::GET,
            "/v3/services/haproxy/storage/maps/hosts.map",
        )
        .send()
        .await
        .expect("get")
        .text()
        .await
        .expect("t");
    assert_eq!(got, render("03-maps-changed", "maps/hosts.map"));
    let r = dp
        .req(
            reqwest::Method::PUT,
            "/v3/services/haproxy/storage/maps/hosts.map",
        )
        .header("content-type", "text/plain")
        .body(map.clone())
        .send()
        .await
        .expect("put");
    assert_eq!(r.status(), 202);
    assert!(r.headers().contains_key("reload-id"));
    // referenced by the running config → delete 409; unreferenced → 204
    let r = dp
        .push(&render("02-maps", "haproxy.cfg"), "&force_reload=true")
        .await;
    assert_eq!(r.status(), 201);
    let r = dp
        .req(
            reqwest::Method::DELETE,
            "/v3/services/haproxy/storage/maps/hosts.map",
        )
        .send()
        .await
        .expect("del");
    assert_eq!(r.status(), 409);
    let msg = r.text().await.expect("t");
    assert!(msg.contains("referenced"), "{msg}");
    let r = dp
        .req(
            reqwest::Method::DELETE,
            "/v3/services/haproxy/storage/maps/extra.map",
        )
        .send()
        .await
        .expect("del");
    assert_eq!(r.status(), 204);
    // certificates: cert without key rejected, with key stored in /etc/haproxy/ssl
    let pem = render("05-tls", "ssl/site.pem");
    let cert_only: String = {
        let start = pem.find("-----BEGIN CERTIFICATE-----").expect("cert");
        let end =
            pem.find("-----END CERTIFICATE-----").expect("end") + "-----END CERTIFICATE-----".len();
        format!("{}\n", &pem[start..end])
    };
    let r = dp
        .upload(
            "storage/ssl_certificates",
            "site.pem",
            cert_only.clone().into_bytes(),
        )
        .await;
    assert_eq!(r.status(), 400);
    let r = dp
        .upload(
            "storage/ssl_certificates",
            "site.pem",
            pem.clone().into_bytes(),
        )
        .await;
    assert_eq!(r.status(), 201);
    assert!(l.pod.dir.join("etc-haproxy/ssl/site.pem").exists());
    // CA file through the runtime endpoint, beside the certificates
    let r = dp
        .upload(
            "runtime/ssl_ca_files",
            "clients-ca.pem",
            render("07-ca", "ca/clients-ca.pem").into_bytes(),
        )
        .await;
    assert_eq!(r.status(), 201);
    assert!(l.pod.dir.join("etc-haproxy/ssl/clients-ca.pem").exists());
    let r = dp
        .push(&render("07-ca", "haproxy.cfg"), "&force_reload=true")
        .await;
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap_or_default());
    let r = dp
        .req(
            reqwest::Method::DELETE,
            "/v3/services/haproxy/storage/ssl_certificates/site.pem",
        )
        .send()
        .await
        .expect("del");
    assert_eq!(r.status(), 409);
    let r = dp
        .req(
            reqwest::Method::DELETE,
            "/v3/services/haproxy/runtime/ssl_ca_files/clients-ca.pem",
        )
        .send()
        .await
        .expect("del");
    assert_eq!(r.status(), 409);
    // general files and crt-lists
    let r = dp
        .upload(
            "storage/general",
            "403.http",
            render("04-errors", "general/403.http").into_bytes(),
        )
        .await;
    assert_eq!(r.status(), 201);
    let r = dp
        .upload("storage/general", "403.http", b"x".to_vec())
        .await;
    assert_eq!(r.status(), 409);
    let r = dp
        .upload(
            "storage/ssl_crt_lists",
            "sites.crtlist",
            render("06-crtlist", "crt-lists/sites.crtlist").into_bytes(),
        )
        .await;
    assert_eq!(r.status(), 201);
    assert!(l.pod.dir.join("etc-haproxy/general/sites.crtlist").exists());
    let r = dp
        .req(
            reqwest::Method::DELETE,
            "/v3/services/haproxy/storage/general/403.http",
        )
        .send()
        .await
        .expect("del");
    assert_eq!(r.status(), 204);
    let list: serde_json::Value = dp
        .req(reqwest::Method::GET, "/v3/services/haproxy/storage/maps")
        .send()
        .await
        .expect("list")
        .json()
        .await
        .expect("json");
    assert_eq!(list.as_array().map(Vec::len), Some(1));
    // back to a config referencing nothing, then the cert can go
    let r = dp
        .push(&render("01-basic", "haproxy.cfg"), "&force_reload=true")
        .await;
    assert_eq!(r.status(), 201);
    let r = dp
        .req(
            reqwest::Method::DELETE,
            "/v3/services/haproxy/storage/ssl_certificates/site.pem",
        )
        .send()
        .await
        .expect("del");
    assert_eq!(r.status(), 204);
}

#[tokio::test]
async fn pods_corpus_config_pushed_and_read_back() {
    let l = borrow_pod();
    let dp = Dp::new(&l.pod);
    let cfg = read(&format!("{CORPUS}/basic/two-servers.cfg"));
    let v = dp.version().await;
    let r = dp.push(&cfg, "").await;
    assert_eq!(r.status(), 202, "{}", r.text().await.unwrap_or_default());
    let id = r.headers()["reload-id"].to_str().expect("id").to_string();
    assert_eq!(dp.wait_reload(&id).await["status"], "succeeded");
    assert_eq!(dp.version().await, v + 1);
    let r = dp
        .req(
            reqwest::Method::GET,
            "/v3/services/haproxy/configuration/raw",
        )
        .send()
        .await
        .expect("raw");
    assert_eq!(
        r.headers()["configuration-version"].to_str().expect("h"),
        (v + 1).to_string()
    );
    let raw = r.text().await.expect("t");
    assert_eq!(raw, format!("# _version={}\n{}", v + 1, cfg));
    // the pod really runs it: the master CLI of this pod reports a worker, and the file on the
    // pod's /etc/haproxy is the one read back
    assert_eq!(
        read(
            &l.pod
                .dir
                .join("etc-haproxy/haproxy.cfg")
                .display()
                .to_string()
        ),
        raw
    );

    // A corpus config with a frontend serves on the pod's port: HAProxy itself answers (its backend
    // server sits at an unreachable private address, so the answer is HAProxy's 503 page).
    let r = dp
        .push(
            &read(&format!("{CORPUS}/frontends/basic.cfg")),
            "&force_reload=true",
        )
        .await;
    assert_eq!(r.status(), 201);
    let out = std::process::Command::new("curl")
        .args([
            "-s",
            "--noproxy",
            "*",
            "--max-time",
            "5",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
        ])
        .arg(format!(
            "http://{}:{}/",
            l.pod.traffic_address,
            80 + l.pod.port_offset
        ))
        .output()
        .expect("curl");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "503");
    // map-frontend validates once its map is on the pod (the deployer's job)
    let _ = dp
        .req(
            reqwest::Method::DELETE,
            "/v3/services/haproxy/storage/maps/domains.map",
        )
        .send()
        .await;
    let with_map = read(&format!("{CORPUS}/map-frontend/with-map.cfg"));
    let r = dp.push(&with_map, "").await;
    assert_eq!(r.status(), 400);
    let r = dp
        .upload(
            "storage/maps",
            "domains.map",
            read(&format!("{CORPUS}/map-files/domains.map")).into_bytes(),
        )
        .await;
    assert_eq!(r.status(), 201);
    let r = dp.push(&with_map, "").await;
    assert_eq!(r.status(), 202);
    let id = r.headers()["reload-id"].to_str().expect("id").to_string();
    assert_eq!(dp.wait_reload(&id).await["status"], "succeeded");
    let r = dp
        .push(&render("01-basic", "haproxy.cfg"), "&force_reload=true")
        .await;
    assert_eq!(r.status(), 201);
    let r = dp
        .req(
            reqwest::Method::DELETE,
            "/v3/services/haproxy/storage/maps/domains.map",
        )
        .send()
        .await
        .expect("delete");
    assert_eq!(r.status(), 204);
}

#[tokio::test]
async fn pods_renders_01_02_05_serve_traffic() {
    let l = borrow_pod();
    let dp = Dp::new(&l.pod);
    let _ = dp
        .req(
            reqwest::Method::DELETE,
            "/v3/services/haproxy/storage/maps/hosts.map",
        )
        .send()
        .await;
    let r = dp.push(&render("01-basic", "haproxy.cfg"), "").await;
    assert_eq!(r.status(), 202);
    let id = r.headers()["reload-id"].to_str().expect("id").to_string();
    assert_eq!(dp.wait_reload(&id).await["status"], "succeeded");
    assert_eq!(curl(&l.pod, "http", 80, None, "/"), "render 01-basic");

    let r = dp
        .upload(
            "storage/maps",
            "hosts.map",
            render("02-maps", "maps/hosts.map").into_bytes(),
        )
        .await;
    assert!(r.status() == 201 || r.status() == 409);
    if r.status() == 409 {
        let r = dp
            .req(
                reqwest::Method::PUT,
                "/v3/services/haproxy/storage/maps/hosts.map?skip_reload=true",
            )
            .body(render("02-maps", "maps/hosts.map"))
            .send()
            .await
            .expect("put");
        assert_eq!(r.status(), 204);
    }
    let r = dp.push(&render("02-maps", "haproxy.cfg"), "").await;
    assert_eq!(r.status(), 202);
    let id = r.headers()["reload-id"].to_str().expect("id").to_string();
    assert_eq!(dp.wait_reload(&id).await["status"], "succeeded");
    assert_eq!(
        curl(&l.pod, "http", 80, Some("shop.haptic.test"), "/"),
        "render 02-maps shop-v1"
    );
    assert_eq!(
        curl(&l.pod, "http", 80, Some("unknown.haptic.test"), "/"),
        "render 02-maps no-route"
    );

    let r = dp
        .upload(
            "storage/ssl_certificates",
            "site.pem",
            render("05-tls", "ssl/site.pem").into_bytes(),
        )
        .await;
    assert!(r.status() == 201 || r.status() == 409, "{}", r.status());
    let r = dp.push(&render("05-tls", "haproxy.cfg"), "").await;
    assert_eq!(r.status(), 202);
    let id = r.headers()["reload-id"].to_str().expect("id").to_string();
    assert_eq!(dp.wait_reload(&id).await["status"], "succeeded");
    assert_eq!(curl(&l.pod, "https", 443, None, "/"), "render 05-tls ssl=1");
    assert_eq!(curl(&l.pod, "http", 80, None, "/"), "render 05-tls ssl=0");
}

#[tokio::test]
async fn pods_faults_requests_and_drift_hooks() {
    let l = borrow_pod();
    let dp = Dp::new(&l.pod);
    assert_eq!(
        dp.c.delete(format!("{}/_sandbox/requests", dp.base))
            .send()
            .await
            .expect("d")
            .status(),
        200
    );
    let r = dp
        .sandbox(
            "/_sandbox/faults",
            serde_json::json!({"method": "GET", "path": "configuration/version$", "status": 503, "times": 1, "retry_after_s": 2}),
        )
        .await;
    assert_eq!(r.status(), 201);
    let r = dp
        .req(
            reqwest::Method::GET,
            "/v3/services/haproxy/configuration/version",
        )
        .send()
        .await
        .expect("v");
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["retry-after"], "2");
    let body: serde_json::Value = r.json().await.expect("json");
    assert_eq!(body["code"], 503);
    let v = dp.version().await;
    let log: serde_json::Value =
        dp.c.get(format!("{}/_sandbox/requests", dp.base))
            .send()
            .await
            .expect("g")
            .json()
            .await
            .expect("j");
    let statuses: Vec<u64> = log
        .as_array()
        .expect("a")
        .iter()
        .map(|r| r["status"].as_u64().unwrap_or(0))
        .collect();
    assert_eq!(statuses, vec![503, 200]);
    assert_eq!(log[0]["path"], "/v3/services/haproxy/configuration/version");
    // drop: the connection closes without an answer
    dp.sandbox(
        "/_sandbox/faults",
        serde_json::json!({"path": "/v3/info", "drop": true, "times": 1}),
    )
    .await;
    assert!(
        dp.req(reqwest::Method::GET, "/v3/info")
            .send()
            .await
            .is_err()
    );
    assert_eq!(
        dp.req(reqwest::Method::GET, "/v3/info")
            .send()
            .await
            .expect("i")
            .status(),
        200
    );
    assert_eq!(
        dp.c.delete(format!("{}/_sandbox/faults", dp.base))
            .send()
            .await
            .expect("d")
            .status(),
        200
    );
    // bump-version: version moves, content does not
    let before = dp
        .req(
            reqwest::Method::GET,
            "/v3/services/haproxy/configuration/raw",
        )
        .send()
        .await
        .expect("r")
        .text()
        .await
        .expect("t");
    dp.sandbox("/_sandbox/bump-version", serde_json::json!({}))
        .await;
    assert_eq!(dp.version().await, v + 1);
    let after = dp
        .req(
            reqwest::Method::GET,
            "/v3/services/haproxy/configuration/raw",
        )
        .send()
        .await
        .expect("r")
        .text()
        .await
        .expect("t");
    assert_eq!(
        after.lines().skip(1).collect::<Vec<_>>(),
        before.lines().skip(1).collect::<Vec<_>>()
    );
    // edit-config behind the API's back: content changes, version only with bump_version
    let cfg = render("01-basic", "haproxy.cfg").replace("render 01-basic", "drifted");
    let r =
        dp.c.post(format!("{}/_sandbox/edit-config", dp.base))
            .body(cfg.clone())
            .send()
            .await
            .expect("e");
    assert_eq!(r.status(), 200);
    let res: serde_json::Value = r.json().await.expect("j");
    assert_eq!(res["reload"], "succeeded");
    assert_eq!(dp.version().await, v + 1);
    assert_eq!(curl(&l.pod, "http", 80, None, "/"), "drifted");
    let r =
        dp.c.post(format!(
            "{}/_sandbox/edit-config?bump_version=true",
            dp.base
        ))
        .body(cfg)
        .send()
        .await
        .expect("e");
    assert_eq!(r.status(), 200);
    assert_eq!(dp.version().await, v + 2);
    let r =
        dp.c.post(format!(
            "{}/_sandbox/edit-file?path=/etc/haproxy/maps/drift.map",
            dp.base
        ))
        .body("a b\n")
        .send()
        .await
        .expect("f");
    assert_eq!(r.status(), 204);
    assert_eq!(
        read(
            &l.pod
                .dir
                .join("etc-haproxy/maps/drift.map")
                .display()
                .to_string()
        ),
        "a b\n"
    );
    let _ = std::fs::remove_file(l.pod.dir.join("etc-haproxy/maps/drift.map"));
}

fn dead_pid() -> u32 {
    let mut c = std::process::Command::new("true").spawn().expect("true");
    let pid = c.id();
    c.wait().expect("wait");
    pid
}

/// `stand_in_validate: false` (the fan-out benchmark): a stand-in takes a configuration
/// `haproxy -c` would refuse; the default refuses it (above).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stand_ins_without_validation_take_any_configuration() {
    let sb = Sandbox::start(SandboxConfig {
        pods: 0,
        stand_in_pods: 1,
        stand_in_validate: false,
        reload_delay: Duration::from_millis(50),
        ..SandboxConfig::default()
    })
    .await
    .expect("start");
    let standin = sb.pods().into_iter().next().expect("stand-in");
    let dp = Dp::new(&standin);
    let r = dp.push(&render("08-invalid", "haproxy.cfg"), "").await;
    assert_eq!(r.status(), 202, "validation off: the push is taken");
    sb.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_own_sandbox_leaves_nothing_behind_and_stand_ins_answer() {
    if !nix_is_root() {
        return;
    }
    // A stale namespace of a dead sandbox is removed at start-up.
    let stale = netns::netns_name(dead_pid(), "0");
    netns::run_cmd("ip", &["netns", "add", &stale]).expect("ip netns add");
    let sb = Sandbox::start(SandboxConfig {
        pods: 1,
        stand_in_pods: 1,
        stand_in_delay: Duration::from_millis(20),
        reload_delay: Duration::from_millis(100),
        ..SandboxConfig::default()
    })
    .await
    .expect("start");
    assert!(!netns::netns_exists(&stale), "stale namespace removed");
    assert_eq!(sb.mode(), Mode::Netns);
    let pods = sb.pods();
    let standin = pods.iter().find(|p| p.stand_in).expect("stand-in").clone();
    let dp = Dp::new(&standin);
    let r = dp.push(&render("08-invalid", "haproxy.cfg"), "").await;
    assert_eq!(r.status(), 400, "stand-ins validate with haproxy -c");
    let r = dp.push(&render("01-basic", "haproxy.cfg"), "").await;
    assert_eq!(r.status(), 202);
    let id = r.headers()["reload-id"].to_str().expect("id").to_string();
    assert_eq!(dp.wait_reload(&id).await["status"], "succeeded");
    let real = pods.iter().find(|p| !p.stand_in).expect("real").clone();
    // the echo server on the host side of the link, reached from inside the pod by HAProxy
    let dpr = Dp::new(&real);
    let cfg = format!(
        "{}    default_backend be\nbackend be\n    server echo {}\n",
        render("01-basic", "haproxy.cfg").replace(
            "    http-request return status 200 content-type text/plain string \"render 01-basic\"\n",
            ""
        ),
        real.echo_address
    );
    let r = dpr.push(&cfg, "&force_reload=true").await;
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap_or_default());
    assert!(
        curl(&real, "http", 80, None, "/hello")
            .starts_with(&format!("echo {} GET /hello", real.name))
    );

    let pids = sb.pids().await;
    assert!(pids.len() >= 3, "master, worker, janitor: {pids:?}");
    let namespaces = sb.namespaces().to_vec();
    sb.shutdown().await;
    for pid in &pids {
        assert!(!netns::pid_alive(*pid), "pid {pid} left behind");
    }
    for ns in &namespaces {
        assert!(!netns::netns_exists(ns), "namespace {ns} left behind");
    }

    // POST /_sandbox/kill: the pod disappears (processes gone, endpoint closed).
    let sb = Sandbox::start(SandboxConfig::default())
        .await
        .expect("start");
    let pods = sb.pids().await;
    let pod = sb.pods()[0].clone();
    let dp = Dp::new(&pod);
    let r =
        dp.c.post(format!("{}/_sandbox/kill", dp.base))
            .send()
            .await
            .expect("kill");
    assert_eq!(r.status(), 200);
    let mut gone = false;
    for _ in 0..100 {
        if dp
            .req(reqwest::Method::GET, "/v3/info")
            .send()
            .await
            .is_err()
            && sb.pids().await.len() == 1
        {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(gone, "killed pod still answers or runs processes");
    let left = sb.pids().await; // the janitor only
    for pid in pods.iter().filter(|p| !left.contains(p)) {
        // SIGKILL is asynchronous: a dying process can still be scheduled for a moment under
        // load (seen once in CI); wait for it, bounded.
        let mut alive = netns::pid_alive(*pid);
        for _ in 0..100 {
            if !alive {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            alive = netns::pid_alive(*pid);
        }
        assert!(!alive, "pid {pid} of the killed pod still runs after 5 s");
    }
    drop(sb);

    // Drop without shutdown cleans up as well.
    let sb = Sandbox::start(SandboxConfig::default())
        .await
        .expect("start");
    let pids = sb.pids().await;
    let namespaces = sb.namespaces().to_vec();
    drop(sb);
    for pid in &pids {
        assert!(!netns::pid_alive(*pid), "pid {pid} left behind after drop");
    }
    for ns in &namespaces {
        assert!(
            !netns::netns_exists(ns),
            "namespace {ns} left behind after drop"
        );
    }
}

fn nix_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}

fn corpus_dir(sub: &str) -> PathBuf {
    PathBuf::from(CORPUS).join(sub)
}

/// Pids of every descendant of `root` (from /proc).
fn descendants(root: u32) -> Vec<u32> {
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

#[tokio::test]
async fn pods_non_root_fallback_runs_in_loopback_mode() {
    if !nix_is_root() {
        return; // needs root to switch to an unprivileged user
    }
    use std::io::BufRead as _;
    use std::os::unix::fs::PermissionsExt as _;
    // Nobody must reach the binary wherever the checkout lives (a `mktemp -d` is 0700): run a
    // copy from a directory it can traverse,
    let tools = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(tools.path(), std::fs::Permissions::from_mode(0o755))
        .expect("chmod 0755");
    let bin = tools.path().join("haptic-sandbox");
    std::fs::copy(env!("CARGO_BIN_EXE_haptic-sandbox"), &bin).expect("copy the sandbox binary");
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).expect("chmod 0755");
    let mut child = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&bin)
        // and from a working directory it can enter (HAProxy returns to it after reading files)
        .current_dir(tools.path())
        .args([
            "up",
            "--pods",
            "1",
            "--no-apiserver",
            "--json",
            "--reload-delay-ms",
            "200",
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn haptic-sandbox as nobody");
    let _reap = Reap(child.id());
    let stdout = child.stdout.take().expect("stdout");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let err_log = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut std::io::BufReader::new(stderr), &mut s);
        s
    });
    let line = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the JSON line within 60 s");
    let up: serde_json::Value = match serde_json::from_str(&line) {
        Ok(v) => v,
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "one JSON line on stdout, got {line:?} ({e}); stderr:\n{}",
                err_log.join().unwrap_or_default()
            );
        }
    };
    assert_eq!(up["mode"], "loopback");
    let p = &up["pods"][0];
    let pod = PodInfo {
        name: p["name"].as_str().expect("name").into(),
        pod_ip: p["pod_ip"].as_str().expect("ip").parse().expect("ip"),
        dataplane_port: 5555,
        dataplane_url: p["dataplane_url"].as_str().expect("url").into(),
        traffic_address: p["traffic_address"]
            .as_str()
            .expect("t")
            .parse()
            .expect("ip"),
        port_offset: p["port_offset"].as_u64().expect("offset") as u16,
        echo_address: p["echo_address"]
            .as_str()
            .expect("e")
            .parse()
            .expect("addr"),
        netns: None,
        dir: PathBuf::new(),
        stand_in: false,
    };
    assert!(pod.pod_ip.is_loopback());
    let dp = Dp::new(&pod);
    let r = dp
        .push(&render("01-basic", "haproxy.cfg"), "&force_reload=true")
        .await;
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap_or_default());
    assert_eq!(curl(&pod, "http", 80, None, "/"), "render 01-basic");
    // paths inside expressions resolve to the pod's own files
    let r = dp
        .upload(
            "storage/maps",
            "hosts.map",
            render("02-maps", "maps/hosts.map").into_bytes(),
        )
        .await;
    assert_eq!(r.status(), 201);
    let r = dp
        .push(&render("02-maps", "haproxy.cfg"), "&force_reload=true")
        .await;
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap_or_default());
    assert_eq!(
        curl(&pod, "http", 80, Some("shop.haptic.test"), "/"),
        "render 02-maps shop-v1"
    );
    // outbound targets are refused, naming the line
    let v = dp.version().await;
    let r = dp
        .push(&read(&format!("{CORPUS}/servers/enabled-real.cfg")), "")
        .await;
    assert_eq!(r.status(), 400);
    let body: serde_json::Value = r.json().await.expect("json");
    let msg = body["message"].as_str().expect("msg");
    assert!(
        msg.contains("refused") && msg.contains("line ") && msg.contains("server "),
        "{msg}"
    );
    assert_eq!(dp.version().await, v);

    let pids = descendants(child.id());
    assert!(
        pids.len() >= 3,
        "sandbox, haproxy master and worker: {pids:?}"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("SIGTERM");
    let mut exited = None;
    for _ in 0..300 {
        if let Some(st) = child.try_wait().expect("wait") {
            exited = Some(st);
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let st = exited.expect("haptic-sandbox exits within 15 s of SIGTERM");
    assert!(st.success(), "{st}");
    let log = err_log.join().expect("stderr");
    assert!(log.contains("LOOPBACK MODE"), "{log}");
    for pid in pids {
        assert!(!netns::pid_alive(pid), "pid {pid} left behind");
    }
}

/// Peer addresses of the sockets of processes named haproxy, from `ss -tanpu` (optionally run in
/// namespace `ns`).
fn haproxy_peers(ns: Option<&str>) -> Vec<String> {
    let mut cmd = match ns {
        Some(ns) => {
            let mut c = std::process::Command::new("ip");
            c.args(["netns", "exec", ns, "ss", "-tanpu"]);
            c
        }
        None => {
            let mut c = std::process::Command::new("ss");
            c.arg("-tanpu");
            c
        }
    };
    let out = cmd.output().expect("ss");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("\"haproxy\""))
        .filter_map(|l| l.split_whitespace().nth(5).map(str::to_string))
        .collect()
}

fn peer_allowed(peer: &str) -> bool {
    let host = peer
        .rsplit_once(':')
        .map(|(h, _)| h)
        .unwrap_or(peer)
        .trim_matches(['[', ']']);
    if host == "*" || host == "0.0.0.0" || host == "::" || host.is_empty() {
        return true; // listening / unconnected
    }
    match host
        .split('%')
        .next()
        .unwrap_or(host)
        .parse::<std::net::IpAddr>()
    {
        Ok(std::net::IpAddr::V4(ip)) => {
            ip.is_loopback()
                || ip.is_unspecified()
                || (ip.octets()[0] == 10 && ip.octets()[1] == netns::LINK_OCTET)
        }
        Ok(std::net::IpAddr::V6(ip)) => ip.is_loopback() || ip.is_unspecified(),
        Err(_) => false,
    }
}

#[tokio::test]
async fn pods_network_safety_corpus_targets_never_leave_the_pod() {
    let l = borrow_pod();
    let Some(ns) = l.pod.netns.clone() else {
        return; // loopback mode (not root): the outbound refusal is tested by the non-root test
    };
    let dp = Dp::new(&l.pod);
    // The namespace has only its link route: no default route.
    let routes =
        netns::run_cmd("ip", &["netns", "exec", &ns, "ip", "-4", "route"]).expect("ip route");
    assert!(!routes.contains("default"), "{routes}");
    assert!(
        routes
            .lines()
            .all(|r| r.starts_with(&format!("10.{}.", netns::LINK_OCTET))),
        "{routes}"
    );
    let unreachable = netns::run_cmd(
        "ip",
        &["netns", "exec", &ns, "ip", "route", "get", "8.8.8.8"],
    );
    assert!(
        unreachable.is_err(),
        "8.8.8.8 must be unreachable from the pod: {unreachable:?}"
    );

    let mut accepted = 0;
    let mut samples = 0;
    for dir in [
        "resolvers",
        "peers",
        "mailers",
        "servers",
        "http-checks",
        "tcp-checks",
    ] {
        let mut files: Vec<PathBuf> = std::fs::read_dir(corpus_dir(dir))
            .expect("corpus dir")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "cfg"))
            .collect();
        files.sort();
        for f in files {
            // a listener so the worker starts even for configs without one
            let cfg = format!(
                "{}\nfrontend sandbox_probe\n    mode http\n    bind *:8405\n    http-request return status 200\n",
                read(&f.display().to_string())
            );
            let r = dp.push(&cfg, "&force_reload=true").await;
            if r.status() != 201 {
                continue;
            }
            accepted += 1;
            // let health checks, resolvers, peers and mailers try for a while
            for _ in 0..2 {
                tokio::time::sleep(Duration::from_millis(150)).await;
                samples += 1;
                for peer in haproxy_peers(Some(&ns))
                    .into_iter()
                    .chain(haproxy_peers(None))
                {
                    assert!(
                        peer_allowed(&peer),
                        "{} made haproxy connect to {peer}",
                        f.display()
                    );
                }
            }
        }
    }
    assert!(accepted >= 6, "only {accepted} corpus configs ran");
    assert!(samples > 0);
    // Health checks do run and fail locally (L4CON: network unreachable), never reaching out.
    let cfg = "global\n    stats socket /var/run/haproxy.sock mode 600 level admin\ndefaults\n    mode http\n    timeout connect 1s\n    timeout client 5s\n    timeout server 5s\nbackend be\n    server s1 192.168.1.10:8080 check inter 100ms\nfrontend sandbox_probe\n    bind *:8405\n    default_backend be\n";
    let r = dp.push(cfg, "&force_reload=true").await;
    assert_eq!(r.status(), 201);
    let sock = l.pod.dir.join("run/haproxy.sock");
    let mut stat = String::new();
    for _ in 0..100 {
        let out = std::process::Command::new("sh")
            .args([
                "-c",
                &format!("echo 'show stat' | socat - UNIX-CONNECT:{}", sock.display()),
            ])
            .output()
            .expect("socat");
        stat = String::from_utf8_lossy(&out.stdout).into_owned();
        if stat
            .lines()
            .any(|l| l.starts_with("be,s1,") && l.contains("L4CON"))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        stat.lines()
            .any(|l| l.starts_with("be,s1,") && l.contains("L4CON")),
        "{stat}"
    );
    for peer in haproxy_peers(Some(&ns))
        .into_iter()
        .chain(haproxy_peers(None))
    {
        assert!(peer_allowed(&peer), "haproxy connected to {peer}");
    }
    // back to a plain config for the next test using this pod
    let r = dp
        .push(&render("01-basic", "haproxy.cfg"), "&force_reload=true")
        .await;
    assert_eq!(r.status(), 201);
}

/// `haptic-sandbox up --json` registers its pods and the Dataplane Secret in the emulator.
#[tokio::test]
async fn pods_up_registers_pods_and_secret_in_the_emulator() {
    use std::io::BufRead as _;
    let bin = env!("CARGO_BIN_EXE_haptic-sandbox");
    let mut child = std::process::Command::new(bin)
        .args([
            "up",
            "--pods",
            "2",
            "--json",
            "--dataplane-port",
            "5556",
            "--reload-delay-ms",
            "200",
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    let _reap = Reap(child.id());
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx.recv_timeout(Duration::from_secs(60)).expect("JSON line");
    let pid = child.id();
    let result = async {
        let up: serde_json::Value = serde_json::from_str(&line).expect("json");
        let kubeconfig = up["kubeconfig"].as_str().expect("kubeconfig");
        let ns = up["namespace"].as_str().expect("ns");
        let kc = kube::config::Kubeconfig::read_from(kubeconfig).expect("read kubeconfig");
        let config =
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .expect("config");
        let client = kube::Client::try_from(config).expect("client");
        let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
            kube::Api::namespaced(client.clone(), ns);
        let list = pods
            .list(
                &kube::api::ListParams::default().labels(up["pod_selector"].as_str().expect("sel")),
            )
            .await
            .expect("list pods");
        assert_eq!(list.items.len(), 2);
        for p in &list.items {
            let st = p.status.as_ref().expect("status");
            assert_eq!(st.phase.as_deref(), Some("Running"));
            let ip = st.pod_ip.clone().expect("podIP");
            assert!(
                up["pods"]
                    .as_array()
                    .expect("pods")
                    .iter()
                    .any(|x| x["pod_ip"] == ip)
            );
            assert!(
                st.conditions
                    .iter()
                    .flatten()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
            );
            let cs = st.container_statuses.clone().unwrap_or_default();
            assert_eq!(cs.len(), 2, "haproxy and dataplane container statuses");
            assert!(
                cs.iter()
                    .all(|c| c.ready && c.state.as_ref().is_some_and(|s| s.running.is_some())),
                "{cs:?}"
            );
            let ann = p.metadata.annotations.clone().unwrap_or_default();
            assert_eq!(
                ann.get("haproxy-haptic.org/dataplane-port")
                    .map(String::as_str),
                Some("5556")
            );
        }
        // kubectl's table shows READY 2/2 (from containerStatuses, like the server-side printer)
        let out = std::process::Command::new(haptic_tools::peers::kubectl())
            .args([
                "--kubeconfig",
                kubeconfig,
                "-n",
                ns,
                "get",
                "pods",
                "--no-headers",
            ])
            .output()
            .expect("kubectl");
        let table = String::from_utf8_lossy(&out.stdout).to_string();
        assert_eq!(table.lines().count(), 2, "{table}");
        for line in table.lines() {
            let cols: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(cols.get(1..3), Some(&["2/2", "Running"][..]), "{table}");
        }
        let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
            kube::Api::namespaced(client, ns);
        let s = secrets
            .get(up["dataplane_secret"].as_str().expect("secret"))
            .await
            .expect("secret");
        let data = s.data.expect("data");
        assert_eq!(data["username"].0, b"admin");
        assert_eq!(data["password"].0, b"haptic-sandbox");
    }
    .await;
    let pids = descendants(pid);
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    for _ in 0..300 {
        if child.try_wait().expect("wait").is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    for p in pids {
        assert!(!netns::pid_alive(p), "pid {p} left behind");
    }
    result
}

#[tokio::test]
async fn pods_missing_haproxy_is_a_clear_error() {
    let err = Sandbox::start(SandboxConfig {
        haproxy_bin: "/nonexistent/haproxy".into(),
        ..SandboxConfig::default()
    })
    .await
    .expect_err("no haproxy");
    assert!(
        format!("{err:#}").contains("apt-get install -y haproxy"),
        "{err:#}"
    );
}

#[tokio::test]
async fn pods_demo_walks_the_render_corpus() {
    let bin = env!("CARGO_BIN_EXE_haptic-sandbox");
    let out = tokio::process::Command::new(bin)
        .args(["demo", "--pods", "2", "--renders", RENDERS])
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .expect("demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("no controller is involved"), "{stdout}");
    assert!(
        !stdout.contains("broke the Data Plane API spec"),
        "{stdout}"
    );
    assert!(
        stdout.contains("10 of 10 renders behaved as renders/README.md says on 2 pod(s)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("render 10-large-map backend-047"),
        "{stdout}"
    );
}

#[tokio::test]
async fn pods_killed_sandbox_is_cleaned_up_by_its_janitor() {
    if !nix_is_root() {
        return;
    }
    use std::io::BufRead as _;
    let bin = env!("CARGO_BIN_EXE_haptic-sandbox");
    let mut child = std::process::Command::new(bin)
        .args(["up", "--pods", "2", "--no-apiserver", "--json"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    let _reap = Reap(child.id());
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx.recv_timeout(Duration::from_secs(60)).expect("JSON line");
    let up: serde_json::Value = serde_json::from_str(&line).expect("json");
    assert_eq!(up["mode"], "netns");
    assert_eq!(up["pods"].as_array().map(Vec::len), Some(2));
    let prefix = format!("hs{}-", child.id());
    let ours = || {
        netns::list_netns()
            .unwrap_or_default()
            .into_iter()
            .filter(|n| n.starts_with(&prefix))
            .collect::<Vec<_>>()
    };
    assert_eq!(ours().len(), 2);
    let mut pids = descendants(child.id());
    for ns in ours() {
        pids.extend(netns::netns_pids(&ns));
    }
    // SIGKILL: no clean-up code of ours runs; the janitor sees its input end and cleans up.
    child.kill().expect("SIGKILL");
    child.wait().expect("reap");
    let mut clean = false;
    for _ in 0..200 {
        if ours().is_empty() && pids.iter().all(|p| !netns::pid_alive(*p)) {
            clean = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        clean,
        "left behind: namespaces {:?}, pids {:?}",
        ours(),
        pids.iter()
            .filter(|p| netns::pid_alive(**p))
            .collect::<Vec<_>>()
    );
}

/// Ends a spawned sandbox process even when an assertion fails first (SIGTERM, bounded wait,
/// SIGKILL); a process already gone (or reaped) is left alone.
struct Reap(u32);

impl Drop for Reap {
    fn drop(&mut self) {
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

/// Loopback mode (forced here; what a non-root run gets) refuses every config the review found
/// connecting off-host, with a 400 naming the offending line, and the version does not move.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_loopback_mode_refuses_every_outbound_directive() {
    let sb = Sandbox::start(SandboxConfig {
        pods: 1,
        force_loopback: true,
        reload_delay: Duration::from_millis(100),
        ..SandboxConfig::default()
    })
    .await
    .expect("start");
    assert_eq!(sb.mode(), Mode::Loopback);
    let pod = sb.pods()[0].clone();
    let dp = Dp::new(&pod);
    let head = "defaults\n    mode http\n    timeout connect 1s\n    timeout client 1s\n    timeout server 1s\nfrontend f\n    bind *:8404\n    default_backend b\n";
    let cases = [
        "backend b\n    option httpchk\n    http-check connect addr 10.0.0.5 port 80\n    server s 127.0.0.1:1 check\n",
        "backend b\n    mode tcp\n    option tcp-check\n    tcp-check connect addr 10.0.0.6 port 80\n    server s 127.0.0.1:1 check\n",
        "backend b\n    server s 127.0.0.1:1 agent-check agent-addr 10.0.0.8 agent-port 9999\n",
        "backend b\n    default-server agent-addr 10.0.0.8\n    server s 127.0.0.1:1 agent-check agent-port 9999\n",
        "resolvers r\n    parse-resolv-conf\nbackend b\n    server s 127.0.0.1:1\n",
        "backend b\n    option httpchk\n    http-check connect addr 192.0.2.2 port 9999\n    server s 127.0.0.1:1 check\n",
    ];
    for body in cases {
        let cfg = format!("{head}{body}");
        let bad = body
            .lines()
            .find(|l| {
                l.contains("10.0.0.") || l.contains("192.0.2.") || l.contains("parse-resolv-conf")
            })
            .expect("an offending line")
            .trim()
            .to_string();
        let line_no = cfg.lines().position(|l| l.trim() == bad).expect("line") + 1;
        let v = dp.version().await;
        let r = dp.push(&cfg, "&force_reload=true").await;
        assert_eq!(r.status(), 400, "{cfg}");
        let b: serde_json::Value = r.json().await.expect("json");
        let msg = b["message"].as_str().unwrap_or_default();
        assert!(
            msg.contains("refused")
                && msg.contains(&format!("line {line_no}:"))
                && msg.contains(&bad),
            "{cfg}\n→ {msg}"
        );
        assert_eq!(dp.version().await, v);
        // the out-of-band edit hook applies the same rule
        let r =
            dp.c.post(format!("{}/_sandbox/edit-config", dp.base))
                .body(cfg.clone())
                .send()
                .await
                .expect("edit-config");
        assert_eq!(r.status(), 400, "{cfg}");
    }
    // a loopback-only health-checked config is still accepted
    let ok = format!(
        "{head}backend b\n    option httpchk\n    http-check connect addr 127.0.0.1 port 80\n    server s 127.0.0.1:1 check agent-check agent-addr 127.0.0.1 agent-port 9\n"
    );
    let r = dp.push(&ok, "&force_reload=true").await;
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap_or_default());
    sb.shutdown().await;
}

/// `curl -d` (form content type) against both peers' `/_sandbox/` paths, via the real `curl`.
fn curl_d(method: &str, url: &str, body: Option<&str>) -> (u16, serde_json::Value) {
    let mut c = std::process::Command::new("curl");
    c.args([
        "-s",
        "--noproxy",
        "*",
        "-X",
        method,
        "-w",
        "\n%{http_code}",
        url,
    ]);
    if let Some(b) = body {
        c.args(["-d", b]);
    }
    let out = c.output().expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, code) = text.rsplit_once('\n').expect("status line");
    (
        code.trim().parse().expect("code"),
        serde_json::from_str(body).unwrap_or(serde_json::Value::Null),
    )
}

/// The `/_sandbox/` control paths read JSON whatever the content type and answer alike on both
/// peers (a pod and the API emulator).
#[tokio::test]
async fn pods_and_emulator_control_paths_take_curl_d_and_answer_alike() {
    use haptic_tools::sandbox::apiserver::{ApiServer, ApiServerConfig};
    let api = ApiServer::start(ApiServerConfig::default())
        .await
        .expect("emulator");
    let l = borrow_pod();
    let pod = l.pod.dataplane_url.clone();
    let emu = api.url().trim_end_matches('/').to_string();
    let mut answers = Vec::new();
    for base in [&pod, &emu] {
        let faults = format!("{base}/_sandbox/faults");
        let requests = format!("{base}/_sandbox/requests");
        let body = if base == &pod {
            r#"{"reload":"fail","times":1}"#
        } else {
            r#"{"path":"nothing-matches-this","status":503,"times":1}"#
        };
        let post = tokio::task::spawn_blocking({
            let f = faults.clone();
            move || curl_d("POST", &f, Some(body))
        })
        .await
        .expect("curl");
        let del_f = tokio::task::spawn_blocking(move || curl_d("DELETE", &faults, None))
            .await
            .expect("curl");
        let del_r = tokio::task::spawn_blocking(move || curl_d("DELETE", &requests, None))
            .await
            .expect("curl");
        answers.push((post, del_f, del_r));
    }
    let expected = (
        (201, serde_json::json!({"ok": true, "faults": 1})),
        (200, serde_json::json!({"ok": true})),
        (200, serde_json::json!({"ok": true})),
    );
    assert_eq!(answers[0], expected, "pod");
    assert_eq!(answers[1], expected, "emulator");
}

/// Invalid faults are refused naming the field, and a fault whose `times` are used up is no longer
/// listed, on both peers.
#[tokio::test]
async fn pods_and_emulator_validate_faults_and_drop_spent_ones() {
    use haptic_tools::sandbox::apiserver::{ApiServer, ApiServerConfig};
    let api = ApiServer::start(ApiServerConfig::default())
        .await
        .expect("emulator");
    let l = borrow_pod();
    let dp = Dp::new(&l.pod);
    let emu = api.url().trim_end_matches('/').to_string();
    let c = client();
    for (base, probe) in [
        (
            dp.base.clone(),
            format!("{}/v3/services/haproxy/configuration/version", dp.base),
        ),
        (
            emu.clone(),
            format!("{emu}/api/v1/namespaces/default/configmaps"),
        ),
    ] {
        let faults = format!("{base}/_sandbox/faults");
        for (body, field) in [
            (r#"{"path":"x","stauts":500}"#, "stauts"),
            (r#"{"path":"x","status":99}"#, "status"),
            (r#"{"path":"x","status":600}"#, "status"),
            (r#"{"path":"x","status":"500"}"#, "status"),
            (r#"{"path":"x"}"#, "status"),
            (r#"{"path":"x","status":500,"drop":true}"#, "drop"),
            (r#"{"path":"(","status":500}"#, "path"),
        ] {
            let r = c.post(&faults).body(body).send().await.expect("post");
            assert_eq!(r.status(), 400, "{base}: {body}");
            let v: serde_json::Value = r.json().await.expect("json");
            let msg = v["message"].as_str().unwrap_or_default();
            assert!(msg.contains(field), "{base}: {body} → {msg}");
        }
        let list: serde_json::Value = c
            .get(&faults)
            .send()
            .await
            .expect("get")
            .json()
            .await
            .expect("j");
        assert_eq!(
            list,
            serde_json::json!([]),
            "{base}: nothing armed by refusals"
        );
        let r = c
            .post(&faults)
            .body(r#"{"method":"GET","path":"(configuration/version|configmaps)$","status":500,"times":2}"#)
            .send()
            .await
            .expect("post");
        assert_eq!(r.status(), 201, "{base}");
        let list: serde_json::Value = c
            .get(&faults)
            .send()
            .await
            .expect("get")
            .json()
            .await
            .expect("j");
        assert_eq!(list[0]["remaining"], 2, "{base}: {list}");
        for _ in 0..2 {
            let r = c
                .get(&probe)
                .basic_auth("admin", Some("haptic-sandbox"))
                .send()
                .await
                .expect("probe");
            assert_eq!(r.status(), 500, "{base}");
        }
        let list: serde_json::Value = c
            .get(&faults)
            .send()
            .await
            .expect("get")
            .json()
            .await
            .expect("j");
        assert_eq!(
            list,
            serde_json::json!([]),
            "{base}: the spent fault is gone"
        );
        let r = c
            .get(&probe)
            .basic_auth("admin", Some("haptic-sandbox"))
            .send()
            .await
            .expect("probe");
        assert_eq!(r.status(), 200, "{base}");
    }
}

/// `up --loopback` as root says the mode was forced, not that it is not running as root.
#[tokio::test]
async fn pods_up_loopback_as_root_says_why() {
    if !nix_is_root() {
        return;
    }
    use std::io::BufRead as _;
    let bin = env!("CARGO_BIN_EXE_haptic-sandbox");
    let mut child = std::process::Command::new(bin)
        .args([
            "up",
            "--pods",
            "1",
            "--no-apiserver",
            "--json",
            "--loopback",
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn haptic-sandbox");
    let _reap = Reap(child.id());
    let stdout = child.stdout.take().expect("stdout");
    let stderr = child.stderr.take().expect("stderr");
    let mut line = String::new();
    let _ = std::io::BufReader::new(stdout).read_line(&mut line);
    let up: serde_json::Value = serde_json::from_str(&line).expect("one JSON line");
    assert_eq!(up["mode"], "loopback");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("SIGTERM");
    let mut log = String::new();
    let _ = std::io::Read::read_to_string(&mut std::io::BufReader::new(stderr), &mut log);
    let _ = child.wait();
    assert!(
        log.contains("forced (--loopback) although running as root"),
        "{log}"
    );
    assert!(!log.contains("not running as root"), "{log}");
}

/// The stale-cleanup pass removes the temporary directories of dead sandboxes (kubeconfig, pod
/// files, private keys): marked with a dead owner, or unmarked (older sandboxes), old and used by
/// no process. Live owners' and in-use directories stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_stale_cleanup_removes_dead_sandboxes_directories() {
    use haptic_tools::sandbox::pods::{OWNER_FILE, cleanup_stale_dirs};
    let parent = tempfile::tempdir().expect("tempdir");
    let mk = |name: &str, owner: Option<u32>, old: bool| {
        let d = parent.path().join(name);
        std::fs::create_dir_all(d.join("haproxy-0/ssl")).expect("mkdir");
        std::fs::write(d.join("haproxy-0/ssl/key.pem"), "PRIVATE KEY").expect("write");
        if let Some(pid) = owner {
            std::fs::write(d.join(OWNER_FILE), pid.to_string()).expect("owner");
        }
        if old {
            let ok = std::process::Command::new("touch")
                .args(["-d", "1 hour ago"])
                .arg(&d)
                .status()
                .expect("touch")
                .success();
            assert!(ok);
        }
        d
    };
    let dead = mk("haptic-sandbox-dead01", Some(dead_pid()), false);
    let live = mk("haptic-sandbox-live01", Some(std::process::id()), true);
    let unmarked_old = mk("haptic-sandbox-unmk01", None, true);
    let unmarked_new = mk("haptic-sandbox-unmk02", None, false);
    let in_use = mk("haptic-sandbox-used01", None, true);
    let other = mk("not-a-sandbox-dir", Some(dead_pid()), true);
    let mut sleeper = std::process::Command::new("sleep")
        .arg("30")
        .current_dir(&in_use)
        .spawn()
        .expect("sleep");
    let removed = cleanup_stale_dirs(parent.path());
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    let mut removed: Vec<_> = removed.into_iter().collect();
    removed.sort();
    assert_eq!(removed, vec![dead.clone(), unmarked_old.clone()]);
    assert!(!dead.exists() && !unmarked_old.exists());
    assert!(live.exists() && unmarked_new.exists() && in_use.exists() && other.exists());

    // Sandbox::start runs the pass on the system temp dir and marks its own directory.
    let stale = std::env::temp_dir().join(format!("haptic-sandbox-t{}", dead_pid()));
    std::fs::create_dir_all(&stale).expect("mkdir");
    std::fs::write(stale.join(OWNER_FILE), dead_pid().to_string()).expect("owner");
    let sb = Sandbox::start(SandboxConfig {
        pods: 0,
        stand_in_pods: 1,
        force_loopback: true,
        ..SandboxConfig::default()
    })
    .await
    .expect("start");
    assert!(
        !stale.exists(),
        "a dead sandbox's directory is removed at start-up"
    );
    let own = std::fs::read_to_string(sb.dir().join(OWNER_FILE)).expect("owner file");
    assert_eq!(own, std::process::id().to_string());
    sb.shutdown().await;
}

/// Certificate and CA-file metadata as the real API reports it (dataplaneapi v3.2
/// `GetOneStorageSSLCertificate`, client-native `ParseCertificatesInfo`; HAProxy's
/// `show ssl ca-file` through `runtime/ssl_ca_files`), computed from the stored PEM; values as
/// `openssl x509 -serial -issuer -fingerprint -dates` prints them for the corpus files.
#[tokio::test]
async fn pods_certificate_metadata_is_what_the_real_api_reports() {
    let l = borrow_pod();
    let dp = Dp::new(&l.pod);
    let r = dp
        .push(&render("01-basic", "haproxy.cfg"), "&skip_reload=true")
        .await;
    assert_eq!(r.status(), 201);
    for (kind, name) in [
        ("storage/ssl_certificates", "site.pem"),
        ("runtime/ssl_ca_files", "clients-ca.pem"),
    ] {
        let _ = dp
            .req(
                reqwest::Method::DELETE,
                &format!("/v3/services/haproxy/{kind}/{name}"),
            )
            .send()
            .await;
    }
    let get = |path: String| {
        let req = dp.req(reqwest::Method::GET, &path);
        async move {
            let r = req.send().await.expect("get");
            let status = r.status().as_u16();
            (
                status,
                r.json::<serde_json::Value>().await.unwrap_or_default(),
            )
        }
    };
    let keys = |v: &serde_json::Value| -> Vec<String> {
        let mut k: Vec<String> = v.as_object().expect("object").keys().cloned().collect();
        k.sort();
        k
    };
    let site = render("05-tls", "ssl/site.pem");
    let r = dp
        .upload(
            "storage/ssl_certificates",
            "site.pem",
            site.clone().into_bytes(),
        )
        .await;
    assert_eq!(r.status(), 201);
    let created: serde_json::Value = r.json().await.expect("json");
    // Listing: name, path, description only (no size, no metadata).
    let (status, list) = get("/v3/services/haproxy/storage/ssl_certificates".into()).await;
    assert_eq!(status, 200);
    let entry = list
        .as_array()
        .expect("array")
        .iter()
        .find(|e| e["storage_name"] == "site.pem")
        .expect("listed")
        .clone();
    assert_eq!(keys(&entry), ["description", "file", "storage_name"]);
    assert_eq!(entry["description"], "managed SSL file");
    // One certificate: the fields the real handler fills, empty ones left out (`domains` names
    // only non-CA certificates, and the corpus one is `CA:TRUE`; no IP addresses).
    let (status, one) = get("/v3/services/haproxy/storage/ssl_certificates/site.pem".into()).await;
    assert_eq!(status, 200);
    assert_eq!(
        keys(&one),
        [
            "description",
            "file",
            "issuers",
            "not_after",
            "not_before",
            "serial",
            "size",
            "storage_name",
            "subject"
        ]
    );
    assert_eq!(one["file"], "/etc/haproxy/ssl/site.pem");
    assert_eq!(one["size"], site.len());
    // serial=6D480BD9A95DF8A7594DDA5A5D4AB7DAEDF11939, in decimal
    assert_eq!(
        one["serial"],
        "623886679975639042405780590102433805754648566073"
    );
    assert_eq!(one["issuers"], "site.haptic.test");
    assert_eq!(one["subject"], "site.haptic.test");
    assert_eq!(one["not_before"], "2026-11-30T05:49:15.000Z");
    assert_eq!(one["not_after"], "2126-11-06T05:49:15.000Z");
    assert!(
        one.get("sha256_finger_print").is_none(),
        "released handlers leave it out"
    );
    assert_eq!(created, one, "create answers the same model");
    // A CA file through the runtime endpoint: its count, then each certificate as HAProxy
    // prints it; certificates (with their key) are not CA files.
    let r = dp
        .upload(
            "runtime/ssl_ca_files",
            "clients-ca.pem",
            render("07-ca", "ca/clients-ca.pem").into_bytes(),
        )
        .await;
    assert_eq!(r.status(), 201);
    let (status, cas) = get("/v3/services/haproxy/runtime/ssl_ca_files".into()).await;
    assert_eq!(status, 200);
    let names: Vec<&str> = cas
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|e| e["storage_name"].as_str())
        .collect();
    assert!(
        names.contains(&"clients-ca.pem") && !names.contains(&"site.pem"),
        "{names:?}"
    );
    let (status, ca) = get("/v3/services/haproxy/runtime/ssl_ca_files/clients-ca.pem".into()).await;
    assert_eq!(status, 200);
    assert_eq!(
        ca,
        serde_json::json!({"storage_name": "clients-ca.pem", "count": "1 certificate(s)"})
    );
    let (status, entry) =
        get("/v3/services/haproxy/runtime/ssl_ca_files/clients-ca.pem/entries/1".into()).await;
    assert_eq!(status, 200);
    assert_eq!(entry["serial"], "49B82019AA272FCD22D641602DADC739163D9F14");
    assert_eq!(entry["issuers"], "/CN=Haptic Test CA");
    assert_eq!(entry["subject"], "/CN=Haptic Test CA");
    assert_eq!(
        entry["sha1_finger_print"],
        "D62F0B1C37D39D671E7DFBD07F7AC933FBAD21BA"
    );
    assert_eq!(entry["algorithm"], "RSA2048");
    assert_eq!(entry["not_after"], "2126-11-06T05:49:16.000Z");
    let (status, _) =
        get("/v3/services/haproxy/runtime/ssl_ca_files/clients-ca.pem/entries/2".into()).await;
    assert_eq!(status, 404);
    let (status, _) = get("/v3/services/haproxy/runtime/ssl_ca_files/site.pem".into()).await;
    assert_eq!(status, 404, "a certificate is not a CA file");
    // Replaced content: the metadata follows the stored file.
    let reissued = read(&format!(
        "{}/../tests/integration/deployer/fixtures/site-reissued.pem",
        env!("CARGO_MANIFEST_DIR")
    ));
    let r = dp
        .req(
            reqwest::Method::PUT,
            "/v3/services/haproxy/storage/ssl_certificates/site.pem?skip_reload=true",
        )
        .header("content-type", "text/plain")
        .body(reissued)
        .send()
        .await
        .expect("put");
    assert_eq!(r.status(), 200);
    let (_, one) = get("/v3/services/haproxy/storage/ssl_certificates/site.pem".into()).await;
    assert_eq!(
        one["serial"],
        "540946127350749713935599286303148716407392305153"
    );
    for (kind, name) in [
        ("storage/ssl_certificates", "site.pem"),
        ("runtime/ssl_ca_files", "clients-ca.pem"),
    ] {
        let r = dp
            .req(
                reqwest::Method::DELETE,
                &format!("/v3/services/haproxy/{kind}/{name}"),
            )
            .send()
            .await
            .expect("delete");
        assert_eq!(r.status(), 204, "{kind}/{name}");
    }
}
