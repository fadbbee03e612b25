//! The committed schema-1 fixture (frozen): refused without a migration, migrated by
//! `v1_to_v2` into schema 2 with nothing but the two new (empty) tables and the version changed,
//! then by `v2_to_v3` into schema 3 with nothing but the scheduler's checkpoint changed, then by
//! `v3_to_v4` into schema 4 with nothing but the new (empty) `pod_history` and the scheduler's
//! checkpoint in the schema-4 shape (no previous render, no rollback hold); this build opens the
//! result. Also the helpers the other fixtures' tests share: the raw records of a file, the
//! scheduler's record, and what `v3_to_v4` must have done ([`assert_v3_to_v4`]).

use haptic_journal::redb::{self, ReadableDatabase, ReadableTableMetadata};
use haptic_journal::*;
use haptic_migrations::{V1_TO_V2, V2_TO_V3, v1, v2, v3, v4};

use crate::fixture::{self, Fixture};
use crate::frozen;
use crate::shared::{self, Row, byte_rows, try_rows};
use crate::{fixture_copy, fixture_path};

/// Every record of every schema-1 table, raw (`table key-hex value-hex`), plus meta but its
/// `schema_version`, plus the schema-2 tables and `pod_history` (schema 4) when the file has
/// them; and the names of the
/// file's tables. The file's logical content: a read-write open rewrites redb's own pages
/// (header, allocator state) even when nothing is committed, so whole files are not compared.
pub fn raw_records(path: &std::path::Path) -> (Vec<String>, Vec<String>) {
    let db = redb::Builder::new().open_read_only(path).unwrap();
    let rtx = db.begin_read().unwrap();
    let text = |k: &str| k.to_owned();
    let bytes = |v: &[u8]| hex::encode(v);
    let num = |k: u64| k.to_string();
    let dump = |name: &str, rows: Vec<Row>| -> Vec<String> {
        rows.into_iter()
            .map(|(k, v)| format!("{name} {k} {}", hex::encode(v)))
            .collect()
    };
    let mut meta = byte_rows(&rtx, v1::tables::META, text);
    meta.retain(|(k, _)| k != "schema_version");
    let mut out = dump("meta", meta);
    out.extend(dump("events", byte_rows(&rtx, v1::tables::EVENTS, num)));
    out.extend(dump("blobs", byte_rows(&rtx, v1::tables::BLOBS, bytes)));
    let refs = try_rows(&rtx, v1::tables::BLOB_REFS, |k, (a, b)| {
        format!("blob_refs {} {a}/{b}", bytes(k))
    });
    out.extend(refs.unwrap());
    for name in v1::tables::FIFO {
        let def: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new(name);
        out.extend(dump(name, byte_rows(&rtx, def, num)));
    }
    for name in v1::tables::BY_POD {
        let def: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new(name);
        out.extend(dump(name, byte_rows(&rtx, def, text)));
    }
    for name in v1::tables::SLOTS {
        let def: redb::TableDefinition<(), &[u8]> = redb::TableDefinition::new(name);
        out.extend(dump(name, byte_rows(&rtx, def, |()| "slot".to_owned())));
    }
    for (name, def) in [
        ("endpoint_applied", v1::tables::ENDPOINT_APPLIED),
        ("published_checkpoint", v1::tables::PUBLISHED_CHECKPOINT),
        ("component_state", v1::tables::COMPONENT_STATE),
    ] {
        out.extend(dump(name, byte_rows(&rtx, def, text)));
    }
    // The tables a later schema added, when the file has them.
    for (name, rows, schema) in [
        (
            "endpoint_files",
            try_rows(&rtx, v2::tables::ENDPOINT_FILES, |k, v| {
                (text(k), v.to_vec())
            }),
            2,
        ),
        (
            "endpoint_transaction",
            try_rows(&rtx, v2::tables::ENDPOINT_TRANSACTION, |k, v| {
                (text(k), v.to_vec())
            }),
            2,
        ),
        (
            "pod_history",
            try_rows(&rtx, v4::tables::POD_HISTORY, |(pod, seq), v| {
                (format!("{pod}#{seq}"), v.to_vec())
            }),
            4,
        ),
    ] {
        match rows {
            Ok(rows) => out.extend(dump(name, rows)),
            Err(redb::TableError::TableDoesNotExist(_)) => {}
            Err(e) => out.push(format!("{name} is not a schema-{schema} table: {e}")),
        }
    }
    let mut names: Vec<String> = rtx
        .list_tables()
        .unwrap()
        .map(|h| redb::TableHandle::name(&h).to_owned())
        .collect();
    names.sort();
    (out, names)
}

/// `raw` of a file before `v3_to_v4` as it must be after it: the same records, and the tables
/// schema 4 adds (empty) among the names.
pub fn plus_v4_tables(
    (records, mut names): (Vec<String>, Vec<String>),
) -> (Vec<String>, Vec<String>) {
    names.extend(v4::tables::ADDED.iter().map(|t| (*t).to_owned()));
    names.sort();
    (records, names)
}

