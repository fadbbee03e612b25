//! Feature `test-v2`: the test-only v1 -> v2 step migrates a copy of the fixture, and a crash in
//! the middle of the step leaves the file at v1, intact.
//!
//! The crashing child is this test binary, re-executed with `HAPTIC_MIGRATIONS_CHILD=<file>` and
//! `CRASH_AT=migrations::after_test_v2_half_rewritten`, running only `test_v2::child_migrate`.

use std::os::unix::process::ExitStatusExt;
use std::process::Command;

use haptic_journal::redb::{self, ReadableDatabase, ReadableTable, ReadableTableMetadata};
use haptic_journal::*;
use haptic_migrations::test_v2::{CRASH_POINT, EVENTS_V2, STEPS, V2Event};
use haptic_migrations::{MigrateError, Policy, v1};

use crate::fixture;
use crate::fixture_copy;

const CHILD_ENV: &str = "HAPTIC_MIGRATIONS_CHILD";

/// Every envelope table's raw `(key, value)` pairs plus blob counts: the file's whole content.
fn snapshot(path: &std::path::Path) -> Vec<String> {
    let j = Journal::open(&JournalOptions::new(path).read_only(true)).unwrap();
    let mut out = Vec::new();
    for t in tables::ALL_TABLES {
        if *t == "blob_refs" {
            continue;
        }
        for (k, v) in j.raw_table(t, None, usize::MAX).unwrap() {
            out.push(format!("{t} {k} {}", hex::encode(v)));
        }
    }
    for (h, kind, size, c) in j.blobs().unwrap() {
        out.push(format!("{h} {kind:?} {size} {c:?}"));
    }
    out
}

fn events_payloads(path: &std::path::Path) -> Vec<(u64, Vec<u8>)> {
    let db = redb::Builder::new().open_read_only(path).unwrap();
    let rtx = db.begin_read().unwrap();
    let t = rtx.open_table(v1::tables::EVENTS).unwrap();
    t.iter()
        .unwrap()
        .map(|r| {
            let (k, v) = r.unwrap();
            let raw = codec::open(v.value()).unwrap();
            (k.value(), raw.payload.to_vec())
        })
        .collect()
}

#[test]
fn v1_to_v2_migrates_a_copy_of_the_fixture() {
    let (_d, path) = fixture_copy();
    let before = events_payloads(&path);
    assert_eq!(before.len(), fixture::expected().events.len());
    let opts = JournalOptions::new(&path);
    // Refused unless allowed (never silent).
    match haptic_migrations::open_with(&opts, Policy::Refuse, STEPS) {
        Err(MigrateError::SchemaTooOld {
            found, supported, ..
        }) => assert_eq!((found, supported), (1, 2)),
        other => panic!("expected SchemaTooOld, got {other:?}"),
    }
    let (_d2, other) = fixture_copy();
    // Allowed: migrated (logged), then this build's schema-1 journal refuses the v2 file.
    match haptic_migrations::open_with(&JournalOptions::new(&other), Policy::Migrate, STEPS) {
        Err(MigrateError::SchemaTooNew {
            found, supported, ..
        }) => assert_eq!((found, supported), (2, 1)),
        other => panic!("expected SchemaTooNew after migrating, got {other:?}"),
    }
    let plan = haptic_migrations::plan(&JournalOptions::new(&other), STEPS).unwrap();
    assert_eq!((plan.found, plan.steps.len()), (2, 0));
    let plan = haptic_migrations::plan(&opts, STEPS).unwrap();
    assert_eq!(plan.steps.len(), 1);
    let m = haptic_migrations::migrate_with(&opts, STEPS).unwrap();
    assert_eq!((m.from, m.to), (1, 2));
    assert_eq!(m.applied, vec!["test_v1_to_v2"]);
    // Idempotent.
    let again = haptic_migrations::migrate_with(&opts, STEPS).unwrap();
    assert!(again.applied.is_empty());
    // The file is wholly schema 2: version bumped, events moved, old table gone.
    let db = redb::Builder::new().open_read_only(&path).unwrap();
    let rtx = db.begin_read().unwrap();
    assert_eq!(read_schema_version(&rtx).unwrap(), Some(2));
    assert!(rtx.open_table(v1::tables::EVENTS).is_err());
    let t = rtx.open_table(EVENTS_V2).unwrap();
    assert_eq!(t.len().unwrap(), before.len() as u64);
    let exp = fixture::expected();
    for (seq, payload) in &before {
        let v = t.get(*seq).unwrap().unwrap();
        let rec: V2Event = v1::decode(v.value()).unwrap();
        assert_eq!(&v1::encode(&rec.event).unwrap(), payload, "seq {seq}");
        assert_eq!(
            rec.kind,
            exp.events[(*seq - 1) as usize].kind().as_str(),
            "seq {seq}"
        );
    }
    drop(t);
    drop(rtx);
    drop(db);
    // This build's journal (schema 1) refuses the v2 file with a typed error.
    assert!(matches!(
        Journal::open(&opts),
        Err(OpenError::SchemaTooNew {
            found: 2,
            supported: 1,
            ..
        })
    ));
}

/// Child mode: a no-op unless the env var names a file.
#[test]
fn child_migrate() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    let _ = haptic_migrations::migrate_with(&JournalOptions::new(path), STEPS);
    eprintln!("child finished without crashing");
}

#[test]
fn crash_in_the_middle_of_the_step_leaves_the_file_at_v1_intact() {
    let (_d, path) = fixture_copy();
    let before = snapshot(&path);
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "test_v2::child_migrate",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(CHILD_ENV, &path)
        .env("CRASH_AT", CRASH_POINT)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.signal(),
        Some(6),
        "child must die by SIGABRT: {:?} {stderr}",
        out.status
    );
    assert!(
        stderr.contains(&format!("crash_point fired: {CRASH_POINT}")),
        "{stderr}"
    );
    // Still schema 1; verify passes on open (verify_on_open); every record unchanged.
    let j = Journal::open(&JournalOptions::new(&path)).unwrap();
    assert_eq!(j.meta().unwrap().schema_version, 1);
    fixture::assert_matches(&j);
    drop(j);
    assert_eq!(snapshot(&path), before);
    {
        let db = redb::Builder::new().open_read_only(&path).unwrap();
        let rtx = db.begin_read().unwrap();
        assert!(rtx.open_table(EVENTS_V2).is_err(), "no half-written table");
    }
    // The step runs to the end once the crash point is disarmed.
    let m = haptic_migrations::migrate_with(&JournalOptions::new(&path), STEPS).unwrap();
    assert_eq!(m.to, 2);
}
