//! An API outage longer than any retry bound (DESIGN.md J3, J11; issue 11 part 4): the
//! emulator answers 503 to everything but the Lease (`path_not`), so the leader keeps its term
//! while every worker fails. Nothing journaled is dropped (the queues hold every item during
//! the outage), and once the API answers again everything converges with no new input.
//!
//! Time is compressed through the retry policy (the values `--publish-retry-initial` and
//! `--publish-retry-max` set): the outage lasts until every worker has failed more than
//! [`ATTEMPTS`] times, the bound after which the publisher used to ack unfinished work. The
//! soak version (`HAPTIC_SOAK=1`) runs the same with the default policy (200 ms doubling to
//! 30 s), which takes real minutes.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use haptic::components::publisher::{PublisherConfig, Worker};
use haptic::dispatch::input::Input;
use haptic::k8s::crd::conditions;
use haptic::k8s::lease::{LeaderElector, LeaseConfig};
use haptic_journal::Term;
use haptic_tools::sandbox::apiserver::Fault;
use tokio_util::sync::CancellationToken;

use super::*;

/// More failed attempts per worker than the 20 after which unfinished work used to be acked.
const ATTEMPTS: u64 = 21;

const WORKERS: [Worker; 4] = [
    Worker::Publish,
    Worker::Invalid,
    Worker::Verdict,
    Worker::Status,
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_outage_longer_than_any_retry_bound_drops_nothing_and_converges() {
    // The compressed policy: 50 ms doubling to 1.5 s.
    outage(fast_config()).await;
}

/// The same outage in real minutes, with the default retry policy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak_api_outage_with_the_default_retry_policy() {
    if std::env::var_os("HAPTIC_SOAK").is_none() {
        eprintln!("skipped: set HAPTIC_SOAK=1 to run the outage in real minutes");
        return;
    }
    let mut cfg = fast_config();
    cfg.retry = haptic::components::publisher::decide::RetryPolicy::default();
    outage(cfg).await;
}

