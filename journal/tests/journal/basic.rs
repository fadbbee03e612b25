//! Open/create, accept, queues, blobs, terms, trimming, errors.

use haptic_journal::*;

use crate::fixtures::*;

#[test]
fn create_accept_reopen() {
    let (_d, path) = tmp();
    let opts = JournalOptions::new(&path);
    {
        let j = Journal::open(&opts).unwrap();
        let seqs = j.accept_events(vec![drift(1), drift(2)]).unwrap();
        assert_eq!(seqs, vec![Seq(1), Seq(2)]);
        assert_eq!(j.accept_events(vec![drift(3)]).unwrap(), vec![Seq(3)]);
    }
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let j = Journal::open(&opts).unwrap();
    let evs = j.events(Seq(1), 10).unwrap();
    assert_eq!(evs.len(), 3);
    assert_eq!(evs[2].2, drift(3));
    assert_eq!(evs[0].1.kind, "drift.prevention.triggered");
    let m = j.meta().unwrap();
    assert_eq!(m.schema_version, SCHEMA_VERSION);
    assert_eq!(m.next_seq, Seq(4));
    assert_clean(&j);
}

#[test]
fn ack_is_compare_and_delete() {
    let (_d, j) = scratch();
    let r = put_render(&j, "global\n");
    let old = j.enqueue(status_item("p1", Some(r)), Origin::None).unwrap();
    let new = j.enqueue(status_item("p1", Some(r)), Origin::None).unwrap();
    let key = WorkKey::Pod(PodStatusKey::new(&runtime(), &pod("p1")));
    assert!(!j.ack(Queue::StatusPending, key.clone(), old).unwrap());
    assert_eq!(j.queue(Queue::StatusPending).unwrap()[0].record.id, new);
    assert!(j.ack(Queue::StatusPending, key, new).unwrap());
    assert!(j.queue(Queue::StatusPending).unwrap().is_empty());
    assert_clean(&j);
}

#[test]
fn blobs_dedup_and_collect() {
    let (_d, j) = scratch_trim_manually();
    let h1 = j.put_blob(b"hello".to_vec()).unwrap();
    let h2 = j.put_blob(b"hello".to_vec()).unwrap();
    assert_eq!(h1, h2);
    assert_eq!(
        j.blob_counts(h1).unwrap(),
        Some(BlobCounts { refs: 0, holds: 2 })
    );
    j.release_blob(h1).unwrap();
    j.release_blob(h1).unwrap();
    assert_eq!(j.get_blob(h1).unwrap(), None);
    assert!(matches!(
        j.release_blob(h1),
        Err(AcceptError::NoHold { .. })
    ));

    // A render referenced by an event lives while the event does; trimming collects it.
    let r = put_render(&j, "cfg-a");
    let render = j.get_render(r).unwrap().unwrap();
    assert_eq!(j.get_blob(render.config).unwrap().unwrap(), b"cfg-a");
    let last = j.meta().unwrap().next_seq;
    j.mark_dispatched(Seq(last.0 - 1)).unwrap();
    assert_eq!(j.trim().unwrap(), 1);
    assert_eq!(j.get_render(r).unwrap(), None);
    assert_eq!(j.get_blob(render.config).unwrap(), None);
    assert!(j.blobs().unwrap().is_empty());
    // Seq is never reused.
    assert_eq!(j.accept_events(vec![drift(9)]).unwrap(), vec![last]);
    assert_clean(&j);
}

#[test]
fn missing_blob_is_refused_and_batch_is_atomic() {
    let (_d, j) = scratch();
    let mut b = Batch::new();
    b.event(drift(1));
    b.event(rendered(2, Checksum::of(b"nope")));
    assert!(matches!(j.accept(b), Err(AcceptError::MissingBlob { .. })));
    assert_eq!(j.meta().unwrap().next_seq, Seq(1));
    assert!(j.events(Seq(1), 10).unwrap().is_empty());
}

