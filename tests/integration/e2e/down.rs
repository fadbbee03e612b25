//! What happens while the leader is down, with the real binary (issue 11, "What must be shown"):
//! a pod removed while the only controller is dead leaves the HAProxyCfg status after the
//! restart; the same across a failover of three replicas; and a failover onto pods that already
//! run a render with certificates, a CA file, a map, a crt-list and an error page uploads nothing
//! and reloads nothing (counted through the sandbox's request logs). Every controller runs with a
//! drift interval no bound here can meet, so drift cannot rescue a bug.

use std::path::Path;

use haptic::core::render::{RenderContent, RenderFile};
use haptic_journal::AuxKind;
use haptic_testkit::render::write_render;

use crate::deployer::truth_kit::{every_kind_config, every_kind_files, site_pem};

use super::{
    Controller, ControllerOpts, Fleet, LEASE, MAIN, Peers, bounds, leader_of, leads, logged, opts,
    pod_writes, start,
};

on_peers!(
    Emulator,
    a_pod_removed_while_the_controller_is_down_leaves_the_status =>
        pod_removed_while_down,
    a_pod_removed_while_the_leader_is_down_leaves_the_status_after_a_failover_of_three =>
        pod_removed_during_failover,
    a_failover_onto_pods_running_a_render_with_files_uploads_and_reloads_nothing =>
        failover_uploads_nothing,
);

/// A drift interval no test here waits for.
const SLOW_DRIFT: [&str; 2] = ["--drift-prevention-interval", "10m"];

/// The render of the deployer's failover tests, answering `down ...`, with every kind of
/// file (an error page included).
pub(crate) fn render_with_files() -> RenderContent {
    RenderContent {
        config: every_kind_config("down", true).into_bytes(),
        files: every_kind_files(site_pem(), true)
            .into_iter()
            .map(|(kind, path, content)| RenderFile {
                kind,
                path,
                content,
            })
            .collect(),
    }
}

/// Waits (at most `bound`) until the main HAProxyCfg's status lists exactly `pods` (by name),
/// every one on the spec's render.
async fn status_lists(world: &Fleet, pods: &[String], bound: std::time::Duration) {
    let mut want: Vec<String> = pods.to_vec();
    want.sort();
    world
        .eventually(
            bound,
            &format!("the status to list exactly {want:?}"),
            || async {
                let Some(cfg) = world.hpcfg(MAIN).await else {
                    return Err("no HAProxyCfg".to_owned());
                };
                let spec = cfg.spec.checksum.to_string();
                let entries: Vec<(String, Option<String>)> = cfg
                    .status
                    .iter()
                    .flat_map(|s| s.deployed_to_pods.iter())
                    .map(|p| {
                        (
                            p.pod_name.clone(),
                            p.checksum.as_ref().map(ToString::to_string),
                        )
                    })
                    .collect();
                let mut names: Vec<String> = entries.iter().map(|(n, _)| n.clone()).collect();
                names.sort();
                let on_spec = entries
                    .iter()
                    .all(|(_, c)| c.as_deref() == Some(spec.as_str()));
                (names == want && on_spec)
                    .then_some(())
                    .ok_or(format!("status lists {entries:?} (spec {spec})"))
            },
        )
        .await;
}

fn names(world: &Fleet) -> Vec<String> {
    world.pods().iter().map(|p| p.name.clone()).collect()
}

/// [`opts`] with drift checks slowed ([`SLOW_DRIFT`]).
fn slow_opts(world: &Fleet, identity: &str, render_dir: &Path) -> ControllerOpts {
    let mut o = opts(world, identity, render_dir);
    o.extra.extend(SLOW_DRIFT.iter().map(|s| (*s).to_owned()));
    o
}

/// One controller per identity of `ids` on `render_dir` ([`slow_opts`]), once the status lists
/// every pod and one of them holds the Lease: the controllers, every pod's name, the leader.
async fn replicas_led(
    world: &Fleet,
    ids: &[&str],
    render_dir: &Path,
) -> (Vec<Controller>, Vec<String>, String) {
    let ctls = ids
        .iter()
        .map(|id| world.controller(slow_opts(world, id, render_dir)))
        .collect();
    let all = names(world);
    status_lists(world, &all, bounds().converge()).await;
    let leader = leader_of(world).await;
    (ctls, all, leader)
}

