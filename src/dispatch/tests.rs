#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use haptic_journal::{
    Batch, Correlation, Event, EventKind, Identity, Journal, JournalOptions, Seq, Term,
};
use tokio_util::sync::CancellationToken;

use super::*;

fn open(dir: &tempfile::TempDir) -> Arc<Journal> {
    Arc::new(Journal::open(&JournalOptions::new(dir.path().join("j.redb"))).unwrap())
}

fn drift(n: u64) -> Event {
    Event::DriftPreventionTriggered {
        correlation: Correlation::new(format!("e{n}")),
        time_since_last_deployment_ms: n,
    }
}

fn n_of(d: &Delivery) -> u64 {
    match &*d.event {
        Event::DriftPreventionTriggered {
            time_since_last_deployment_ms,
            ..
        } => *time_since_last_deployment_ms,
        other => panic!("unexpected {other:?}"),
    }
}

async fn wait_marked(h: &DispatchHandle, seq: u64) {
    for _ in 0..500 {
        if h.stats().marked_through >= seq {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never marked through {seq}: {:?}", h.stats());
}

#[tokio::test]
async fn delivers_in_seq_order_after_commit_and_marks_after_processing() {
    let dir = tempfile::tempdir().unwrap();
    let j = open(&dir);
    let mut d = Dispatcher::new(j.clone());
    let mut a = d.subscribe(SubscribeOptions::new("a"));
    let mut b = d.subscribe(SubscribeOptions::new("b").kinds(&[EventKind::BecameLeader]));
    let h = d.handle();
    let cancel = CancellationToken::new();
    let task = tokio::spawn(d.run(cancel.clone()));
    // Concurrent publishers: delivery order is still Seq order.
    let mut joins = Vec::new();
    for i in 1..=20 {
        let h = h.clone();
        joins.push(tokio::spawn(
            async move { h.publish(drift(i)).await.unwrap() },
        ));
    }
    for jn in joins {
        jn.await.unwrap();
    }
    let mut held = Vec::new();
    let mut last = 0;
    for _ in 0..20 {
        let got = a.recv().await.unwrap();
        assert!(got.seq.0 > last, "seq order");
        last = got.seq.0;
        // Delivered only once committed: the journal has it.
        assert!(j.event(got.seq).unwrap().is_some());
        assert!(!got.replayed);
        held.push(got);
    }
    // Nothing processed yet: nothing marked.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(j.meta().unwrap().dispatched_through, Seq(0));
    drop(held);
    wait_marked(&h, 20).await;
    assert_eq!(j.meta().unwrap().dispatched_through, Seq(20));
    assert!(
        b.rx.try_recv().is_err(),
        "filtered subscription got nothing"
    );
    cancel.cancel();
    task.await.unwrap().unwrap();
    assert!(a.recv().await.is_none(), "closed after stop");
}

#[tokio::test]
async fn replays_undispatched_events_first_after_restart() {
    let dir = tempfile::tempdir().unwrap();
    {
        let j = open(&dir);
        // Accepted but never dispatched (the process died before).
        j.accept_events(vec![drift(1), drift(2)]).unwrap();
        let mut d = Dispatcher::new(j.clone());
        let mut a = d.subscribe(SubscribeOptions::new("a"));
        let h = d.handle();
        let cancel = CancellationToken::new();
        let task = tokio::spawn(d.run(cancel.clone()));
        let first = a.recv().await.unwrap();
        assert!(first.replayed);
        assert_eq!(n_of(&first), 1);
        drop(first);
        // The second is received but not processed when we "crash".
        let second = a.recv().await.unwrap();
        wait_marked(&h, 1).await;
        h.publish(drift(3)).await.unwrap();
        let third = a.recv().await.unwrap();
        assert!(!third.replayed);
        std::mem::forget(second);
        std::mem::forget(third);
        cancel.cancel();
        task.await.unwrap().unwrap();
        assert_eq!(j.meta().unwrap().dispatched_through, Seq(1));
    }
    let j = open(&dir);
    let mut d = Dispatcher::new(j.clone());
    let mut a = d.subscribe(SubscribeOptions::new("a"));
    let cancel = CancellationToken::new();
    let task = tokio::spawn(d.run(cancel.clone()));
    let got: Vec<u64> = [a.recv().await.unwrap(), a.recv().await.unwrap()]
        .iter()
        .map(|d| {
            assert!(d.replayed);
            n_of(d)
        })
        .collect();
    assert_eq!(got, vec![2, 3]);
    cancel.cancel();
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn lost_leadership_stops_leader_only_subscriptions() {
    let dir = tempfile::tempdir().unwrap();
    let j = open(&dir);
    let mut d = Dispatcher::new(j.clone());
    let mut lo = d.subscribe(SubscribeOptions::new("leader").leader_only(true));
    let mut all = d.subscribe(SubscribeOptions::new("all"));
    let h = d.handle();
    let mut leadership = h.leadership();
    let cancel = CancellationToken::new();
    let task = tokio::spawn(d.run(cancel.clone()));
    h.publish(drift(1)).await.unwrap(); // follower: leader-only does not get it
    let b = Batch::became_leader(Correlation::new("l1"), Identity::new("me"), Term(1));
    h.accept(b).await.unwrap();
    h.publish(drift(2)).await.unwrap();
    h.publish(Event::LostLeadership {
        correlation: Correlation::new("l2"),
        identity: Identity::new("me"),
        reason: "lease_lost".into(),
    })
    .await
    .unwrap();
    h.publish(drift(3)).await.unwrap();
    let kinds: Vec<EventKind> = {
        let mut v = Vec::new();
        for _ in 0..3 {
            v.push(lo.recv().await.unwrap().event.kind());
        }
        v
    };
    assert_eq!(
        kinds,
        vec![
            EventKind::BecameLeader,
            EventKind::DriftPreventionTriggered,
            EventKind::LostLeadership
        ]
    );
    for _ in 0..5 {
        all.recv().await.unwrap();
    }
    leadership
        .wait_for(|l| *l == Leadership::Follower)
        .await
        .unwrap();
    assert!(lo.rx.try_recv().is_err(), "nothing after LostLeadership");
    cancel.cancel();
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_full_subscription_applies_back_pressure_and_counts_it() {
    let dir = tempfile::tempdir().unwrap();
    let j = open(&dir);
    let mut d = Dispatcher::new(j.clone());
    let mut a = d.subscribe(SubscribeOptions::new("slow").capacity(1));
    let h = d.handle();
    let cancel = CancellationToken::new();
    let task = tokio::spawn(d.run(cancel.clone()));
    h.publish_all((1..=5).map(drift).collect()).await.unwrap();
    let mut got = Vec::new();
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        got.push(n_of(&a.recv().await.unwrap()));
    }
    assert_eq!(got, vec![1, 2, 3, 4, 5]);
    assert!(h.stats().overflow_waits >= 1, "{:?}", h.stats());
    wait_marked(&h, 5).await;
    cancel.cancel();
    task.await.unwrap().unwrap();
}

/// An event published after `Dispatcher::new` but before `run` starts is live, not a replay: a
/// `BecameLeader` accepted in that window makes this replica leader.
#[tokio::test]
async fn events_published_before_run_starts_are_live() {
    let dir = tempfile::tempdir().unwrap();
    let j = open(&dir);
    j.accept_events(vec![drift(1)]).unwrap(); // before the dispatcher: a replay
    let mut d = Dispatcher::new(j.clone());
    let mut lo = d.subscribe(SubscribeOptions::new("leader").leader_only(true));
    let h = d.handle();
    let b = Batch::became_leader(Correlation::new("l1"), Identity::new("me"), Term(1));
    j.accept(b).unwrap(); // after new(), before run(): live
    let cancel = CancellationToken::new();
    let task = tokio::spawn(d.run(cancel.clone()));
    let first = lo.recv().await.unwrap();
    assert!(first.replayed, "drift(1) predates the dispatcher");
    assert_eq!(first.event.kind(), EventKind::DriftPreventionTriggered);
    let second = lo.recv().await.unwrap();
    assert_eq!(second.event.kind(), EventKind::BecameLeader);
    assert!(!second.replayed, "accepted after new() is live");
    h.leadership()
        .wait_for(|l| *l == Leadership::Leader(Term(1)))
        .await
        .unwrap();
    cancel.cancel();
    task.await.unwrap().unwrap();
}
