//! `haptic::k8s::discovery` against the Kubernetes API emulator.

use std::time::Duration;

use haptic::dispatch::input::Input;
use haptic::k8s::discovery::{DiscoveryConfig, PodDiscovery, admitted_endpoint, read_credentials};
use haptic_journal::Event;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{NS, api_server};

async fn create_pod(pods: &Api<Pod>, name: &str, app: &str, annotations: serde_json::Value) {
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"app": app}, "annotations": annotations},
        "spec": {"containers": [{"name": "haproxy", "image": "haproxy"}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
}

async fn set_status(pods: &Api<Pod>, name: &str, phase: &str, ready: bool, ip: &str) {
    let status = json!({"status": {
        "phase": phase,
        "podIP": ip,
        "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]
    }});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}

/// The events of one diff: terminations (pod names), then the discovered set (pod name, url).
async fn next_diff(
    rx: &mut mpsc::Receiver<Input>,
) -> Option<(Vec<String>, Vec<(String, String)>, bool)> {
    let mut terminated = Vec::new();
    loop {
        let input = tokio::time::timeout(Duration::from_secs(3), rx.recv())
            .await
            .ok()??;
        match input {
            Input::Event(Event::HAProxyPodTerminated { pod, .. }) => {
                terminated.push(pod.name.0);
            }
            Input::Event(Event::HAProxyPodsDiscovered {
                endpoints,
                authoritative,
                ..
            }) => {
                let set = endpoints
                    .into_iter()
                    .map(|e| (e.pod.name.0, e.url.0))
                    .collect();
                return Some((terminated, set, authoritative));
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

async fn quiet(rx: &mut mpsc::Receiver<Input>) {
    if let Ok(Some(i)) = tokio::time::timeout(Duration::from_millis(700), rx.recv()).await {
        panic!("unexpected {i:?}");
    }
}

#[tokio::test]
async fn pods_come_and_go_and_relists_terminate_nothing() {
    let emu = api_server().await;
    let pods: Api<Pod> = Api::namespaced(emu.client(), NS);
    create_pod(&pods, "hap-0", "haproxy", json!({})).await;
    set_status(&pods, "hap-0", "Running", true, "10.0.0.1").await;
    create_pod(&pods, "other", "web", json!({})).await;
    set_status(&pods, "other", "Running", true, "10.0.0.9").await;

    let (tx, mut rx) = mpsc::channel(16);
    let cancel = CancellationToken::new();
    let discovery = PodDiscovery::new(
        emu.client(),
        DiscoveryConfig {
            namespace: NS.into(),
            selector: "app=haproxy".into(),
            dataplane_port: 5555,
        },
    );
    let mut synced = discovery.synced();
    assert!(!*synced.borrow());
    let task = tokio::spawn(discovery.run(tx, cancel.clone()));

    let (t, set, auth) = next_diff(&mut rx).await.unwrap();
    assert!(t.is_empty() && auth);
    assert_eq!(set, vec![("hap-0".into(), "http://10.0.0.1:5555".into())]);
    synced.wait_for(|s| *s).await.unwrap();

    // Added but not ready: not admitted, no event. Ready: admitted with the annotated port.
    create_pod(
        &pods,
        "hap-1",
        "haproxy",
        json!({"haproxy-haptic.org/dataplane-port": "5556"}),
    )
    .await;
    set_status(&pods, "hap-1", "Running", false, "10.0.0.2").await;
    quiet(&mut rx).await;
    set_status(&pods, "hap-1", "Running", true, "10.0.0.2").await;
    let (t, set, _) = next_diff(&mut rx).await.unwrap();
    assert!(t.is_empty());
    assert_eq!(
        set,
        vec![
            ("hap-0".into(), "http://10.0.0.1:5555".into()),
            ("hap-1".into(), "http://10.0.0.2:5556".into())
        ]
    );

    // Unready: terminated, then the remaining set.
    set_status(&pods, "hap-0", "Running", false, "10.0.0.1").await;
    let (t, set, _) = next_diff(&mut rx).await.unwrap();
    assert_eq!(t, vec!["hap-0".to_owned()]);
    assert_eq!(set.len(), 1);

    // A forced 410 relist and an ended watch: no spurious termination, no event at all.
    super::force_relist(&emu, "pods");
    quiet(&mut rx).await;
    let lists = emu
        .emulator()
        .unwrap()
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/pods") && !r.query.contains("watch=true"))
        .count();
    assert!(lists >= 2, "the watch restart relisted ({lists} lists)");

    // Deleted: terminated, then the empty (authoritative) set.
    pods.delete("hap-1", &DeleteParams::default())
        .await
        .unwrap();
    let (t, set, auth) = next_diff(&mut rx).await.unwrap();
    assert_eq!(t, vec!["hap-1".to_owned()]);
    assert!(set.is_empty() && auth);

    cancel.cancel();
    task.await.unwrap().unwrap();
}

/// Reads the credentials of the Secret `name`; they must be `want` (username, password).
async fn credentials_are(
    emu: &super::Fleet,
    name: &str,
    want: (&str, &str),
) -> haptic::k8s::discovery::Credentials {
    let c = read_credentials(emu.client(), NS, name).await.unwrap();
    assert_eq!((c.username.as_str(), c.password.as_str()), want, "{name}");
    c
}

#[tokio::test]
async fn credentials_come_from_the_secret() {
    let emu = api_server().await;
    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "dataplane", "namespace": NS},
        "stringData": {"username": "admin", "password": "s3cret"}
    }))
    .unwrap();
    Api::<Secret>::namespaced(emu.client(), NS)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let c = credentials_are(&emu, "dataplane", ("admin", "s3cret")).await;
    assert!(!format!("{c:?}").contains("s3cret"));
    assert!(read_credentials(emu.client(), NS, "absent").await.is_err());
}

/// Issue 16: a Secret written by upstream HAPTIC's chart (`dataplane_username`,
/// `dataplane_password`) works unchanged; a Secret with neither pair names both.
#[tokio::test]
async fn upstream_credential_keys_are_accepted() {
    let emu = api_server().await;
    let api = Api::<Secret>::namespaced(emu.client(), NS);
    for (name, data) in [
        (
            "upstream",
            json!({"dataplane_username": "YWRtaW4=", "dataplane_password": "dXBzdHJlYW0="}),
        ),
        ("neither", json!({"user": "YWRtaW4="})),
    ] {
        let secret: Secret = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": NS},
            "data": data
        }))
        .unwrap();
        api.create(&PostParams::default(), &secret).await.unwrap();
    }
    credentials_are(&emu, "upstream", ("admin", "upstream")).await;
    let e = read_credentials(emu.client(), NS, "neither")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("`username` and `password`") && e.contains("dataplane_password"),
        "{e}"
    );
}

