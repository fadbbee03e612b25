//! Table-driven tests of the pure core: routing and the router's checkpoint, the retry rule,
//! the throttle, the coalescing pick and the spec rule, the park rule and the status merge.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use haptic_journal::{
    Checksum, ConfigIdentity, Correlation, DeploymentId, Endpoint, Event, GateVerdict, PodRef,
    PodStatusChange, PodStatusItem, ReloadId, RuntimeConfigRef, Seq, SyncMetadata, UnixMillis,
    WorkId, WorkItem,
};

use super::decide::{
    self, AuxChange, Effect, Input, Pick, Place, PodChange, PodOutcome, Publication, Queued, Retry,
    RetryPolicy, RouterState, StatusRound,
};
use crate::core::error::ErrorClass;
use crate::k8s::crd::{
    AuxiliaryFileStatus, ConfigMetadata, HAProxyCfg, HAProxyCfgSpec, HAProxyCfgStatus,
    PodDeploymentStatus, conditions, reasons,
};
use crate::k8s::writer::{k8s_micro_time, k8s_time};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

fn state() -> RouterState {
    RouterState::new(
        ConfigIdentity {
            name: "edge".into(),
            namespace: "ns".into(),
            source_uid: None,
            source_generation: None,
        },
        RuntimeConfigRef {
            namespace: "ns".into(),
            name: "edge-haproxycfg".into(),
        },
    )
}

fn sum(n: u8) -> Checksum {
    Checksum([n; 32])
}

fn pod(name: &str) -> PodRef {
    PodRef {
        namespace: "ns".into(),
        name: name.into(),
    }
}

/// Routes `event` at `seq` and time `at`, `(leading, replayed)`, with its place in render order
/// `place`.
fn route_event(
    s: &mut RouterState,
    seq: u64,
    at: u64,
    event: &Event,
    (leading, replayed): (bool, bool),
    place: Option<Place>,
) -> Vec<Effect> {
    decide::route(
        s,
        Input::Event {
            seq: Seq(seq),
            at: UnixMillis(at),
            event,
            leading,
            replayed,
            place,
        },
    )
}

/// Routes `event` at `seq` as a leader (work queued), nothing looked up.
fn lead(s: &mut RouterState, seq: u64, at: u64, event: &Event) -> Vec<Effect> {
    route_event(s, seq, at, event, (true, false), None)
}

/// Routes `event` at `seq` as the leader, with its place in render order `place`.
fn lead_placed(s: &mut RouterState, seq: u64, event: &Event, place: Option<Place>) -> Vec<Effect> {
    route_event(s, seq, 1, event, (true, false), place)
}

/// Routes `event` at `seq` as a follower (folded, no work).
fn follow(s: &mut RouterState, seq: u64, event: &Event) -> Vec<Effect> {
    route_event(s, seq, 1, event, (false, false), None)
}

fn items(effects: Vec<Effect>) -> Vec<WorkItem> {
    effects
        .into_iter()
        .filter_map(|e| match e {
            Effect::Enqueue(i) => Some(*i),
            Effect::ClearCaches => None,
        })
        .collect()
}

/// The pods whose status removal the effects queue, sorted.
fn removals(effects: Vec<Effect>) -> Vec<String> {
    let mut out: Vec<String> = items(effects)
        .into_iter()
        .filter_map(|i| match i {
            WorkItem::Status(s) if s.change == PodStatusChange::Removed => {
                Some(s.pod.name.as_str().to_owned())
            }
            _ => None,
        })
        .collect();
    out.sort();
    out
}

fn rendered(render: Checksum) -> Event {
    Event::TemplateRendered {
        correlation: Correlation::new("r"),
        render,
        config_bytes: 1,
        auxiliary_file_count: 0,
        duration_ms: 1,
        trigger_reason: "t".into(),
        coalescible: true,
    }
}

fn gate(render: Checksum, verdict: GateVerdict) -> Event {
    Event::RenderGateCompleted {
        correlation: Correlation::new("g"),
        render,
        verdict,
        messages: vec!["m".into()],
        pinned_to: None,
    }
}

fn applied(name: &str) -> Event {
    Event::ConfigAppliedToPod {
        correlation: Correlation::new("c"),
        runtime_config: state().runtime_config,
        pod: pod(name),
        checksum: sum(1),
        is_drift_check: false,
        sync: SyncMetadata::default(),
    }
}

fn discovered(pods: &[&str], authoritative: bool) -> Event {
    Event::HAProxyPodsDiscovered {
        correlation: Correlation::new("d"),
        endpoints: pods
            .iter()
            .map(|n| Endpoint {
                url: format!("http://{n}:5555").into(),
                pod: pod(n),
                detected_version: None,
            })
            .collect(),
        authoritative,
    }
}

fn terminated(name: &str) -> Event {
    Event::HAProxyPodTerminated {
        correlation: Correlation::new("t"),
        pod: pod(name),
    }
}

fn lost() -> Event {
    Event::LostLeadership {
        correlation: Correlation::new("l"),
        identity: "x".into(),
        reason: "lease_lost".into(),
    }
}

fn deploy_request(render: Checksum) -> Event {
    Event::DeployedConfigPublishRequest {
        correlation: Correlation::new("d"),
        deployment: DeploymentId::new("d1"),
        render,
        runtime_config: state().runtime_config,
    }
}

// ----- routing -----

#[test]
fn a_pass_queues_verdict_and_publication_with_the_render_seq() {
    let mut s = state();
    assert!(lead(&mut s, 3, 100, &rendered(sum(1))).is_empty());
    let out = items(lead(&mut s, 5, 200, &gate(sum(1), GateVerdict::Pass)));
    assert_eq!(out.len(), 2);
    let WorkItem::Verdict(v) = &out[0] else {
        panic!()
    };
    assert!(v.passed && !v.pinned);
    let WorkItem::Publish(p) = &out[1] else {
        panic!()
    };
    assert_eq!(
        (p.render_seq, p.rendered_at, p.validated_at),
        (Seq(3), UnixMillis(100), UnixMillis(200))
    );
}

#[test]
fn a_fail_pins_and_queues_only_the_verdict() {
    let mut s = state();
    let out = items(lead(&mut s, 5, 1, &gate(sum(2), GateVerdict::Fail)));
    assert_eq!(out.len(), 1);
    assert!(matches!(&out[0], WorkItem::Verdict(v) if !v.passed && v.pinned));
    assert!(s.pinned);
}

#[test]
fn deploy_requests_and_validation_failures_are_queued() {
    let mut s = state();
    let out = items(lead(&mut s, 9, 1, &deploy_request(sum(1))));
    assert!(matches!(&out[..], [WorkItem::PublishDeployed(d)] if d.render_seq == Seq(9)));
    let out = items(lead(
        &mut s,
        10,
        1,
        &Event::ValidationFailed {
            correlation: Correlation::new("v"),
            render: Some(sum(3)),
            errors: vec!["e".into()],
            duration_ms: 1,
            trigger_reason: "t".into(),
        },
    ));
    assert!(matches!(&out[..], [WorkItem::Invalid(i)] if i.errors.len() == 1));
}

/// The render's place: remembered, looked up by the shell, or unknown (a deploy-driven
/// request of unknown order while another render is published is status only).
#[test]
fn render_places() {
    let published = Some(sum(7));
    // (place, event render, expected render_seq)
    let cases = [
        (None, sum(1), Seq(9)),
        (
            Some(Place::At {
                seq: Seq(4),
                at: UnixMillis(5),
            }),
            sum(1),
            Seq(4),
        ),
        (
            Some(Place::Unknown { published }),
            sum(1),
            decide::UNPLACED_RENDER_SEQ,
        ),
        // The published render itself, or nothing published: its own seq.
        (Some(Place::Unknown { published }), sum(7), Seq(9)),
        (Some(Place::Unknown { published: None }), sum(1), Seq(9)),
    ];
    for (place, render, want) in cases {
        let mut s = state();
        let ev = deploy_request(render);
        let out = items(lead_placed(&mut s, 9, &ev, place));
        assert!(
            matches!(&out[..], [WorkItem::PublishDeployed(d)] if d.render_seq == want),
            "{place:?} {out:?}"
        );
    }
    // A gate verdict of unknown place keeps its own seq (a verdict follows its render).
    let mut s = state();
    let ev = gate(sum(1), GateVerdict::Pass);
    let out = items(lead_placed(
        &mut s,
        9,
        &ev,
        Some(Place::Unknown { published }),
    ));
    assert!(matches!(&out[1], WorkItem::Publish(p) if p.render_seq == Seq(9)));
}

