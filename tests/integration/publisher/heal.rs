//! Self-healing tells the publisher's own writes from outside edits: a stream of renders
//! whose maps and certificates change between them (spec updates of the publication in
//! progress, status writes, garbage collection of unreferenced auxiliary objects and Secrets)
//! heals nothing, and the HAProxyCfg spec never moves backwards in render sequence.

use std::sync::Mutex;
use std::sync::atomic::Ordering;

use futures::StreamExt as _;
use haptic_journal::{Checksum, Term};
use kube::runtime::watcher;

use super::*;

/// The renders of the stream: maps, a changed map, a certificate, a CA, a large map, in turn;
/// each made unique by a comment so every render has its own checksum.
fn stream(n: usize) -> Vec<RenderDir> {
    let dirs = [
        "02-maps",
        "03-maps-changed",
        "05-tls",
        "07-ca",
        "10-large-map",
    ];
    (0..n)
        .map(|i| {
            let mut r = corpus(dirs[i % dirs.len()]);
            r.config
                .extend_from_slice(format!("# stream render {i}\n").as_bytes());
            r
        })
        .collect()
}

/// Records every `spec.checksum` the main HAProxyCfg takes, in order (watch events).
fn record_specs(env: &Env) -> (Arc<Mutex<Vec<Checksum>>>, tokio::task::JoinHandle<()>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = Arc::clone(&seen);
    let api = env.cfgs();
    let task = tokio::spawn(async move {
        let w = watcher(api, watcher::Config::default());
        futures::pin_mut!(w);
        while let Some(ev) = w.next().await {
            if let Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) = ev
                && o.metadata.name.as_deref() == Some(MAIN)
            {
                let mut v = s.lock().unwrap();
                if v.last() != Some(&o.spec.checksum) {
                    v.push(o.spec.checksum);
                }
            }
        }
    });
    (seen, task)
}

/// The positions in `order` of the spec checksums seen; panics on a spec that is not a render
/// of the stream.
fn positions(seen: &[Checksum], order: &[Checksum]) -> Vec<usize> {
    seen.iter()
        .map(|c| {
            order
                .iter()
                .position(|x| x == c)
                .unwrap_or_else(|| panic!("spec {c} is not a render of the stream"))
        })
        .collect()
}

/// Publishes a stream of 10 renders (every other one sent while the previous one is still
/// being written; two pods report each render, so status writes interleave) and returns the
/// heal count and the render positions the spec took, in order.
async fn run_stream(publish_interval: Duration) -> (u64, Vec<usize>) {
    let mut env = Env::start().await;
    let (seen, watch) = record_specs(&env);
    let mut cfg = fast_config();
    cfg.publish_interval = publish_interval;
    let p = env.publisher(cfg);
    let term = p.start(Term(1));
    let renders = stream(10);
    let mut order = Vec::new();
    for (i, r) in renders.iter().enumerate() {
        let sum = env.render_and_pass(&p, r).await;
        order.push(sum);
        env.applied(&p, "pod-a", sum, None).await;
        env.applied(&p, "pod-b", sum, None).await;
        if i % 2 == 1 {
            eventually(bound(), "render published", || async {
                env.journal
                    .published_checkpoints()
                    .unwrap()
                    .iter()
                    .any(|c| c.render == sum)
            })
            .await;
        }
    }
    let last = *order.last().unwrap();
    eventually(bound(), "stream published with status", || async {
        env.queue_len(Queue::Publish) == 0
            && env.cfg(MAIN).await.is_some_and(|c| {
                c.spec.checksum == last
                    && c.status.is_some_and(|s| {
                        s.deployed_to_pods.len() == 2
                            && s.deployed_to_pods.iter().all(|d| d.checksum == Some(last))
                    })
            })
    })
    .await;
    // Let the watches deliver the events of the last writes (GC deletes included): a heal
    // they wrongly trigger shows up within this settling time.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let heals = p.counters().heals.load(Ordering::Relaxed);
    let specs = positions(&seen.lock().unwrap(), &order);
    eprintln!(
        "interval {publish_interval:?}: heals after a stream of {} renders: {heals}; spec positions: {specs:?}",
        order.len()
    );
    term.stop().await;
    watch.abort();
    assert_eq!(env.cfg(MAIN).await.unwrap().spec.checksum, last);
    // One ConfigPublished per render published (the throttle coalesces some away).
    assert!((1..=order.len()).contains(&env.published_events()));
    env.assert_no_422();
    (heals, specs)
}