/// Issue 16: the watched Secret publishes its credentials, then a rotated password, without
/// a restart; a deleted Secret keeps the last credentials.
#[tokio::test]
async fn a_rotated_secret_reaches_the_watchers() {
    use haptic::k8s::credentials::CredentialsWatch;
    let emu = api_server().await;
    let api = Api::<Secret>::namespaced(emu.client(), NS);
    let watch = CredentialsWatch::new(emu.client(), NS, "dataplane");
    let mut rx = watch.subscribe();
    let cancel = CancellationToken::new();
    let task = tokio::spawn(watch.run(cancel.clone()));
    // Absent at first: nothing published.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(rx.borrow().is_none());
    let secret = |pass: &str| -> Secret {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "dataplane", "namespace": NS},
            "stringData": {"username": "admin", "password": pass}
        }))
        .unwrap()
    };
    api.create(&PostParams::default(), &secret("one"))
        .await
        .unwrap();
    let got = tokio::time::timeout(Duration::from_secs(10), rx.wait_for(Option::is_some))
        .await
        .expect("credentials within 10s")
        .unwrap()
        .clone()
        .unwrap();
    assert_eq!(got.password, "one");
    let mut current = api.get("dataplane").await.unwrap();
    current.string_data = None;
    current.data = Some(
        [
            (
                "username".to_owned(),
                k8s_openapi::ByteString(b"admin".to_vec()),
            ),
            (
                "password".to_owned(),
                k8s_openapi::ByteString(b"two".to_vec()),
            ),
        ]
        .into(),
    );
    api.replace("dataplane", &PostParams::default(), &current)
        .await
        .unwrap();
    let got = tokio::time::timeout(
        Duration::from_secs(10),
        rx.wait_for(|c| c.as_ref().is_some_and(|c| c.password == "two")),
    )
    .await
    .expect("the rotated password within 10s")
    .unwrap()
    .clone()
    .unwrap();
    assert_eq!(got.username, "admin");
    api.delete("dataplane", &DeleteParams::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        rx.borrow().as_ref().map(|c| c.password.as_str()),
        Some("two")
    );
    cancel.cancel();
    task.await.unwrap().unwrap();
}