#[test]
fn terms_grow_and_stamp_records() {
    let (_d, j) = scratch();
    j.set_term(Term(3), Identity::new("pod-0")).unwrap();
    assert!(matches!(
        j.set_term(Term(3), Identity::new("pod-0")),
        Err(AcceptError::TermNotNewer { .. })
    ));
    j.accept_events(vec![drift(1)]).unwrap();
    assert_eq!(j.events(Seq(1), 1).unwrap()[0].1.term, Term(3));
    assert_eq!(j.term().unwrap(), Term(3));
    // BecameLeader and the term bump commit together; the event carries the new term.
    let mut b = Batch::new();
    b.set_term(Term(4), Identity::new("pod-1"));
    b.event(Event::BecameLeader {
        correlation: corr(2),
        identity: Identity::new("pod-1"),
        term: Term(4),
    });
    let seq = j.accept(b).unwrap().seqs()[0];
    assert_eq!(j.event(seq).unwrap().unwrap().0.term, Term(4));
    assert_eq!(j.meta().unwrap().identity, Some(Identity::new("pod-1")));
}

#[test]
fn park_unpark_and_newer_replaces_parked() {
    let (_d, j) = scratch();
    let r = put_render(&j, "x");
    let key = PodStatusKey::new(&runtime(), &pod("p"));
    let id = j.enqueue(status_item("p", Some(r)), Origin::None).unwrap();
    assert!(j.park(key.clone(), id).unwrap());
    assert!(j.queue(Queue::StatusPending).unwrap().is_empty());
    assert_eq!(j.queue(Queue::StatusParked).unwrap().len(), 1);
    assert_eq!(j.unpark(None).unwrap(), 1);
    assert_eq!(j.queue(Queue::StatusPending).unwrap()[0].record.id, id);
    assert!(j.park(key.clone(), id).unwrap());
    let newer = j.enqueue(status_item("p", None), Origin::None).unwrap();
    assert!(j.queue(Queue::StatusParked).unwrap().is_empty());
    assert_eq!(j.queue(Queue::StatusPending).unwrap()[0].record.id, newer);
    assert_clean(&j);
}

/// Issue 27: a discovered pod's pending entry (`Discovered`) never replaces a report queued or
/// parked for the pod (it answers with that item's id); any other item replaces a
/// `Discovered`; a quarantine notice has its own key and replaces nothing of the pod's.
#[test]
fn a_discovered_item_never_replaces_a_queued_report() {
    let (_d, j) = scratch();
    let r = put_render(&j, "x");
    let with = |name: &str, change: PodStatusChange| {
        WorkItem::Status(PodStatusItem {
            runtime_config: runtime(),
            pod: pod(name),
            change,
        })
    };
    let pending_ids = |j: &Journal| -> Vec<WorkId> {
        j.queue(Queue::StatusPending)
            .unwrap()
            .iter()
            .map(|e| e.record.id)
            .collect()
    };
    // Queued report: kept.
    let report = j.enqueue(status_item("p", Some(r)), Origin::None).unwrap();
    let answered = j
        .enqueue(with("p", PodStatusChange::Discovered), Origin::None)
        .unwrap();
    assert_eq!(answered, report, "the kept item's id");
    assert_eq!(pending_ids(&j), vec![report]);
    // Parked report: kept too, still parked.
    assert!(
        j.park(PodStatusKey::new(&runtime(), &pod("p")), report)
            .unwrap()
    );
    j.enqueue(with("p", PodStatusChange::Discovered), Origin::None)
        .unwrap();
    assert!(j.queue(Queue::StatusPending).unwrap().is_empty());
    assert_eq!(j.queue(Queue::StatusParked).unwrap()[0].record.id, report);
    // A pod with nothing queued gets it; a report then replaces it.
    let found = j
        .enqueue(with("q", PodStatusChange::Discovered), Origin::None)
        .unwrap();
    assert_eq!(pending_ids(&j), vec![found]);
    let later = j.enqueue(status_item("q", Some(r)), Origin::None).unwrap();
    assert_eq!(pending_ids(&j), vec![later]);
    // A quarantine notice sits beside the pod's report.
    let notice = j
        .enqueue(
            with(
                "q",
                PodStatusChange::Quarantined {
                    checksum: r,
                    message: "[ALERT] x".into(),
                    attempts: 1,
                    next_retry_at: UnixMillis(9),
                },
            ),
            Origin::None,
        )
        .unwrap();
    assert_eq!(pending_ids(&j), vec![later, notice]);
    assert_clean(&j);
}

