//! Opening the journal at start-up (DESIGN.md J8, J10): create the directory, open, and on a
//! damaged file either stop with the problem and the fix (`refuse`) or move the file aside and
//! start empty (`rebuild`).
//!
//! # Failpoints
//! With the feature `failpoints`, `HAPTIC_TEST_JOURNAL_OPEN_DELAY_MS=<ms>` makes the open that much
//! slower (tests of the probes while the journal opens); `HAPTIC_TEST_JOURNAL_TRIM_EVERY=<n>` trims
//! every n commits and `HAPTIC_TEST_JOURNAL_COMPACT_SLACK_BYTES=<b>` sets the auto-compaction
//! slack, `HAPTIC_TEST_JOURNAL_COMPACT_ALWAYS=1` compacts after every periodic trim (the crash
//! matrix reaches the trim and compaction points with a short stream).

use std::path::{Path, PathBuf};

use haptic_journal::{Journal, JournalOptions, OpenError};

use crate::runtime::args::{JournalConcurrency, JournalRecovery};

/// The journal could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JournalOpenError {
    /// The journal's directory could not be created.
    #[error(
        "cannot create the journal directory {dir}: check the volume mount and its permissions"
    )]
    Dir {
        /// The directory.
        dir: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The journal could not be opened (the message names the problem and the fix).
    #[error(transparent)]
    Open(#[from] OpenError),
    /// A damaged journal could not be moved aside.
    #[error("cannot move the damaged journal {from} to {to}")]
    MoveAside {
        /// The journal.
        from: PathBuf,
        /// Where it was to go.
        to: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The blocking open task failed.
    #[error("the journal open task failed")]
    Join,
}

/// How the journal was opened.
#[derive(Debug)]
pub struct Opened {
    /// The journal.
    pub journal: Journal,
    /// Where a damaged file was moved (`--journal-recovery=rebuild`), with the reason.
    pub rebuilt_from: Option<(PathBuf, String)>,
}

/// The first bytes of every redb file.
const REDB_MAGIC: &[u8] = b"redb\x1A\x0A\xA9\x0D\x0A";

/// Whether `--journal-recovery=rebuild` may move the file aside for this error: damage, not
/// a configuration problem (in use, schema, permissions stay errors to fix by hand), and only a
/// file that starts like a redb file (a mistyped `--journal` pointing at some other file is
/// never moved).
fn is_damage(e: &OpenError, path: &Path) -> bool {
    let looks_like_redb = std::fs::File::open(path)
        .and_then(|mut f| {
            let mut head = [0_u8; 9];
            std::io::Read::read_exact(&mut f, &mut head).map(|()| head)
        })
        .is_ok_and(|head| head == REDB_MAGIC);
    looks_like_redb
        && matches!(
            e,
            OpenError::Corrupt { .. } | OpenError::Storage { .. } | OpenError::NotAJournal { .. }
        )
}

/// Opens (creating when absent) the journal at `path`.
///
/// # Errors
/// [`JournalOpenError`]; with [`JournalRecovery::Refuse`] a damaged file is an
/// [`JournalOpenError::Open`] whose message names `--journal-recovery=rebuild`.
pub fn open(
    path: &Path,
    recovery: JournalRecovery,
    concurrency: JournalConcurrency,
) -> Result<Opened, JournalOpenError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| JournalOpenError::Dir {
            dir: dir.to_path_buf(),
            source,
        })?;
    }
    // An empty pre-created file (a `touch`, an init container) is a journal yet to be created.
    if std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() == 0) {
        tracing::info!(journal = %path.display(), "journal file is empty: creating the journal in it");
        let _ = std::fs::remove_file(path);
    }
    // Test hook (feature `failpoints`): a slow open, as redb's repair of a large journal after a
    // kill -9 is, so the probes' behaviour during it can be checked.
    #[cfg(feature = "failpoints")]
    if let Some(ms) = std::env::var("HAPTIC_TEST_JOURNAL_OPEN_DELAY_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
    let options = JournalOptions::new(path).concurrency(match concurrency {
        JournalConcurrency::Exclusive => haptic_journal::Concurrency::Exclusive,
        JournalConcurrency::SingleWriter => haptic_journal::Concurrency::SingleWriter,
    });
    // Test hooks (feature `failpoints`): trim every N commits and compact with this slack, so
    // a short stream reaches the trim and compaction crash points.
    #[cfg(feature = "failpoints")]
    let options = {
        let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
        let mut o = options;
        if let Some(n) = env("HAPTIC_TEST_JOURNAL_TRIM_EVERY") {
            o = o.trim_every_commits(u32::try_from(n).unwrap_or(u32::MAX));
        }
        if let Some(b) = env("HAPTIC_TEST_JOURNAL_COMPACT_SLACK_BYTES") {
            o = o.auto_compact_slack_bytes(b);
        }
        if env("HAPTIC_TEST_JOURNAL_COMPACT_ALWAYS") == Some(1) {
            o = o.auto_compact_always(true);
        }
        o
    };
    match Journal::open(&options) {
        Ok(journal) => Ok(Opened {
            journal,
            rebuilt_from: None,
        }),
        Err(e) if recovery == JournalRecovery::Rebuild && is_damage(&e, path) => {
            let reason = e.to_string();
            let to = aside_name(path);
            tracing::error!(journal = %path.display(), moved_to = %to.display(), error = %reason,
                "journal damaged: moving it aside and starting empty (--journal-recovery=rebuild)");
            std::fs::rename(path, &to).map_err(|source| JournalOpenError::MoveAside {
                from: path.to_path_buf(),
                to: to.clone(),
                source,
            })?;
            let journal = Journal::open(&options)?;
            Ok(Opened {
                journal,
                rebuilt_from: Some((to, reason)),
            })
        }
        Err(e) => Err(e.into()),
    }
}

fn aside_name(path: &Path) -> PathBuf {
    let ms = haptic_journal::UnixMillis::now().0;
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".damaged-{ms}"));
    PathBuf::from(name)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    const X: JournalConcurrency = JournalConcurrency::Exclusive;

    #[test]
    fn refuses_then_rebuilds_a_damaged_journal() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/journal.redb");
        drop(open(&path, JournalRecovery::Refuse, X).unwrap());
        // Keep redb's header, destroy everything after it.
        let mut bytes = std::fs::read(&path).unwrap();
        for b in bytes.iter_mut().skip(64) {
            *b = 0x5a;
        }
        std::fs::write(&path, &bytes).unwrap();
        let e = open(&path, JournalRecovery::Refuse, X).unwrap_err();
        assert!(e.to_string().contains("--journal-recovery=rebuild"), "{e}");
        let opened = open(&path, JournalRecovery::Rebuild, X).unwrap();
        let (aside, _) = opened.rebuilt_from.clone().unwrap();
        assert_eq!(std::fs::read(&aside).unwrap(), bytes);
        assert_eq!(opened.journal.meta().unwrap().next_seq.0, 1);
    }

    #[test]
    fn never_moves_a_file_that_is_not_a_redb_file_and_fills_an_empty_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hosts");
        std::fs::write(&path, b"127.0.0.1 localhost\n").unwrap();
        assert!(open(&path, JournalRecovery::Rebuild, X).is_err());
        assert_eq!(std::fs::read(&path).unwrap(), b"127.0.0.1 localhost\n");
        let empty = dir.path().join("empty.redb");
        std::fs::write(&empty, b"").unwrap();
        let opened = open(&empty, JournalRecovery::Refuse, X).unwrap();
        assert!(opened.rebuilt_from.is_none());
    }
}
