//! Opening and creating a journal, and the raw opens for `haptic-migrations`.

use std::path::{Path, PathBuf};
use std::sync::mpsc::sync_channel;
use std::sync::{Arc, RwLock};

use redb::{Database, DatabaseError, ReadOnlyDatabase, ReadableDatabase, StorageBackend};

use super::{Concurrency, Durability, Journal, JournalOptions};
use crate::db::{Counters, Db, Inner};
use crate::error::{OpenError, ReadError};
use crate::meta::{SCHEMA_VERSION, init_tables, read_schema_version};
use crate::writer::{self, WriterConfig};

fn map_db_err(path: &Path, e: DatabaseError) -> OpenError {
    match e {
        DatabaseError::DatabaseAlreadyOpen => OpenError::InUse {
            path: path.to_owned(),
        },
        other => OpenError::Storage {
            path: path.to_owned(),
            source: other.into(),
        },
    }
}

/// Opens the file as a raw redb database with the journal's locking, mode and error mapping, for
/// `haptic-migrations` (which must read old schemas the [`Journal`] refuses). No schema check.
///
/// # Errors
/// [`OpenError::NotFound`], [`OpenError::InUse`], [`OpenError::Storage`].
pub fn open_raw(options: &JournalOptions) -> Result<Database, OpenError> {
    open_existing(options, |b, path| b.open(path))
}

/// Opens the file as a raw read-only redb database (same mode and error mapping as
/// [`open_raw`]), e.g. for `migrate --dry-run`. No schema check.
///
/// # Errors
/// [`OpenError::NotFound`], [`OpenError::InUse`] (an exclusive writer holds it),
/// [`OpenError::Storage`].
pub fn open_raw_read_only(options: &JournalOptions) -> Result<ReadOnlyDatabase, OpenError> {
    open_existing(options, |b, path| b.open_read_only(path))
}

/// The file must exist and be a regular file; then `open` runs on it inside the damage guard,
/// with redb's errors mapped as [`open_raw`] documents.
fn open_existing<T>(
    options: &JournalOptions,
    open: impl FnOnce(&redb::Builder, &Path) -> Result<T, redb::DatabaseError>,
) -> Result<T, OpenError> {
    let path = &options.path;
    if !path.exists() {
        return Err(OpenError::NotFound { path: path.clone() });
    }
    check_regular(path)?;
    guarded_open(path, || {
        open(&options.builder(), path).map_err(|e| map_db_err(path, e))
    })
}

impl Journal {
    /// Opens (or creates, mode 0600) the journal file and starts the writer thread.
    ///
    /// A new file gets every table and meta (schema [`SCHEMA_VERSION`]). With
    /// `verify_on_open` every record is checked first (J10).
    ///
    /// # Errors
    /// [`OpenError::InUse`] when another process has the file (never waits);
    /// [`OpenError::NotFound`]; [`OpenError::SchemaTooNew`] / [`OpenError::SchemaTooOld`] (run
    /// the migration); [`OpenError::NotAJournal`]; [`OpenError::Corrupt`] with the verify report;
    /// [`OpenError::Storage`] / [`OpenError::Io`]; [`OpenError::InvalidOptions`] for
    /// `Durability::None` with `Concurrency::SingleWriter`.
    pub fn open(options: &JournalOptions) -> Result<Journal, OpenError> {
        guarded_open(&options.path, || Self::open_unguarded(options))
    }

    fn open_unguarded(options: &JournalOptions) -> Result<Journal, OpenError> {
        check_options(options)?;
        check_regular(&options.path)?;
        let path = options.path.clone();
        let exists = path.exists();
        let b = options.builder();
        let db = if options.read_only {
            if !exists {
                return Err(OpenError::NotFound { path });
            }
            Db::Ro(b.open_read_only(&path).map_err(|e| map_db_err(&path, e))?)
        } else if exists {
            Db::Rw(b.open(&path).map_err(|e| map_db_err(&path, e))?)
        } else {
            if !options.create {
                return Err(OpenError::NotFound { path });
            }
            let file = create_private(&path)?;
            let backend =
                redb::backends::FileBackend::new(file).map_err(|e| map_db_err(&path, e))?;
            Db::Rw(
                b.create_with_backend(backend)
                    .map_err(|e| map_db_err(&path, e))?,
            )
        };
        Self::finish_open(db, true, path, options)
    }

    /// Opens (or creates) a journal on a custom redb storage backend (tests: lost-write and I/O
    /// error injection). `options.path` only names the journal in errors.
    ///
    /// # Errors
    /// As [`Journal::open`].
    pub fn open_with_backend(
        backend: impl StorageBackend,
        options: &JournalOptions,
    ) -> Result<Journal, OpenError> {
        guarded_open(&options.path, || {
            Self::open_with_backend_unguarded(backend, options)
        })
    }

    fn open_with_backend_unguarded(
        backend: impl StorageBackend,
        options: &JournalOptions,
    ) -> Result<Journal, OpenError> {
        check_options(options)?;
        let path = options.path.clone();
        let b = options.builder();
        let db = if options.read_only {
            Db::Ro(
                b.open_read_only_with_backend(backend)
                    .map_err(|e| map_db_err(&path, e))?,
            )
        } else {
            Db::Rw(
                b.create_with_backend(backend)
                    .map_err(|e| map_db_err(&path, e))?,
            )
        };
        Self::finish_open(db, false, path, options)
    }