/// The only controller is SIGKILLed, a pod's object is deleted while it is down, and the
/// restarted controller (same journal) drops that pod's status entry: within the Lease, the
/// first discovery and one status round (`takeover()`).
pub async fn pod_removed_while_down(peers: Peers) {
    let world = start(peers, 3).await;
    let render_dir = world.dir().join("render");
    write_render(&render_with_files(), &render_dir).unwrap();
    let o = slow_opts(&world, "solo", &render_dir);
    let mut ctl = world.controller(o.clone());
    let all = names(&world);
    status_lists(&world, &all, bounds().converge()).await;
    ctl.kill();
    let gone = all[2].clone();
    world.unregister_pod(&gone).await.unwrap();
    let ctl = world.controller(o);
    status_lists(&world, &all[..2], bounds().takeover()).await;
    drop(ctl);
    world.shutdown().await;
}

/// Three replicas; the leader is SIGKILLed and a pod's object deleted before another takes
/// over: the new leader drops that pod's status entry.
pub async fn pod_removed_during_failover(peers: Peers) {
    let world = start(peers, 3).await;
    let render_dir = world.dir().join("render");
    write_render(&render_with_files(), &render_dir).unwrap();
    let (mut ctls, all, leader) =
        replicas_led(&world, &["alpha", "beta", "gamma"], &render_dir).await;
    let l = ctls
        .iter()
        .position(|c| c.opts.identity == leader)
        .expect("the leader is one of the three");
    ctls[l].kill();
    let gone = all[0].clone();
    world.unregister_pod(&gone).await.unwrap();
    // Another replica takes the Lease (takeover), then its term's first status round.
    status_lists(
        &world,
        &all[1..],
        bounds().takeover() + bounds().deployment(),
    )
    .await;
    let holder = world.lease_holder(LEASE).await;
    assert!(
        holder.is_some() && holder.as_deref() != Some(leader.as_str()),
        "another replica leads: {holder:?}"
    );
    world.shutdown().await;
}

/// Two replicas on a render with every kind of file that has a runtime view (CA file,
/// crt-list, map, certificates); the leader is SIGKILLed; the new leader, whose journal has no
/// record of the pods (J9), reads what HAProxy loaded through the runtime endpoints and its
/// first deployment sends no upload, no raw push and triggers no reload (issue 24: a general
/// file, which has no runtime view, is reloaded once instead; `deployer::failover` shows that).
pub async fn failover_uploads_nothing(peers: Peers) {
    let world = start(peers, 3).await;
    let render_dir = world.dir().join("render");
    let mut render = render_with_files();
    render.files.retain(|f| f.kind != AuxKind::General);
    let config = String::from_utf8(render.config).unwrap();
    render.config = config
        .lines()
        .filter(|l| !l.trim_start().starts_with("errorfile "))
        .map(|l| format!("{l}\n"))
        .collect::<String>()
        .into_bytes();
    write_render(&render, &render_dir).unwrap();
    let (mut ctls, _, leader) = replicas_led(&world, &["alpha", "beta"], &render_dir).await;
    let (l, f) = if ctls[0].opts.identity == leader {
        (0, 1)
    } else {
        (1, 0)
    };
    let reloads_before = world.reload_counts().await;
    ctls[l].kill();
    for pod in &world.pods() {
        pod.faults().clear_requests().await.unwrap();
    }
    let follower = ctls[f].opts.identity.clone();
    leads(&world, &follower).await;
    logged(
        &ctls[f],
        bounds().takeover(),
        "the new leader's first deployment to finish",
        "deployment completed",
    )
    .await;
    let mut writes = Vec::new();
    for pod in &world.pods() {
        for r in pod_writes(pod).await {
            writes.push(format!("{} {} {} {}", pod.name, r.method, r.path, r.query));
        }
    }
    assert!(
        writes.is_empty(),
        "the new leader wrote to pods that already run the render: {writes:?}\n{}",
        ctls[f].log_tail(30)
    );
    assert_eq!(
        world.reload_counts().await,
        reloads_before,
        "pods already on the render were reloaded"
    );
    world.shutdown().await;
}
