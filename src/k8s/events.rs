//! Kubernetes Events for what the deployer notices on a pod: the [`NoticeHook`] that reports a
//! `DriftDetected` Warning (a drift check found the pod differing from its render) and a
//! `NoRuntimeApi` Warning (server changes had to reload because the pod's configuration has no
//! admin stats socket).
//!
//! The DriftPreventionMonitor's checks run through the deployer; when one finds a pod differing
//! from its render, or a sync had to reload for runtime changes, the deployer logs it, counts it
//! and calls its [`NoticeHook`]. The hook built here writes an `events.k8s.io/v1` Event through
//! kube's [`Recorder`] on the HAProxyCfg of the runtime config, naming the pod and what differed
//! (`config`, `file maps/hosts.map`) or the fix.
//!
//! Writing is detached and bounded by a timeout: an Event that cannot be written is logged at
//! warn and never blocks or fails the deployment.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

use crate::core::guard::{DeployerNotice, NoticeHook};
use crate::core::text::truncate_with_ellipsis;
use crate::k8s::crd::HAProxyCfg;
use haptic_journal::{PodRef, RuntimeConfigRef};

/// The reporting controller of every Event haptic writes.
pub const CONTROLLER: &str = "haptic";

/// Event reasons (CamelCase).
pub mod reasons {
    /// A drift check found a pod differing from its render.
    pub const DRIFT_DETECTED: &str = "DriftDetected";
    /// Server changes went by a reload: the pod's configuration has no admin stats socket.
    pub const NO_RUNTIME_API: &str = "NoRuntimeApi";
    /// A pod's Dataplane API rejected a render permanently: it is quarantined for that pod
    /// (`Synced=False/DeploymentRejected` on the HAProxyCfg).
    pub const DEPLOYMENT_REJECTED: &str = "DeploymentRejected";
}

/// Event actions (CamelCase).
pub mod actions {
    /// The deployer re-pushes the render to the drifted pod.
    pub const DRIFT_REPAIR: &str = "DriftRepair";
    /// The deployer applied runtime changes with a reload (one transaction).
    pub const RELOAD: &str = "Reload";
    /// The render is not retried on the pod that rejected it (until a new render, a pod change
    /// or the annotation `haproxy-haptic.org/retry-rejected`).
    pub const QUARANTINE: &str = "Quarantine";
}

/// Bound of one Event write. Default of [`notice_hook`]'s callers.
pub const EVENT_WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// The reference of the HAProxyCfg named by `runtime_config`, built from its namespace and name
/// only: the object need not exist (yet) for an Event to point at it.
#[must_use]
pub fn haproxycfg_reference(runtime_config: &RuntimeConfigRef) -> ObjectReference {
    ObjectReference {
        api_version: Some(HAProxyCfg::api_version(&()).into_owned()),
        kind: Some(HAProxyCfg::kind(&()).into_owned()),
        namespace: Some(runtime_config.namespace.to_string()),
        name: Some(runtime_config.name.to_string()),
        ..ObjectReference::default()
    }
}

/// The Event's note: the pod and what differed, e.g.
/// `drift on pod haptic/haproxy-0: file maps/hosts.map`.
#[must_use]
pub fn drift_note(pod: &PodRef, differed: &[String]) -> String {
    let what = if differed.is_empty() {
        "unknown".to_owned()
    } else {
        differed.join(", ")
    };
    let note = format!("drift on pod {}/{}: {what}", pod.namespace, pod.name);
    // The Events API caps a note at 1 kB.
    truncate_with_ellipsis(note, 1024)
}

/// The note of a `DeploymentRejected` Event: the pod, HAProxy's message (`error`) and how to
/// retry, at most 1 kB.
#[must_use]
pub fn rejected_note(pod: &str, error: &str) -> String {
    let note = format!(
        "pod {pod} rejected the render and keeps what it ran; retried with backoff (the pod's nextRetryAt), sooner on a new render, a pod change or the annotation {}: {error}",
        crate::k8s::crd::labels::RETRY_REJECTED
    );
    truncate_with_ellipsis(note, 1024)
}

