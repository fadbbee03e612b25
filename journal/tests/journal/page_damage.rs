//! Damage below the record level (a zeroed 4 KiB page, a flipped byte in a b-tree page) makes
//! redb panic while reading; the journal contains that and reports corruption (J5, J10): the
//! controller-facing open fails with `OpenError::Corrupt` saying how to recover, a read-only
//! open's walks fail with `ReadError::Damaged`, and nothing panics.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use haptic_journal::*;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../migrations/fixtures/v1.redb")
}

/// Copies of the fixture: one per zeroed page, one per flipped byte.
fn damaged_copies(dir: &Path, pages: &[u64], flips: &[usize]) -> Vec<(String, PathBuf)> {
    let orig = std::fs::read(fixture()).unwrap();
    let mut out = Vec::new();
    for &n in pages {
        let mut b = orig.clone();
        let at = usize::try_from(n * 4096).unwrap();
        b[at..at + 4096].fill(0);
        let p = dir.join(format!("zero-{n}.redb"));
        std::fs::write(&p, b).unwrap();
        out.push((format!("page {n} zeroed"), p));
    }
    for &o in flips {
        let mut b = orig.clone();
        b[o] ^= 0xff;
        let p = dir.join(format!("flip-{o}.redb"));
        std::fs::write(&p, b).unwrap();
        out.push((format!("byte {o} flipped"), p));
    }
    out
}

const PAGES: [u64; 8] = [3, 5, 8, 10, 12, 13, 16, 20];
const FLIPS: [usize; 7] = [4096, 8192, 12325, 16421, 40997, 45093, 49189];

#[test]
fn damaged_pages_fail_the_open_with_a_typed_error_never_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    for (what, p) in damaged_copies(dir.path(), &PAGES, &FLIPS) {
        let r = catch_unwind(AssertUnwindSafe(|| Journal::open(&JournalOptions::new(&p))));
        let r = r.unwrap_or_else(|_| panic!("{what}: Journal::open panicked"));
        match r {
            Err(e @ OpenError::Corrupt { .. }) => {
                let m = e.to_string();
                assert!(m.contains("--journal-recovery=rebuild"), "{what}: {m}");
                assert!(m.contains(&p.display().to_string()), "{what}: {m}");
            }
            other => panic!("{what}: expected OpenError::Corrupt, got {other:?}"),
        }
    }
}

#[test]
fn damaged_pages_fail_read_walks_with_a_typed_error_never_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    for (what, p) in damaged_copies(dir.path(), &PAGES, &FLIPS) {
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            let j = match Journal::open(
                &JournalOptions::new(&p)
                    .read_only(true)
                    .verify_on_open(false),
            ) {
                Ok(j) => j,
                Err(OpenError::Corrupt { .. }) => return true,
                Err(e) => panic!("{what}: unexpected open error {e:?}"),
            };
            let verify = match j.verify() {
                Err(ReadError::Damaged(d)) => {
                    assert!(!d.message.is_empty());
                    true
                }
                Ok(rep) => !rep.is_clean(),
                Err(e) => panic!("{what}: unexpected verify error {e:?}"),
            };
            // Every other walk fails typed or succeeds; none panics.
            let _ = (j.stats(), j.pending(), j.blobs(), j.meta());
            let _ = j.events(Seq(0), usize::MAX);
            verify
        }));
        let found = outcome.unwrap_or_else(|_| panic!("{what}: a read walk panicked"));
        assert!(found, "{what}: verify reported a damaged file clean");
    }
}

#[test]
fn no_zeroed_page_or_flipped_header_byte_panics() {
    // A sweep: every page of the fixture zeroed in turn. Some damage is harmless (a free page);
    // none may panic, and any error is a typed one.
    let dir = tempfile::tempdir().unwrap();
    let n = std::fs::metadata(fixture()).unwrap().len() / 4096;
    let pages: Vec<u64> = (0..n).collect();
    let flips: Vec<usize> = (0..64).map(|i| i * 61).collect();
    for (what, p) in damaged_copies(dir.path(), &pages, &flips) {
        let r = catch_unwind(AssertUnwindSafe(|| {
            drop(Journal::open(&JournalOptions::new(&p)));
        }));
        assert!(r.is_ok(), "{what}: Journal::open panicked");
    }
}
