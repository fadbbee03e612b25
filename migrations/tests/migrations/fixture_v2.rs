//! The committed schema-2 fixture (frozen): refused without a migration, migrated by `v2_to_v3`
//! into schema 3 with nothing but the scheduler's quarantine entries changed (one attempt,
//! retried at the migration's time), then by `v3_to_v4` into schema 4 with nothing but the
//! empty `pod_history` added and the scheduler's checkpoint in the schema-4 shape; the frozen
//! v1 + v2 types describe it.

use haptic_journal::redb::{self, ReadableTable};
use haptic_journal::*;
use haptic_migrations::{V1_TO_V2, V2_TO_V3, v2, v3};

use crate::fixture::{self, Fixture};
use crate::fixture_v1::{
    SCHEDULER, assert_v3_to_v4, but_scheduler, decode_record as decode, plus_v4_tables,
    raw_records, scheduler_in, scheduler_record, schema_version_of, set_scheduler_record,
};
use crate::frozen;
use crate::shared;
use crate::{fixture_copy, fixture_path};

/// Rewrites the file's v2 scheduler checkpoint after `edit` (same header); returns the edited
/// checkpoint.
fn edit_scheduler_record(
    path: &std::path::Path,
    edit: impl FnOnce(&mut v2::SchedulerCheckpoint),
) -> v2::ComponentCheckpoint {
    let (header, mut old) = decode::<v2::ComponentCheckpoint>(&scheduler_record(path).unwrap());
    let v2::ComponentState::Scheduler(s) = &mut old.state else {
        panic!("{old:?}")
    };
    edit(s);
    let record = codec::seal(
        &header.kind,
        header.accepted_at,
        header.term,
        &v2::encode(&old).unwrap(),
    );
    set_scheduler_record(path, Some(&record));
    old
}

/// The file's records at schema 3, between the two steps ([`raw_records`]).
type AtV3 = (Vec<String>, Vec<String>);

/// Migrates `path` with the production steps, `v2_to_v3` (alone) then `v3_to_v4`, asserting
/// what each applied and that `v3_to_v4` changed only what it must ([`assert_v3_to_v4`]);
/// returns the time window `v2_to_v3` ran in and the file's records at schema 3.
fn migrate_v2(path: &std::path::Path) -> ((UnixMillis, UnixMillis), AtV3) {
    let opts = JournalOptions::new(path);
    let from = fixture::now();
    let m = haptic_migrations::migrate_with(&opts, &[V1_TO_V2, V2_TO_V3]).unwrap();
    let to = fixture::now();
    assert_eq!((m.from, m.to), (2, 3));
    assert_eq!(m.applied, vec!["v2_to_v3"]);
    assert_eq!(schema_version_of(path), Some(3));
    let at_v3 = raw_records(path);
    let m = haptic_migrations::migrate(&opts).unwrap();
    assert_eq!((m.from, m.to), (3, 4));
    assert_eq!(m.applied, vec!["v3_to_v4"]);
    assert_eq!(schema_version_of(path), Some(4));
    assert_v3_to_v4(&at_v3, &raw_records(path));
    ((from, to), at_v3)
}

/// A schema-2 scheduler checkpoint and the schema-3 one `v2_to_v3` made of it: every field the
/// same, every quarantine entry with one attempt and a retry time in `[from, to]`, all entries
/// the same time.
fn assert_converted(
    old: &v2::ComponentCheckpoint,
    new: &v3::ComponentCheckpoint,
    (from, to): (UnixMillis, UnixMillis),
) {
    assert_eq!(new.through, old.through);
    let (v2::ComponentState::Scheduler(o), v3::ComponentState::Scheduler(n)) =
        (&old.state, &new.state)
    else {
        panic!("not scheduler checkpoints: {old:?} {new:?}")
    };
    assert_eq!(n.last_validated, o.last_validated);
    assert_eq!(n.endpoints, o.endpoints);
    assert_eq!(n.runtime_config, o.runtime_config);
    assert_eq!(n.applied, o.applied);
    assert_eq!(n.given_up, o.given_up);
    assert_eq!(n.rejected.len(), o.rejected.len());
    assert!(!n.rejected.is_empty());
    for (n, o) in n.rejected.iter().zip(&o.rejected) {
        assert_eq!(
            (&n.endpoint, &n.render, &n.message),
            (&o.endpoint, &o.render, &o.message)
        );
        assert_eq!(n.attempts, 1, "{n:?}");
        assert!(
            (from.0..=to.0).contains(&n.next_retry_at.0),
            "next_retry_at {:?} outside {from:?}..={to:?}",
            n.next_retry_at
        );
        assert_eq!(
            n.next_retry_at,
            first_retry_at(new),
            "one time for every entry"
        );
    }
}

