//! Per-pod status on the auxiliary objects (HAProxyMapFile, HAProxyGeneralFile,
//! HAProxyCRTListFile) and `status.observedGeneration` (issue 5; upstream-behaviour.md 10.5).

use std::sync::atomic::Ordering;

use haptic::k8s::crd::{
    AuxiliaryFileStatus, HAProxyCRTListFile, HAProxyGeneralFile, HAProxyMapFile,
};
use haptic_journal::Event;
use kube::Api;

use super::*;

/// Every auxiliary object of the main HAProxyCfg: (kind plural, name, spec checksum,
/// generation, status).
async fn aux_objects(
    env: &Env,
) -> Vec<(
    &'static str,
    String,
    Checksum,
    Option<i64>,
    Option<AuxiliaryFileStatus>,
)> {
    // The three kinds share their spec's checksum and their status type, not a trait.
    macro_rules! of_kind {
        ($out:ident, $kind:ty, $plural:literal) => {
            let api: Api<$kind> = Api::namespaced(env.client.clone(), NS);
            for o in api.list(&Default::default()).await.unwrap().items {
                let name = o.metadata.name.clone().unwrap();
                $out.push((
                    $plural,
                    name,
                    o.spec.checksum,
                    o.metadata.generation,
                    o.status,
                ));
            }
        };
    }
    let mut out = Vec::new();
    of_kind!(out, HAProxyMapFile, "haproxymapfiles");
    of_kind!(out, HAProxyGeneralFile, "haproxygeneralfiles");
    of_kind!(out, HAProxyCRTListFile, "haproxycrtlistfiles");
    out
}

fn pods_of(st: Option<&AuxiliaryFileStatus>) -> Vec<String> {
    st.map(|s| {
        s.deployed_to_pods
            .iter()
            .map(|p| p.pod_name.clone())
            .collect()
    })
    .unwrap_or_default()
}

