//! What the fixtures' tests share: the rows of a table, and the checks every older committed
//! fixture goes through (refused without a migration, its plan, opened with `Policy::Migrate`,
//! its migrated copy read, a failing step, an undecodable scheduler checkpoint).

use std::path::{Path, PathBuf};

use haptic_journal::redb::{self, ReadableTable};
use haptic_journal::*;
use haptic_migrations::{MigrateError, Plan, Policy, StepError, v3};

use crate::fixture::{self, Fixture};
use crate::fixture_v1::{
    SCHEDULER, raw_records, scheduler_record, schema_version_of, set_scheduler_record,
};
use crate::frozen;
use crate::{fixture_copy, fixture_path};

/// Every row of table `def` of `rtx`, in key order, as `row` maps it; the error when the table
/// does not open (it does not exist, or has other key or value types).
pub fn try_rows<K, V, R>(
    rtx: &redb::ReadTransaction,
    def: redb::TableDefinition<K, V>,
    mut row: impl FnMut(K::SelfType<'_>, V::SelfType<'_>) -> R,
) -> Result<Vec<R>, redb::TableError>
where
    K: redb::Key + 'static,
    V: redb::Value + 'static,
{
    let table = rtx.open_table(def)?;
    Ok(table
        .iter()
        .unwrap()
        .map(|r| {
            let (k, v) = r.unwrap();
            row(k.value(), v.value())
        })
        .collect())
}

/// A row of [`byte_rows`]: the key's text and the value, raw.
pub type Row = (String, Vec<u8>);

/// Every row of the table `def` of `rtx` (which must open; its values are bytes, an envelope in
/// every table but `meta`), in key order: `key`'s text of its key and the value, raw.
pub fn byte_rows<K: redb::Key + 'static>(
    rtx: &redb::ReadTransaction,
    def: redb::TableDefinition<K, &'static [u8]>,
    key: impl Fn(K::SelfType<'_>) -> String,
) -> Vec<Row> {
    try_rows(rtx, def, |k, v| (key(k), v.to_vec())).unwrap()
}

/// A copy of the committed fixture `f` (at schema `f.version()`, older than this build's 4) is
/// refused without a migration and nothing is written: `open` with `Policy::Refuse`,
/// read-write and read-only, and a read-only `open` with `Policy::Migrate` (a read-only open
/// never migrates, whatever the policy) fail with `SchemaTooOld` naming both versions, and so
/// does the controller's own open (`Journal::open`), typed. Returns the copy and the
/// read-write refusals (`open`'s and `Journal::open`'s), for the caller's checks of their text.
pub fn assert_refused_without_a_migration(
    f: Fixture,
) -> (tempfile::TempDir, PathBuf, MigrateError, OpenError) {
    let version = f.version();
    let (dir, path) = fixture_copy(f);
    let before = raw_records(&path);
    let opts = JournalOptions::new(&path);
    let mut refusals = Vec::new();
    for o in [opts.clone(), opts.clone().read_only(true)] {
        match haptic_migrations::open(&o, Policy::Refuse) {
            Err(e @ MigrateError::SchemaTooOld { .. }) => {
                let MigrateError::SchemaTooOld {
                    found, supported, ..
                } = &e
                else {
                    unreachable!()
                };
                assert_eq!((*found, *supported), (version, 4));
                refusals.push(e);
            }
            other => panic!("expected SchemaTooOld, got {other:?}"),
        }
    }
    assert!(matches!(
        haptic_migrations::open(&opts.clone().read_only(true), Policy::Migrate),
        Err(MigrateError::SchemaTooOld {
            found,
            supported: 4,
            ..
        }) if found == version
    ));
    let journal = match Journal::open(&opts) {
        Err(e @ OpenError::SchemaTooOld { .. }) => {
            assert!(matches!(
                e,
                OpenError::SchemaTooOld {
                    found,
                    supported: 4,
                    ..
                } if found == version
            ));
            e
        }
        other => panic!("expected OpenError::SchemaTooOld, got {other:?}"),
    };
    assert_eq!(raw_records(&path), before, "a refusal wrote");
    assert_eq!(schema_version_of(&path), Some(version));
    (dir, path, refusals.swap_remove(0), journal)
}

/// The plan of the committed fixture `f` with the production steps: from schema `found` to
/// `target`, through the steps named `names`, in order. Returns it.
pub fn assert_plan(f: Fixture, (found, target): (u32, u32), names: &[&str]) -> Plan {
    let p = haptic_migrations::plan(
        &JournalOptions::new(fixture_path(f)),
        haptic_migrations::STEPS,
    )
    .unwrap();
    assert_eq!((p.found, p.target), (found, target));
    let got: Vec<&str> = p.steps.iter().map(|s| s.name).collect();
    assert_eq!(got, names);
    p
}

/// A copy of the committed fixture `f` opened with `Policy::Migrate`: upgraded to schema 4,
/// then opened with every record of `f` ([`fixture::assert_matches`]). Returns the copy's
/// directory, the journal and the time window the open (with its migration) ran in.
pub fn open_with_policy_migrate(
    f: Fixture,
) -> (tempfile::TempDir, Journal, (UnixMillis, UnixMillis)) {
    let (dir, path) = fixture_copy(f);
    let from = fixture::now();
    let j = haptic_migrations::open(&JournalOptions::new(&path), Policy::Migrate).unwrap();
    let to = fixture::now();
    assert_eq!(j.meta().unwrap().schema_version, 4);
    fixture::assert_matches(&j, f);
    (dir, j, (from, to))
}