#[test]
fn discovery_removes_pods_that_left_and_an_unsynced_empty_set_removes_nothing() {
    let mut s = state();
    for p in ["a", "b"] {
        lead(&mut s, 1, 1, &applied(p));
    }
    assert!(lead(&mut s, 2, 1, &discovered(&[], false)).is_empty());
    assert_eq!(
        removals(lead(&mut s, 3, 1, &discovered(&["a"], true))),
        ["b"]
    );
    assert_eq!(removals(lead(&mut s, 4, 1, &discovered(&[], true))), ["a"]);
}

/// Issue 27: a discovery that lists a pod the router does not know queues a pending entry for
/// it (`Discovered`); a pod it knows (discovered or reported before) gets none, and a follower
/// queues nothing.
#[test]
fn a_newly_discovered_pod_gets_a_pending_status_item() {
    let pending = |fx: Vec<Effect>| -> Vec<String> {
        items(fx)
            .into_iter()
            .filter_map(|i| match i {
                WorkItem::Status(s) if s.change == PodStatusChange::Discovered => {
                    Some(s.pod.name.as_str().to_owned())
                }
                _ => None,
            })
            .collect()
    };
    let mut s = state();
    lead(&mut s, 1, 1, &applied("a"));
    assert_eq!(
        pending(lead(&mut s, 2, 1, &discovered(&["a", "b"], true))),
        ["b"]
    );
    assert!(pending(lead(&mut s, 3, 1, &discovered(&["a", "b"], true))).is_empty());
    assert!(pending(follow(&mut s, 4, &discovered(&["a", "b", "c"], true))).is_empty());
    // c was folded while following: the term start queues a pending entry for every
    // discovered pod (the journal keeps any report queued for a pod over it, and a pod with an
    // entry keeps it: `basic::a_discovered_item_never_replaces_a_queued_report`).
    assert_eq!(
        pending(decide::route(&mut s, Input::TermStarted)),
        ["a", "b", "c"]
    );
    assert_eq!(
        pending(lead(&mut s, 5, 1, &discovered(&["a", "b", "c", "d"], true))),
        ["d"]
    );
}

/// Issue 27: a discovered pod's pending entry makes a scale-up `PodsPending`, naming it, with
/// `podsSynced` counting it, until its first sync is reported; a pod with an entry keeps it;
/// an object not completely published parks the change.
#[test]
fn a_discovered_pod_is_pending_until_its_first_sync() {
    let spec = sum(6);
    let ok = |p: &str| decide::merge_pod_entry(None, &change(p, spec, None, 1_000));
    let synced = cfg(spec, true, vec![ok("a"), ok("b")]);
    let found = |p: &str| PodChange {
        pod: p.into(),
        namespace: "ns".into(),
        change: PodStatusChange::Discovered,
    };
    let r = decide::status_round(Some(&synced), &[found("c")], &now());
    assert_eq!(r.outcomes, [PodOutcome::Done]);
    let st = r.status.expect("written");
    assert_eq!(st.pods_synced.as_deref(), Some("2/3"));
    let c = synced_of(&st);
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", reasons::PODS_PENDING)
    );
    assert!(c.message.contains('c'), "names the new pod: {}", c.message);
    assert!(r.aux.is_empty());
    // Its first sync: synced.
    let mut scaled = synced.clone();
    scaled.status = Some(st);
    let r = decide::status_round(Some(&scaled), &[change("c", spec, None, 2_000)], &now());
    let st = r.status.expect("written");
    assert_eq!(synced_of(&st).reason, reasons::ALL_PODS_SYNCED);
    assert_eq!(st.pods_synced.as_deref(), Some("3/3"));
    // A pod with an entry: nothing to write.
    assert!(
        decide::status_round(Some(&synced), &[found("a")], &now())
            .status
            .is_none()
    );
    // Not completely published: parked.
    let unpublished = cfg(spec, false, vec![]);
    assert_eq!(
        decide::status_round(Some(&unpublished), &[found("c")], &now()).outcomes,
        [PodOutcome::Park]
    );
    assert_eq!(decide::park_rule(None, &found("c")), PodOutcome::Park);
}

/// LostLeadership clears the per-term caches only: the router's facts (render order,
/// identity, known pods) are journal facts and stay (J11).
#[test]
fn lost_leadership_clears_caches_and_keeps_the_router_facts() {
    let mut s = state();
    lead(&mut s, 1, 1, &rendered(sum(1)));
    lead(&mut s, 2, 1, &applied("a"));
    let before = s.checkpoint();
    assert_eq!(follow(&mut s, 3, &lost()), vec![Effect::ClearCaches]);
    // The facts are kept; only whether this replica leads changed.
    let mut after = s.checkpoint();
    assert!(before.leading && !after.leading);
    after.leading = true;
    assert_eq!(after, before);
    // The render's place is kept: a later gate uses it.
    let out = items(lead(&mut s, 7, 1, &gate(sum(1), GateVerdict::Pass)));
    assert!(matches!(&out[1], WorkItem::Publish(p) if p.render_seq == Seq(1)));
}

/// A follower folds every event and queues nothing; the pods that leave meanwhile are owed a
/// status removal, queued by the next term's start (or the next queued event); a pod that
/// comes back (discovered again) is no longer owed one.
#[test]
fn pods_that_leave_while_following_are_removed_at_the_next_term() {
    // (what happens while following, removals at TermStarted)
    let cases: [(&[Event], &[&str]); 5] = [
        (&[terminated("b")], &["b"]),
        (&[discovered(&["a"], true)], &["b", "c"]),
        (&[terminated("b"), discovered(&["a", "b"], true)], &["c"]),
        // A deployment's outcome after the pod left is stale (the deployment started before
        // it left): the pod stays gone.
        (&[terminated("b"), applied("b")], &["b"]),
        (&[discovered(&[], false)], &[]),
    ];
    for (following, want) in cases {
        let mut s = state();
        lead(&mut s, 1, 1, &discovered(&["a", "b", "c"], true));
        let mut seq = 10;
        for ev in following {
            seq += 1;
            assert!(
                items(follow(&mut s, seq, ev)).is_empty(),
                "{ev:?} queued work"
            );
        }
        // Durable: a restart restores what is owed.
        let restored =
            RouterState::restore(state().identity, state().runtime_config, s.checkpoint());
        assert_eq!(restored, s);
        let mut again = restored.clone();
        assert_eq!(
            removals(decide::route(&mut s, Input::TermStarted)),
            want,
            "{following:?}"
        );
        assert!(s.gone.is_empty());
        assert!(
            removals(decide::route(&mut s, Input::TermStarted)).is_empty(),
            "owed twice"
        );
        // The next queued event flushes the same when the term start has not run yet.
        let out = removals(lead(&mut again, 99, 1, &rendered(sum(9))));
        assert_eq!(out, want, "{following:?}");
    }
}

/// The outcome of a deployment to a pod that discovery has since reported gone (terminated,
/// or missing from an authoritative discovery: a recovered deployment still targets the pods of
/// its intent) is no status: it neither brings the pod back nor overwrites its removal. A pod
/// discovered again gets its status as before. Before any discovery, an outcome adds the pod.
#[test]
fn an_outcome_for_a_pod_that_left_is_no_status() {
    for left in [terminated("b"), discovered(&["a"], true)] {
        let mut s = state();
        lead(&mut s, 1, 1, &discovered(&["a", "b"], true));
        assert_eq!(removals(lead(&mut s, 2, 1, &left)), ["b"]);
        assert!(
            items(lead(&mut s, 3, 1, &applied("b"))).is_empty(),
            "{left:?}"
        );
        assert!(!s.known_pods.contains_key("b"));
        // A replica that followed meanwhile owes the removal still.
        let mut f = state();
        lead(&mut f, 1, 1, &discovered(&["a", "b"], true));
        follow(&mut f, 2, &left);
        follow(&mut f, 3, &applied("b"));
        assert_eq!(removals(decide::route(&mut f, Input::TermStarted)), ["b"]);
        // Discovered again: its outcomes are statuses again.
        lead(&mut s, 4, 1, &discovered(&["a", "b"], true));
        assert_eq!(items(lead(&mut s, 5, 1, &applied("b"))).len(), 1);
    }
    let mut fresh = state();
    assert_eq!(items(lead(&mut fresh, 1, 1, &applied("b"))).len(), 1);
    assert!(fresh.known_pods.contains_key("b"));
}

