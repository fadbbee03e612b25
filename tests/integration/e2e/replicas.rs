//! Two controller replicas on one emulator (DESIGN.md J9 topology b): one leads; when the
//! leader is killed the other takes over and the published status converges; a leader frozen
//! (SIGSTOP) until the other took over writes nothing over the new term after SIGCONT.

use std::time::Duration;

use nix::sys::signal::Signal;

use super::stream::published;
use super::{Controller, Opts, World, feed};

const LEASE: &str = "haptic-leader";

async fn leader_of(world: &World) -> String {
    world
        .until(Duration::from_secs(30), "a leader", || {
            world.lease_holder(LEASE)
        })
        .await
}

fn pick(a: &mut Controller, b: &mut Controller, leader: &str) -> (usize, usize) {
    if a.opts.identity == leader {
        (0, 1)
    } else {
        assert_eq!(b.opts.identity, leader);
        (1, 0)
    }
}

async fn two(world: &World) -> Vec<Controller> {
    let render_dir = world.dir.path().join("render");
    feed(&render_dir, "01-basic");
    let a = world.controller(Opts::dir(world, "alpha", &render_dir));
    let b = world.controller(Opts::dir(world, "beta", &render_dir));
    published(world, "01-basic", 3).await;
    vec![a, b]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_follower_takes_over_when_the_leader_dies() {
    let world = World::start(3).await;
    let mut ctls = two(&world).await;
    let leader = leader_of(&world).await;
    let (l, f) = {
        let (x, y) = ctls.split_at_mut(1);
        pick(&mut x[0], &mut y[0], &leader)
    };
    let reloads_before = reload_counts(&world).await;
    ctls[l].kill();
    let follower = ctls[f].opts.identity.clone();
    world
        .until(Duration::from_secs(30), "the follower to lead", || async {
            (world.lease_holder(LEASE).await.as_deref() == Some(follower.as_str())).then_some(())
        })
        .await;
    // J9: the new leader reconciles with the pods; those already running the newest render
    // are not redeployed (no reload), once its became_leader deployment has completed.
    world
        .until(
            Duration::from_secs(30),
            "the new leader's first deployment",
            || async {
                ctls[f]
                    .log_text()
                    .lines()
                    .any(|l| l.contains("executor finished"))
                    .then_some(())
            },
        )
        .await;
    assert_eq!(
        reload_counts(&world).await,
        reloads_before,
        "pods already on the newest render were reloaded by the new leader\n{}",
        ctls[f].log_tail(30)
    );
    feed(&world.dir.path().join("render"), "02-maps");
    published(&world, "02-maps", 3).await;
    world
        .pods_answer("02-maps", Duration::from_secs(60))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", ctls[f].log_tail(40)));
    world.cluster.shutdown().await;
}

async fn reload_counts(world: &World) -> Vec<usize> {
    let mut v = Vec::new();
    for pod in world.pods() {
        let dp = haptic_tools::sandbox::pods::demo::DpClient::new(
            &pod.dataplane_url,
            world.cluster.sandbox.username(),
            world.cluster.sandbox.password(),
        )
        .unwrap();
        v.push(dp.reload_count().await.unwrap());
    }
    v
}

/// Writes (not reads) with a 2xx answer in a request log, from `identity`'s user agent.
fn writes_by<'a>(
    records: impl Iterator<Item = (&'a str, &'a str, u16, &'a str)>,
    identity: &str,
) -> Vec<String> {
    let ua = format!("({identity})");
    records
        .filter(|(m, _, status, agent)| {
            agent.contains(&ua) && *m != "GET" && (200..300).contains(status)
        })
        .map(|(m, p, s, _)| format!("{m} {p} {s}"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_leader_writes_nothing_after_it_thaws() {
    let world = World::start(3).await;
    let mut ctls = two(&world).await;
    let leader = leader_of(&world).await;
    let (l, f) = {
        let (x, y) = ctls.split_at_mut(1);
        pick(&mut x[0], &mut y[0], &leader)
    };
    ctls[l].signal(Signal::SIGSTOP);
    let follower = ctls[f].opts.identity.clone();
    world
        .until(Duration::from_secs(30), "the follower to lead", || async {
            (world.lease_holder(LEASE).await.as_deref() == Some(follower.as_str())).then_some(())
        })
        .await;
    feed(&world.dir.path().join("render"), "02-maps");
    published(&world, "02-maps", 3).await;
    world
        .pods_answer("02-maps", Duration::from_secs(60))
        .await
        .unwrap();
    // The filter does see this leader's writes (it published 01 and held the Lease), so an
    // empty result below means something.
    let before = world.cluster.api.requests();
    let earlier = writes_by(
        before.iter().map(|r| {
            (
                r.method.as_str(),
                r.path.as_str(),
                r.status,
                r.user_agent.as_str(),
            )
        }),
        &leader,
    );
    assert!(
        earlier.iter().any(|w| w.contains("haproxycfgs")),
        "the leader's own writes are visible: {earlier:?}"
    );
    // Thaw the old leader and give it time to act on what it believed before the freeze.
    world.cluster.api.clear_requests();
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    for pod in world.pods() {
        http.delete(format!("{}/_sandbox/requests", pod.dataplane_url))
            .send()
            .await
            .unwrap();
    }
    ctls[l].signal(Signal::SIGCONT);
    tokio::time::sleep(Duration::from_secs(8)).await;
    let api = world.cluster.api.requests();
    // Events (events.k8s.io) are notes about the replica itself ("stopped leading"), not
    // objects of the new term.
    let cluster_writes = writes_by(
        api.iter().filter(|r| !r.path.contains("/events")).map(|r| {
            (
                r.method.as_str(),
                r.path.as_str(),
                r.status,
                r.user_agent.as_str(),
            )
        }),
        &leader,
    );
    assert!(
        cluster_writes.is_empty(),
        "the thawed leader wrote to the cluster: {cluster_writes:?}\n{}",
        ctls[l].log_tail(40)
    );
    for pod in world.pods() {
        let records: Vec<serde_json::Value> = http
            .get(format!("{}/_sandbox/requests", pod.dataplane_url))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let rows: Vec<(String, String, u16, String)> = records
            .iter()
            .map(|r| {
                (
                    r["method"].as_str().unwrap_or_default().to_owned(),
                    r["path"].as_str().unwrap_or_default().to_owned(),
                    u16::try_from(r["status"].as_u64().unwrap_or(0)).unwrap_or(0),
                    r["user_agent"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        let writes = writes_by(
            rows.iter()
                .map(|(m, p, s, u)| (m.as_str(), p.as_str(), *s, u.as_str())),
            &leader,
        );
        assert!(
            writes.is_empty(),
            "the thawed leader wrote to {}: {writes:?}",
            pod.name
        );
    }
    // The new leader still leads, and the fleet still runs what it published.
    assert_eq!(
        world.lease_holder(LEASE).await.as_deref(),
        Some(follower.as_str())
    );
    world
        .pods_answer("02-maps", Duration::from_secs(10))
        .await
        .unwrap();
    let log = ctls[l].log_text();
    assert!(
        log.contains("leadership lost") || log.contains("lost"),
        "{}",
        ctls[l].log_tail(30)
    );
    world.cluster.shutdown().await;
}
