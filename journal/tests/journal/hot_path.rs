//! What the hot-path work changed (issue 12): meta's `next_seq` as a floor, the writer's cached
//! counters, renders hashed once (`put_render_hashed`), and verify checking manifest keys.

use haptic_journal::redb::ReadableDatabase;
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
    let j = open_journal(&path);
    for i in 0..5 {
        j.accept_events(vec![drift(i)]).unwrap();
    }
    assert_eq!(stored_next_seq(&j), None);
    assert_eq!(j.meta().unwrap().next_seq, Seq(6));
    drop(j);
    let j = open_journal(&path);
    assert_eq!(j.accept_events(vec![drift(6)]).unwrap(), vec![Seq(6)]);
    assert_clean(&j);
}

/// A trim that deletes events writes meta's floor, so a `Seq` is not reused even after every
/// event was trimmed and the journal reopened (invariant 1).
#[test]
fn seq_is_not_reused_after_everything_was_trimmed_and_reopened() {
    let (_d, path) = tmp();
    {
        let j = open_journal(&path);
        j.accept_events(vec![drift(1), drift(2), drift(3)]).unwrap();
        j.mark_dispatched(Seq(3)).unwrap();
        assert_eq!(j.trim().unwrap(), 3);
        assert!(j.events(Seq(1), 10).unwrap().is_empty());
        assert_eq!(stored_next_seq(&j), Some(4));
    }
    let j = open_journal(&path);
    assert_eq!(j.meta().unwrap().next_seq, Seq(4));
    assert_eq!(j.accept_events(vec![drift(4)]).unwrap(), vec![Seq(4)]);
    assert_clean(&j);
}

/// The writer keeps the counters across commits; a request rejected inside a group does not
/// leak its counter changes into the next commit.
#[test]
fn counters_survive_rejected_requests() {
    let (_d, path) = tmp();
    let j = open_journal(&path);
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
    let j = open_journal(&path);
    let m = j.meta().unwrap();
    assert_eq!((m.term, m.next_seq), (Term(2), Seq(2)));
}

/// A pre-hashed render: deduplicated without reading the content when stored, refused when a
/// new content does not hash to the key it was given, and keyed exactly as `put_render` keys it.
#[test]
fn put_render_hashed_matches_put_render_and_checks_new_content() {
    let (_d, j) = scratch();
    let config = b"global\n  maxconn 10\n".to_vec();
    let map = b"a.example be\n".to_vec();
    let files = || vec![(AuxKind::Map, "maps/hosts.map".to_owned(), map.clone())];
    let mut b = Batch::new();
    let r1 = b.put_render(config.clone(), files());
    b.event(rendered(1, r1.checksum));
    j.accept(b).unwrap();

    let mut b = Batch::new();
    let r2 = b.put_render_hashed(
        config.clone(),
        Checksum::of(&config),
        vec![(
            AuxKind::Map,
            "maps/hosts.map".into(),
            map.clone(),
            Checksum::of(&map),
        )],
    );
    assert_eq!(r2, r1, "same manifest and key as put_render");
    b.event(rendered(2, r2.checksum));
    let a = j.accept(b).unwrap();
    assert!(
        a.outcomes
            .iter()
            .all(|o| !matches!(o, OpOutcome::Blob { stored: true, .. })),
        "unchanged content is not stored again"
    );

    // New content under a wrong key: refused, nothing of the batch committed.
    let before = j.meta().unwrap().next_seq;
    let mut b = Batch::new();
    let r3 = b.put_render_hashed(b"global\n# new\n".to_vec(), Checksum::of(b"other"), vec![]);
    b.event(rendered(3, r3.checksum));
    let err = j.accept(b).unwrap_err();
    assert!(
        matches!(err, AcceptError::BlobHashMismatch { blob, actual }
            if blob == Checksum::of(b"other") && actual == Checksum::of(b"global\n# new\n")),
        "{err}"
    );
    assert_eq!(j.meta().unwrap().next_seq, before);
    assert!(
        j.get_blob(Checksum::of(b"global\n# new\n"))
            .unwrap()
            .is_none()
    );
    assert_clean(&j);
}

/// verify checks a manifest against its key from the manifest alone (the render checksum is
/// defined over the per-file hashes).
#[test]
fn verify_reports_a_manifest_stored_under_another_key() {
    let (_d, path) = tmp();
    let r = {
        let j = open_journal(&path);
        put_render(&j, "global\n")
    };
    let wrong = Checksum::of(b"not this render");
    {
        let db = open_raw(&JournalOptions::new(&path)).unwrap();
        let rtx = db.begin_read().unwrap();
        let bytes = rtx
            .open_table(tables::BLOBS)
            .unwrap()
            .get(r.as_bytes().as_slice())
            .unwrap()
            .unwrap()
            .value()
            .to_vec();
        drop(rtx);
        let txn = db.begin_write().unwrap();
        txn.open_table(tables::BLOBS)
            .unwrap()
            .insert(wrong.as_bytes().as_slice(), bytes.as_slice())
            .unwrap();
        txn.open_table(tables::BLOB_REFS)
            .unwrap()
            .insert(wrong.as_bytes().as_slice(), (0, 1))
            .unwrap();
        txn.commit().unwrap();
    }
    let j = open_unverified(&path);
    let p = reported(
        &j,
        |p| p.key == RecordKey::Blob(wrong),
        "the copied manifest is reported",
    );
    assert!(
        matches!(
            p.kind,
            ProblemKind::Corrupt(CorruptReason::BlobHashMismatch { actual }) if actual == r
        ),
        "{p:?}"
    );
}
