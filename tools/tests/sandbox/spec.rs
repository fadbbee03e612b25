//! The spec check on real pod endpoints (issue 24, "The spec as the contract"): planted bad
//! requests and planted bad answers are recorded naming the operation and the field, the
//! sandbox's end fails on them, `/_sandbox/spec-violations` lists them, and the stand-in's own
//! answers to the spec's global and http-request-rule operations are held to the spec.
//!
//! Each test starts its own sandbox with one stand-in pod (no HAProxy process; pushes are still
//! validated with `haproxy -c`), so the violations a test sees are its own.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;

use haptic_tools::sandbox::pods::spec::{Side, SpecCheck, Violation, report};
use haptic_tools::sandbox::pods::{INITIAL_CONFIG, PodInfo, Sandbox, SandboxConfig};
use reqwest::Method;
use serde_json::{Value, json};

/// A sandbox with one stand-in pod, and a client of that pod's Dataplane endpoint.
async fn stand_in() -> (Sandbox, Dp) {
    let sb = Sandbox::start(SandboxConfig {
        pods: 0,
        stand_in_pods: 1,
        reload_delay: Duration::from_millis(100),
        spec_check: SpecCheck::Enforce,
        ..SandboxConfig::default()
    })
    .await
    .expect("sandbox starts");
    let dp = Dp::new(&sb.pods().remove(0));
    (sb, dp)
}

struct Dp {
    c: reqwest::Client,
    base: String,
}

impl Dp {
    fn new(pod: &PodInfo) -> Dp {
        Dp {
            c: reqwest::Client::builder()
                .no_proxy()
                .build()
                .expect("client"),
            base: pod.dataplane_url.clone(),
        }
    }

    fn req(&self, m: Method, path: &str) -> reqwest::RequestBuilder {
        self.c
            .request(m, format!("{}{path}", self.base))
            .basic_auth("admin", Some("haptic-sandbox"))
    }

    async fn send(&self, m: Method, path: &str, body: Option<Value>) -> u16 {
        let mut r = self.req(m, path);
        if let Some(b) = body {
            r = r.json(&b);
        }
        r.send().await.expect("request").status().as_u16()
    }

    async fn get(&self, path: &str) -> u16 {
        self.send(Method::GET, path, None).await
    }

    async fn version(&self) -> u64 {
        self.req(Method::GET, "/v3/services/haproxy/configuration/version")
            .send()
            .await
            .expect("version")
            .json()
            .await
            .expect("a number")
    }
}

