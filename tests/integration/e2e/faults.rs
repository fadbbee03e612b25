//! Faults without a crash (issue 13): the real binary against a sandbox whose Kubernetes API or
//! Dataplane endpoints misbehave, scripted through the sandbox's fault hooks. Each scenario feeds
//! `02-maps` then `03-maps-changed` and must end exactly as a run without faults: every pod
//! answers the last render, the HAProxyCfg holds it with every pod on it; after a clean stop the
//! journal verifies, nothing is pending and no checksum was published twice (the crash matrix's
//! checks 1-5); no pod accepted more writes than the stream needs; every armed fault fired.

use haptic_tools::sandbox::apiserver::Fault;
use serde_json::{Value, json};

use super::{
    Controller, ControllerOpts, Fleet, Peers, check_render, feed, pod_writes, stop_cleanly,
};
use crate::crash_matrix::{journal_after_stop, pod_writes_within, write_bounds};

on_peers!(
    Emulator,
    api_409_on_every_first_write => api_conflicts,
    api_429_with_retry_after => api_throttled,
    api_500_burst_on_writes => api_errors,
    api_watch_dropped_then_410_on_resume => api_watch_gone,
    dataplane_409_version_storm => dataplane_conflicts,
    dataplane_500s_on_storage_and_push => dataplane_errors,
    dataplane_dropped_connection_on_push => dataplane_dropped,
    dataplane_failed_reload_is_redeployed => dataplane_failed_reload,
    the_lease_stolen_by_another_identity => lease_stolen,
    dataplane_401_then_accepted => dataplane_unauthorized,
    dataplane_reload_slower_than_the_deployment_timeout => dataplane_slow_reload,
    a_pod_that_disappears_mid_deployment => pod_disappears,
    api_requests_held_past_the_request_timeout => api_timeouts,
    a_clean_stop_writes_the_statuses_of_its_last_deployment => slow_status_at_stop,
);

const STREAM: [&str; 2] = ["02-maps", "03-maps-changed"];

fn api(method: &str, path: &str, status: u16, times: u32) -> Fault {
    Fault::answer(method, path, status, times)
}

/// A scenario's start: two pods, the stream's first render in the render directory, the
/// controller's options (identity `solo`).
async fn prepare(peers: Peers) -> (Fleet, std::path::PathBuf, ControllerOpts) {
    super::fed(peers, 2, STREAM[0], "solo").await
}

/// Every fault armed on the API emulator fired (a used-up fault is dropped from the list).
async fn api_faults_met(world: &Fleet) {
    let left = world
        .api_faults()
        .call(reqwest::Method::GET, "faults", None)
        .await
        .unwrap();
    assert_eq!(left, json!([]), "API faults never met");
}

/// A scenario's end: a clean stop, the journal verified after it with nothing pending, and (with
/// `writes_bounded`) no pod written more than the stream needs; then the fleet stops.
async fn finish(world: Fleet, mut ctl: Controller, o: &ControllerOpts, writes_bounded: bool) {
    stop_cleanly(&mut ctl);
    if let Err(e) = journal_after_stop(&o.journal) {
        panic!("{e}\n{}", ctl.log_tail(30));
    }
    if writes_bounded {
        let (pushes, files) = write_bounds(&STREAM);
        if let Err(e) = pod_writes_within(&world, pushes, files).await {
            panic!("{e}\n{}", ctl.log_tail(30));
        }
    }
    world.shutdown().await;
}

/// One scenario: `api` faults armed on the API emulator and `pod` faults on every pod before
/// the controller starts, `later` API faults armed (after the emulator forgot its watch
/// history) once the first render converged. Every fault must have fired.
async fn scenario(peers: Peers, api: Vec<Fault>, pod: Vec<Value>, later: Vec<Fault>) {
    let (world, render_dir, o) = prepare(peers).await;
    let emulator = world.emulator().expect("the API emulator");
    for f in api {
        emulator.add_fault(f).unwrap();
    }
    for p in world.pods() {
        for f in &pod {
            p.faults().arm(f.clone()).await.unwrap();
        }
    }
    let ctl = world.controller(o.clone());
    check_render(&world, STREAM[0], "").await;
    if !later.is_empty() {
        emulator.compact();
    }
    for f in later {
        emulator.add_fault(f).unwrap();
    }
    feed(&render_dir, STREAM[1]);
    check_render(&world, STREAM[1], STREAM[0]).await;
    // Every fault fired (a used-up fault is dropped from the lists).
    api_faults_met(&world).await;
    for p in world.pods() {
        let left = p
            .faults()
            .call(reqwest::Method::GET, "faults", None)
            .await
            .unwrap();
        assert_eq!(left, json!([]), "{}: faults never met", p.name);
    }
    finish(world, ctl, &o, true).await;
}