#[test]
fn second_process_gets_in_use() {
    let (_d, path) = tmp();
    let _j = open_journal(&path);
    // Same process, second handle: redb's lock refuses it too; never hangs.
    let err = Journal::open(&JournalOptions::new(&path)).unwrap_err();
    assert!(matches!(err, OpenError::InUse { .. }), "{err}");
    assert!(err.to_string().contains("in use by another process"));
    let err = Journal::open(&JournalOptions::new(&path).read_only(true)).unwrap_err();
    assert!(matches!(err, OpenError::InUse { .. }), "{err}");
}

const IN_USE_CHILD_ENV: &str = "HAPTIC_JOURNAL_IN_USE_CHILD";

/// Child mode: tries to open the journal the parent holds and prints the outcome.
#[test]
fn in_use_child() {
    let Ok(path) = std::env::var(IN_USE_CHILD_ENV) else {
        return;
    };
    for read_only in [false, true] {
        match Journal::open(&JournalOptions::new(&path).read_only(read_only)) {
            Err(OpenError::InUse { .. }) => println!("result in_use"),
            Err(e) => println!("result other: {e}"),
            Ok(_) => println!("result opened"),
        }
    }
}

#[test]
fn another_process_gets_in_use_never_a_hang() {
    let (_d, path) = tmp();
    let _j = open_journal(&path);
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "basic::in_use_child",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(IN_USE_CHILD_ENV, &path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    // libtest may print its own prefix on the same line as the child's first result.
    let results: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.find("result ").map(|i| &l[i..]))
        .collect();
    assert_eq!(results, vec!["result in_use", "result in_use"], "{stdout}");
}

#[test]
fn single_writer_allows_live_readers() {
    let (_d, path) = tmp();
    let opts = JournalOptions::new(&path).concurrency(Concurrency::SingleWriter);
    let j = Journal::open(&opts).unwrap();
    j.accept_events(vec![drift(1)]).unwrap();
    let r = Journal::open(&opts.clone().read_only(true)).unwrap();
    assert_eq!(r.events(Seq(1), 10).unwrap().len(), 1);
    // The reader follows the live writer's commits.
    j.accept_events(vec![drift(2)]).unwrap();
    assert_eq!(r.events(Seq(1), 10).unwrap().len(), 2);
    assert!(matches!(
        r.accept_events(vec![drift(2)]),
        Err(AcceptError::ReadOnly)
    ));
    assert!(matches!(
        Journal::open(
            &JournalOptions::new(&path)
                .concurrency(Concurrency::SingleWriter)
                .durability(Durability::None)
        ),
        Err(OpenError::InvalidOptions { .. })
    ));
}

#[test]
fn schema_too_new_is_refused() {
    let (_d, path) = tmp();
    drop(open_journal(&path));
    {
        let db = open_raw(&JournalOptions::new(&path)).unwrap();
        let txn = db.begin_write().unwrap();
        write_schema_version(&txn, SCHEMA_VERSION + 1).unwrap();
        txn.commit().unwrap();
    }
    let err = Journal::open(&JournalOptions::new(&path)).unwrap_err();
    assert!(
        matches!(err, OpenError::SchemaTooNew { found, supported, .. } if found == SCHEMA_VERSION + 1 && supported == SCHEMA_VERSION),
        "{err}"
    );
}

