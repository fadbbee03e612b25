//! The committed schema-4 fixture opens with the current code, needs no step and holds every
//! record it should: schema 3's (its scheduler checkpoint with a quarantine entry carrying
//! `attempts` and `next_retry_at`, and schema 4's `previous_validated` and `rollback` hold) plus
//! two pods' history; the frozen v1 + v2 + v4 types describe it.

use haptic_journal::redb;
use haptic_journal::*;
use haptic_migrations::{MigrateError, Policy, v4};

use crate::fixture_history;

use crate::fixture::{self, Fixture};
use crate::frozen;
use crate::shared;
use crate::{fixture_copy, fixture_path};

/// Writes `fixtures/v4.redb` anew. Run by hand (see main.rs); the normal run never rewrites it.
#[test]
#[ignore = "rewrites the committed fixture; run by hand when schema 4 changes before release"]
fn regenerate_v4_fixture() {
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path().join("v4.redb");
    {
        let j = Journal::open(&JournalOptions::new(&tmp).trim_every_commits(0)).unwrap();
        fixture::build(&j, Fixture::V4);
        fixture::assert_matches(&j, Fixture::V4);
        j.compact().unwrap();
    }
    std::fs::copy(&tmp, fixture_path(Fixture::V4)).unwrap();
}

#[test]
fn fixture_builder_writes_what_expected_describes() {
    for f in Fixture::ALL {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fresh.redb");
        let j = Journal::open(&JournalOptions::new(&path).trim_every_commits(0)).unwrap();
        fixture::build(&j, f);
        fixture::assert_matches(&j, f);
    }
}

#[test]
fn committed_v4_fixture_opens_and_every_record_verifies() {
    let (_d, path) = fixture_copy(Fixture::V4);
    let j = haptic_migrations::open(&JournalOptions::new(&path), Policy::Refuse)
        .expect("schema 4 opens without a migration");
    fixture::assert_matches(&j, Fixture::V4);
    drop(j);
    // Read-only, as haptic-journalctl opens it.
    let j = Journal::open(&JournalOptions::new(fixture_path(Fixture::V4)).read_only(true)).unwrap();
    fixture::assert_matches(&j, Fixture::V4);
    // The history reads: one pod in a time range, by render, the whole timeline.
    let kept = fixture_history::kept();
    let h0: Vec<SyncRecord> = kept[..3].iter().map(|(_, _, r)| r.clone()).collect();
    assert_eq!(
        j.pod_history(
            &fixture::pod("haproxy-0"),
            UnixMillis(0),
            UnixMillis(u64::MAX)
        )
        .unwrap(),
        h0
    );
    assert_eq!(
        j.pod_history(&fixture::pod("haproxy-0"), h0[1].started_at, h0[1].ended_at)
            .unwrap(),
        vec![h0[1].clone()]
    );
    let (_, render_b) = fixture::render_checksums();
    let on_b: Vec<String> = j
        .history_of_render(render_b)
        .unwrap()
        .iter()
        .map(|r| r.pod.name.to_string())
        .collect();
    assert_eq!(on_b, vec!["haproxy-1", "haproxy-0"]);
    assert_eq!(j.history().unwrap().len(), kept.len());
    let c = j
        .component_checkpoint("deployment-scheduler")
        .unwrap()
        .unwrap();
    let q = fixture::quarantine_of(&c);
    assert_eq!(q.len(), 1, "the fixture holds a quarantine entry");
    assert_eq!(
        (q[0].attempts, q[0].next_retry_at),
        (fixture::QUARANTINE_ATTEMPTS, fixture::QUARANTINE_RETRY_AT)
    );
    let s = fixture::scheduler_of(&c).unwrap();
    assert_eq!(s.previous_validated, Some(render_b));
    assert_eq!(s.rollback, Some(fixture::rollback_hold()));
}

#[test]
fn committed_v4_fixture_needs_no_step() {
    let p = shared::assert_plan(Fixture::V4, (4, 4), &[]);
    assert!(p.steps.is_empty());
    let (_d, path) = fixture_copy(Fixture::V4);
    let before = crate::fixture_v1::raw_records(&path);
    let m = haptic_migrations::migrate(&JournalOptions::new(&path)).unwrap();
    assert_eq!((m.from, m.to), (4, 4));
    assert!(m.applied.is_empty());
    assert_eq!(
        crate::fixture_v1::raw_records(&path),
        before,
        "an up-to-date file was changed"
    );
}

