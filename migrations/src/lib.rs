//! `haptic-migrations`: frozen old journal schemas and the ordered steps that upgrade a journal
//! file (DESIGN.md J8, STYLE.md 2.3).
//!
//! ```text
//!  open(options, Policy)                       migrate(options) / haptic-journalctl migrate
//!        |                                              |
//!        v                                              v
//!  read meta.schema_version (raw redb open, same lock and concurrency mode as the journal)
//!        |  newer than supported -> MigrateError::SchemaTooNew { found, supported }
//!        |  older, Policy::Refuse -> MigrateError::SchemaTooOld (never silent)
//!        |  older, Policy::Migrate -> for each step from..to:
//!        |        one write transaction { step.run(txn); schema_version = step.to } commit
//!        v        (logged at info; a crash leaves the file at the last committed version)
//!  Journal::open(options)
//! ```
//!
//! # Invariants
//! - Each [`Step`] runs in exactly one write transaction that also writes the new schema version,
//!   so a file is always wholly at one version, never mixed (a crash mid-step rolls back to the
//!   previous version, intact).
//! - Steps form a chain: `STEPS[i].to == STEPS[i + 1].from`, starting at [`BASELINE`]; the newest
//!   `to` is [`supported_version`] and equals `haptic_journal::SCHEMA_VERSION`.
//! - Nothing is upgraded unless the caller asked for it ([`Policy::Migrate`], or
//!   `haptic-journalctl migrate --write`).
//!
//! # Journal records
//! [`v1`] is the frozen copy of the schema-1 record types and tables; schema 1 is the baseline,
//! there is no step into it. [`v2`] is the frozen schema 2: schema 1 plus the pod-truth tables
//! `endpoint_files` and `endpoint_transaction`. [`v3`] is the frozen schema 3: schema 2 with
//! `attempts` and `next_retry_at` appended to the scheduler checkpoint's quarantine entries
//! (`RejectedRender`, in `component_state`), plus appended enum variants that need no rewrite.
//! [`v4`] is the frozen schema 4: schema 3 plus the per-pod history table `pod_history`, with
//! `previous_validated` and `rollback` appended to the scheduler checkpoint (issue 28's
//! rollback), plus appended enum variants that need no rewrite.
//! [`STEPS`] holds [`V1_TO_V2`] (creates those two tables, empty; nothing else in the file
//! changes), [`V2_TO_V3`] (rewrites the scheduler's checkpoint: every quarantine entry gets
//! `attempts: 1` and `next_retry_at` = the step's time; nothing else in the file changes) and
//! [`V3_TO_V4`] (creates `pod_history`, empty, and rewrites the scheduler's checkpoint with no
//! previous render and no rollback hold; nothing else in the file changes). The committed
//! fixtures are real files: `fixtures/v1.redb` (schema 1), `fixtures/v2.redb` (schema 2) and
//! `fixtures/v3.redb` (schema 3), all frozen (this code can no longer write them), and
//! `fixtures/v4.redb` (schema 4; regenerate it with
//! `cargo test -p haptic-migrations --test migrations -- --ignored regenerate_v4_fixture`).
//!
//! # Failpoints
//! Feature `test-v5` (implies `failpoints`): `migrations::after_test_v5_half_rewritten`, inside
//! the test-only v4 -> v5 step ([`test_v5`]) that follows the real chain.
//!
//! # Metrics
//! None; every applied step is logged (`tracing`, info, "journal migration step applied").

#![warn(missing_docs)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

use std::path::{Path, PathBuf};

use haptic_journal::redb::{self, ReadableDatabase};
use haptic_journal::{Concurrency, Journal, JournalOptions, OpenError, ReadError};

mod rewrite;
#[cfg(feature = "test-v5")]
pub mod test_v5;
pub mod v1;
mod v1_to_v2;
pub mod v2;
mod v2_to_v3;
pub mod v3;
mod v3_to_v4;
pub mod v4;

pub use v1_to_v2::V1_TO_V2;
pub use v2_to_v3::V2_TO_V3;
pub use v3_to_v4::V3_TO_V4;