/// The `component_state` key of the scheduler's checkpoint.
pub const SCHEDULER: &str = "deployment-scheduler";

/// The prefix of the scheduler's checkpoint in [`raw_records`], the one record `v2_to_v3` and
/// `v3_to_v4` rewrite.
pub const SCHEDULER_RECORD: &str = "component_state deployment-scheduler ";

/// `records` of [`raw_records`] but the scheduler's checkpoint (asserting it is there once).
pub fn but_scheduler(mut records: Vec<String>) -> Vec<String> {
    let n = records.len();
    records.retain(|r| !r.starts_with(SCHEDULER_RECORD));
    assert_eq!(records.len() + 1, n, "one scheduler checkpoint");
    records
}

/// The scheduler's checkpoint record (an envelope) in `records` of [`raw_records`].
pub fn scheduler_in(records: &[String]) -> Option<Vec<u8>> {
    records
        .iter()
        .find_map(|r| r.strip_prefix(SCHEDULER_RECORD))
        .map(|v| hex::decode(v).unwrap())
}

/// The scheduler's checkpoint record of `path`, raw.
pub fn scheduler_record(path: &std::path::Path) -> Option<Vec<u8>> {
    let db = redb::Builder::new().open_read_only(path).unwrap();
    let rtx = db.begin_read().unwrap();
    let t = rtx.open_table(v1::tables::COMPONENT_STATE).unwrap();
    t.get(SCHEDULER).unwrap().map(|v| v.value().to_vec())
}

/// Replaces (or, with `None`, removes) the scheduler's checkpoint record of `path`, raw.
pub fn set_scheduler_record(path: &std::path::Path, value: Option<&[u8]>) {
    let db = redb::Database::open(path).unwrap();
    let txn = db.begin_write().unwrap();
    {
        let mut t = txn.open_table(v1::tables::COMPONENT_STATE).unwrap();
        match value {
            Some(v) => t.insert(SCHEDULER, v).unwrap(),
            None => t.remove(SCHEDULER).unwrap(),
        };
    }
    txn.commit().unwrap();
}

/// `record` (an envelope) decoded with the frozen `T`, and its header.
pub fn decode_record<T: serde::de::DeserializeOwned>(record: &[u8]) -> (RecordHeader, T) {
    let raw = codec::open(record).unwrap();
    (raw.header(), v1::decode(raw.payload).unwrap())
}

/// Asserts that `v3_to_v4` took a file whose [`raw_records`] were `at_v3` to `at_v4`: the empty
/// `pod_history` added and no other table; every record byte for byte but the scheduler's
/// checkpoint, which (when there is one) has the same envelope kind, accepted-at and term, and
/// decodes as schema 4 with every schema-3 field equal and `previous_validated` and `rollback`
/// `None`.
pub fn assert_v3_to_v4(at_v3: &(Vec<String>, Vec<String>), at_v4: &(Vec<String>, Vec<String>)) {
    assert_eq!(
        at_v4.1,
        plus_v4_tables((Vec::new(), at_v3.1.clone())).1,
        "v3_to_v4 adds pod_history only"
    );
    let Some(old_record) = scheduler_in(&at_v3.0) else {
        assert_eq!(at_v4.0, at_v3.0, "no scheduler checkpoint: nothing changes");
        return;
    };
    assert_eq!(
        but_scheduler(at_v4.0.clone()),
        but_scheduler(at_v3.0.clone()),
        "v3_to_v4 changed more than adding pod_history and the scheduler checkpoint"
    );
    let (old_header, old) = decode_record::<v3::ComponentCheckpoint>(&old_record);
    let (new_header, new) =
        decode_record::<v4::ComponentCheckpoint>(&scheduler_in(&at_v4.0).unwrap());
    assert_eq!(
        (new_header.kind, new_header.accepted_at, new_header.term),
        (old_header.kind, old_header.accepted_at, old_header.term),
        "the envelope keeps its kind, accepted_at and term"
    );
    let v4::ComponentState::Scheduler(s) = &new.state else {
        panic!("not a scheduler checkpoint: {new:?}")
    };
    assert_eq!((s.previous_validated, &s.rollback), (None, &None));
    assert_eq!(new, frozen::as_v4(&old), "every schema-3 field kept");
}

pub fn schema_version_of(path: &std::path::Path) -> Option<u32> {
    let db = redb::Builder::new().open_read_only(path).unwrap();
    read_schema_version(&db.begin_read().unwrap()).unwrap()
}

#[test]
fn committed_v1_fixture_is_refused_without_a_migration() {
    let (_d, path, refused, journal_refused) =
        shared::assert_refused_without_a_migration(Fixture::V1);
    let text = refused.to_string();
    assert!(
        text.contains(&path.display().to_string())
            && text.contains("haptic-journalctl migrate --write"),
        "names the file and the fix: {text}"
    );
    // The controller's own open (Journal::open) refuses it too, typed, and names the fix.
    assert!(
        journal_refused
            .to_string()
            .contains("haptic-journalctl migrate --write")
    );
}

