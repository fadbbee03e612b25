//! kube's typed client and `watcher` against the emulator: CRUD, conflicts, selectors, paging,
//! garbage collection, size limits, watch with 410 relist, the events recorder.

use super::{Env, create, merge_patch, spawn_watcher};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::watcher;
use serde_json::{Value, json};

/// The `Status` of an API error (panics on any other error).
pub fn api_err(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// Asserts that an API error's message holds `part` (showing the message when not).
#[track_caller]
pub fn assert_message_has(status: &kube::core::Status, part: &str) {
    assert!(status.message.contains(part), "{}", status.message);
}

fn cm(name: &str, data: Value) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": data})).unwrap()
}

/// The resourceVersion of a stored object, as a number.
fn rv(c: &ConfigMap) -> u64 {
    c.metadata
        .resource_version
        .as_deref()
        .unwrap()
        .parse()
        .unwrap()
}

/// The `Status` a create that must fail answers.
async fn refused_create(cms: &Api<ConfigMap>, c: &ConfigMap) -> kube::core::Status {
    api_err(cms.create(&PostParams::default(), c).await.unwrap_err())
}

/// The names `lp` lists, in the order listed.
async fn listed(cms: &Api<ConfigMap>, lp: &ListParams) -> Vec<String> {
    names(cms.list(lp).await.unwrap())
}

fn names(l: kube::core::ObjectList<ConfigMap>) -> Vec<String> {
    l.items
        .into_iter()
        .map(|c| c.metadata.name.unwrap())
        .collect()
}

#[tokio::test]
async fn crud_conflict_selectors_and_paging() {
    let env = Env::start().await;
    let cms: Api<ConfigMap> = Api::namespaced(env.client(false).await, "default");
    let a = cms
        .create(&PostParams::default(), &cm("a", json!({"k": "1"})))
        .await
        .unwrap();
    let rv_a = rv(&a);
    assert!(a.metadata.uid.is_some() && a.metadata.creation_timestamp.is_some());

    let dup = refused_create(&cms, &cm("a", json!({}))).await;
    assert_eq!((dup.code, dup.reason.as_str()), (409, "AlreadyExists"));

    let mut fresh = a.clone();
    fresh.data = Some([("k".to_owned(), "2".to_owned())].into());
    let b = cms
        .replace("a", &PostParams::default(), &fresh)
        .await
        .unwrap();
    let rv_b = rv(&b);
    assert!(rv_b > rv_a);
    assert_eq!(b.metadata.uid, a.metadata.uid);

    let stale = api_err(
        cms.replace("a", &PostParams::default(), &fresh)
            .await
            .unwrap_err(),
    );
    assert_eq!((stale.code, stale.reason.as_str()), (409, "Conflict"));
    assert_message_has(&stale, "the object has been modified");

    // a write that changes nothing keeps the resourceVersion
    let same = cms.replace("a", &PostParams::default(), &b).await.unwrap();
    assert_eq!(same.metadata.resource_version, b.metadata.resource_version);

    for (i, app) in ["x", "y", "x", "z"].iter().enumerate() {
        let mut c = cm(&format!("l{i}"), json!({}));
        c.metadata.labels = Some([("app".to_owned(), (*app).to_owned())].into());
        cms.create(&PostParams::default(), &c).await.unwrap();
    }
    assert_eq!(
        listed(&cms, &ListParams::default().labels("app=x")).await,
        vec!["l0", "l2"]
    );
    assert_eq!(
        listed(&cms, &ListParams::default().labels("app in (y,z)")).await,
        vec!["l1", "l3"]
    );
    assert_eq!(
        listed(&cms, &ListParams::default().labels("app,app!=x")).await,
        vec!["l1", "l3"]
    );
    assert_eq!(
        listed(&cms, &ListParams::default().fields("metadata.name=l3")).await,
        vec!["l3"]
    );
    let page = cms.list(&ListParams::default().limit(2)).await.unwrap();
    let token = page.metadata.continue_.clone().unwrap();
    assert_eq!(names(page), vec!["a", "l0"]);
    let rest = cms
        .list(&ListParams::default().limit(10).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(rest.metadata.continue_, None);
    assert_eq!(names(rest), vec!["l1", "l2", "l3"]);

    // metadata validation: names and label values as a real cluster checks them
    let bad_name = refused_create(&cms, &cm("Bad_Name", json!({}))).await;
    assert_eq!((bad_name.code, bad_name.reason.as_str()), (422, "Invalid"));
    assert_message_has(
        &bad_name,
        "metadata.name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain",
    );
    let mut long_label = cm("long-label", json!({}));
    long_label.metadata.labels =
        Some([("haproxy-haptic.org/checksum".to_owned(), "a".repeat(64))].into());
    let too_long = refused_create(&cms, &long_label).await;
    assert_eq!(too_long.code, 422);
    assert_message_has(&too_long, "must be no more than 63 characters");
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(env.client(false).await, "default");
    let stored = create(
        &secrets,
        json!({"metadata": {"name": "creds"}, "stringData": {"username": "admin"}}),
    )
    .await;
    assert_eq!(stored.type_.as_deref(), Some("Opaque"));
    assert_eq!(stored.data.unwrap()["username"].0, b"admin".to_vec());
    assert_eq!(stored.string_data, None);
    let dry = cms
        .create(
            &PostParams {
                dry_run: true,
                ..Default::default()
            },
            &cm("dry", json!({})),
        )
        .await
        .unwrap();
    assert_eq!(dry.metadata.name.as_deref(), Some("dry"));
    assert_eq!(api_err(cms.get("dry").await.unwrap_err()).code, 404);
    let all: Api<ConfigMap> = Api::all(env.client(false).await);
    assert_eq!(
        all.list(&ListParams::default()).await.unwrap().items.len(),
        5
    );
    let generated = cms
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"generateName": "gen-"}})).unwrap(),
        )
        .await
        .unwrap();
    assert!(generated.metadata.name.unwrap().starts_with("gen-"));
    let gone = cms
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels("app=x"),
        )
        .await
        .unwrap();
    let gone = names(gone.left().unwrap());
    assert_eq!(gone, vec!["l0", "l2"]);
    assert_eq!(
        listed(&cms, &ListParams::default().labels("app")).await,
        vec!["l1", "l3"]
    );
}

