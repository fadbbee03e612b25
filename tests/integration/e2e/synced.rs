//! `Synced` and the quarantine with the real binary (issue 15): `kubectl wait
//! --for=condition=Synced` returns after a normal render (`AllPodsSynced`); a pod whose
//! Dataplane API rejects every configuration write makes the next render
//! `Synced=False/DeploymentRejected` with a `DeploymentRejected` Event, keeps serving the
//! previous render and gets no request over several drift checks (counted in its request log);
//! the annotation `haproxy-haptic.org/retry-rejected` retries it once (one sync: the push, the
//! resync, the push again). Every bound derives from [`Intervals`] and the drift interval.

use std::time::Duration;

use haptic::k8s::crd::{HAProxyCfg, conditions, labels, reasons};
use haptic_testkit::Pod;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use serde_json::json;

use crate::deployer::harness::requests;

use super::{
    Fleet, MAIN, Peers, bounds, checksum, feed, kubectl_ok, main_until, opts, published, start,
};

super::on_peers!(
    Emulator,
    synced_waits_for_every_pod_and_a_rejected_render_is_quarantined_until_retried =>
        synced_and_quarantine,
    a_scale_up_is_pods_pending_until_the_new_pod_is_configured => scale_up,
    a_quarantine_is_retried_at_its_backoff_pace_across_a_sigkill_and_ends_when_the_pod_accepts =>
        quarantine_backoff,
);

/// The drift interval of this test's controller: short, so that several drift checks run
/// within the test; every wait for them derives from it.
const DRIFT: Duration = Duration::from_secs(2);

/// `(status, reason, message)` of the `Synced` condition, if any.
fn synced(c: &HAProxyCfg) -> Option<(String, String, String)> {
    c.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == conditions::SYNCED)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Whether `r` is a configuration write: a raw push or a transaction write.
fn is_config_write(r: &haptic_tools::sandbox::control::RequestRecord) -> bool {
    (r.method == "POST" && r.path.ends_with("/configuration/raw"))
        || (r.method != "GET" && r.path.contains("/transactions"))
}

/// Raw pushes and transaction writes in `pod`'s request log.
async fn config_writes(pod: &Pod) -> usize {
    pod.faults()
        .requests()
        .await
        .unwrap()
        .iter()
        .filter(|r| is_config_write(r))
        .count()
}

/// Whether `pod` answers what the README lists for `render`.
async fn answers(pod: &Pod, render: &str) -> Result<(), String> {
    for c in &haptic_testkit::render::checks(render) {
        let body = haptic_tools::sandbox::pods::demo::run_check(pod, c).await;
        if !haptic_tools::sandbox::pods::demo::matches(c, &body) {
            return Err(format!("{}: {} -> {body:?}", pod.name, c.what));
        }
    }
    Ok(())
}

/// `kubectl wait --for=condition=Synced` on the main HAProxyCfg within `timeout` (whole
/// seconds); it must succeed.
fn wait_synced(world: &Fleet, timeout: Duration) {
    let target = format!("hpcfg/{MAIN}");
    let timeout = format!("--timeout={}s", timeout.as_secs());
    kubectl_ok(
        world,
        &["wait", "--for=condition=Synced", &target, &timeout],
    );
}

/// Waits until `witness` (a pod that is not quarantined) had `rounds` drift checks since its
/// log was cleared: each reads its configuration once. Bound: that many drift intervals plus a
/// deployment each.
async fn drift_checks(world: &Fleet, witness: &Pod, rounds: usize) {
    let bound = (DRIFT + bounds().deployment()) * u32::try_from(rounds).unwrap();
    world
        .eventually(bound, &format!("{rounds} drift checks"), || async {
            let reads = requests(witness)
                .await
                .iter()
                .filter(|(m, p)| m == "GET" && p.ends_with("/configuration/raw"))
                .count();
            (reads >= rounds)
                .then_some(())
                .ok_or(format!("{reads} reads"))
        })
        .await;
}

async fn rejected_events(world: &Fleet) -> Vec<K8sEvent> {
    super::events_where(world, |e| e.reason.as_deref() == Some("DeploymentRejected")).await
}

