//! observed-v3.4.md, "Raw configuration and reloads": the reload rows.

use serde_json::json;

use super::*;

/// Arms a slow reload: the next reload stays queued for `ms` (the agent waits before it takes
/// the batch, so writes meanwhile join it).
async fn slow_next_reload(dp: &Dp, ms: u64) {
    let r = dp
        .hook(
            "/_sandbox/faults",
            json!({"reload": "slow", "times": 1, "delay_ms": ms}),
        )
        .await;
    assert_eq!(r.status, 201);
}

/// Rows: `GET reloads/{id}` while queued: 200 `{"status": "in_progress"}` without an `id`;
/// done: 200 `{id, reload_timestamp, response, status: succeeded}`.
#[tokio::test]
async fn observed_reload_queued_answers_in_progress_without_id_then_succeeded() {
    let (l, dp) = real_pod().await;
    slow_next_reload(&dp, 1500).await;
    let cfg = render("01-basic", "haproxy.cfg").replace("render 01-basic", "queued");
    let id = dp.push(&cfg, "").await.reload_id();
    let queued = dp.get(&format!("reloads/{id}")).await;
    assert_eq!(queued.status, 200);
    assert_eq!(
        queued.json(),
        json!({"status": "in_progress"}),
        "no id while queued"
    );
    let done = dp.wait_reload(&id).await;
    let mut keys: Vec<&String> = done.as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(
        keys,
        ["id", "reload_timestamp", "response", "status"],
        "{done}"
    );
    assert_eq!(
        (done["id"].as_str(), done["status"].as_str()),
        (Some(id.as_str()), Some("succeeded"))
    );
    assert!(done["reload_timestamp"].as_i64().unwrap() > 0);
    assert_eq!(curl(&l.pod, "http", 80, None, "/"), "queued");
}

/// Row: writes made while a reload is still queued get the same Reload-Id.
#[tokio::test]
async fn observed_queued_writes_share_one_reload_id() {
    let (_l, dp) = real_pod().await;
    slow_next_reload(&dp, 1500).await;
    let cfg = render("01-basic", "haproxy.cfg");
    let first = dp
        .push(&cfg.replace("render 01-basic", "one"), "")
        .await
        .reload_id();
    let second = dp
        .push(&cfg.replace("render 01-basic", "two"), "")
        .await
        .reload_id();
    let map = dp.upload("storage/maps", "shared.map", "a b\n").await;
    assert_eq!(map.status, 201);
    let put = dp.put_text("storage/maps/shared.map", "a c\n").await;
    assert_eq!(put.status, 202, "{}", put.text);
    assert_eq!(
        [second.as_str(), put.reload_id().as_str()],
        [first.as_str(); 2]
    );
    assert_eq!(dp.wait_reload(&first).await["status"], "succeeded");
    let next = dp.push(&cfg, "").await.reload_id();
    assert_ne!(next, first, "a write after the reload gets a new id");
    dp.wait_reload(&next).await;
}

/// Row: `GET reloads/{id}` failed: status `failed`; the file on disk is reverted, but the API's
/// in-memory configuration and version keep the failed one.
#[tokio::test]
async fn observed_reload_failed_reverts_the_file_memory_and_version_keep_the_failed_one() {
    let (l, dp) = real_pod().await;
    let good = dp.raw().await;
    let v = dp.version().await;
    let r = dp
        .hook("/_sandbox/faults", json!({"reload": "fail", "times": 1}))
        .await;
    assert_eq!(r.status, 201);
    let failed_cfg = format!(
        "{}backend kept_in_memory\n    server s1 127.0.0.1:9\n",
        render("01-basic", "haproxy.cfg").replace("render 01-basic", "failed")
    );
    let id = dp.push(&failed_cfg, "").await.reload_id();
    let res = dp.wait_reload(&id).await;
    assert_eq!(res["status"], "failed");
    assert!(
        res["response"].as_str().unwrap().contains("[ALERT]"),
        "{res}"
    );
    assert_eq!(dp.raw().await, good, "the file on disk is reverted");
    assert_eq!(
        dp.version().await,
        v + 1,
        "the version keeps the failed one"
    );
    let backend = dp.get("configuration/backends/kept_in_memory").await;
    assert_eq!(
        backend.status, 200,
        "objects read the in-memory configuration"
    );
    assert_eq!(
        curl(&l.pod, "http", 80, None, "/"),
        "render 01-basic",
        "HAProxy runs the old one"
    );
    // The next write goes on from the in-memory version.
    let r = dp
        .push(&render("01-basic", "haproxy.cfg"), "&force_reload=true")
        .await;
    assert_eq!(r.status, 201);
    assert_eq!(dp.version().await, v + 2);
}

/// Row: `GET reloads/{id}` unknown: 404 when after the last success; 200 `succeeded` when
/// older, even for an id that never existed; 400 when malformed.
#[tokio::test]
async fn observed_reload_unknown_id_404_after_last_success_older_succeeded_malformed_400() {
    let (_l, dp) = stand_in_pod().await;
    let id = dp
        .push(&render("01-basic", "haproxy.cfg"), "")
        .await
        .reload_id();
    assert_eq!(dp.wait_reload(&id).await["status"], "succeeded");
    let (date, n) = id.rsplit_once('-').unwrap();
    let n: u64 = n.parse().unwrap();
    let later = dp.get(&format!("reloads/{date}-{}", n + 5)).await;
    assert_eq!(later.status, 404, "{}", later.text);
    let older = dp.get("reloads/1999-01-01-7").await;
    assert_eq!(older.status, 200);
    assert_eq!(
        older.json(),
        json!({"id": "1999-01-01-7", "status": "succeeded"})
    );
    // Malformed ids: off the spec's pattern (on purpose), or of its shape but no date.
    for bad in ["yesterday", "2026-01-01-x"] {
        let r = dp
            .call_off_spec(
                "GET",
                &format!("reloads/{bad}"),
                Body::None,
                &[("getReload", "/parameters/path/id")],
            )
            .await;
        assert_eq!(r.status, 400, "{bad}");
    }
    assert_eq!(dp.get("reloads/2026-13-45-1").await.status, 400);
}
