//! Drift is reported as a Kubernetes Event: one `DriftDetected` Warning per drifted pod, on the
//! HAProxyCfg of the runtime config, in the API emulator; idle drift rounds write none.

use std::time::Duration;

use haptic::k8s::events::notice_hook;
use haptic_journal::RuntimeConfigRef;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use kube::api::{Api, ListParams};

use super::harness::*;

async fn drift_events(api: &Api<K8sEvent>) -> Vec<K8sEvent> {
    api.list(&ListParams::default())
        .await
        .expect("list events")
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("DriftDetected"))
        .collect()
}

crate::e2e::on_peers!(
    Emulator,
    drift_event_names_the_edited_pod_and_file_and_idle_rounds_write_none => drift_event,
);

/// Drift on one of 3 pods: one DriftDetected Event naming the pod and the file, written with
/// the controller's identity; idle rounds write none.
pub async fn drift_event(peers: haptic_testkit::Peers) {
    let sb = sandbox_on(peers, 3).await;
    let client = sb.controller_client();
    let api: Api<K8sEvent> = Api::namespaced(sb.client(), sb.namespace());
    let knobs = Knobs::drift(Duration::from_millis(700));
    let h = Harness::start(&sb.dir().join("j.redb"), &sb, knobs).await;
    // The HAProxyCfg does not exist in the emulator: the Event is written with its reference.
    h.deployer.set_notice_hook(Some(notice_hook(
        client,
        "replica-a",
        &RuntimeConfigRef {
            namespace: sb.namespace().into(),
            name: "test-haproxycfg".into(),
        },
        Duration::from_secs(5),
    )));
    let eps = endpoints(&sb);
    let pods = sb.pods();
    h.lead(&eps).await;
    let r = h.feed("02-maps", true).await;
    h.wait_applied(r, &eps).await;

    // Idle drift rounds: no Event.
    h.wait_drift_rounds(3).await;
    assert_eq!(
        drift_events(&api).await,
        vec![],
        "idle drift wrote an Event"
    );

    // An out-of-band map edit on pod 1.
    h.tamper_map(&pods[1], 1).await;
    // bound: one and a half settles (the former 15 s)
    eventually(h.settle * 3 / 2, "a DriftDetected Event", || async {
        !drift_events(&api).await.is_empty()
    })
    .await;
    // Further (repaired, idle) rounds add nothing.
    h.wait_drift_rounds(2).await;
    let events = drift_events(&api).await;
    assert_eq!(
        events.len(),
        1,
        "exactly one DriftDetected Event: {events:?}"
    );
    let e = &events[0];
    let note = e.note.as_deref().unwrap_or_default();
    assert!(note.contains(&*pods[1].name), "note names the pod: {note}");
    assert!(
        note.contains("hosts.map"),
        "note names the map file: {note}"
    );
    for (k, pod) in pods.iter().enumerate() {
        if k != 1 {
            assert!(
                !note.contains(&*pod.name),
                "no Event for {}: {note}",
                pod.name
            );
        }
    }
    assert_eq!(e.type_.as_deref(), Some("Warning"));
    assert_eq!(e.action.as_deref(), Some("DriftRepair"));
    assert_eq!(e.reporting_controller.as_deref(), Some("haptic"));
    assert_eq!(e.reporting_instance.as_deref(), Some("replica-a"));
    let regarding = e.regarding.as_ref().expect("regarding");
    assert_eq!(regarding.kind.as_deref(), Some("HAProxyCfg"));
    assert_eq!(regarding.name.as_deref(), Some("test-haproxycfg"));
    assert_eq!(regarding.namespace.as_deref(), Some(sb.namespace()));
    assert_eq!(
        h.deployer
            .stats
            .drift_detected
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    h.stop().await;
    sb.shutdown().await;
}