/// Routes `event` at `seq` as a replay (committed before this process started).
fn replay(s: &mut RouterState, seq: u64, event: &Event) -> Vec<Effect> {
    route_event(s, seq, 1, event, (false, true), None)
}

fn became_leader() -> Event {
    Event::BecameLeader {
        correlation: Correlation::new("lead"),
        identity: haptic_journal::Identity::new("me"),
        term: haptic_journal::Term(1),
    }
}

#[test]
fn a_replayed_event_becomes_work_exactly_as_it_did_live() {
    // J11: a replay after a restart queues what the process that delivered it live queued,
    // neither more nor less. Before, every replay was queued, so a follower's event that had
    // produced no work produced it after a restart.
    let pass = gate(sum(1), GateVerdict::Pass);
    // A follower delivered it live: no work; restored from the checkpoint before it, its
    // replay is no work either.
    let mut live = state();
    let before = live.checkpoint();
    assert!(items(follow(&mut live, 3, &pass)).is_empty());
    let mut restarted = RouterState::restore(state().identity.clone(), rc(), before);
    assert!(items(replay(&mut restarted, 3, &pass)).is_empty());
    assert_eq!(restarted.checkpoint(), live.checkpoint());
    // A leader delivered it live: work; its replay (after the replayed BecameLeader) too.
    let mut live = state();
    let before = live.checkpoint();
    lead(&mut live, 2, 1, &became_leader());
    let want = items(lead(&mut live, 3, 1, &pass));
    assert_eq!(want.len(), 2, "verdict and publication");
    let mut restarted = RouterState::restore(state().identity.clone(), rc(), before);
    assert!(items(replay(&mut restarted, 2, &became_leader())).is_empty());
    assert_eq!(items(replay(&mut restarted, 3, &pass)), want);
    // A new process is a follower: its first live event says so, and the checkpoint keeps it.
    let mut s = RouterState::restore(state().identity.clone(), rc(), live.checkpoint());
    assert!(items(follow(&mut s, 4, &pass)).is_empty());
    assert!(!s.checkpoint().leading);
}

fn rc() -> RuntimeConfigRef {
    RuntimeConfigRef {
        namespace: "ns".into(),
        name: "edge-haproxycfg".into(),
    }
}

#[test]
fn owed_removals_are_bounded() {
    let mut s = state();
    for i in 0..decide::GONE_REMEMBERED + 10 {
        let name = format!("p{i}");
        follow(&mut s, 1, &applied(&name));
        follow(&mut s, 2, &terminated(&name));
    }
    assert_eq!(s.gone.len(), decide::GONE_REMEMBERED);
    assert_eq!(
        s.gone[0].name.as_str(),
        "p10",
        "the oldest are forgotten first"
    );
}

/// The pods a published status lists (a journal without a checkpoint) fold the same whatever
/// their order with the first discovery: no race.
#[test]
fn listed_pods_and_the_first_discovery_commute() {
    let listed = [pod("a"), pod("b")];
    let live = discovered(&["a"], true);
    // Discovery first: the listed pod it does not list is gone.
    let mut s = state();
    let first = removals(lead(&mut s, 1, 1, &live));
    let then = removals(decide::route(&mut s, Input::StatusListed { pods: &listed }));
    assert!(first.is_empty());
    assert_eq!(then, ["b"]);
    // Listing first: the discovery removes it.
    let mut t = state();
    assert!(decide::route(&mut t, Input::StatusListed { pods: &listed }).is_empty());
    assert_eq!(removals(lead(&mut t, 1, 1, &live)), ["b"]);
    assert_eq!(s.known_pods, t.known_pods);
}

#[test]
fn the_checkpoint_round_trips_and_names_the_last_queued_event() {
    let mut s = state();
    assert_eq!(s.checkpoint().queued_through, None, "nothing folded yet");
    lead(&mut s, 1, 10, &rendered(sum(1)));
    assert_eq!(
        s.checkpoint().queued_through,
        Some(Seq(1)),
        "folded while leading: a render event queues nothing, and its work (none) is queued"
    );
    lead(&mut s, 2, 20, &gate(sum(2), GateVerdict::Fail));
    lead(&mut s, 3, 30, &applied("a"));
    follow(&mut s, 4, &discovered(&["b"], true));
    assert_eq!(
        s.checkpoint().queued_through,
        Some(Seq(3)),
        "a followed event queues nothing and does not move it"
    );
    lead(
        &mut s,
        5,
        40,
        &Event::ConfigValidated {
            correlation: Correlation::new("v"),
            identity: ConfigIdentity {
                name: "other".into(),
                namespace: "ns".into(),
                source_uid: None,
                source_generation: None,
            },
        },
    );
    let cp = s.checkpoint();
    // Seq 4 (followed) queued nothing and does not move it; seq 5 flushed what seq 4 owed
    // (pod a).
    assert_eq!(
        cp.queued_through,
        Some(Seq(5)),
        "the flush of owed removals is work"
    );
    assert!(cp.pinned && cp.discovered);
    assert_eq!(cp.identity.as_ref().map(|i| i.name.as_str()), Some("other"));
    assert_eq!(cp.known_pods, [pod("b")]);
    assert_eq!(cp.rendered.len(), 1);
    let r = RouterState::restore(state().identity, state().runtime_config, cp.clone());
    assert_eq!(r, s);
    assert_eq!(r.checkpoint(), cp);
    // Bounded render order, oldest forgotten first.
    let mut s = state();
    for i in 0..=decide::RENDERS_REMEMBERED {
        lead(
            &mut s,
            i as u64 + 1,
            1,
            &rendered(Checksum::of(&i.to_le_bytes())),
        );
    }
    let cp = s.checkpoint();
    assert_eq!(cp.rendered.len(), decide::RENDERS_REMEMBERED);
    assert_eq!(cp.rendered[0].seq, Seq(2));
}

// ----- retry rule -----

#[test]
fn retries_back_off_to_the_cap_and_never_give_up() {
    let p = RetryPolicy {
        initial: Duration::from_millis(100),
        max_delay: Duration::from_secs(2),
    };
    let ms = Duration::from_millis;
    // (class, attempt, Retry-After, decision)
    let cases = [
        (ErrorClass::Unavailable, 1, None, Retry::After(ms(100))),
        (ErrorClass::Unavailable, 3, None, Retry::After(ms(400))),
        (ErrorClass::Unreachable, 4, None, Retry::After(ms(800))),
        (ErrorClass::Conflict, 2, None, Retry::After(ms(200))),
        (
            ErrorClass::Throttled,
            1,
            Some(ms(1000)),
            Retry::After(ms(1000)),
        ),
        (
            ErrorClass::Throttled,
            1,
            Some(ms(60_000)),
            Retry::After(ms(2000)),
        ),
        // Far past the 20 attempts that used to end an item: still retried, at the cap.
        (ErrorClass::Unavailable, 21, None, Retry::After(ms(2000))),
        (
            ErrorClass::Unavailable,
            10_000,
            None,
            Retry::After(ms(2000)),
        ),
        (ErrorClass::Forbidden, 50, None, Retry::After(ms(2000))),
        (
            ErrorClass::MissingResourceType,
            1,
            None,
            Retry::After(ms(100)),
        ),
        (ErrorClass::Unauthorized, 2, None, Retry::After(ms(200))),
        (ErrorClass::NotFound, 1, None, Retry::After(ms(100))),
        (ErrorClass::OtherClientError, 1, None, Retry::After(ms(100))),
        // Only permanent rejections end an item.
        (ErrorClass::Rejected, 1, None, Retry::Reject),
        (ErrorClass::TooLarge, 1, None, Retry::Reject),
        (ErrorClass::Unbuildable, 1, None, Retry::Reject),
        (ErrorClass::Fenced, 1, None, Retry::StopTerm),
    ];
    for (class, attempt, ra, want) in cases {
        assert_eq!(
            decide::on_failure(&p, class, attempt, ra),
            want,
            "{class:?} {attempt} {ra:?}"
        );
    }
}

