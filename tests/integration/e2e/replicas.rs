//! Two controller replicas on one emulator (DESIGN.md J9 topology b): one leads; when the
//! leader is killed the other takes over and the published status converges; a leader frozen
//! (SIGSTOP) until the other took over writes nothing over the new term after SIGCONT.

use haptic_testkit::RequestRecord;
use nix::sys::signal::Signal;

use super::{
    Controller, Fleet, LEASE, Peers, alpha_and_beta, answers, bounds, feed, leader_of, leads,
    logged, published,
};

on_peers!(
    Emulator,
    the_follower_takes_over_when_the_leader_dies => follower_takes_over,
    a_frozen_leader_writes_nothing_after_it_thaws => frozen_leader,
    each_replica_keeps_the_history_of_its_syncs_and_shows_the_others_terms_as_gaps =>
        history_per_replica,
);

type World = Fleet;

fn pick(a: &mut Controller, b: &mut Controller, leader: &str) -> (usize, usize) {
    if a.opts.identity == leader {
        (0, 1)
    } else {
        assert_eq!(b.opts.identity, leader);
        (1, 0)
    }
}

/// Two replicas on 3 pods with 01-basic published; returns them and the indexes of the leader
/// and the follower.
async fn two(peers: Peers) -> (World, Vec<Controller>, usize, usize) {
    let (world, _, mut ctls) = alpha_and_beta(peers, 3).await;
    published(&world, "01-basic", 3).await;
    let leader = leader_of(&world).await;
    let (l, f) = {
        let (x, y) = ctls.split_at_mut(1);
        pick(&mut x[0], &mut y[0], &leader)
    };
    (world, ctls, l, f)
}

/// The leader is SIGKILLed: the follower takes over without reloading pods already on the newest
/// render, then deploys the next one.
pub async fn follower_takes_over(peers: Peers) {
    let (world, mut ctls, l, f) = two(peers).await;
    let reloads_before = world.reload_counts().await;
    ctls[l].kill();
    let follower = ctls[f].opts.identity.clone();
    leads(&world, &follower).await;
    // J9: the new leader reconciles with the pods; those already running the newest render
    // are not redeployed (no reload), once its became_leader deployment has completed.
    logged(
        &ctls[f],
        bounds().takeover(),
        "the new leader's first deployment",
        "executor finished",
    )
    .await;
    assert_eq!(
        world.reload_counts().await,
        reloads_before,
        "pods already on the newest render were reloaded by the new leader\n{}",
        ctls[f].log_tail(30)
    );
    feed(&world.dir().join("render"), "02-maps");
    published(&world, "02-maps", 3).await;
    answers(&world, "02-maps").await;
    world.shutdown().await;
}

/// Writes (not reads) with a 2xx answer in a request log, from `identity`'s user agent,
/// received at or after `since` when given (a record whose time does not parse counts).
///
/// A request is dated by its arrival (`at`: the emulator's arrival time, the real API server's
/// `requestReceivedTimestamp`), not by when it shows in the log: the real API server logs a
/// request when its response completes, and a response to a frozen client can wait on the
/// client's HTTP/2 flow-control window (its watch streams fill it) until the client thaws, so a
/// write the leader made before the freeze can show in the log after the thaw.
fn writes_by<'a>(
    records: impl Iterator<Item = &'a RequestRecord>,
    identity: &str,
    since: Option<k8s_openapi::jiff::Timestamp>,
) -> Vec<String> {
    let ua = format!("({identity})");
    records
        .filter(|r| {
            r.user_agent.contains(&ua) && r.method != "GET" && (200..300).contains(&r.status)
        })
        .filter(|r| {
            since.is_none_or(|t| {
                r.at.parse::<k8s_openapi::jiff::Timestamp>()
                    .map_or(true, |at| at >= t)
            })
        })
        .map(|r| format!("{} {} {} (received {})", r.method, r.path, r.status, r.at))
        .collect()
}

