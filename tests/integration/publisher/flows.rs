//! Seed rows: publish with every auxiliary kind, conditions, `-invalid`, per-pod status and
//! parking, pod termination, GC, restart, self-healing, stale leader, drain.

use std::sync::atomic::Ordering;

use haptic::core::render::{JournaledRender, RenderContent};
use haptic::k8s::WriteError;
use haptic::k8s::crd::{
    HAProxyCRTListFile, HAProxyGeneralFile, HAProxyMapFile, conditions, labels, secrets,
};
use haptic::k8s::writer::PublishSpec;
use haptic_journal::{DeploymentId, Event, GateVerdict, Queue, Seq, Term};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{DeleteParams, ListParams};

use haptic_testkit::condition;

use super::*;

/// The main HAProxyCfg's spec for `render` with its files, nothing else set.
fn main_spec(render: &JournaledRender) -> PublishSpec<'_> {
    PublishSpec {
        name: MAIN,
        render,
        with_files: true,
        rendered_at: None,
        validated_at: None,
        validation_error: None,
        conditions: &[],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishes_every_kind_then_status_conditions_and_gc() {
    let (mut env, p, term) = Env::with_publisher().await;

    // Parking: a pod reports the render before the HAProxyCfg exists.
    let full = full_render();
    let checksum = env.render(&p, &full).await;
    env.applied(&p, "pod-a", checksum, None).await;
    eventually(bound(), "status parked", || async {
        env.queue_len(Queue::StatusParked) == 1
    })
    .await;
    env.gate(&p, checksum, GateVerdict::Pass, vec![]).await;
    eventually(bound(), "published", || async {
        p.counters().config_published.load(Ordering::Relaxed) == 1
    })
    .await;
    let cfg = env.cfg(MAIN).await.unwrap();
    assert_eq!(cfg.spec.checksum, checksum);
    assert_eq!(
        cfg.metadata.labels.as_ref().unwrap()[labels::CONFIG],
        CONFIG
    );
    assert_eq!(
        cfg.metadata.annotations.as_ref().unwrap()[labels::LEADER_TERM],
        "1"
    );
    let refs = cfg
        .status
        .as_ref()
        .unwrap()
        .auxiliary_files
        .clone()
        .unwrap();
    assert_eq!(refs.map_files.len(), 1);
    assert_eq!(refs.general_files.len(), 2);
    assert_eq!(refs.crt_list_files.len(), 1);
    assert!(!refs.ssl_certificates.is_empty() && !refs.ca_files.is_empty());
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), NS);
    let sel = ListParams::default().labels(&format!("{}={MAIN}", labels::RUNTIME_CONFIG));
    let s = secrets.list(&sel).await.unwrap();
    assert_eq!(
        s.items.len(),
        refs.ssl_certificates.len() + refs.ca_files.len()
    );
    for o in &s.items {
        let owner = &o.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("HAProxyCfg", MAIN)
        );
        assert_eq!(o.type_.as_deref(), Some("Opaque"));
    }
    // `metadata.totalSize` is what its description says: `spec.content` plus every auxiliary
    // file as stored (issue 15).
    let mut aux = 0;
    let maps: Api<HAProxyMapFile> = Api::namespaced(env.client.clone(), NS);
    for o in maps.list(&sel).await.unwrap() {
        aux += o.spec.entries.len();
    }
    let general: Api<HAProxyGeneralFile> = Api::namespaced(env.client.clone(), NS);
    for o in general.list(&sel).await.unwrap() {
        aux += o.spec.content.len();
    }
    let lists: Api<HAProxyCRTListFile> = Api::namespaced(env.client.clone(), NS);
    for o in lists.list(&sel).await.unwrap() {
        aux += o.spec.entries.len();
    }
    for o in &s.items {
        aux += o.data.as_ref().unwrap()[secrets::CERTIFICATE_KEY].0.len();
    }
    let meta = cfg.status.as_ref().unwrap().metadata.clone().unwrap();
    assert_eq!(meta.total_size, Some((cfg.spec.content.len() + aux) as i64));

    // The parked status came back and was written; the verdict shows as conditions.
    eventually(bound(), "pod status", || async {
        env.cfg(MAIN).await.and_then(|c| c.status).is_some_and(|s| {
            s.deployed_to_pods
                .iter()
                .any(|p| p.pod_name == "pod-a" && p.checksum == Some(checksum))
                && s.pods_synced.as_deref() == Some("1/1")
        })
    })
    .await;
    eventually(bound(), "conditions", || async {
        let c = env.cfg(MAIN).await.unwrap();
        condition(&c, conditions::CONFIG_VALIDATED) == Some("True")
            && condition(&c, conditions::CONFIG_PINNED) == Some("False")
    })
    .await;

    // A failed deployment on a new pod: listed with its error, no deployedAt.
    env.applied(&p, "pod-b", checksum, Some("reload failed"))
        .await;
    env.wait_pod_entry("pod-b error", |p| {
        p.pod_name == "pod-b"
            && p.deployed_at.is_none()
            && p.last_error.as_deref() == Some("reload failed")
    })
    .await;
    // Pod terminated: its entry goes.
    let c = env.corr();
    let (s, ev) = env.accept(None, |_| Event::HAProxyPodTerminated {
        correlation: c,
        pod: pod_ref("pod-b"),
    });
    env.deliver(&p, s, &ev).await;
    env.wait_pods_listed("pod-b removed", 1).await;

    // A rejected render: `-invalid` with the summary; the main object keeps the spec, pinned.
    let bad = corpus("08-invalid");
    let c = env.corr();
    let (s, ev) = env.accept(Some(&bad), |r| Event::ValidationFailed {
        correlation: c,
        render: r,
        errors: vec![
            "parsing [haproxy.cfg:3]: unknown keyword".into(),
            "second".into(),
            "third".into(),
        ],
        duration_ms: 1,
        trigger_reason: "test".into(),
    });
    env.deliver(&p, s, &ev).await;
    let Event::ValidationFailed {
        render: Some(bad_sum),
        ..
    } = ev
    else {
        unreachable!()
    };
    env.gate(
        &p,
        bad_sum,
        GateVerdict::Fail,
        vec!["unknown keyword".into()],
    )
    .await;
    eventually(bound(), "-invalid", || async {
        env.cfg(INVALID)
            .await
            .and_then(|c| c.status)
            .is_some_and(|s| {
                s.validation_error.as_deref()
                    == Some("parsing [haproxy.cfg:3]: unknown keyword (+2 more errors)")
            })
    })
    .await;
    eventually(bound(), "pinned", || async {
        let c = env.cfg(MAIN).await.unwrap();
        condition(&c, conditions::CONFIG_PINNED) == Some("True")
            && condition(&c, conditions::CONFIG_VALIDATED) == Some("False")
            && c.spec.checksum == checksum
    })
    .await;
    // A failed deployment of another checksum is written with its error, not parked.
    env.applied(&p, "pod-c", bad_sum, Some("rejected by haproxy"))
        .await;
    env.wait_pod_entry("pod-c error", |p| {
        p.pod_name == "pod-c" && p.checksum == Some(bad_sum) && p.last_error.is_some()
    })
    .await;

    // A later passing render (fewer files): `-invalid` deleted, unreferenced objects collected.
    let basic = corpus("02-maps");
    let next = env.render_and_pass(&p, &basic).await;
    eventually(bound(), "second publication", || async {
        env.spec_is(next).await && env.cfg(INVALID).await.is_none()
    })
    .await;
    eventually(bound(), "gc", || async {
        secrets.list(&sel).await.unwrap().items.is_empty()
    })
    .await;
    let maps: Api<HAProxyMapFile> = Api::namespaced(env.client.clone(), NS);
    assert_eq!(maps.list(&sel).await.unwrap().items.len(), 1);
    eventually(bound(), "unpinned", || async {
        condition(&env.cfg(MAIN).await.unwrap(), conditions::CONFIG_PINNED) == Some("False")
    })
    .await;
    eventually(bound(), "second event", || async {
        env.published_events() == 2
    })
    .await;
    env.assert_no_422();
    term.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_takes_every_queued_item_once() {
    let mut env = Env::start().await;
    let r = corpus("04-errors");
    {
        // A term with no HAProxyCfg yet parks a status; then, with no term running, events are
        // journaled as work and nothing acts.
        let p = env.publisher(fast_config());
        let sum = env.render(&p, &r).await;
        let term = p.start(Term(1));
        env.applied(&p, "pod-c", sum, None).await;
        eventually(bound(), "parked", || async {
            env.queue_len(Queue::StatusParked) == 1
        })
        .await;
        term.stop().await;
        env.gate(&p, sum, GateVerdict::Pass, vec![]).await;
        env.applied(&p, "pod-a", sum, None).await;
        env.applied(&p, "pod-b", sum, None).await;
        let c = env.corr();
        let (s, ev) = env.accept(None, |_| Event::DeployedConfigPublishRequest {
            correlation: c,
            deployment: DeploymentId::new("d1"),
            render: sum,
            runtime_config: runtime_config(),
        });
        env.deliver(&p, s, &ev).await;
        assert_eq!(env.queue_len(Queue::Publish), 1);
        assert_eq!(env.queue_len(Queue::PublishDeployed), 1);
        assert_eq!(env.queue_len(Queue::StatusPending), 2);
        assert_eq!(env.queue_len(Queue::StatusParked), 1);
        env.journal.trim().unwrap();
    }
    env.reopen_journal();
    let p = env.publisher(fast_config());
    let term = p.start(Term(1));
    eventually(bound(), "all done", || async {
        env.queue_len(Queue::Publish) == 0
            && env.queue_len(Queue::PublishDeployed) == 0
            && env.queue_len(Queue::StatusPending) == 0
            && env.queue_len(Queue::StatusParked) == 0
            && env.queue_len(Queue::Verdict) == 0
    })
    .await;
    eventually(bound(), "three pods", || async {
        env.cfg(MAIN)
            .await
            .unwrap()
            .status
            .unwrap()
            .deployed_to_pods
            .len()
            == 3
    })
    .await;
    assert_eq!(env.published_events(), 1);
    term.stop().await;

    // Start again on the same journal: the repeat writes nothing and emits nothing.
    env.server().clear_requests();
    let term = p.start(Term(1));
    wait_count("repeat done", 3, || {
        p.counters().publications.load(Ordering::Relaxed)
    })
    .await;
    term.stop().await;
    let writes: Vec<_> = env
        .server()
        .requests()
        .into_iter()
        .filter(|r| r.method != "GET")
        .collect();
    assert!(writes.is_empty(), "repeat wrote: {writes:?}");
    assert_eq!(env.published_events(), 1);
    env.assert_no_422();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_heals_deleted_and_edited_objects_without_a_second_event() {
    let (env, _p, term, sum) = Env::with_published(&corpus("02-maps"), "published").await;
    eventually(bound(), "status refs", || async {
        env.cfg(MAIN)
            .await
            .and_then(|c| c.status)
            .is_some_and(|s| s.metadata.is_some())
    })
    .await;

    // kubectl delete: the HAProxyCfg (and, by owner GC, its map) come back.
    let out = env.kubectl(&["delete", "haproxycfg", MAIN]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    env.wait_spec("restored", sum).await;
    let maps: Api<HAProxyMapFile> = Api::namespaced(env.client.clone(), NS);
    eventually(bound(), "map restored", || async {
        maps.list(&ListParams::default()).await.unwrap().items.len() == 1
    })
    .await;

    // kubectl edit (a merge patch) of the map's entries: restored.
    let name = maps.list(&ListParams::default()).await.unwrap().items[0]
        .metadata
        .name
        .clone()
        .unwrap();
    let want = maps.get(&name).await.unwrap().spec.entries;
    let out = env.kubectl(&[
        "patch",
        "haproxymapfile",
        &name,
        "--type=merge",
        "-p",
        r#"{"spec":{"entries":"evil.example.com evil\n"}}"#,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eventually(bound(), "map entries restored", || async {
        maps.get(&name).await.unwrap().spec.entries == want
    })
    .await;
    assert_eq!(env.published_events(), 1);
    env.assert_no_422();
    term.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_leader_cannot_overwrite_a_newer_term() {
    let mut env = Env::start().await;
    env.journal
        .set_term(Term(5), haptic_journal::Identity::new("replica-1"))
        .unwrap();
    let p = env.publisher(fast_config());
    let term = p.start(Term(5));
    let sum = env
        .render_and_pass(&p, &shared("basic/two-servers.cfg"))
        .await;
    env.wait_spec("published", sum).await;
    term.stop().await;

    let old = writer(&env, Term(4));
    let other = JournaledRender::of(&RenderContent::new(b"global\n".to_vec(), vec![]));
    let err = old.publish(&main_spec(&other)).await.unwrap_err();
    assert!(
        matches!(
            err,
            WriteError::StaleTerm {
                ours: Term(4),
                theirs: Term(5),
                ..
            }
        ),
        "{err:?}"
    );
    assert!(old.delete_cfg(MAIN).await.is_err());
    assert_eq!(env.cfg(MAIN).await.unwrap().spec.checksum, sum);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_publishes_newest_deploy_driven_render_past_the_throttle() {
    let (mut env, p, term) = Env::with_throttle(std::time::Duration::from_secs(3600)).await;
    let first = env
        .pass_and_wait(&p, &shared("basic/one-backend.cfg"), "first")
        .await;
    // Two deploy-driven renders inside the throttle window: they wait.
    let mut last = first;
    for (i, f) in ["backends/two-backends.cfg", "backends/three-backends.cfg"]
        .iter()
        .enumerate()
    {
        let render = env.render(&p, &shared(f)).await;
        last = render;
        let c = env.corr();
        let (s, ev) = env.accept(None, |_| Event::DeployedConfigPublishRequest {
            correlation: c,
            deployment: DeploymentId::new(format!("d{i}")),
            render,
            runtime_config: runtime_config(),
        });
        env.deliver(&p, s, &ev).await;
    }
    assert_eq!(env.queue_len(Queue::PublishDeployed), 2);
    assert_eq!(p.drain().await.unwrap(), Some(last));
    assert_eq!(env.cfg(MAIN).await.unwrap().spec.checksum, last);
    assert_eq!(env.queue_len(Queue::PublishDeployed), 0);
    let cp = env.journal.queue(Queue::DrainCheckpoint).unwrap();
    assert_eq!(cp.len(), 1);
    term.stop().await;
    // A drain whose term ended changes nothing.
    assert_eq!(p.drain().await.unwrap(), None);
    let _ = Seq(0);
    env.assert_no_422();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleanup_objects_after_delete_of_owner() {
    // Owner GC: deleting the HAProxyCfg collects the auxiliary objects (owner references).
    let mut cfg = fast_config();
    cfg.self_heal = false;
    let (mut env, p, term) = Env::with_publisher_config(cfg).await;
    let sum = env.render_and_pass(&p, &corpus("06-crtlist")).await;
    env.wait_spec("published", sum).await;
    term.stop().await;
    env.cfgs()
        .delete(MAIN, &DeleteParams::default())
        .await
        .unwrap();
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), NS);
    let sel = ListParams::default().labels(&format!("{}={MAIN}", labels::RUNTIME_CONFIG));
    assert!(secrets.list(&sel).await.unwrap().items.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttle_publishes_the_first_at_once_and_coalesces_the_rest_to_the_newest() {
    let (mut env, p, term) = Env::with_throttle(std::time::Duration::from_millis(1500)).await;
    env.pass_and_wait(&p, &shared("basic/one-backend.cfg"), "first")
        .await;
    // Inside the window: two more renders; only the newest is published when it ends.
    let _second = env
        .render_and_pass(&p, &shared("backends/two-backends.cfg"))
        .await;
    let third = env
        .render_and_pass(&p, &shared("backends/three-backends.cfg"))
        .await;
    env.wait_spec("third", third).await;
    env.wait_queue_empty(Queue::Publish, "queue empty").await;
    term.stop().await;
    // Two spec writes (create + one update) and two events: the second render never went out.
    let puts = env
        .server()
        .requests()
        .into_iter()
        .filter(|r| r.method == "PUT" && r.path.ends_with(&format!("haproxycfgs/{MAIN}")))
        .count();
    assert_eq!(puts, 1);
    assert_eq!(env.published_events(), 2);
    env.assert_no_422();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn term_start_does_not_overwrite_another_leaders_render() {
    let (env, p, term, _) =
        Env::with_published(&shared("basic/one-backend.cfg"), "published").await;
    eventually(bound(), "acked", || async {
        env.queue_len(Queue::Publish) == 0 && env.published_events() == 1
    })
    .await;
    term.stop().await;
    // Another replica leads (term 2) and publishes its render.
    let theirs_writer = writer(&env, Term(2));
    let theirs = JournaledRender::of(&RenderContent::new(b"global\n# theirs\n".to_vec(), vec![]));
    theirs_writer.publish(&main_spec(&theirs)).await.unwrap();
    // We lead again (term 3): the term-start repeat of our checkpoint leaves their render.
    env.journal
        .set_term(Term(3), haptic_journal::Identity::new("replica-0"))
        .unwrap();
    let term = p.start(Term(3));
    wait_count("repeat ran", 2, || {
        p.counters().heals.load(Ordering::Relaxed)
    })
    .await;
    term.stop().await;
    assert_eq!(env.cfg(MAIN).await.unwrap().spec.checksum, theirs.checksum);
    assert_eq!(env.published_events(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_after_restart_clears_pods_that_went_away() {
    let mut env = Env::start().await;
    let sum;
    {
        let p = env.publisher(fast_config());
        let term = p.start(Term(1));
        sum = env.render_and_pass(&p, &corpus("01-basic")).await;
        env.applied(&p, "pod-a", sum, None).await;
        env.applied(&p, "pod-b", sum, None).await;
        env.wait_pods_listed("two pods", 2).await;
        term.stop().await;
    }
    // A new publisher (fresh memory): the known pods are restored from its checkpoint at once
    // (no seeding read to wait for: a discovery delivered right away must see them).
    let p = env.publisher(fast_config());
    let term = p.start(Term(1));
    assert_eq!(p.known_pod_count(), 2, "known pods not restored");
    let c = env.corr();
    let (s, ev) = env.accept(None, |_| Event::HAProxyPodsDiscovered {
        correlation: c,
        endpoints: vec![haptic_journal::Endpoint {
            url: "http://10.0.0.1:5555".into(),
            pod: pod_ref("pod-a"),
            detected_version: None,
        }],
        authoritative: true,
    });
    env.deliver(&p, s, &ev).await;
    eventually(bound(), "pod-b cleared", || async {
        env.cfg(MAIN).await.and_then(|c| c.status).is_some_and(|s| {
            s.deployed_to_pods.len() == 1 && s.deployed_to_pods[0].pod_name == "pod-a"
        })
    })
    .await;
    term.stop().await;
    let _ = sum;
    env.assert_no_422();
}
