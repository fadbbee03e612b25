//! Per-pod deployment history (table `pod_history`, schema 4): appends in order, retention by
//! count and by age, the render references history holds (verify counts them), the reads.

use std::time::Duration;

use haptic_journal::redb::{self, ReadableTable};
use haptic_journal::*;

use crate::fixtures::*;

/// A sync of `pod_name` to `render`, started at `at` ms, 100 ms long.
fn sync(pod_name: &str, render: Checksum, at: u64) -> SyncRecord {
    SyncRecord {
        pod: pod(pod_name),
        endpoint: EndpointUrl::new(format!("http://{pod_name}:5555")),
        render,
        started_at: UnixMillis(at),
        ended_at: UnixMillis(at + 100),
        mode: Some(SyncMode::FineGrained),
        operations: OperationCounts {
            total_api_operations: 1,
            ..OperationCounts::default()
        },
        reloaded: true,
        reload_id: Some(ReloadId::new(format!("r-{at}"))),
        result: SyncResult::Applied,
        term: Term(0),
        deployment: DeploymentId::new(format!("d-{at}")),
    }
}

/// A render whose only holder will be the history record appended in the same batch.
fn render_of(b: &mut Batch, cfg: &str) -> Checksum {
    b.put_render(cfg.as_bytes().to_vec(), vec![]).checksum
}

fn keep(n: u32) -> HistoryRetention {
    HistoryRetention {
        max_entries_per_pod: n,
        ..HistoryRetention::default()
    }
}

fn all() -> (UnixMillis, UnixMillis) {
    (UnixMillis(0), UnixMillis(u64::MAX))
}

/// When each record `pod_name` keeps started, in ms, oldest first.
fn starts(j: &Journal, pod_name: &str) -> Vec<u64> {
    let (from, to) = all();
    j.pod_history(&pod(pod_name), from, to)
        .unwrap()
        .iter()
        .map(|r| r.started_at.0)
        .collect()
}

/// Appends one record; returns (sequence, trimmed).
fn append(j: &Journal, rec: SyncRecord, retention: HistoryRetention) -> (u64, u64) {
    let mut b = Batch::new();
    b.append_history(rec, retention);
    match j.accept(b).unwrap().outcomes.as_slice() {
        [OpOutcome::HistoryAppended { seq, trimmed }] => (*seq, *trimmed),
        other => panic!("{other:?}"),
    }
}

/// A closed journal at `path` holding one record (`haptic/haproxy-0`, sequence 1), whose
/// `pod_history` table `edit` then changes behind the journal's back.
fn one_record_then_tamper(
    path: &std::path::Path,
    edit: impl FnOnce(&mut redb::Table<(&str, u64), &[u8]>),
) {
    {
        let j = open_journal(path);
        let r = put_render(&j, "global\n");
        append(&j, sync("haproxy-0", r, 1_000), keep(5));
    }
    tamper(path, |txn| {
        edit(&mut txn.open_table(tables::POD_HISTORY).unwrap())
    });
}

#[test]
fn a_pods_records_read_in_append_order_and_by_time_range() {
    let (_d, path) = tmp();
    let j = open_journal(&path);
    let r = put_render(&j, "global\n");
    let mut want = Vec::new();
    for (i, at) in [1_000, 2_000, 3_000].into_iter().enumerate() {
        let rec = sync("haproxy-0", r, at);
        assert_eq!(append(&j, rec.clone(), keep(10)), (i as u64 + 1, 0));
        want.push(rec);
        append(&j, sync("haproxy-1", r, at + 500), keep(10));
    }
    let (from, to) = all();
    assert_eq!(j.pod_history(&pod("haproxy-0"), from, to).unwrap(), want);
    // Overlap: a sync counts when it ran at any time inside the range, both ends inclusive.
    assert_eq!(
        j.pod_history(&pod("haproxy-0"), UnixMillis(1_100), UnixMillis(2_000))
            .unwrap(),
        want[..2].to_vec()
    );
    assert_eq!(
        j.pod_history(&pod("haproxy-0"), UnixMillis(1_101), UnixMillis(1_999))
            .unwrap(),
        Vec::<SyncRecord>::new()
    );
    assert!(
        j.pod_history(&pod("haproxy-2"), from, to)
            .unwrap()
            .is_empty()
    );
    // The fleet timeline: every record, by start time.
    let starts: Vec<(String, u64)> = j
        .history()
        .unwrap()
        .iter()
        .map(|r| (r.pod.name.to_string(), r.started_at.0))
        .collect();
    assert_eq!(
        starts,
        [1_000, 1_500, 2_000, 2_500, 3_000, 3_500]
            .iter()
            .enumerate()
            .map(|(i, at)| (format!("haproxy-{}", i % 2), *at))
            .collect::<Vec<_>>()
    );
    // Survives a reopen; the sequence goes on.
    drop(j);
    let j = open_journal(&path);
    assert_eq!(j.pod_history(&pod("haproxy-0"), from, to).unwrap(), want);
    assert_eq!(append(&j, sync("haproxy-0", r, 4_000), keep(10)), (4, 0));
    assert_clean(&j);
}

