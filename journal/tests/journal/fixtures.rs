//! Builders for events and work items used across the tests.

use haptic_journal::*;

pub fn corr(id: u64) -> Correlation {
    Correlation::new(format!("ev-{id}"))
}

pub fn runtime() -> RuntimeConfigRef {
    RuntimeConfigRef {
        namespace: Namespace::new("haptic"),
        name: ObjectName::new("demo-haproxycfg"),
    }
}

pub fn identity() -> ConfigIdentity {
    ConfigIdentity {
        name: ObjectName::new("demo"),
        namespace: Namespace::new("haptic"),
        source_uid: None,
        source_generation: None,
    }
}

pub fn pod(name: &str) -> PodRef {
    PodRef {
        namespace: Namespace::new("haptic"),
        name: ObjectName::new(name),
    }
}

/// A small event without blob references.
pub fn drift(id: u64) -> Event {
    Event::DriftPreventionTriggered {
        correlation: corr(id),
        time_since_last_deployment_ms: id,
    }
}

pub fn rendered(id: u64, render: Checksum) -> Event {
    Event::TemplateRendered {
        correlation: corr(id),
        render,
        config_bytes: 10,
        auxiliary_file_count: 0,
        duration_ms: 1,
        trigger_reason: "test".into(),
        coalescible: true,
    }
}

pub fn publish_item(render: Checksum, seq: Seq) -> WorkItem {
    WorkItem::Publish(PublishItem {
        identity: identity(),
        render,
        render_seq: seq,
        rendered_at: UnixMillis(1),
        validated_at: UnixMillis(2),
        correlation: corr(seq.0),
    })
}

pub fn status_item(pod_name: &str, render: Option<Checksum>) -> WorkItem {
    WorkItem::Status(PodStatusItem {
        runtime_config: runtime(),
        pod: pod(pod_name),
        change: match render {
            Some(checksum) => PodStatusChange::Applied {
                checksum,
                is_drift_check: false,
                sync: SyncMetadata::default(),
                observed_at: UnixMillis(5),
            },
            None => PodStatusChange::Removed,
        },
    })
}

pub fn deploy_item(render: Checksum, id: &str) -> WorkItem {
    WorkItem::DeployPending(DeployRequest {
        deployment: DeploymentId::new(id),
        render,
        endpoints: vec![],
        runtime_config: runtime(),
        reason: DeploymentReason {
            cause: DeploymentCause::ConfigValidation,
            timeout_retry: false,
        },
        correlation: corr(0),
    })
}

/// Stores a tiny render (config + one map) and returns its checksum.
pub fn put_render(j: &Journal, cfg: &str) -> Checksum {
    let mut b = Batch::new();
    let r = b.put_render(
        cfg.as_bytes().to_vec(),
        vec![(AuxKind::Map, "maps/hosts.map".into(), b"a b\n".to_vec())],
    );
    // Keep it alive with an event referencing it.
    b.event(rendered(0, r.checksum));
    j.accept(b).unwrap();
    r.checksum
}

/// Opens (creating) the journal at `path` with the default options.
pub fn open_journal(path: impl Into<std::path::PathBuf>) -> Journal {
    Journal::open(&JournalOptions::new(path)).unwrap()
}

/// As [`open_journal`], with periodic trimming off: events are trimmed only by
/// [`Journal::trim`].
pub fn open_trim_manually(path: impl Into<std::path::PathBuf>) -> Journal {
    Journal::open(&JournalOptions::new(path).trim_every_commits(0)).unwrap()
}

/// A new journal (default options) in a fresh temporary directory, which the caller keeps for
/// as long as the journal is open.
pub fn scratch() -> (tempfile::TempDir, Journal) {
    let (d, path) = tmp();
    (d, open_journal(&path))
}

/// As [`scratch`], with periodic trimming off (see [`open_trim_manually`]).
pub fn scratch_trim_manually() -> (tempfile::TempDir, Journal) {
    let (d, path) = tmp();
    (d, open_trim_manually(&path))
}

pub fn tmp() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.redb");
    (dir, path)
}

/// Edits the closed journal file at `path` behind the journal's back: runs `edit` in one raw
/// redb write transaction and commits it.
pub fn tamper(path: &std::path::Path, edit: impl FnOnce(&redb::WriteTransaction)) {
    let db = redb::Database::open(path).unwrap();
    let txn = db.begin_write().unwrap();
    edit(&txn);
    txn.commit().unwrap();
}

/// Reopens the journal at `path` without verifying it on open, so a test reads what
/// [`Journal::verify`] reports about a file it damaged.
pub fn open_unverified(path: impl Into<std::path::PathBuf>) -> Journal {
    Journal::open(&JournalOptions::new(path).verify_on_open(false)).unwrap()
}

/// The first problem [`Journal::verify`] reports that `which` picks; panics with `what` when it
/// reports none.
pub fn reported(j: &Journal, which: impl Fn(&Problem) -> bool, what: &str) -> Problem {
    j.verify()
        .unwrap()
        .problems
        .into_iter()
        .find(|p| which(p))
        .expect(what)
}

/// Asserts that a batch of one event plus what `build` adds, naming `missing` (a blob never
/// stored), is refused whole: [`AcceptError::MissingBlob`] naming `missing`, no event committed.
pub fn assert_refused_whole(j: &Journal, missing: Checksum, build: impl FnOnce(&mut Batch)) {
    let mut b = Batch::new();
    b.event(drift(1));
    build(&mut b);
    match j.accept(b) {
        Err(AcceptError::MissingBlob { blob }) => assert_eq!(blob, missing),
        other => panic!("expected MissingBlob, got {other:?}"),
    }
    assert!(
        j.events(Seq(1), 10).unwrap().is_empty(),
        "nothing of the batch"
    );
}

/// Asserts that [`Journal::verify`] finds no problem (naming those it finds).
pub fn assert_clean(j: &Journal) {
    let report = j.verify().unwrap();
    assert!(report.is_clean(), "{:?}", report.problems);
}
