//! observed-v3.4.md, "Transactions and configuration objects": one test per row.

use serde_json::{Value, json};

use super::*;

/// 01-basic plus a backend `be` with servers `s1` (weight 10) and `s2`.
fn with_backend() -> String {
    format!(
        "{}backend be\n    server s1 127.0.0.1:9001 weight 10\n    server s2 127.0.0.1:9002\n",
        render("01-basic", "haproxy.cfg")
    )
}

/// `POST transactions?version=v`.
async fn start_at(dp: &Dp, v: u64) -> Answer {
    dp.call("POST", &format!("transactions?version={v}"), Body::None)
        .await
}

/// A transaction started at the current version: its id.
async fn start(dp: &Dp) -> String {
    let r = start_at(dp, dp.version().await).await;
    assert_eq!(r.status, 201, "{}", r.text);
    r.json()["id"].as_str().unwrap().to_owned()
}

fn server(name: &str, port: u16, weight: u16) -> Value {
    json!({"name": name, "address": "127.0.0.1", "port": port, "weight": weight})
}

/// `PUT transactions/{id}`.
async fn commit(dp: &Dp, id: &str) -> Answer {
    dp.call("PUT", &format!("transactions/{id}"), Body::None)
        .await
}

async fn status_of(dp: &Dp, id: &str) -> Value {
    dp.get(&format!("transactions/{id}")).await.json()["status"].clone()
}

/// Row: `POST transactions?version=N`: 201 `{_version, id, status: in_progress}`; 409 when
/// stale; 400 without a version; 429 for the 21st open one.
#[tokio::test]
async fn observed_transaction_start_201_409_stale_400_without_version_429_for_the_21st() {
    let (_l, dp) = stand_in_pod().await;
    let v = dp.version().await;
    let r = start_at(&dp, v).await;
    assert_eq!(r.status, 201);
    let t = r.json();
    assert_eq!(
        (t["_version"].as_u64(), t["status"].as_str()),
        (Some(v), Some("in_progress"))
    );
    assert!(t["id"].is_string());
    let r = start_at(&dp, v + 1).await;
    assert_eq!(r.status, 409, "{}", r.text);
    assert!(r.message().starts_with("version mismatch"), "{}", r.text);
    let r = dp
        .call_off_spec(
            "POST",
            "transactions",
            Body::None,
            &[("startTransaction", "/parameters/query/version")],
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.text);
    for _ in 1..20 {
        start(&dp).await;
    }
    let r = start_at(&dp, v).await;
    assert_eq!(r.status, 429, "{}", r.text);
}

/// Row: server PUT inside a transaction: 202, no Reload-Id, body the server object; 404 unknown
/// server; 422 without a name.
#[tokio::test]
async fn observed_server_put_in_a_transaction_202_without_reload_id_404_unknown_422_nameless() {
    let (_l, dp) = stand_in_pod().await;
    dp.push(&with_backend(), "&skip_reload=true").await;
    let id = start(&dp).await;
    let path = |s: &str| format!("configuration/backends/be/servers/{s}?transaction_id={id}");
    let r = dp
        .call("PUT", &path("s1"), Body::Json(server("s1", 9001, 20)))
        .await;
    assert_eq!((r.status, r.header("reload-id")), (202, None), "{}", r.text);
    assert_eq!(r.json(), server("s1", 9001, 20));
    let r = dp
        .call("PUT", &path("nope"), Body::Json(server("nope", 1, 1)))
        .await;
    assert_eq!(r.status, 404);
    let r = dp
        .call_off_spec(
            "PUT",
            &path("s2"),
            Body::Json(json!({"address": "127.0.0.1", "port": 1})),
            &[("replaceServerBackend", "/body/name")],
        )
        .await;
    assert_eq!(r.status, 422, "{}", r.text);
}