/// The leader is frozen (SIGSTOP) until the follower took over and deployed; thawed, it writes
/// nothing to the cluster or the pods.
pub async fn frozen_leader(peers: Peers) {
    let (world, ctls, l, f) = two(peers).await;
    let leader = ctls[l].opts.identity.clone();
    // Freeze an idle leader: a write whose Lease check passed just before SIGSTOP is sent when
    // the process runs again (the limit of a time-based guard, checked immediately before each
    // write); the property here is that nothing is decided after the thaw. Idle: none of its
    // writes (Lease and Events aside) arrived for a second, after the publication's trailing
    // condition and status writes.
    let quiet = std::time::Duration::from_secs(1);
    world
        .eventually(
            bounds().follow_up(),
            "the leader idle for a second",
            || async {
                let last = world
                    .api_requests()
                    .map_err(|e| e.to_string())?
                    .into_iter()
                    .filter(|r| {
                        r.user_agent.contains(&format!("({leader})"))
                            && r.method != "GET"
                            && !r.path.contains("/leases/")
                            && !r.path.contains("/events")
                    })
                    .filter_map(|r| r.at.parse::<k8s_openapi::jiff::Timestamp>().ok())
                    .max();
                let idle = last.is_none_or(|t| {
                    k8s_openapi::jiff::Timestamp::now()
                        .duration_since(t)
                        .unsigned_abs()
                        >= quiet
                });
                idle.then_some(()).ok_or(format!("last write at {last:?}"))
            },
        )
        .await;
    ctls[l].signal(Signal::SIGSTOP);
    let follower = ctls[f].opts.identity.clone();
    leads(&world, &follower).await;
    feed(&world.dir().join("render"), "02-maps");
    published(&world, "02-maps", 3).await;
    answers(&world, "02-maps").await;
    // The filter does see this leader's writes (it published 01 and held the Lease), so an
    // empty result below means something.
    let before = world.api_requests().unwrap();
    let earlier = writes_by(before.iter(), &leader, None);
    assert!(
        earlier.iter().any(|w| w.contains("haproxycfgs")),
        "the leader's own writes are visible: {earlier:?}"
    );
    // Thaw the old leader and give it time to act on what it believed before the freeze.
    world.clear_api_requests().unwrap();
    for pod in &world.pods() {
        pod.faults().clear_requests().await.unwrap();
    }
    // Anything the thawed process sends arrives after this instant.
    let thawed_at = k8s_openapi::jiff::Timestamp::now();
    ctls[l].signal(Signal::SIGCONT);
    // A lease duration for its renewal to fail, then a lease retry period and a deployment for
    // anything it would still send.
    tokio::time::sleep(bounds().lease_duration * 2).await;
    let api = world.api_requests().unwrap();
    // Events (events.k8s.io) are notes about the replica itself ("stopped leading"), not
    // objects of the new term.
    let cluster_writes = writes_by(
        api.iter().filter(|r| !r.path.contains("/events")),
        &leader,
        Some(thawed_at),
    );
    assert!(
        cluster_writes.is_empty(),
        "the thawed leader wrote to the cluster: {cluster_writes:?}\n{}",
        ctls[l].log_tail(40)
    );
    for pod in &world.pods() {
        let records = pod.faults().requests().await.unwrap();
        let writes = writes_by(records.iter(), &leader, Some(thawed_at));
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
        .eventually(
            bounds().drain_timeout,
            "every pod to still answer 02-maps",
            || world.pods_answer("02-maps"),
        )
        .await;
    let log = ctls[l].log_text();
    assert!(
        log.contains("leadership lost") || log.contains("lost"),
        "{}",
        ctls[l].log_tail(30)
    );
    world.shutdown().await;
}

/// Per-pod history across a failover and back (issue 28, J9): the first leader deploys
/// 01-basic, is killed; the other leads and deploys 02-maps; the first restarts (same journal)
/// and follows; the other is killed; the first leads again and deploys 03-maps-changed. Each
/// replica's journal holds only the syncs it made, in order, each in the term it led; the first
/// replica's history of every pod shows the second's terms as one gap between its own records.
pub async fn history_per_replica(peers: Peers) {
    let (world, mut ctls, l, f) = two(peers).await;
    let render_dir = world.dir().join("render");
    let first = ctls[l].opts.clone();
    let second = ctls[f].opts.clone();
    ctls[l].kill();
    leads(&world, &second.identity).await;
    feed(&render_dir, "02-maps");
    published(&world, "02-maps", 3).await;
    ctls[l] = world.controller(first.clone());
    logged(
        &ctls[l],
        bounds().takeover(),
        "the restarted replica to follow",
        "haptic running",
    )
    .await;
    ctls[f].kill();
    leads(&world, &first.identity).await;
    feed(&render_dir, "03-maps-changed");
    published(&world, "03-maps-changed", 3).await;
    super::stop_cleanly(&mut ctls[l]);

    // Opened read-write: the killed replica's file needs redb's repair, as its next start would
    // do (nothing else has it open now).
    let history = |opts: &haptic_testkit::ControllerOpts| {
        let j = haptic_journal::Journal::open(&haptic_journal::JournalOptions::new(&opts.journal))
            .unwrap();
        j.history().unwrap()
    };
    let (mine, theirs) = (history(&first), history(&second));
    let terms = |records: &[haptic_journal::SyncRecord]| {
        let mut t: Vec<u64> = records.iter().map(|r| r.term.0).collect();
        t.dedup();
        t.sort_unstable();
        t.dedup();
        t
    };
    let (my_terms, their_terms) = (terms(&mine), terms(&theirs));
    assert_eq!(my_terms.len(), 2, "the first replica led twice: {mine:#?}");
    assert_eq!(their_terms.len(), 1, "the second led once: {theirs:#?}");
    assert!(
        my_terms[0] < their_terms[0] && their_terms[0] < my_terms[1],
        "terms: first {my_terms:?}, second {their_terms:?}"
    );
    for pod in world.pods() {
        let of = |records: &[haptic_journal::SyncRecord]| -> Vec<haptic_journal::SyncRecord> {
            records
                .iter()
                .filter(|r| r.pod.name.as_str() == pod.name)
                .cloned()
                .collect()
        };
        let (mine, theirs) = (of(&mine), of(&theirs));
        assert!(
            mine.iter().any(|r| r.term.0 == my_terms[0])
                && mine.iter().any(|r| r.term.0 == my_terms[1]),
            "{}: synced in both of the first replica's terms: {mine:#?}",
            pod.name
        );
        assert!(!theirs.is_empty(), "{}: synced by the second", pod.name);
        assert!(
            mine.windows(2).all(|w| w[0].ended_at <= w[1].started_at)
                && theirs.windows(2).all(|w| w[0].ended_at <= w[1].started_at),
            "{}: in order",
            pod.name
        );
        // The first replica's listing shows the second's terms as one gap, between its own.
        let lines = haptic_journal::timeline(&mine);
        let gaps: Vec<(u64, u64)> = lines
            .iter()
            .filter_map(|l| match l {
                haptic_journal::TimelineLine::Gap { first, last, .. } => Some((*first, *last)),
                haptic_journal::TimelineLine::Record(_) => None,
            })
            .collect();
        assert_eq!(gaps.len(), 1, "{}: {gaps:?}", pod.name);
        assert!(
            gaps[0].0 <= their_terms[0] && their_terms[0] <= gaps[0].1,
            "{}: the gap {gaps:?} covers the second's term {their_terms:?}",
            pod.name
        );
        // Every record of the second's syncs falls in that gap's time.
        let (after, before) = match lines
            .iter()
            .find(|l| matches!(l, haptic_journal::TimelineLine::Gap { .. }))
        {
            Some(haptic_journal::TimelineLine::Gap { after, before, .. }) => (*after, *before),
            _ => unreachable!(),
        };
        assert!(
            theirs
                .iter()
                .all(|r| after <= r.started_at && r.ended_at <= before),
            "{}: the second's syncs lie in the gap {after:?}..{before:?}: {theirs:#?}",
            pod.name
        );
    }
    world.shutdown().await;
}