/// 409 on the first create of the HAProxyCfg and of a map file, and on the first status write.
pub async fn api_conflicts(peers: Peers) {
    let faults = vec![
        api("POST", "haproxycfgs$", 409, 1),
        api("POST", "haproxymapfiles$", 409, 1),
        api("PUT", "haproxycfgs/[^/]+/status$", 409, 1),
    ];
    scenario(peers, faults, Vec::new(), Vec::new()).await;
}

/// 429 with `Retry-After: 1` on the first two writes of HAProxyCfgs.
pub async fn api_throttled(peers: Peers) {
    let f = Fault {
        retry_after_s: Some(1),
        ..api("POST|PUT", "haproxycfgs", 429, 2)
    };
    scenario(peers, vec![f], Vec::new(), Vec::new()).await;
}

/// A burst of four 500s on writes other than the Lease's.
pub async fn api_errors(peers: Peers) {
    let f = Fault {
        path_not: Some("leases".into()),
        ..api("POST|PUT|PATCH|DELETE", "", 500, 4)
    };
    scenario(peers, vec![f], Vec::new(), Vec::new()).await;
}

/// After the first render: the emulator forgets its watch history, so a resumed watch gets 410
/// Gone (the client's resourceVersion expired), and the open watches of pods and of HAProxyCfgs
/// end mid-stream: the controller lists again and goes on.
pub async fn api_watch_gone(peers: Peers) {
    let later = vec![Fault {
        path: "/(pods|haproxycfgs)$".into(),
        end_watch: true,
        times: Some(2),
        ..Fault::default()
    }];
    scenario(peers, Vec::new(), Vec::new(), later).await;
}

/// A version storm: the first three configuration pushes of each pod answer 409.
pub async fn dataplane_conflicts(peers: Peers) {
    let f = json!({"method": "POST|PUT", "path": "configuration/raw", "status": 409, "times": 3});
    scenario(peers, Vec::new(), vec![f], Vec::new()).await;
}

/// 500s: the first two storage writes and the first configuration push of each pod.
pub async fn dataplane_errors(peers: Peers) {
    let pod = vec![
        json!({"method": "POST|PUT", "path": "/storage/", "status": 500, "times": 2}),
        json!({"method": "POST|PUT", "path": "configuration/raw", "status": 500, "times": 1}),
    ];
    scenario(peers, Vec::new(), pod, Vec::new()).await;
}

/// The first configuration push of each pod has its connection closed unanswered.
pub async fn dataplane_dropped(peers: Peers) {
    let f = json!({"method": "POST|PUT", "path": "configuration/raw", "drop": true, "times": 1});
    scenario(peers, Vec::new(), vec![f], Vec::new()).await;
}

/// HAProxy rejects the first reload of each pod (last-known-good restored): the pod is synced
/// again, still within the writes the stream's bound allows.
pub async fn dataplane_failed_reload(peers: Peers) {
    let f = json!({"reload": "fail", "times": 1});
    scenario(peers, Vec::new(), vec![f], Vec::new()).await;
}

/// `DELETE /v3/services/haproxy/transactions/<id>`: a Dataplane transaction aborted.
fn is_transaction_abort(r: &haptic_tools::sandbox::control::RequestRecord) -> bool {
    r.method == "DELETE" && r.path.contains("/transactions/")
}

/// The wall-clock time at the start of a log line (`2026-12-01T15:11:58.660242Z ...`).
fn line_time(line: &str) -> Option<k8s_openapi::jiff::Timestamp> {
    line.split_whitespace().next()?.parse().ok()
}

