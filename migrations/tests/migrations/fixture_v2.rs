//! The committed schema-2 fixture opens with the current code, needs no step and holds every
//! record it should; the frozen v1 + v2 types describe it.

use haptic_journal::redb;
use haptic_journal::*;
use haptic_migrations::{MigrateError, Policy};

use crate::fixture::{self, Fixture};
use crate::frozen;
use crate::{fixture_copy, fixture_path};

/// Writes `fixtures/v2.redb` anew. Run by hand (see main.rs); the normal run never rewrites it.
#[test]
#[ignore = "rewrites the committed fixture; run by hand when schema 2 changes before release"]
fn regenerate_v2_fixture() {
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path().join("v2.redb");
    {
        let j = Journal::open(&JournalOptions::new(&tmp).trim_every_commits(0)).unwrap();
        fixture::build(&j, Fixture::V2);
        fixture::assert_matches(&j, Fixture::V2);
        j.compact().unwrap();
    }
    std::fs::copy(&tmp, fixture_path(Fixture::V2)).unwrap();
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
fn committed_v2_fixture_opens_and_every_record_verifies() {
    let (_d, path) = fixture_copy(Fixture::V2);
    let j = haptic_migrations::open(&JournalOptions::new(&path), Policy::Refuse)
        .expect("schema 2 opens without a migration");
    fixture::assert_matches(&j, Fixture::V2);
    drop(j);
    // Read-only, as haptic-journalctl opens it.
    let j = Journal::open(&JournalOptions::new(fixture_path(Fixture::V2)).read_only(true)).unwrap();
    fixture::assert_matches(&j, Fixture::V2);
}

#[test]
fn committed_v2_fixture_needs_no_step() {
    let p = haptic_migrations::plan(
        &JournalOptions::new(fixture_path(Fixture::V2)),
        haptic_migrations::STEPS,
    )
    .unwrap();
    assert_eq!((p.found, p.target), (2, 2));
    assert!(p.steps.is_empty());
    let (_d, path) = fixture_copy(Fixture::V2);
    let before = crate::fixture_v1::raw_records(&path);
    let m = haptic_migrations::migrate(&JournalOptions::new(&path)).unwrap();
    assert_eq!((m.from, m.to), (2, 2));
    assert!(m.applied.is_empty());
    assert_eq!(
        crate::fixture_v1::raw_records(&path),
        before,
        "an up-to-date file was changed"
    );
}

/// The frozen types describe every stored payload exactly: the schema-1 tables with `v1`, the
/// schema-2 tables with `v2` (decode, re-encode, same bytes; and the same values the journal
/// wrote).
#[test]
fn frozen_types_round_trip_every_payload() {
    let n = frozen::round_trip_v1_tables(&fixture_path(Fixture::V2), Fixture::V2);
    let m = frozen::round_trip_v2_tables(&fixture_path(Fixture::V2), Fixture::V2);
    assert!(n > 20);
    assert_eq!(
        m, 5,
        "two endpoint_files records, one transaction in each of three states"
    );
}

fn set_schema_version(path: &std::path::Path, v: u32) {
    let db = redb::Database::open(path).unwrap();
    let txn = db.begin_write().unwrap();
    write_schema_version(&txn, v).unwrap();
    txn.commit().unwrap();
}

#[test]
fn schema_too_new_is_refused_with_both_versions() {
    let (_d, path) = fixture_copy(Fixture::V2);
    set_schema_version(&path, 99);
    let opts = JournalOptions::new(&path);
    for policy in [Policy::Refuse, Policy::Migrate] {
        match haptic_migrations::open(&opts, policy) {
            Err(MigrateError::SchemaTooNew {
                found, supported, ..
            }) => assert_eq!((found, supported), (99, 2)),
            other => panic!("expected SchemaTooNew, got {other:?}"),
        }
    }
    let err = haptic_migrations::migrate(&opts).unwrap_err();
    assert!(matches!(
        err,
        MigrateError::SchemaTooNew {
            found: 99,
            supported: 2,
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
            supported: 2,
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