/// The note of a `NoRuntimeApi` Event: the pod and the fix.
#[must_use]
pub fn no_runtime_api_note(pod: &PodRef) -> String {
    format!(
        "pod {}/{}: server changes need a reload because its configuration has no admin stats \
         socket; add `stats socket /var/run/haproxy.sock mode 600 level admin` to the global \
         section of the render so they apply at runtime",
        pod.namespace, pod.name
    )
}

/// A [`NoticeHook`] writing a Warning Event (reporting controller `haptic`, instance
/// `identity`) on the HAProxyCfg of `runtime_config` for every notice: `DriftDetected` (action
/// `DriftRepair`, note [`drift_note`]) and `NoRuntimeApi` (action `Reload`, note
/// [`no_runtime_api_note`]).
///
/// Each call spawns the write on the current tokio runtime and returns at once; the write is
/// bounded by `timeout`, and a failure or timeout is logged at warn. Called outside a tokio
/// runtime, the Event is dropped with a warning.
#[must_use]
pub fn notice_hook(
    client: kube::Client,
    identity: &str,
    runtime_config: &RuntimeConfigRef,
    timeout: Duration,
) -> NoticeHook {
    let recorder = Arc::new(Recorder::new(
        client,
        Reporter {
            controller: CONTROLLER.to_owned(),
            instance: Some(identity.to_owned()),
        },
    ));
    let reference = Arc::new(haproxycfg_reference(runtime_config));
    Arc::new(move |pod: &PodRef, notice: &DeployerNotice| {
        let (reason, action, note) = match notice {
            DeployerNotice::Drift(differed) => (
                reasons::DRIFT_DETECTED,
                actions::DRIFT_REPAIR,
                drift_note(pod, differed),
            ),
            DeployerNotice::NoRuntimeApi => (
                reasons::NO_RUNTIME_API,
                actions::RELOAD,
                no_runtime_api_note(pod),
            ),
        };
        let event = Event {
            type_: EventType::Warning,
            reason: reason.to_owned(),
            note: Some(note),
            action: action.to_owned(),
            secondary: None,
        };
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(pod = %pod.name, reason, "event not written: no tokio runtime");
            return;
        };
        let (recorder, reference, pod) = (recorder.clone(), reference.clone(), pod.name.clone());
        rt.spawn(async move {
            match tokio::time::timeout(timeout, recorder.publish(&event, &reference)).await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => {
                    tracing::warn!(%pod, reason, %error, "event not written");
                }
                Err(_) => {
                    tracing::warn!(%pod, reason, timeout_ms = timeout.as_millis(), "event write timed out");
                }
            }
        });
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> PodRef {
        PodRef {
            namespace: "ns".into(),
            name: "haproxy-1".into(),
        }
    }

    #[test]
    fn note_names_pod_and_what_differed() {
        let n = drift_note(&pod(), &["config".into(), "file maps/hosts.map".into()]);
        assert_eq!(n, "drift on pod ns/haproxy-1: config, file maps/hosts.map");
    }

    #[test]
    fn note_is_capped_at_one_kilobyte() {
        let n = drift_note(&pod(), &["é".repeat(2000)]);
        assert!(n.len() <= 1024 && n.ends_with("..."));
    }

    #[test]
    fn reference_points_at_the_haproxycfg() {
        let r = haproxycfg_reference(&RuntimeConfigRef {
            namespace: "ns".into(),
            name: "cfg".into(),
        });
        assert_eq!(r.kind.as_deref(), Some("HAProxyCfg"));
        assert_eq!(
            r.api_version.as_deref(),
            Some("haproxy-haptic.org/v1alpha1")
        );
        assert_eq!(
            (r.namespace.as_deref(), r.name.as_deref()),
            (Some("ns"), Some("cfg"))
        );
    }
}