fn assert_no_false_heal(heals: u64, specs: &[usize]) {
    // The term start repeats the (absent) checkpoint once; nothing else heals.
    assert!(heals <= 1, "own writes healed {heals} times");
    assert!(
        specs.windows(2).all(|w| w[0] <= w[1]),
        "spec moved backwards: {specs:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn own_writes_of_a_render_stream_are_not_healed_and_the_spec_never_moves_back() {
    let (heals, specs) = run_stream(Duration::ZERO).await;
    assert_no_false_heal(heals, &specs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttled_render_stream_heals_nothing_and_the_spec_never_moves_back() {
    let (heals, specs) = run_stream(Duration::from_millis(250)).await;
    assert_no_false_heal(heals, &specs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_deleted_or_edited_is_restored_and_one_collected_by_gc_is_not() {
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::ListParams;

    let (mut env, p, term) = Env::with_publisher().await;
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), NS);
    let ours = || async {
        secrets
            .list(&ListParams::default().labels(&format!(
                "{}={MAIN}",
                haptic::k8s::crd::labels::RUNTIME_CONFIG
            )))
            .await
            .unwrap()
            .items
    };
    let tls = env.render_and_pass(&p, &corpus("05-tls")).await;
    eventually(bound(), "published with its Secret", || async {
        env.spec_is(tls).await && ours().await.len() == 1
    })
    .await;
    let name = ours().await[0].metadata.name.clone().unwrap();
    let want = ours().await[0].data.clone();
    let heals = || p.counters().heals.load(Ordering::Relaxed);
    let before = heals();

    // kubectl delete of the Secret: restored.
    let out = env.kubectl(&["delete", "secret", &name]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eventually(bound(), "secret restored", || async {
        secrets
            .get_opt(&name)
            .await
            .unwrap()
            .is_some_and(|s| s.data == want)
    })
    .await;
    // kubectl edit of its data: restored.
    let out = env.kubectl(&[
        "patch",
        "secret",
        &name,
        "--type=merge",
        "-p",
        r#"{"data":{"certificate":"ZXZpbA=="}}"#,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eventually(bound(), "secret data restored", || async {
        secrets.get(&name).await.unwrap().data == want
    })
    .await;
    assert!(
        heals() >= before + 2,
        "two outside edits, {} heals",
        heals() - before
    );
    assert_eq!(env.published_events(), 1);

    // A render without certificates: GC deletes the Secret, and it stays deleted.
    let healed = heals();
    let maps = env.render_and_pass(&p, &corpus("02-maps")).await;
    eventually(bound(), "published, Secret collected", || async {
        env.spec_is(maps).await && ours().await.is_empty()
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(ours().await.is_empty(), "a collected Secret came back");
    assert_eq!(heals(), healed, "GC was taken for an outside delete");
    assert_eq!(env.published_events(), 2);
    env.finish(term).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outside_edit_while_a_newer_render_is_queued_never_moves_the_spec_back() {
    let mut env = Env::start().await;
    let (seen, watch) = record_specs(&env);
    let mut cfg = fast_config();
    cfg.publish_interval = Duration::from_secs(2);
    let p = env.publisher(cfg);
    let term = p.start(Term(1));
    let renders = stream(2);
    let a = env.render_and_pass(&p, &renders[0]).await;
    env.wait_spec("first render published at once", a).await;
    // The next render waits for the throttle; meanwhile someone edits the spec.
    let b = env.render_and_pass(&p, &renders[1]).await;
    let out = env.kubectl(&[
        "patch",
        "haproxycfg",
        MAIN,
        "--type=merge",
        "-p",
        r#"{"spec":{"content":"global\n# evil\n"}}"#,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eventually(
        bound(),
        "newer render published and the edit healed",
        || async {
            env.cfg(MAIN)
                .await
                .is_some_and(|c| c.spec.checksum == b && !c.spec.content.contains("evil"))
                && p.counters().heals.load(Ordering::Relaxed) >= 2
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let specs = positions(&seen.lock().unwrap(), &[a, b]);
    term.stop().await;
    watch.abort();
    assert_eq!(specs, vec![0, 1], "spec moved backwards");
    let live = env.cfg(MAIN).await.unwrap();
    assert_eq!(live.spec.checksum, b);
    assert!(!live.spec.content.contains("evil"));
    assert_eq!(env.published_events(), 2);
    env.assert_no_422();
}

/// `kubectl delete` of the HAProxyCfg: the restored object gets its status back too (the
/// gate's conditions and the per-pod entries), not only its spec.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_haproxycfg_is_restored_with_its_conditions_and_pod_status() {
    let (mut env, p, _term, sum) = Env::with_render(&corpus("02-maps")).await;
    env.applied(&p, "pod-a", sum, None).await;
    env.applied(&p, "pod-b", sum, None).await;
    let full = |c: &crd::HAProxyCfg| {
        c.status.as_ref().is_some_and(|s| {
            s.deployed_to_pods.len() == 2
                && s.pods_synced.as_deref() == Some("2/2")
                && ["ConfigValidated", "ConfigPinned"]
                    .iter()
                    .all(|t| s.conditions.iter().any(|c| c.type_ == *t))
        })
    };
    eventually(
        bound(),
        "published with conditions and 2/2 pods",
        || async {
            env.cfg(MAIN)
                .await
                .is_some_and(|c| c.spec.checksum == sum && full(&c))
        },
    )
    .await;
    let uid = env.cfg(MAIN).await.unwrap().metadata.uid;
    let out = env.kubectl(&["delete", "haproxycfg", MAIN]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eventually(bound(), "restored with conditions and 2/2 pods", || async {
        env.cfg(MAIN)
            .await
            .is_some_and(|c| c.metadata.uid != uid && c.spec.checksum == sum && full(&c))
    })
    .await;
    let s = env.cfg(MAIN).await.unwrap().status.unwrap();
    let validated = s
        .conditions
        .iter()
        .find(|c| c.type_ == "ConfigValidated")
        .unwrap();
    assert_eq!(validated.status, "True");
    assert!(s.deployed_to_pods.iter().all(|e| e.checksum == Some(sum)));
}
