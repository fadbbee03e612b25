//! The fault script and the request log, over HTTP (`/_sandbox/`) and through the Rust handle.

use super::{Env, WAIT, spawn_watcher};
use haptic_tools::sandbox::apiserver::Fault;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use kube::runtime::watcher;
use serde_json::json;

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}})).unwrap()
}

#[tokio::test]
async fn faults_answer_status_with_retry_after_then_expire() {
    let env = Env::start().await;
    let fault = json!({"method": "GET", "path": "/configmaps/a$", "status": 429, "times": 2, "retry_after_s": 1});
    let (code, _, _) = env
        .http(
            "POST",
            "/_sandbox/faults",
            "application/json",
            Some(fault.to_string().into_bytes()),
        )
        .await;
    assert_eq!(code, 201);
    let (code, body, headers) = env.get("/api/v1/namespaces/default/configmaps/a").await;
    assert_eq!(
        (code, body["reason"].as_str(), body["code"].as_i64()),
        (429, Some("TooManyRequests"), Some(429))
    );
    assert_eq!(headers.get("retry-after").unwrap(), "1");

    // kube without retries sees the raw 429; the fault is then used up and the real 404 shows
    let cms: Api<ConfigMap> = Api::namespaced(env.client(false).await, "default");
    match cms.get("a").await.unwrap_err() {
        kube::Error::Api(s) => assert_eq!(s.code, 429),
        other => panic!("{other:?}"),
    }
    match cms.get("a").await.unwrap_err() {
        kube::Error::Api(s) => assert_eq!((s.code, s.reason.as_str()), (404, "NotFound")),
        other => panic!("{other:?}"),
    }
    // a 500 on writes only, every time until cleared
    env.server
        .add_fault(Fault {
            method: "POST".into(),
            path: "configmaps".into(),
            status: Some(500),
            ..Default::default()
        })
        .unwrap();
    for _ in 0..2 {
        match cms
            .create(&PostParams::default(), &cm("a"))
            .await
            .unwrap_err()
        {
            kube::Error::Api(s) => assert_eq!((s.code, s.reason.as_str()), (500, "InternalError")),
            other => panic!("{other:?}"),
        }
    }
    let (code, _, _) = env.http("DELETE", "/_sandbox/faults", "", None).await;
    assert_eq!(code, 200);
    cms.create(&PostParams::default(), &cm("a")).await.unwrap();

    // kube with its default retry policy rides over one 429
    env.server
        .add_fault(Fault {
            path: "/configmaps/a$".into(),
            status: Some(429),
            times: Some(1),
            ..Default::default()
        })
        .unwrap();
    let retrying: Api<ConfigMap> = Api::namespaced(env.client(true).await, "default");
    assert_eq!(
        retrying.get("a").await.unwrap().metadata.name.as_deref(),
        Some("a")
    );

    let (code, log, _) = env.get("/_sandbox/requests").await;
    assert_eq!(code, 200);
    let seen: Vec<(String, String, i64)> = log
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["method"].as_str().unwrap().to_owned(),
                r["path"].as_str().unwrap().to_owned(),
                r["status"].as_i64().unwrap(),
            )
        })
        .collect();
    let get_a = "/api/v1/namespaces/default/configmaps/a".to_owned();
    let post = "/api/v1/namespaces/default/configmaps".to_owned();
    assert_eq!(
        seen,
        vec![
            ("GET".into(), get_a.clone(), 429),
            ("GET".into(), get_a.clone(), 429),
            ("GET".into(), get_a.clone(), 404),
            ("POST".into(), post.clone(), 500),
            ("POST".into(), post.clone(), 500),
            ("POST".into(), post, 201),
            ("GET".into(), get_a.clone(), 429),
            ("GET".into(), get_a, 200),
        ]
    );
    assert!(
        log[0]["at"]
            .as_str()
            .unwrap()
            .parse::<jiff::Timestamp>()
            .is_ok()
    );
    let (code, _, _) = env.http("DELETE", "/_sandbox/requests", "", None).await;
    assert_eq!(code, 200);
    assert!(env.server.requests().is_empty());
}

