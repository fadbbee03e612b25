//! Issue 16, what a first real install meets, through the real binary against the sandbox:
//! HAProxy pods that are NotReady until configured get their first render; a rotated Dataplane
//! password is used without a restart; `/healthz` and `/readyz` answer while the journal opens;
//! a validator whose HAProxy major.minor differs from the pods' is named (condition, Event,
//! metric, log).

use std::path::Path;

use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

use haptic_testkit::Fleet;

use super::telemetry::{get, scrape};
use super::{
    Peers, answers, bounds, event_until, feed, opts, published, solo, start, stop_cleanly,
};

/// Marks every Pod object of the fleet NotReady the way a HAProxy pod without a configuration
/// is: condition Ready=False (HAProxy's readiness probe answers 503), the `haproxy` container
/// not ready, the `dataplane` container (the one declaring the Dataplane port) ready. Written
/// through the status subresource, as the kubelet does.
async fn not_ready_until_configured(fleet: &Fleet) {
    let pods: Api<Pod> = Api::namespaced(fleet.client(), fleet.namespace());
    for pod in fleet.pods() {
        let mut obj = pods.get(&pod.name).await.unwrap();
        let status = obj.status.as_mut().expect("a registered pod has a status");
        for c in status.conditions.iter_mut().flatten() {
            if c.type_ == "Ready" || c.type_ == "ContainersReady" {
                c.status = "False".into();
            }
        }
        let containers = status
            .container_statuses
            .as_mut()
            .expect("a registered pod lists its containers");
        for c in containers {
            c.ready = c.name == "dataplane";
        }
        pods.replace_status(&pod.name, &PostParams::default(), &obj)
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_not_ready_until_configured_get_their_first_render() {
    let fleet = start(Peers::Emulator, 2).await;
    not_ready_until_configured(&fleet).await;
    let render_dir = fleet.dir().join("render");
    feed(&render_dir, "01-basic");
    let _ctl = fleet.controller(opts(&fleet, "solo", &render_dir));
    // NotReady pods with a ready Dataplane container get the render (a wait on the Ready
    // condition would time out here, naming what the pods answer).
    answers(&fleet, "01-basic").await;
    published(&fleet, "01-basic", 2).await;
}

/// The lines of `log` after the first one containing `marker`.
fn after<'a>(log: &'a str, marker: &str) -> Vec<&'a str> {
    log.lines().skip_while(|l| !l.contains(marker)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_password_is_used_without_a_restart() {
    let (fleet, render_dir, mut ctl) = solo(Peers::Emulator, 2).await;
    published(&fleet, "01-basic", 2).await;

    // Rotate: every pod's Dataplane API takes the new password (a restarted sidecar), then the
    // Secret gets it. A write of the Secret is what an operator does; the controller is not
    // restarted.
    let pid = ctl.pid();
    for pod in fleet.pods() {
        pod.faults()
            .call(
                reqwest::Method::POST,
                "credentials",
                Some(json!({"username": pod.username, "password": "rotated-1"})),
            )
            .await
            .unwrap();
    }
    let secrets: Api<Secret> = Api::namespaced(fleet.client(), fleet.namespace());
    let mut s = secrets.get(fleet.dataplane_secret()).await.unwrap();
    s.data.as_mut().unwrap().insert(
        "password".into(),
        k8s_openapi::ByteString(b"rotated-1".to_vec()),
    );
    secrets
        .replace(fleet.dataplane_secret(), &PostParams::default(), &s)
        .await
        .unwrap();
    // The watch delivers the new Secret; the next deployment (a deployment's bound) reads it.
    ctl.eventually(bounds().deployment(), "the rotation logged", || {
        std::future::ready(ctl.log_text().contains("dataplane credentials rotated"))
    })
    .await;

    // The next deployment succeeds on every pod with the new password.
    feed(&render_dir, "02-maps");
    published(&fleet, "02-maps", 2).await;
    answers(&fleet, "02-maps").await;
    assert_eq!(ctl.pid(), pid);
    assert!(ctl.child.try_wait().unwrap().is_none(), "still running");
    // No pod failed after the rotation reached the controller (each at most once: one retry).
    let log = ctl.log_text();
    let failures = after(&log, "dataplane credentials rotated")
        .into_iter()
        .filter(|l| l.contains("endpoint deployment failed"))
        .count();
    assert!(
        failures <= 2,
        "{failures} failed endpoint syncs after the rotation:\n{log}"
    );
    stop_cleanly(&mut ctl);
}

/// The open delay of the probes test: long against a loopback HTTP round trip, so the probes
/// are asked while the journal is still opening.
const OPEN_DELAY_MS: u64 = 6000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_and_readyz_answer_while_the_journal_opens() {
    let fleet = start(Peers::Emulator, 1).await;
    let render_dir = fleet.dir().join("render");
    feed(&render_dir, "01-basic");
    let mut o = opts(&fleet, "solo", &render_dir);
    // A slow open (feature `failpoints`), as redb's repair of a large journal after a kill -9.
    o.env.push((
        "HAPTIC_TEST_JOURNAL_OPEN_DELAY_MS".into(),
        OPEN_DELAY_MS.to_string(),
    ));
    let ctl = fleet.controller(o);
    let addr = ctl.metrics_addr().await;
    let (status, body) = get(addr, "/healthz").await;
    assert_eq!((status, body.as_str()), (200, "ok\n"));
    // Not ready, saying why: the answer comes from within the open (it names it).
    let (status, body) = get(addr, "/readyz").await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("journal: journal opening"), "{body}");
    // Then ready, as before: after the open delay and the first render's convergence.
    let bound = std::time::Duration::from_millis(OPEN_DELAY_MS) + bounds().converge();
    ctl.eventually(bound, "/readyz 200 after the open", || async {
        let (status, body) = get(addr, "/readyz").await;
        if status == 200 {
            Ok(())
        } else {
            Err(format!("{status} {body}"))
        }
    })
    .await;
    answers(&fleet, "01-basic").await;
}

/// A stand-in `haproxy` for the validator whose `-v` reports another major.minor than the pods'
/// HAProxy; everything else runs the real binary.
fn validator_reporting(dir: &Path, version: &str) -> std::path::PathBuf {
    let real = String::from_utf8(
        std::process::Command::new("sh")
            .args(["-c", "command -v haproxy"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let path = dir.join("haproxy-other-version");
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\nif [ \"$1\" = -v ] || [ \"$1\" = -vv ]; then\n  echo 'HAProxy version {version} 2026/11/20 - https://haproxy.org/'\n  exit 0\nfi\nexec {} \"$@\"\n",
            real.trim()
        ),
    )
    .unwrap();
    let mut perms = std::fs::metadata(&path).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&path, perms).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_validator_of_another_haproxy_version_is_named() {
    let fleet = start(Peers::Emulator, 2).await;
    let render_dir = fleet.dir().join("render");
    feed(&render_dir, "01-basic");
    let fake = validator_reporting(fleet.dir(), "3.2.9");
    let mut o = opts(&fleet, "solo", &render_dir);
    o.extra
        .extend(["--haproxy-bin".into(), fake.display().to_string()]);
    let ctl = fleet.controller(o);
    // Deployments still happen (a warning, not a refusal).
    published(&fleet, "01-basic", 2).await;
    // The version check follows the completed deployment (a write that follows one).
    let cond = super::main_until(
        &fleet,
        bounds().follow_up(),
        "condition ValidatorVersionMismatch=True",
        |cfg| {
            let st = cfg.status.clone().ok_or("no status")?;
            st.conditions
                .iter()
                .find(|c| c.type_ == "ValidatorVersionMismatch" && c.status == "True")
                .cloned()
                .ok_or_else(|| format!("{:?}", st.conditions))
        },
    )
    .await;
    assert_eq!(cond.reason, "HAProxyVersionDiffers");
    // Both versions and the fix: the image of the pods' release line.
    assert!(
        cond.message.contains("3.2")
            && cond.message.contains("2.6")
            && cond.message.contains(
                "fix: run the controller image built for HAProxy 2.6 \
                 (Dockerfile --build-arg DEBIAN_SUITE=bookworm)"
            ),
        "{}",
        cond.message
    );
    let log = ctl.log_text();
    assert!(
        log.lines().any(
            |l| l.contains("validator haproxy version differs from the pods")
                && l.contains("3.2")
                && l.contains("2.6")
                && l.contains("--haproxy-bin")
        ),
        "{}",
        ctl.log_tail(40)
    );
    let m = scrape(ctl.metrics_addr().await).await;
    assert_eq!(m.value("haptic_validator_version_mismatch_pods"), 2.0);
    event_until(
        &fleet,
        bounds().follow_up(),
        "a ValidatorVersionMismatch Event",
        |e| e.reason.as_deref() == Some("ValidatorVersionMismatch"),
    )
    .await;
}