#[test]
fn throttle_is_leading_edge() {
    let t0 = Instant::now();
    let i = Duration::from_secs(5);
    assert_eq!(decide::throttle_wait(i, None, t0), None);
    assert_eq!(
        decide::throttle_wait(i, Some(t0), t0 + Duration::from_secs(2)),
        Some(Duration::from_secs(3))
    );
    assert_eq!(
        decide::throttle_wait(i, Some(t0), t0 + Duration::from_secs(5)),
        None
    );
    assert_eq!(decide::throttle_wait(Duration::ZERO, Some(t0), t0), None);
}

// ----- publish worker rules -----

fn q(id: u64, seq: u64) -> Queued {
    Queued {
        id: WorkId(id),
        render_seq: Seq(seq),
    }
}

#[test]
fn the_coalescing_pick() {
    // (validated, deployed, pick)
    let cases: [(&[Queued], &[Queued], Option<Pick>); 6] = [
        (&[], &[], None),
        (
            &[q(1, 5), q(2, 7), q(3, 6)],
            &[],
            Some(Pick::Validated {
                index: 1,
                superseded: vec![0, 2],
            }),
        ),
        (&[], &[q(4, 1), q(5, 9)], Some(Pick::Deployed { index: 0 })),
        // Arrival order between the queues: the older deploy item goes first.
        (&[q(6, 9)], &[q(4, 1)], Some(Pick::Deployed { index: 0 })),
        (
            &[q(3, 9)],
            &[q(4, 1)],
            Some(Pick::Validated {
                index: 0,
                superseded: vec![],
            }),
        ),
        // Same render order: the newest id wins.
        (
            &[q(1, 5), q(2, 5)],
            &[],
            Some(Pick::Validated {
                index: 1,
                superseded: vec![0],
            }),
        ),
    ];
    for (v, d, want) in cases {
        assert_eq!(decide::pick_publication(v, d), want, "{v:?} {d:?}");
    }
}

#[test]
fn the_spec_never_moves_backwards() {
    let cp = Some((sum(5), Seq(10)));
    let cases = [
        (sum(1), Seq(1), None, Publication::Advance),
        (sum(5), Seq(10), cp, Publication::Repeat),
        (sum(5), Seq(3), cp, Publication::Repeat),
        (sum(4), Seq(9), cp, Publication::Older),
        (sum(6), Seq(10), cp, Publication::Advance),
        (sum(6), Seq(11), cp, Publication::Advance),
        (sum(6), decide::UNPLACED_RENDER_SEQ, cp, Publication::Older),
    ];
    for (render, seq, cp, want) in cases {
        assert_eq!(decide::publication(render, seq, cp), want, "{seq:?} {cp:?}");
    }
}

#[test]
fn a_newer_validation_generation_supersedes_a_retry() {
    let mine = q(2, 5);
    assert!(!decide::superseded(mine, &[mine]));
    assert!(!decide::superseded(mine, &[q(1, 4), mine]));
    assert!(decide::superseded(mine, &[mine, q(3, 6)]));
    assert!(decide::superseded(mine, &[mine, q(3, 5)]));
}

// ----- status rules -----

fn change(pod: &str, checksum: Checksum, error: Option<&str>, at: u64) -> PodChange {
    PodChange {
        pod: pod.into(),
        namespace: "ns".into(),
        change: PodStatusChange::Applied {
            checksum,
            is_drift_check: false,
            sync: SyncMetadata {
                error: error.map(str::to_owned),
                ..SyncMetadata::default()
            },
            observed_at: UnixMillis(at),
        },
    }
}

/// The sync report of an `Applied` change, to edit.
fn sync_of(c: &mut PodChange) -> &mut SyncMetadata {
    let PodStatusChange::Applied { sync, .. } = &mut c.change else {
        unreachable!("not an applied change")
    };
    sync
}

fn removed(pod: &str) -> PodChange {
    PodChange {
        pod: pod.into(),
        namespace: "ns".into(),
        change: PodStatusChange::Removed,
    }
}

fn cfg(spec: Checksum, published: bool, pods: Vec<PodDeploymentStatus>) -> HAProxyCfg {
    let mut c = HAProxyCfg::new(
        "edge-haproxycfg",
        HAProxyCfgSpec {
            path: "/etc/haproxy/haproxy.cfg".into(),
            content: String::new(),
            checksum: spec,
            compressed: false,
        },
    );
    c.metadata.generation = Some(3);
    let mut st = HAProxyCfgStatus {
        deployed_to_pods: pods,
        metadata: published.then(ConfigMetadata::default),
        ..HAProxyCfgStatus::default()
    };
    if published {
        // As the publication's own status write leaves it.
        st.refresh_synced(&spec, Some(3), &k8s_time(UnixMillis(0)));
    }
    c.status = Some(st);
    c
}

/// The time a status round runs at in these tests.
fn now() -> Time {
    k8s_time(UnixMillis(10_000))
}

#[test]
fn the_park_rule() {
    let ok = change("a", sum(1), None, 1);
    let other = change("a", sum(2), None, 1);
    let failed_other = change("a", sum(2), Some("reload failed"), 1);
    let gone = removed("a");
    let on = cfg(sum(1), true, vec![]);
    let unpublished = cfg(sum(1), false, vec![]);
    let cases = [
        (None, &ok, PodOutcome::Park),
        (None, &gone, PodOutcome::Done),
        (Some(&unpublished), &ok, PodOutcome::Park),
        (Some(&unpublished), &failed_other, PodOutcome::Park),
        (Some(&unpublished), &gone, PodOutcome::Done),
        (Some(&on), &ok, PodOutcome::Done),
        (Some(&on), &other, PodOutcome::Park),
        (Some(&on), &failed_other, PodOutcome::Done),
        (Some(&on), &gone, PodOutcome::Done),
    ];
    for (c, ch, want) in cases {
        assert_eq!(decide::park_rule(c, ch), want, "{ch:?}");
    }
    // A render too large to publish (its `SizeLimitExceeded=True` names it): the pods'
    // statuses for it are written although the spec keeps the last complete publication; a
    // condition naming another render, or one that is False, changes nothing.
    let too_large = |render: Checksum, status: &str| {
        let mut c = cfg(sum(1), true, vec![]);
        c.status.as_mut().unwrap().conditions.push(Condition {
            type_: conditions::SIZE_LIMIT_EXCEEDED.into(),
            status: status.into(),
            reason: reasons::OBJECT_TOO_LARGE.into(),
            message: decide::too_large_message(render, "api server answered 413 ..."),
            last_transition_time: now(),
            observed_generation: None,
        });
        c
    };
    assert_eq!(
        decide::too_large_render(&too_large(sum(2), "True")),
        Some(sum(2))
    );
    assert_eq!(
        decide::park_rule(Some(&too_large(sum(2), "True")), &other),
        PodOutcome::Done
    );
    assert_eq!(
        decide::park_rule(Some(&too_large(sum(3), "True")), &other),
        PodOutcome::Park
    );
    assert_eq!(
        decide::park_rule(Some(&too_large(sum(2), "False")), &other),
        PodOutcome::Park
    );
}

#[test]
fn merge_keeps_deployed_at_on_failure_and_counts_errors() {
    let first_fail = decide::merge_pod_entry(None, &change("a", sum(1), Some("x"), 1_000));
    assert!(first_fail.deployed_at.is_none());
    assert_eq!(first_fail.consecutive_errors, Some(1));
    let ok = decide::merge_pod_entry(Some(&first_fail), &change("a", sum(1), None, 2_000));
    assert!(ok.deployed_at.is_some() && ok.last_error.is_none());
    assert_eq!(ok.consecutive_errors, Some(0));
    let fail = decide::merge_pod_entry(Some(&ok), &change("a", sum(1), Some("y"), 3_000));
    assert_eq!(fail.deployed_at, ok.deployed_at);
    assert_eq!(fail.consecutive_errors, Some(1));
    assert!(fail.last_error_at.is_some());
}