/// The oldest schema version: files are created at it (or newer); there is no step into it.
pub const BASELINE: u32 = 1;

/// One upgrade step: `from` -> `to` (= `from + 1`), run in a single write transaction.
#[derive(Clone, Copy)]
pub struct Step {
    /// Schema version the step reads.
    pub from: u32,
    /// Schema version the step writes (the transaction also stores it in meta).
    pub to: u32,
    /// Short name for logs and `haptic-journalctl migrate`, e.g. `v1_to_v2`.
    pub name: &'static str,
    /// What the step does, one line.
    pub summary: &'static str,
    /// The step. Must only use the transaction it is given; must not commit it.
    pub run: fn(&redb::WriteTransaction) -> Result<(), StepError>,
}

impl std::fmt::Debug for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Step")
            .field("from", &self.from)
            .field("to", &self.to)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Why a step failed (its transaction is dropped: the file stays at `from`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StepError {
    /// redb failed.
    #[error("storage: {0}")]
    Storage(#[from] redb::Error),
    /// A record of the old schema does not decode.
    #[error("record in table {table} at {key} does not decode as schema {version}")]
    Undecodable {
        /// Table.
        table: &'static str,
        /// Key, as text.
        key: String,
        /// The schema it was read as.
        version: u32,
    },
}

macro_rules! step_storage_from {
    ($($t:ty),*) => {$(
        impl From<$t> for StepError {
            fn from(e: $t) -> Self {
                StepError::Storage(e.into())
            }
        }
    )*};
}
step_storage_from!(
    redb::TableError,
    redb::StorageError,
    redb::TransactionError,
    redb::CommitError
);

/// The production upgrade steps, oldest first: [`V1_TO_V2`], [`V2_TO_V3`], [`V3_TO_V4`].
pub const STEPS: &[Step] = &[V1_TO_V2, V2_TO_V3, V3_TO_V4];

/// The newest schema version `steps` lead to ([`BASELINE`] when there is none).
#[must_use]
pub fn supported_version(steps: &[Step]) -> u32 {
    steps.last().map_or(BASELINE, |s| s.to)
}

/// What to do with a file of an older schema.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Policy {
    /// Refuse with [`MigrateError::SchemaTooOld`]. The default: never migrate silently.
    #[default]
    Refuse,
    /// Run the missing steps (logged), then open.
    Migrate,
}

/// Opening or migrating a journal failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MigrateError {
    /// The journal could not be opened (missing, in use, unreadable, corrupt, ...).
    #[error(transparent)]
    Open(#[from] OpenError),
    /// The file was written by newer code.
    #[error(
        "journal {path} has schema version {found}, newer than the {supported} this build \
         supports: run a newer haptic (or haptic-journalctl) build"
    )]
    SchemaTooNew {
        /// The file.
        path: PathBuf,
        /// Version in the file.
        found: u32,
        /// Newest version this build knows.
        supported: u32,
    },
    /// The file is older and the caller did not allow migrating.
    #[error(
        "journal {path} has schema version {found}, this build needs {supported}: back it up, \
         then run `haptic-journalctl migrate --write {path}` (or `--dry-run` first)"
    )]
    SchemaTooOld {
        /// The file.
        path: PathBuf,
        /// Version in the file.
        found: u32,
        /// Version this build needs.
        supported: u32,
    },
    /// No step starts at the file's version (a gap in the chain: a build bug).
    #[error("journal {path} has schema version {found} and no migration step starts there")]
    NoStep {
        /// The file.
        path: PathBuf,
        /// Version in the file.
        found: u32,
    },
    /// The file has no meta table or schema version.
    #[error("{path} is not a haptic journal (no schema version in meta): check the path")]
    NotAJournal {
        /// The file.
        path: PathBuf,
    },
    /// A step failed; its transaction was rolled back and the file is still at `from`.
    #[error(
        "journal {path}: migration step {name} ({from} -> {to}) failed, the file is unchanged \
         at version {from}: {source}"
    )]
    Step {
        /// The file.
        path: PathBuf,
        /// Step name.
        name: &'static str,
        /// Version before.
        from: u32,
        /// Version after.
        to: u32,
        /// What failed.
        #[source]
        source: Box<StepError>,
    },
    /// redb failed outside a step.
    #[error("journal {path}: storage error: {source}")]
    Storage {
        /// The file.
        path: PathBuf,
        /// redb's error.
        #[source]
        source: redb::Error,
    },
}

