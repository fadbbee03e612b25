//! `crash_point!` in the writer: the process aborts with the marker; before the commit the
//! batch is lost, after it the batch is durable (only the caller was never woken).

use std::os::unix::process::ExitStatusExt;
use std::process::Command;

use haptic_journal::*;

use crate::fixtures::*;

const CHILD_ENV: &str = "HAPTIC_JOURNAL_FAILPOINT_CHILD";

/// Child mode: accepts event 1, then event 2 (the armed point fires on the second commit).
#[test]
fn failpoint_child() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    let j = open_trim_manually(&path);
    j.accept_events(vec![drift(1)]).unwrap();
    j.accept_events(vec![drift(2)]).unwrap();
    panic!("the armed crash point did not fire");
}

fn run_child(point: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let (d, path) = tmp();
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "failpoints::failpoint_child",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(CHILD_ENV, &path)
        .env("CRASH_AT", format!("{point}:2"))
        .output()
        .unwrap();
    assert_eq!(
        out.status.signal(),
        Some(6),
        "child must die by SIGABRT: {:?}",
        out.status
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("crash_point fired: {point}")),
        "{stderr}"
    );
    (d, path)
}

#[test]
fn crash_before_commit_loses_only_the_uncommitted_batch() {
    let (_d, path) = run_child("journal::before_commit");
    let j = open_journal(&path);
    assert!(j.event(Seq(1)).unwrap().is_some());
    assert!(j.event(Seq(2)).unwrap().is_none());
    assert_eq!(j.meta().unwrap().next_seq, Seq(2));
}

#[test]
fn crash_after_commit_keeps_the_batch() {
    let (_d, path) = run_child("journal::after_commit");
    let j = open_journal(&path);
    assert!(j.event(Seq(2)).unwrap().is_some());
    assert_clean(&j);
}

#[test]
fn every_registered_point_is_well_formed() {
    for name in haptic_journal::failpoints::ALL {
        let (component, step) = name.split_once("::").unwrap();
        assert!(
            !component.is_empty() && (step.starts_with("before_") || step.starts_with("after_"))
        );
    }
}