/// A fleet of two pods, the render directory fed `01-basic`, and the options of a controller
/// `solo` on it with the drift interval `drift` and the flags `extra`.
async fn two_pods_on_01(
    peers: Peers,
    drift: Duration,
    extra: [String; 2],
) -> (Fleet, std::path::PathBuf, haptic_testkit::ControllerOpts) {
    let (world, render_dir, mut o) = super::fed(peers, 2, "01-basic", "solo").await;
    o.extra.extend([
        "--drift-prevention-interval".into(),
        format!("{}ms", drift.as_millis()),
    ]);
    o.extra.extend(extra);
    (world, render_dir, o)
}

pub async fn synced_and_quarantine(peers: Peers) {
    // The quarantine's own retries (issue 27, `quarantine_backoff`) are far off here: this test
    // shows what happens between them.
    let (world, render_dir, o) = two_pods_on_01(
        peers,
        DRIFT,
        ["--quarantine-retry-initial".into(), "1h".into()],
    )
    .await;
    let _ctl = world.controller(o);
    let pods = world.pods();
    let target = format!("hpcfg/{MAIN}");

    // A normal render: `kubectl wait` returns once every pod runs it.
    published(&world, "01-basic", 2).await;
    wait_synced(&world, bounds().converge());
    let cfg = world.hpcfg(MAIN).await.unwrap();
    let (status, reason, _) = synced(&cfg).expect("a Synced condition");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", reasons::ALL_PODS_SYNCED)
    );

    // pod 0 rejects every configuration write from now on (transaction and raw push).
    pods[0]
        .faults()
        .arm(json!({"method":"POST|PUT","path":"transactions|configuration/raw$","status":400}))
        .await
        .unwrap();
    for p in &pods {
        p.faults().clear_requests().await.unwrap();
    }
    feed(&render_dir, "02-maps");
    let want = checksum("02-maps");
    let message = main_until(
        &world,
        bounds().converge(),
        "Synced=False/DeploymentRejected on 02-maps, pod 1 synced",
        |c| {
            let s = synced(c).ok_or("no Synced")?;
            let synced_pods = c.status.as_ref().and_then(|s| s.pods_synced.as_deref());
            (c.spec.checksum == want
                && s.0 == "False"
                && s.1 == reasons::DEPLOYMENT_REJECTED
                && synced_pods == Some("1/2"))
            .then(|| s.2.clone())
            .ok_or(format!("{} {s:?}", c.spec.checksum))
        },
    )
    .await;
    assert!(message.contains(&pods[0].name), "{message}");
    assert!(
        message.contains("status 400"),
        "HAProxy's answer: {message}"
    );
    let cfg = world.hpcfg(MAIN).await.unwrap();
    let entries = &cfg.status.as_ref().unwrap().deployed_to_pods;
    let entry = |name: &str| entries.iter().find(|e| e.pod_name == name).unwrap();
    assert_eq!(entry(&pods[0].name).rejected, Some(true));
    assert_eq!(entry(&pods[1].name).rejected, None);
    assert_eq!(
        cfg.status.as_ref().unwrap().pods_synced.as_deref(),
        Some("1/2")
    );
    let events = rejected_events(&world).await;
    assert_eq!(events.len(), 1, "one DeploymentRejected Event: {events:?}");
    assert!(
        events[0]
            .note
            .as_deref()
            .is_some_and(|n| n.contains(&pods[0].name)),
        "{events:?}"
    );
    // One attempt: the push, the files synced again, the push again.
    assert_eq!(
        config_writes(&pods[0]).await,
        4,
        "{:?}",
        requests(&pods[0]).await
    );
    // pod 0 keeps serving the previous render; pod 1 serves the new one.
    world
        .eventually(bounds().deployment(), "pod 1 on 02-maps", || {
            answers(&pods[1], "02-maps")
        })
        .await;
    answers(&pods[0], "01-basic").await.unwrap();

    // Several drift checks (seen on pod 1): pod 0 gets no request at all.
    for p in &pods {
        p.faults().clear_requests().await.unwrap();
    }
    drift_checks(&world, &pods[1], 3).await;
    assert_eq!(
        requests(&pods[0]).await,
        vec![],
        "a quarantined pod is left alone"
    );
    answers(&pods[0], "01-basic").await.unwrap();

    // The operator's retry: one more attempt, rejected again; then left alone again.
    let annotation = format!("{}=1", labels::RETRY_REJECTED);
    kubectl_ok(&world, &["annotate", "--overwrite", &target, &annotation]);
    world
        .eventually(bounds().deployment(), "the retry", || async {
            let n = config_writes(&pods[0]).await;
            (n == 4).then_some(()).ok_or(format!("{n} config writes"))
        })
        .await;
    pods[1].faults().clear_requests().await.unwrap();
    drift_checks(&world, &pods[1], 3).await;
    assert_eq!(
        config_writes(&pods[0]).await,
        4,
        "retried once: {:?}",
        requests(&pods[0]).await
    );
    let cfg = world.hpcfg(MAIN).await.unwrap();
    assert_eq!(synced(&cfg).unwrap().1, reasons::DEPLOYMENT_REJECTED);

    // The pod is fixed and the operator retries again: every pod synced.
    pods[0].faults().clear().await.unwrap();
    let annotation = format!("{}=2", labels::RETRY_REJECTED);
    kubectl_ok(&world, &["annotate", "--overwrite", &target, &annotation]);
    wait_synced(&world, bounds().converge());
    world
        .eventually(bounds().deployment(), "pod 0 on 02-maps", || {
            answers(&pods[0], "02-maps")
        })
        .await;
}