#[test]
fn plan_lists_v1_to_v2_then_v2_to_v3_then_v3_to_v4() {
    let p = shared::assert_plan(Fixture::V1, (1, 4), &["v1_to_v2", "v2_to_v3", "v3_to_v4"]);
    assert_eq!((p.steps[0].from, p.steps[0].to), (1, 2));
    assert_eq!((p.steps[1].from, p.steps[1].to), (2, 3));
    assert_eq!((p.steps[2].from, p.steps[2].to), (3, 4));
}

#[test]
fn migrate_takes_a_copy_to_v2_then_v3_then_v4_and_changes_nothing_else() {
    let (_d, path) = fixture_copy(Fixture::V1);
    let (records, tables) = raw_records(&path);
    assert!(
        v2::tables::ADDED
            .iter()
            .all(|t| !tables.iter().any(|n| n == t)),
        "the v1 fixture has no schema-2 table: {tables:?}"
    );
    let opts = JournalOptions::new(&path);
    // v1_to_v2 alone first.
    let m = haptic_migrations::migrate_with(&opts, &[V1_TO_V2]).unwrap();
    assert_eq!((m.from, m.to), (1, 2));
    assert_eq!(m.applied, vec!["v1_to_v2"]);
    assert_eq!(schema_version_of(&path), Some(2));
    // Idempotent.
    let again = haptic_migrations::migrate_with(&opts, &[V1_TO_V2]).unwrap();
    assert_eq!((again.from, again.to), (2, 2));
    assert!(again.applied.is_empty());
    // Every schema-1 record byte for byte, meta but the version; the two new tables, empty.
    let (after, after_tables) = raw_records(&path);
    assert_eq!(after, records, "a v1 record changed");
    let mut want = tables.clone();
    want.extend(v2::tables::ADDED.iter().map(|t| (*t).to_owned()));
    want.sort();
    assert_eq!(after_tables, want);
    {
        let db = redb::Builder::new().open_read_only(&path).unwrap();
        let rtx = db.begin_read().unwrap();
        assert!(
            rtx.open_table(v2::tables::ENDPOINT_FILES)
                .unwrap()
                .is_empty()
                .unwrap()
        );
        assert!(
            rtx.open_table(v2::tables::ENDPOINT_TRANSACTION)
                .unwrap()
                .is_empty()
                .unwrap()
        );
    }
    // The frozen v1 types still describe every schema-1 record.
    frozen::round_trip_v1_tables(&path, Fixture::V1);
    // Then v2_to_v3: it changes the scheduler's checkpoint only.
    let from = fixture::now();
    let m = haptic_migrations::migrate_with(&opts, &[V1_TO_V2, V2_TO_V3]).unwrap();
    let to = fixture::now();
    assert_eq!((m.from, m.to), (2, 3));
    assert_eq!(m.applied, vec!["v2_to_v3"]);
    assert_eq!(schema_version_of(&path), Some(3));
    let (after, after_tables) = raw_records(&path);
    assert_eq!(
        but_scheduler(after.clone()),
        but_scheduler(records),
        "v2_to_v3 changed more than the scheduler checkpoint"
    );
    assert_eq!(after_tables, want, "v2_to_v3 adds or drops no table");
    // Then the rest of the production chain: v3_to_v4 adds the empty pod_history and rewrites
    // the scheduler's checkpoint only.
    let at_v3 = (after, after_tables);
    let m = haptic_migrations::migrate(&opts).unwrap();
    assert_eq!((m.from, m.to), (3, 4));
    assert_eq!(m.applied, vec!["v3_to_v4"]);
    assert_eq!(schema_version_of(&path), Some(4));
    assert_v3_to_v4(&at_v3, &raw_records(&path));
    // The frozen v1 types for the schema-1 tables, v2 for the (empty) schema-2 tables, v4 for
    // the checkpoints. This build opens it (verify on open), read-write and read-only; every v1
    // record is there, the quarantine entry retried at the migration's time.
    shared::assert_migrated_copy_reads(&path, Fixture::V1, 0, |j| {
        shared::assert_quarantine_migrated_in(j, 1, (from, to));
    });
}

#[test]
fn open_with_policy_migrate_upgrades_then_opens() {
    shared::open_with_policy_migrate(Fixture::V1);
}

/// A step that fails rolls its transaction back: the file stays at schema 1, unchanged. Here a
/// schema-1 file that (against every rule) already has an `endpoint_files` table of another type.
#[test]
fn a_failing_step_leaves_the_file_at_v1() {
    shared::assert_a_failing_step_leaves_the_file(Fixture::V1, "endpoint_files", "v1_to_v2");
}

/// The frozen `v1` types describe every stored payload exactly: decode, re-encode, same bytes.
#[test]
fn frozen_types_round_trip_every_payload() {
    frozen::round_trip_v1_tables(&fixture_path(Fixture::V1), Fixture::V1);
}
