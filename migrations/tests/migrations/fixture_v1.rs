//! The committed schema-1 fixture opens with the current code and holds every record it should.

use haptic_journal::redb::{self, ReadableDatabase, ReadableTable};
use haptic_journal::*;
use haptic_migrations::{MigrateError, Policy, v1};

use crate::fixture;
use crate::{fixture_copy, fixture_path};

/// Writes `fixtures/v1.redb` anew. Run by hand (see main.rs); the normal run never rewrites it.
#[test]
#[ignore = "rewrites the committed fixture; run by hand when schema 1 changes"]
fn regenerate_v1_fixture() {
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path().join("v1.redb");
    {
        let j = Journal::open(&JournalOptions::new(&tmp).trim_every_commits(0)).unwrap();
        fixture::build(&j);
        fixture::assert_matches(&j);
        j.compact().unwrap();
    }
    std::fs::copy(&tmp, fixture_path()).unwrap();
}

#[test]
fn fixture_builder_writes_what_expected_describes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fresh.redb");
    let j = Journal::open(&JournalOptions::new(&path).trim_every_commits(0)).unwrap();
    fixture::build(&j);
    fixture::assert_matches(&j);
}

#[test]
fn committed_v1_fixture_opens_and_every_record_verifies() {
    let (_d, path) = fixture_copy();
    let j = haptic_migrations::open(&JournalOptions::new(&path), Policy::Refuse)
        .expect("schema 1 opens without a migration");
    fixture::assert_matches(&j);
    drop(j);
    // Read-only, as haptic-journalctl opens it.
    let j = Journal::open(&JournalOptions::new(fixture_path()).read_only(true)).unwrap();
    fixture::assert_matches(&j);
}

#[test]
fn committed_v1_fixture_needs_no_step() {
    let p = haptic_migrations::plan(
        &JournalOptions::new(fixture_path()),
        haptic_migrations::STEPS,
    )
    .unwrap();
    assert_eq!((p.found, p.target), (1, 1));
    assert!(p.steps.is_empty());
    let (_d, path) = fixture_copy();
    let m = haptic_migrations::migrate(&JournalOptions::new(&path)).unwrap();
    assert_eq!((m.from, m.to), (1, 1));
    assert!(m.applied.is_empty());
}

/// The frozen `v1` types describe every stored payload exactly: decode, re-encode, same bytes.
#[test]
fn frozen_types_round_trip_every_payload() {
    fn round_trip<T: serde::Serialize + serde::de::DeserializeOwned>(
        table: &str,
        key: &str,
        envelope: &[u8],
    ) {
        let raw = codec::open(envelope).unwrap_or_else(|e| panic!("{table} {key}: {e}"));
        let v: T = v1::decode(raw.payload)
            .unwrap_or_else(|| panic!("{table} {key} does not decode as v1"));
        assert_eq!(
            v1::encode(&v).unwrap(),
            raw.payload,
            "{table} {key}: v1 types re-encode differently"
        );
    }
    let db = redb::Builder::new().open_read_only(fixture_path()).unwrap();
    let rtx = db.begin_read().unwrap();
    let mut n = 0;
    for r in rtx.open_table(v1::tables::EVENTS).unwrap().iter().unwrap() {
        let (k, v) = r.unwrap();
        round_trip::<v1::Event>("events", &k.value().to_string(), v.value());
        n += 1;
    }
    assert_eq!(n, fixture::expected().events.len());
    for name in v1::tables::FIFO {
        let def: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new(name);
        for r in rtx.open_table(def).unwrap().iter().unwrap() {
            let (k, v) = r.unwrap();
            round_trip::<v1::WorkRecord>(name, &k.value().to_string(), v.value());
            n += 1;
        }
    }
    for name in v1::tables::BY_POD {
        let def: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new(name);
        for r in rtx.open_table(def).unwrap().iter().unwrap() {
            let (k, v) = r.unwrap();
            round_trip::<v1::WorkRecord>(name, k.value(), v.value());
            n += 1;
        }
    }
    for name in v1::tables::SLOTS {
        let def: redb::TableDefinition<(), &[u8]> = redb::TableDefinition::new(name);
        for r in rtx.open_table(def).unwrap().iter().unwrap() {
            let (_, v) = r.unwrap();
            round_trip::<v1::WorkRecord>(name, "slot", v.value());
            n += 1;
        }
    }
    for r in rtx
        .open_table(v1::tables::ENDPOINT_APPLIED)
        .unwrap()
        .iter()
        .unwrap()
    {
        let (k, v) = r.unwrap();
        round_trip::<v1::EndpointApplied>("endpoint_applied", k.value(), v.value());
    }
    for r in rtx
        .open_table(v1::tables::PUBLISHED_CHECKPOINT)
        .unwrap()
        .iter()
        .unwrap()
    {
        let (k, v) = r.unwrap();
        round_trip::<v1::PublishedCheckpoint>("published_checkpoint", k.value(), v.value());
    }
    let mut components = 0;
    for r in rtx
        .open_table(v1::tables::COMPONENT_STATE)
        .unwrap()
        .iter()
        .unwrap()
    {
        let (k, v) = r.unwrap();
        round_trip::<v1::ComponentCheckpoint>("component_state", k.value(), v.value());
        components += 1;
    }
    assert_eq!(components, 3, "a checkpoint of every component");
    let mut renders = 0;
    for r in rtx.open_table(v1::tables::BLOBS).unwrap().iter().unwrap() {
        let (_, v) = r.unwrap();
        let raw = codec::open(v.value()).unwrap();
        if raw.kind == "blob.render" {
            round_trip::<v1::Render>("blobs", "render", v.value());
            renders += 1;
        }
    }
    assert_eq!(renders, 2);
    assert!(n > 20);
}

fn set_schema_version(path: &std::path::Path, v: u32) {
    let db = redb::Database::open(path).unwrap();
    let txn = db.begin_write().unwrap();
    write_schema_version(&txn, v).unwrap();
    txn.commit().unwrap();
}

#[test]
fn schema_too_new_is_refused_with_both_versions() {
    let (_d, path) = fixture_copy();
    set_schema_version(&path, 99);
    let opts = JournalOptions::new(&path);
    for policy in [Policy::Refuse, Policy::Migrate] {
        match haptic_migrations::open(&opts, policy) {
            Err(MigrateError::SchemaTooNew {
                found, supported, ..
            }) => assert_eq!((found, supported), (99, 1)),
            other => panic!("expected SchemaTooNew, got {other:?}"),
        }
    }
    let err = haptic_migrations::migrate(&opts).unwrap_err();
    assert!(matches!(
        err,
        MigrateError::SchemaTooNew {
            found: 99,
            supported: 1,
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
            supported: 1,
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
