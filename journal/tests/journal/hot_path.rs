//! What the hot-path work changed (issue 12): meta's `next_seq` as a floor and the writer's
//! cached counters.

use haptic_journal::*;

use crate::fixtures::*;

/// meta's stored `next_seq`, read raw (`None` when the key was never written).
fn stored_next_seq(j: &Journal) -> Option<u64> {
    j.raw_table("meta", None, usize::MAX)
        .unwrap()
        .into_iter()
        .find(|(k, _)| *k == RecordKey::Text(tables::META_NEXT_SEQ.to_owned()))
        .map(|(_, v)| u64::from_le_bytes(v.try_into().unwrap()))
}

/// An event-only commit writes no meta key: the newest event implies the next `Seq`.
#[test]
fn event_only_commits_leave_meta_alone_and_next_seq_follows_the_log() {
    let (_d, path) = tmp();
    let j = Journal::open(&JournalOptions::new(&path)).unwrap();
    for i in 0..5 {
        j.accept_events(vec![drift(i)]).unwrap();
    }
    assert_eq!(stored_next_seq(&j), None);
    assert_eq!(j.meta().unwrap().next_seq, Seq(6));
    drop(j);
    let j = Journal::open(&JournalOptions::new(&path)).unwrap();
    assert_eq!(j.accept_events(vec![drift(6)]).unwrap(), vec![Seq(6)]);
    assert!(j.verify().unwrap().is_clean());
}

/// A trim that deletes events writes meta's floor, so a `Seq` is not reused even after every
/// event was trimmed and the journal reopened (invariant 1).
#[test]
fn seq_is_not_reused_after_everything_was_trimmed_and_reopened() {
    let (_d, path) = tmp();
    {
        let j = Journal::open(&JournalOptions::new(&path)).unwrap();
        j.accept_events(vec![drift(1), drift(2), drift(3)]).unwrap();
        j.mark_dispatched(Seq(3)).unwrap();
        assert_eq!(j.trim().unwrap(), 3);
        assert!(j.events(Seq(1), 10).unwrap().is_empty());
        assert_eq!(stored_next_seq(&j), Some(4));
    }
    let j = Journal::open(&JournalOptions::new(&path)).unwrap();
    assert_eq!(j.meta().unwrap().next_seq, Seq(4));
    assert_eq!(j.accept_events(vec![drift(4)]).unwrap(), vec![Seq(4)]);
    assert!(j.verify().unwrap().is_clean());
}

/// The writer keeps the counters across commits; a request rejected inside a group does not
/// leak its counter changes into the next commit.
#[test]
fn counters_survive_rejected_requests() {
    let (_d, path) = tmp();
    let j = Journal::open(&JournalOptions::new(&path)).unwrap();
    j.set_term(Term(2), Identity::new("pod-0")).unwrap();
    let mut b = Batch::new();
    b.event(drift(1));
    b.set_term(Term(1), Identity::new("pod-1"));
    assert!(matches!(j.accept(b), Err(AcceptError::TermNotNewer { .. })));
    assert_eq!(j.accept_events(vec![drift(2)]).unwrap(), vec![Seq(1)]);
    let m = j.meta().unwrap();
    assert_eq!(m.term, Term(2));
    assert_eq!(m.identity, Some(Identity::new("pod-0")));
    drop(j);
    let j = Journal::open(&JournalOptions::new(&path)).unwrap();
    let m = j.meta().unwrap();
    assert_eq!((m.term, m.next_seq), (Term(2), Seq(2)));
}
