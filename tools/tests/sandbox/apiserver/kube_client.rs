//! kube's typed client and `watcher` against the emulator.

use super::{Env, haproxycfg_crd, spawn_watcher};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams,
};
use kube::runtime::watcher;
use serde_json::{Value, json};

fn api_err(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn cm(name: &str, data: Value) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": data})).unwrap()
}

#[tokio::test]
async fn crud_conflict_selectors_and_paging() {
    let env = Env::start().await;
    let cms: Api<ConfigMap> = Api::namespaced(env.client(false).await, "default");
    let a = cms
        .create(&PostParams::default(), &cm("a", json!({"k": "1"})))
        .await
        .unwrap();
    let rv_a: u64 = a
        .metadata
        .resource_version
        .clone()
        .unwrap()
        .parse()
        .unwrap();
    assert!(a.metadata.uid.is_some() && a.metadata.creation_timestamp.is_some());

    let dup = api_err(
        cms.create(&PostParams::default(), &cm("a", json!({})))
            .await
            .unwrap_err(),
    );
    assert_eq!((dup.code, dup.reason.as_str()), (409, "AlreadyExists"));

    let mut fresh = a.clone();
    fresh.data = Some([("k".to_owned(), "2".to_owned())].into());
    let b = cms
        .replace("a", &PostParams::default(), &fresh)
        .await
        .unwrap();
    let rv_b: u64 = b
        .metadata
        .resource_version
        .clone()
        .unwrap()
        .parse()
        .unwrap();
    assert!(rv_b > rv_a);
    assert_eq!(b.metadata.uid, a.metadata.uid);

    let stale = api_err(
        cms.replace("a", &PostParams::default(), &fresh)
            .await
            .unwrap_err(),
    );
    assert_eq!((stale.code, stale.reason.as_str()), (409, "Conflict"));
    assert!(
        stale.message.contains("the object has been modified"),
        "{}",
        stale.message
    );

    // a write that changes nothing keeps the resourceVersion
    let same = cms.replace("a", &PostParams::default(), &b).await.unwrap();
    assert_eq!(same.metadata.resource_version, b.metadata.resource_version);

    for (i, app) in ["x", "y", "x", "z"].iter().enumerate() {
        let mut c = cm(&format!("l{i}"), json!({}));
        c.metadata.labels = Some([("app".to_owned(), (*app).to_owned())].into());
        cms.create(&PostParams::default(), &c).await.unwrap();
    }
    let names = |l: kube::core::ObjectList<ConfigMap>| {
        l.items
            .into_iter()
            .map(|c| c.metadata.name.unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(
            cms.list(&ListParams::default().labels("app=x"))
                .await
                .unwrap()
        ),
        vec!["l0", "l2"]
    );
    assert_eq!(
        names(
            cms.list(&ListParams::default().labels("app in (y,z)"))
                .await
                .unwrap()
        ),
        vec!["l1", "l3"]
    );
    assert_eq!(
        names(
            cms.list(&ListParams::default().labels("app,app!=x"))
                .await
                .unwrap()
        ),
        vec!["l1", "l3"]
    );
    assert_eq!(
        names(
            cms.list(&ListParams::default().fields("metadata.name=l3"))
                .await
                .unwrap()
        ),
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

    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(env.client(false).await, "default");
    let secret = serde_json::from_value(
        json!({"metadata": {"name": "creds"}, "stringData": {"username": "admin"}}),
    )
    .unwrap();
    let stored = secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
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
    let gone: Vec<String> = gone
        .left()
        .unwrap()
        .items
        .into_iter()
        .map(|c| c.metadata.name.unwrap())
        .collect();
    assert_eq!(gone, vec!["l0", "l2"]);
    assert_eq!(
        names(
            cms.list(&ListParams::default().labels("app"))
                .await
                .unwrap()
        ),
        vec!["l1", "l3"]
    );
}

async fn install_crd(env: &Env) -> Api<DynamicObject> {
    let client = env.client(false).await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(haproxycfg_crd()).unwrap();
    crds.create(&PostParams::default(), &crd).await.unwrap();
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("haproxy-haptic.org", "v1alpha1", "HAProxyCfg"),
        "haproxycfgs",
    );
    Api::namespaced_with(client, "default", &ar)
}

fn cfg(name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(
        json!({"apiVersion": "haproxy-haptic.org/v1alpha1", "kind": "HAProxyCfg",
        "metadata": {"name": name}, "spec": spec}),
    )
    .unwrap()
}

#[tokio::test]
async fn custom_resource_status_subresource_generation_and_schema() {
    let env = Env::start().await;
    let api = install_crd(&env).await;
    let mut obj = cfg("c", json!({"checksum": "a1", "content": "x"}));
    obj.data["status"] = json!({"observedGeneration": 9});
    let created = api.create(&PostParams::default(), &obj).await.unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    assert_eq!(
        created.data.get("status"),
        None,
        "create must drop status when the status subresource is on"
    );

    // PUT without resourceVersion: 422
    let no_rv = api_err(
        api.replace(
            "c",
            &PostParams::default(),
            &cfg("c", json!({"checksum": "a2", "content": "x"})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((no_rv.code, no_rv.reason.as_str()), (422, "Invalid"));
    assert!(
        no_rv.message.contains(
            "metadata.resourceVersion: Invalid value: 0x0: must be specified for an update"
        ),
        "{}",
        no_rv.message
    );

    // status on the main endpoint is ignored; spec change bumps generation
    let mut next = created.clone();
    next.data["spec"]["checksum"] = json!("a2");
    next.data["status"] = json!({"observedGeneration": 5});
    let updated = api
        .replace("c", &PostParams::default(), &next)
        .await
        .unwrap();
    assert_eq!(updated.metadata.generation, Some(2));
    assert_eq!(updated.data.get("status"), None);

    // the status endpoint ignores spec and keeps generation
    let mut st = updated.clone();
    st.data["spec"]["checksum"] = json!("ignored");
    st.data["status"] =
        json!({"observedGeneration": 2, "conditions": [{"type": "Ready", "status": "True"}]});
    let after = api
        .replace_status("c", &PostParams::default(), &st)
        .await
        .unwrap();
    assert_eq!(after.metadata.generation, Some(2));
    assert_eq!(after.data["spec"]["checksum"], "a2");
    assert_eq!(after.data["status"]["observedGeneration"], 2);
    let patched = api
        .patch_status(
            "c",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"observedGeneration": 3}})),
        )
        .await
        .unwrap();
    assert_eq!(
        (
            patched.data["status"]["observedGeneration"].as_i64(),
            patched.metadata.generation
        ),
        (Some(3), Some(2))
    );

    // schema: required, minLength, enum, type; a status write missing a required field
    let bad = api_err(
        api.create(
            &PostParams::default(),
            &cfg(
                "bad",
                json!({"checksum": "", "mode": "odd", "replicas": "two"}),
            ),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((bad.code, bad.reason.as_str()), (422, "Invalid"));
    let fields: Vec<String> = bad
        .details
        .unwrap()
        .causes
        .into_iter()
        .map(|c| c.field)
        .collect();
    assert_eq!(
        fields,
        vec![
            "spec.checksum",
            "spec.mode",
            "spec.replicas",
            "spec.content"
        ]
    );
    assert!(
        bad.message
            .starts_with("HAProxyCfg.haproxy-haptic.org \"bad\" is invalid: ["),
        "{}",
        bad.message
    );
    let bad_status = api_err(
        api.patch_status(
            "c",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": [{"type": "Ready"}]}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(bad_status.code, 422);
    assert!(
        bad_status
            .message
            .contains("status.conditions[0].status: Required value"),
        "{}",
        bad_status.message
    );

    // JSON patch with a failing test op: 422; a passing one applies
    let test_fail = api_err(
        api.patch(
            "c",
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(json!([
            {"op": "test", "path": "/spec/checksum", "value": "nope"},
            {"op": "replace", "path": "/spec/checksum", "value": "zz"}]))
                .unwrap(),
            ),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(test_fail.code, 422);
    let ok = api
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "test", "path": "/spec/checksum", "value": "a2"},
            {"op": "replace", "path": "/spec/checksum", "value": "a3"}]))
                .unwrap(),
            ),
        )
        .await
        .unwrap();
    assert_eq!(
        (ok.data["spec"]["checksum"].as_str(), ok.metadata.generation),
        (Some("a3"), Some(3))
    );
    // server-side apply on /status: only status is taken, owned under the status subresource
    let status_apply = json!({"apiVersion": "haproxy-haptic.org/v1alpha1", "kind": "HAProxyCfg",
        "metadata": {"name": "c"}, "spec": {"checksum": "ignored"}, "status": {"observedGeneration": 3}});
    let applied = api
        .patch_status(
            "c",
            &PatchParams::apply("status-writer"),
            &Patch::Apply(status_apply),
        )
        .await
        .unwrap();
    assert_eq!(
        (
            applied.data["status"]["observedGeneration"].as_i64(),
            applied.data["spec"]["checksum"].as_str()
        ),
        (Some(3), Some("a3"))
    );
    let entry = applied
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .find(|m| m.manager.as_deref() == Some("status-writer"))
        .unwrap();
    assert_eq!(
        (entry.operation.as_deref(), entry.subresource.as_deref()),
        (Some("Apply"), Some("status"))
    );
    // server-side apply on the main resource ignores status and bumps generation on a spec change
    let main_apply = json!({"apiVersion": "haproxy-haptic.org/v1alpha1", "kind": "HAProxyCfg",
        "metadata": {"name": "c"}, "spec": {"checksum": "a4", "content": "x"}, "status": {"observedGeneration": 99}});
    let applied = api
        .patch(
            "c",
            &PatchParams::apply("deployer").force(),
            &Patch::Apply(main_apply),
        )
        .await
        .unwrap();
    assert_eq!(
        (
            applied.data["spec"]["checksum"].as_str(),
            applied.data["status"]["observedGeneration"].as_i64(),
            applied.metadata.generation
        ),
        (Some("a4"), Some(3), Some(4))
    );
    // strategic merge is refused for custom kinds, as upstream
    let smp = api_err(
        api.patch(
            "c",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"mode": "full"}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(smp.code, 415);
}