/// (side, operationId or `METHOD template` or "-", field) of each violation, sorted.
fn named(found: &[Violation]) -> Vec<(Side, String, String)> {
    let mut out: Vec<(Side, String, String)> = found
        .iter()
        .map(|v| {
            let op = v.operation.as_ref().map_or_else(
                || "-".to_owned(),
                |o| {
                    o.id.clone()
                        .unwrap_or_else(|| format!("{} {}", o.method, o.template))
                },
            );
            (v.side, op, v.field.clone())
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

fn v(side: Side, op: &str, field: &str) -> (Side, String, String) {
    (side, op.to_owned(), field.to_owned())
}

#[tokio::test]
async fn spec_catches_planted_bad_requests_naming_operation_and_field() {
    let (sb, dp) = stand_in().await;
    let version = dp.version().await;
    assert!(
        sb.spec_violations().is_empty(),
        "{:?}",
        sb.spec_violations()
    );
    // an unknown query parameter
    dp.get("/v3/services/haproxy/configuration/version?verbose=true")
        .await;
    // a wrong type
    dp.send(
        Method::POST,
        "/v3/services/haproxy/transactions?version=latest",
        None,
    )
    .await;
    // a body missing a required field (a server needs its name), and a typo'd field
    dp.send(
        Method::POST,
        &format!("/v3/services/haproxy/configuration/backends/be/servers?version={version}"),
        Some(json!({"address": "127.0.0.1", "port": 8080})),
    )
    .await;
    dp.send(
        Method::PUT,
        &format!("/v3/services/haproxy/configuration/backends/be/servers/s1?version={version}"),
        Some(json!({"name": "s1", "address": "127.0.0.1", "wieght": 10})),
    )
    .await;
    // an unknown path
    dp.get("/v3/services/haproxy/configuration/nonsense").await;
    let found = sb.take_spec_violations();
    let requests: Vec<_> = named(&found)
        .into_iter()
        .filter(|(s, _, _)| *s == Side::Request)
        .collect();
    assert_eq!(
        requests,
        vec![
            v(Side::Request, "-", "/path"),
            v(Side::Request, "createServerBackend", "/body/name"),
            v(
                Side::Request,
                "getConfigurationVersion",
                "/parameters/query/verbose"
            ),
            v(Side::Request, "replaceServerBackend", "/body/wieght"),
            v(
                Side::Request,
                "startTransaction",
                "/parameters/query/version"
            ),
        ],
        "{}",
        report(&found)
    );
    let typo = found
        .iter()
        .find(|v| v.field == "/body/wieght")
        .expect("the typo");
    let op = typo.operation.as_ref().expect("an operation");
    assert_eq!(
        (op.method.as_str(), op.template.as_str()),
        (
            "PUT",
            "/services/haproxy/configuration/backends/{parent_name}/servers/{name}"
        )
    );
    sb.shutdown().await;
}

#[tokio::test]
async fn spec_catches_planted_bad_answers() {
    let (sb, dp) = stand_in().await;
    // A scripted answer the spec does not list: 201 to a read (default covers errors only).
    let hook = |body: Value| {
        let c = dp.c.clone();
        let url = format!("{}/_sandbox/faults", dp.base);
        async move {
            let r = c.post(url).json(&body).send().await.expect("fault");
            assert_eq!(r.status(), 201);
        }
    };
    // 200 then: a listed status with a body that is not the schema's (the version is an
    // integer, the scripted 200 answers the error object). 503 last: an error the spec does
    // not list is fine with the error body (default).
    for status in [201, 200, 503] {
        hook(json!({"method": "GET", "path": "configuration/version$", "status": status, "times": 1}))
            .await;
        dp.get("/v3/services/haproxy/configuration/version").await;
    }
    let found = sb.take_spec_violations();
    assert!(
        found
            .iter()
            .all(|v| v.status != Some(503) || v.field != "/status"),
        "default covers an error with the error body: {}",
        report(&found)
    );
    let planted: Vec<Violation> = found
        .iter()
        .filter(|v| v.status != Some(503))
        .cloned()
        .collect();
    assert_eq!(
        named(&planted),
        vec![
            v(Side::Response, "getConfigurationVersion", "/body"),
            v(Side::Response, "getConfigurationVersion", "/status"),
        ],
        "{}",
        report(&found)
    );
    let status = found.iter().find(|v| v.field == "/status").expect("status");
    assert_eq!(status.status, Some(201));
    assert!(
        status.message.contains("listed: 200, 404, default"),
        "{status}"
    );
    sb.shutdown().await;
}

#[tokio::test]
async fn spec_violations_fail_the_sandboxs_end_and_are_listed() {
    let (sb, dp) = stand_in().await;
    let listing = || async {
        dp.c.get(format!("{}/_sandbox/spec-violations", dp.base))
            .send()
            .await
            .expect("listing")
            .json::<Value>()
            .await
            .expect("json")
    };
    let l = listing().await;
    assert_eq!(l["mode"], "enforce");
    assert_eq!(
        l["spec"], "v32-spec.json",
        "what the stand-in reports in /v3/info"
    );
    assert_eq!(l["violations"], json!([]), "sandbox paths are not checked");
    dp.send(Method::POST, "/v3/services/haproxy/transactions", None)
        .await;
    let l = listing().await;
    assert_eq!(l["violations"][0]["field"], "/parameters/query/version");
    assert_eq!(l["violations"][0]["operation"]["id"], "startTransaction");
    assert!(
        l["allowed"]
            .as_array()
            .expect("allowances")
            .iter()
            .all(|a| a["reason"]
                .as_str()
                .is_some_and(|r| r.contains("observed-v3.4.md"))),
        "{l}"
    );
    // The sandbox's end panics, naming the operation and the field.
    let ended = tokio::spawn(sb.shutdown()).await;
    let panic = ended.expect_err("an enforcing sandbox fails at its end");
    let message = panic
        .into_panic()
        .downcast::<String>()
        .map(|s| *s)
        .unwrap_or_default();
    assert!(
        message.contains("startTransaction (POST /services/haproxy/transactions)")
            && message.contains("field /parameters/query/version")
            && message.contains("a required query parameter is missing"),
        "{message}"
    );
}

/// The stand-in serves what the spec defines for the global section and http-request rules:
/// `PUT .../configuration/global` is an operation of the spec (not a 405), and an
/// http-request rule carrying the spec's `capture_id` is taken (not a 400 "unknown field"): the
/// two answers upstream HAPTIC's Go deployer met (issue 24, finding 3).
#[tokio::test]
async fn spec_holds_the_stand_in_to_global_and_http_request_rule_operations() {
    let (sb, dp) = stand_in().await;
    // The global and defaults sections every pod starts with, then the test's own sections.
    let (head, _) = INITIAL_CONFIG.split_once("frontend ").expect("a frontend");
    let cfg = format!(
        "{head}frontend fe
    bind *:8080
    http-request set-header X-Test a
    default_backend be
backend be
    server s1 127.0.0.1:8081
"
    );
    let v = dp.version().await;
    let r = dp
        .req(
            Method::POST,
            &format!("/v3/services/haproxy/configuration/raw?version={v}&skip_reload=true"),
        )
        .header("content-type", "text/plain")
        .body(cfg)
        .send()
        .await
        .expect("push");
    assert!(r.status().is_success(), "{:?}", r.text().await);
    let v = dp.version().await;
    let global = dp
        .send(
            Method::PUT,
            &format!("/v3/services/haproxy/configuration/global?version={v}"),
            Some(json!({"runtime_apis": [
                {"address": "/var/run/haproxy.sock", "mode": "600", "level": "admin"}
            ]})),
        )
        .await;
    let v = dp.version().await;
    let rule = dp
        .send(
            Method::PUT,
            &format!(
                "/v3/services/haproxy/configuration/frontends/fe/http_request_rules/0?version={v}"
            ),
            // What a go-swagger client (upstream HAPTIC's deployer) sends: every field of the
            // model, the unset nullable ones as null.
            Some(
                json!({"type": "set-header", "hdr_name": "X-Test", "hdr_format": "b",
                        "capture_id": null}),
            ),
        )
        .await;
    let found = sb.take_spec_violations();
    assert!(found.is_empty(), "{}", report(&found));
    assert!(matches!(global, 200 | 202), "PUT global answered {global}");
    assert!(
        matches!(rule, 200 | 202),
        "PUT http_request_rules/0 answered {rule}"
    );
    sb.shutdown().await;
}
