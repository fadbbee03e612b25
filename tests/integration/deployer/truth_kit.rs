//! Shared helpers of the pod-truth tests (`pod_truth.rs`, `transactions.rs`, `reload_ids.rs`):
//! reads of what a pod's Data Plane API and HAProxy report (open transactions, what HAProxy
//! loaded, the request log with statuses), real HTTP through a pod, and the deployer's reports
//! of one render on one pod. Plain HTTP against the pods, so the tests read the pods as an
//! operator would, not through the client under test.

use std::path::Path;

use haptic_journal::{AuxKind, Checksum, Event, SyncMetadata};
use haptic_testkit::render::RENDERS;
use haptic_tools::sandbox::control::RequestRecord;
use haptic_tools::sandbox::pods::PodInfo;

use super::harness::*;

/// The deployer's test fixtures (`fixtures/`, README of `failover.rs`).
pub const FIXTURES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/integration/deployer/fixtures"
);

/// The corpus certificate `05-tls/ssl/site.pem` and its serial as curl prints it.
pub const SITE_SERIAL_HEX: &str = "6d480bd9a95df8a7594dda5a5d4ab7daedf11939";
/// `fixtures/site-reissued.pem` (same key, subject and size, another serial) as curl prints it.
pub const REISSUED_SERIAL_HEX: &str = "5ec0dd0000000000000000000000000000000001";

/// The corpus certificate `05-tls/ssl/site.pem`.
pub fn site_pem() -> Vec<u8> {
    std::fs::read(Path::new(haptic_testkit::render::RENDERS).join("05-tls/ssl/site.pem")).unwrap()
}

/// `fixtures/site-reissued.pem`.
pub fn reissued_pem() -> Vec<u8> {
    std::fs::read(Path::new(FIXTURES).join("site-reissued.pem")).unwrap()
}

/// `GET /v3/<path>` through the pod's Data Plane API: status and JSON body (null when none).
pub async fn api_get(pod: &Pod, path: &str) -> (u16, serde_json::Value) {
    let resp = haptic_testkit::http()
        .get(format!("{}/v3/{path}", pod.dataplane_url))
        .basic_auth(&pod.username, Some(&pod.password))
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)),
    )
}