/// Issue 27: a fleet scaled from 2 to 3 pods whose new pod's Dataplane API answers slowly (its
/// configuration push is held a quarter of the deployment timeout): `Synced=False/PodsPending`
/// naming the new pod from its discovery until it is configured, and `kubectl wait
/// --for=condition=Synced` returns only then. Before, the new pod had no entry until its first
/// sync ended, so `Synced` stayed True (2/2) meanwhile.
pub async fn scale_up(peers: Peers) {
    let world = start(peers, 3).await;
    let late = world.pods()[2].clone();
    world.unregister_pod(&late.name).await.unwrap();
    let render_dir = world.dir().join("render");
    feed(&render_dir, "01-basic");
    let _ctl = world.controller(opts(&world, "solo", &render_dir));
    published(&world, "01-basic", 2).await;

    let hold = bounds().deployment_timeout / 4;
    late.faults()
        .arm(json!({
            "method": "POST|PUT",
            "path": "configuration/raw|transactions",
            "delay_ms": u64::try_from(hold.as_millis()).unwrap(),
            "times": 1,
        }))
        .await
        .unwrap();
    world.register_pod(&late.name).await.unwrap();
    main_until(
        &world,
        bounds().follow_up(),
        "Synced=False/PodsPending naming the new pod",
        |c| {
            let (status, reason, message) =
                synced(c).ok_or_else(|| "no Synced condition".to_owned())?;
            (status == "False" && reason == reasons::PODS_PENDING && message.contains(&late.name))
                .then_some(())
                .ok_or(format!("{status}/{reason}: {message}"))
        },
    )
    .await;
    wait_synced(&world, bounds().converge() + hold);
    // It returned once the new pod was configured: its entry names the render, and its held
    // configuration write has been answered.
    let cfg = world.hpcfg(MAIN).await.unwrap();
    let st = cfg.status.as_ref().unwrap();
    let entry = st
        .deployed_to_pods
        .iter()
        .find(|p| p.pod_name == late.name)
        .expect("the new pod's entry");
    assert_eq!(entry.checksum, Some(checksum("01-basic")), "{entry:?}");
    assert!(entry.last_error.is_none(), "{entry:?}");
    assert_eq!(st.pods_synced.as_deref(), Some("3/3"));
    let held = late.faults().requests().await.unwrap();
    assert!(
        held.iter()
            .any(|r| (r.method == "POST" || r.method == "PUT")
                && (r.path.contains("configuration/raw") || r.path.contains("transactions"))
                && (200..300).contains(&r.status)),
        "the new pod's configuration write was answered: {held:?}"
    );
    world.shutdown().await;
}