fn first_retry_at(c: &v3::ComponentCheckpoint) -> v3::UnixMillis {
    match &c.state {
        v3::ComponentState::Scheduler(s) => s.rejected[0].next_retry_at,
        _ => unreachable!(),
    }
}

#[test]
fn committed_v2_fixture_is_refused_without_a_migration() {
    shared::assert_refused_without_a_migration(Fixture::V2);
}

#[test]
fn plan_lists_v2_to_v3_then_v3_to_v4() {
    shared::assert_plan(Fixture::V2, (2, 4), &["v2_to_v3", "v3_to_v4"]);
}

/// The v2 fixture's quarantine entry comes out of `v2_to_v3` with one attempt and a retry time
/// within the migration; every other field of the checkpoint, its envelope header, and every
/// other record and table of the file stay as they were; `v3_to_v4` then adds `pod_history` and
/// gives the checkpoint no rollback ([`migrate_v2`]); this build opens the result.
#[test]
fn migrate_takes_a_copy_to_v4_and_changes_only_the_quarantine() {
    let (_d, path) = fixture_copy(Fixture::V2);
    let (records, tables) = raw_records(&path);
    let old_record = scheduler_record(&path).unwrap();
    let (old_header, old) = decode::<v2::ComponentCheckpoint>(&old_record);
    let (window, (at_v3, at_v3_tables)) = migrate_v2(&path);
    // Idempotent.
    let again = haptic_migrations::migrate(&JournalOptions::new(&path)).unwrap();
    assert!(again.applied.is_empty());
    assert_eq!(at_v3_tables, tables, "v2_to_v3 adds or drops no table");
    assert_eq!(
        raw_records(&path).1,
        plus_v4_tables((Vec::new(), tables)).1,
        "the chain adds pod_history only"
    );
    assert_eq!(
        but_scheduler(at_v3.clone()),
        but_scheduler(records),
        "v2_to_v3 changed more than the scheduler checkpoint"
    );
    let new_record = scheduler_in(&at_v3).unwrap();
    let (new_header, new) = decode::<v3::ComponentCheckpoint>(&new_record);
    assert_eq!(
        (new_header.kind, new_header.accepted_at, new_header.term),
        (old_header.kind, old_header.accepted_at, old_header.term),
        "the envelope keeps its kind, accepted_at and term"
    );
    assert_converted(&old, &new, window);
    // The frozen types of each schema describe the result: v1 + v2 for the unchanged tables,
    // v4 for the checkpoints; and the journal reads the same values.
    shared::assert_migrated_copy_reads(&path, Fixture::V2, 5, |j| {
        shared::assert_quarantine_migrated_in(j, 1, window);
    });
}

