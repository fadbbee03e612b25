//! Scripted faults: nothing lost, no duplicate ConfigPublished, retries bounded; permanent
//! rejections (too large) release the worker with a condition.

use std::sync::atomic::Ordering;

use haptic::k8s::crd::conditions;
use haptic_journal::{AuxKind, Queue, Term};
use haptic_tools::sandbox::apiserver::Fault;

use super::*;

fn fault(method: &str, path: &str, status: u16, times: u32) -> Fault {
    Fault::answer(method, path, status, times)
}

/// A publication ended by a permanent size rejection: counted given up,
/// `SizeLimitExceeded=True` with a message `says` accepts (`what` names the wait), the item
/// released; the one request the API server answered `status`, which was not retried.
async fn size_rejected(
    env: &Env,
    p: &ConfigPublisher,
    what: &str,
    status: u16,
    says: impl Fn(&str) -> bool,
) -> haptic_tools::sandbox::control::RequestRecord {
    eventually(bound(), what, || async {
        p.counters().given_up.load(Ordering::Relaxed) == 1
            && env.cfg(MAIN).await.and_then(|c| c.status).is_some_and(|s| {
                s.conditions.iter().any(|c| {
                    c.type_ == conditions::SIZE_LIMIT_EXCEEDED
                        && c.status == "True"
                        && says(&c.message)
                })
            })
    })
    .await;
    env.wait_queue_empty(Queue::Publish, "released").await;
    let mut rejected: Vec<_> = env
        .server()
        .requests()
        .into_iter()
        .filter(|r| r.status == status)
        .collect();
    assert_eq!(rejected.len(), 1, "{rejected:?}");
    assert_eq!(p.counters().retries.load(Ordering::Relaxed), 0);
    rejected.remove(0)
}

