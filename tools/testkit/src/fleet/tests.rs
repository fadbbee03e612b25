//! The fleet's tests: a missing real peer fails naming build.sh, and a fleet on the real peers
//! gives the controller exactly its Role.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ListParams, PostParams};

use super::*;

#[test]
fn missing_real_peers_fail_naming_build_sh_rather_than_skip() {
    let empty = tempfile::tempdir().unwrap();
    let err = crate::real::check_bin_dir(empty.path()).unwrap_err();
    let err = PeerError::Missing(err);
    let msg = err.to_string();
    assert!(msg.starts_with("real peers: "), "{msg}");
    assert!(msg.contains("run `bash tests/peers/build.sh`"), "{msg}");
    assert!(msg.contains("kube-apiserver is missing"), "{msg}");
}

fn configmap(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_peers_fleet_gives_the_controller_exactly_its_role() {
    let fleet = Fleet::start(FleetConfig {
        peers: Peers::Real,
        ..FleetConfig::pods(1)
    })
    .await;
    let real = fleet.real().unwrap();
    eprintln!(
        "etcd ready in {:?}, kube-apiserver {:?} later",
        real.api.started_in.0, real.api.started_in.1
    );
    let ns = fleet.namespace();
    let ctl = fleet.controller_client();
    // The pod, registered as the kubelet would, visible to the controller.
    let pods = Api::<Pod>::namespaced(ctl.clone(), ns)
        .list(&ListParams::default().labels(&fleet.selector()))
        .await
        .unwrap();
    assert_eq!(pods.items.len(), 1);
    let status = pods.items[0].status.clone().unwrap();
    assert_eq!(status.phase.as_deref(), Some("Running"));
    assert_eq!(
        status.pod_ip.as_deref(),
        Some(fleet.pods()[0].pod_ip.to_string().as_str())
    );
    // Outside the Role: refused by the real authorizer.
    let err = Api::<Pod>::namespaced(ctl.clone(), "kube-system")
        .list(&ListParams::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 403),
        "{err}"
    );
    let err = Api::<ConfigMap>::namespaced(ctl.clone(), ns)
        .create(&PostParams::default(), &configmap("by-controller"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 403),
        "{err}"
    );
    // The admin may.
    Api::<ConfigMap>::namespaced(fleet.client(), ns)
        .create(&PostParams::default(), &configmap("by-admin"))
        .await
        .unwrap();
    // The audit log saw the controller's calls, with the authorizer's verdicts.
    let audit = fleet.audit().unwrap();
    let sa = format!("system:serviceaccount:{ns}:{}", real.service_account);
    let mine: Vec<_> = audit.iter().filter(|e| e.user == sa).collect();
    assert!(
        mine.iter().any(|e| e.verb == "list"
            && e.resource == "pods"
            && e.namespace == ns
            && e.decision == "allow"
            && e.reason.contains("RoleBinding")),
        "{mine:#?}"
    );
    assert!(
        mine.iter()
            .any(|e| e.verb == "create" && e.resource == "configmaps" && e.code == 403),
        "{mine:#?}"
    );
    fleet.clear_api_requests().unwrap();
    assert!(fleet.api_requests().unwrap().is_empty());
    // No faults API on the real API server.
    let err = fleet.api_faults().clear().await.unwrap_err();
    assert!(matches!(err, crate::PeerError::Unsupported { .. }), "{err}");
    // A killed pod's object is deleted (not left Terminating).
    let name = fleet.pods()[0].name.clone();
    fleet.kill_pod(&name).await.unwrap();
    crate::eventually(Duration::from_secs(10), "the Pod object gone", || async {
        Api::<Pod>::namespaced(fleet.client(), ns)
            .get_opt(&name)
            .await
            .unwrap()
            .is_none()
    })
    .await;
    fleet.shutdown().await;
}