/// Issue 27: five identical failures in a row count 5 and stamp the fifth's time (the entry
/// changes with each, so each failed sync is written); a success resets the count.
#[test]
fn identical_failures_count_in_a_row_and_move_their_time() {
    let mut entry = decide::merge_pod_entry(None, &change("a", sum(1), None, 1_000));
    for n in 1..=5_u64 {
        let next = decide::merge_pod_entry(
            Some(&entry),
            &change(
                "a",
                sum(2),
                Some("503 on the version read"),
                1_000 + n * 1_000,
            ),
        );
        assert_ne!(next, entry, "failure {n} is written");
        assert_eq!(next.consecutive_errors, Some(i64::try_from(n).unwrap()));
        assert_eq!(
            next.last_error_at,
            Some(k8s_micro_time(UnixMillis(1_000 + n * 1_000))),
            "lastErrorAt is failure {n}'s"
        );
        assert_eq!(
            next.deployed_at, entry.deployed_at,
            "deployedAt stays the success's"
        );
        entry = next;
    }
    // The fifth reported again (a replay after a restart): already counted.
    let replay = decide::merge_pod_entry(
        Some(&entry),
        &change("a", sum(2), Some("503 on the version read"), 6_000),
    );
    assert_eq!(replay, entry, "a replay is not another failure");
    // Another failure within the same second is.
    let close = decide::merge_pod_entry(
        Some(&entry),
        &change("a", sum(2), Some("503 on the version read"), 6_300),
    );
    assert_eq!(close.consecutive_errors, Some(6));
    let ok = decide::merge_pod_entry(Some(&entry), &change("a", sum(2), None, 9_000));
    assert_eq!(ok.consecutive_errors, Some(0));
    assert_eq!(ok.last_error_at, None);
}

/// Issue 27: a drift repair (same checksum, a reload and objects changed) is recorded: its
/// reload and its operation summary replace the previous deployment's.
#[test]
fn a_drift_repair_names_its_reload_and_operation_summary() {
    let deployed = {
        let mut c = change("a", sum(1), None, 1_000);
        let sync = sync_of(&mut c);
        sync.reload_triggered = true;
        sync.reload_id = Some(ReloadId("deploy-1".into()));
        sync.operation_counts.total_api_operations = 9;
        sync.operation_counts.backends.modified = 2;
        decide::merge_pod_entry(None, &c)
    };
    let mut repair = change("a", sum(1), None, 5_000);
    let sync = sync_of(&mut repair);
    sync.reload_triggered = true;
    sync.reload_id = Some(ReloadId("repair-7".into()));
    sync.operation_counts.total_api_operations = 4;
    sync.operation_counts.servers.modified = 1;
    let repaired = decide::merge_pod_entry(Some(&deployed), &repair);
    assert_eq!(
        repaired.last_reload_id.as_ref().map(ReloadId::as_str),
        Some("repair-7")
    );
    assert_eq!(repaired.last_reload_at, Some(k8s_time(UnixMillis(5_000))));
    let summary = repaired.last_operation_summary.expect("a summary");
    assert_eq!(
        (
            summary.total_api_operations,
            summary.servers_modified,
            summary.backends_modified
        ),
        (4, 1, 0),
        "the repair's operations, not the deployment's"
    );
    // A repair of a map file at runtime (no reload) changes the entry too.
    let mut map_repair = change("a", sum(1), None, 6_000);
    let sync = sync_of(&mut map_repair);
    sync.operation_counts.total_api_operations = 3;
    sync.operation_counts.maps.modified = 1;
    assert_ne!(
        decide::merge_pod_entry(Some(&deployed), &map_repair),
        deployed
    );
    // An idle drift check (reads only) changes nothing.
    let mut idle = change("a", sum(1), None, 7_000);
    let sync = sync_of(&mut idle);
    sync.operation_counts.total_api_operations = 5;
    assert_eq!(decide::merge_pod_entry(Some(&deployed), &idle), deployed);
}

/// An entry is written when, and only when, it differs from what the pod runs or the sync
/// failed (issue 27: a repeated failure is written, its count and time move).
#[test]
fn an_entry_changes_only_when_the_checksum_or_the_error_differs() {
    let on05 = decide::merge_pod_entry(None, &change("a", sum(5), None, 1_000));
    let failing = decide::merge_pod_entry(None, &change("a", sum(5), Some("x"), 1_000));
    // (old, report, unchanged)
    let cases = [
        (&on05, change("a", sum(5), None, 9_000), true),
        (&on05, change("a", sum(6), None, 9_000), false),
        (&on05, change("a", sum(5), Some("x"), 9_000), false),
        // Before issue 27 this was "unchanged", freezing `consecutiveErrors` at 1.
        (&failing, change("a", sum(5), Some("x"), 9_000), false),
        (&failing, change("a", sum(5), Some("y"), 9_000), false),
        (&failing, change("a", sum(5), None, 9_000), false),
    ];
    for (old, report, unchanged) in cases {
        let merged = decide::merge_pod_entry(Some(old), &report);
        assert_eq!(&merged == old, unchanged, "{report:?}");
        if unchanged {
            assert_eq!(merged.deployed_at, old.deployed_at, "deployedAt moved");
        }
    }
}

#[test]
fn a_status_round_writes_only_when_an_entry_changed() {
    let entry = |c: Checksum| decide::merge_pod_entry(None, &change("a", c, None, 1_000));
    // A restart: the pods run 06, the status still says 05: written.
    let stale = cfg(sum(6), true, vec![entry(sum(5))]);
    let r = decide::status_round(Some(&stale), &[change("a", sum(6), None, 5_000)], &now());
    assert_eq!(r.outcomes, [PodOutcome::Done]);
    let st = r.status.expect("written");
    assert_eq!(st.deployed_to_pods[0].checksum, Some(sum(6)));
    assert_eq!(st.pods_synced.as_deref(), Some("1/1"));
    assert_eq!(st.observed_generation, Some(3));
    assert_eq!(r.aux, [AuxChange::Deployed(0)]);
    // A no-op sync report of what the entry already says: nothing written, but acked.
    let current = cfg(sum(6), true, vec![entry(sum(6))]);
    let r = decide::status_round(Some(&current), &[change("a", sum(6), None, 9_000)], &now());
    assert_eq!(r.outcomes, [PodOutcome::Done]);
    assert!(r.status.is_none());
    // A removal of a pod the status does not list: nothing written.
    let r = decide::status_round(Some(&current), &[removed("zz")], &now());
    assert!(r.status.is_none());
    assert_eq!(r.aux, [AuxChange::Removed("zz".into())]);
    // A removal of a listed pod, and a parked report, in one round.
    let r = decide::status_round(
        Some(&current),
        &[removed("a"), change("b", sum(7), None, 1)],
        &now(),
    );
    assert_eq!(r.outcomes, [PodOutcome::Done, PodOutcome::Park]);
    assert!(r.status.unwrap().deployed_to_pods.is_empty());
    // No object: reports park, removals are done.
    let r = decide::status_round(None, &[change("a", sum(6), None, 1), removed("b")], &now());
    assert_eq!(r.outcomes, [PodOutcome::Park, PodOutcome::Done]);
    assert!(r.status.is_none() && r.aux.is_empty());
}

/// `podsSynced` counts only pods whose last sync succeeded on `spec.checksum`: a failed sync
/// names the checksum it tried, and `1/1` next to a `lastError` would be a lie (issue 15).
#[test]
fn pods_synced_counts_only_successful_syncs_of_the_spec() {
    let entry = |c: Checksum| decide::merge_pod_entry(None, &change("a", c, None, 1_000));
    let current = cfg(sum(6), true, vec![entry(sum(6))]);
    // A failed sync of the spec's checksum: the pod is not synced.
    let r = decide::status_round(
        Some(&current),
        &[change("a", sum(6), Some("x"), 2_000)],
        &now(),
    );
    let st = r.status.expect("written");
    assert_eq!(st.deployed_to_pods[0].last_error.as_deref(), Some("x"));
    assert_eq!(st.pods_synced.as_deref(), Some("0/1"));
    // The next sync succeeds: synced again.
    let failing = cfg(sum(6), true, st.deployed_to_pods);
    let r = decide::status_round(Some(&failing), &[change("a", sum(6), None, 3_000)], &now());
    assert_eq!(
        r.status.expect("written").pods_synced.as_deref(),
        Some("1/1")
    );
    // Two pods, one failing on the spec, one on it: 1/2.
    let mut st = HAProxyCfgStatus {
        deployed_to_pods: vec![
            entry(sum(6)),
            decide::merge_pod_entry(None, &change("b", sum(6), Some("y"), 1_000)),
        ],
        ..HAProxyCfgStatus::default()
    };
    st.refresh_pods_synced(&sum(6));
    assert_eq!(st.pods_synced.as_deref(), Some("1/2"));
}