#[tokio::test]
async fn faults_delay_drop_and_end_watch() {
    let env = Env::start().await;
    let cms: Api<ConfigMap> = Api::namespaced(env.client(false).await, "default");
    cms.create(&PostParams::default(), &cm("a")).await.unwrap();

    // delay then forward: the request still succeeds
    env.server
        .add_fault(Fault {
            path: "/configmaps/a$".into(),
            delay_ms: Some(200),
            times: Some(1),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(
        cms.get("a").await.unwrap().metadata.name.as_deref(),
        Some("a")
    );

    // drop: the connection closes without an answer, kube sees a transport error
    env.server
        .add_fault(Fault {
            path: "/configmaps/a$".into(),
            drop: true,
            times: Some(1),
            ..Default::default()
        })
        .unwrap();
    let err = cms.get("a").await.unwrap_err();
    assert!(
        !matches!(err, kube::Error::Api(_)),
        "expected a transport error, got {err:?}"
    );
    assert_eq!(env.server.requests().last().unwrap().status, 0);
    assert!(cms.get("a").await.is_ok());

    // end_watch: the open stream ends, the watcher re-watches from its last RV without a relist
    let mut w = spawn_watcher(cms.clone());
    assert!(matches!(w.event().await, watcher::Event::Init));
    assert!(matches!(w.event().await, watcher::Event::InitApply(_)));
    assert!(matches!(w.event().await, watcher::Event::InitDone));
    let watch_requests = || {
        env.server
            .requests()
            .into_iter()
            .filter(|r| r.query.contains("watch=true"))
            .count()
    };
    // status 200 is logged once the stream is registered, so end_watch can find it
    let open_watches = || {
        env.server
            .requests()
            .into_iter()
            .filter(|r| r.query.contains("watch=true") && r.status == 200)
            .count()
    };
    tokio::time::timeout(WAIT, async {
        while open_watches() == 0 {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap();
    let (code, _, _) = env
        .http(
            "POST",
            "/_sandbox/faults",
            "application/json",
            Some(
                json!({"path": "configmaps$", "end_watch": true})
                    .to_string()
                    .into_bytes(),
            ),
        )
        .await;
    assert_eq!(code, 201);
    cms.create(&PostParams::default(), &cm("b")).await.unwrap();
    assert!(
        matches!(w.event().await, watcher::Event::Apply(c) if c.metadata.name.as_deref() == Some("b"))
    );
    assert_eq!(watch_requests(), 2);
    let lists = env
        .server
        .requests()
        .into_iter()
        .filter(|r| {
            r.method == "GET" && r.path.ends_with("/configmaps") && !r.query.contains("watch")
        })
        .count();
    assert_eq!(lists, 1, "end_watch must not cause a relist");
}

#[tokio::test]
async fn sandbox_control_paths_list_reject_and_compact() {
    let env = Env::start().await;
    let post = |body: serde_json::Value| {
        env.http(
            "POST",
            "/_sandbox/faults",
            "application/json",
            Some(body.to_string().into_bytes()),
        )
    };
    let (code, body, _) = post(json!({"path": "(unclosed"})).await;
    assert_eq!((code, body["kind"].as_str()), (400, Some("Status")));
    let (code, _, _) =
        post(json!({"method": "PUT", "path": "leases", "status": 503, "times": 1})).await;
    assert_eq!(code, 201);
    let (code, list, _) = env.get("/_sandbox/faults").await;
    assert_eq!(code, 200);
    assert_eq!(
        list,
        json!([{"method": "PUT", "path": "leases", "status": 503, "times": 1, "retry_after_s": null,
        "delay_ms": null, "drop": false, "drop_after_apply": false, "end_watch": false,
        "remaining": 1}])
    );
    assert!(
        env.server.requests().is_empty(),
        "control paths are not logged"
    );

    let cms: Api<ConfigMap> = Api::namespaced(env.client(false).await, "default");
    let created = cms.create(&PostParams::default(), &cm("a")).await.unwrap();
    cms.create(&PostParams::default(), &cm("b")).await.unwrap();
    let (code, _, _) = env.http("POST", "/_sandbox/compact", "", None).await;
    assert_eq!(code, 200);
    let rv = created.metadata.resource_version.unwrap();
    let text = reqwest::get(format!(
        "{}/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={rv}",
        env.server.url()
    ))
    .await
    .unwrap()
    .text()
    .await
    .unwrap();
    let ev: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(
        (ev["type"].as_str(), ev["object"]["code"].as_i64()),
        (Some("ERROR"), Some(410))
    );
}
