//! `haptic::k8s::lease` against the Kubernetes API emulator: one of two candidates leads, the
//! other takes over after a release and after expiry, the term grows on every acquisition, and a
//! paused leader's guard turns invalid.

use std::time::{Duration, Instant};

use haptic::dispatch::input::Input;
use haptic::k8s::lease::{LeaderElector, LeaseConfig, LeaseGuard, default_identity};
use haptic_journal::{Event, Term};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{NS, api_server};

struct Candidate {
    rx: mpsc::Receiver<Input>,
    guard: LeaseGuard,
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

/// The Lease `haptic-leader` for `identity` with the short intervals the candidates here run
/// with (2 s duration, 1.2 s renew deadline, 200 ms retry period, 600 ms margin).
fn short_lease(identity: &str) -> LeaseConfig {
    let mut config = LeaseConfig::new(NS, "haptic-leader", identity);
    config.duration = Duration::from_secs(2);
    config.renew_deadline = Duration::from_millis(1200);
    config.retry_period = Duration::from_millis(200);
    config.margin = Duration::from_millis(600);
    config
}

fn candidate(client: kube::Client, identity: &str) -> Candidate {
    spawn(LeaderElector::new(client, short_lease(identity)))
}

/// Runs `elector` until its candidate's `cancel` fires.
fn spawn(elector: LeaderElector) -> Candidate {
    let guard = elector.guard();
    let (tx, rx) = mpsc::channel(8);
    let cancel = CancellationToken::new();
    let c = cancel.clone();
    let task = tokio::spawn(async move { elector.run(tx, c).await.unwrap() });
    Candidate {
        rx,
        guard,
        cancel,
        task,
    }
}

async fn next(c: &mut Candidate, within: Duration) -> Option<Event> {
    match tokio::time::timeout(within, c.rx.recv()).await {
        Ok(Some(Input::Event(e))) => Some(e),
        Ok(other) => panic!("unexpected {other:?}"),
        Err(_) => None,
    }
}

async fn became_leader(c: &mut Candidate, within: Duration) -> Term {
    match next(c, within).await {
        Some(Event::BecameLeader { term, .. }) => term,
        other => panic!("expected BecameLeader, got {other:?}"),
    }
}

async fn lease_transitions(client: kube::Client) -> i32 {
    let lease = Api::<Lease>::namespaced(client, NS)
        .get("haptic-leader")
        .await
        .unwrap();
    lease.spec.unwrap().lease_transitions.unwrap()
}

#[tokio::test]
async fn election_takeover_terms_and_fencing() {
    let emu = api_server().await;
    let mut a = candidate(emu.client(), "a");
    let t1 = became_leader(&mut a, Duration::from_secs(5)).await;
    assert!(a.guard.is_valid());
    assert_eq!(a.guard.term(), Some(t1));
    assert_eq!(
        i64::from(lease_transitions(emu.client()).await),
        t1.0 as i64
    );

    let mut b = candidate(emu.another_client().await, "b");
    assert!(
        next(&mut b, Duration::from_secs(3)).await.is_none(),
        "two leaders"
    );
    assert!(!b.guard.is_valid());
    assert!(a.guard.is_valid(), "the leader keeps renewing");

    // Release on shutdown: the other takes over at once with a higher term.
    a.cancel.cancel();
    match next(&mut a, Duration::from_secs(3)).await {
        Some(Event::LostLeadership { reason, .. }) => assert_eq!(reason, "released"),
        other => panic!("{other:?}"),
    }
    a.task.await.unwrap();
    let t2 = became_leader(&mut b, Duration::from_secs(3)).await;
    assert!(t2 > t1, "{t2:?} > {t1:?}");

    // Pause the leader (no renew, no release): its guard turns invalid within the lease
    // duration minus the margin, and a new candidate takes over only after expiry.
    b.task.abort();
    let paused_at = Instant::now();
    let mut a2 = candidate(emu.client(), "a");
    while b.guard.is_valid() {
        assert!(
            paused_at.elapsed() < Duration::from_millis(1800),
            "guard still valid"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let t3 = became_leader(&mut a2, Duration::from_secs(6)).await;
    assert!(
        paused_at.elapsed() >= Duration::from_secs(2),
        "took over before expiry"
    );
    assert!(t3 > t2);

    // Re-acquiring its own Lease (a restarted replica with the same identity) is a new term.
    a2.task.abort();
    let mut a3 = candidate(emu.client(), "a");
    let t4 = became_leader(&mut a3, Duration::from_secs(5)).await;
    assert!(t4 > t3);
    assert_eq!(
        i64::from(lease_transitions(emu.client()).await),
        t4.0 as i64
    );
    a3.cancel.cancel();
    a3.task.await.unwrap();
}

#[tokio::test]
async fn a_leader_that_loses_the_lease_rejoins() {
    let emu = api_server().await;
    let mut a = candidate(emu.client(), "a");
    let t1 = became_leader(&mut a, Duration::from_secs(5)).await;
    // Someone else takes the Lease behind the leader's back (a successor after a partition).
    let api = Api::<Lease>::namespaced(emu.client(), NS);
    let mut lease = api.get("haptic-leader").await.unwrap();
    let spec = lease.spec.as_mut().unwrap();
    spec.holder_identity = Some("intruder".into());
    spec.lease_transitions = Some(spec.lease_transitions.unwrap() + 1);
    api.replace("haptic-leader", &Default::default(), &lease)
        .await
        .unwrap();
    match next(&mut a, Duration::from_secs(3)).await {
        Some(Event::LostLeadership { reason, .. }) => assert_eq!(reason, "lease_lost"),
        other => panic!("{other:?}"),
    }
    assert!(!a.guard.is_valid());
    // The intruder never renews: the same process acquires again after expiry, with a new term.
    let t2 = became_leader(&mut a, Duration::from_secs(6)).await;
    assert!(t2.0 >= t1.0 + 2);
    a.cancel.cancel();
    a.task.await.unwrap();
}

/// A renew the API server applied but whose answer the leader never got (the emulator drops
/// the connection after applying it: an answer lost after the commit, or one that came after
/// `--kube-request-timeout`) changed the Lease's resourceVersion under the leader's feet. The
/// Lease still names the leader with its term, so the leader takes the write as its own and
/// keeps leading: no leadership change, no new term (client-go's elector also renews whenever
/// the holder is itself). The next attempt comes a retry period (500 ms) later, within the
/// renew deadline (3 s).
#[tokio::test]
async fn a_renew_whose_answer_was_lost_keeps_the_term() {
    let emu = api_server().await;
    let mut lease = LeaseConfig::new(NS, "haptic-leader", "a");
    lease.duration = Duration::from_secs(4);
    lease.renew_deadline = Duration::from_secs(3);
    lease.retry_period = Duration::from_millis(500);
    lease.margin = Duration::from_secs(1);
    let mut a = spawn(LeaderElector::new(emu.client(), lease.clone()));
    let t1 = became_leader(&mut a, Duration::from_secs(5)).await;
    let api = emu.emulator().unwrap();
    api.add_fault(haptic_tools::sandbox::apiserver::Fault {
        method: "PUT".into(),
        path: "/leases/haptic-leader$".into(),
        drop_after_apply: true,
        times: Some(1),
        ..Default::default()
    })
    .unwrap();
    // The held renew is sent within a retry period; then several renews follow.
    let watch = lease.retry_period + lease.renew_deadline + lease.duration;
    if let Some(e) = next(&mut a, watch).await {
        panic!("a landed renew changed the leadership: {e:?}");
    }
    let left: serde_json::Value = reqwest::get(format!("{}/_sandbox/faults", api.url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(left, serde_json::json!([]), "the renew was never held");
    assert!(a.guard.is_valid(), "the leader stopped renewing");
    assert_eq!(a.guard.term(), Some(t1));
    assert_eq!(
        i64::from(lease_transitions(emu.client()).await),
        t1.0 as i64
    );
    a.cancel.cancel();
    a.task.await.unwrap();
}

#[test]
fn identity_prefers_the_flag() {
    assert_eq!(default_identity(Some("x-0")), "x-0");
    assert!(!default_identity(None).is_empty());
}

/// A deleted Lease must not restart the terms at 1 (J7): with the journal's term as the floor,
/// the next acquisition takes a term above it, and the Lease records it.
#[tokio::test]
async fn the_term_grows_past_the_journal_after_the_lease_is_deleted() {
    let emu = api_server().await;
    let config = short_lease("a");
    let floor = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(7));
    let f = floor.clone();
    let mut cand = spawn(
        LeaderElector::new(emu.client(), config)
            .with_term_floor(move || f.load(std::sync::atomic::Ordering::Relaxed)),
    );
    let first = became_leader(&mut cand, Duration::from_secs(10)).await;
    assert_eq!(first, Term(8), "the first term is above the journal's 7");
    assert_eq!(lease_transitions(emu.client()).await, 8);
    floor.store(first.0, std::sync::atomic::Ordering::Relaxed);
    Api::<Lease>::namespaced(emu.client(), NS)
        .delete("haptic-leader", &Default::default())
        .await
        .unwrap();
    // The leader notices (its renew fails), loses, and acquires the recreated Lease.
    let deadline = Instant::now() + Duration::from_secs(15);
    let second = loop {
        match next(&mut cand, Duration::from_secs(15)).await {
            Some(Event::BecameLeader { term, .. }) => break term,
            Some(_) => {}
            None => panic!("no new term"),
        }
        assert!(Instant::now() < deadline, "no new term in time");
    };
    assert!(second > first, "term {second:?} after {first:?}");
    cand.cancel.cancel();
    let _ = cand.task.await;
}