/// The quarantine backoff of `quarantine_backoff`: the first retry after `QUARANTINE_DRIFT`
/// (the drift interval, the default first delay), doubling up to `QUARANTINE_MAX`.
const QUARANTINE_DRIFT: Duration = Duration::from_secs(1);
const QUARANTINE_MAX: Duration = Duration::from_secs(8);

/// The quarantine delay after `attempts` rejections in a row.
fn quarantine_delay(attempts: u32) -> Duration {
    (QUARANTINE_DRIFT * 2u32.pow(attempts.saturating_sub(1).min(16))).min(QUARANTINE_MAX)
}

/// Arrival times of `pod`'s configuration writes (raw pushes, transaction writes) since its
/// log was cleared.
async fn write_times(pod: &Pod) -> Vec<k8s_openapi::jiff::Timestamp> {
    pod.faults()
        .requests()
        .await
        .unwrap()
        .into_iter()
        .filter(is_config_write)
        .map(|r| r.at.parse().unwrap())
        .collect()
}

/// `pod`'s configuration writes grouped into attempts (writes less than half the first delay
/// apart belong to one sync), each as (first, last) arrival time.
async fn attempts(pod: &Pod) -> Vec<(k8s_openapi::jiff::Timestamp, k8s_openapi::jiff::Timestamp)> {
    let mut out: Vec<(k8s_openapi::jiff::Timestamp, k8s_openapi::jiff::Timestamp)> = Vec::new();
    for at in write_times(pod).await {
        match out.last_mut() {
            Some((_, last)) if at.duration_since(*last).unsigned_abs() < QUARANTINE_DRIFT / 2 => {
                *last = at;
            }
            _ => out.push((at, at)),
        }
    }
    out
}