#[tokio::test]
async fn server_side_apply_conflicts_force_and_removal() {
    let env = Env::start().await;
    let leases: Api<Lease> = Api::namespaced(env.client(false).await, "default");
    let body = |holder: &str, extra: Value| {
        let mut spec = json!({"holderIdentity": holder, "leaseDurationSeconds": 15});
        spec.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "spec": spec})
    };
    let a = PatchParams::apply("manager-a");
    let created = leases
        .patch(
            "leader",
            &a,
            &Patch::Apply(body("a", json!({"leaseTransitions": 1}))),
        )
        .await
        .unwrap();
    assert_eq!(
        created.spec.as_ref().unwrap().holder_identity.as_deref(),
        Some("a")
    );
    let mf = created.metadata.managed_fields.clone().unwrap();
    assert_eq!(
        (mf[0].manager.as_deref(), mf[0].operation.as_deref()),
        (Some("manager-a"), Some("Apply"))
    );

    let b = PatchParams::apply("manager-b");
    let conflict = api_err(
        leases
            .patch("leader", &b, &Patch::Apply(body("b", json!({}))))
            .await
            .unwrap_err(),
    );
    assert_eq!((conflict.code, conflict.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        conflict.message,
        "Apply failed with 1 conflict: conflict with \"manager-a\": .spec.holderIdentity"
    );
    // same value: co-owned, no conflict
    leases
        .patch("leader", &b, &Patch::Apply(body("a", json!({}))))
        .await
        .unwrap();
    let forced = leases
        .patch(
            "leader",
            &b.clone().force(),
            &Patch::Apply(body("b", json!({}))),
        )
        .await
        .unwrap();
    assert_eq!(
        forced.spec.as_ref().unwrap().holder_identity.as_deref(),
        Some("b")
    );

    // manager-a stops applying leaseTransitions: removed (nobody else owns it)
    let a_again = leases
        .patch(
            "leader",
            &a,
            &Patch::Apply(
                json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "spec": {"leaseDurationSeconds": 15}}),
            ),
        )
        .await
        .unwrap();
    let spec = a_again.spec.unwrap();
    assert_eq!(
        (spec.lease_transitions, spec.holder_identity.as_deref()),
        (None, Some("b"))
    );

    // kube-lease-manager's release: strategic merge with nulls removes the fields
    let released = leases
        .patch(
            "leader",
            &PatchParams::default(),
            &Patch::Strategic(
                json!({"spec": {"holderIdentity": null, "leaseDurationSeconds": null}}),
            ),
        )
        .await
        .unwrap();
    let spec = released.spec.unwrap();
    assert_eq!(
        (spec.holder_identity, spec.lease_duration_seconds),
        (None, None)
    );
    // after the release, the next apply of a new holder is conflict-free
    let c = leases
        .patch(
            "leader",
            &PatchParams::apply("manager-c"),
            &Patch::Apply(body("c", json!({}))),
        )
        .await
        .unwrap();
    assert_eq!(c.spec.unwrap().holder_identity.as_deref(), Some("c"));

    let no_manager = env
        .http(
            "PATCH",
            "/apis/coordination.k8s.io/v1/namespaces/default/leases/leader",
            "application/apply-patch+yaml",
            Some(b"{}".to_vec()),
        )
        .await;
    assert_eq!(
        (no_manager.0, no_manager.1["reason"].as_str()),
        (422, Some("Invalid"))
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
    let left: Vec<String> = cms
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|c| c.metadata.name.unwrap())
        .collect();
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
    cms.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert_eq!(api_err(cms.get("held").await.unwrap_err()).code, 404);
}

