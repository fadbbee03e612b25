//! The committed schema-3 fixture (frozen): refused without a migration, migrated by `v3_to_v4`
//! into schema 4 with nothing but the new, empty `pod_history` table, the scheduler's checkpoint
//! in the schema-4 shape (no previous render, no rollback hold) and the version changed; the
//! frozen v1 + v2 + v3 types describe it.

use haptic_journal::redb::{self, ReadableDatabase, ReadableTableMetadata};
use haptic_journal::*;
use haptic_migrations::{v3, v4};

use crate::fixture::{self, Fixture};
use crate::fixture_v1::{SCHEDULER, assert_v3_to_v4, raw_records, schema_version_of};
use crate::frozen;
use crate::shared;
use crate::{fixture_copy, fixture_path};

#[test]
fn committed_v3_fixture_is_refused_without_a_migration() {
    shared::assert_refused_without_a_migration(Fixture::V3);
}

#[test]
fn plan_lists_v3_to_v4() {
    shared::assert_plan(Fixture::V3, (3, 4), &["v3_to_v4"]);
}

/// `v3_to_v4` adds `pod_history`, empty, and rewrites the scheduler's checkpoint in the schema-4
/// shape (every schema-3 field kept, no previous render, no rollback hold, the same envelope
/// header) and changes nothing else: every other record of every table and meta but the
/// version byte for byte, no other table added or dropped, no blob count moved; this build
/// opens the result (verify on open) and reads every v3 record.
#[test]
fn migrate_takes_a_copy_to_v4_adds_the_history_table_and_holds_no_rollback() {
    let (_d, path) = fixture_copy(Fixture::V3);
    let before = raw_records(&path);
    assert!(
        !before.1.iter().any(|t| t == "pod_history"),
        "the v3 fixture has no pod_history: {:?}",
        before.1
    );
    let opts = JournalOptions::new(&path);
    let m = haptic_migrations::migrate(&opts).unwrap();
    assert_eq!((m.from, m.to), (3, 4));
    assert_eq!(m.applied, vec!["v3_to_v4"]);
    assert_eq!(schema_version_of(&path), Some(4));
    // Idempotent.
    let again = haptic_migrations::migrate(&opts).unwrap();
    assert!(again.applied.is_empty());
    assert_v3_to_v4(&before, &raw_records(&path));
    {
        let db = redb::Builder::new().open_read_only(&path).unwrap();
        let rtx = db.begin_read().unwrap();
        assert!(
            rtx.open_table(v4::tables::POD_HISTORY)
                .unwrap()
                .is_empty()
                .unwrap()
        );
    }
    // The frozen types of each schema still describe every record; this build reads them.
    assert_eq!(frozen::round_trip_v4_history(&path, &[]), 0);
    shared::assert_migrated_copy_reads(&path, Fixture::V3, 5, |j| {
        let c = j.component_checkpoint(SCHEDULER).unwrap().unwrap();
        let s = fixture::scheduler_of(&c).unwrap();
        assert_eq!((s.previous_validated, &s.rollback), (None, &None));
        assert!(j.history().unwrap().is_empty());
    });
}

#[test]
fn open_with_policy_migrate_upgrades_then_opens() {
    shared::open_with_policy_migrate(Fixture::V3);
}

/// A step that fails rolls its transaction back: the file stays at schema 3, unchanged. Here a
/// schema-3 file that (against every rule) already has a `pod_history` table of another type.
#[test]
fn a_failing_step_leaves_the_file_at_v3() {
    shared::assert_a_failing_step_leaves_the_file(Fixture::V3, "pod_history", "v3_to_v4");
}

/// A scheduler checkpoint that does not decode as schema 3 fails the step, typed: the file
/// stays at schema 3, unchanged (no `pod_history` either: the one transaction rolled back).
#[test]
fn an_undecodable_scheduler_checkpoint_fails_the_step_at_v3() {
    let mut longer = shared::scheduler_payload(Fixture::V3);
    longer.extend([0, 0]);
    shared::assert_undecodable_scheduler_checkpoints_fail_the_step(
        Fixture::V3,
        ("v3_to_v4", 3, 4),
        vec![(
            "a schema-4 payload (trailing bytes for schema 3)",
            codec::seal(
                v3::ComponentCheckpoint::RECORD_KIND,
                UnixMillis(1),
                Term(1),
                &longer,
            ),
        )],
    );
}

/// The frozen types describe every stored payload of the committed file exactly: the schema-1
/// tables with `v1`, the schema-2 tables with `v2`, the component checkpoints with `v3` (the
/// same values the journal wrote, which this build reads with schema 4's two empty fields).
#[test]
fn frozen_types_round_trip_every_payload() {
    let path = fixture_path(Fixture::V3);
    let n = frozen::round_trip_v1_tables(&path, Fixture::V3);
    assert!(n > 20);
    assert_eq!(frozen::round_trip_v2_tables(&path, Fixture::V3), 5);
    let components = frozen::round_trip_v3_components(&path);
    let mut want = fixture::expected(Fixture::V3).components;
    want.sort_by_key(|c| c.state.component());
    assert_eq!(components.len(), want.len());
    for ((_, frozen_c), want) in components.iter().zip(&want) {
        frozen::assert_same_checkpoint(want, &frozen::as_v4(frozen_c));
    }
}
