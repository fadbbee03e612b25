//! Issue 16, what a first real install meets, through the real binary against the sandbox:
//! HAProxy pods that are NotReady until configured get their first render; a rotated Dataplane
//! password is used without a restart; `/healthz` and `/readyz` answer while the journal opens;
//! a validator whose HAProxy major.minor differs from the pods' is named (condition, Event,
//! metric, log).

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use haptic_tools::sandbox::cluster::SECRET;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

use super::stream::{published, published_within};
use super::telemetry::scrape;
use super::{Opts, World, feed, http};

async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let resp = http()
        .get(format!("http://{addr}{path}"))
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    (resp.status().as_u16(), resp.text().await.unwrap())
}

/// Marks every sandbox Pod object NotReady the way a HAProxy pod without a configuration is:
/// condition Ready=False (HAProxy's readiness probe answers 503), the `haproxy` container not
/// ready, the `dataplane` container (the one declaring the Dataplane port) ready.
async fn not_ready_until_configured(world: &World) {
    for pod in world.pods() {
        let path = format!("/api/v1/namespaces/{}/pods/{}", world.ns(), pod.name);
        let mut obj = world
            .cluster
            .kube
            .send(reqwest::Method::GET, &path, json!(null))
            .await
            .unwrap();
        let status = &mut obj["status"];
        for c in status["conditions"].as_array_mut().unwrap() {
            if c["type"] == "Ready" || c["type"] == "ContainersReady" {
                c["status"] = json!("False");
            }
        }
        for c in status["containerStatuses"].as_array_mut().unwrap() {
            c["ready"] = json!(c["name"] == "dataplane");
        }
        world
            .cluster
            .kube
            .send(reqwest::Method::PUT, &format!("{path}/status"), obj)
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_not_ready_until_configured_get_their_first_render() {
    let world = World::start(2).await;
    not_ready_until_configured(&world).await;
    let render_dir = world.dir.path().join("render");
    feed(&render_dir, "01-basic");
    let ctl = world.controller(Opts::dir(&world, "solo", &render_dir));
    if let Err(e) = world.pods_answer("01-basic", Duration::from_secs(60)).await {
        panic!(
            "NotReady pods with a ready Dataplane container got no render: {e}\n{}",
            ctl.log_tail(40)
        );
    }
    published(&world, "01-basic", 2).await;
}

/// The lines of `log` after the first one containing `marker`.
fn after<'a>(log: &'a str, marker: &str) -> Vec<&'a str> {
    log.lines().skip_while(|l| !l.contains(marker)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_password_is_used_without_a_restart() {
    let world = World::start(2).await;
    let render_dir = world.dir.path().join("render");
    feed(&render_dir, "01-basic");
    let mut ctl = world.controller(Opts::dir(&world, "solo", &render_dir));
    published(&world, "01-basic", 2).await;

    // Rotate: every pod's Dataplane API takes the new password (a restarted sidecar), then the
    // Secret gets it. A write of the Secret is what an operator does; the controller is not
    // restarted.
    let pid = ctl.pid();
    for pod in world.pods() {
        let r = http()
            .post(format!("{}/_sandbox/credentials", pod.dataplane_url))
            .json(&json!({"username": world.cluster.sandbox.username(), "password": "rotated-1"}))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    }
    let secrets: Api<Secret> = Api::namespaced(world.client.clone(), world.ns());
    let mut s = secrets.get(SECRET).await.unwrap();
    s.data.as_mut().unwrap().insert(
        "password".into(),
        k8s_openapi::ByteString(b"rotated-1".to_vec()),
    );
    secrets
        .replace(SECRET, &PostParams::default(), &s)
        .await
        .unwrap();
    let rotated = world
        .until(Duration::from_secs(20), "the rotation logged", || async {
            ctl.log_text()
                .contains("dataplane credentials rotated")
                .then_some(())
        })
        .await;
    let () = rotated;

    // The next deployment succeeds on every pod with the new password.
    feed(&render_dir, "02-maps");
    if let Err(seen) = published_within(&world, "02-maps", 2, Duration::from_secs(30)).await {
        panic!(
            "02-maps not deployed with the rotated password: {seen}\n{}",
            ctl.log_tail(40)
        );
    }
    world
        .pods_answer("02-maps", Duration::from_secs(20))
        .await
        .unwrap();
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
    assert!(
        ctl.stop(Duration::from_secs(30))
            .is_some_and(|s| s.success())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_and_readyz_answer_while_the_journal_opens() {
    let world = World::start(1).await;
    let render_dir = world.dir.path().join("render");
    feed(&render_dir, "01-basic");
    let mut opts = Opts::dir(&world, "solo", &render_dir);
    // A slow open (feature `failpoints`), as redb's repair of a large journal after a kill -9.
    opts.env
        .push(("HAPTIC_TEST_JOURNAL_OPEN_DELAY_MS".into(), "6000".into()));
    let started = Instant::now();
    let ctl = world.controller(opts);
    let addr = ctl.metrics_addr();
    let (status, body) = get(addr, "/healthz").await;
    assert_eq!((status, body.as_str()), (200, "ok\n"));
    let (status, body) = get(addr, "/readyz").await;
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "the probes were answered only after the open ({:?})",
        started.elapsed()
    );
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("journal: journal opening"), "{body}");
    // Then ready, as before.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, body) = get(addr, "/readyz").await;
        if status == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "never ready: {body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(started.elapsed() >= Duration::from_secs(6));
    world
        .pods_answer("01-basic", Duration::from_secs(60))
        .await
        .unwrap();
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
    let world = World::start(2).await;
    let render_dir = world.dir.path().join("render");
    feed(&render_dir, "01-basic");
    let fake = validator_reporting(world.dir.path(), "3.2.9");
    let mut opts = Opts::dir(&world, "solo", &render_dir);
    opts.extra
        .extend(["--haproxy-bin".into(), fake.display().to_string()]);
    let ctl = world.controller(opts);
    // Deployments still happen (a warning, not a refusal).
    published(&world, "01-basic", 2).await;
    let cfg = world
        .until(
            Duration::from_secs(30),
            "condition ValidatorVersionMismatch",
            || async {
                let cfg = world.hpcfg("e2e-haproxycfg").await?;
                let st = cfg.status.clone()?;
                st.conditions
                    .iter()
                    .find(|c| c.type_ == "ValidatorVersionMismatch" && c.status == "True")
                    .cloned()
            },
        )
        .await;
    assert_eq!(cfg.reason, "HAProxyVersionDiffers");
    assert!(
        cfg.message.contains("3.2") && cfg.message.contains("2.6"),
        "{}",
        cfg.message
    );
    let log = ctl.log_text();
    assert!(
        log.lines().any(
            |l| l.contains("validator haproxy version differs from the pods")
                && l.contains("3.2")
                && l.contains("2.6")
        ),
        "{}",
        ctl.log_tail(40)
    );
    let m = scrape(ctl.metrics_addr()).await;
    assert_eq!(m.value("haptic_validator_version_mismatch_pods"), 2.0);
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(world.client.clone(), world.ns());
    world
        .until(
            Duration::from_secs(20),
            "a ValidatorVersionMismatch Event",
            || async {
                let list = events.list(&Default::default()).await.ok()?;
                list.items
                    .iter()
                    .any(|e| e.reason.as_deref() == Some("ValidatorVersionMismatch"))
                    .then_some(())
            },
        )
        .await;
}