#[tokio::test]
async fn size_limits_413_and_etcd_too_large() {
    let env = Env::start().await;
    let cms: Api<ConfigMap> = Api::namespaced(env.client(false).await, "default");
    let huge = cm("huge", json!({"k": "x".repeat(3 * 1024 * 1024 + 10)}));
    let e = api_err(cms.create(&PostParams::default(), &huge).await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (413, "RequestEntityTooLarge"));
    let big = cm("big", json!({"k": "x".repeat(2 * 1024 * 1024)}));
    let e = api_err(cms.create(&PostParams::default(), &big).await.unwrap_err());
    assert_eq!(
        (e.code, e.message.as_str()),
        (500, "etcdserver: request is too large")
    );
    assert_eq!(api_err(cms.get("big").await.unwrap_err()).code, 404);
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
    cms.patch(
        "live",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "2"}})),
    )
    .await
    .unwrap();
    assert!(
        matches!(w.event().await, watcher::Event::Apply(c) if c.data.as_ref().unwrap()["k"] == "2")
    );
    cms.delete("live", &DeleteParams::default()).await.unwrap();
    assert!(
        matches!(w.event().await, watcher::Event::Delete(c) if c.metadata.name.as_deref() == Some("live"))
    );

    // Hold the re-watch, end the stream, write and compact: the held watch resumes from an RV
    // older than the history and gets the ERROR 410 event; the watcher relists.
    let path = "/api/v1/namespaces/default/configmaps$";
    env.server
        .add_fault(haptic_tools::sandbox::apiserver::Fault {
            method: "GET".into(),
            path: path.into(),
            delay_ms: Some(1500),
            times: Some(1),
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
    cms.create(&PostParams::default(), &cm("during-gap", json!({})))
        .await
        .unwrap();
    env.server.compact();
    let mut names = Vec::new();
    loop {
        match w.next().await {
            Err(e) => assert!(e.contains("410") || e.contains("too old"), "{e}"),
            Ok(ev) => match ev {
                watcher::Event::Init => names.clear(),
                watcher::Event::InitApply(c) => names.push(c.metadata.name.unwrap()),
                watcher::Event::InitDone => break,
                other => panic!("unexpected event before the relist: {other:?}"),
            },
        }
    }
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
async fn kube_lease_manager_acquires_releases_and_hands_over() {
    let env = Env::start().await;
    let client = env.client(true).await;
    let build = |identity: &str| {
        kube_lease_manager::LeaseManagerBuilder::new(client.clone(), "leader")
            .with_namespace("default")
            .with_identity(identity)
            .with_duration(3)
            .with_grace(1)
            .build()
    };
    let one = build("one").await.unwrap();
    let two = build("two").await.unwrap();
    let wait = super::WAIT;
    assert!(
        tokio::time::timeout(wait, one.changed())
            .await
            .unwrap()
            .unwrap()
    );
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    let holder = |l: Lease| l.spec.and_then(|s| s.holder_identity);
    assert_eq!(
        holder(leases.get("leader").await.unwrap()).as_deref(),
        Some("one")
    );

    let waiter = tokio::spawn(async move {
        let r = two.changed().await;
        (two, r)
    });
    one.release().await.unwrap();
    let (two, won) = tokio::time::timeout(wait, waiter).await.unwrap().unwrap();
    assert!(won.unwrap());
    let lease = leases.get("leader").await.unwrap();
    assert_eq!(holder(lease.clone()).as_deref(), Some("two"));
    assert!(lease.spec.unwrap().lease_transitions.unwrap_or(0) >= 1);
    two.release().await.unwrap();
    assert_eq!(holder(leases.get("leader").await.unwrap()), None);
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
}