#[test]
fn aux_entry_is_kept_for_the_same_file_and_fresh_for_another() {
    let file = Checksum::of(b"map v1");
    let c = |at| change("p0", Checksum::of(b"render"), None, at);
    let first = decide::merge_aux_pod_entry(None, &c(1_000), file);
    assert_eq!(first.checksum, Some(file));
    assert_eq!(first.deployed_at, Some(k8s_time(UnixMillis(1_000))));
    assert!(first.last_reload_at.is_none() && first.sync_duration.is_none());
    // Same file content: kept as it was (no write), deployedAt included.
    assert_eq!(
        decide::merge_aux_pod_entry(Some(&first), &c(9_000), file),
        first
    );
    // New content: a fresh entry with the new time.
    let other = Checksum::of(b"map v2");
    let next = decide::merge_aux_pod_entry(Some(&first), &c(9_000), other);
    assert_eq!(next.checksum, Some(other));
    assert_eq!(next.deployed_at, Some(k8s_time(UnixMillis(9_000))));
    // A round: the first deployment is written (with the generation), a repeat is not, a
    // removal of a pod it does not list is not.
    let changes = [c(1_000)];
    let aux = [AuxChange::Deployed(0)];
    let st = decide::aux_round(None, file, Some(2), &changes, &aux).expect("written");
    assert_eq!(st.observed_generation, Some(2));
    assert!(decide::aux_round(Some(&st), file, Some(2), &changes, &aux).is_none());
    let gone = [AuxChange::Removed("other".into())];
    assert!(decide::aux_round(Some(&st), file, Some(2), &changes, &gone).is_none());
    assert!(decide::aux_round(None, file, Some(2), &changes, &gone).is_none());
    let empty = AuxiliaryFileStatus::default();
    let out = decide::aux_round(
        Some(&st),
        file,
        Some(2),
        &changes,
        &[AuxChange::Removed("p0".into())],
    );
    assert_eq!(
        out.map(|s| s.deployed_to_pods),
        Some(empty.deployed_to_pods)
    );
}

#[test]
fn conditions() {
    let now = k8s_time(UnixMillis(1_000));
    let [validated, pinned] = decide::verdict_conditions(false, true, &["bad".into()], &now);
    assert_eq!(
        (
            validated.status.as_str(),
            validated.reason.as_str(),
            validated.message.as_str()
        ),
        ("False", reasons::VALIDATION_FAILED, "bad")
    );
    assert_eq!(
        (
            pinned.type_.as_str(),
            pinned.status.as_str(),
            pinned.reason.as_str()
        ),
        (
            conditions::CONFIG_PINNED,
            "True",
            reasons::NEWEST_RENDER_REJECTED
        )
    );
    let [validated, pinned] = decide::verdict_conditions(true, false, &[], &now);
    assert_eq!(
        (validated.status.as_str(), pinned.reason.as_str()),
        ("True", reasons::NEWEST_RENDER_PASSED)
    );
    let ok = decide::published_condition(&now);
    assert_eq!(
        (ok.type_.as_str(), ok.status.as_str()),
        (conditions::PUBLISHED, "True")
    );
    let cases = [
        (ErrorClass::Rejected, Some(reasons::PUBLICATION_REJECTED)),
        (ErrorClass::TooLarge, Some(reasons::OBJECT_TOO_LARGE)),
        (ErrorClass::Unbuildable, Some(reasons::CONTENT_UNAVAILABLE)),
        (ErrorClass::Forbidden, Some(reasons::FORBIDDEN)),
        (ErrorClass::Unauthorized, Some(reasons::UNAUTHORIZED)),
        (
            ErrorClass::MissingResourceType,
            Some(reasons::RESOURCE_TYPE_MISSING),
        ),
        (ErrorClass::Unavailable, None),
        (ErrorClass::Fenced, None),
    ];
    for (class, reason) in cases {
        let c = decide::failure_condition(class, &"m".repeat(2000), &now);
        assert_eq!(c.as_ref().map(|c| c.reason.as_str()), reason, "{class:?}");
        if let Some(c) = c {
            assert_eq!(
                (c.type_.as_str(), c.status.as_str()),
                (conditions::PUBLISHED, "False")
            );
            assert!(c.message.len() <= 1024);
        }
    }
}

/// A report of a permanent rejection (the deployer's `SyncMetadata::rejected`).
fn rejected_change(pod: &str, checksum: Checksum, error: &str, at: u64) -> PodChange {
    let mut c = change(pod, checksum, Some(error), at);
    sync_of(&mut c).rejected = true;
    c
}

fn synced_of(st: &HAProxyCfgStatus) -> &Condition {
    st.conditions
        .iter()
        .find(|c| c.type_ == conditions::SYNCED)
        .expect("a Synced condition")
}

/// `Synced`: True/AllPodsSynced only when every listed pod's last sync succeeded on the spec;
/// otherwise False with the first of DeploymentRejected > PodsFailed > PodsPending, or NoPods.
#[test]
fn the_synced_condition_reasons_and_their_precedence() {
    let ok = |p: &str, c| decide::merge_pod_entry(None, &change(p, c, None, 1_000));
    let failed = |p: &str, c, e| decide::merge_pod_entry(None, &change(p, c, Some(e), 1_000));
    let rejected = |p: &str, c, e| decide::merge_pod_entry(None, &rejected_change(p, c, e, 1_000));
    let spec = sum(6);
    // (entries, status, reason, words the message must hold)
    let cases: Vec<(Vec<PodDeploymentStatus>, &str, &str, Vec<&str>)> = vec![
        (vec![], "False", reasons::NO_PODS, vec![]),
        (
            vec![ok("a", spec), ok("b", spec)],
            "True",
            reasons::ALL_PODS_SYNCED,
            vec!["2 of 2"],
        ),
        (
            vec![ok("a", spec), ok("b", sum(5))],
            "False",
            reasons::PODS_PENDING,
            vec!["1 of 2", "deploying to b"],
        ),
        (
            vec![ok("a", sum(5)), failed("b", sum(5), "reload failed")],
            "False",
            reasons::PODS_FAILED,
            vec!["b: reload failed"],
        ),
        (
            // Failed on the spec beats pending.
            vec![ok("a", sum(5)), failed("b", spec, "status 500")],
            "False",
            reasons::PODS_FAILED,
            vec!["1 of 2", "b: status 500"],
        ),
        (
            // Rejected beats failed and pending.
            vec![
                ok("a", sum(5)),
                failed("b", spec, "status 500"),
                rejected("c", spec, "[ALERT] bad"),
            ],
            "False",
            reasons::DEPLOYMENT_REJECTED,
            vec!["c: [ALERT] bad", "haproxy-haptic.org/retry-rejected"],
        ),
        (
            // A rejection of an older render is no quarantine of the spec's: retried.
            vec![ok("a", spec), rejected("b", sum(5), "[ALERT] old")],
            "False",
            reasons::PODS_FAILED,
            vec!["b: [ALERT] old"],
        ),
    ];
    for (pods, status, reason, words) in cases {
        let st = HAProxyCfgStatus {
            deployed_to_pods: pods,
            ..HAProxyCfgStatus::default()
        };
        let c = st.synced_condition(&spec, Some(4), &now());
        assert_eq!(
            (c.type_.as_str(), c.status.as_str(), c.reason.as_str()),
            (conditions::SYNCED, status, reason),
            "{:?}",
            st.deployed_to_pods
        );
        assert_eq!(c.observed_generation, Some(4));
        for w in words {
            assert!(c.message.contains(w), "{:?} lacks {w:?}", c.message);
        }
        assert_eq!(
            c,
            st.synced_condition(&spec, Some(4), &now()),
            "deterministic"
        );
    }
}

