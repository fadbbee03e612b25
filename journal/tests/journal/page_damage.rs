//! Damage below the record level (a zeroed 4 KiB page, a flipped byte in a b-tree page) makes
//! redb panic while reading; the journal contains that and reports corruption (J5, J10): the
//! controller-facing open fails with `OpenError::Corrupt` saying how to recover, a read-only
//! open's walks fail with `ReadError::Damaged`, and nothing panics.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use haptic_journal::*;

/// The newest committed fixture (schema [`SCHEMA_VERSION`]; older ones are refused by the open).
fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../migrations/fixtures/v4.redb")
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

/// One table's raw records, by name.
type TableRows = (String, Vec<(RecordKey, Vec<u8>)>);

/// Every record of every table, raw (`blob_refs` through [`Journal::blobs`]): what a read of
/// the file gives, to tell harmless damage (a free page) from damage that changed the data.
fn contents(j: &Journal) -> Result<Vec<TableRows>, String> {
    let mut out = Vec::new();
    for t in tables::ALL_TABLES.iter().filter(|t| **t != "blob_refs") {
        let rows = j
            .raw_table(t, None, usize::MAX)
            .map_err(|e| format!("{t}: {e}"))?;
        out.push(((*t).to_owned(), rows));
    }
    let blobs = j.blobs().map_err(|e| e.to_string())?;
    out.push((
        "blob_refs".to_owned(),
        blobs
            .into_iter()
            .map(|(h, _, size, c)| (RecordKey::Blob(h), format!("{size} {c:?}").into_bytes()))
            .collect(),
    ));
    Ok(out)
}

/// Every page of the fixture zeroed in turn, plus the first byte of every page flipped: each
/// copy is either reported damaged (by the check `reported`) or reads exactly like the original
/// (the page was free: harmless). At least `MIN_REPORTED` copies must be reported, so the sweep
/// is not vacuous. Derived from the fixture's own layout, so a regenerated or newer fixture (J8)
/// keeps the test meaningful.
fn sweep(reported: impl Fn(&str, &Path) -> Option<Journal>) {
    let dir = tempfile::tempdir().unwrap();
    let original = Journal::open(
        &JournalOptions::new(fixture())
            .read_only(true)
            .verify_on_open(false),
    )
    .unwrap();
    let want = contents(&original).unwrap();
    drop(original);
    let n = std::fs::metadata(fixture()).unwrap().len() / 4096;
    let pages: Vec<u64> = (0..n).collect();
    let flips: Vec<usize> = (0..n).map(|p| usize::try_from(p * 4096).unwrap()).collect();
    let mut detected = 0;
    for (what, p) in damaged_copies(dir.path(), &pages, &flips) {
        let r = catch_unwind(AssertUnwindSafe(|| match reported(&what, &p) {
            None => true,
            Some(j) => {
                assert_eq!(
                    contents(&j).as_ref().ok(),
                    Some(&want),
                    "{what}: damage neither reported nor harmless"
                );
                false
            }
        }));
        match r {
            Ok(true) => detected += 1,
            Ok(false) => {}
            Err(e) => std::panic::resume_unwind(e),
        }
    }
    assert!(
        detected >= MIN_REPORTED,
        "only {detected} damaged copies reported (of {} pages)",
        n
    );
}

/// Whether the damage named `what` is in page 0, redb's file header.
fn in_header(what: &str) -> bool {
    what.starts_with("page 0 ") || what == "byte 0 flipped"
}

/// Damaged copies that must be reported, at least (the fixture uses more pages than this).
const MIN_REPORTED: usize = 8;

#[test]
fn damaged_pages_fail_the_open_with_a_typed_error_never_a_panic() {
    sweep(|what, p| {
        let r = catch_unwind(AssertUnwindSafe(|| Journal::open(&JournalOptions::new(p))));
        let r = r.unwrap_or_else(|_| panic!("{what}: Journal::open panicked"));
        match r {
            Err(e @ OpenError::Corrupt { .. }) => {
                let m = e.to_string();
                assert!(m.contains("--journal-recovery=rebuild"), "{what}: {m}");
                assert!(m.contains(&p.display().to_string()), "{what}: {m}");
                None
            }
            // Not a journal any more (the header itself is gone): refused, typed.
            // The file header itself (page 0) gone: redb refuses the file, typed.
            Err(OpenError::Storage { .. } | OpenError::NotAJournal { .. }) if in_header(what) => {
                None
            }
            Err(other) => panic!("{what}: expected OpenError::Corrupt, got {other:?}"),
            Ok(j) => Some(j),
        }
    });
}

#[test]
fn damaged_pages_fail_read_walks_with_a_typed_error_never_a_panic() {
    sweep(|what, p| {
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            let j = match Journal::open(
                &JournalOptions::new(p).read_only(true).verify_on_open(false),
            ) {
                Ok(j) => j,
                Err(OpenError::Corrupt { .. }) => return None,
                Err(OpenError::NotAJournal { .. } | OpenError::Storage { .. })
                    if in_header(what) =>
                {
                    return None;
                }
                Err(e) => panic!("{what}: unexpected open error {e:?}"),
            };
            let damaged = match j.verify() {
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
            (!damaged).then_some(j)
        }));
        outcome.unwrap_or_else(|_| panic!("{what}: a read walk panicked"))
    });
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