/// Row: commit (PUT transactions/{id}): 202 + Reload-Id, `{status: success}`; 200 with
/// force_reload.
#[tokio::test]
async fn observed_commit_202_reload_id_success_200_with_force_reload() {
    let (l, dp) = real_pod().await;
    dp.push(&with_backend(), "&force_reload=true").await;
    let v = dp.version().await;
    let id = start(&dp).await;
    let path = format!("configuration/backends/be/servers/s1?transaction_id={id}");
    dp.call("PUT", &path, Body::Json(server("s1", 9001, 30)))
        .await;
    let r = commit(&dp, &id).await;
    assert_eq!(r.status, 202, "{}", r.text);
    assert_eq!(r.json()["status"], "success");
    assert_eq!(dp.wait_reload(&r.reload_id()).await["status"], "succeeded");
    assert_eq!(dp.version().await, v + 1);
    assert!(
        dp.raw()
            .await
            .contains("server s1 127.0.0.1:9001 weight 30")
    );
    assert_eq!(
        dp.get(&format!("transactions/{id}")).await.status,
        404,
        "committed: gone"
    );
    let id = start(&dp).await;
    let r = dp
        .call(
            "PUT",
            &format!("transactions/{id}?force_reload=true"),
            Body::None,
        )
        .await;
    assert_eq!((r.status, r.header("reload-id")), (200, None), "{}", r.text);
    assert_eq!(curl(&l.pod, "http", 80, None, "/"), "render 01-basic");
}

/// Rows: commit after another transaction committed: 406 "outdated"; `GET transactions` lists
/// it `outdated`.
#[tokio::test]
async fn observed_commit_after_another_commit_406_outdated_and_listed() {
    let (_l, dp) = stand_in_pod().await;
    let (a, b) = (start(&dp).await, start(&dp).await);
    assert_eq!(commit(&dp, &a).await.status, 202);
    assert_eq!(status_of(&dp, &b).await, "outdated");
    let r = commit(&dp, &b).await;
    assert_eq!(r.status, 406, "{}", r.text);
    assert!(r.message().contains("outdated"), "{}", r.text);
    let listed = dp.get("transactions").await.json();
    assert_eq!(
        listed,
        json!([{"id": b, "_version": listed[0]["_version"], "status": "outdated"}])
    );
    assert_eq!(
        dp.get("transactions?status=in_progress").await.json(),
        json!([])
    );
}

/// Row: commit after a raw push moved the version: 409; the transaction stays `in_progress`
/// until deleted.
#[tokio::test]
async fn observed_commit_after_a_raw_push_409_transaction_stays_in_progress() {
    let (_l, dp) = stand_in_pod().await;
    let id = start(&dp).await;
    dp.push(&render("01-basic", "haproxy.cfg"), "&skip_reload=true")
        .await;
    let r = commit(&dp, &id).await;
    assert_eq!(r.status, 409, "{}", r.text);
    assert!(r.message().starts_with("version mismatch"), "{}", r.text);
    assert_eq!(status_of(&dp, &id).await, "in_progress");
    assert_eq!(dp.delete(&format!("transactions/{id}")).await.status, 204);
    assert_eq!(dp.get("transactions").await.json(), json!([]));
}

/// Row: commit of an invalid configuration: 400; the transaction becomes `failed`; committing
/// it again is 406.
#[tokio::test]
async fn observed_commit_invalid_400_failed_then_406() {
    let (_l, dp) = stand_in_pod().await;
    let v = dp.version().await;
    let id = start(&dp).await;
    let rule = json!({"type": "return", "return_status_code": 200, "return_content_type": "text/plain",
                      "return_content_format": "string", "return_content": "two words"});
    let r = dp
        .call(
            "POST",
            &format!("configuration/frontends/fe_http/http_request_rules/0?transaction_id={id}"),
            Body::Json(rule),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.text);
    let r = commit(&dp, &id).await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert!(
        r.message().contains("expects either 'if' or 'unless'"),
        "{}",
        r.text
    );
    assert_eq!(status_of(&dp, &id).await, "failed");
    assert_eq!(
        dp.get("transactions?status=failed").await.json()[0]["id"],
        id.as_str()
    );
    assert_eq!(commit(&dp, &id).await.status, 406);
    assert_eq!(dp.version().await, v);
}