/// A rejection is shown once (status and one Event), an idle drift check's no-op reports write
/// nothing (no timestamp moves), and the next successful sync clears it.
#[test]
fn a_rejection_shows_once_and_idle_drift_checks_write_nothing() {
    let ok = |p: &str, c| decide::merge_pod_entry(None, &change(p, c, None, 1_000));
    let spec = sum(6);
    let synced = cfg(spec, true, vec![ok("a", spec), ok("b", spec)]);
    assert_eq!(
        synced_of(synced.status.as_ref().unwrap()).reason,
        reasons::ALL_PODS_SYNCED
    );
    // Idle drift: every pod reports what it runs. Nothing to write.
    let mut drift = change("a", spec, None, 20_000);
    if let PodStatusChange::Applied { is_drift_check, .. } = &mut drift.change {
        *is_drift_check = true;
    }
    let r = decide::status_round(
        Some(&synced),
        &[drift, change("b", spec, None, 20_000)],
        &now(),
    );
    assert!(r.status.is_none() && r.rejected.is_empty(), "{r:?}");
    // Pod b rejects a render permanently.
    let spec2 = sum(7);
    let mut moved = synced.clone();
    moved.spec.checksum = spec2;
    let r = decide::status_round(
        Some(&moved),
        &[
            change("a", spec2, None, 30_000),
            rejected_change(
                "b",
                spec2,
                "dataplane rejected the configuration with status 400: [ALERT] x",
                30_000,
            ),
        ],
        &now(),
    );
    let st = r.status.expect("written");
    let c = synced_of(&st);
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", reasons::DEPLOYMENT_REJECTED)
    );
    assert!(c.message.contains("b: dataplane rejected"), "{}", c.message);
    assert_eq!(st.deployed_to_pods[1].rejected, Some(true));
    assert_eq!(
        st.deployed_to_pods[1].deployed_at,
        synced.status.as_ref().unwrap().deployed_to_pods[1].deployed_at,
        "b keeps what it ran"
    );
    assert_eq!(st.pods_synced.as_deref(), Some("1/2"));
    assert_eq!(r.rejected.len(), 1, "one Event");
    assert_eq!(r.rejected[0].0, "b");
    // The same rejection reported again (a replay after a crash: the same report, its time
    // included): no write, no Event.
    let mut shown = moved.clone();
    shown.status = Some(st.clone());
    let again = decide::status_round(
        Some(&shown),
        &[rejected_change(
            "b",
            spec2,
            "dataplane rejected the configuration with status 400: [ALERT] x",
            30_000,
        )],
        &now(),
    );
    assert!(
        again.status.is_none() && again.rejected.is_empty(),
        "{again:?}"
    );
    // A later rejection of the same render (a retry): counted, no second Event.
    let later = decide::status_round(
        Some(&shown),
        &[rejected_change(
            "b",
            spec2,
            "dataplane rejected the configuration with status 400: [ALERT] x",
            40_000,
        )],
        &now(),
    );
    assert!(later.rejected.is_empty(), "{later:?}");
    assert_eq!(
        later.status.expect("written").deployed_to_pods[1].consecutive_errors,
        Some(2)
    );
    // The retry succeeds: AllPodsSynced, the flag gone.
    let r = decide::status_round(Some(&shown), &[change("b", spec2, None, 50_000)], &now());
    let st = r.status.expect("written");
    assert_eq!(synced_of(&st).reason, reasons::ALL_PODS_SYNCED);
    assert_eq!(st.deployed_to_pods[1].rejected, None);
}

/// Every condition the publisher's builders write is one the catalogue lists for its type and
/// status (`k8s::crd::CONDITIONS`).
#[test]
fn every_condition_built_is_in_the_catalogue() {
    let t = now();
    let mut built: Vec<Condition> = Vec::new();
    for (passed, pinned) in [(true, false), (false, true), (false, false)] {
        built.extend(decide::verdict_conditions(
            passed,
            pinned,
            &["m".into()],
            &t,
        ));
    }
    built.push(decide::published_condition(&t));
    built.push(decide::within_size_limit_condition(&t));
    for class in [
        ErrorClass::Rejected,
        ErrorClass::TooLarge,
        ErrorClass::Unbuildable,
        ErrorClass::Forbidden,
        ErrorClass::Unauthorized,
        ErrorClass::MissingResourceType,
    ] {
        built.extend(decide::failure_condition(class, "m", &t));
    }
    let ok = |p: &str, c| decide::merge_pod_entry(None, &change(p, c, None, 1_000));
    for pods in [
        vec![],
        vec![ok("a", sum(6))],
        vec![ok("a", sum(5))],
        vec![decide::merge_pod_entry(
            None,
            &change("a", sum(6), Some("x"), 1),
        )],
        vec![decide::merge_pod_entry(
            None,
            &rejected_change("a", sum(6), "x", 1),
        )],
    ] {
        let st = HAProxyCfgStatus {
            deployed_to_pods: pods,
            ..HAProxyCfgStatus::default()
        };
        built.push(st.synced_condition(&sum(6), None, &t));
    }
    let reasons_seen: std::collections::BTreeSet<&str> =
        built.iter().map(|c| c.reason.as_str()).collect();
    // Every catalogued reason but the version check's two (written by the runtime).
    assert_eq!(reasons_seen.len(), 17, "{reasons_seen:?}");
    for c in &built {
        let spec = crate::k8s::crd::condition_spec(&c.type_)
            .unwrap_or_else(|| panic!("{} not catalogued", c.type_));
        assert!(
            spec.allows(&c.status, &c.reason),
            "{}={}/{}",
            c.type_,
            c.status,
            c.reason
        );
    }
}

/// The publication choice (`decide::choose`): (queued item, checkpoint, live object of a
/// repeat) -> what the publication does, one row per rule.
#[test]
fn the_publication_choice() {
    use decide::{Choice, Facts, Live, choose};
    let (a, b) = (sum(1), sum(2));
    let live = |checksum, ours, queued| {
        Some(Live {
            checksum,
            ours,
            queued,
        })
    };
    let write = |render, seq, moves| Choice::Write {
        render,
        render_seq: Seq(seq),
        moves,
    };
    let facts = |item, checkpoint, live| Facts {
        item,
        checkpoint,
        live,
    };
    let rows: [(&str, Facts, Choice); 10] = [
        (
            "a repeat with nothing published does nothing",
            facts(None, None, None),
            Choice::Nothing,
        ),
        (
            "a repeat writes the checkpoint again",
            facts(None, Some((a, Seq(5))), None),
            write(a, 5, Publication::Repeat),
        ),
        (
            "a repeat over the same render in the cluster writes it (idempotent)",
            facts(None, Some((a, Seq(5))), live(a, false, false)),
            write(a, 5, Publication::Repeat),
        ),
        (
            "a repeat leaves another term's render",
            facts(None, Some((a, Seq(5))), live(b, false, true)),
            Choice::Skip,
        ),
        (
            "a repeat yields to the queued publication of the spec's render",
            facts(None, Some((a, Seq(5))), live(b, true, true)),
            Choice::Defer,
        ),
        (
            "a repeat restores our own object edited to another render",
            facts(None, Some((a, Seq(5))), live(b, true, false)),
            write(a, 5, Publication::Repeat),
        ),
        (
            "a first publication advances",
            facts(Some((a, Seq(3))), None, None),
            write(a, 3, Publication::Advance),
        ),
        (
            "a newer render advances",
            facts(Some((b, Seq(7))), Some((a, Seq(5))), None),
            write(b, 7, Publication::Advance),
        ),
        (
            "an older render is acked, the spec left",
            facts(Some((b, Seq(4))), Some((a, Seq(5))), None),
            Choice::AckOlder,
        ),
        (
            "a queued item never reads the cluster: the live object does not matter",
            facts(Some((a, Seq(5))), Some((a, Seq(5))), live(b, false, true)),
            write(a, 5, Publication::Repeat),
        ),
    ];
    for (what, facts, want) in rows {
        assert_eq!(choose(&facts), want, "{what}");
    }
}

