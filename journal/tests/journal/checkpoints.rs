//! Component checkpoints (table `component_state`, DESIGN.md J11): one per component, replaced
//! whole, read back exactly; the renders a checkpoint names stay stored while it names them.

use haptic_journal::*;

use crate::fixtures::*;

fn scheduler(render: Option<Checksum>, through: u64) -> ComponentCheckpoint {
    ComponentCheckpoint {
        through: Seq(through),
        state: ComponentState::Scheduler(SchedulerCheckpoint {
            last_validated: render.map(|r| (r, corr(1))),
            endpoints: Vec::new(),
            runtime_config: Some(runtime()),
            applied: Vec::new(),
            given_up: Vec::new(),
            rejected: Vec::new(),
            previous_validated: None,
            rollback: None,
        }),
    }
}

/// Accepts a batch that puts `c`.
fn put_checkpoint(j: &Journal, c: ComponentCheckpoint) {
    let mut b = Batch::new();
    b.put_component_checkpoint(c);
    j.accept(b).unwrap();
}

#[test]
fn a_checkpoint_is_replaced_whole_and_survives_a_reopen() {
    let (_d, path) = tmp();
    let opts = JournalOptions::new(&path);
    {
        let j = Journal::open(&opts).unwrap();
        assert_eq!(
            j.component_checkpoint("deployment-scheduler").unwrap(),
            None
        );
        let mut b = Batch::new();
        b.put_component_checkpoint(scheduler(None, 3));
        b.put_component_checkpoint(ComponentCheckpoint {
            through: Seq(2),
            state: ComponentState::Validator(ValidatorCheckpoint { last_passed: None }),
        });
        j.accept(b).unwrap();
        put_checkpoint(&j, scheduler(None, 7));
    }
    let j = Journal::open(&opts).unwrap();
    assert_eq!(
        j.component_checkpoint("deployment-scheduler").unwrap(),
        Some(scheduler(None, 7))
    );
    assert_eq!(
        j.component_checkpoint("validator")
            .unwrap()
            .map(|c| c.through),
        Some(Seq(2))
    );
    assert_clean(&j);
}

#[test]
fn a_named_render_stays_stored_until_the_checkpoint_lets_go() {
    let (_d, j) = scratch_trim_manually();
    let r = put_render(&j, "global\n  maxconn 10\n");
    // The render's only other holder (its event) is dispatched and trimmed: the checkpoint
    // keeps it.
    put_checkpoint(&j, scheduler(Some(r), 1));
    j.mark_dispatched(Seq(1)).unwrap();
    j.trim().unwrap();
    assert!(
        j.events(Seq(1), 10).unwrap().is_empty(),
        "the event was trimmed"
    );
    assert!(j.get_render(r).unwrap().is_some(), "kept by the checkpoint");
    assert_clean(&j);
    // Naming it again does not count it twice; a checkpoint without it releases it.
    put_checkpoint(&j, scheduler(Some(r), 2));
    assert_eq!(
        j.blob_counts(r).unwrap(),
        Some(BlobCounts { refs: 1, holds: 0 })
    );
    put_checkpoint(&j, scheduler(None, 3));
    assert!(
        j.get_render(r).unwrap().is_none(),
        "collected with its last reference"
    );
    assert_clean(&j);
}

/// The render validated before the newest (a rollback's `previous`) and a rollback's held render
/// are references too (issue 28): kept after their events are trimmed, released with the hold.
#[test]
fn the_previous_and_the_held_render_stay_stored_while_named() {
    let (_d, j) = scratch_trim_manually();
    let newest = put_render(&j, "global\n  maxconn 20\n");
    let previous = put_render(&j, "global\n  maxconn 21\n");
    let held = put_render(&j, "global\n  maxconn 22\n");
    let with = |rollback: Option<Checksum>, through: u64| {
        let mut c = scheduler(Some(newest), through);
        if let ComponentState::Scheduler(s) = &mut c.state {
            s.previous_validated = Some(previous);
            s.rollback = rollback.map(|render| RollbackHold {
                value: render.to_string(),
                render,
                correlation: corr(2),
                since: UnixMillis(5),
            });
        }
        c
    };
    put_checkpoint(&j, with(Some(held), 1));
    j.mark_dispatched(Seq(3)).unwrap();
    j.trim().unwrap();
    for r in [newest, previous, held] {
        assert!(
            j.get_render(r).unwrap().is_some(),
            "{r} kept by the checkpoint"
        );
    }
    assert_eq!(
        j.component_checkpoint("deployment-scheduler").unwrap(),
        Some(with(Some(held), 1)),
        "read back exactly"
    );
    put_checkpoint(&j, with(None, 2));
    assert!(
        j.get_render(held).unwrap().is_none(),
        "released with the hold"
    );
    assert!(j.get_render(previous).unwrap().is_some());
    assert_clean(&j);
}

#[test]
fn a_checkpoint_naming_a_missing_render_is_refused_whole() {
    let (_d, j) = scratch();
    let missing = Checksum::of(b"never stored");
    assert_refused_whole(&j, missing, |b| {
        b.put_component_checkpoint(scheduler(Some(missing), 1));
    });
    assert_eq!(
        j.component_checkpoint("deployment-scheduler").unwrap(),
        None
    );
}

/// A retired HAProxyCfg (an earlier `--config-name`): its published checkpoint is removed in
/// the batch that releases the render hold the publication took; the render is then collected
/// with its last reference, and the other HAProxyCfg's checkpoint is untouched.
#[test]
fn a_removed_published_checkpoint_lets_its_render_go() {
    let (_d, j) = scratch_trim_manually();
    let old = put_render(&j, "global\n  maxconn 11\n");
    let new = put_render(&j, "global\n  maxconn 12\n");
    let cp = |name: &str, render: Checksum| PublishedCheckpoint {
        name: name.into(),
        render,
        render_seq: Seq(1),
        resource_version: None,
        published_at: UnixMillis(1),
    };
    for (name, r) in [("old-haproxycfg", old), ("new-haproxycfg", new)] {
        let manifest = j.get_render(r).unwrap().unwrap();
        let mut b = Batch::new();
        b.hold_render(&manifest);
        b.put_published_checkpoint(cp(name, r));
        j.accept(b).unwrap();
    }
    j.mark_dispatched(Seq(2)).unwrap();
    j.trim().unwrap();
    assert!(
        j.get_render(old).unwrap().is_some(),
        "held by its checkpoint"
    );
    let mut b = Batch::new();
    b.release_blob(old);
    b.remove_published_checkpoint("old-haproxycfg".into());
    // Removing one that is not there changes nothing.
    b.remove_published_checkpoint("never-published".into());
    j.accept(b).unwrap();
    let names: Vec<String> = j
        .published_checkpoints()
        .unwrap()
        .into_iter()
        .map(|c| c.name.as_str().to_owned())
        .collect();
    assert_eq!(names, vec!["new-haproxycfg".to_owned()]);
    assert!(j.get_render(old).unwrap().is_none(), "collected");
    assert!(j.get_render(new).unwrap().is_some(), "still held");
    assert_clean(&j);
}