#[tokio::test]
async fn owner_references_garbage_collection() {
    let env = Env::start().await;
    let cms: Api<ConfigMap> = Api::namespaced(env.client(false).await, "default");
    let owner = cms
        .create(&PostParams::default(), &cm("owner", json!({})))
        .await
        .unwrap();
    let owned_by = |o: &ConfigMap| json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": o.metadata.name, "uid": o.metadata.uid}]);
    for name in ["child-1", "child-2"] {
        let mut c = cm(name, json!({}));
        c.metadata.owner_references = serde_json::from_value(owned_by(&owner)).unwrap();
        cms.create(&PostParams::default(), &c).await.unwrap();
    }
    let child = cms.get("child-1").await.unwrap();
    let mut grandchild = cm("grandchild", json!({}));
    grandchild.metadata.owner_references = serde_json::from_value(owned_by(&child)).unwrap();
    cms.create(&PostParams::default(), &grandchild)
        .await
        .unwrap();
    let bystander = cms
        .create(&PostParams::default(), &cm("bystander", json!({})))
        .await
        .unwrap();

    cms.delete("owner", &DeleteParams::background())
        .await
        .unwrap();
    let left = listed(&cms, &ListParams::default()).await;
    assert_eq!(left, vec!["bystander"]);

    let mut orphan = cm("orphan", json!({}));
    orphan.metadata.owner_references = serde_json::from_value(owned_by(&bystander)).unwrap();
    cms.create(&PostParams::default(), &orphan).await.unwrap();
    cms.delete("bystander", &DeleteParams::orphan())
        .await
        .unwrap();
    let kept = cms.get("orphan").await.unwrap();
    assert_eq!(kept.metadata.owner_references, Some(vec![]));

    // finalizers hold the object until they are removed
    let mut held = cm("held", json!({}));
    held.metadata.finalizers = Some(vec!["haproxy-haptic.org/cleanup".into()]);
    cms.create(&PostParams::default(), &held).await.unwrap();
    let deleting = cms
        .delete("held", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .unwrap();
    assert!(deleting.metadata.deletion_timestamp.is_some());
    merge_patch(&cms, "held", json!({"metadata": {"finalizers": null}})).await;
    assert_eq!(api_err(cms.get("held").await.unwrap_err()).code, 404);
}

/// A body over 3 MiB is 413; a ConfigMap whose data is over 1 MiB is kube-apiserver's 422
/// (`ValidateConfigMap`), checked before storage, so it never reaches etcd's 1.5 MiB limit (that
/// 500 is what a custom resource over 1.5 MiB gets: `publisher::faults` in the integration tests).
#[tokio::test]
async fn size_limits_413_and_data_too_long() {
    let env = Env::start().await;
    let cms: Api<ConfigMap> = Api::namespaced(env.client(false).await, "default");
    let huge = cm("huge", json!({"k": "x".repeat(3 * 1024 * 1024 + 10)}));
    let e = refused_create(&cms, &huge).await;
    assert_eq!((e.code, e.reason.as_str()), (413, "RequestEntityTooLarge"));
    let big = cm("big", json!({"k": "x".repeat(2 * 1024 * 1024)}));
    let e = refused_create(&cms, &big).await;
    assert_eq!(
        (e.code, e.reason.as_str(), e.message.as_str()),
        (
            422,
            "Invalid",
            "ConfigMap \"big\" is invalid: data: Too long: must have at most 1048576 bytes"
        )
    );
    assert_eq!(api_err(cms.get("big").await.unwrap_err()).code, 404);
    let fits = cm("fits", json!({"k": "x".repeat(1024 * 1024 - 1)}));
    cms.create(&PostParams::default(), &fits).await.unwrap();
}

#[tokio::test]
async fn watcher_streams_events_and_relists_after_410() {
    let env = Env::start().await;
    let cms: Api<ConfigMap> = Api::namespaced(env.client(false).await, "default");
    cms.create(&PostParams::default(), &cm("before", json!({})))
        .await
        .unwrap();
    let mut w = spawn_watcher(cms.clone());
    assert!(matches!(w.event().await, watcher::Event::Init));
    assert!(
        matches!(w.event().await, watcher::Event::InitApply(c) if c.metadata.name.as_deref() == Some("before"))
    );
    assert!(matches!(w.event().await, watcher::Event::InitDone));

    cms.create(&PostParams::default(), &cm("live", json!({"k": "1"})))
        .await
        .unwrap();
    assert!(
        matches!(w.event().await, watcher::Event::Apply(c) if c.metadata.name.as_deref() == Some("live"))
    );
    merge_patch(&cms, "live", json!({"data": {"k": "2"}})).await;
    assert!(
        matches!(w.event().await, watcher::Event::Apply(c) if c.data.as_ref().unwrap()["k"] == "2")
    );
    cms.delete("live", &DeleteParams::default()).await.unwrap();
    assert!(
        matches!(w.event().await, watcher::Event::Delete(c) if c.metadata.name.as_deref() == Some("live"))
    );

    // Make every re-watch fail, end the stream and see the failure; then write, compact and let
    // the re-watch through: it resumes from an RV older than the history, gets the ERROR 410
    // event, and the watcher relists. (The raw watcher has no backoff; its channel bounds the loop.)
    let path = "/api/v1/namespaces/default/configmaps$";
    env.server
        .add_fault(haptic_tools::sandbox::apiserver::Fault {
            method: "GET".into(),
            path: path.into(),
            status: Some(500),
            ..Default::default()
        })
        .unwrap();
    env.server
        .add_fault(haptic_tools::sandbox::apiserver::Fault {
            path: path.into(),
            end_watch: true,
            ..Default::default()
        })
        .unwrap();
    let failed = w.next().await.unwrap_err();
    assert!(
        failed.contains("500") || failed.contains("nternal"),
        "{failed}"
    );
    cms.create(&PostParams::default(), &cm("during-gap", json!({})))
        .await
        .unwrap();
    env.server.compact();
    env.server.clear_faults();
    let mut names = Vec::new();
    let mut expired = false;
    loop {
        match w.next().await {
            Err(e) => expired |= e.contains("410") || e.contains("too old"),
            Ok(ev) => match ev {
                watcher::Event::Init => names.clear(),
                watcher::Event::InitApply(c) => names.push(c.metadata.name.unwrap()),
                watcher::Event::InitDone => break,
                other => panic!("unexpected event before the relist: {other:?}"),
            },
        }
    }
    assert!(expired, "the watcher never saw the 410");
    assert_eq!(names, vec!["before", "during-gap"]);
    let watches: Vec<_> = env
        .server
        .requests()
        .into_iter()
        .filter(|r| r.query.contains("watch=true"))
        .collect();
    assert!(watches.len() >= 2, "{watches:?}");

    // raw: a watch from a too-old resourceVersion is a 200 stream with one ERROR 410 event
    let resp = reqwest::get(format!(
        "{}/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=1",
        env.server.url()
    ))
    .await
    .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let text = resp.text().await.unwrap();
    let ev: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(
        (
            ev["type"].as_str(),
            ev["object"]["code"].as_i64(),
            ev["object"]["reason"].as_str()
        ),
        (Some("ERROR"), Some(410), Some("Expired"))
    );
}

#[tokio::test]
async fn events_recorder_creates_then_patches_a_series() {
    let env = Env::start().await;
    let client = env.client(false).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let target = cms
        .create(&PostParams::default(), &cm("target", json!({})))
        .await
        .unwrap();
    let reporter = kube::runtime::events::Reporter {
        controller: "haptic".into(),
        instance: Some("haptic-0".into()),
    };
    let recorder = kube::runtime::events::Recorder::new(client.clone(), reporter);
    let event = kube::runtime::events::Event {
        type_: kube::runtime::events::EventType::Normal,
        reason: "ConfigApplied".into(),
        note: Some("applied".into()),
        action: "Apply".into(),
        secondary: None,
    };
    let reference = kube::Resource::object_ref(&target, &());
    recorder.publish(&event, &reference).await.unwrap();
    recorder.publish(&event, &reference).await.unwrap();
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client, "default");
    let list = events.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(list.len(), 1, "{list:?}");
    let e = &list[0];
    assert_eq!(
        (
            e.reason.as_deref(),
            e.regarding.as_ref().and_then(|r| r.name.as_deref())
        ),
        (Some("ConfigApplied"), Some("target"))
    );
    assert_eq!(e.series.as_ref().map(|s| s.count), Some(2));

    // the same event through the core v1 view, as `kubectl describe` reads it
    let core: Api<k8s_openapi::api::core::v1::Event> =
        Api::namespaced(env.client(false).await, "default");
    let by_object = ListParams::default().fields("involvedObject.name=target");
    let list = core.list(&by_object).await.unwrap().items;
    assert_eq!(list.len(), 1, "{list:?}");
    let c = &list[0];
    assert_eq!(
        (
            c.involved_object.name.as_deref(),
            c.message.as_deref(),
            c.reason.as_deref(),
            c.count
        ),
        (
            Some("target"),
            Some("applied"),
            Some("ConfigApplied"),
            Some(2)
        )
    );
    assert!(
        core.list(&ListParams::default().fields("involvedObject.name=other"))
            .await
            .unwrap()
            .items
            .is_empty()
    );
}