/// What [`plan`] found.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The file.
    pub path: PathBuf,
    /// Schema version in the file.
    pub found: u32,
    /// Version the steps lead to.
    pub target: u32,
    /// Steps to run, in order (empty: up to date).
    pub steps: Vec<Step>,
}

/// What [`migrate`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Migrated {
    /// Version before.
    pub from: u32,
    /// Version after.
    pub to: u32,
    /// Names of the steps applied, in order (empty: it was up to date).
    pub applied: Vec<&'static str>,
}

fn builder(options: &JournalOptions) -> redb::Builder {
    let mut b = redb::Builder::new();
    b.set_concurrency_mode(match options.concurrency {
        Concurrency::Exclusive => redb::ConcurrencyMode::ExclusiveWriter,
        Concurrency::SingleWriter => redb::ConcurrencyMode::SingleWriter,
    });
    b
}

fn storage(path: &Path, e: impl Into<redb::Error>) -> MigrateError {
    MigrateError::Storage {
        path: path.to_owned(),
        source: e.into(),
    }
}

fn version_of(path: &Path, rtx: &redb::ReadTransaction) -> Result<u32, MigrateError> {
    match haptic_journal::read_schema_version(rtx) {
        Ok(Some(v)) => Ok(v),
        Ok(None) => Err(MigrateError::NotAJournal {
            path: path.to_owned(),
        }),
        Err(ReadError::Storage(e)) => Err(storage(path, e)),
        Err(ReadError::Corrupt(_)) => Err(MigrateError::NotAJournal {
            path: path.to_owned(),
        }),
        Err(e) => Err(storage(path, redb::Error::Corrupted(e.to_string()))),
    }
}

fn chain(path: &Path, found: u32, steps: &[Step]) -> Result<Plan, MigrateError> {
    let target = supported_version(steps);
    if found > target {
        return Err(MigrateError::SchemaTooNew {
            path: path.to_owned(),
            found,
            supported: target,
        });
    }
    let mut todo = Vec::new();
    let mut v = found;
    while v < target {
        let step = steps
            .iter()
            .find(|s| s.from == v)
            .ok_or_else(|| MigrateError::NoStep {
                path: path.to_owned(),
                found: v,
            })?;
        todo.push(*step);
        v = step.to;
    }
    Ok(Plan {
        path: path.to_owned(),
        found,
        target,
        steps: todo,
    })
}

/// Reads the file's schema version without writing anything (read-only redb open) and lists the
/// steps of `steps` that would run.
///
/// # Errors
/// [`MigrateError::Open`] ([`OpenError::NotFound`], [`OpenError::InUse`] when another process
/// holds the file in a mode that excludes readers, [`OpenError::Storage`]);
/// [`MigrateError::SchemaTooNew`]; [`MigrateError::NotAJournal`]; [`MigrateError::NoStep`].
pub fn plan(options: &JournalOptions, steps: &[Step]) -> Result<Plan, MigrateError> {
    let path = &options.path;
    if !path.exists() {
        return Err(OpenError::NotFound { path: path.clone() }.into());
    }
    let db = builder(options).open_read_only(path).map_err(|e| match e {
        redb::DatabaseError::DatabaseAlreadyOpen => {
            MigrateError::Open(OpenError::InUse { path: path.clone() })
        }
        other => storage(path, other),
    })?;
    let rtx = db.begin_read().map_err(|e| storage(path, e))?;
    let found = version_of(path, &rtx)?;
    chain(path, found, steps)
}