/// Issue 27: a quarantine's retry schedule (`deployment.quarantined`) becomes a status item of
/// its own (key `<pod key>#quarantine`: it neither replaces nor is replaced by the pod's
/// deployment report), queued by a leader only, and none for a pod discovery reported gone.
#[test]
fn a_quarantine_notice_is_its_own_status_item() {
    let notice = |name: &str| Event::DeploymentQuarantined {
        correlation: Correlation::new("q"),
        runtime_config: state().runtime_config,
        pod: pod(name),
        render: sum(2),
        message: "[ALERT] could not resolve address 'be1'".into(),
        attempts: 2,
        next_retry_at: UnixMillis(181_000),
    };
    let mut s = state();
    lead(&mut s, 1, 1, &discovered(&["a", "b"], true));
    let out = items(lead(&mut s, 2, 5, &notice("a")));
    let [WorkItem::Status(item)] = out.as_slice() else {
        panic!("one status item: {out:?}")
    };
    assert_eq!(
        item.change,
        PodStatusChange::Quarantined {
            checksum: sum(2),
            message: "[ALERT] could not resolve address 'be1'".into(),
            attempts: 2,
            next_retry_at: UnixMillis(181_000),
        }
    );
    assert_eq!(item.key().0, "ns/edge-haproxycfg/a#quarantine");
    let report = PodStatusItem {
        runtime_config: state().runtime_config,
        pod: pod("a"),
        change: PodStatusChange::Removed,
    };
    assert_ne!(
        item.key(),
        report.key(),
        "the pod's report keeps its own key"
    );
    assert!(items(follow(&mut s, 3, &notice("b"))).is_empty());
    assert!(items(lead(&mut s, 4, 5, &notice("gone"))).is_empty());
}

/// Issue 27: the pod's entry shows when a quarantined render is retried (`nextRetryAt`), in
/// either order of the rejection's report and the scheduler's notice; the notice never counts
/// a failure (the report does), a rejection of the same render keeps the time, and a success
/// or another render clears it.
#[test]
fn a_quarantined_pod_entry_shows_its_next_retry() {
    let spec = sum(2);
    let rejection = |at: u64| {
        let mut c = change(
            "a",
            spec,
            Some("[ALERT] could not resolve address 'be1'"),
            at,
        );
        sync_of(&mut c).rejected = true;
        c
    };
    let notice = |attempts: u32, next: u64| PodChange {
        pod: "a".into(),
        namespace: "ns".into(),
        change: PodStatusChange::Quarantined {
            checksum: spec,
            message: "[ALERT] could not resolve address 'be1'".into(),
            attempts,
            next_retry_at: UnixMillis(next),
        },
    };
    let ok_old = decide::merge_pod_entry(None, &change("a", sum(1), None, 500));
    let object = |pods: Vec<PodDeploymentStatus>| cfg(spec, true, pods);
    let entry_of =
        |r: &StatusRound| r.status.as_ref().expect("written").deployed_to_pods[0].clone();
    // The report, then the notice, in one round.
    let r = decide::status_round(
        Some(&object(vec![ok_old.clone()])),
        &[rejection(1_000), notice(1, 61_000)],
        &now(),
    );
    assert_eq!(r.outcomes, [PodOutcome::Done, PodOutcome::Done]);
    let e = entry_of(&r);
    assert_eq!(
        (e.checksum, e.rejected, e.consecutive_errors),
        (Some(spec), Some(true), Some(1))
    );
    assert_eq!(e.next_retry_at, Some(k8s_time(UnixMillis(61_000))));
    assert_eq!(r.rejected.len(), 1, "one DeploymentRejected Event");
    // The retry is rejected again; the notice is written first this time.
    let r2 = decide::status_round(
        Some(&object(vec![e.clone()])),
        &[notice(2, 181_000)],
        &now(),
    );
    let e2 = entry_of(&r2);
    assert_eq!(e2.consecutive_errors, Some(1), "a notice counts no failure");
    assert_eq!(e2.next_retry_at, Some(k8s_time(UnixMillis(181_000))));
    assert!(
        r2.rejected.is_empty(),
        "shown rejected already: no second Event"
    );
    let r3 = decide::status_round(
        Some(&object(vec![e2.clone()])),
        &[rejection(61_500)],
        &now(),
    );
    let e3 = entry_of(&r3);
    assert_eq!(e3.consecutive_errors, Some(2));
    assert_eq!(
        e3.next_retry_at,
        Some(k8s_time(UnixMillis(181_000))),
        "a rejection of the same render keeps the retry time"
    );
    // The notice replayed (a restart before its ack): nothing to write.
    assert!(
        decide::status_round(
            Some(&object(vec![e3.clone()])),
            &[notice(2, 181_000)],
            &now()
        )
        .status
        .is_none()
    );
    // Accepted at the retry: cleared; a stale notice after it changes nothing.
    let ok = decide::merge_pod_entry(Some(&e3), &change("a", spec, None, 181_500));
    assert_eq!((ok.rejected, ok.next_retry_at.clone()), (None, None));
    assert!(
        decide::status_round(
            Some(&object(vec![ok.clone()])),
            &[notice(3, 500_000)],
            &now()
        )
        .status
        .is_none(),
        "a stale notice after a success"
    );
    // A retry that failed otherwise (a 5xx) is a plain failure report; the scheduler's notice
    // that follows keeps the pod shown quarantined.
    let failed = decide::merge_pod_entry(Some(&e3), &change("a", spec, Some("503"), 190_000));
    assert_eq!(
        (failed.rejected, failed.consecutive_errors),
        (None, Some(3))
    );
    let r4 = decide::status_round(Some(&object(vec![failed])), &[notice(2, 430_000)], &now());
    let e4 = entry_of(&r4);
    assert_eq!(e4.rejected, Some(true));
    assert_eq!(e4.next_retry_at, Some(k8s_time(UnixMillis(430_000))));
    // A notice for another render than the entry's (superseded) changes nothing.
    let other = decide::merge_pod_entry(None, &change("a", sum(9), Some("x"), 1));
    assert!(
        decide::status_round(Some(&object(vec![other])), &[notice(1, 1)], &now())
            .status
            .is_none()
    );
    // A notice for an object not completely published waits.
    assert_eq!(
        decide::park_rule(Some(&cfg(spec, false, vec![])), &notice(1, 1)),
        PodOutcome::Park
    );
}

/// Issue 27: pods that run the newest render, which is too large to publish
/// (`SizeLimitExceeded=True` names it, the spec keeps the older one), make `Synced`
/// False/`RenderTooLarge` naming the render and the pods, not `PodsPending` (no deployment is
/// due, it would never converge); a pod on yet another checksum is still pending.
#[test]
fn pods_on_a_render_too_large_to_publish_are_not_pending() {
    let (spec, big) = (sum(1), sum(2));
    let on = |p: &str, c: Checksum| decide::merge_pod_entry(None, &change(p, c, None, 1_000));
    let mut object = cfg(spec, true, vec![on("a", spec), on("b", spec)]);
    let st = object.status.as_mut().unwrap();
    crate::k8s::crd::set_condition(
        &mut st.conditions,
        Condition {
            type_: conditions::SIZE_LIMIT_EXCEEDED.into(),
            status: "True".into(),
            reason: reasons::OBJECT_TOO_LARGE.into(),
            message: decide::too_large_message(big, "the object is 3 MiB, the limit 1.5 MiB"),
            last_transition_time: now(),
            observed_generation: Some(3),
        },
    );
    let r = decide::status_round(
        Some(&object),
        &[change("a", big, None, 2_000), change("b", big, None, 2_000)],
        &now(),
    );
    assert_eq!(r.outcomes, [PodOutcome::Done, PodOutcome::Done]);
    let st = r.status.expect("written");
    let c = synced_of(&st);
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", reasons::RENDER_TOO_LARGE),
        "{}",
        c.message
    );
    assert!(
        c.message.contains(&big.to_string()) && c.message.contains("a, b"),
        "{}",
        c.message
    );
    // A third pod, discovered and not configured yet, is pending: that is said first.
    let mut third = object.clone();
    third.status.as_mut().unwrap().deployed_to_pods = st.deployed_to_pods.clone();
    let found = PodChange {
        pod: "c".into(),
        namespace: "ns".into(),
        change: PodStatusChange::Discovered,
    };
    let r = decide::status_round(Some(&third), &[found], &now());
    let c = synced_of(r.status.as_ref().expect("written")).clone();
    assert_eq!(c.reason, reasons::PODS_PENDING, "{}", c.message);
    assert!(c.message.ends_with("deploying to c"), "{}", c.message);
}