#[test]
fn admission_rules() {
    let pod = |phase: &str, ready: &str, ip: Option<&str>, deleting: bool| -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": NS,
                "deletionTimestamp": if deleting { json!("2026-01-01T00:00:00Z") } else { json!(null) },
                "annotations": {"haproxy-haptic.org/dataplane-port": "nope"}},
            "status": {"phase": phase, "podIP": ip,
                "conditions": [{"type": "Ready", "status": ready}]}
        }))
        .unwrap()
    };
    let ok = admitted_endpoint(&pod("Running", "True", Some("fd00::1"), false), 5555).unwrap();
    assert_eq!(ok.url.0, "http://[fd00::1]:5555");
    assert!(admitted_endpoint(&pod("Pending", "True", Some("10.0.0.1"), false), 5555).is_none());
    assert!(admitted_endpoint(&pod("Running", "False", Some("10.0.0.1"), false), 5555).is_none());
    assert!(admitted_endpoint(&pod("Running", "True", None, false), 5555).is_none());
    assert!(admitted_endpoint(&pod("Running", "True", Some("10.0.0.1"), true), 5555).is_none());
}

/// Issue 16: a pod whose Dataplane container (the one declaring the Dataplane port) is ready is
/// admitted although the pod is NotReady (HAProxy's own readiness waits for a configuration);
/// without a container declaring the port, the pod's Ready condition decides as before.
#[test]
fn admission_follows_the_dataplane_container() {
    let pod = |pod_ready: &str,
               dataplane_ready: bool,
               port: i32,
               annotation: Option<&str>|
     -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": NS,
                "annotations": annotation.map_or(json!({}), |a| json!({"haproxy-haptic.org/dataplane-port": a}))},
            "spec": {"containers": [
                {"name": "haproxy", "image": "haproxy", "ports": [{"containerPort": 80}]},
                {"name": "dataplane", "image": "dataplaneapi", "ports": [{"containerPort": port}]}
            ]},
            "status": {"phase": "Running", "podIP": "10.0.0.1",
                "conditions": [{"type": "Ready", "status": pod_ready}],
                "containerStatuses": [
                    {"name": "haproxy", "ready": false, "restartCount": 0, "image": "haproxy", "imageID": ""},
                    {"name": "dataplane", "ready": dataplane_ready, "restartCount": 0, "image": "dataplaneapi", "imageID": ""}
                ]}
        }))
        .unwrap()
    };
    // NotReady (HAProxy waits for a config), Dataplane container ready: admitted.
    let ok = admitted_endpoint(&pod("False", true, 5555, None), 5555).unwrap();
    assert_eq!(ok.url.0, "http://10.0.0.1:5555");
    // Ready, but the Dataplane container is not: not admitted.
    assert!(admitted_endpoint(&pod("True", false, 5555, None), 5555).is_none());
    // The port that counts is the pod's own (annotation) port.
    assert!(admitted_endpoint(&pod("False", true, 6000, Some("6000")), 5555).is_some());
    // No container declares the Dataplane port: the Ready condition decides.
    assert!(admitted_endpoint(&pod("False", true, 6000, None), 5555).is_none());
    assert!(admitted_endpoint(&pod("True", true, 6000, None), 5555).is_some());
}