/// Upgrades the file to the newest version of the production [`STEPS`], one write transaction
/// per step (logged). Needs the file to itself (redb lock). Durable when this returns.
///
/// # Errors
/// As [`migrate_with`].
pub fn migrate(options: &JournalOptions) -> Result<Migrated, MigrateError> {
    migrate_with(options, STEPS)
}

/// Upgrades the file with `steps` (tests pass their own chain). Each step's transaction also
/// writes the new schema version and commits with `Durability::Immediate`, so the file is at
/// one version or the next, never in between. Durable when this returns; idempotent (an
/// up-to-date file is left alone).
///
/// # Errors
/// [`MigrateError::Open`] (missing file, in use, redb refused it); [`MigrateError::SchemaTooNew`];
/// [`MigrateError::NotAJournal`]; [`MigrateError::NoStep`]; [`MigrateError::Step`] (that step was
/// rolled back; earlier steps stay committed); [`MigrateError::Storage`].
pub fn migrate_with(options: &JournalOptions, steps: &[Step]) -> Result<Migrated, MigrateError> {
    let path = &options.path;
    let db = haptic_journal::open_raw(options)?;
    let found = {
        let rtx = db.begin_read().map_err(|e| storage(path, e))?;
        version_of(path, &rtx)?
    };
    let plan = chain(path, found, steps)?;
    let mut applied = Vec::new();
    for step in &plan.steps {
        let fail = |source: StepError| MigrateError::Step {
            path: path.clone(),
            name: step.name,
            from: step.from,
            to: step.to,
            source: Box::new(source),
        };
        // Durability::Immediate is redb's default: the commit below is durable when it returns.
        let txn = db.begin_write().map_err(|e| fail(e.into()))?;
        (step.run)(&txn).map_err(fail)?;
        haptic_journal::write_schema_version(&txn, step.to).map_err(|e| fail(e.into()))?;
        txn.commit().map_err(|e| fail(e.into()))?;
        tracing::info!(
            path = %path.display(),
            step = step.name,
            from = step.from,
            to = step.to,
            "journal migration step applied"
        );
        applied.push(step.name);
    }
    Ok(Migrated {
        from: found,
        to: plan.target,
        applied,
    })
}

/// Opens the journal like [`Journal::open`], first checking its schema version: a newer file is
/// refused with [`MigrateError::SchemaTooNew`]; an older one is migrated (logged) only with
/// [`Policy::Migrate`], otherwise refused with [`MigrateError::SchemaTooOld`].
///
/// # Errors
/// As [`migrate_with`] and [`Journal::open`]; [`MigrateError::SchemaTooOld`].
pub fn open(options: &JournalOptions, policy: Policy) -> Result<Journal, MigrateError> {
    open_with(options, policy, STEPS)
}

/// [`open`] with another step chain (tests).
///
/// # Errors
/// As [`open`].
pub fn open_with(
    options: &JournalOptions,
    policy: Policy,
    steps: &[Step],
) -> Result<Journal, MigrateError> {
    if options.path.exists() {
        let p = plan(options, steps)?;
        if !p.steps.is_empty() {
            if policy == Policy::Refuse || options.read_only {
                return Err(MigrateError::SchemaTooOld {
                    path: p.path,
                    found: p.found,
                    supported: p.target,
                });
            }
            migrate_with(options, steps)?;
        }
    }
    Journal::open(options).map_err(|e| match e {
        OpenError::SchemaTooNew {
            path,
            found,
            supported,
        } => MigrateError::SchemaTooNew {
            path,
            found,
            supported,
        },
        other => MigrateError::Open(other),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn production_chain_ends_at_the_journal_schema() {
        assert_eq!(supported_version(STEPS), haptic_journal::SCHEMA_VERSION);
        assert_eq!(STEPS.first().map(|s| s.from), Some(BASELINE));
        for w in STEPS.windows(2) {
            assert_eq!(w[0].to, w[1].from);
        }
        for s in STEPS {
            assert_eq!(s.to, s.from + 1);
        }
    }
}
