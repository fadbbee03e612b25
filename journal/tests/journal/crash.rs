//! A child process hammering `accept` is SIGKILLed at random moments; every Seq it printed as
//! durable must be in the journal afterwards, and the journal must verify clean.
//!
//! The child is this test binary itself, re-executed with `HAPTIC_JOURNAL_CRASH_CHILD=<path>`
//! running only `crash::child_hammer`.

use std::io::{BufRead, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;

use haptic_journal::*;

use crate::fixtures::*;

const CHILD_ENV: &str = "HAPTIC_JOURNAL_CRASH_CHILD";
const TRIM_ENV: &str = "HAPTIC_JOURNAL_CRASH_TRIM";

/// Child mode: a no-op unless the env var names a journal file. With `HAPTIC_JOURNAL_CRASH_TRIM`
/// set, the child also marks events dispatched, trims every 8 commits and compacts, so the kill
/// also lands inside trims and compactions.
#[test]
fn child_hammer() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    let trimming = std::env::var_os(TRIM_ENV).is_some();
    let opts = JournalOptions::new(&path).trim_every_commits(if trimming { 8 } else { 0 });
    let j = Arc::new(Journal::open(&opts).unwrap());
    if trimming {
        let j = j.clone();
        std::thread::spawn(move || {
            loop {
                let last = j.meta().unwrap().next_seq.0.saturating_sub(1);
                j.mark_dispatched(Seq(last)).unwrap();
                for item in j.queue(Queue::Publish).unwrap() {
                    j.ack(Queue::Publish, item.key, item.record.id).unwrap();
                }
                match j.compact() {
                    Ok(_) | Err(CompactError::Busy) => {}
                    Err(e) => panic!("{e}"),
                }
            }
        });
    }
    let _threads: Vec<_> = (0..4u64)
        .map(|t| {
            let j = j.clone();
            std::thread::spawn(move || {
                let mut i = 0u64;
                loop {
                    let mut b = Batch::new();
                    b.event(drift(t * 1_000_000 + i));
                    if i.is_multiple_of(7) {
                        // Blobs and queue items too, so the crash hits every table.
                        let r = b.put_render(format!("cfg {t} {i}").into_bytes(), vec![]);
                        let e = b.event(rendered(i, r.checksum));
                        b.enqueue(publish_item(r.checksum, Seq(0)), Origin::Batch(e));
                    }
                    let seqs = j.accept(b).unwrap().seqs();
                    let mut out = std::io::stdout().lock();
                    for s in seqs {
                        writeln!(out, "durable {s}").unwrap();
                    }
                    out.flush().unwrap();
                    i += 1;
                }
            })
        })
        .collect();
    // The producers never stop; the parent kills the process.
    loop {
        std::thread::park();
    }
}

fn pseudo_random_ms(bound: u64) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as u64;
    let mut x = nanos ^ 0x9E37_79B9_7F4A_7C15;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    x % bound
}

#[test]
fn sigkill_at_random_moments_keeps_every_durable_seq() {
    sigkill_runs(false);
}

#[test]
fn sigkill_during_trims_and_compactions_keeps_the_log_consistent() {
    sigkill_runs(true);
}

fn sigkill_runs(trimming: bool) {
    let (_d, path) = tmp();
    let exe = std::env::current_exe().unwrap();
    let mut all_durable = Vec::new();
    for run in 0..5 {
        let mut cmd = Command::new(&exe);
        if trimming {
            cmd.env(TRIM_ENV, "1");
        }
        let mut child = cmd
            .args([
                "--exact",
                "crash::child_hammer",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(CHILD_ENV, &path)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (first_tx, first_rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            let mut seqs = Vec::new();
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(n) = line.strip_prefix("durable ") {
                    // A line cut by the kill cannot parse: it was never fully reported.
                    if let Ok(n) = n.parse::<u64>() {
                        seqs.push(Seq(n));
                        if seqs.len() == 20 {
                            let _ = first_tx.send(());
                        }
                    }
                }
            }
            seqs
        });
        // Hang guard only (not a timing assertion): the child must start writing at some point.
        first_rx
            .recv_timeout(std::time::Duration::from_secs(120))
            .expect("child never reported a durable seq");
        std::thread::sleep(std::time::Duration::from_millis(pseudo_random_ms(150)));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let seqs = reader.join().unwrap();
        assert!(!seqs.is_empty());
        all_durable.extend(seqs);

        let j = open_trim_manually(&path);
        let report = j.verify().unwrap();
        assert!(report.is_clean(), "run {run}: {:?}", report.problems);
        let max = all_durable.iter().max().copied().unwrap();
        assert!(
            j.meta().unwrap().next_seq > max,
            "run {run}: next_seq went back below {max}"
        );
        // Trimming may legitimately remove dispatched events; everything from the oldest kept
        // event on must be there.
        let first_kept = j.stats().unwrap().first_seq.unwrap_or(Seq(u64::MAX));
        for s in all_durable
            .iter()
            .filter(|s| !trimming || **s >= first_kept)
        {
            assert!(
                j.event(*s).unwrap().is_some(),
                "run {run}: durable {s} missing after SIGKILL"
            );
        }
    }
}
