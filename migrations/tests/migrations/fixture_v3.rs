//! The committed schema-3 fixture opens with the current code, needs no step and holds every
//! record it should, its scheduler checkpoint with a quarantine entry carrying schema 3's
//! `attempts` and `next_retry_at`; the frozen v1 + v2 + v3 types describe it.

use haptic_journal::redb;
use haptic_journal::*;
use haptic_migrations::{MigrateError, Policy, v3};

use crate::fixture::{self, Fixture};
use crate::frozen;
use crate::{fixture_copy, fixture_path};

/// Writes `fixtures/v3.redb` anew. Run by hand (see main.rs); the normal run never rewrites it.
#[test]
#[ignore = "rewrites the committed fixture; run by hand when schema 3 changes before release"]
fn regenerate_v3_fixture() {
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path().join("v3.redb");
    {
        let j = Journal::open(&JournalOptions::new(&tmp).trim_every_commits(0)).unwrap();
        fixture::build(&j, Fixture::V3);
        fixture::assert_matches(&j, Fixture::V3);
        j.compact().unwrap();
    }
    std::fs::copy(&tmp, fixture_path(Fixture::V3)).unwrap();
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
fn committed_v3_fixture_opens_and_every_record_verifies() {
    let (_d, path) = fixture_copy(Fixture::V3);
    let j = haptic_migrations::open(&JournalOptions::new(&path), Policy::Refuse)
        .expect("schema 3 opens without a migration");
    fixture::assert_matches(&j, Fixture::V3);
    drop(j);
    // Read-only, as haptic-journalctl opens it.
    let j = Journal::open(&JournalOptions::new(fixture_path(Fixture::V3)).read_only(true)).unwrap();
    fixture::assert_matches(&j, Fixture::V3);
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
}

#[test]
fn committed_v3_fixture_needs_no_step() {
    let p = haptic_migrations::plan(
        &JournalOptions::new(fixture_path(Fixture::V3)),
        haptic_migrations::STEPS,
    )
    .unwrap();
    assert_eq!((p.found, p.target), (3, 3));
    assert!(p.steps.is_empty());
    let (_d, path) = fixture_copy(Fixture::V3);
    let before = crate::fixture_v1::raw_records(&path);
    let m = haptic_migrations::migrate(&JournalOptions::new(&path)).unwrap();
    assert_eq!((m.from, m.to), (3, 3));
    assert!(m.applied.is_empty());
    assert_eq!(
        crate::fixture_v1::raw_records(&path),
        before,
        "an up-to-date file was changed"
    );
}

/// The frozen types describe every stored payload exactly: the schema-1 tables with `v1`, the
/// schema-2 tables with `v2`, the component checkpoints with `v3` (decode, re-encode, same
/// bytes; and the same values the journal wrote, the quarantine entry's new fields included).
#[test]
fn frozen_types_round_trip_every_payload() {
    let path = fixture_path(Fixture::V3);
    let n = frozen::round_trip_v1_tables(&path, Fixture::V3);
    let m = frozen::round_trip_v2_tables(&path, Fixture::V3);
    assert!(n > 20);
    assert_eq!(
        m, 5,
        "two endpoint_files records, one transaction in each of three states"
    );
    let components = frozen::round_trip_v3_components(&path);
    let mut want = fixture::expected(Fixture::V3).components;
    want.sort_by_key(|c| c.state.component());
    assert_eq!(components.len(), want.len());
    for ((_, frozen_c), want) in components.iter().zip(&want) {
        frozen::assert_same_checkpoint(want, frozen_c);
    }
    let rejected: Vec<&v3::RejectedRender> = components
        .iter()
        .filter_map(|(_, c)| match &c.state {
            v3::ComponentState::Scheduler(s) => Some(&s.rejected),
            _ => None,
        })
        .flatten()
        .collect();
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
    let (_d, path) = fixture_copy(Fixture::V3);
    set_schema_version(&path, 99);
    let opts = JournalOptions::new(&path);
    for policy in [Policy::Refuse, Policy::Migrate] {
        match haptic_migrations::open(&opts, policy) {
            Err(MigrateError::SchemaTooNew {
                found, supported, ..
            }) => assert_eq!((found, supported), (99, 3)),
            other => panic!("expected SchemaTooNew, got {other:?}"),
        }
    }
    let err = haptic_migrations::migrate(&opts).unwrap_err();
    assert!(matches!(
        err,
        MigrateError::SchemaTooNew {
            found: 99,
            supported: 3,
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
            supported: 3,
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
