//! Opening a journal file: read-only (exclusive, else single-writer), a repaired copy when the
//! file needs redb's repair, and every open, read and permission failure as a [`Fail`] naming
//! the file and the fix.

use std::path::{Path, PathBuf};

use haptic_journal::redb;
use haptic_journal::{Concurrency, Journal, JournalOptions, OpenError, ReadError};

use crate::{Fail, Mode, Res};

pub(super) fn open_fail(path: &Path, e: OpenError) -> Fail {
    let p = path.display();
    match e {
        OpenError::NotFound { .. } => Fail::Usage(format!(
            "journal {p} does not exist: check the path (the controller's --journal)"
        )),
        OpenError::InUse { .. } => Fail::Usage(format!(
            "journal {p} is in use by another process that holds it exclusively: stop that \
             process (or scale the controller to 0) and retry; to inspect a live journal, run the \
             controller with --journal-concurrency single-writer"
        )),
        OpenError::Corrupt { report, .. } => Fail::Corrupt(format!(
            "journal {p} is corrupt: {} problem(s), first: {}; the controller refuses to start on \
             it (J10): copy it aside, then start the controller with --journal-recovery=rebuild \
             (`haptic-journalctl verify {p}` lists what it can read)",
            report.problems.len(),
            report
                .problems
                .first()
                .map(ToString::to_string)
                .unwrap_or_default()
        )),
        OpenError::Storage { source, .. } => storage_fail(path, &source),
        other => Fail::Usage(other.to_string()),
    }
}

pub(super) fn storage_fail(path: &Path, e: &redb::Error) -> Fail {
    let p = path.display();
    match e {
        redb::Error::Corrupted(m) => Fail::Corrupt(format!(
            "journal {p}: redb reports damage ({m}); copy the file aside and start the controller \
             with --journal-recovery=rebuild"
        )),
        redb::Error::DatabaseAlreadyOpen => Fail::Usage(format!(
            "journal {p} is in use by another process: stop it and retry"
        )),
        other => Fail::Usage(format!(
            "journal {p} cannot be read by redb ({other}): check that it is a haptic journal and \
             that this haptic-journalctl uses the controller's redb version ({})",
            "4.6"
        )),
    }
}

pub(super) fn read_fail(path: &Path, e: ReadError) -> Fail {
    match e {
        ReadError::Corrupt(c) => Fail::Corrupt(format!(
            "journal {}: {c}; run `haptic-journalctl verify {}` for every problem",
            path.display(),
            path.display()
        )),
        ReadError::Storage(s) => storage_fail(path, &s),
        ReadError::Damaged(d) => Fail::Corrupt(format!(
            "journal {} is damaged: {d}; the controller refuses to start on it (J10): copy it \
             aside, then start the controller with --journal-recovery=rebuild",
            path.display()
        )),
        other => Fail::Usage(format!("journal {}: {other}", path.display())),
    }
}

/// Checks `path` before redb sees it: it must exist, be a regular file (redb would block
/// forever on a FIFO) and be readable (and writable with `write`) by this user.
pub(super) fn check_file(path: &Path, write: bool) -> Res {
    let p = path.display();
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(Fail::Usage(format!(
                "journal {p} is a symbolic link loop (too many levels of symbolic links): point \
                 the path at the journal file itself"
            )));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let dangling = std::fs::symlink_metadata(path).is_ok();
            return Err(Fail::Usage(if dangling {
                format!(
                    "journal {p} is a symbolic link to a file that does not exist: check the \
                     link target (the controller's --journal)"
                )
            } else {
                format!("journal {p} does not exist: check the path (the controller's --journal)")
            }));
        }
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            return Err(permission_fail(path, &e, write));
        }
        Err(e) => return Err(Fail::Usage(format!("journal {p}: cannot stat it: {e}"))),
    };
    if !meta.is_file() {
        let what = {
            use std::os::unix::fs::FileTypeExt as _;
            let t = meta.file_type();
            if t.is_dir() {
                "a directory"
            } else if t.is_fifo() {
                "a FIFO (named pipe)"
            } else if t.is_socket() {
                "a socket"
            } else if t.is_block_device() || t.is_char_device() {
                "a device"
            } else {
                "not a regular file"
            }
        };
        return Err(Fail::Usage(format!(
            "journal {p} is {what}, not a regular file: give the path of the journal file (the \
             controller's --journal)"
        )));
    }
    std::fs::OpenOptions::new()
        .read(true)
        .write(write)
        .open(path)
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::PermissionDenied {
                permission_fail(path, &e, write)
            } else {
                Fail::Usage(format!("journal {p}: cannot open it: {e}"))
            }
        })?;
    Ok(())
}