#[test]
fn every_record_naming_a_render_is_found() {
    let (_d, j) = scratch();
    let a = put_render(&j, "global\n  maxconn 1\n");
    let b = put_render(&j, "global\n  maxconn 2\n");
    append(&j, sync("haproxy-1", a, 1_000), keep(10));
    append(&j, sync("haproxy-0", b, 2_000), keep(10));
    append(&j, sync("haproxy-0", a, 3_000), keep(10));
    append(&j, sync("haproxy-2", a, 500), keep(10));
    let on_a: Vec<(String, u64)> = j
        .history_of_render(a)
        .unwrap()
        .iter()
        .map(|r| (r.pod.name.to_string(), r.started_at.0))
        .collect();
    assert_eq!(
        on_a,
        vec![
            ("haproxy-2".to_owned(), 500),
            ("haproxy-1".to_owned(), 1_000),
            ("haproxy-0".to_owned(), 3_000)
        ]
    );
    assert_eq!(j.history_of_render(b).unwrap().len(), 1);
    assert!(j.history_of_render(Checksum([7; 32])).unwrap().is_empty());
}

/// Beyond `max_entries_per_pod`, the oldest go first; other pods are untouched; a render only
/// trimmed records named is collected with the last of them.
#[test]
fn retention_by_count_trims_the_oldest_and_lets_their_render_go() {
    let (_d, j) = scratch();
    let mut renders = Vec::new();
    for i in 0..5u64 {
        let mut b = Batch::new();
        let r = render_of(&mut b, &format!("global\n  maxconn {i}\n"));
        b.append_history(sync("haproxy-0", r, 1_000 * (i + 1)), keep(3));
        b.append_history(sync("haproxy-1", r, 1_000 * (i + 1)), keep(10));
        j.accept(b).unwrap();
        renders.push(r);
        assert!(j.verify().unwrap().is_clean(), "after append {i}");
    }
    let (from, to) = all();
    let kept = starts(&j, "haproxy-0");
    assert_eq!(kept, vec![3_000, 4_000, 5_000]);
    assert_eq!(j.pod_history(&pod("haproxy-1"), from, to).unwrap().len(), 5);
    // Every render is still named by haproxy-1's history: one reference left each.
    assert_eq!(
        j.blob_counts(renders[0]).unwrap(),
        Some(BlobCounts { refs: 1, holds: 0 })
    );
    assert_eq!(
        j.blob_counts(renders[4]).unwrap(),
        Some(BlobCounts { refs: 2, holds: 0 })
    );
    // Now haproxy-1 keeps one: the renders no record names any more are collected.
    let (seq, trimmed) = append(&j, sync("haproxy-1", renders[4], 6_000), keep(1));
    assert_eq!((seq, trimmed), (6, 5));
    assert!(j.get_render(renders[0]).unwrap().is_none(), "collected");
    assert!(j.get_render(renders[1]).unwrap().is_none(), "collected");
    assert!(j.get_render(renders[2]).unwrap().is_some(), "haproxy-0 #3");
    assert_eq!(
        j.blob_counts(renders[4]).unwrap(),
        Some(BlobCounts { refs: 2, holds: 0 })
    );
    assert_clean(&j);
}

/// Records that ended more than `max_age` before the new record's end go, however few.
#[test]
fn retention_by_age_is_measured_from_the_new_records_end() {
    let (_d, j) = scratch();
    let r = put_render(&j, "global\n");
    let ten_secs = HistoryRetention {
        max_entries_per_pod: 100,
        max_age: Duration::from_secs(10),
    };
    append(&j, sync("haproxy-0", r, 1_000), ten_secs);
    append(&j, sync("haproxy-0", r, 5_000), ten_secs);
    append(&j, sync("haproxy-1", r, 1_000), ten_secs);
    // Ends at 15_100: cutoff 5_100; the first ended at 1_100 (goes), the second at 5_100
    // (kept: not before the cutoff).
    assert_eq!(append(&j, sync("haproxy-0", r, 15_000), ten_secs), (3, 1));
    let (from, to) = all();
    let kept = starts(&j, "haproxy-0");
    assert_eq!(kept, vec![5_000, 15_000]);
    assert_eq!(
        j.pod_history(&pod("haproxy-1"), from, to).unwrap().len(),
        1,
        "another pod's append does not trim it"
    );
    // trim_history trims every pod, ages from `now` (the gone pod's history included): at
    // 15_101 haproxy-0's 5_100 and haproxy-1's 1_100 are older than ten seconds.
    let mut b = Batch::new();
    b.trim_history(ten_secs, UnixMillis(15_101));
    assert_eq!(
        j.accept(b).unwrap().outcomes,
        vec![OpOutcome::HistoryTrimmed(2)]
    );
    assert_eq!(j.history().unwrap().len(), 1);
    assert_clean(&j);
}

