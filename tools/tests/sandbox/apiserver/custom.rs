//! Custom resources through kube's dynamic API: CRD registration, status subresource,
//! generation, schema validation, JSON patch, server-side apply on both endpoints.

use super::kube_client::{api_err, assert_message_has};
use super::{Env, create, haproxycfg_crd};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use serde_json::{Value, json};

async fn install_crd(env: &Env) -> Api<DynamicObject> {
    let client = env.client(false).await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    create(&crds, haproxycfg_crd()).await;
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
    assert_message_has(
        &no_rv,
        "metadata.resourceVersion: Invalid value: 0x0: must be specified for an update",
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
    assert_message_has(&bad_status, "status.conditions[0].status: Required value");

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
    // keyed status conditions: two managers own one condition each; dropping one removes it
    // (first clear what the earlier replace_status wrote: removed fields lose every owner)
    let cleared = Patch::Merge(json!({"status": {"conditions": null}}));
    api.patch_status("c", &PatchParams::default(), &cleared)
        .await
        .unwrap();
    let cond_apply = |t: &str, st: &str| {
        Patch::Apply(
            json!({"apiVersion": "haproxy-haptic.org/v1alpha1", "kind": "HAProxyCfg",
            "metadata": {"name": "c"}, "status": {"conditions": [{"type": t, "status": st}]}}),
        )
    };
    api.patch_status(
        "c",
        &PatchParams::apply("ready-writer"),
        &cond_apply("Ready", "True"),
    )
    .await
    .unwrap();
    let both = api
        .patch_status(
            "c",
            &PatchParams::apply("synced-writer"),
            &cond_apply("Synced", "False"),
        )
        .await
        .unwrap();
    let types: Vec<&str> = both.data["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, vec!["Ready", "Synced"]);
    let steal = api_err(
        api.patch_status(
            "c",
            &PatchParams::apply("synced-writer"),
            &cond_apply("Ready", "False"),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(
        steal.message,
        "Apply failed with 1 conflict: conflict with \"ready-writer\": .status.conditions[type=\"Ready\"].status"
    );
    let empty = Patch::Apply(
        json!({"apiVersion": "haproxy-haptic.org/v1alpha1", "kind": "HAProxyCfg",
        "metadata": {"name": "c"}, "status": {"conditions": []}}),
    );
    let one_left = api
        .patch_status("c", &PatchParams::apply("ready-writer"), &empty)
        .await
        .unwrap();
    assert_eq!(
        one_left.data["status"]["conditions"],
        json!([{"type": "Synced", "status": "False"}])
    );
    assert_eq!(
        one_left.data["status"]["observedGeneration"], 3,
        "fields of other managers stay"
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

/// A group/version nothing serves (a CRD not installed) is answered as the real
/// kube-apiserver's mux answers it: plain-text `404 page not found`, not a Status; a served
/// group's unknown resource is still a Status (issue 27: the controller classes both as a
/// missing resource type, and tests on the emulator must see what a cluster sends).
#[tokio::test]
async fn an_unserved_group_is_a_plain_404_page_not_found() {
    let env = Env::start().await;
    for path in [
        "/apis/haproxy-haptic.org/v1alpha1/namespaces/default/haproxycfgs",
        "/apis/haproxy-haptic.org/v1alpha1",
        "/apis/haproxy-haptic.org",
    ] {
        let resp = reqwest::get(format!("{}{path}", env.server.url()))
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 404, "{path}");
        let ct = resp.headers()["content-type"].to_str().unwrap().to_owned();
        assert!(ct.starts_with("text/plain"), "{path}: {ct}");
        assert_eq!(resp.text().await.unwrap(), "404 page not found\n", "{path}");
    }
    install_crd(&env).await;
    let (code, body, _) = env.get("/apis/haproxy-haptic.org/v1alpha1/nothings").await;
    assert_eq!((code, body["kind"].as_str()), (404, Some("Status")));
}
