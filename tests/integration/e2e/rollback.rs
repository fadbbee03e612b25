//! Rollback with the real binary (issue 28): the annotation `haproxy-haptic.org/rollback-to` on
//! the main HAProxyCfg holds the fleet on the render two steps back (every pod answers it over
//! real HTTP), a newer render is validated and published in the spec but not deployed, the
//! `RolledBack` condition names the held checksum, a SIGKILL keeps the hold, an unknown
//! checksum is refused (condition message, `RollbackRefused` Event) with nothing changed, and
//! removing the annotation deploys the newest. The running controller's history (`GET
//! /debug/history`) agrees with the status: both pods ran the held render after the annotation,
//! no pod ran the newer render before the hold ended. Every bound derives from [`Intervals`].

use haptic::k8s::crd::{HAProxyCfg, conditions, labels, reasons};

use super::{
    MAIN, Peers, alpha_and_beta, bounds, checksum, feed, kubectl_ok, leader_of, leads, main_until,
    published,
};

super::on_peers!(
    Emulator,
    a_rollback_holds_the_fleet_on_an_earlier_render_across_a_sigkill_until_the_annotation_goes =>
        rollback,
    a_new_leader_continues_the_hold_the_condition_shows_not_its_own_previous =>
        rollback_failover,
);

/// `(status, reason, message)` of the condition `type_`, if any.
fn condition(c: &HAProxyCfg, type_: &str) -> Option<(String, String, String)> {
    c.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// The checksums `deployedToPods` lists, sorted.
fn pod_checksums(c: &HAProxyCfg) -> Vec<String> {
    let mut v: Vec<String> = c
        .status
        .as_ref()
        .map(|s| {
            s.deployed_to_pods
                .iter()
                .map(|p| p.checksum.map(|c| c.to_string()).unwrap_or_default())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Reasons of the Kubernetes Events with action `Rollback`, in list order.
async fn rollback_events(world: &super::Fleet) -> Vec<(String, String)> {
    super::events_where(world, |e| e.action.as_deref() == Some("Rollback"))
        .await
        .into_iter()
        .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect()
}

/// The pods (`NS/NAME`) with an applied sync in `GET /debug/history?<query>` of the controller
/// at `addr`, sorted and unique.
async fn pods_that_ran(addr: std::net::SocketAddr, query: &str) -> Vec<String> {
    let (status, body) = super::telemetry::get(addr, &format!("/debug/history?{query}")).await;
    assert_eq!(status, 200, "{body}");
    let mut pods: Vec<String> = body
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|l| l["result"] == "applied")
        .filter_map(|l| l["pod"].as_str().map(str::to_owned))
        .collect();
    pods.sort();
    pods.dedup();
    pods
}

/// Removes the annotation, then waits until `RolledBack=False/RollbackEnded` with every pod
/// on `newest` in the status and answering it.
async fn released_to(world: &super::Fleet, newest: &str) {
    let target = format!("hpcfg/{MAIN}");
    let remove = format!("{}-", labels::ROLLBACK_TO);
    kubectl_ok(world, &["annotate", &target, &remove]);
    let want = checksum(newest).to_string();
    main_until(
        world,
        bounds().converge(),
        &format!("RolledBack=False/RollbackEnded, every pod on {newest}"),
        |c| {
            let (status, reason, message) =
                condition(c, conditions::ROLLED_BACK).ok_or("no RolledBack")?;
            let pods = pod_checksums(c);
            (status == "False"
                && reason == reasons::ROLLBACK_ENDED
                && pods.len() == world.pods().len()
                && pods.iter().all(|p| *p == want))
            .then_some(())
            .ok_or(format!("{status}/{reason} {message} {pods:?}"))
        },
    )
    .await;
    super::answers(world, newest).await;
}

pub async fn rollback(peers: Peers) {
    let (world, render_dir, o) = super::fed(peers, 2, "01-basic", "solo").await;
    let mut ctl = world.controller(o.clone());
    let target = format!("hpcfg/{MAIN}");
    published(&world, "01-basic", 2).await;
    feed(&render_dir, "02-maps");
    published(&world, "02-maps", 2).await;
    feed(&render_dir, "03-maps-changed");
    published(&world, "03-maps-changed", 2).await;

    // Two steps back, by checksum.
    let held = checksum("01-basic").to_string();
    let hold_from = k8s_openapi::jiff::Timestamp::now().to_string();
    let annotation = format!("{}={held}", labels::ROLLBACK_TO);
    kubectl_ok(&world, &["annotate", &target, &annotation]);
    let message = main_until(
        &world,
        bounds().converge(),
        "RolledBack=True naming the held render, every pod on it",
        |c| {
            let (status, reason, message) =
                condition(c, conditions::ROLLED_BACK).ok_or("no RolledBack")?;
            (status == "True"
                && reason == reasons::ROLLBACK_HELD
                && pod_checksums(c) == vec![held.clone(), held.clone()])
            .then(|| message.clone())
            .ok_or(format!(
                "{status}/{reason} {message} {:?}",
                pod_checksums(c)
            ))
        },
    )
    .await;
    assert!(
        message.starts_with(&format!("render {held} is held")),
        "{message}"
    );
    assert!(
        message.contains(&checksum("03-maps-changed").to_string()),
        "names the newest: {message}"
    );
    super::answers(&world, "01-basic").await;
    let spec = world.hpcfg(MAIN).await.unwrap().spec.checksum;
    assert_eq!(
        spec,
        checksum("03-maps-changed"),
        "the spec never moves back"
    );

    // A newer render: validated and published in the spec, not deployed.
    feed(&render_dir, "04-errors");
    let newest = checksum("04-errors");
    main_until(&world, bounds().converge(), "spec on 04-errors", |c| {
        (c.spec.checksum == newest)
            .then_some(())
            .ok_or(format!("{}", c.spec.checksum))
    })
    .await;
    tokio::time::sleep(bounds().deployment()).await;
    world.pods_answer("01-basic").await.unwrap();
    let cfg = world.hpcfg(MAIN).await.unwrap();
    assert_eq!(pod_checksums(&cfg), vec![held.clone(), held.clone()]);
    let (status, reason, message) = condition(&cfg, conditions::SYNCED).unwrap();
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", reasons::ALL_PODS_SYNCED),
        "pods on the held render are synced: {message}"
    );

    // SIGKILL while held: the restarted controller keeps the hold.
    ctl.kill();
    ctl = world.controller(o.clone());
    tokio::time::sleep(bounds().takeover()).await;
    world.pods_answer("01-basic").await.unwrap();
    let cfg = world.hpcfg(MAIN).await.unwrap();
    assert_eq!(pod_checksums(&cfg), vec![held.clone(), held.clone()]);
    assert_eq!(
        condition(&cfg, conditions::ROLLED_BACK).map(|c| c.0),
        Some("True".to_owned())
    );

    // An unknown checksum: refused, the hold and the fleet unchanged.
    let unknown = format!("sha256:{}", "0".repeat(64));
    let annotation = format!("{}={unknown}", labels::ROLLBACK_TO);
    kubectl_ok(&world, &["annotate", "--overwrite", &target, &annotation]);
    let message = main_until(
        &world,
        bounds().follow_up(),
        "the refusal in RolledBack",
        |c| {
            let (status, _, message) =
                condition(c, conditions::ROLLED_BACK).ok_or("no RolledBack")?;
            (status == "True" && message.contains("refused"))
                .then(|| message.clone())
                .ok_or(message)
        },
    )
    .await;
    assert!(message.contains(&unknown), "{message}");
    assert!(
        message.contains("not in this replica's journal"),
        "{message}"
    );
    assert!(
        message.starts_with(&format!("render {held} is held")),
        "{message}"
    );
    world.pods_answer("01-basic").await.unwrap();
    world
        .eventually(bounds().follow_up(), "a RollbackRefused Event", || async {
            let ev = rollback_events(&world).await;
            ev.iter()
                .any(|(r, n)| r == "RollbackRefused" && n.contains(&unknown))
                .then_some(())
                .ok_or(format!("{ev:?}"))
        })
        .await;

    // The annotation goes: the newest render is deployed.
    let hold_until = k8s_openapi::jiff::Timestamp::now().to_string();
    released_to(&world, "04-errors").await;
    let newest_s = newest.to_string();
    let ev = rollback_events(&world).await;
    for want in ["RollbackStarted", "RollbackRefused", "RollbackEnded"] {
        assert!(ev.iter().any(|(r, _)| r == want), "{want}: {ev:?}");
    }

    // "Which pods ran render R", from the running controller's journal, matches the status:
    // both pods ran the held render after the annotation (the restarted process's syncs
    // included), none ran the newer render while the hold lasted, both run it after.
    let addr = ctl.metrics_addr().await;
    let mut all: Vec<String> = world
        .pods()
        .iter()
        .map(|p| format!("{}/{}", world.namespace(), p.name))
        .collect();
    all.sort();
    assert_eq!(
        pods_that_ran(addr, &format!("render={held}&since={hold_from}")).await,
        all,
        "the held render"
    );
    assert_eq!(
        pods_that_ran(addr, &format!("render={newest_s}&until={hold_until}")).await,
        Vec::<String>::new(),
        "the newer render was not deployed while held"
    );
    assert_eq!(
        pods_that_ran(addr, &format!("render={newest_s}")).await,
        all,
        "the newest after the hold"
    );
    drop(ctl);
}

/// Waits until `RolledBack=True` holds `held` with every pod on it and the message naming
/// `newest`; returns the message.
async fn held_on(world: &super::Fleet, held: &str, newest: &str) -> String {
    let (held, newest) = (checksum(held).to_string(), checksum(newest).to_string());
    main_until(
        world,
        bounds().converge(),
        &format!("RolledBack=True on {held} naming {newest}, every pod on it"),
        |c| {
            let (status, _, message) =
                condition(c, conditions::ROLLED_BACK).ok_or("no RolledBack")?;
            (status == "True"
                && message.starts_with(&format!("render {held} is held"))
                && message.contains(&newest)
                && pod_checksums(c).iter().all(|p| *p == held))
            .then(|| message.clone())
            .ok_or(format!("{status} {message} {:?}", pod_checksums(c)))
        },
    )
    .await
}

/// Two replicas (J9: each its own journal). `previous` is held by the leader (render 02 under
/// 03); 04 passes during the hold, so the follower's own `previous` is now 03. The leader is
/// SIGKILLed: the new leader continues the hold the `RolledBack` condition shows (02), not its
/// own `previous`, says it again, and ends it when the annotation goes.
pub async fn rollback_failover(peers: Peers) {
    let (world, render_dir, mut ctls) = alpha_and_beta(peers, 2).await;
    published(&world, "01-basic", 2).await;
    feed(&render_dir, "02-maps");
    published(&world, "02-maps", 2).await;
    feed(&render_dir, "03-maps-changed");
    published(&world, "03-maps-changed", 2).await;
    let target = format!("hpcfg/{MAIN}");
    let annotation = format!("{}=previous", labels::ROLLBACK_TO);
    kubectl_ok(&world, &["annotate", &target, &annotation]);
    held_on(&world, "02-maps", "03-maps-changed").await;
    super::answers(&world, "02-maps").await;

    // A newer render during the hold: validated (both replicas), the condition says it.
    feed(&render_dir, "04-errors");
    held_on(&world, "02-maps", "04-errors").await;

    let leader = leader_of(&world).await;
    let l = ctls.iter().position(|c| c.opts.identity == leader).unwrap();
    ctls[l].kill();
    let follower = ctls[1 - l].opts.identity.clone();
    leads(&world, &follower).await;
    // Its first term runs (its start-up deployment), then the pods are still on 02.
    tokio::time::sleep(bounds().deployment()).await;
    held_on(&world, "02-maps", "04-errors").await;
    world.pods_answer("02-maps").await.unwrap();

    released_to(&world, "04-errors").await;
    drop(ctls);
}