/// A schema-2 quarantine of several entries (written raw with the frozen v2 types and the
/// envelope): each gets one attempt and the same retry time, in order.
#[test]
fn every_quarantine_entry_of_a_v2_file_is_converted() {
    let (_d, path) = fixture_copy(Fixture::V2);
    let old = edit_scheduler_record(&path, |s| {
        s.rejected.push(v2::RejectedRender {
            endpoint: v2::EndpointUrl("http://10.0.0.8:5555".into()),
            render: v2::Checksum([0xab; 32]),
            message: "dataplane rejected the request with status 422: unknown keyword".into(),
        });
        s.rejected.push(v2::RejectedRender {
            endpoint: v2::EndpointUrl("http://10.0.0.9:5555".into()),
            render: v2::Checksum([0xcd; 32]),
            message: String::new(),
        });
    });
    let (window, (at_v3, _)) = migrate_v2(&path);
    let (_, new) = decode::<v3::ComponentCheckpoint>(&scheduler_in(&at_v3).unwrap());
    assert_converted(&old, &new, window);
    let j = Journal::open(&JournalOptions::new(&path)).unwrap();
    assert!(j.verify().unwrap().is_clean());
    shared::assert_quarantine_migrated_in(&j, 3, window);
}

/// No scheduler checkpoint (a replica that never scheduled): nothing to convert, nothing but
/// the version changes. (Removed raw, with the reference it held on its last validated render.)
#[test]
fn a_v2_file_without_a_scheduler_checkpoint_migrates_unchanged() {
    let (_d, path) = fixture_copy(Fixture::V2);
    let (_, old) = decode::<v2::ComponentCheckpoint>(&scheduler_record(&path).unwrap());
    let v2::ComponentState::Scheduler(s) = &old.state else {
        panic!("{old:?}")
    };
    let (render, _) = s.last_validated.clone().unwrap();
    set_scheduler_record(&path, None);
    {
        let db = redb::Database::open(&path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut refs = txn.open_table(v2::tables::BLOB_REFS).unwrap();
            let (n, holds) = refs.get(render.0.as_slice()).unwrap().unwrap().value();
            refs.insert(render.0.as_slice(), (n - 1, holds)).unwrap();
        }
        txn.commit().unwrap();
    }
    let before = raw_records(&path);
    migrate_v2(&path);
    assert_eq!(raw_records(&path), plus_v4_tables(before));
    assert!(scheduler_record(&path).is_none());
    let j = Journal::open(&JournalOptions::new(&path)).unwrap();
    assert!(j.verify().unwrap().is_clean());
    assert_eq!(j.component_checkpoint(SCHEDULER).unwrap(), None);
}

/// A scheduler checkpoint with an empty quarantine: rewritten by `v2_to_v3` to the same bytes
/// (an empty list has the same encoding in both schemas); then `v3_to_v4` as always.
#[test]
fn a_v2_scheduler_checkpoint_without_quarantine_keeps_its_bytes() {
    let (_d, path) = fixture_copy(Fixture::V2);
    edit_scheduler_record(&path, |s| s.rejected.clear());
    let before = raw_records(&path);
    let (_, at_v3) = migrate_v2(&path);
    assert_eq!(at_v3, before, "v2_to_v3 changed the bytes");
    let j = Journal::open(&JournalOptions::new(&path)).unwrap();
    assert!(j.verify().unwrap().is_clean());
    let c = j.component_checkpoint(SCHEDULER).unwrap().unwrap();
    assert!(fixture::quarantine_of(&c).is_empty());
}

/// A scheduler checkpoint that does not decode as schema 2 fails the step, typed: the file
/// stays at schema 2, unchanged.
#[test]
fn an_undecodable_scheduler_checkpoint_fails_the_step_at_v2() {
    shared::assert_undecodable_scheduler_checkpoints_fail_the_step(
        Fixture::V2,
        ("v2_to_v3", 2, 3),
        Vec::new(),
    );
}

#[test]
fn open_with_policy_migrate_upgrades_then_opens() {
    let (_d, j, (from, to)) = shared::open_with_policy_migrate(Fixture::V2);
    let c = j.component_checkpoint(SCHEDULER).unwrap().unwrap();
    fixture::assert_migrated_quarantine(&c, from, to);
}

/// The frozen types describe every stored payload of the committed file exactly: the schema-1
/// tables with `v1`, the schema-2 tables with `v2` (decode, re-encode, same bytes; and the same
/// values the journal wrote).
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