/// A render nothing but history names stays stored while a record names it, and is collected
/// with the last one (`trim_history` of a pod that is gone).
#[test]
fn history_alone_keeps_a_render_until_its_last_record_goes() {
    let (_d, j) = scratch();
    let mut b = Batch::new();
    let r = render_of(&mut b, "global\n  maxconn 9\n");
    b.append_history(sync("haproxy-0", r, 1_000), keep(5));
    j.accept(b).unwrap();
    assert!(j.get_render(r).unwrap().is_some(), "kept by the history");
    assert_eq!(
        j.blob_counts(r).unwrap(),
        Some(BlobCounts { refs: 1, holds: 0 })
    );
    assert_clean(&j);
    let mut b = Batch::new();
    b.trim_history(HistoryRetention::default(), UnixMillis(u64::MAX));
    assert_eq!(
        j.accept(b).unwrap().outcomes,
        vec![OpOutcome::HistoryTrimmed(1)]
    );
    assert!(j.get_render(r).unwrap().is_none(), "collected");
    assert!(j.blobs().unwrap().is_empty(), "its files too");
    assert_clean(&j);
}

#[test]
fn a_record_naming_a_missing_render_is_refused_whole() {
    let (_d, j) = scratch();
    assert_refused_whole(&j, Checksum([9; 32]), |b| {
        b.append_history(sync("haproxy-0", Checksum([9; 32]), 1_000), keep(5));
    });
    assert!(j.history().unwrap().is_empty());
}

/// verify counts one reference per history record: a record removed behind the journal's back
/// (its reference not released) is a count mismatch on its render, named by table and key.
#[test]
fn verify_counts_history_references_and_reports_a_planted_mismatch() {
    let (_d, path) = tmp();
    let r = {
        let j = open_journal(&path);
        let mut b = Batch::new();
        let r = render_of(&mut b, "global\n  maxconn 3\n");
        b.append_history(sync("haproxy-0", r, 1_000), keep(5));
        b.append_history(sync("haproxy-0", r, 2_000), keep(5));
        j.accept(b).unwrap();
        append(&j, sync("haproxy-0", r, 3_000), keep(2));
        assert_clean(&j);
        assert_eq!(
            j.blob_counts(r).unwrap(),
            Some(BlobCounts { refs: 2, holds: 0 })
        );
        r
    };
    tamper(&path, |txn| {
        let mut t = txn.open_table(tables::POD_HISTORY).unwrap();
        assert!(t.remove(("haptic/haproxy-0", 2)).unwrap().is_some());
        assert_eq!(t.iter().unwrap().count(), 1);
    });
    assert!(matches!(
        Journal::open(&JournalOptions::new(&path)),
        Err(OpenError::Corrupt { .. })
    ));
    let j = open_unverified(&path);
    let report = j.verify().unwrap();
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    let p = &report.problems[0];
    assert_eq!((p.table, &p.key), ("blob_refs", &RecordKey::Blob(r)));
    assert_eq!(
        p.kind,
        ProblemKind::RefCountMismatch {
            stored: 2,
            found: 1
        }
    );
}

/// A damaged history record is reported with its table and key, never skipped.
#[test]
fn a_corrupt_history_record_is_named() {
    let (_d, path) = tmp();
    one_record_then_tamper(&path, |t| {
        let mut v = t
            .get(("haptic/haproxy-0", 1))
            .unwrap()
            .unwrap()
            .value()
            .to_vec();
        let last = v.len() - 1;
        v[last] ^= 0xff;
        t.insert(("haptic/haproxy-0", 1), v.as_slice()).unwrap();
    });
    let j = open_unverified(&path);
    let p = reported(&j, |p| p.table == "pod_history", "reported");
    assert_eq!(p.key, RecordKey::Text("haptic/haproxy-0#1".into()));
    assert!(matches!(p.kind, ProblemKind::Corrupt(_)), "{p}");
    let err = j
        .pod_history(&pod("haproxy-0"), UnixMillis(0), UnixMillis(u64::MAX))
        .unwrap_err();
    assert!(
        matches!(&err, ReadError::Corrupt(c) if c.table == "pod_history"),
        "{err}"
    );
}

/// A record filed under another pod's key (written behind the journal's back) is reported.
#[test]
fn a_record_under_another_pods_key_is_reported() {
    let (_d, path) = tmp();
    one_record_then_tamper(&path, |t| {
        let v = t
            .remove(("haptic/haproxy-0", 1))
            .unwrap()
            .unwrap()
            .value()
            .to_vec();
        t.insert(("haptic/haproxy-9", 1), v.as_slice()).unwrap();
    });
    let j = open_unverified(&path);
    let report = j.verify().unwrap();
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    let p = &report.problems[0];
    assert_eq!(
        (p.table, &p.key),
        ("pod_history", &RecordKey::Text("haptic/haproxy-9#1".into()))
    );
    assert_eq!(
        p.kind,
        ProblemKind::HistoryKeyMismatch {
            record_pod: "haptic/haproxy-0".into()
        }
    );
}