async fn terminated(env: &mut Env, p: &ConfigPublisher, pod: &str) {
    let c = env.corr();
    let (s, ev) = env.accept(None, |_| Event::HAProxyPodTerminated {
        correlation: c,
        pod: pod_ref(pod),
    });
    env.deliver(p, s, &ev).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auxiliary_objects_carry_per_pod_status_one_write_per_object_per_round() {
    let (mut env, p, term) = Env::with_publisher().await;
    let full = full_render();
    let sum = env.render_and_pass(&p, &full).await;
    eventually(bound(), "published", || async {
        p.counters().config_published.load(Ordering::Relaxed) == 1
    })
    .await;
    let objects = aux_objects(&env).await;
    assert_eq!(objects.len(), 4, "1 map, 2 general files, 1 crt-list");

    env.applied(&p, "pod-a", sum, None).await;
    env.applied(&p, "pod-b", sum, None).await;
    // A failed deployment is the HAProxyCfg's business only: no aux entry.
    env.applied(&p, "pod-c", sum, Some("reload failed")).await;
    eventually(
        bound(),
        "every aux object lists pod-a and pod-b",
        || async {
            aux_objects(&env)
                .await
                .iter()
                .all(|(_, _, _, _, st)| pods_of(st.as_ref()) == ["pod-a", "pod-b"])
        },
    )
    .await;
    env.wait_pods_listed("the HAProxyCfg lists all three", 3)
        .await;
    for (kind, name, file, generation, st) in aux_objects(&env).await {
        let st = st.unwrap();
        for e in &st.deployed_to_pods {
            assert_eq!(
                e.checksum,
                Some(file),
                "{kind}/{name}: the file's own checksum"
            );
            assert!(e.deployed_at.is_some(), "{kind}/{name}");
            assert!(
                e.last_error.is_none() && e.last_reload_at.is_none() && e.sync_duration.is_none()
            );
            assert_eq!(e.namespace.as_deref(), Some(NS));
        }
        assert_eq!(st.observed_generation, generation, "{kind}/{name}");
        assert!(generation.is_some());
    }

    // Coalescing: no aux object got more status writes than there were status rounds.
    let rounds = p.counters().status_rounds.load(Ordering::Relaxed);
    let requests = env.server().requests();
    for (kind, name, ..) in aux_objects(&env).await {
        let writes = requests
            .iter()
            .filter(|r| {
                // Accepted writes only (a 409 is re-read and sent again within the round).
                r.method == "PUT"
                    && r.status == 200
                    && r.path.ends_with(&format!("/{kind}/{name}/status"))
            })
            .count() as u64;
        assert!(writes >= 1, "{kind}/{name} status never written");
        assert!(
            writes <= rounds,
            "{kind}/{name}: {writes} status writes in {rounds} rounds"
        );
    }

    // A terminated pod leaves every object.
    terminated(&mut env, &p, "pod-a").await;
    eventually(bound(), "pod-a removed from every aux object", || async {
        aux_objects(&env)
            .await
            .iter()
            .all(|(_, _, _, _, st)| pods_of(st.as_ref()) == ["pod-b"])
    })
    .await;
    eventually(bound(), "pod-a removed from the HAProxyCfg", || async {
        env.cfg(MAIN)
            .await
            .and_then(|c| c.status)
            .is_some_and(|s| !s.deployed_to_pods.iter().any(|e| e.pod_name == "pod-a"))
    })
    .await;
    env.finish(term).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observed_generation_is_the_generation_of_the_published_spec() {
    let (mut env, p, term, _) = Env::with_published(&corpus("02-maps"), "first published").await;
    eventually(bound(), "status describes generation 1", || async {
        let c = env.cfg(MAIN).await.unwrap();
        c.metadata.generation.is_some()
            && c.status.and_then(|s| s.observed_generation) == c.metadata.generation
    })
    .await;
    let g1 = env.cfg(MAIN).await.unwrap().metadata.generation.unwrap();

    let second = env.render_and_pass(&p, &corpus("03-maps-changed")).await;
    eventually(
        bound(),
        "second published and its status written",
        || async {
            let c = env.cfg(MAIN).await.unwrap();
            c.spec.checksum == second
                && c.status.and_then(|s| s.observed_generation) == c.metadata.generation
                && c.metadata.generation > Some(g1)
        },
    )
    .await;

    // The map changed with the render: a pod on the new render gets the new file checksum, and
    // the map's status describes its new generation.
    env.applied(&p, "pod-a", second, None).await;
    eventually(bound(), "map status on the new generation", || async {
        aux_objects(&env)
            .await
            .iter()
            .any(|(kind, _, file, generation, st)| {
                *kind == "haproxymapfiles"
                    && generation.is_some_and(|g| g > 1)
                    && st.as_ref().is_some_and(|s| {
                        s.observed_generation == *generation
                            && s.deployed_to_pods.iter().any(|e| e.checksum == Some(*file))
                    })
            })
    })
    .await;
    env.finish(term).await;
}

/// pod-a's entry in the main HAProxyCfg's status.
async fn entry_of(env: &Env, pod: &str) -> Option<haptic::k8s::crd::PodDeploymentStatus> {
    env.cfg(MAIN)
        .await
        .and_then(|c| c.status)
        .and_then(|s| s.deployed_to_pods.into_iter().find(|e| e.pod_name == pod))
}

fn status_writes(env: &Env) -> usize {
    env.server()
        .requests()
        .iter()
        .filter(|r| r.method == "PUT" && r.path.ends_with("/status") && r.status == 200)
        .count()
}

/// A pod's entry is written when, and only when, it differs from what the pod runs or the sync
/// changed or failed something: the deployer reports every endpoint it synced, no-op syncs
/// included; a no-op report of the checksum the entry already names, without error, writes
/// nothing and leaves `deployedAt` as it was (issue 27: a sync that reloaded is written).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_of_what_the_entry_already_says_writes_nothing() {
    let (mut env, p, term, sum) = Env::with_render(&corpus("02-maps")).await;
    env.applied(&p, "pod-a", sum, None).await;
    eventually(bound(), "pod-a written", || async {
        entry_of(&env, "pod-a").await.is_some() && env.queue_len(Queue::StatusPending) == 0
    })
    .await;
    let before = entry_of(&env, "pod-a").await.unwrap();
    let writes = status_writes(&env);
    let rounds = p.counters().status_rounds.load(Ordering::Relaxed);
    // The same checksum reported by a no-op sync, later: in the next second of the clock, since
    // status times (`deployedAt`, `lastReloadAt`) are written with a precision of seconds.
    let second = haptic_journal::UnixMillis::now().0 / 1000;
    while haptic_journal::UnixMillis::now().0 / 1000 == second {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    env.applied_idle(&p, "pod-a", sum).await;
    eventually(bound(), "the report handled", || async {
        env.queue_len(Queue::StatusPending) == 0
            && p.counters().status_rounds.load(Ordering::Relaxed) > rounds
    })
    .await;
    assert_eq!(status_writes(&env), writes, "a no-op report wrote a status");
    assert_eq!(
        entry_of(&env, "pod-a").await.unwrap(),
        before,
        "the entry changed (deployedAt moved)"
    );
    // A failure is a difference: written, deployedAt kept.
    env.applied(&p, "pod-a", sum, Some("reload failed")).await;
    eventually(bound(), "the failure written", || async {
        entry_of(&env, "pod-a")
            .await
            .is_some_and(|e| e.last_error.as_deref() == Some("reload failed"))
    })
    .await;
    assert_eq!(
        entry_of(&env, "pod-a").await.unwrap().deployed_at,
        before.deployed_at
    );
    // Issue 27: the same failure again is another failed sync in a row (its count and time
    // move, through the API server's round trip of `lastErrorAt`), and a sync of the same
    // checksum that reloaded (a drift repair) is written with its reload.
    let first = entry_of(&env, "pod-a").await.unwrap();
    assert_eq!(first.consecutive_errors, Some(1));
    env.applied(&p, "pod-a", sum, Some("reload failed")).await;
    eventually(bound(), "the second failure counted", || async {
        entry_of(&env, "pod-a")
            .await
            .is_some_and(|e| e.consecutive_errors == Some(2))
    })
    .await;
    let second = entry_of(&env, "pod-a").await.unwrap();
    assert!(
        second.last_error_at > first.last_error_at,
        "lastErrorAt moved: {:?} -> {:?}",
        first.last_error_at,
        second.last_error_at
    );
    env.applied(&p, "pod-a", sum, None).await;
    eventually(bound(), "the repair written", || async {
        entry_of(&env, "pod-a")
            .await
            .is_some_and(|e| e.consecutive_errors == Some(0) && e.last_error.is_none())
    })
    .await;
    term.stop().await;
    env.assert_no_422();
}
