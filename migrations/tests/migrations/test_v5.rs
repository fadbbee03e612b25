//! Feature `test-v5`: the test-only v4 -> v5 step after the real chain migrates a copy of each
//! fixture, and a crash in the middle of it leaves the file at v4, intact (with the real
//! `v1_to_v2`, `v2_to_v3` and `v3_to_v4` of the same run committed).
//!
//! The crashing child is this test binary, re-executed with `HAPTIC_MIGRATIONS_CHILD=<file>` and
//! `CRASH_AT=migrations::after_test_v5_half_rewritten`, running only `test_v5::child_migrate`.

use std::os::unix::process::ExitStatusExt;
use std::process::Command;

use haptic_journal::redb::{self, ReadableDatabase, ReadableTableMetadata};
use haptic_journal::*;
use haptic_migrations::test_v5::{CRASH_POINT, EVENTS_V5, STEPS, V5Event};
use haptic_migrations::{MigrateError, Policy, v4};

use crate::fixture::{self, Fixture};
use crate::fixture_copy;
use crate::shared::try_rows;

const CHILD_ENV: &str = "HAPTIC_MIGRATIONS_CHILD";

/// Every envelope table's raw `(key, value)` pairs plus blob counts and meta: the file's whole
/// content, read by this build (schema 4). The scheduler's checkpoint is shown decoded with its
/// quarantine entries' `next_retry_at` blanked: an older fixture gets the time `v2_to_v3` ran,
/// which differs between two migrations of it.
fn snapshot(path: &std::path::Path) -> Vec<String> {
    let j = Journal::open(&JournalOptions::new(path).read_only(true)).unwrap();
    let mut out = Vec::new();
    for t in tables::ALL_TABLES {
        if *t == "blob_refs" {
            continue;
        }
        for (k, v) in j.raw_table(t, None, usize::MAX).unwrap() {
            if *t == "component_state" && k == RecordKey::Text("deployment-scheduler".into()) {
                let raw = codec::open(&v).unwrap();
                let mut c: v4::ComponentCheckpoint = v4::decode(raw.payload).unwrap();
                if let v4::ComponentState::Scheduler(s) = &mut c.state {
                    for r in &mut s.rejected {
                        r.next_retry_at = v4::UnixMillis(0);
                    }
                }
                out.push(format!("{t} {k} {:?} {c:?}", raw.header()));
            } else {
                out.push(format!("{t} {k} {}", hex::encode(v)));
            }
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
    try_rows(&rtx, v4::tables::EVENTS, |k, v| {
        (k, codec::open(v).unwrap().payload.to_vec())
    })
    .unwrap()
}

/// The number of rows of table `def` of `rtx` (which must open).
fn table_len<K: redb::Key + 'static, V: redb::Value + 'static>(
    rtx: &redb::ReadTransaction,
    def: redb::TableDefinition<K, V>,
) -> u64 {
    rtx.open_table(def).unwrap().len().unwrap()
}

/// The steps the test chain runs on fixture `f`.
fn names(f: Fixture) -> &'static [&'static str] {
    match f {
        Fixture::V1 => &["v1_to_v2", "v2_to_v3", "v3_to_v4", "test_v4_to_v5"],
        Fixture::V2 => &["v2_to_v3", "v3_to_v4", "test_v4_to_v5"],
        Fixture::V3 => &["v3_to_v4", "test_v4_to_v5"],
        Fixture::V4 => &["test_v4_to_v5"],
    }
}

#[test]
fn v4_to_v5_migrates_a_copy_of_each_fixture() {
    for f in Fixture::ALL {
        let (_d, path) = fixture_copy(f);
        let before = events_payloads(&path);
        assert_eq!(before.len(), fixture::expected(f).events.len());
        let opts = JournalOptions::new(&path);
        // Refused unless allowed (never silent).
        match haptic_migrations::open_with(&opts, Policy::Refuse, STEPS) {
            Err(MigrateError::SchemaTooOld {
                found, supported, ..
            }) => assert_eq!((found, supported), (f.version(), 5), "{f:?}"),
            other => panic!("{f:?}: expected SchemaTooOld, got {other:?}"),
        }
        let (_d2, other) = fixture_copy(f);
        // Allowed: migrated (logged), then this build's schema-4 journal refuses the v5 file.
        match haptic_migrations::open_with(&JournalOptions::new(&other), Policy::Migrate, STEPS) {
            Err(MigrateError::SchemaTooNew {
                found, supported, ..
            }) => assert_eq!((found, supported), (5, 4)),
            other => panic!("{f:?}: expected SchemaTooNew after migrating, got {other:?}"),
        }
        let plan = haptic_migrations::plan(&JournalOptions::new(&other), STEPS).unwrap();
        assert_eq!((plan.found, plan.steps.len()), (5, 0));
        let plan = haptic_migrations::plan(&opts, STEPS).unwrap();
        let got: Vec<&str> = plan.steps.iter().map(|s| s.name).collect();
        assert_eq!(got, names(f));
        let m = haptic_migrations::migrate_with(&opts, STEPS).unwrap();
        assert_eq!((m.from, m.to), (f.version(), 5));
        assert_eq!(m.applied, names(f));
        // Idempotent.
        let again = haptic_migrations::migrate_with(&opts, STEPS).unwrap();
        assert!(again.applied.is_empty());
        // The file is wholly schema 5: version bumped, events moved, old table gone, the
        // schema-2 and schema-4 tables still there.
        let db = redb::Builder::new().open_read_only(&path).unwrap();
        let rtx = db.begin_read().unwrap();
        assert_eq!(read_schema_version(&rtx).unwrap(), Some(5));
        assert!(rtx.open_table(v4::tables::EVENTS).is_err());
        assert_eq!(
            table_len(&rtx, v4::tables::POD_HISTORY),
            fixture::expected(f).history.len() as u64
        );
        assert_eq!(
            table_len(&rtx, v4::tables::ENDPOINT_TRANSACTION),
            fixture::expected(f).transactions.len() as u64
        );
        let t = rtx.open_table(EVENTS_V5).unwrap();
        assert_eq!(t.len().unwrap(), before.len() as u64);
        let exp = fixture::expected(f);
        for (seq, payload) in &before {
            let v = t.get(*seq).unwrap().unwrap();
            let rec: V5Event = v4::decode(v.value()).unwrap();
            assert_eq!(&v4::encode(&rec.event).unwrap(), payload, "seq {seq}");
            assert_eq!(
                rec.kind,
                exp.events[(*seq - 1) as usize].kind().as_str(),
                "seq {seq}"
            );
        }
        drop(t);
        drop(rtx);
        drop(db);
        // This build's journal (schema 4) refuses the v5 file with a typed error.
        assert!(matches!(
            Journal::open(&opts),
            Err(OpenError::SchemaTooNew {
                found: 5,
                supported: 4,
                ..
            })
        ));
    }
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

/// Runs the test chain on `path` in a child that aborts at [`CRASH_POINT`].
fn crash_child(path: &std::path::Path) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "test_v5::child_migrate",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(CHILD_ENV, path)
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
}

#[test]
fn crash_in_the_middle_of_the_step_leaves_the_file_at_v4_intact() {
    for f in Fixture::ALL {
        let (_d, path) = fixture_copy(f);
        // What the file holds at v4: the fixture itself, or an older fixture migrated by the
        // real chain (a second copy).
        let (_d2, reference) = fixture_copy(f);
        haptic_migrations::migrate(&JournalOptions::new(&reference)).unwrap();
        let before = snapshot(&reference);
        let from = fixture::now();
        crash_child(&path);
        let to = fixture::now();
        // At schema 4 (an older fixture: the real steps committed before the crash); verify
        // passes on open (verify_on_open); every record unchanged.
        let j = Journal::open(&JournalOptions::new(&path)).unwrap();
        assert_eq!(j.meta().unwrap().schema_version, 4, "{f:?}");
        fixture::assert_matches(&j, f);
        if f.version() < 3 {
            let c = j
                .component_checkpoint("deployment-scheduler")
                .unwrap()
                .unwrap();
            fixture::assert_migrated_quarantine(&c, from, to);
        }
        drop(j);
        assert_eq!(snapshot(&path), before, "{f:?}");
        {
            let db = redb::Builder::new().open_read_only(&path).unwrap();
            let rtx = db.begin_read().unwrap();
            assert!(rtx.open_table(EVENTS_V5).is_err(), "no half-written table");
        }
        // The step runs to the end once the crash point is disarmed.
        let m = haptic_migrations::migrate_with(&JournalOptions::new(&path), STEPS).unwrap();
        assert_eq!((m.from, m.to), (4, 5));
        assert_eq!(m.applied, vec!["test_v4_to_v5"]);
    }
}