/// After the first render another identity takes the Lease (as a successor after a partition
/// would); `03-maps-changed` is written meanwhile. The controller says it lost leadership, sends
/// no write to any pod or to the API (its Lease attempts and Events aside) until it leads
/// again (between its own `leadership lost` and next `leader acquired` log lines, against the
/// sandbox's arrival times), takes the Lease back once the intruder's expires, and converges on
/// `03-maps-changed`.
pub async fn lease_stolen(peers: Peers) {
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    use kube::Api;

    let (world, render_dir, o) = prepare(peers).await;
    let ctl = world.controller(o.clone());
    check_render(&world, STREAM[0], "").await;
    let leases: Api<Lease> = Api::namespaced(world.client(), world.namespace());
    // Read, modify, write, as a successor would: the controller renews every retry period, so
    // a renew between the read and the write is a 409 (another resourceVersion): read again.
    let mut tries = 0;
    loop {
        let mut lease = leases.get(super::LEASE).await.unwrap();
        let spec = lease.spec.as_mut().unwrap();
        spec.holder_identity = Some("intruder".into());
        spec.renew_time = Some(MicroTime(k8s_openapi::jiff::Timestamp::now()));
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        match leases
            .replace(super::LEASE, &Default::default(), &lease)
            .await
        {
            Ok(_) => break,
            Err(kube::Error::Api(e)) if e.code == 409 && tries < 20 => tries += 1,
            Err(e) => panic!("taking the Lease: {e}"),
        }
    }
    feed(&render_dir, STREAM[1]);
    check_render(&world, STREAM[1], STREAM[0]).await;
    let log = ctl.log_text();
    let lost = log
        .lines()
        .find(|l| l.contains("leadership lost"))
        .and_then(line_time)
        .unwrap_or_else(|| panic!("no `leadership lost` line\n{}", ctl.log_tail(40)));
    let back = log
        .lines()
        .filter(|l| l.contains("leader acquired"))
        .filter_map(line_time)
        .find(|t| *t > lost)
        .unwrap_or_else(|| panic!("not leader again\n{}", ctl.log_tail(40)));
    let between = |at: &str| {
        at.parse::<k8s_openapi::jiff::Timestamp>()
            .is_ok_and(|t| t > lost && t < back)
    };
    for p in world.pods() {
        let writes: Vec<String> = pod_writes(&p)
            .await
            .into_iter()
            // A transaction's DELETE is the abort of a deployment begun while leading (the
            // render can be read before the old leader's next renew finds the Lease taken): it
            // commits nothing and leaves no open transaction behind. Every other write counts.
            .filter(|r| between(&r.at) && !is_transaction_abort(r))
            .map(|r| format!("{} {} at {}", r.method, r.path, r.at))
            .collect();
        assert!(
            writes.is_empty(),
            "{} written while not leading: {writes:?}",
            p.name
        );
    }
    let api: Vec<String> = world
        .api_requests()
        .unwrap()
        .into_iter()
        .filter(|r| {
            r.method != "GET" && !r.path.contains("/leases/") && !r.path.contains("/events")
        })
        .filter(|r| r.user_agent.contains("(solo)") && between(&r.at))
        .map(|r| format!("{} {} at {}", r.method, r.path, r.at))
        .collect();
    assert!(api.is_empty(), "API writes while not leading: {api:?}");
    finish(world, ctl, &o, false).await;
}

/// Wrong credentials for a while: the first two requests of each pod answer 401.
pub async fn dataplane_unauthorized(peers: Peers) {
    let f = json!({"status": 401, "times": 2});
    scenario(peers, Vec::new(), vec![f], Vec::new()).await;
}