/// The rejected render is not announced (one `ConfigPublished`, the earlier render's) and the
/// spec is back on the last complete publication, `small`.
async fn back_on_last_complete(env: &Env, small: Checksum) {
    assert_eq!(env.published_events(), 1);
    env.wait_spec("spec back to the last complete publication", small)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_faults_are_retried_without_loss_or_duplicates() {
    let mut env = Env::start().await;
    // 409 on the first create of each kind, 429 with Retry-After, a 500 burst, a timeout.
    env.server()
        .add_fault(fault("POST", "haproxycfgs$", 409, 1))
        .unwrap();
    env.server()
        .add_fault(fault("POST", "haproxymapfiles$", 409, 1))
        .unwrap();
    env.server()
        .add_fault(fault("POST", "secrets$", 409, 1))
        .unwrap();
    env.server()
        .add_fault(Fault {
            retry_after_s: Some(1),
            ..fault("PUT", "status$", 429, 1)
        })
        .unwrap();
    env.server()
        .add_fault(fault("POST", "haproxygeneralfiles$", 500, 3))
        .unwrap();
    env.server()
        .add_fault(Fault {
            method: "GET".into(),
            path: "haproxycrtlistfiles/".into(),
            delay_ms: Some(3000),
            times: Some(1),
            ..Fault::default()
        })
        .unwrap();
    let p = env.publisher(fast_config());
    let term = p.start(Term(1));
    let sum = env.render_and_pass(&p, &full_render()).await;
    env.applied(&p, "pod-a", sum, None).await;
    eventually(bound(), "published and status written", || async {
        env.cfg(MAIN)
            .await
            .and_then(|c| c.status)
            .is_some_and(|s| s.auxiliary_files.is_some() && s.deployed_to_pods.len() == 1)
            && env.queue_len(Queue::Publish) == 0
    })
    .await;
    // The same render again (a drift re-render): idempotent, no second event.
    env.gate(&p, sum, haptic_journal::GateVerdict::Pass, vec![])
        .await;
    env.wait_queue_empty(Queue::Publish, "repeat handled").await;
    term.stop().await;
    assert_eq!(env.published_events(), 1);
    let c = p.counters();
    let retries = c.retries.load(Ordering::Relaxed);
    assert!(retries >= 3, "retries {retries}");
    // Bounded: the scripted faults answer at most 8 requests; every retry is one of them or a
    // timeout, with a small slack for re-reads.
    assert!(retries <= 12, "retries {retries}");
    assert_eq!(c.given_up.load(Ordering::Relaxed), 0);
    env.assert_no_422();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_objects_are_a_condition_not_a_loop() {
    let (mut env, p, term, _) = Env::with_published(&corpus("02-maps"), "published").await;

    // A 4 MiB map of incompressible text: over the API server's limit even compressed.
    let big = incompressible_from(0x9e37_79b9_7f4a_7c15, 4 << 20);
    let r = maps_with(AuxKind::Map, "maps/huge.map", big);
    env.render_and_pass(&p, &r).await;
    eventually(bound(), "released with a condition", || async {
        p.counters().given_up.load(Ordering::Relaxed) == 1
            && env.cfg(MAIN).await.and_then(|c| c.status).is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == conditions::SIZE_LIMIT_EXCEEDED && c.status == "True")
            })
    })
    .await;
    env.wait_queue_empty(Queue::Publish, "released").await;
    // Refused before upload (over the 3 MiB request limit) or by the server once: never a loop.
    let too_large = env
        .server()
        .requests()
        .iter()
        .filter(|r| r.status == 413 || r.status == 500)
        .count();
    assert!(too_large <= 1, "{too_large} rejected requests");
    // The rejected render is not announced.
    assert_eq!(env.published_events(), 1);
    env.finish(term).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_render_supersedes_a_failing_older_retry() {
    let (mut env, p, term, first) = Env::with_render(&shared("basic/one-backend.cfg")).await;
    eventually(bound(), "first", || async {
        env.queue_len(Queue::Publish) == 0 && env.published_events() == 1
    })
    .await;
    assert!(env.spec_is(first).await);
    // Every spec update fails (500) while two more renders arrive.
    env.server()
        .add_fault(Fault {
            method: "PUT".into(),
            path: format!("haproxycfgs/{MAIN}$"),
            status: Some(500),
            ..Fault::default()
        })
        .unwrap();
    let _second = env
        .render_and_pass(&p, &shared("backends/two-backends.cfg"))
        .await;
    wait_count("retrying", 2, || {
        p.counters()
            .retries
            .load(std::sync::atomic::Ordering::Relaxed)
    })
    .await;
    let third = env
        .render_and_pass(&p, &shared("backends/three-backends.cfg"))
        .await;
    env.server().clear_faults();
    eventually(bound(), "third", || async {
        env.queue_len(Queue::Publish) == 0 && env.published_events() == 2
    })
    .await;
    term.stop().await;
    assert_eq!(env.cfg(MAIN).await.unwrap().spec.checksum, third);
    // The second render never reached the spec: one successful spec update, for the third.
    let ok_puts = env
        .server()
        .requests()
        .into_iter()
        .filter(|r| {
            r.method == "PUT" && r.path.ends_with(&format!("haproxycfgs/{MAIN}")) && r.status == 200
        })
        .count();
    assert_eq!(ok_puts, 1);
    assert_eq!(p.counters().given_up.load(Ordering::Relaxed), 0);
    env.assert_no_422();
}

/// The render 02-maps with one more file: `content` at `path`, of `kind`.
fn maps_with(kind: AuxKind, path: &str, content: Vec<u8>) -> RenderDir {
    let mut r = corpus("02-maps");
    r.files.push((kind, path.into(), content));
    r
}

/// Incompressible text of `len` bytes (80-column lines).
fn incompressible(len: usize) -> Vec<u8> {
    incompressible_from(0x2545_f491_4f6c_dd1d, len)
}

/// Incompressible text of at least `len` bytes (80-column lines), xorshift from `seed`.
fn incompressible_from(mut seed: u64, len: usize) -> Vec<u8> {
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        out.push(alphabet[(seed % 64) as usize]);
        if out.len() % 80 == 79 {
            out.push(b'\n');
        }
    }
    out
}

