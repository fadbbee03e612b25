//! Lease fencing of the publisher's Kubernetes writes (DESIGN.md J7, issue 5): once the guard
//! refuses, no write verb reaches the API server, the queued work stays in the journal, and the
//! next term with a valid guard publishes it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use haptic::core::guard::LeaseGuard;
use haptic_journal::{Identity, Queue, Term};

use haptic::components::publisher::ConfigPublisher;

use haptic::k8s::crd::HAProxyCfgStatus;

use super::*;

/// A guard the test revokes and restores.
#[derive(Debug)]
struct Switch(AtomicBool);

impl LeaseGuard for Switch {
    fn is_valid(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

fn write_verbs(env: &Env) -> Vec<String> {
    env.server()
        .requests()
        .into_iter()
        .filter(|r| matches!(r.method.as_str(), "POST" | "PUT" | "PATCH" | "DELETE"))
        .map(|r| format!("{} {} -> {}", r.method, r.path, r.status))
        .collect()
}

/// Waits until `term` stopped itself (fenced), then checks that `q` still holds its one item
/// (`why` otherwise) and that nothing was given up.
async fn stopped_keeping(env: &Env, p: &ConfigPublisher, term: TermHandle, q: Queue, why: &str) {
    eventually(bound(), "the term stops", || async {
        term.cancel.is_cancelled()
    })
    .await;
    term.stop().await;
    assert_eq!(env.queue_len(q), 1, "{why}");
    assert_eq!(p.counters().given_up.load(Ordering::Relaxed), 0);
}

/// A publisher of `env` whose Lease guard holds while its flag is set (`valid` at first).
fn guarded(env: &Env, valid: bool) -> (Arc<Switch>, ConfigPublisher) {
    let guard = Arc::new(Switch(AtomicBool::new(valid)));
    let mut cfg = fast_config();
    cfg.lease = guard.clone();
    (guard, env.publisher(cfg))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoked_lease_stops_every_write_and_the_next_term_publishes_the_queued_item() {
    let mut env = Env::start().await;
    let (guard, p) = guarded(&env, true);
    let term = p.start(Term(1));
    let first = env
        .render_and_pass(&p, &shared("basic/two-servers.cfg"))
        .await;
    env.wait_spec("first render published", first).await;
    env.wait_queue_empty(Queue::Publish, "first render acked")
        .await;
    // The gate's verdict is its own work (conditions written to the status): a write whose
    // guard check passed before the revocation may land after it, so the first render's
    // writes all end before the guard flips (acked only once written).
    env.wait_queue_empty(Queue::Verdict, "first verdict written")
        .await;

    // Deposed mid-stream: the next render (with auxiliary objects and Secrets) must not go out.
    guard.0.store(false, Ordering::SeqCst);
    env.server().clear_requests();
    let second = env.render_and_pass(&p, &full_render()).await;
    // The worker reads the HAProxyCfg, then the guard refuses the replace.
    eventually(bound(), "publication attempted", || async {
        env.server()
            .requests()
            .iter()
            .any(|r| r.method == "GET" && r.path.ends_with(&format!("haproxycfgs/{MAIN}")))
    })
    .await;
    // Longer than several retry delays of fast_config (50 ms initial): no retry loop either.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let writes = write_verbs(&env);
    assert!(writes.is_empty(), "writes after revocation: {writes:?}");
    assert_eq!(p.counters().retries.load(Ordering::Relaxed), 0);
    assert_eq!(p.counters().given_up.load(Ordering::Relaxed), 0);
    assert_eq!(env.queue_len(Queue::Publish), 1, "item must stay queued");
    assert_eq!(env.cfg(MAIN).await.unwrap().spec.checksum, first);
    assert_eq!(env.published_events(), 1);
    term.stop().await;
    assert!(write_verbs(&env).is_empty());

    // A new term with a valid guard publishes the queued item.
    env.journal
        .set_term(Term(2), Identity::new("replica-0"))
        .unwrap();
    guard.0.store(true, Ordering::SeqCst);
    let term = p.start(Term(2));
    env.wait_spec("queued render published by the next term", second)
        .await;
    env.wait_queue_empty(Queue::Publish, "queued item acked")
        .await;
    term.stop().await;
    assert!(!write_verbs(&env).is_empty());
    assert_eq!(env.published_events(), 2);
    env.assert_no_422();
}

/// Stamps `name` with leadership term `term`, as a successor's write would.
async fn stamp(env: &Env, name: &str, term: u64) {
    let patch = serde_json::json!({
        "metadata": {"annotations": {haptic::k8s::crd::labels::LEADER_TERM: term.to_string()}}
    });
    env.cfgs()
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .unwrap();
}

async fn validation_failed(env: &mut Env, p: &ConfigPublisher, r: &RenderDir, error: &str) {
    let c = env.corr();
    let (s, ev) = env.accept(Some(r), |render| haptic_journal::Event::ValidationFailed {
        correlation: c,
        render,
        errors: vec![error.into()],
        duration_ms: 1,
        trigger_reason: "test".into(),
    });
    env.deliver(p, s, &ev).await;
}

/// J7 inside the retry helper: a newer term's stamp on the `-invalid` object is not a permanent
/// rejection that releases the item; it stops the term's workers and leaves the item queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn newer_term_stamp_stops_the_invalid_worker_and_keeps_the_item_queued() {
    let (mut env, p, term) = Env::with_publisher().await;
    validation_failed(&mut env, &p, &corpus("08-invalid"), "first").await;
    eventually(bound(), "-invalid published", || async {
        env.cfg(INVALID).await.is_some() && env.queue_len(Queue::Invalid) == 0
    })
    .await;
    // A successor (term 5) took the object over.
    stamp(&env, INVALID, 5).await;
    let mut second = shared("basic/two-servers.cfg");
    second.config.extend_from_slice(b"\n# rejected\n");
    validation_failed(&mut env, &p, &second, "second").await;
    stopped_keeping(&env, &p, term, Queue::Invalid, "item must stay queued").await;
    let st = env.cfg(INVALID).await.unwrap().status.unwrap();
    assert_eq!(st.validation_error.as_deref(), Some("first"));

    // The next term (newer than the stamp) takes the queued item.
    let term = env.next_term(&p, 6);
    let published = |s: &HAProxyCfgStatus| s.validation_error.as_deref() == Some("second");
    written_by_next_term(&env, Queue::Invalid, INVALID, published).await;
    env.finish(term).await;
}

/// Waits until the next term took the item of `q` and wrote the status of `name` that `written`
/// accepts.
async fn written_by_next_term(
    env: &Env,
    q: Queue,
    name: &str,
    written: impl Fn(&HAProxyCfgStatus) -> bool,
) {
    let what = format!("the next term to write {name} from {q:?}");
    eventually(bound(), &what, || async {
        let status = env.cfg(name).await.and_then(|c| c.status);
        let n = env.queue_len(q);
        (n == 0 && status.as_ref().is_some_and(&written))
            .then_some(())
            .ok_or(format!("{n} queued; {name} status {status:?}"))
    })
    .await;
}

/// The same for the status worker: a newer term's stamp on the HAProxyCfg stops the term; the
/// pending status is neither written nor dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn newer_term_stamp_stops_the_status_worker_and_keeps_the_status_pending() {
    let (mut env, p, term, sum) = Env::with_render(&shared("basic/two-servers.cfg")).await;
    env.applied(&p, "pod-a", sum, None).await;
    env.wait_pods_listed("pod-a listed", 1).await;
    stamp(&env, MAIN, 5).await;
    // A failed deployment is written even for another checksum, so it reaches the write.
    env.applied(&p, "pod-b", sum, Some("reload failed")).await;
    stopped_keeping(
        &env,
        &p,
        term,
        Queue::StatusPending,
        "status must stay pending",
    )
    .await;
    let st = env.cfg(MAIN).await.unwrap().status.unwrap();
    assert_eq!(
        st.deployed_to_pods.len(),
        1,
        "nothing written over the newer term"
    );

    let term = env.next_term(&p, 6);
    let both = |s: &HAProxyCfgStatus| s.deployed_to_pods.len() == 2;
    written_by_next_term(&env, Queue::StatusPending, MAIN, both).await;
    env.finish(term).await;
}

/// A lost Lease inside the retry helper (verdict and invalid workers) stops the term at once and
/// leaves the item queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoked_lease_stops_the_invalid_worker_and_keeps_the_item_queued() {
    let mut env = Env::start().await;
    let (_guard, p) = guarded(&env, false);
    env.server().clear_requests();
    let term = p.start(Term(1));
    validation_failed(&mut env, &p, &corpus("08-invalid"), "rejected").await;
    stopped_keeping(&env, &p, term, Queue::Invalid, "item must stay queued").await;
    assert!(write_verbs(&env).is_empty());
    assert!(env.cfg(INVALID).await.is_none());
}
