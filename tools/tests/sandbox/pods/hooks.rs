//! The `/_sandbox/` hooks: scripted faults, the request log, drift (bump-version, edit-config,
//! edit-file), and the control paths answering alike on a pod and on the API emulator.

use haptic_tools::sandbox::apiserver::{ApiServer, ApiServerConfig};
use serde_json::json;

use super::*;

async fn sandbox_get(dp: &Dp, path: &str) -> serde_json::Value {
    dp.c.get(format!("{}{path}", dp.base))
        .send()
        .await
        .expect("get")
        .json()
        .await
        .expect("json")
}

async fn sandbox_delete(dp: &Dp, path: &str) -> u16 {
    dp.c.delete(format!("{}{path}", dp.base))
        .send()
        .await
        .expect("delete")
        .status()
        .as_u16()
}

#[tokio::test]
async fn pods_faults_requests_and_drift_hooks() {
    let (l, dp) = real_pod().await;
    assert_eq!(sandbox_delete(&dp, "/_sandbox/requests").await, 200);
    let fault = json!({"method": "GET", "path": "configuration/version$", "status": 503,
                       "times": 1, "retry_after_s": 2});
    assert_eq!(dp.hook("/_sandbox/faults", fault).await.status, 201);
    let r = dp.get("configuration/version").await;
    assert_eq!((r.status, r.header("retry-after")), (503, Some("2")));
    assert_eq!(r.json()["code"], 503);
    let v = dp.version().await;
    let log = sandbox_get(&dp, "/_sandbox/requests").await;
    let statuses: Vec<u64> = log
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_u64().unwrap())
        .collect();
    assert_eq!(statuses, vec![503, 200]);
    assert_eq!(log[0]["path"], "/v3/services/haproxy/configuration/version");
    // drop: the connection closes without an answer
    dp.hook(
        "/_sandbox/faults",
        json!({"path": "/v3/info", "drop": true, "times": 1}),
    )
    .await;
    let dropped =
        dp.c.get(dp.url("/v3/info"))
            .basic_auth(&dp.user, Some(&dp.pass))
            .send()
            .await;
    assert!(dropped.is_err());
    assert_eq!(dp.get("/v3/info").await.status, 200);
    assert_eq!(sandbox_delete(&dp, "/_sandbox/faults").await, 200);
    // bump-version: the version moves, the content does not
    let before = strip_header(&dp.raw().await);
    assert_eq!(
        dp.hook("/_sandbox/bump-version", json!({})).await.json()["version"],
        v + 1
    );
    assert_eq!(dp.version().await, v + 1);
    assert_eq!(strip_header(&dp.raw().await), before);
    // edit-config behind the API's back: the content changes, the version only with bump_version
    let cfg = render("01-basic", "haproxy.cfg").replace("render 01-basic", "drifted");
    let edit = |q: &'static str| {
        dp.c.post(format!("{}/_sandbox/edit-config{q}", dp.base))
            .body(cfg.clone())
            .send()
    };
    let r = edit("").await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.json::<serde_json::Value>().await.unwrap()["reload"],
        "succeeded"
    );
    assert_eq!(dp.version().await, v + 1);
    assert_eq!(curl(&l.pod, "http", 80, None, "/"), "drifted");
    assert_eq!(edit("?bump_version=true").await.unwrap().status(), 200);
    assert_eq!(dp.version().await, v + 2);
    let r =
        dp.c.post(format!(
            "{}/_sandbox/edit-file?path=/etc/haproxy/maps/drift.map",
            dp.base
        ))
        .body("a b\n")
        .send()
        .await
        .unwrap();
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
}

/// The file without its `# _md5hash=` / `# _version=` header lines.
fn strip_header(text: &str) -> String {
    text.lines()
        .filter(|l| !l.starts_with("# _"))
        .collect::<Vec<_>>()
        .join("\n")
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

/// An API emulator of this test's own and its base URL (no trailing `/`).
async fn emulator() -> (ApiServer, String) {
    let api = ApiServer::start(ApiServerConfig::default())
        .await
        .expect("emulator");
    let base = api.url().trim_end_matches('/').to_string();
    (api, base)
}

/// The `/_sandbox/` control paths read JSON whatever the content type and answer alike on both
/// peers (a pod and the API emulator).
#[tokio::test]
async fn pods_and_emulator_control_paths_take_curl_d_and_answer_alike() {
    let (_api, emu) = emulator().await;
    let (_l, dp) = stand_in_pod().await;
    let mut answers = Vec::new();
    for (base, body) in [
        (dp.base.clone(), r#"{"reload":"fail","times":1}"#),
        (
            emu,
            r#"{"path":"nothing-matches-this","status":503,"times":1}"#,
        ),
    ] {
        let faults = format!("{base}/_sandbox/faults");
        let requests = format!("{base}/_sandbox/requests");
        let answer = tokio::task::spawn_blocking(move || {
            (
                curl_d("POST", &faults, Some(body)),
                curl_d("DELETE", &faults, None),
                curl_d("DELETE", &requests, None),
            )
        })
        .await
        .expect("curl");
        answers.push(answer);
    }
    let expected = (
        (201, json!({"ok": true, "faults": 1})),
        (200, json!({"ok": true})),
        (200, json!({"ok": true})),
    );
    assert_eq!(answers[0], expected, "pod");
    assert_eq!(answers[1], expected, "emulator");
}

/// Invalid faults are refused naming the field, and a fault whose `times` are used up is no
/// longer listed, on both peers.
#[tokio::test]
async fn pods_and_emulator_validate_faults_and_drop_spent_ones() {
    let (_api, emu) = emulator().await;
    let (_l, dp) = stand_in_pod().await;
    let c = client();
    for (base, probe) in [
        (dp.base.clone(), dp.url("configuration/version")),
        (
            emu.clone(),
            format!("{emu}/api/v1/namespaces/default/configmaps"),
        ),
    ] {
        let faults = format!("{base}/_sandbox/faults");
        let list = || async {
            c.get(&faults)
                .send()
                .await
                .unwrap()
                .json::<serde_json::Value>()
                .await
                .unwrap()
        };
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
        assert_eq!(list().await, json!([]), "{base}: nothing armed by refusals");
        let fault = r#"{"method":"GET","path":"(configuration/version|configmaps)$","status":500,"times":2}"#;
        assert_eq!(
            c.post(&faults).body(fault).send().await.unwrap().status(),
            201,
            "{base}"
        );
        assert_eq!(list().await[0]["remaining"], 2, "{base}");
        let probe = || {
            c.get(&probe)
                .basic_auth("admin", Some("haptic-sandbox"))
                .send()
        };
        for _ in 0..2 {
            assert_eq!(probe().await.unwrap().status(), 500, "{base}");
        }
        assert_eq!(list().await, json!([]), "{base}: the spent fault is gone");
        assert_eq!(probe().await.unwrap().status(), 200, "{base}");
    }
}
