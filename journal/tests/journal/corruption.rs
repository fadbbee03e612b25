//! Flip bytes inside stored records: `verify()` names table and key; the controller-facing open
//! fails with a clear error; a read without verify-on-open fails instead of skipping.

use haptic_journal::*;

use crate::fixtures::*;

fn marked_event(marker: &str) -> Event {
    Event::LostLeadership {
        correlation: corr(1),
        identity: Identity::new("pod-0"),
        reason: marker.to_owned(),
    }
}

#[test]
fn flipped_event_byte_is_reported_and_refused() {
    let (_d, path) = tmp();
    let seq = {
        let j = open_journal(&path);
        j.accept_events(vec![drift(1)]).unwrap();
        let s = j
            .accept_events(vec![marked_event("MARKER-EVENT-0123456789")])
            .unwrap()[0];
        j.accept_events(vec![drift(3)]).unwrap();
        s
    };
    assert!(super::damage::flip_marker(&path, b"MARKER-EVENT-0123456789") >= 1);

    // Controller-facing open refuses, naming the file, the table, the key and the fix.
    let err = Journal::open(&JournalOptions::new(&path)).unwrap_err();
    let OpenError::Corrupt { report, .. } = &err else {
        panic!("expected Corrupt, got {err}")
    };
    let p = &report.problems[0];
    assert_eq!(p.table, "events");
    assert_eq!(p.key, RecordKey::Seq(seq.0));
    assert!(
        matches!(
            p.kind,
            ProblemKind::Corrupt(CorruptReason::CrcMismatch { .. })
        ),
        "{p}"
    );
    assert!(p.offset.is_some());
    let msg = err.to_string();
    assert!(
        msg.contains("journal.redb") && msg.contains("corrupt") && msg.contains("rebuild"),
        "{msg}"
    );

    // Without verify-on-open, the first read of the record fails; it is never skipped.
    let j = open_unverified(&path);
    let err = j.events(Seq(1), 10).unwrap_err();
    assert!(
        matches!(&err, ReadError::Corrupt(c) if c.table == "events" && c.key == RecordKey::Seq(seq.0)),
        "{err}"
    );
    assert!(
        j.event(Seq(1)).unwrap().is_some(),
        "intact neighbours still read"
    );
    let report = j.verify().unwrap();
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
}

#[test]
fn flipped_queue_and_blob_bytes_are_reported_with_their_keys() {
    let (_d, path) = tmp();
    let (id, blob) = {
        let j = open_journal(&path);
        let r = put_render(&j, "global # MARKER-BLOB-0123456789\n");
        let item = WorkItem::Publish(PublishItem {
            identity: identity(),
            render: r,
            render_seq: Seq(1),
            rendered_at: UnixMillis(1),
            validated_at: UnixMillis(2),
            correlation: Correlation::new("MARKER-WORK-0123456789"),
        });
        let id = j.enqueue(item, Origin::None).unwrap();
        let cfg = j.get_render(r).unwrap().unwrap().config;
        (id, cfg)
    };
    assert!(super::damage::flip_marker(&path, b"MARKER-WORK-0123456789") >= 1);
    assert!(super::damage::flip_marker(&path, b"MARKER-BLOB-0123456789") >= 1);
    let j = open_unverified(&path);
    let report = j.verify().unwrap();
    let tables: Vec<(&str, RecordKey)> = report
        .problems
        .iter()
        .map(|p| (p.table, p.key.clone()))
        .collect();
    assert!(
        tables.contains(&("publish_validated", RecordKey::WorkId(id.0))),
        "{tables:?}"
    );
    assert!(
        tables.contains(&("blobs", RecordKey::Blob(blob))),
        "{tables:?}"
    );
    assert!(j.get_blob(blob).is_err());
    assert!(j.queue(Queue::Publish).is_err());
}