/// Polls `cond` until it holds; `bound` is a hang guard derived from the configured
/// intervals, not an assertion on speed.
/// `cond` says what it saw when it does not hold; the last of it is in the panic.
async fn within<F, Fut>(what: &str, bound: Duration, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let end = Instant::now() + bound;
    let mut seen = String::new();
    while Instant::now() < end {
        match cond().await {
            Ok(()) => return,
            Err(s) => seen = s,
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("never happened within {bound:?}: {what}; last seen: {seen}");
}

async fn outage(mut cfg: PublisherConfig) {
    let mut env = Env::start().await;
    // A real Lease, renewed through the outage (the fault spares its path).
    let mut lease = LeaseConfig::new(NS, "haptic-leader", "replica-0");
    lease.duration = Duration::from_secs(3);
    lease.renew_deadline = Duration::from_secs(2);
    lease.retry_period = Duration::from_millis(300);
    lease.margin = Duration::from_secs(1);
    let floor = Arc::clone(&env.journal);
    let elector = LeaderElector::new(env.client.clone(), lease)
        .with_term_floor(move || floor.term().map_or(0, |t| t.0));
    let guard = elector.guard();
    let (tx, mut rx) = tokio::sync::mpsc::channel(8);
    let stop_lease = CancellationToken::new();
    let c = stop_lease.clone();
    let elector = tokio::spawn(async move { elector.run(tx, c).await });
    let term = match rx.recv().await {
        Some(Input::Event(Event::BecameLeader { term, .. })) => term,
        other => panic!("expected BecameLeader, got {other:?}"),
    };
    assert!(term > Term(1));
    env.journal
        .set_term(term, haptic_journal::Identity::new("replica-0"))
        .unwrap();
    cfg.lease = Arc::new(guard.clone());
    let policy = cfg.retry;
    // One attempt lasts at most a delay plus a request.
    let attempt_bound = policy.max_delay + cfg.request_timeout;
    let p = env.publisher(cfg);
    let t = p.start(term);

    // Before: 01-basic published, pods a and b on it, its verdict written.
    let first = env.render_and_pass(&p, &corpus("01-basic")).await;
    env.applied(&p, "pod-a", first, None).await;
    env.applied(&p, "pod-b", first, None).await;
    eventually(bound(), "01 published with both pods", || async {
        env.cfg(MAIN).await.is_some_and(|c| {
            c.spec.checksum == first && c.status.is_some_and(|s| s.deployed_to_pods.len() == 2)
        }) && env.queue_len(Queue::Verdict) == 0
            && env.queue_len(Queue::StatusPending) == 0
    })
    .await;

    // The outage: 503 for every request but the Lease's.
    env.server()
        .add_fault(Fault {
            path_not: Some("/leases/".into()),
            status: Some(503),
            ..Fault::default()
        })
        .unwrap();
    // Work for every worker: a render passes (publish, verdict), the next one fails (verdict,
    // -invalid), pod-b goes away and pod-a reports the new render (status).
    let second = env.render_and_pass(&p, &corpus("02-maps")).await;
    let third = env.render(&p, &corpus("03-maps-changed")).await;
    env.gate(&p, third, GateVerdict::Fail, vec!["rejected".into()])
        .await;
    let c = env.corr();
    let (s, ev) = env.accept(None, |_| Event::ValidationFailed {
        correlation: c,
        render: Some(third),
        errors: vec!["rejected".into()],
        duration_ms: 1,
        trigger_reason: "test".into(),
    });
    env.deliver(&p, s, &ev).await;
    let c = env.corr();
    let (s, ev) = env.accept(None, |_| Event::HAProxyPodTerminated {
        correlation: c,
        pod: pod_ref("pod-b"),
    });
    env.deliver(&p, s, &ev).await;
    env.applied(&p, "pod-a", second, None).await;

    let retries = |w: Worker| p.counters().worker_retries.of(w).load(Ordering::Relaxed);
    within(
        "every worker failed more than 20 times",
        attempt_bound * u32::try_from(ATTEMPTS + 5).unwrap(),
        || async {
            if WORKERS.iter().all(|w| retries(*w) >= ATTEMPTS) {
                Ok(())
            } else {
                Err(format!("{:?}", WORKERS.map(|w| (w, retries(w))).to_vec()))
            }
        },
    )
    .await;
    // Nothing journaled was dropped: every item is still queued, nothing was given up, and
    // the term still runs (the Lease was renewed throughout).
    assert_eq!(env.queue_len(Queue::Publish), 1, "the 02 publication");
    assert_eq!(env.queue_len(Queue::Verdict), 2, "02's and 03's verdicts");
    assert_eq!(env.queue_len(Queue::Invalid), 1, "03's -invalid");
    assert_eq!(
        env.queue_len(Queue::StatusPending) + env.queue_len(Queue::StatusParked),
        2,
        "pod-a's report and pod-b's removal"
    );
    assert_eq!(p.counters().given_up.load(Ordering::Relaxed), 0);
    assert!(!t.cancel.is_cancelled(), "the term stopped");
    assert!(guard.is_valid(), "the Lease lapsed during the outage");
    assert!(
        env.server()
            .requests()
            .iter()
            .filter(|r| !r.path.contains("/leases/"))
            .rev()
            .take(20)
            .all(|r| r.status == 503),
        "the API answered during the outage"
    );

    // The API is back; no new input.
    env.server().clear_faults();
    within("converged after the outage", attempt_bound * 10, || async {
        let main = env.cfg(MAIN).await.ok_or("no main HAProxyCfg")?;
        let st = main.status.as_ref().ok_or("no status")?;
        let cond = |t: &str| {
            st.conditions
                .iter()
                .find(|c| c.type_ == t)
                .map(|c| c.status.clone())
        };
        let invalid = env.cfg(INVALID).await.map(|i| i.spec.checksum);
        let queues: Vec<(Queue, usize)> = [
            Queue::Publish,
            Queue::PublishDeployed,
            Queue::Invalid,
            Queue::Verdict,
            Queue::StatusPending,
            Queue::StatusParked,
        ]
        .into_iter()
        .map(|q| (q, env.queue_len(q)))
        .collect();
        let converged = main.spec.checksum == second
            && st.deployed_to_pods.len() == 1
            && st.deployed_to_pods[0].pod_name == "pod-a"
            && st.deployed_to_pods[0].checksum == Some(second)
            && cond(conditions::CONFIG_VALIDATED).as_deref() == Some("False")
            && cond(conditions::CONFIG_PINNED).as_deref() == Some("True")
            && cond(conditions::PUBLISHED).as_deref() == Some("True")
            && invalid == Some(third)
            && queues.iter().all(|(_, n)| *n == 0);
        if converged {
            return Ok(());
        }
        let pods: Vec<_> = st
            .deployed_to_pods
            .iter()
            .map(|p| (p.pod_name.clone(), p.checksum))
            .collect();
        let conds: Vec<_> = st
            .conditions
            .iter()
            .map(|c| format!("{}={}/{}", c.type_, c.status, c.reason))
            .collect();
        Err(format!(
            "spec {} pods {pods:?} conditions {conds:?} -invalid {invalid:?} queues {queues:?}",
            main.spec.checksum
        ))
    })
    .await;
    assert_eq!(env.published_events(), 2, "01 and 02, once each");
    assert_eq!(p.counters().given_up.load(Ordering::Relaxed), 0);
    t.stop().await;
    stop_lease.cancel();
    let _ = elector.await;
    env.assert_no_422();
}