/// Row: `http-request return` with `return_content`: written as given (unquoted text with
/// blanks breaks the commit, above), `GET` returns it with its quotes.
#[tokio::test]
async fn observed_return_content_written_as_given_read_back_with_its_quotes() {
    let (l, dp) = real_pod().await;
    let rule = json!({"type": "return", "return_status_code": 200, "return_content_type": "text/plain",
                      "return_content_format": "string", "return_content": "\"two words\""});
    let r = dp
        .at_version(
            "PUT",
            "configuration/frontends/fe_http/http_request_rules/0",
            Body::Json(rule),
        )
        .await;
    dp.assert_reloaded(&r).await;
    let got = dp
        .get("configuration/frontends/fe_http/http_request_rules/0")
        .await
        .json();
    assert_eq!(got["return_content"], "\"two words\"");
    assert_eq!(curl(&l.pod, "http", 80, None, "/"), "two words");
}

/// Rows: server PUT `?version=N` with only runtime fields changed: 200, no reload, applied over
/// the stats socket, version +1; other fields, or no stats socket: 202 + Reload-Id.
#[tokio::test]
async fn observed_server_put_runtime_fields_200_without_reload_others_202() {
    let (l, dp) = real_pod().await;
    dp.push(&with_backend(), "&force_reload=true").await;
    let put = |body: Value| {
        let dp = &dp;
        async move {
            let v = dp.version().await;
            let path = format!("configuration/backends/be/servers/s1?version={v}");
            (v, dp.call("PUT", &path, Body::Json(body)).await)
        }
    };
    let reloads = dp.reload_count().await;
    let (v, r) = put(server("s1", 9001, 42)).await;
    assert_eq!((r.status, r.header("reload-id")), (200, None), "{}", r.text);
    assert_eq!(dp.version().await, v + 1);
    let sock = l.pod.dir.join("run/haproxy.sock");
    let out = std::process::Command::new("sh")
        .args([
            "-c",
            &format!(
                "echo 'get weight be/s1' | socat - UNIX-CONNECT:{}",
                sock.display()
            ),
        ])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("42 "),
        "applied over the socket"
    );
    assert_eq!(dp.reload_count().await, reloads, "no reload");
    let mut other = server("s1", 9001, 42);
    other["inter"] = json!(3000);
    let (_, r) = put(other).await;
    assert_eq!(r.status, 202, "{}", r.text);
    dp.wait_reload(&r.reload_id()).await;
    let no_socket = with_backend().replace(
        "    stats socket /var/run/haproxy.sock mode 600 level admin\n",
        "",
    );
    dp.push(&no_socket, "&force_reload=true").await;
    let (_, r) = put(server("s1", 9001, 7)).await;
    assert_eq!(r.status, 202, "without a stats socket: {}", r.text);
    dp.wait_reload(&r.reload_id()).await;
}

/// Row: any object PUT with an unknown JSON field: the field is dropped silently (no 400).
#[tokio::test]
async fn observed_unknown_json_field_dropped_silently() {
    let (_l, dp) = stand_in_pod().await;
    dp.push(&with_backend(), "&skip_reload=true").await;
    let v = dp.version().await;
    let mut body = server("s2", 9002, 5);
    body["no_such_field"] = json!("x");
    body["another"] = json!({"nested": 1});
    let r = dp
        .call_off_spec(
            "PUT",
            &format!("configuration/backends/be/servers/s2?version={v}"),
            Body::Json(body),
            &[
                ("replaceServerBackend", "/body/no_such_field"),
                ("replaceServerBackend", "/body/another"),
            ],
        )
        .await;
    assert_eq!(r.status, 200, "a weight change, at runtime: {}", r.text);
    assert_eq!(
        r.json(),
        server("s2", 9002, 5),
        "answered without the unknown fields"
    );
    assert!(
        dp.raw()
            .await
            .contains("server s2 127.0.0.1:9002 weight 5\n")
    );
}
