//! Start-up failures a newcomer or an operator meets: clear messages naming the input and the
//! fix, and `--journal-recovery=rebuild` (DESIGN.md J10).

use std::process::Command;

use super::{BIN, Peers, answers, bounds, feed, opts, published, start, stop_cleanly};

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
    let world = start(peers, 1).await;
    let render_dir = world.dir().join("render");
    feed(&render_dir, "02-maps");
    let mut opts = opts(&world, "solo", &render_dir);
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