/// `GET /v3/<path>` as text (storage files, the raw configuration).
pub async fn api_text(pod: &Pod, path: &str) -> String {
    haptic_testkit::http()
        .get(format!("{}/v3/{path}", pod.dataplane_url))
        .basic_auth(&pod.username, Some(&pod.password))
        .send()
        .await
        .unwrap()
        .error_for_status()
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The configuration file the pod runs (`GET .../configuration/raw`).
pub async fn running_config(pod: &Pod) -> String {
    api_text(pod, "services/haproxy/configuration/raw").await
}

/// The transactions the pod lists (`GET .../transactions`: in progress, outdated, failed).
pub async fn open_transactions(pod: &Pod) -> Vec<serde_json::Value> {
    match api_get(pod, "services/haproxy/transactions").await {
        (200, serde_json::Value::Array(a)) => a,
        other => panic!("{}: transactions: {other:?}", pod.name),
    }
}

/// Asserts that no pod of `pods` lists a transaction.
pub async fn assert_no_transactions(pods: &[Pod], what: &str) {
    for p in pods {
        let open = open_transactions(p).await;
        assert!(open.is_empty(), "{what}: {} lists {open:?}", p.name);
    }
}

/// The pod's configuration version (`GET .../configuration/version`).
pub async fn config_version(pod: &Pod) -> u64 {
    match api_get(pod, "services/haproxy/configuration/version").await {
        (200, v) => v.as_u64().unwrap_or_else(|| panic!("version {v}")),
        other => panic!("{}: version: {other:?}", pod.name),
    }
}

/// Opens a transaction by hand at the pod's current version; returns its id.
pub async fn start_transaction_by_hand(pod: &Pod) -> String {
    let v = config_version(pod).await;
    let resp = haptic_testkit::http()
        .post(format!(
            "{}/v3/services/haproxy/transactions?version={v}",
            pod.dataplane_url
        ))
        .basic_auth(&pod.username, Some(&pod.password))
        .send()
        .await
        .unwrap();
    assert_eq!(
        resp.status().as_u16(),
        201,
        "{}: a transaction by hand",
        pod.name
    );
    let body: serde_json::Value = resp.json().await.unwrap();
    body["id"].as_str().unwrap().to_owned()
}

/// What HAProxy loaded for the map `name`: (key, value) per entry
/// (`GET .../runtime/maps/{name}/entries`).
pub async fn loaded_map(pod: &Pod, name: &str) -> Vec<(String, String)> {
    let (status, v) = api_get(
        pod,
        &format!("services/haproxy/runtime/maps/{name}/entries"),
    )
    .await;
    assert_eq!(status, 200, "{}: runtime map {name}: {v}", pod.name);
    v.as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["key"].as_str().unwrap_or_default().to_owned(),
                e["value"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// The serial of the certificate HAProxy loaded under `name` (`GET .../runtime/ssl_certs/{name}`),
/// lower-case hex without separators or leading zeros.
pub async fn loaded_serial(pod: &Pod, name: &str) -> String {
    let (status, v) = api_get(pod, &format!("services/haproxy/runtime/ssl_certs/{name}")).await;
    assert_eq!(status, 200, "{}: runtime cert {name}: {v}", pod.name);
    normal_serial(v["serial"].as_str().unwrap_or_default())
}

/// A hex serial as [`loaded_serial`] compares them.
pub fn normal_serial(s: &str) -> String {
    s.to_ascii_lowercase()
        .replace(':', "")
        .trim_start_matches('0')
        .to_owned()
}

/// Real HTTP through the pod: `GET http://<pod>:80<path>` with `Host: host` when given.
pub fn http_get(pod: &PodInfo, path: &str, host: Option<&str>) -> String {
    let mut cmd = std::process::Command::new("curl");
    cmd.args(["-s", "--noproxy", "*", "--max-time", "5"]);
    if let Some(h) = host {
        cmd.args(["-H", &format!("Host: {h}")]);
    }
    cmd.arg(format!(
        "http://{}:{}{path}",
        pod.traffic_address,
        80 + pod.port_offset
    ));
    String::from_utf8_lossy(&cmd.output().expect("curl").stdout)
        .trim()
        .to_owned()
}

/// The serial of the certificate the pod serves for `sni` (`curl -w %{certs}`, lower-case hex).
pub fn served_serial(pod: &PodInfo, sni: &str) -> String {
    let port = 443 + pod.port_offset;
    let out = std::process::Command::new("curl")
        .args([
            "-sk",
            "--noproxy",
            "*",
            "--max-time",
            "5",
            "-o",
            "/dev/null",
        ])
        .args([
            "--resolve",
            &format!("{sni}:{port}:{}", pod.traffic_address),
        ])
        .args(["-w", "%{certs}", &format!("https://{sni}:{port}/")])
        .output()
        .expect("curl");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("Serial Number:"))
        .map(|s| normal_serial(s.trim()))
        .unwrap_or_default()
}

/// The pod's request log with statuses, oldest first.
pub async fn request_log(pod: &Pod) -> Vec<RequestRecord> {
    pod.faults().requests().await.unwrap()
}

/// `ConfigAppliedToPod` events of `render` on the pod named `pod`, in order: `Ok(sync)` for a
/// success, `Err(error)` for a failure.
pub fn reports(h: &Harness, pod: &str, render: Checksum) -> Vec<Result<SyncMetadata, String>> {
    h.events()
        .into_iter()
        .filter_map(|e| match e {
            Event::ConfigAppliedToPod {
                pod: p,
                checksum,
                sync,
                ..
            } if checksum == render && p.name.as_str() == pod => Some(match &sync.error {
                Some(err) => Err(err.clone()),
                None => Ok(sync),
            }),
            _ => None,
        })
        .collect()
}

/// Waits (bound: [`Harness::converge`]) until the deployer reported `render` on `pod` failed;
/// returns the error.
pub async fn wait_failed(h: &Harness, pod: &str, render: Checksum) -> String {
    let mut err = String::new();
    wait_for(
        &format!("{pod} reported failed"),
        h.converge,
        || match reports(h, pod, render).into_iter().find_map(Result::err) {
            Some(e) => {
                err = e;
                true
            }
            None => false,
        },
    )
    .await;
    err
}

/// Waits (bound: [`Harness::converge`]) until the deployer reported `render` applied on `pod`;
/// returns the report.
pub async fn wait_succeeded(h: &Harness, pod: &str, render: Checksum) -> SyncMetadata {
    let mut got = None;
    wait_for(&format!("{pod} reported applied"), h.converge, || {
        let all = reports(h, pod, render);
        got = all.iter().find_map(|r| r.as_ref().ok().cloned());
        got.is_some()
            .then_some(())
            .ok_or(format!("reports so far: {all:?}"))
    })
    .await;
    got.unwrap()
}

/// `InstanceDeploymentFailed` events of the pod named `pod` so far: (error, retryable).
pub fn failures(h: &Harness, pod: &str) -> Vec<(String, bool)> {
    h.events()
        .into_iter()
        .filter_map(|e| match e {
            Event::InstanceDeploymentFailed {
                endpoint,
                error,
                retryable,
                ..
            } if endpoint.pod.name.as_str() == pod => Some((error, retryable)),
            _ => None,
        })
        .collect()
}

/// Succeeded reloads of every pod of `pods`, in order.
pub async fn reload_counts(pods: &[Pod]) -> Vec<usize> {
    let mut out = Vec::new();
    for p in pods {
        out.push(p.reload_count().await);
    }
    out
}

/// Clears the faults and the request logs of every pod of `pods`.
pub async fn reset(pods: &[Pod]) {
    for p in pods {
        clear_faults(p).await;
        clear_requests(p).await;
    }
}

/// The configuration of a render with a file of every kind (the deployer's failover tests and
/// the binary's `e2e::down`): HAProxy answers `"<label> sni=<SNI> <the host's value in
/// maps/hosts.map>"` on :80 and on :443 (TLS through the crt-list [`CRT_LIST`], the client CA
/// `ca/clients-ca.pem` optional); with `errorfile 503 /etc/haproxy/general/503.http` in
/// `defaults` when `error_page`.
pub fn every_kind_config(label: &str, error_page: bool) -> String {
    let error_page = if error_page {
        "    errorfile 503 /etc/haproxy/general/503.http\n"
    } else {
        ""
    };
    format!(
        "global
    log stdout format raw local0
    stats socket /var/run/haproxy.sock mode 600 level admin
defaults
    log global
    mode http
    timeout connect 1s
    timeout client 5s
    timeout server 5s
{error_page}frontend fe_http
    bind *:80
    bind *:443 ssl crt-list /etc/haproxy/general/sites.crtlist ca-file /etc/haproxy/ssl/clients-ca.pem verify optional
    http-request return status 200 content-type text/plain lf-string \"{label} sni=%[ssl_fc_sni] %[req.hdr(host),lower,map(/etc/haproxy/maps/hosts.map,no-route)]\"
"
    )
}

/// The crt-list of [`every_kind_config`]: `site.pem` (ALPN h2, http/1.1) and `alt.pem`.
pub const CRT_LIST: &str = "/etc/haproxy/ssl/site.pem [alpn h2,http/1.1] site.haptic.test
/etc/haproxy/ssl/alt.pem alt.haptic.test
";

fn corpus_file(path: &str) -> Vec<u8> {
    std::fs::read(Path::new(RENDERS).join(path)).unwrap()
}

/// The files of [`every_kind_config`], sorted by path: the CA, the crt-list, the error page
/// `general/503.http` when `error_page`, the map, `ssl/alt.pem` and `site` as `ssl/site.pem`.
pub fn every_kind_files(site: Vec<u8>, error_page: bool) -> RenderFiles {
    let mut files = vec![
        (
            AuxKind::Ca,
            "ca/clients-ca.pem".into(),
            corpus_file("07-ca/ca/clients-ca.pem"),
        ),
        (
            AuxKind::CrtList,
            "crt-lists/sites.crtlist".into(),
            CRT_LIST.as_bytes().to_vec(),
        ),
        (
            AuxKind::Map,
            "maps/hosts.map".into(),
            corpus_file("02-maps/maps/hosts.map"),
        ),
        (
            AuxKind::Ssl,
            "ssl/alt.pem".into(),
            std::fs::read(Path::new(FIXTURES).join("alt.pem")).unwrap(),
        ),
        (AuxKind::Ssl, "ssl/site.pem".into(), site),
    ];
    if error_page {
        files.insert(
            2,
            (
                AuxKind::General,
                "general/503.http".into(),
                corpus_file("04-errors/general/503.http"),
            ),
        );
    }
    files
}
