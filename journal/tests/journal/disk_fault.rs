//! A real journal file on a real, small tmpfs (mounted by the test, so it needs root /
//! CAP_SYS_ADMIN, and fails saying so otherwise): a full volume and a removed file fail the
//! commit, nothing of the failed batch is committed, the fault is reported, the writer reopens
//! the database, and commits resume by themselves once space is back; the reopened journal is
//! correct (verify, every accepted event present, no failed one).

use std::path::{Path, PathBuf};

use haptic_journal::*;

use crate::fixtures::*;

/// A tmpfs mounted on a fresh temporary directory, unmounted (lazily) on drop.
pub struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// Mounts `size` (e.g. `"4m"`), panicking with the capability it needs when `mount` fails.
    pub fn mount(size: &str) -> Tmpfs {
        let dir = tempfile::tempdir().unwrap();
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "this test mounts a tmpfs and needs root or CAP_SYS_ADMIN (run it as root, or in \
             `unshare -Urm`): mount failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Tmpfs { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// Writes 64 KiB chunks to `path` until the volume is full.
pub fn fill(path: &Path) {
    use std::io::Write as _;
    let mut f = std::fs::File::create(path).unwrap();
    let chunk = vec![0x5a_u8; 64 * 1024];
    while f.write_all(&chunk).is_ok() {}
    // The last partial write may have left room for less than a chunk: fill it byte-wise.
    while f.write_all(&chunk[..512]).is_ok() {}
    let _ = f.sync_all();
}

fn blob_event(j: &Journal, i: u64) -> Result<Seq, AcceptError> {
    let mut b = Batch::new();
    // Distinct content per event: every accept needs new pages.
    let content = format!("{i}:{}", "x".repeat(32 * 1024)).into_bytes();
    let h = b.put_blob(content);
    b.event(rendered(i, h));
    Ok(j.accept(b)?.seqs()[0])
}

fn journal_path(t: &Tmpfs) -> PathBuf {
    t.path().join("journal.redb")
}

#[test]
fn a_full_volume_refuses_commits_then_resumes_by_itself() {
    let t = Tmpfs::mount("8m");
    let path = journal_path(&t);
    let j = open_journal(&path);
    let mut accepted = Vec::new();
    for i in 0..4 {
        accepted.push(blob_event(&j, i).unwrap());
    }
    assert!(j.storage_fault().is_none());
    let filler = t.path().join("filler");
    fill(&filler);
    let mut failed = 0;
    for i in 4..40 {
        match blob_event(&j, i) {
            Ok(s) => accepted.push(s),
            Err(e) => {
                assert_eq!(e.fault_kind(), Some(FaultKind::Full), "{e:?}");
                failed += 1;
            }
        }
    }
    assert!(failed > 0, "the full volume never failed a commit");
    let fault = j.storage_fault().expect("a fault is reported");
    assert_eq!(fault.kind, FaultKind::Full);
    assert!(
        fault.message.contains("No space left on device"),
        "{}",
        fault.message
    );
    std::fs::remove_file(&filler).unwrap();
    // The next commit reopens the database and succeeds.
    accepted.push(blob_event(&j, 100).unwrap());
    assert!(j.storage_fault().is_none());
    assert_clean(&j);
    drop(j);
    let j = Journal::open(&JournalOptions::new(&path).verify_on_open(true)).unwrap();
    let seqs: Vec<Seq> = j
        .events(Seq(1), usize::MAX)
        .unwrap()
        .iter()
        .map(|(s, _, _)| *s)
        .collect();
    assert_eq!(
        seqs, accepted,
        "every accepted event, no failed one, no gap"
    );
    let next = j.meta().unwrap().next_seq;
    assert_eq!(next, Seq(accepted.last().unwrap().0 + 1));
}

#[test]
fn a_removed_file_is_never_written_again() {
    let t = Tmpfs::mount("8m");
    let path = journal_path(&t);
    let j = open_journal(&path);
    blob_event(&j, 1).unwrap();
    std::fs::remove_file(&path).unwrap();
    let e = blob_event(&j, 2).unwrap_err();
    assert!(matches!(e, AcceptError::Removed { .. }), "{e:?}");
    assert_eq!(j.storage_fault().unwrap().kind, FaultKind::Removed);
    assert!(e.to_string().contains("restart"), "{e}");
    // A new file at the path is not the journal either.
    std::fs::write(&path, b"").unwrap();
    assert!(matches!(
        blob_event(&j, 3).unwrap_err(),
        AcceptError::Removed { .. }
    ));
}
