//! `haptic-sandbox demo`: pushes every render of `tests/corpus/renders/` in order to every pod
//! through the Dataplane endpoints over real HTTP (storage uploads, then the raw config with its
//! version, then the reload is polled) and checks the exact answers listed in
//! `tests/corpus/renders/README.md` with real HTTP(S) requests (curl) to each pod. 08 and 09 must be
//! rejected and the fleet keeps serving 07.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, Result};

use super::PodInfo;

/// One Dataplane client for one pod.
#[derive(Debug, Clone)]
pub struct DpClient {
    http: reqwest::Client,
    base: String,
    user: String,
    pass: String,
}

/// What pushing a render to a pod gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PushOutcome {
    /// Reload succeeded (202 + Reload-ID, polled to `succeeded`).
    Applied,
    /// Rejected with this status and message.
    Rejected(u16, String),
    /// Something else went wrong.
    Failed(String),
}

impl DpClient {
    /// A client for `url` with basic auth.
    pub fn new(url: &str, user: &str, pass: &str) -> Result<DpClient> {
        Ok(DpClient {
            http: reqwest::Client::builder()
                .no_proxy()
                .timeout(Duration::from_secs(30))
                .build()?,
            base: url.trim_end_matches('/').to_string(),
            user: user.into(),
            pass: pass.into(),
        })
    }

    fn req(&self, m: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(m, format!("{}{path}", self.base))
            .basic_auth(&self.user, Some(&self.pass))
    }

    /// `GET .../configuration/version`.
    pub async fn version(&self) -> Result<u64> {
        Ok(self
            .req(
                reqwest::Method::GET,
                "/v3/services/haproxy/configuration/version",
            )
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?)
    }

    /// Creates a storage file, or replaces it when it exists (409), without a reload.
    pub async fn put_file(&self, kind: &str, name: &str, bytes: Vec<u8>) -> Result<()> {
        let base = format!("/v3/services/haproxy/{kind}");
        let form = reqwest::multipart::Form::new().part(
            "file_upload",
            reqwest::multipart::Part::bytes(bytes.clone()).file_name(name.to_string()),
        );
        let r = self
            .req(reqwest::Method::POST, &base)
            .multipart(form)
            .send()
            .await?;
        if r.status().is_success() {
            return Ok(());
        }
        if r.status() != 409 {
            anyhow::bail!("{kind} {name}: {} {}", r.status(), r.text().await?);
        }
        let put = self.req(
            reqwest::Method::PUT,
            &format!("{base}/{name}?skip_reload=true"),
        );
        // general files take multipart since v3.1, the others text/plain (ecosystem.md §A.5)
        let put = if kind == "storage/general" || kind == "runtime/ssl_ca_files" {
            put.multipart(reqwest::multipart::Form::new().part(
                "file_upload",
                reqwest::multipart::Part::bytes(bytes).file_name(name.to_string()),
            ))
        } else {
            put.header("content-type", "text/plain").body(bytes)
        };
        let r = put.send().await?;
        if !r.status().is_success() {
            anyhow::bail!("replace {kind} {name}: {} {}", r.status(), r.text().await?);
        }
        Ok(())
    }

    /// Reloads of this pod's HAProxy that succeeded so far (`GET /v3/services/haproxy/reloads`,
    /// which the sandbox keeps whole for the endpoint's life).
    pub async fn reload_count(&self) -> Result<usize> {
        let reloads: Vec<serde_json::Value> = self
            .req(reqwest::Method::GET, "/v3/services/haproxy/reloads")
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        Ok(reloads
            .iter()
            .filter(|r| r["status"] == "succeeded")
            .count())
    }