/// A copy of the committed fixture `f` migrated to schema 4 at `path` reads: the frozen types
/// of each schema still describe every record (`v1` for the schema-1 tables, `v2` for the
/// `v2_records` of the schema-2 tables, `v4` for the three checkpoints); this build opens it
/// (verify on open) read-write with every record of `f` and the checkpoints the frozen types
/// read, then (after `check` of that journal) read-only with every record of `f`.
pub fn assert_migrated_copy_reads(
    path: &Path,
    f: Fixture,
    v2_records: usize,
    check: impl FnOnce(&Journal),
) {
    frozen::round_trip_v1_tables(path, f);
    assert_eq!(frozen::round_trip_v2_tables(path, f), v2_records);
    let components = frozen::round_trip_v4_components(path);
    assert_eq!(components.len(), 3);
    let j = Journal::open(&JournalOptions::new(path)).unwrap();
    fixture::assert_matches(&j, f);
    for (_, c) in &components {
        let got = j
            .component_checkpoint(c.state.component())
            .unwrap()
            .unwrap();
        frozen::assert_same_checkpoint(&got, c);
    }
    check(&j);
    drop(j);
    let j = Journal::open(&JournalOptions::new(path).read_only(true)).unwrap();
    fixture::assert_matches(&j, f);
}

/// The scheduler's checkpoint of `j` holds `n` quarantine entries, each with the one attempt
/// and the retry time in `[from, to]` that `v2_to_v3` gives it
/// ([`fixture::assert_migrated_quarantine`]).
pub fn assert_quarantine_migrated_in(j: &Journal, n: usize, (from, to): (UnixMillis, UnixMillis)) {
    let c = j.component_checkpoint(SCHEDULER).unwrap().unwrap();
    assert_eq!(fixture::quarantine_of(&c).len(), n);
    fixture::assert_migrated_quarantine(&c, from, to);
}

/// A step that fails rolls its transaction back: a copy of the committed fixture `f` that
/// (against every rule) already has a table `table` of another type, which the next step,
/// `step`, creates, fails to migrate (the error names the step and the version the file stays
/// at) and stays at schema `f.version()`, unchanged.
pub fn assert_a_failing_step_leaves_the_file(f: Fixture, table: &str, step: &str) {
    let version = f.version();
    let (_d, path) = fixture_copy(f);
    {
        let db = redb::Database::open(&path).unwrap();
        let txn = db.begin_write().unwrap();
        let bad: redb::TableDefinition<u64, u64> = redb::TableDefinition::new(table);
        txn.open_table(bad).unwrap().insert(1, 2).unwrap();
        txn.commit().unwrap();
    }
    let before = raw_records(&path);
    match haptic_migrations::migrate(&JournalOptions::new(&path)) {
        Err(e @ MigrateError::Step { .. }) => {
            let text = e.to_string();
            assert!(
                text.contains(step) && text.contains(&format!("unchanged at version {version}")),
                "{text}"
            );
        }
        other => panic!("expected a failed step, got {other:?}"),
    }
    assert_eq!(schema_version_of(&path), Some(version));
    assert_eq!(
        raw_records(&path),
        before,
        "the failed step left something behind"
    );
}

/// The payload of the scheduler's checkpoint of the committed fixture `f`.
pub fn scheduler_payload(f: Fixture) -> Vec<u8> {
    let good = scheduler_record(&fixture_path(f)).unwrap();
    codec::open(&good).unwrap().payload.to_vec()
}

/// A scheduler checkpoint that does not decode at the schema `from` of the committed fixture
/// `f` fails the step `name` (`from` -> `to`), typed (`StepError::Undecodable` of
/// `component_state`, the scheduler's key, `from`): the file stays at schema `from`,
/// unchanged. Each of: not an envelope, a payload that is no checkpoint, `f`'s good payload
/// under another kind, and `more`.
pub fn assert_undecodable_scheduler_checkpoints_fail_the_step(
    f: Fixture,
    (name, from, to): (&str, u32, u32),
    more: Vec<(&str, Vec<u8>)>,
) {
    let mut records = vec![
        ("bad envelope", b"not an envelope".to_vec()),
        (
            "bad payload",
            codec::seal(
                v3::ComponentCheckpoint::RECORD_KIND,
                UnixMillis(1),
                Term(1),
                &[9, 9, 9],
            ),
        ),
        (
            "a good payload under another kind",
            codec::seal(
                "state.endpoint-applied",
                UnixMillis(1),
                Term(1),
                &scheduler_payload(f),
            ),
        ),
    ];
    records.extend(more);
    for (what, record) in records {
        let (_d, path) = fixture_copy(f);
        set_scheduler_record(&path, Some(&record));
        let before = raw_records(&path);
        match haptic_migrations::migrate(&JournalOptions::new(&path)) {
            Err(e @ MigrateError::Step { .. }) => {
                let text = e.to_string();
                let MigrateError::Step {
                    name: got,
                    from: got_from,
                    to: got_to,
                    source,
                    ..
                } = e
                else {
                    unreachable!()
                };
                assert_eq!((got, got_from, got_to), (name, from, to), "{what}");
                assert!(
                    matches!(
                        *source,
                        StepError::Undecodable {
                            table: "component_state",
                            ref key,
                            version,
                        } if key == SCHEDULER && version == from
                    ),
                    "{what}: {source:?}"
                );
                assert!(
                    text.contains(&format!("unchanged at version {from}")),
                    "{what}: {text}"
                );
            }
            other => panic!("{what}: expected a failed step, got {other:?}"),
        }
        assert_eq!(schema_version_of(&path), Some(from), "{what}");
        assert_eq!(raw_records(&path), before, "{what}: the failed step wrote");
    }
}
