//! Our CRDs and `deploy/` on an API server: `kubectl get hpcfg` prints our printer columns; a
//! fully populated status of each of our four kinds reads back equal (the structural schema
//! prunes nothing we write); `kubectl apply --server-side -f deploy/` passes. Each scenario runs on
//! the emulator here and on the real kube-apiserver in `crate::real_peers` (issue 18), where it
//! means most: the real server prunes and prints by the CRD itself.

use haptic_testkit::{Fleet, FleetConfig, Peers};

use crate::e2e::on_peers;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::Value;

/// The namespace asked for (the fleet suffixes it: [`Fleet::namespace`]).
const NS: &str = "haptic-manifests";

on_peers!(
    Emulator,
    a_full_status_of_each_kind_reads_back_unpruned => full_status_read_back,
    kubectl_get_hpcfg_prints_our_columns => kubectl_get_hpcfg,
    kubectl_apply_server_side_of_deploy_crds_passes => kubectl_apply_crds,
);

async fn fleet(peers: Peers) -> Fleet {
    Fleet::start(FleetConfig {
        peers,
        ..FleetConfig::api_only(NS)
    })
    .await
}

fn resource(crd: &CustomResourceDefinition) -> ApiResource {
    let gvk = GroupVersionKind::gvk(
        &crd.spec.group,
        &crd.spec.versions[0].name,
        &crd.spec.names.kind,
    );
    ApiResource::from_gvk_with_plural(&gvk, &crd.spec.names.plural)
}

/// Creates `example` (its status dropped by the create, as a status subresource does), then
/// writes its full status through `/status`; returns what the server holds afterwards.
async fn create_with_status(
    world: &Fleet,
    crd: &CustomResourceDefinition,
    example: &Value,
) -> Value {
    let api: Api<DynamicObject> =
        Api::namespaced_with(world.client(), world.namespace(), &resource(crd));
    let mut obj: DynamicObject = serde_json::from_value(example.clone()).unwrap();
    obj.metadata.namespace = Some(world.namespace().into());
    let name = obj.metadata.name.clone().unwrap();
    let created = api.create(&PostParams::default(), &obj).await.unwrap();
    assert!(
        created.data.get("status").is_none(),
        "{name}: the create ignores status (a status subresource)"
    );
    let mut with_status = created.clone();
    with_status.data["status"] = example["status"].clone();
    api.replace_status(&name, &PostParams::default(), &with_status)
        .await
        .unwrap();
    serde_json::to_value(api.get(&name).await.unwrap()).unwrap()
}

/// Each kind created from `crds::examples`, its full status written through `/status`, read
/// back equal.
pub async fn full_status_read_back(peers: Peers) {
    let world = fleet(peers).await;
    for (crd, example) in crate::crds::examples() {
        let back = create_with_status(&world, &crd, &example).await;
        assert_eq!(
            back["status"], example["status"],
            "{}: status read back from the real API server",
            crd.spec.names.kind
        );
        assert_eq!(
            back["spec"], example["spec"],
            "{}: spec",
            crd.spec.names.kind
        );
    }
    world.shutdown().await;
}

/// `kubectl get hpcfg` (and `-o wide`) with a full status: our columns and values.
pub async fn kubectl_get_hpcfg(peers: Peers) {
    let world = fleet(peers).await;
    let (crd, example) = crate::crds::examples()
        .into_iter()
        .find(|(c, _)| c.spec.names.kind == "HAProxyCfg")
        .unwrap();
    create_with_status(&world, &crd, &example).await;
    let checksum = example["spec"]["checksum"].as_str().unwrap();
    let (ok, out) = world.kubectl(&["get", "hpcfg", "-n", world.namespace()], None);
    assert!(ok, "{out}");
    let lines: Vec<Vec<&str>> = out
        .lines()
        .filter(|l| !l.starts_with("WARNING") && !l.trim().is_empty())
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines[0],
        [
            "NAME",
            "CHECKSUM",
            "PODS",
            "SYNCED",
            "CONFIGVALIDATED",
            "CONFIGPINNED",
            "AGE"
        ],
        "{out}"
    );
    assert_eq!(
        lines[1][..6],
        ["web-haproxycfg", checksum, "1/2", "False", "True", "False"],
        "{out}"
    );
    let (ok, wide) = world.kubectl(
        &["get", "hpcfg", "-n", world.namespace(), "-o", "wide"],
        None,
    );
    assert!(ok, "{wide}");
    let header = columns(&wide, "NAME");
    let row = columns(&wide, "web-haproxycfg");
    let size = header
        .iter()
        .position(|h| *h == "SIZE")
        .expect("-o wide adds SIZE");
    assert_eq!(row[size], "7", "{wide}");
    world.shutdown().await;
}

/// The columns of the first line of `out` that starts with `first`.
fn columns<'a>(out: &'a str, first: &str) -> Vec<&'a str> {
    out.lines()
        .find(|l| l.starts_with(first))
        .unwrap_or_else(|| panic!("no line starting with {first}:\n{out}"))
        .split_whitespace()
        .collect()
}

const DEPLOY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy");
const CRDS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/crds");

/// `kubectl apply --server-side -f <dir>` for each of `dirs`, then the last one again (unchanged,
/// no conflicts).
async fn kubectl_apply(peers: Peers, dirs: &[&str]) {
    let world = fleet(peers).await;
    for dir in dirs {
        let (ok, out) = world.kubectl(&["apply", "--server-side", "-f", dir], None);
        assert!(ok, "kubectl apply --server-side -f {dir}:\n{out}");
    }
    let last = dirs.last().unwrap();
    let (ok, out) = world.kubectl(&["apply", "--server-side", "-f", last], None);
    assert!(ok, "the second apply of {last}:\n{out}");
    world.shutdown().await;
}

/// `kubectl apply --server-side -f deploy/crds` over the CRDs the fleet created (another field
/// manager: co-owned, equal values, no conflict).
pub async fn kubectl_apply_crds(peers: Peers) {
    kubectl_apply(peers, &[CRDS]).await;
}

/// `kubectl apply --server-side -f deploy/crds`, then `-f deploy/` (twice). Real peers only: the
/// emulator serves no OpenAPI documents (kubectl's validation) and none of the kinds deploy/
/// holds besides ours (Namespace, ServiceAccount, Role, RoleBinding, StatefulSet,
/// PodDisruptionBudget, Service): it emulates what the controller calls.
pub async fn kubectl_apply_deploy(peers: Peers) {
    kubectl_apply(peers, &[CRDS, DEPLOY]).await;
}
