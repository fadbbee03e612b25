//! A storage backend that loses every write not yet synced when the test "crashes" it, and can
//! fail with an I/O error after N operations (redb `tests/crash_consistency.rs` idea).

use std::sync::{Arc, Mutex};

use haptic_journal::redb::StorageBackend;
use haptic_journal::*;

use crate::fixtures::*;

#[derive(Debug, Default)]
struct State {
    /// What survives a crash: the bytes as of the last `sync_data`.
    durable: Vec<u8>,
    /// What the running process sees.
    volatile: Vec<u8>,
    /// After a crash the old handle's writes go nowhere.
    crashed: bool,
    /// Operations so far and the op count after which every write/sync fails.
    ops: u64,
    fail_after: Option<u64>,
}

/// A backend whose unsynced writes vanish on [`LossyBackend::crash`].
#[derive(Debug, Clone, Default)]
pub struct LossyBackend(Arc<Mutex<State>>);

impl LossyBackend {
    fn from_image(durable: Vec<u8>) -> Self {
        LossyBackend(Arc::new(Mutex::new(State {
            volatile: durable.clone(),
            durable,
            ..State::default()
        })))
    }

    /// Simulates power loss: freezes this handle and returns the durable image.
    fn crash(&self) -> Vec<u8> {
        let mut s = self.0.lock().unwrap();
        s.crashed = true;
        s.durable.clone()
    }

    fn fail_after(&self, n: u64) {
        let mut s = self.0.lock().unwrap();
        s.fail_after = Some(s.ops + n);
    }

    fn step(s: &mut State) -> std::io::Result<()> {
        s.ops += 1;
        match s.fail_after {
            Some(n) if s.ops > n => Err(std::io::Error::other("injected i/o error")),
            _ => Ok(()),
        }
    }
}

impl StorageBackend for LossyBackend {
    fn len(&self) -> Result<u64, std::io::Error> {
        Ok(self.0.lock().unwrap().volatile.len() as u64)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        let s = self.0.lock().unwrap();
        let o = offset as usize;
        let src = s
            .volatile
            .get(o..o + out.len())
            .ok_or_else(|| std::io::Error::other("read out of range"))?;
        out.copy_from_slice(src);
        Ok(())
    }

    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        let mut s = self.0.lock().unwrap();
        if s.crashed {
            return Ok(());
        }
        Self::step(&mut s)?;
        s.volatile.resize(len as usize, 0);
        Ok(())
    }

    fn sync_data(&self) -> Result<(), std::io::Error> {
        let mut s = self.0.lock().unwrap();
        if s.crashed {
            return Ok(());
        }
        Self::step(&mut s)?;
        s.durable = s.volatile.clone();
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        let mut s = self.0.lock().unwrap();
        if s.crashed {
            return Ok(());
        }
        Self::step(&mut s)?;
        let o = offset as usize;
        if s.volatile.len() < o + data.len() {
            s.volatile.resize(o + data.len(), 0);
        }
        s.volatile[o..o + data.len()].copy_from_slice(data);
        Ok(())
    }
}

fn opts(durability: Durability) -> JournalOptions {
    JournalOptions::new("lossy-backend")
        .durability(durability)
        .trim_every_commits(0)
}

/// Runs producers until `crash_after` events were acknowledged, crashes, reopens from the
/// durable image, and returns the acknowledged Seqs missing after the crash.
fn run(durability: Durability, crash_after: usize) -> Vec<Seq> {
    let backend = LossyBackend::default();
    let j = Arc::new(Journal::open_with_backend(backend.clone(), &opts(durability)).unwrap());
    let acked = Arc::new(Mutex::new(Vec::new()));
    let handles: Vec<_> = (0..4u64)
        .map(|p| {
            let (j, acked) = (j.clone(), acked.clone());
            std::thread::spawn(move || {
                for i in 0.. {
                    if acked.lock().unwrap().len() >= crash_after {
                        break;
                    }
                    let seqs = j.accept_events(vec![drift(p * 100_000 + i)]).unwrap();
                    acked.lock().unwrap().extend(seqs);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let image = backend.crash();
    drop(j);
    let reopened =
        Journal::open_with_backend(LossyBackend::from_image(image), &opts(durability)).unwrap();
    assert_clean(&reopened);
    let present: std::collections::BTreeSet<Seq> = reopened
        .events(Seq(1), usize::MAX)
        .unwrap()
        .into_iter()
        .map(|(s, _, _)| s)
        .collect();
    let acked = acked.lock().unwrap().clone();
    acked.into_iter().filter(|s| !present.contains(s)).collect()
}

#[test]
fn every_acknowledged_seq_survives_lost_unsynced_writes() {
    for crash_after in [1, 17, 200] {
        let lost = run(Durability::Immediate, crash_after);
        assert!(lost.is_empty(), "durable Seqs lost after crash: {lost:?}");
    }
}

#[test]
fn the_check_fails_without_fsync() {
    // Proves the lost-write check can fail: with Durability::None acknowledged events vanish.
    let lost = run(Durability::None, 50);
    assert!(
        !lost.is_empty(),
        "Durability::None lost nothing: the backend does not simulate loss"
    );
}

#[test]
fn io_errors_fail_the_commit_and_keep_earlier_commits() {
    for n in [1, 5, 13, 40] {
        let backend = LossyBackend::default();
        let j = Journal::open_with_backend(backend.clone(), &opts(Durability::Immediate)).unwrap();
        let mut acked = Vec::new();
        for i in 0..10 {
            acked.extend(j.accept_events(vec![drift(i)]).unwrap());
        }
        backend.fail_after(n);
        let mut failed = false;
        for i in 0..50 {
            match j.accept_events(vec![drift(1000 + i)]) {
                Ok(s) => acked.extend(s),
                Err(e) => {
                    assert!(matches!(e, AcceptError::Storage { .. }), "{e}");
                    failed = true;
                    break;
                }
            }
        }
        assert!(failed, "no injected error surfaced after {n} ops");
        let image = backend.crash();
        drop(j);
        let reopened = Journal::open_with_backend(
            LossyBackend::from_image(image),
            &opts(Durability::Immediate),
        )
        .unwrap();
        assert_clean(&reopened);
        for s in &acked {
            assert!(
                reopened.event(*s).unwrap().is_some(),
                "acked {s} lost (fail after {n})"
            );
        }
    }
}