/// `SizeLimitExceeded=True` says the newest render does not fit; once a later render is
/// published it fits, and the condition says so (`False`, reason `WithinSizeLimit`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn size_limit_exceeded_is_cleared_once_a_later_render_fits() {
    use haptic::k8s::crd::reasons;
    let (mut env, p, term, _) = Env::with_published(&corpus("02-maps"), "published").await;
    let r = maps_with(
        AuxKind::Map,
        "maps/huge.map",
        incompressible_from(0x9e37_79b9_7f4a_7c15, 4 << 20),
    );
    env.render_and_pass(&p, &r).await;
    eventually(bound(), "too large", || async {
        env.cfg(MAIN).await.and_then(|c| c.status).is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == conditions::SIZE_LIMIT_EXCEEDED && c.status == "True")
        })
    })
    .await;
    env.wait_queue_empty(Queue::Publish, "released").await;
    // A later render that fits.
    let fits = maps_with(AuxKind::Map, "maps/small.map", "a b\n".into());
    let sum = env.render_and_pass(&p, &fits).await;
    eventually(bound(), "published and within the size limit", || async {
        env.cfg(MAIN).await.is_some_and(|c| {
            c.spec.checksum == sum
                && c.status.is_some_and(|s| {
                    s.conditions.iter().any(|c| {
                        c.type_ == conditions::SIZE_LIMIT_EXCEEDED
                            && c.status == "False"
                            && c.reason == reasons::WITHIN_SIZE_LIMIT
                    })
                })
        })
    })
    .await;
    env.finish(term).await;
}

/// An object under the 3 MiB request limit but over the storage limit (the emulator's 1.5 MiB,
/// etcd's in a cluster) is sent once and answered with a 500 whose message says the request is
/// too large: a permanent rejection (condition, item released), never a retry loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_too_large_500_is_a_condition_not_a_loop() {
    let (mut env, p, term, small) = Env::with_published(&corpus("02-maps"), "published").await;
    env.server().clear_requests();

    let r = maps_with(AuxKind::Map, "maps/large.map", incompressible(2 << 20));
    env.render_and_pass(&p, &r).await;
    let rejected = size_rejected(
        &env,
        &p,
        "released with a condition naming the storage error",
        500,
        |m| m.contains("request is too large"),
    )
    .await;
    assert_eq!(rejected.method, "POST");
    assert!(
        rejected.path.contains("/haproxymapfiles"),
        "{}",
        rejected.path
    );
    assert!(
        !env.server().requests().iter().any(|r| r.status == 413),
        "sent, not refused before upload"
    );
    // The rejected render is not announced, and the HAProxyCfg spec, written before the map
    // failed, is restored to the last complete publication by self-healing.
    back_on_last_complete(&env, small).await;
    env.finish(term).await;
}

/// A CA file whose Secret carries over 1 MiB of data (under the request and storage limits):
/// the API server answers 422 `data: Too long: must have at most 1048576 bytes`, as
/// kube-apiserver's `ValidateSecret` does. That is a size rejection, not a schema one: sent
/// once, `SizeLimitExceeded=True` naming the Secret, the render's file and the fix, the item
/// released, never a loop; the spec back on the last complete publication.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_over_1mib_is_a_422_too_long_and_a_size_condition() {
    let (mut env, p, term, small) = Env::with_published(&corpus("02-maps"), "published").await;
    env.server().clear_requests();
    let r = maps_with(AuxKind::Ca, "ca/bundle.pem", incompressible(1_100_000));
    env.render_and_pass(&p, &r).await;
    let rejected = size_rejected(
        &env,
        &p,
        "released with a size condition naming the file",
        422,
        |m| {
            m.contains("Too long: must have at most 1048576 bytes")
                && m.contains("ca/bundle.pem")
                && m.contains("split it")
        },
    )
    .await;
    assert!(rejected.path.ends_with("/secrets"), "{}", rejected.path);
    back_on_last_complete(&env, small).await;
    // The one 422 is this test's point: `finish` would refuse it.
    term.stop().await;
}