#[test]
fn renders_are_listed_and_raw_read_only_opens_a_closed_file() {
    let (_d, path) = tmp();
    let r = {
        let j = open_journal(&path);
        let mut b = Batch::new();
        let render = b.put_render(
            b"global\n".to_vec(),
            vec![
                (AuxKind::Ssl, "ssl/site.pem".into(), b"KEY".to_vec()),
                (AuxKind::Map, "maps/a.map".into(), b"a 1\n".to_vec()),
            ],
        );
        b.event(rendered(1, render.checksum));
        j.accept(b).unwrap();
        let renders = j.renders().unwrap();
        assert_eq!(renders, vec![render.clone()]);
        assert_eq!(render.files[0].path, "maps/a.map", "files sorted by path");
        assert!(render.files[1].kind.is_secret());
        assert_eq!(
            render.checksum,
            render_checksum(
                b"global\n",
                &[("ssl/site.pem", b"KEY"), ("maps/a.map", b"a 1\n")]
            )
        );
        render.checksum
    };
    let db = open_raw_read_only(&JournalOptions::new(&path)).unwrap();
    let rtx = redb::ReadableDatabase::begin_read(&db).unwrap();
    assert_eq!(read_schema_version(&rtx).unwrap(), Some(SCHEMA_VERSION));
    drop(rtx);
    drop(db);
    let j = Journal::open(&JournalOptions::new(&path).read_only(true)).unwrap();
    assert_eq!(j.get_render(r).unwrap().unwrap().checksum, r);
}

#[test]
fn endpoint_applied_keeps_its_render_after_the_events_are_trimmed() {
    let (_d, j) = scratch();
    let r1 = put_render(&j, "global\n# one\n");
    let applied = |render| EndpointApplied {
        endpoint: EndpointUrl("http://10.231.0.2:5555".into()),
        pod: pod("p1"),
        render,
        config_version: None,
        reload_id: None,
        applied_at: UnixMillis(1),
    };
    j.put_endpoint_applied(applied(r1)).unwrap();
    // every event dispatched and trimmed: only the endpoint's state still references r1
    let last = j.meta().unwrap().next_seq.0 - 1;
    j.mark_dispatched(Seq(last)).unwrap();
    j.trim().unwrap();
    assert!(j.events(Seq(1), 10).unwrap().is_empty());
    assert!(
        j.get_render(r1).unwrap().is_some(),
        "render an endpoint runs was collected"
    );
    assert_clean(&j);
    // the endpoint moves to r2: r1 loses its last reference and goes, r2 stays
    let r2 = put_render(&j, "global\n# two\n");
    j.put_endpoint_applied(applied(r2)).unwrap();
    let last = j.meta().unwrap().next_seq.0 - 1;
    j.mark_dispatched(Seq(last)).unwrap();
    j.trim().unwrap();
    assert!(j.get_render(r1).unwrap().is_none());
    assert!(j.get_render(r2).unwrap().is_some());
    assert_clean(&j);
    // removing the endpoint releases r2
    j.remove_endpoint_applied(EndpointUrl("http://10.231.0.2:5555".into()))
        .unwrap();
    assert!(j.get_render(r2).unwrap().is_none());
    assert_clean(&j);
}

#[test]
fn pending_lists_the_open_transactions_until_they_are_removed() {
    let (_d, j) = scratch();
    assert!(j.pending().unwrap().open_transactions.is_empty());
    let tx = |ip: u8, state| EndpointTransaction {
        endpoint: EndpointUrl::new(format!("http://10.231.0.{ip}:5555")),
        pod: pod("p1"),
        id: TransactionId::new(format!("tx-{ip}")),
        version: ConfigVersion(4),
        state,
        started_at: UnixMillis(1),
    };
    let mut b = Batch::new();
    b.push(Op::PutEndpointTransaction(tx(3, TransactionState::Open)));
    b.push(Op::PutEndpointTransaction(tx(2, TransactionState::Unknown)));
    j.accept(b).unwrap();
    let p = j.pending().unwrap();
    assert_eq!(
        p.open_transactions,
        vec![
            tx(2, TransactionState::Unknown),
            tx(3, TransactionState::Open)
        ],
        "by URL"
    );
    // The commit's answer is journaled: the transaction is forgotten.
    let mut b = Batch::new();
    b.push(Op::RemoveEndpointTransaction(EndpointUrl::new(
        "http://10.231.0.3:5555",
    )));
    j.accept(b).unwrap();
    assert_eq!(
        j.pending().unwrap().open_transactions,
        vec![tx(2, TransactionState::Unknown)]
    );
    assert_eq!(j.endpoint_transactions().unwrap().len(), 1);
}
