//! Opening the journal at start-up (DESIGN.md J8, J10): create the directory, open, and on a
//! damaged file either stop with the problem and the fix (`refuse`) or move the file aside and
//! start empty (`rebuild`).

use std::path::{Path, PathBuf};

use haptic_journal::{Journal, JournalOptions, OpenError};

use crate::cli::JournalRecovery;

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

/// Whether `--journal-recovery=rebuild` may move the file aside for this error: damage, not
/// a configuration problem (in use, schema, permissions stay errors to fix by hand).
fn is_damage(e: &OpenError) -> bool {
    matches!(
        e,
        OpenError::Corrupt { .. } | OpenError::Storage { .. } | OpenError::NotAJournal { .. }
    )
}

/// Opens (creating when absent) the journal at `path`.
///
/// # Errors
/// [`JournalOpenError`]; with [`JournalRecovery::Refuse`] a damaged file is an
/// [`JournalOpenError::Open`] whose message names `--journal-recovery=rebuild`.
pub fn open(path: &Path, recovery: JournalRecovery) -> Result<Opened, JournalOpenError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| JournalOpenError::Dir {
            dir: dir.to_path_buf(),
            source,
        })?;
    }
    let options = JournalOptions::new(path);
    match Journal::open(&options) {
        Ok(journal) => Ok(Opened {
            journal,
            rebuilt_from: None,
        }),
        Err(e) if recovery == JournalRecovery::Rebuild && is_damage(&e) => {
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

    #[test]
    fn refuses_then_rebuilds_a_damaged_journal() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/journal.redb");
        drop(open(&path, JournalRecovery::Refuse).unwrap());
        std::fs::write(&path, b"this is not a redb file at all, just bytes").unwrap();
        let e = open(&path, JournalRecovery::Refuse).unwrap_err();
        assert!(e.to_string().contains("--journal-recovery=rebuild"), "{e}");
        let opened = open(&path, JournalRecovery::Rebuild).unwrap();
        let (aside, _) = opened.rebuilt_from.clone().unwrap();
        assert!(aside.exists());
        assert_eq!(
            std::fs::read(&aside).unwrap(),
            b"this is not a redb file at all, just bytes"
        );
        assert_eq!(opened.journal.meta().unwrap().next_seq.0, 1);
    }
}
