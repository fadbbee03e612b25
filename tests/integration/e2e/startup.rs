//! Start-up failures a newcomer or an operator meets: clear messages naming the input and the
//! fix, and `--journal-recovery=rebuild` (DESIGN.md J10).

use std::process::Command;

use super::{BIN, Peers, answers, bounds, published, stop_cleanly};

fn run_args(extra: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .args([
            "run",
            "--pod-selector",
            "app=haproxy",
            "--dataplane-secret",
            "dp",
        ])
        .args(["--metrics-addr", "127.0.0.1:0"])
        .args(extra)
        .env_remove("HAPTIC_KUBECONFIG")
        .output()
        .unwrap()
}

#[test]
fn missing_haproxy_and_bad_flags_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("j.redb");
    let out = run_args(&[
        "--render-dir",
        "/nonexistent",
        "--journal",
        journal.to_str().unwrap(),
        "--haproxy-bin",
        "/nonexistent/haproxy",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("haproxy is not installed") && err.contains("apt-get install haproxy"),
        "{err}"
    );
    let out = run_args(&["--source", "configmap"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--configmap NAME"), "{err}");
    let out = run_args(&["--render-dir", "/x", "--min-deployment-interval", "soon"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--min-deployment-interval"), "{err}");
}

on_peers!(Emulator, a_damaged_journal_is_refused_then_rebuilt => damaged_journal);

/// A damaged journal: refused naming `--journal-recovery=rebuild`, then rebuilt from the cluster
/// and the pods.
pub async fn damaged_journal(peers: Peers) {
    let (world, _render_dir, mut opts) = super::fed(peers, 1, "02-maps", "solo").await;
    std::fs::create_dir_all(opts.journal.parent().unwrap()).unwrap();
    // A redb header followed by garbage: damaged, but recognisably a redb file (rebuild never
    // moves a file that does not start like one).
    let mut damaged = b"redb\x1A\x0A\xA9\x0D\x0A".to_vec();
    damaged.resize(64 * 1024, 0x5a);
    std::fs::write(&opts.journal, &damaged).unwrap();
    let mut ctl = world.controller(opts.clone());
    let status = ctl.wait(bounds().stop()).expect("refuses and exits");
    assert!(!status.success());
    let log = ctl.log_text();
    assert!(log.contains("--journal-recovery=rebuild"), "{log}");
    assert!(
        std::fs::read(&opts.journal).unwrap() == damaged,
        "refuse leaves the damaged file as it was"
    );
    opts.extra = vec!["--journal-recovery".into(), "rebuild".into()];
    let mut ctl = world.controller(opts.clone());
    published(&world, "02-maps", 1).await;
    answers(&world, "02-maps").await;
    let aside: Vec<_> = std::fs::read_dir(opts.journal.parent().unwrap())
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().contains(".damaged-"))
        .collect();
    assert_eq!(aside.len(), 1, "the damaged file is kept aside");
    stop_cleanly(&mut ctl);
    world.shutdown().await;
}

/// Bad journals at start (issue 13, "Bad input"): a directory in place of the journal, a file
/// that is not redb, a journal of a newer schema. Each start fails at once with a message naming
/// the path and the fix, and the file is left exactly as it was (nothing lost, nothing rebuilt
/// without `--journal-recovery=rebuild`).
#[test]
fn bad_journals_are_refused_naming_the_path_and_the_fix_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let render = dir.path().join("render");
    std::fs::create_dir_all(&render).unwrap();
    let start = |journal: &std::path::Path| {
        let out = run_args(&[
            "--render-dir",
            render.to_str().unwrap(),
            "--journal",
            journal.to_str().unwrap(),
            "--kubeconfig",
            "/nonexistent/kubeconfig",
        ]);
        assert!(!out.status.success(), "{journal:?} started");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };

    let as_dir = dir.path().join("dir.redb");
    std::fs::create_dir(&as_dir).unwrap();
    let err = start(&as_dir);
    assert!(
        err.contains("dir.redb")
            && err.contains("not a regular file")
            && err.contains("give the journal file"),
        "{err}"
    );
    assert!(as_dir.is_dir());

    let not_redb = dir.path().join("notes.redb");
    std::fs::write(&not_redb, b"these are my notes, not a journal\n").unwrap();
    let err = start(&not_redb);
    assert!(
        err.contains("notes.redb") && err.contains("--journal-recovery=rebuild"),
        "{err}"
    );
    assert_eq!(
        std::fs::read(&not_redb).unwrap(),
        b"these are my notes, not a journal\n"
    );

    let newer = dir.path().join("newer.redb");
    drop(haptic_journal::Journal::open(&haptic_journal::JournalOptions::new(&newer)).unwrap());
    {
        let db = haptic_journal::redb::Database::open(&newer).unwrap();
        let txn = db.begin_write().unwrap();
        haptic_journal::write_schema_version(&txn, 99).unwrap();
        txn.commit().unwrap();
    }
    let err = start(&newer);
    assert!(
        err.contains("newer.redb") && err.contains("99") && err.contains("newer haptic"),
        "{err}"
    );
    // Still the newer build's journal (redb's open may rewrite its header; the data stays).
    let reopened = haptic_journal::Journal::open(&haptic_journal::JournalOptions::new(&newer));
    assert!(
        matches!(
            reopened,
            Err(haptic_journal::OpenError::SchemaTooNew { found: 99, .. })
        ),
        "{reopened:?}"
    );
}
