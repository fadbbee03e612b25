//! Watch streams on the wire: selector transitions, bookmarks, `timeoutSeconds`, streaming lists.

use super::{Env, WAIT, create, merge_patch, spawn_watcher_with};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::runtime::watcher;
use serde_json::{Value, json};

/// Reads JSON lines from a watch response until `done` says stop or the stream ends.
async fn read_until(
    resp: &mut reqwest::Response,
    buf: &mut String,
    mut done: impl FnMut(&Value) -> bool,
) -> Vec<Value> {
    let mut events = Vec::new();
    tokio::time::timeout(WAIT, async {
        loop {
            while let Some(i) = buf.find('\n') {
                let line: String = buf.drain(..=i).collect();
                let ev: Value = serde_json::from_str(&line).unwrap();
                let stop = done(&ev);
                events.push(ev);
                if stop {
                    return;
                }
            }
            match resp.chunk().await.unwrap() {
                Some(c) => buf.push_str(std::str::from_utf8(&c).unwrap()),
                None => return,
            }
        }
    })
    .await
    .expect("watch stream stalled");
    events
}

fn summary(events: &[Value]) -> Vec<(String, String)> {
    events
        .iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap().to_owned(),
                e["object"]["metadata"]["name"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned(),
            )
        })
        .collect()
}

#[tokio::test]
async fn watch_selector_transitions_bookmarks_and_timeout() {
    let env = Env::start().await;
    let cms: Api<ConfigMap> = Api::namespaced(env.client(false).await, "default");
    let labelled =
        |name: &str, app: &str| json!({"metadata": {"name": name, "labels": {"app": app}}});
    create(&cms, labelled("a", "x")).await;
    create(&cms, labelled("other", "y")).await;
    let url = format!(
        "{}/api/v1/namespaces/default/configmaps?watch=true&labelSelector=app%3Dx&allowWatchBookmarks=true&timeoutSeconds=7",
        env.server.url()
    );
    let mut resp = reqwest::get(url).await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(resp.headers()["content-type"], "application/json");
    let mut buf = String::new();
    let first = read_until(&mut resp, &mut buf, |_| true).await;
    assert_eq!(summary(&first), vec![("ADDED".into(), "a".into())]);
    assert_eq!(first[0]["object"]["kind"], "ConfigMap");

    let relabel = |app: &str| json!({"metadata": {"labels": {"app": app}}});
    merge_patch(&cms, "a", relabel("y")).await;
    merge_patch(&cms, "a", relabel("x")).await;
    merge_patch(&cms, "other", json!({"data": {"k": "v"}})).await;
    merge_patch(&cms, "a", json!({"data": {"k": "v"}})).await;
    let changes = read_until(&mut resp, &mut buf, |e| e["type"] == "MODIFIED").await;
    assert_eq!(
        summary(&changes),
        vec![
            ("DELETED".into(), "a".into()),
            ("ADDED".into(), "a".into()),
            ("MODIFIED".into(), "a".into())
        ]
    );
    let rvs: Vec<u64> = changes
        .iter()
        .map(|e| {
            e["object"]["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    assert!(rvs.windows(2).all(|w| w[0] < w[1]), "{rvs:?}");

    let rest = read_until(&mut resp, &mut buf, |_| false).await;
    assert!(
        !rest.is_empty(),
        "expected at least one bookmark before the timeout"
    );
    for b in &rest {
        assert_eq!(
            (
                b["type"].as_str(),
                b["object"]["kind"].as_str(),
                b["object"]["apiVersion"].as_str()
            ),
            (Some("BOOKMARK"), Some("ConfigMap"), Some("v1"))
        );
        assert_eq!(
            b["object"]["metadata"]["resourceVersion"].as_str().unwrap(),
            env.server.resource_version().to_string()
        );
    }
}

#[tokio::test]
async fn watch_replays_from_resource_version_and_streaming_lists() {
    let env = Env::start().await;
    let cms: Api<ConfigMap> = Api::namespaced(env.client(false).await, "default");
    let mk = |name: &str| json!({"metadata": {"name": name}});
    let a = create(&cms, mk("a")).await;
    create(&cms, mk("b")).await;
    cms.delete("b", &Default::default()).await.unwrap();
    let url = format!(
        "{}/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={}&timeoutSeconds=1",
        env.server.url(),
        a.metadata.resource_version.unwrap()
    );
    let mut resp = reqwest::get(url).await.unwrap();
    let events = read_until(&mut resp, &mut String::new(), |_| false).await;
    assert_eq!(
        summary(&events),
        vec![("ADDED".into(), "b".into()), ("DELETED".into(), "b".into())]
    );

    let mut w = spawn_watcher_with(cms.clone(), watcher::Config::default().streaming_lists());
    assert!(matches!(w.event().await, watcher::Event::Init));
    assert!(
        matches!(w.event().await, watcher::Event::InitApply(c) if c.metadata.name.as_deref() == Some("a"))
    );
    assert!(matches!(w.event().await, watcher::Event::InitDone));
    create(&cms, mk("c")).await;
    assert!(
        matches!(w.event().await, watcher::Event::Apply(c) if c.metadata.name.as_deref() == Some("c"))
    );
    let log = env.server.requests();
    assert!(
        log.iter()
            .any(|r| r.query.contains("sendInitialEvents=true")),
        "{log:?}"
    );
    let lists = log
        .iter()
        .filter(|r| r.method == "GET" && !r.query.contains("watch"))
        .count();
    assert_eq!(lists, 0, "a streaming list makes no LIST request: {log:?}");
}

#[tokio::test]
async fn metadata_watcher_and_get_metadata() {
    let env = Env::start().await;
    let client = env.client(false).await;
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client, "default");
    create(
        &secrets,
        json!({"metadata": {"name": "s1", "labels": {"a": "b"}}, "stringData": {"password": "hunter2"}}),
    )
    .await;
    let meta = secrets.get_metadata("s1").await.unwrap();
    assert_eq!(meta.metadata.labels.unwrap()["a"], "b");
    let list = secrets.list_metadata(&Default::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);

    let meta_api: Api<kube::core::PartialObjectMeta<k8s_openapi::api::core::v1::Secret>> =
        Api::namespaced(env.client(false).await, "default");
    let mut w = spawn_watcher_with(meta_api, watcher::Config::default());
    let mut names = Vec::new();
    loop {
        match w.event().await {
            watcher::Event::InitApply(m) => names.push(m.metadata.name.unwrap()),
            watcher::Event::InitDone => break,
            _ => {}
        }
    }
    secrets.delete("s1", &Default::default()).await.unwrap();
    assert!(
        matches!(w.event().await, watcher::Event::Delete(m) if m.metadata.name.as_deref() == Some("s1"))
    );
    assert_eq!(names, vec!["s1"]);
    let log = env.server.requests();
    assert!(
        log.iter().any(|r| r.query.contains("watch=true")),
        "{log:?}"
    );
}

#[tokio::test]
async fn shutdown_ends_watch_streams_and_stops_serving() {
    let env = Env::start().await;
    let url = env.server.url();
    let mut resp = reqwest::get(format!("{url}/api/v1/namespaces/default/pods?watch=true"))
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let server = env.server;
    tokio::time::timeout(WAIT, server.shutdown())
        .await
        .expect("shutdown hung");
    let end = tokio::time::timeout(WAIT, resp.chunk())
        .await
        .expect("watch stream survived shutdown");
    assert!(!matches!(end, Ok(Some(_))), "{end:?}");
    assert!(reqwest::get(format!("{url}/version")).await.is_err());
}