    /// Pushes a raw configuration at the current version and polls its reload.
    pub async fn push_config(&self, cfg: &str) -> Result<PushOutcome> {
        let v = self.version().await?;
        let r = self
            .req(
                reqwest::Method::POST,
                &format!("/v3/services/haproxy/configuration/raw?version={v}"),
            )
            .header("content-type", "text/plain")
            .body(cfg.to_string())
            .send()
            .await?;
        let status = r.status().as_u16();
        if status != 202 {
            let body: serde_json::Value = r.json().await.unwrap_or_default();
            return Ok(PushOutcome::Rejected(
                status,
                body["message"].as_str().unwrap_or_default().to_string(),
            ));
        }
        let id = r
            .headers()
            .get("reload-id")
            .and_then(|h| h.to_str().ok())
            .context("202 without Reload-ID")?
            .to_string();
        for _ in 0..300 {
            let rr: serde_json::Value = self
                .req(
                    reqwest::Method::GET,
                    &format!("/v3/services/haproxy/reloads/{id}"),
                )
                .send()
                .await?
                .json()
                .await?;
            match rr["status"].as_str() {
                Some("succeeded") => return Ok(PushOutcome::Applied),
                Some("failed") => {
                    return Ok(PushOutcome::Failed(format!(
                        "reload {id} failed: {}",
                        rr["response"]
                    )));
                }
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
        Ok(PushOutcome::Failed(format!(
            "reload {id} still in progress"
        )))
    }
}

/// Uploads a render's auxiliary files (DESIGN.md §1 layout) and pushes its `haproxy.cfg`.
pub async fn push_render(dp: &DpClient, dir: &Path) -> Result<PushOutcome> {
    for (sub, kind) in [
        ("maps", "storage/maps"),
        ("ssl", "storage/ssl_certificates"),
        ("ca", "runtime/ssl_ca_files"),
        ("general", "storage/general"),
        // HAPTIC stores crt-lists as general files (renders/README.md)
        ("crt-lists", "storage/general"),
    ] {
        let Ok(rd) = std::fs::read_dir(dir.join(sub)) else {
            continue;
        };
        let mut files: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
        files.sort();
        for f in files {
            let name = f
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default()
                .to_string();
            dp.put_file(kind, &name, std::fs::read(&f)?).await?;
        }
    }
    let cfg = std::fs::read_to_string(dir.join("haproxy.cfg"))?;
    dp.push_config(&cfg).await
}

/// One expected answer of a render (renders/README.md).
#[derive(Debug, Clone)]
pub struct Check {
    /// Human description.
    pub what: String,
    /// https?
    pub tls: bool,
    /// Host header (or SNI for TLS).
    pub host: Option<String>,
    /// Path.
    pub path: String,
    /// Expected body (or its last line when `last_line`).
    pub expect: String,
    /// Compare the body's last line only.
    pub last_line: bool,
}

impl Check {
    /// `GET path` over http, the whole body expected to be `expect`.
    fn http(what: &str, path: &str, expect: &str) -> Check {
        Check {
            what: what.into(),
            tls: false,
            host: None,
            path: path.into(),
            expect: expect.into(),
            last_line: false,
        }
    }

    /// `GET /` over https, the whole body expected to be `expect`.
    fn https(what: &str, expect: &str) -> Check {
        Check {
            tls: true,
            ..Check::http(what, "/", expect)
        }
    }

    /// With a Host header (SNI for TLS).
    fn host(self, host: &str) -> Check {
        Check {
            host: Some(host.into()),
            ..self
        }
    }

    /// Comparing the body's last line only.
    fn last_line(self) -> Check {
        Check {
            last_line: true,
            ..self
        }
    }
}

/// The checks of render `name` (None: must be rejected; the fleet keeps 07).
pub fn checks_for(name: &str, dir: &Path) -> (bool, Vec<Check>) {
    let keep07 = vec![Check::https(
        "GET / on :443 (still 07)",
        "render 07-ca client-cert=0",
    )];
    match name {
        "01-basic" => (
            true,
            vec![Check::http("GET / on :80", "/", "render 01-basic")],
        ),
        "02-maps" => (
            true,
            vec![
                Check::http("GET / Host shop.haptic.test", "/", "render 02-maps shop-v1")
                    .host("shop.haptic.test"),
                Check::http("GET / unknown host", "/", "render 02-maps no-route")
                    .host("unknown.haptic.test"),
            ],
        ),
        "03-maps-changed" => (
            true,
            vec![
                Check::http(
                    "GET / Host shop.haptic.test",
                    "/",
                    "render 03-maps-changed shop-v2",
                )
                .host("shop.haptic.test"),
                Check::http(
                    "GET / Host new.haptic.test",
                    "/",
                    "render 03-maps-changed new-v1",
                )
                .host("new.haptic.test"),
            ],
        ),
        "04-errors" => (
            true,
            vec![
                Check::http("GET /", "/", "render 04-errors"),
                Check::http(
                    "GET /deny (403 page)",
                    "/deny",
                    "render 04-errors: forbidden",
                )
                .last_line(),
                Check::http("GET /x (503 page)", "/x", "render 04-errors: unavailable").last_line(),
            ],
        ),
        "05-tls" => (
            true,
            vec![
                Check::https("GET / on :443", "render 05-tls ssl=1"),
                Check::http("GET / on :80", "/", "render 05-tls ssl=0"),
            ],
        ),
        "06-crtlist" => (
            true,
            vec![
                Check::https(
                    "GET / on :443 SNI site.haptic.test",
                    "render 06-crtlist sni=site.haptic.test",
                )
                .host("site.haptic.test"),
            ],
        ),
        "07-ca" => (
            true,
            vec![Check::https(
                "GET / on :443 without client cert",
                "render 07-ca client-cert=0",
            )],
        ),
        "08-invalid" | "09-missing-map" => (false, keep07),
        "10-large-map" => {
            let backend = std::fs::read_to_string(dir.join("maps/hosts.map"))
                .ok()
                .and_then(|m| {
                    m.lines()
                        .find(|l| l.starts_with("host00042.haptic.test "))
                        .and_then(|l| l.split_whitespace().nth(1).map(str::to_string))
                })
                .unwrap_or_default();
            (
                true,
                vec![
                    Check::http(
                        "GET / Host host00042.haptic.test",
                        "/",
                        &format!("render 10-large-map {backend}"),
                    )
                    .host("host00042.haptic.test"),
                ],
            )
        }
        _ => (true, vec![]),
    }
}

/// Sends one check's request to a pod with curl (real HTTP/HTTPS, SNI through `--resolve`).
pub async fn run_check(pod: &PodInfo, c: &Check) -> String {
    let port = if c.tls { 443 } else { 80 } + pod.port_offset;
    let ip = pod.traffic_address;
    let mut cmd = tokio::process::Command::new("curl");
    cmd.args(["-sk", "--noproxy", "*", "--max-time", "5"]);
    if c.tls {
        let host = c.host.clone().unwrap_or_else(|| ip.to_string());
        if c.host.is_some() {
            cmd.args(["--resolve", &format!("{host}:{port}:{ip}")]);
        }
        cmd.arg(format!("https://{host}:{port}{}", c.path));
    } else {
        if let Some(h) = &c.host {
            cmd.args(["-H", &format!("Host: {h}")]);
        }
        cmd.arg(format!("http://{ip}:{port}{}", c.path));
    }
    match cmd.output().await {
        Ok(o) => String::from_utf8_lossy(&o.stdout).into_owned(),
        Err(e) => format!("<curl failed: {e}>"),
    }
}

/// Compares an answer with a check's expectation.
pub fn matches(c: &Check, body: &str) -> bool {
    if c.last_line {
        body.trim_end().lines().last().map(str::trim) == Some(c.expect.as_str())
    } else {
        body == c.expect
    }
}

/// Runs the demo against `pods`; prints to stdout; returns whether everything matched.
pub async fn run(pods: &[PodInfo], user: &str, pass: &str, renders: &Path) -> Result<bool> {
    let mut names: Vec<String> = std::fs::read_dir(renders)
        .with_context(|| format!("reading {}", renders.display()))?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("haproxy.cfg").exists())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    let mut all_ok = true;
    let mut summary = Vec::new();
    for name in &names {
        let dir = renders.join(name);
        let (valid, checks) = checks_for(name, &dir);
        println!(
            "== render {name} ({})",
            if valid {
                "must be applied"
            } else {
                "must be rejected; the fleet keeps 07"
            }
        );
        let mut render_ok = true;
        for pod in pods {
            let dp = DpClient::new(
                &format!("http://{}:{}", pod.pod_ip, pod.dataplane_port),
                user,
                pass,
            )?;
            let outcome = push_render(&dp, &dir).await;
            let push_ok = match (&outcome, valid) {
                (Ok(PushOutcome::Applied), true) => {
                    println!("  {}: pushed, reload succeeded", pod.name);
                    true
                }
                (Ok(PushOutcome::Rejected(code, msg)), false) => {
                    println!(
                        "  {}: rejected as expected ({code}): {}",
                        pod.name,
                        msg.lines().next().unwrap_or_default()
                    );
                    true
                }
                (o, _) => {
                    println!("  {}: UNEXPECTED push outcome: {o:?}", pod.name);
                    false
                }
            };
            render_ok &= push_ok;
            for c in &checks {
                let body = run_check(pod, c).await;
                let ok = matches(c, &body);
                render_ok &= ok;
                println!(
                    "  {}: {} -> {:?} {}",
                    pod.name,
                    c.what,
                    if c.last_line {
                        body.trim_end()
                            .lines()
                            .last()
                            .unwrap_or_default()
                            .to_string()
                    } else {
                        body.clone()
                    },
                    if ok { "OK" } else { "MISMATCH" }
                );
                if !ok {
                    println!("      expected {:?}", c.expect);
                }
            }
        }
        all_ok &= render_ok;
        summary.push((name.clone(), render_ok));
    }
    println!("== summary");
    for (name, ok) in &summary {
        println!(
            "  {name}: {}",
            if *ok {
                "as expected"
            } else {
                "NOT as expected"
            }
        );
    }
    println!(
        "{} of {} renders behaved as renders/README.md says on {} pod(s)",
        summary.iter().filter(|(_, ok)| *ok).count(),
        summary.len(),
        pods.len()
    );
    Ok(all_ok)
}