/// The first reload of each pod takes longer than the deployment timeout (2 s here, through
/// `--deployment-timeout`; an endpoint's sync gets half of it): the endpoints' syncs time out
/// and the deployment is retried, finding the pushed configuration in place; the pods converge
/// within the bounds of those intervals.
pub async fn dataplane_slow_reload(peers: Peers) {
    let (world, render_dir, mut o) = prepare(peers).await;
    o.intervals.deployment_timeout = std::time::Duration::from_secs(2);
    for p in world.pods() {
        p.faults()
            .arm(json!({"reload": "slow", "times": 1, "delay_ms": 3000}))
            .await
            .unwrap();
    }
    let ctl = world.controller(o.clone());
    // The e2e bounds are the default intervals' (20 s timeout): wider than these.
    check_render(&world, STREAM[0], "").await;
    assert!(
        ctl.log_text().contains("endpoint sync timed out"),
        "the slow reload outlasted the deployment timeout\n{}",
        ctl.log_text()
            .lines()
            .filter(|l| !l.contains("DEBUG"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    feed(&render_dir, STREAM[1]);
    check_render(&world, STREAM[1], STREAM[0]).await;
    finish(world, ctl, &o, false).await;
}

/// A pod killed (processes gone, Pod object deleted) while a deployment to it is in flight (its
/// reload held 3 s): the deployment ends, the other pod runs the render, the HAProxyCfg lists only
/// the pod that is left, on that render.
pub async fn pod_disappears(peers: Peers) {
    let (world, render_dir, o) = prepare(peers).await;
    let ctl = world.controller(o.clone());
    check_render(&world, STREAM[0], "").await;
    let pods = world.pods();
    let (gone, left) = (&pods[0], &pods[1]);
    gone.faults()
        .arm(json!({"reload": "slow", "times": 1, "delay_ms": 3000}))
        .await
        .unwrap();
    feed(&render_dir, STREAM[1]);
    // The deployment reached the pod (its configuration was pushed), then the pod goes.
    world
        .eventually(
            super::bounds().deployment(),
            "the push to the doomed pod",
            || async {
                let reqs = gone.faults().requests().await.map_err(|e| e.to_string())?;
                reqs.iter()
                    .any(|r| r.method != "GET" && r.path.contains("/configuration/"))
                    .then_some(())
                    .ok_or("not pushed yet".to_owned())
            },
        )
        .await;
    world.kill_pod(&gone.name).await.unwrap();
    let want = haptic_testkit::render::checksum(STREAM[1]);
    super::object_until(
        &world,
        super::MAIN,
        super::bounds().converge(),
        "the HAProxyCfg on 03 with only the pod that is left",
        |c| {
            let entries: Vec<(String, String)> = c
                .status
                .iter()
                .flat_map(|s| s.deployed_to_pods.iter())
                .map(|p| {
                    (
                        p.pod_name.clone(),
                        p.checksum.map(|c| c.to_string()).unwrap_or_default(),
                    )
                })
                .collect();
            (c.spec.checksum == want && entries == vec![(left.name.clone(), want.to_string())])
                .then_some(())
                .ok_or(format!("{} {entries:?}", c.spec.checksum))
        },
    )
    .await;
    finish(world, ctl, &o, false).await;
}

/// Every HAProxyCfg status write held a twentieth of the drain timeout (under the request
/// timeout: each write succeeds, late). A SIGTERM as soon as the pods answer `03-maps-changed`
/// finds that deployment's per-pod statuses queued or in flight: the clean stop writes them
/// before it ends (the leader's drain waits for `status-pending`, within `--drain-timeout`), so
/// nothing is pending in the journal and the status lists every pod on `03-maps-changed`.
/// Before, the components stopped with the statuses unwritten ("pending after a clean stop:
/// status-pending"; seen once in a full run of `api_timeouts`).
pub async fn slow_status_at_stop(peers: Peers) {
    let (world, render_dir, o) = prepare(peers).await;
    let mut ctl = world.controller(o.clone());
    check_render(&world, STREAM[0], "").await;
    let hold = o.intervals.drain_timeout / 20;
    world
        .emulator()
        .expect("the API emulator")
        .add_fault(Fault {
            method: "PUT".into(),
            path: "haproxycfgs/[^/]+/status$".into(),
            delay_ms: Some(u64::try_from(hold.as_millis()).unwrap()),
            ..Fault::default()
        })
        .unwrap();
    feed(&render_dir, STREAM[1]);
    super::answers(&world, STREAM[1]).await;
    stop_cleanly(&mut ctl);
    if let Err(e) = journal_after_stop(&o.journal) {
        panic!("{e}\n{}", ctl.log_tail(30));
    }
    let want = haptic_testkit::render::checksum(STREAM[1]);
    let c = world.hpcfg(super::MAIN).await.expect("the HAProxyCfg");
    let pods: Vec<_> = c
        .status
        .iter()
        .flat_map(|s| s.deployed_to_pods.iter())
        .map(|p| (p.pod_name.clone(), p.checksum))
        .collect();
    assert!(
        pods.len() == world.pods().len() && pods.iter().all(|(_, c)| *c == Some(want)),
        "after the clean stop the status lists every pod on {want}: {pods:?}\n{}",
        ctl.log_tail(30)
    );
    world.shutdown().await;
}

/// The controller's Kubernetes request timeout in [`api_timeouts`] (`--kube-request-timeout`).
const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// A hold that outlasts the whole scenario: the emulator answers (forwards) only after it, as a
/// black-holed connection never answers at all.
const HOLD_MS: u64 = 600_000;

/// One held request: method, the fault's path pattern, the same as a test on a logged path,
/// and whether only one caller sends it (so its next one is the retry, sent no sooner than the
/// timeout; several workers write status).
type Held = (&'static str, &'static str, fn(&str) -> bool, bool);

fn held((method, path, ..): Held) -> Fault {
    Fault {
        method: method.into(),
        path: path.into(),
        delay_ms: Some(HOLD_MS),
        times: Some(1),
        ..Fault::default()
    }
}

/// Whether `held` was sent again (and answered) after its hold; `Err` says what was seen.
fn sent_again(
    requests: &[haptic_tools::sandbox::control::RequestRecord],
    (method, path, matches, single): Held,
) -> Result<(), String> {
    let same: Vec<_> = requests
        .iter()
        .filter(|r| r.method == method && matches(&r.path))
        .collect();
    let at = |r: &haptic_tools::sandbox::control::RequestRecord| {
        r.at.parse::<k8s_openapi::jiff::Timestamp>()
            .map_err(|e| e.to_string())
    };
    let hold = same
        .iter()
        .position(|r| r.status == 0)
        .ok_or(format!("{method} {path}: no held request in {same:?}"))?;
    let next = same[hold + 1..]
        .iter()
        .find(|r| r.status != 0)
        .ok_or(format!("{method} {path}: not sent again after the hold"))?;
    let waited = at(next)?.duration_since(at(same[hold])?);
    if single && waited.as_secs_f64() < REQUEST_TIMEOUT.as_secs_f64() * 0.9 {
        return Err(format!(
            "{method} {path}: sent again after {waited:?}, before the request timeout"
        ));
    }
    Ok(())
}

/// Requests held by the API emulator past the controller's request timeout (2 s through
/// `--kube-request-timeout`), never answered within the scenario: the first list or watch of
/// pods (discovery) and of Secrets (the Dataplane credentials), the first create of the
/// HAProxyCfg and the first status write; after the first render converged, a Lease renew. The
/// controller gives up on each after the timeout, sends it again and converges on the stream as
/// a run without faults does (nothing lost, nothing published twice, no pod written more than
/// the stream needs); the log names the timeout.
pub async fn api_timeouts(peers: Peers) {
    let (world, render_dir, mut o) = prepare(peers).await;
    let emulator = world.emulator().expect("the API emulator");
    let first: [Held; 4] = [
        ("GET", "/pods$", |p| p.ends_with("/pods"), true),
        ("GET", "/secrets$", |p| p.ends_with("/secrets"), true),
        (
            "POST",
            "/haproxycfgs$",
            |p| p.ends_with("/haproxycfgs"),
            true,
        ),
        (
            "PUT",
            "/haproxycfgs/[^/]+/status$",
            |p| p.contains("/haproxycfgs/") && p.ends_with("/status"),
            false,
        ),
    ];
    for h in first {
        emulator.add_fault(held(h)).unwrap();
    }
    o.extra.extend([
        "--kube-request-timeout".into(),
        format!("{}ms", REQUEST_TIMEOUT.as_millis()),
    ]);
    let ctl = world.controller(o.clone());
    check_render(&world, STREAM[0], "").await;
    let renew: Held = ("PUT", "/leases/", |p| p.contains("/leases/"), true);
    emulator.add_fault(held(renew)).unwrap();
    feed(&render_dir, STREAM[1]);
    check_render(&world, STREAM[1], STREAM[0]).await;
    // Every held request was sent again once the timeout ran out (the renew is held within a
    // retry period of its arming, its retry follows within the renew deadline).
    world
        .eventually(
            o.intervals.takeover(),
            "every held request sent again",
            || async {
                let requests: Vec<_> = world
                    .api_requests()
                    .map_err(|e| e.to_string())?
                    .into_iter()
                    .filter(|r| r.user_agent.contains("(solo)"))
                    .collect();
                first
                    .into_iter()
                    .chain([renew])
                    .try_for_each(|h| sent_again(&requests, h))
            },
        )
        .await;
    api_faults_met(&world).await;
    let log = ctl.log_text();
    assert!(
        log.contains("timed out after 2s"),
        "the log names the timeout\n{}",
        ctl.log_tail(40)
    );
    finish(world, ctl, &o, true).await;
}