/// The frozen types describe every stored payload exactly: the schema-1 tables with `v1`, the
/// schema-2 tables with `v2`, the component checkpoints and the history with `v4` (decode,
/// re-encode, same bytes; and the same values the journal wrote, the quarantine entry's fields,
/// the rollback fields and every history record included).
#[test]
fn frozen_types_round_trip_every_payload() {
    let path = fixture_path(Fixture::V4);
    let h = frozen::round_trip_v4_history(&path, &fixture_history::kept());
    assert_eq!(
        h, 5,
        "three records of haproxy-0 (one trimmed), two of haproxy-1"
    );
    let n = frozen::round_trip_v1_tables(&path, Fixture::V4);
    let m = frozen::round_trip_v2_tables(&path, Fixture::V4);
    assert!(n > 20);
    assert_eq!(
        m, 5,
        "two endpoint_files records, one transaction in each of three states"
    );
    let components = frozen::round_trip_v4_components(&path);
    let mut want = fixture::expected(Fixture::V4).components;
    want.sort_by_key(|c| c.state.component());
    assert_eq!(components.len(), want.len());
    for ((_, frozen_c), want) in components.iter().zip(&want) {
        frozen::assert_same_checkpoint(want, frozen_c);
    }
    let schedulers: Vec<&v4::SchedulerCheckpoint> = components
        .iter()
        .filter_map(|(_, c)| match &c.state {
            v4::ComponentState::Scheduler(s) => Some(s),
            _ => None,
        })
        .collect();
    assert_eq!(schedulers.len(), 1);
    let (_, render_b) = fixture::render_checksums();
    assert_eq!(
        schedulers[0].previous_validated.map(|c| c.0),
        Some(render_b.0),
        "the round trip covers previous_validated"
    );
    let hold = schedulers[0]
        .rollback
        .as_ref()
        .expect("the round trip covers a rollback hold");
    let want_hold = fixture::rollback_hold();
    assert_eq!(
        (
            hold.value.as_str(),
            hold.render.0,
            hold.correlation.event_id.0.as_str(),
            hold.since.0
        ),
        (
            want_hold.value.as_str(),
            want_hold.render.0,
            want_hold.correlation.event_id.as_str(),
            want_hold.since.0
        )
    );
    let rejected = &schedulers[0].rejected;
    assert_eq!(
        rejected.len(),
        1,
        "the round trip covers a quarantine entry"
    );
    assert_eq!(rejected[0].attempts, fixture::QUARANTINE_ATTEMPTS);
    assert_eq!(rejected[0].next_retry_at.0, fixture::QUARANTINE_RETRY_AT.0);
}

fn set_schema_version(path: &std::path::Path, v: u32) {
    let db = redb::Database::open(path).unwrap();
    let txn = db.begin_write().unwrap();
    write_schema_version(&txn, v).unwrap();
    txn.commit().unwrap();
}

#[test]
fn schema_too_new_is_refused_with_both_versions() {
    let (_d, path) = fixture_copy(Fixture::V4);
    set_schema_version(&path, 99);
    let opts = JournalOptions::new(&path);
    for policy in [Policy::Refuse, Policy::Migrate] {
        match haptic_migrations::open(&opts, policy) {
            Err(MigrateError::SchemaTooNew {
                found, supported, ..
            }) => assert_eq!((found, supported), (99, 4)),
            other => panic!("expected SchemaTooNew, got {other:?}"),
        }
    }
    let err = haptic_migrations::migrate(&opts).unwrap_err();
    assert!(matches!(
        err,
        MigrateError::SchemaTooNew {
            found: 99,
            supported: 4,
            ..
        }
    ));
    let text = err.to_string();
    assert!(
        text.contains("99") && text.contains(&path.display().to_string()),
        "{text}"
    );
    assert!(matches!(
        Journal::open(&opts),
        Err(OpenError::SchemaTooNew {
            found: 99,
            supported: 4,
            ..
        })
    ));
    // Nothing was written: still 99.
    let p = haptic_migrations::plan(&opts, &[]);
    assert!(matches!(
        p,
        Err(MigrateError::SchemaTooNew { found: 99, .. })
    ));
}

#[test]
fn missing_file_is_an_open_error() {
    let dir = tempfile::tempdir().unwrap();
    let opts = JournalOptions::new(dir.path().join("nope.redb"));
    assert!(matches!(
        haptic_migrations::migrate(&opts),
        Err(MigrateError::Open(OpenError::NotFound { .. }))
    ));
    assert!(!opts.path.exists());
}