    fn finish_open(
        db: Db,
        is_file: bool,
        path: PathBuf,
        options: &JournalOptions,
    ) -> Result<Journal, OpenError> {
        let st = |e: redb::Error| OpenError::Storage {
            path: path.clone(),
            source: e,
        };
        let found = {
            let rtx = db.begin_read().map_err(|e| st(e.into()))?;
            match read_schema_version(&rtx) {
                Ok(v) => v,
                Err(ReadError::Storage(e)) => return Err(st(e)),
                Err(ReadError::Corrupt(c)) => {
                    return Err(OpenError::Corrupt {
                        path,
                        report: Box::new(crate::report::VerifyReport::single(c)),
                    });
                }
                Err(ReadError::Damaged(d)) => {
                    return Err(OpenError::Corrupt {
                        path,
                        report: Box::new(crate::report::VerifyReport::damaged(d)),
                    });
                }
            }
        };
        match (found, &db) {
            (None, Db::Rw(d)) => {
                // An empty database (fresh file, or a custom backend) becomes a journal; anything
                // with tables but no meta is someone else's file.
                let rtx = d.begin_read().map_err(|e| st(e.into()))?;
                let empty = rtx
                    .list_tables()
                    .map_err(|e| st(e.into()))?
                    .next()
                    .is_none();
                drop(rtx);
                if !empty {
                    return Err(OpenError::NotAJournal { path });
                }
                let txn = d.begin_write().map_err(|e| st(e.into()))?;
                init_tables(&txn).map_err(st)?;
                txn.commit().map_err(|e| st(e.into()))?;
            }
            (None, Db::Ro(_)) => return Err(OpenError::NotAJournal { path }),
            (Some(v), _) if v > SCHEMA_VERSION => {
                return Err(OpenError::SchemaTooNew {
                    path,
                    found: v,
                    supported: SCHEMA_VERSION,
                });
            }
            (Some(v), _) if v < SCHEMA_VERSION => {
                return Err(OpenError::SchemaTooOld {
                    path,
                    found: v,
                    supported: SCHEMA_VERSION,
                });
            }
            _ => {}
        }
        let inner = Arc::new(Inner {
            db: RwLock::new(db),
            counters: Counters::default(),
            fault: std::sync::Mutex::new(None),
        });
        let mut journal = Journal {
            inner,
            tx: None,
            thread: None,
            path: path.clone(),
        };
        if options.verify_on_open {
            let report = journal.verify().map_err(|e| match e {
                ReadError::Corrupt(c) => OpenError::Corrupt {
                    path: path.clone(),
                    report: Box::new(crate::report::VerifyReport::single(c)),
                },
                ReadError::Storage(e) => st(e),
                ReadError::Damaged(d) => OpenError::Corrupt {
                    path: path.clone(),
                    report: Box::new(crate::report::VerifyReport::damaged(d)),
                },
            })?;
            if !report.is_clean() {
                return Err(OpenError::Corrupt {
                    path,
                    report: Box::new(report),
                });
            }
        }
        if !options.read_only {
            // Bounded: 4096 requests in flight is far above any realistic producer count; a full
            // channel blocks producers (backpressure) instead of growing memory.
            let (tx, rx) = sync_channel(4096);
            let cfg = WriterConfig {
                durability: match options.durability {
                    Durability::Immediate => redb::Durability::Immediate,
                    Durability::None => redb::Durability::None,
                },
                max_group: options.max_group_requests.max(1),
                trim_every_commits: options.trim_every_commits,
                auto_compact_path: (options.auto_compact && is_file).then(|| path.clone()),
                auto_compact_slack: options.auto_compact_slack_bytes,
                auto_compact_always: options.auto_compact_always,
                reopen: is_file.then(|| {
                    let (options, path) = (options.clone(), path.clone());
                    Box::new(move || options.builder().open(&path)) as writer::Reopen
                }),
                file: if is_file { file_id(&path) } else { None },
            };
            let inner = journal.inner.clone();
            let thread = std::thread::Builder::new()
                .name("journal-writer".into())
                .spawn(move || writer::run(inner, rx, cfg))
                .map_err(|source| OpenError::Io {
                    path: path.clone(),
                    source,
                })?;
            journal.tx = Some(tx);
            journal.thread = Some(thread);
        }
        Ok(journal)
    }
}

/// The identity of the file at `path` now (`None` when it cannot be read: no removal check).
fn file_id(path: &Path) -> Option<writer::FileId> {
    use std::os::unix::fs::MetadataExt as _;
    let m = std::fs::metadata(path).ok()?;
    Some(writer::FileId {
        path: path.to_owned(),
        dev: m.dev(),
        ino: m.ino(),
    })
}

/// Runs an open with redb panics contained: a damaged page is [`OpenError::Corrupt`] (J10).
fn guarded_open<T>(path: &Path, f: impl FnOnce() -> Result<T, OpenError>) -> Result<T, OpenError> {
    crate::contain::contain(f).unwrap_or_else(|d| {
        Err(OpenError::Corrupt {
            path: path.to_owned(),
            report: Box::new(crate::report::VerifyReport::damaged(d)),
        })
    })
}

/// An existing journal path must be a regular file: redb would block forever opening a FIFO.
fn check_regular(path: &Path) -> Result<(), OpenError> {
    match std::fs::metadata(path) {
        Ok(m) if !m.is_file() => Err(OpenError::Io {
            path: path.to_owned(),
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a regular file (a directory, FIFO, socket or device): give the journal file",
            ),
        }),
        _ => Ok(()),
    }
}

fn check_options(o: &JournalOptions) -> Result<(), OpenError> {
    if o.concurrency == Concurrency::SingleWriter
        && o.durability == Durability::None
        && !o.read_only
    {
        return Err(OpenError::InvalidOptions {
            reason: "single-writer mode refuses Durability::None",
        });
    }
    Ok(())
}

fn create_private(path: &Path) -> Result<std::fs::File, OpenError> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|source| OpenError::Io {
            path: path.to_owned(),
            source,
        })
}
