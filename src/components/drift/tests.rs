use std::time::{Duration, Instant};

use super::decide::{DriftState, Effect, Input, decide};

const I: Duration = Duration::from_secs(60);

#[test]
fn fires_after_an_idle_interval_and_rearms() {
    let t0 = Instant::now();
    let mut s = DriftState::new(I);
    assert!(
        decide(&mut s, Input::Tick, t0 + I * 2).is_empty(),
        "stopped before leadership"
    );
    decide(&mut s, Input::BecameLeader, t0);
    assert!(decide(&mut s, Input::Tick, t0 + I / 2).is_empty());
    assert_eq!(
        decide(&mut s, Input::Tick, t0 + I),
        vec![Effect::Trigger { since: I }]
    );
    assert_eq!(s.next_fire, Some(t0 + I * 2), "re-armed at once");
}

#[test]
fn a_successful_deployment_resets_the_timer_a_failed_one_does_not() {
    let t0 = Instant::now();
    let mut s = DriftState::new(I);
    decide(&mut s, Input::BecameLeader, t0);
    decide(&mut s, Input::Completed { succeeded: 0 }, t0 + I / 2);
    assert_eq!(s.next_fire, Some(t0 + I));
    decide(&mut s, Input::Completed { succeeded: 2 }, t0 + I / 2);
    assert_eq!(s.next_fire, Some(t0 + I / 2 + I));
    assert!(decide(&mut s, Input::Tick, t0 + I).is_empty());
}

#[test]
fn lost_leadership_stops_and_became_leader_restarts() {
    let t0 = Instant::now();
    let mut s = DriftState::new(I);
    decide(&mut s, Input::BecameLeader, t0);
    decide(&mut s, Input::LostLeadership, t0 + I / 4);
    assert!(
        decide(&mut s, Input::Tick, t0 + I * 3).is_empty(),
        "no trigger while follower"
    );
    assert!(!s.stalled(t0 + I * 3), "a stopped monitor is not stalled");
    decide(&mut s, Input::BecameLeader, t0 + I * 3);
    assert_eq!(s.next_fire, Some(t0 + I * 4));
}

#[test]
fn stall_detection_after_one_and_a_half_intervals() {
    let t0 = Instant::now();
    let mut s = DriftState::new(I);
    decide(&mut s, Input::BecameLeader, t0);
    assert!(!s.stalled(t0 + I));
    assert!(!s.stalled(t0 + I + I / 2));
    assert!(s.stalled(t0 + I + I / 2 + Duration::from_millis(1)));
}