/// Issue 27: a quarantine expires with backoff. A pod whose Dataplane API keeps rejecting the
/// render is retried by itself, the drift interval after the first rejection, then at a
/// doubling pace up to `--quarantine-retry-max`, never sooner (the gaps between its attempts,
/// from its request log, are at least the configured delays); one `DeploymentRejected` Event;
/// the pod's entry counts each attempt and shows `nextRetryAt`; the retries are counted in
/// `haptic_scheduler_quarantine_retries_total`. A SIGKILL during a backoff: the restarted
/// controller sends nothing before the journaled retry time (a forgotten quarantine would be
/// deployed at once by the new term), then retries; the cause having gone meanwhile (a
/// transient rejection), the pod converges with no operator action.
pub async fn quarantine_backoff(peers: Peers) {
    let (world, render_dir, o) = two_pods_on_01(
        peers,
        QUARANTINE_DRIFT,
        [
            "--quarantine-retry-max".into(),
            format!("{}s", QUARANTINE_MAX.as_secs()),
        ],
    )
    .await;
    let mut ctl = world.controller(o.clone());
    let pods = world.pods();
    published(&world, "01-basic", 2).await;
    pods[0]
        .faults()
        .arm(json!({"method":"POST|PUT","path":"transactions|configuration/raw$","status":400}))
        .await
        .unwrap();
    pods[0].faults().clear_requests().await.unwrap();
    feed(&render_dir, "02-maps");
    let want = checksum("02-maps");

    // Five attempts (the first and four retries), at the backoff's pace: 1 s, 2 s, 4 s, 8 s.
    let seen = 5;
    let bound = bounds().deployment() * 2
        + (1..u32::try_from(seen).unwrap())
            .map(|a| quarantine_delay(a) + bounds().deployment())
            .sum::<Duration>();
    let tries = world
        .eventually(bound, &format!("{seen} attempts on pod 0"), || async {
            let a = attempts(&pods[0]).await;
            (a.len() >= seen)
                .then_some(a.clone())
                .ok_or(format!("{} attempts", a.len()))
        })
        .await;
    for (k, pair) in tries.windows(2).enumerate() {
        let gap = pair[1].0.duration_since(pair[0].1).unsigned_abs();
        let delay = quarantine_delay(u32::try_from(k + 1).unwrap());
        assert!(
            gap >= delay,
            "attempt {} came {gap:?} after attempt {}, before its delay {delay:?}: {tries:?}",
            k + 2,
            k + 1
        );
    }
    // The entry counts the attempts and names the next retry; one Event for the quarantine.
    let entry = main_until(
        &world,
        bounds().follow_up(),
        "pod 0's entry: rejected, 5 errors in a row, the next retry after the fifth",
        |c| {
            let st = c.status.as_ref().ok_or("no status")?;
            let e = st
                .deployed_to_pods
                .iter()
                .find(|e| e.pod_name == pods[0].name)
                .ok_or("no entry")?;
            // The fifth failure's report and the scheduler's notice of its retry time are two
            // status items (they may land in two rounds): wait for both.
            let after_last = match (&e.next_retry_at, &e.last_error_at) {
                (Some(n), Some(l)) => n.0 > l.0,
                _ => false,
            };
            (e.rejected == Some(true)
                && e.checksum == Some(want)
                && e.consecutive_errors == Some(i64::try_from(seen).unwrap())
                && after_last)
                .then(|| e.clone())
                .ok_or(format!("{e:?}"))
        },
    )
    .await;
    let (next, last) = (
        entry.next_retry_at.clone().unwrap().0,
        entry.last_error_at.clone().unwrap().0,
    );
    // `lastErrorAt` is the fifth failure's time (MicroTime): after the fourth attempt ended,
    // not before the fifth began.
    assert!(
        last > tries[seen - 2].1 && last >= tries[seen - 1].0,
        "lastErrorAt {last} is the fifth attempt's: {tries:?}"
    );
    assert!(
        next.duration_since(last).unsigned_abs() + Duration::from_secs(1)
            >= quarantine_delay(u32::try_from(seen).unwrap()),
        "nextRetryAt {next} follows lastErrorAt {last} by the fifth delay"
    );
    assert_eq!(
        rejected_events(&world).await.len(),
        1,
        "one DeploymentRejected Event"
    );
    let metrics = ctl.metrics_addr().await;
    let text = reqwest::get(format!("http://{metrics}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let retries: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("haptic_scheduler_quarantine_retries_total "))
        .and_then(|v| v.trim().parse().ok())
        .expect("haptic_scheduler_quarantine_retries_total");
    assert!(
        retries >= u64::try_from(seen - 1).unwrap(),
        "{retries} retries counted"
    );

    // SIGKILL in the backoff after the last attempt's rejection (its report is in the status
    // above; the next attempt is `quarantine_delay(seen)` after it).
    ctl.kill();
    let a = attempts(&pods[0]).await;
    assert_eq!(
        a.len(),
        seen,
        "killed after the next attempt began (the machine stalled past the backoff): {a:?}"
    );
    let (done, last_end) = (a.len(), a[a.len() - 1].1);
    let writes_at_kill = write_times(&pods[0]).await.len();
    let due = last_end
        + k8s_openapi::jiff::SignedDuration::try_from(quarantine_delay(
            u32::try_from(done).unwrap(),
        ))
        .unwrap();
    // The cause goes away meanwhile (a transient rejection): the retry will be accepted.
    pods[0].faults().clear().await.unwrap();
    ctl = world.controller(o);
    wait_synced(
        &world,
        bounds().takeover() + quarantine_delay(u32::try_from(done).unwrap()) + bounds().converge(),
    );
    let after = write_times(&pods[0]).await;
    let retry = after
        .get(writes_at_kill)
        .unwrap_or_else(|| panic!("no configuration write after the restart: {after:?}"));
    assert!(
        *retry >= due,
        "the restarted controller wrote at {retry}, before the journaled retry time {due}"
    );
    world
        .eventually(bounds().deployment(), "pod 0 on 02-maps", || {
            answers(&pods[0], "02-maps")
        })
        .await;
    let cfg = world.hpcfg(MAIN).await.unwrap();
    let e = cfg
        .status
        .as_ref()
        .and_then(|s| {
            s.deployed_to_pods
                .iter()
                .find(|e| e.pod_name == pods[0].name)
                .cloned()
        })
        .unwrap();
    assert_eq!(
        (e.rejected, e.next_retry_at, e.consecutive_errors),
        (None, None, Some(0))
    );
    drop(ctl);
}