pub(super) fn permission_fail(path: &Path, e: &std::io::Error, write: bool) -> Fail {
    Fail::Usage(format!(
        "journal {}: permission denied ({e}): this is a file permissions problem, not damage: \
         run haptic-journalctl as the controller's user (the journal is created mode 0600), or \
         with sudo{}",
        path.display(),
        if write {
            "; --write needs write access to the file"
        } else {
            ""
        }
    ))
}

/// A read-only journal, possibly a repaired private copy of the file (kept until dropped).
pub(super) struct Opened {
    journal: Journal,
    _copy: Option<tempfile::TempDir>,
}

impl std::ops::Deref for Opened {
    type Target = Journal;
    fn deref(&self) -> &Journal {
        &self.journal
    }
}

pub(super) fn needs_repair(e: &OpenError) -> bool {
    matches!(
        e,
        OpenError::Storage {
            source: redb::Error::RepairAborted,
            ..
        }
    )
}

/// Opens read-only without verify-on-open (a corrupt file must still be inspectable). `auto`
/// tries exclusive first, then single-writer (a controller running in single-writer mode).
///
/// A journal left by a killed process needs redb's repair, which a read-only open refuses: the
/// file is then copied to a private temporary file, the copy is opened read-write (redb repairs
/// it, as the controller's next start would) and read; the original is never written.
pub(super) fn open_ro(path: &Path, mode: Mode) -> Res<Opened> {
    check_file(path, false)?;
    let opts = |p: &Path, c: Concurrency| {
        JournalOptions::new(p)
            .read_only(true)
            .verify_on_open(false)
            .concurrency(c)
    };
    let first = match mode {
        Mode::SingleWriter => Concurrency::SingleWriter,
        _ => Concurrency::Exclusive,
    };
    let res = match Journal::open(&opts(path, first)) {
        Err(OpenError::InUse { .. }) if mode == Mode::Auto => {
            Journal::open(&opts(path, Concurrency::SingleWriter))
        }
        r => r,
    };
    match res {
        Ok(journal) => Ok(Opened {
            journal,
            _copy: None,
        }),
        Err(e) if needs_repair(&e) => open_repaired_copy(path),
        Err(e) => Err(open_fail(path, e)),
    }
}

/// Copies a journal that needs redb's crash repair to a private temporary file and opens the
/// copy read-write once (raw redb, no schema check), which repairs it. The original is untouched.
pub(super) fn repaired_copy(path: &Path) -> Res<(tempfile::TempDir, PathBuf)> {
    let p = path.display();
    let dir = tempfile::Builder::new()
        .prefix("haptic-journalctl-")
        .tempdir()
        .map_err(|e| {
            Fail::Usage(format!(
                "journal {p}: cannot create a temporary directory: {e}"
            ))
        })?;
    let copy = dir.path().join("repaired-copy.redb");
    std::fs::copy(path, &copy).map_err(|e| {
        Fail::Usage(format!(
            "journal {p} was not closed cleanly and needs a repair; copying it to {} failed: \
             {e}: free space in the temporary directory (TMPDIR) and retry",
            copy.display()
        ))
    })?;
    drop(haptic_journal::open_raw(&JournalOptions::new(&copy)).map_err(|e| repair_fail(path, e))?);
    eprintln!(
        "haptic-journalctl: journal {p} was not closed cleanly; reading a repaired temporary \
         copy, the original is untouched"
    );
    Ok((dir, copy))
}

/// A crashed journal whose copy redb cannot repair (or read) is damaged: exit 1.
pub(super) fn repair_fail(path: &Path, e: OpenError) -> Fail {
    match open_fail(path, e) {
        Fail::Corrupt(m) => Fail::Corrupt(m),
        Fail::Usage(m) => Fail::Corrupt(format!(
            "journal {} was not closed cleanly and redb cannot repair a copy of it ({m}): the \
             file is damaged (truncated or overwritten): copy it aside, then start the controller \
             with --journal-recovery=rebuild",
            path.display()
        )),
    }
}

pub(super) fn open_repaired_copy(path: &Path) -> Res<Opened> {
    let (dir, copy) = repaired_copy(path)?;
    let journal = Journal::open(
        &JournalOptions::new(&copy)
            .read_only(true)
            .verify_on_open(false),
    )
    .map_err(|e| repair_fail(path, e))?;
    Ok(Opened {
        journal,
        _copy: Some(dir),
    })
}
