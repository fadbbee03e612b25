//! `haptic-journalctl`: offline (and, in single-writer mode, live) inspection of a haptic journal.
//!
//! ```text
//!  FILE --(read-only redb open: exclusive, else single-writer beside a live controller)--> Journal
//!     summary | pending | dump TABLE | show SEQ | blob HASH | verify | stats   (never write)
//!  FILE --(read-write, exclusive, only with --write)--> compact | migrate
//! ```
//!
//! Output: a plain table by default; `--json` prints JSON lines. Secrets (private-key PEM blocks,
//! anything but certificates in `ssl/` files) are redacted unless `--reveal-secrets`.
//!
//! Exit codes (every subcommand): 0 success / clean, 1 corruption found, 2 usage or open error
//! (missing file, file in use, schema too new or too old, not a journal).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use haptic_journal::redb;
use haptic_journal::{
    BlobKind, Checksum, Concurrency, Journal, JournalOptions, OpenError, Queue, ReadError,
    RecordKey, Seq, UnixMillis, decode, tables,
};
use haptic_migrations::MigrateError;
use serde_json::{Value, json};

/// Inspect a haptic journal file (read-only unless --write).
#[derive(Debug, Parser)]
#[command(name = "haptic-journalctl", version, about, long_about = None)]
struct Cli {
    /// Print JSON lines instead of a table.
    #[arg(long, global = true)]
    json: bool,
    /// How to share the file with a running controller: `auto` tries exclusive, then
    /// single-writer (works beside a controller running in single-writer mode).
    #[arg(
        long,
        global = true,
        value_enum,
        default_value_t = Mode::Auto,
        env = "HAPTIC_JOURNALCTL_CONCURRENCY"
    )]
    concurrency: Mode,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Mode {
    Auto,
    Exclusive,
    SingleWriter,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Schema, term, counts and byte sizes per table, oldest pending item.
    Summary {
        /// The journal file.
        file: PathBuf,
    },
    /// What a restart would replay, per queue, and the Dataplane transactions left open on pods.
    Pending {
        /// The journal file.
        file: PathBuf,
    },
    /// Records of one table (`events`, `blobs`, `blob_refs`, `meta`, a queue table or queue name).
    Dump {
        /// The journal file.
        file: PathBuf,
        /// Table name (see `summary`), or a queue name such as `publish`.
        table: String,
        /// Start at this Seq (events) or WorkId (FIFO queues).
        #[arg(long)]
        since: Option<u64>,
        /// Only records whose kind equals this or starts with it (e.g. `deployment.`).
        #[arg(long)]
        kind: Option<String>,
        /// At most this many records.
        #[arg(long)]
        limit: Option<usize>,
    },
    /// One event in full, with the work items and blobs that refer to it.
    Show {
        /// The journal file.
        file: PathBuf,
        /// Event sequence number.
        seq: u64,
    },
    /// A blob's content (a render: its manifest). Secrets are redacted by default.
    Blob {
        /// The journal file.
        file: PathBuf,
        /// `sha256:<hex>`, the bare hex, or a unique hex prefix (at least 6 digits).
        hash: String,
        /// Print private-key and Secret material as stored.
        #[arg(long)]
        reveal_secrets: bool,
    },
    /// Check every record (envelope, CRC, decode, blob hashes, references, counts).
    Verify {
        /// The journal file.
        file: PathBuf,
    },
    /// File size vs live bytes, redb stored and fragmented bytes per table.
    Stats {
        /// The journal file.
        file: PathBuf,
    },
    /// Reclaim free space (rewrites the file; stop the controller first). Needs --write.
    Compact {
        /// The journal file.
        file: PathBuf,
        /// Really rewrite the file.
        #[arg(long)]
        write: bool,
    },
    /// Upgrade the file to this build's schema version.
    Migrate {
        /// The journal file.
        file: PathBuf,
        /// Run the steps on a temporary copy and verify it; the file is not touched.
        #[arg(long, conflicts_with = "write")]
        dry_run: bool,
        /// Migrate the file in place (back it up first).
        #[arg(long)]
        write: bool,
    },
}

impl Command {
    fn file(&self) -> &Path {
        match self {
            Command::Summary { file }
            | Command::Pending { file }
            | Command::Dump { file, .. }
            | Command::Show { file, .. }
            | Command::Blob { file, .. }
            | Command::Verify { file }
            | Command::Stats { file }
            | Command::Compact { file, .. }
            | Command::Migrate { file, .. } => file,
        }
    }
}

/// `println!` that exits quietly when stdout is closed (`haptic-journalctl ... | head`).
macro_rules! outln {
    () => {
        emit(format_args!(""), true)
    };
    ($($t:tt)*) => {
        emit(format_args!($($t)*), true)
    };
}

/// `print!` that exits quietly when stdout is closed.
macro_rules! outp {
    ($($t:tt)*) => {
        emit(format_args!($($t)*), false)
    };
}

fn emit(args: std::fmt::Arguments<'_>, newline: bool) {
    use std::io::Write as _;
    let mut o = std::io::stdout().lock();
    let r = o
        .write_fmt(args)
        .and_then(|()| if newline { o.write_all(b"\n") } else { Ok(()) });
    if let Err(e) = r {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("haptic-journalctl: error: writing to stdout: {e}");
        std::process::exit(2);
    }
}

/// A failure and its exit code.
#[derive(Debug)]
enum Fail {
    /// Exit 1: corruption found.
    Corrupt(String),
    /// Exit 2: usage or open error.
    Usage(String),
}

type Res<T = ()> = Result<T, Fail>;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let out = Out { json: cli.json };
    let file = cli.command.file().to_owned();
    // redb panics on pages damaged outside redb; every read below runs contained, and this
    // catches whatever a walk outside the library's guards might still hit.
    let res = haptic_journal::contain::contain(|| run(cli, &out)).unwrap_or_else(|d| {
        Err(Fail::Corrupt(format!(
            "journal {} is damaged: {d}; the controller refuses to start on it (J10): copy it \
             aside, then start the controller with --journal-recovery=rebuild",
            file.display()
        )))
    });
    match res {
        Ok(code) => ExitCode::from(code),
        Err(Fail::Corrupt(m)) => {
            eprintln!("haptic-journalctl: {m}");
            ExitCode::from(1)
        }
        Err(Fail::Usage(m)) => {
            eprintln!("haptic-journalctl: error: {m}");
            ExitCode::from(2)
        }
    }
}

/// Output sink: tables or JSON lines on stdout.
struct Out {
    json: bool,
}

impl Out {
    fn line(&self, v: &Value) {
        outln!("{v}");
    }

    fn table(&self, header: &[&str], rows: &[Vec<String>]) {
        let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
        for r in rows {
            for (i, c) in r.iter().enumerate() {
                if i < widths.len() {
                    widths[i] = widths[i].max(c.chars().count());
                }
            }
        }
        let fmt_row = |cells: Vec<&str>| {
            let mut s = String::new();
            for (i, c) in cells.iter().enumerate() {
                if i + 1 == cells.len() {
                    s.push_str(c);
                } else {
                    let _ = write!(s, "{c:<w$}  ", w = widths[i]);
                }
            }
            s.trim_end().to_owned()
        };
        outln!("{}", fmt_row(header.to_vec()));
        for r in rows {
            outln!("{}", fmt_row(r.iter().map(String::as_str).collect()));
        }
    }
}

fn run(cli: Cli, out: &Out) -> Res<u8> {
    let mode = cli.concurrency;
    match cli.command {
        Command::Summary { file } => summary(&*open_ro(&file, mode)?, &file, out),
        Command::Pending { file } => pending(&*open_ro(&file, mode)?, &file, out),
        Command::Dump {
            file,
            table,
            since,
            kind,
            limit,
        } => dump(
            &*open_ro(&file, mode)?,
            &file,
            &table,
            since,
            kind.as_deref(),
            limit,
            out,
        ),
        Command::Show { file, seq } => show(&*open_ro(&file, mode)?, &file, seq, out),
        Command::Blob {
            file,
            hash,
            reveal_secrets,
        } => blob(&*open_ro(&file, mode)?, &file, &hash, reveal_secrets, out),
        Command::Verify { file } => verify(&*open_ro(&file, mode)?, &file, out),
        Command::Stats { file } => stats(&*open_ro(&file, mode)?, &file, out),
        Command::Compact { file, write } => compact(&file, write, out),
        Command::Migrate {
            file,
            dry_run,
            write,
        } => migrate(&file, dry_run, write, out),
    }
}

// ----- opening -----

fn open_fail(path: &Path, e: OpenError) -> Fail {
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

fn storage_fail(path: &Path, e: &redb::Error) -> Fail {
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

fn read_fail(path: &Path, e: ReadError) -> Fail {
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
fn check_file(path: &Path, write: bool) -> Res {
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

fn permission_fail(path: &Path, e: &std::io::Error, write: bool) -> Fail {
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
struct Opened {
    journal: Journal,
    _copy: Option<tempfile::TempDir>,
}

impl std::ops::Deref for Opened {
    type Target = Journal;
    fn deref(&self) -> &Journal {
        &self.journal
    }
}

fn needs_repair(e: &OpenError) -> bool {
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
fn open_ro(path: &Path, mode: Mode) -> Res<Opened> {
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
fn repaired_copy(path: &Path) -> Res<(tempfile::TempDir, PathBuf)> {
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
fn repair_fail(path: &Path, e: OpenError) -> Fail {
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

fn open_repaired_copy(path: &Path) -> Res<Opened> {
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

// ----- helpers -----

fn time(ms: UnixMillis) -> String {
    i64::try_from(ms.0)
        .ok()
        .and_then(|m| jiff::Timestamp::from_millisecond(m).ok())
        .map_or_else(|| format!("{}ms", ms.0), |t| t.to_string())
}

fn age(secs: Option<u64>) -> String {
    match secs {
        None => "-".into(),
        Some(s) if s < 120 => format!("{s}s"),
        Some(s) if s < 7200 => format!("{}m{}s", s / 60, s % 60),
        Some(s) if s < 172_800 => format!("{}h{}m", s / 3600, (s % 3600) / 60),
        Some(s) => format!("{}d{}h", s / 86_400, (s % 86_400) / 3600),
    }
}

fn to_json<T: serde::Serialize>(v: &T) -> Value {
    // `Checksum` serializes as "sha256:<hex>" in JSON (human-readable serializers).
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// `v` without its `correlation` fields (ids that crowd one-line summaries; `show` prints them).
fn without_correlation(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| k.as_str() != "correlation")
                .map(|(k, v)| (k.clone(), without_correlation(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(without_correlation).collect()),
        other => other.clone(),
    }
}

fn short(v: &Value, max: usize) -> String {
    let s = without_correlation(v).to_string();
    if s.chars().count() <= max {
        s
    } else {
        let mut t: String = s.chars().take(max.saturating_sub(3)).collect();
        t.push_str("...");
        t
    }
}

fn key_json(k: &RecordKey) -> Value {
    match k {
        RecordKey::Seq(s) => json!(s),
        RecordKey::WorkId(w) => json!(w),
        RecordKey::Text(t) => json!(t),
        RecordKey::Blob(c) => json!(c.to_string()),
        RecordKey::BadBlobKey(b) => json!(format!("0x{}", hex::encode(b))),
        RecordKey::Slot => json!("slot"),
        RecordKey::Unknown => Value::Null,
    }
}

fn key_text(k: &RecordKey) -> String {
    match k {
        RecordKey::Text(t) => t.clone(),
        other => other.to_string(),
    }
}

/// Accepts queue names (`publish`) for their tables (`publish_validated`).
fn table_name(name: &str) -> Option<&'static str> {
    if let Some(t) = tables::ALL_TABLES.iter().find(|t| **t == name) {
        return Some(t);
    }
    Queue::parse(name).map(Queue::table_name)
}

// ----- summary / pending / stats -----

fn summary(j: &Journal, path: &Path, out: &Out) -> Res<u8> {
    let meta = j.meta().map_err(|e| read_fail(path, e))?;
    let stats = j.stats().map_err(|e| read_fail(path, e))?;
    let now = UnixMillis::now();
    let oldest = stats
        .queues
        .iter()
        .filter_map(|q| q.oldest_enqueued_at.map(|t| (t, q.queue)))
        .min();
    let undispatched = meta
        .next_seq
        .0
        .saturating_sub(1)
        .saturating_sub(meta.dispatched_through.0);
    if out.json {
        out.line(&json!({
            "file": path.display().to_string(),
            "file_bytes": stats.file_bytes,
            "schema_version": meta.schema_version,
            "codec": meta.codec,
            "term": meta.term.0,
            "identity": meta.identity.as_ref().map(|i| i.as_str()),
            "created_at_ms": meta.created_at.0,
            "next_seq": meta.next_seq.0,
            "first_seq": stats.first_seq.map(|s| s.0),
            "last_seq": stats.last_seq.map(|s| s.0),
            "dispatched_through": meta.dispatched_through.0,
            "undispatched_events": undispatched,
            "next_work_id": meta.next_work_id.0,
            "live_bytes": stats.live_bytes(),
            "tables": stats.tables.iter().map(|t| json!({
                "table": t.name, "entries": t.entries, "live_bytes": t.live_bytes,
                "stored_bytes": t.stored_bytes,
            })).collect::<Vec<_>>(),
            "oldest_pending": oldest.map(|(t, q)| json!({
                "queue": q.as_str(), "age_s": t.until_ms(now) / 1000,
            })),
        }));
        return Ok(0);
    }
    outln!(
        "file            {} ({} bytes)",
        path.display(),
        stats.file_bytes.unwrap_or(0)
    );
    outln!(
        "schema          {} (codec {}), supported by this build: {}",
        meta.schema_version,
        meta.codec,
        haptic_journal::SCHEMA_VERSION
    );
    outln!("created         {}", time(meta.created_at));
    outln!(
        "term            {} (identity {})",
        meta.term,
        meta.identity.as_ref().map_or("-", |i| i.as_str())
    );
    outln!(
        "events          kept {}..{}, next seq {}, dispatched through {}, {} undispatched",
        stats.first_seq.map_or("-".into(), |s| s.to_string()),
        stats.last_seq.map_or("-".into(), |s| s.to_string()),
        meta.next_seq,
        meta.dispatched_through,
        undispatched
    );
    outln!(
        "oldest pending  {}",
        oldest.map_or("none".into(), |(t, q)| format!(
            "{} item, {} old",
            q,
            age(Some(t.until_ms(now) / 1000))
        ))
    );
    outln!();
    let rows = table_rows(&stats.tables, false);
    out.table(&["TABLE", "ENTRIES", "LIVE_BYTES", "STORED_BYTES"], &rows);
    Ok(0)
}

/// One row per table: name, entries, live bytes, stored bytes, and the page slack when `slack`.
fn table_rows(tables: &[haptic_journal::TableStat], slack: bool) -> Vec<Vec<String>> {
    tables
        .iter()
        .map(|t| {
            let mut row = vec![t.name.to_string()];
            row.extend([t.entries, t.live_bytes, t.stored_bytes].map(|n| n.to_string()));
            if slack {
                row.push(t.fragmented_bytes.to_string());
            }
            row
        })
        .collect()
}

fn pending(j: &Journal, path: &Path, out: &Out) -> Res<u8> {
    let p = j.pending().map_err(|e| read_fail(path, e))?;
    let now = UnixMillis::now();
    if out.json {
        // Exactly one line per queue, in Queue::ALL order (the documented format), then one line
        // per open Dataplane transaction, by endpoint URL.
        for q in &p.queues {
            let age = q
                .oldest_age_secs(now)
                .map_or_else(|| "null".to_owned(), |s| s.to_string());
            outln!(
                "{{\"queue\": {}, \"count\": {}, \"oldest_age_s\": {}}}",
                Value::String(q.queue.as_str().to_owned()),
                q.count,
                age
            );
        }
        for t in &p.open_transactions {
            outln!(
                "{{\"transaction\": {}, \"endpoint\": {}, \"pod\": {}, \"state\": \"{}\", \
                 \"version\": {}, \"age_s\": {}}}",
                Value::String(t.id.as_str().to_owned()),
                Value::String(t.endpoint.as_str().to_owned()),
                Value::String(format!("{}/{}", t.pod.namespace, t.pod.name)),
                t.state.as_str(),
                t.version.0,
                t.started_at.until_ms(now) / 1000
            );
        }
        return Ok(0);
    }
    let rows: Vec<Vec<String>> = p
        .queues
        .iter()
        .map(|q| {
            vec![
                q.queue.as_str().to_owned(),
                q.count.to_string(),
                age(q.oldest_age_secs(now)),
            ]
        })
        .collect();
    out.table(&["QUEUE", "COUNT", "OLDEST_AGE"], &rows);
    outln!();
    if !p.open_transactions.is_empty() {
        let rows: Vec<Vec<String>> = p
            .open_transactions
            .iter()
            .map(|t| {
                vec![
                    t.endpoint.as_str().to_owned(),
                    format!("{}/{}", t.pod.namespace, t.pod.name),
                    t.id.as_str().to_owned(),
                    t.state.as_str().to_owned(),
                    t.version.0.to_string(),
                    age(Some(t.started_at.until_ms(now) / 1000)),
                ]
            })
            .collect();
        out.table(
            &["ENDPOINT", "POD", "TRANSACTION", "STATE", "VERSION", "AGE"],
            &rows,
        );
        outln!();
    }
    outln!(
        "open Dataplane transactions: {} (opened on pods by this replica, not seen to end)",
        p.open_transactions.len()
    );
    outln!(
        "events to dispatch again: {} (seq {}..={}), term {}",
        p.undispatched_events,
        p.dispatched_through.0 + 1,
        p.last_seq,
        p.term
    );
    Ok(0)
}

fn stats(j: &Journal, path: &Path, out: &Out) -> Res<u8> {
    let s = j.stats().map_err(|e| read_fail(path, e))?;
    let file = s.file_bytes.unwrap_or(0);
    let live = s.live_bytes();
    let stored: u64 = s.tables.iter().map(|t| t.stored_bytes).sum();
    let metadata: u64 = s.tables.iter().map(|t| t.metadata_bytes).sum();
    let frag: u64 = s.tables.iter().map(|t| t.fragmented_bytes).sum();
    // The tables' allocated pages: stored + metadata + slack (redb's "fragmented" bytes).
    let pages = stored + metadata + frag;
    // Everything else: redb's header, table directory, allocator state and free pages.
    let other = file.saturating_sub(pages);
    let compact_advised = file > pages + 8 * 1024 * 1024 && other * 2 > file;
    if out.json {
        for t in &s.tables {
            out.line(&json!({
                "table": t.name, "entries": t.entries, "live_bytes": t.live_bytes,
                "stored_bytes": t.stored_bytes, "metadata_bytes": t.metadata_bytes,
                "fragmented_bytes": t.fragmented_bytes,
            }));
        }
        out.line(&json!({
            "file": path.display().to_string(), "file_bytes": file, "live_bytes": live,
            "stored_bytes": stored, "metadata_bytes": metadata, "fragmented_bytes": frag,
            "table_page_bytes": pages, "other_bytes": other, "unused_bytes": other,
            "compact_advised": compact_advised,
        }));
        return Ok(0);
    }
    let rows = table_rows(&s.tables, true);
    out.table(
        &[
            "TABLE",
            "ENTRIES",
            "LIVE_BYTES",
            "STORED_BYTES",
            "PAGE_SLACK_BYTES",
        ],
        &rows,
    );
    outln!();
    outln!("file bytes        {file}");
    outln!("live bytes        {live} (keys + values)");
    outln!(
        "table pages       {pages} bytes ({:.1}% of the file)",
        pct(pages, file)
    );
    outln!("  stored          {stored} (keys + values in leaf pages)");
    outln!("  metadata        {metadata} (branch keys, page headers)");
    outln!(
        "  page slack      {frag} ({:.1}% of the table pages: unused space inside allocated pages, \
         redb's \"fragmented\" bytes; a non-empty table takes at least one 4 KiB page, and \
         compact does not remove slack)",
        pct(frag, pages)
    );
    outln!(
        "other bytes       {other} ({:.1}% of the file: redb header, table directory, allocator \
         state, free pages; compact returns only free pages)",
        pct(other, file)
    );
    if compact_advised {
        outln!(
            "advice            stop the controller, then `haptic-journalctl compact --write {}`",
            path.display()
        );
    }
    Ok(0)
}

fn pct(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 * 100.0 / b as f64
    }
}

// ----- dump / show -----

fn meta_value(key: &str, v: &[u8]) -> Value {
    match (key, v.len()) {
        (tables::META_SCHEMA_VERSION, 4) => {
            json!(u32::from_le_bytes([v[0], v[1], v[2], v[3]]))
        }
        (_, 8) if key != tables::META_CODEC && key != tables::META_IDENTITY => {
            let mut b = [0u8; 8];
            b.copy_from_slice(v);
            json!(u64::from_le_bytes(b))
        }
        _ => match std::str::from_utf8(v) {
            Ok(s) => json!(s),
            Err(_) => json!(format!("0x{}", hex::encode(v))),
        },
    }
}

#[allow(clippy::too_many_arguments)]
fn dump(
    j: &Journal,
    path: &Path,
    table: &str,
    since: Option<u64>,
    kind: Option<&str>,
    limit: Option<usize>,
    out: &Out,
) -> Res<u8> {
    let limit = limit.unwrap_or(usize::MAX);
    if table == "blob_refs" {
        check_dump_filters("blob_refs", since, kind)?;
        return dump_blob_refs(j, path, limit, out);
    }
    let Some(name) = table_name(table) else {
        return Err(Fail::Usage(format!(
            "unknown table {table:?}: use one of {} or a queue name ({})",
            tables::ALL_TABLES.join(", "),
            Queue::ALL
                .iter()
                .map(|q| q.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    };
    check_dump_filters(name, since, kind)?;
    let from = (name == "events").then(|| Seq(since.unwrap_or(0)));
    let filtering = kind.is_some() || (since.is_some() && name != "events");
    let rows = j
        .raw_table(name, from, if filtering { usize::MAX } else { limit })
        .map_err(|e| read_fail(path, e))?;
    let mut corrupt = 0u64;
    let mut table_rows = Vec::new();
    let mut shown = 0usize;
    for (key, bytes) in rows {
        if shown >= limit {
            break;
        }
        if let (Some(s), RecordKey::WorkId(w)) = (since, &key)
            && *w < s
        {
            continue;
        }
        if name == "meta" {
            let k = key_text(&key);
            let v = meta_value(&k, &bytes);
            if out.json {
                out.line(&json!({"table": name, "key": k, "value": v}));
            } else {
                table_rows.push(vec![k, v.to_string()]);
            }
            shown += 1;
            continue;
        }
        match decode::any(name, &bytes) {
            Ok((h, d)) => {
                if let Some(k) = kind
                    && !(h.kind == k || h.kind.starts_with(k))
                {
                    continue;
                }
                let record = decoded_json(&d);
                if out.json {
                    out.line(&json!({
                        "table": name, "key": key_json(&key), "kind": h.kind,
                        "term": h.term.0, "accepted_at_ms": h.accepted_at.0,
                        "size_bytes": h.size_bytes, "record": record,
                    }));
                } else {
                    table_rows.push(vec![
                        key_text(&key),
                        h.kind.clone(),
                        h.term.to_string(),
                        time(h.accepted_at),
                        h.size_bytes.to_string(),
                        short(&record, 100),
                    ]);
                }
            }
            Err(reason) => {
                corrupt += 1;
                let offset = reason.offset();
                if out.json {
                    out.line(&json!({
                        "table": name, "key": key_json(&key), "corrupt": reason.to_string(),
                        "offset": offset,
                    }));
                } else {
                    table_rows.push(vec![
                        key_text(&key),
                        "CORRUPT".into(),
                        "-".into(),
                        "-".into(),
                        bytes.len().to_string(),
                        format!(
                            "{reason}{}",
                            offset.map_or(String::new(), |o| format!(" (byte offset {o})"))
                        ),
                    ]);
                }
            }
        }
        shown += 1;
    }
    if !out.json {
        if name == "meta" {
            out.table(&["KEY", "VALUE"], &table_rows);
        } else {
            out.table(
                &["KEY", "KIND", "TERM", "ACCEPTED_AT", "BYTES", "RECORD"],
                &table_rows,
            );
        }
    }
    if corrupt > 0 {
        return Err(Fail::Corrupt(format!(
            "journal {}: {corrupt} corrupt record(s) in table {name}; run `haptic-journalctl \
             verify {}`",
            path.display(),
            path.display()
        )));
    }
    Ok(0)
}

/// The record kinds table `name` holds (empty: the table has no record kinds).
fn known_kinds(name: &str) -> Vec<String> {
    match name {
        "events" => haptic_journal::EventKind::ALL
            .iter()
            .map(|k| k.as_str().to_owned())
            .collect(),
        "blobs" => vec![
            BlobKind::File.record_kind().to_owned(),
            BlobKind::Render.record_kind().to_owned(),
        ],
        "endpoint_applied" => vec![haptic_journal::EndpointApplied::RECORD_KIND.to_owned()],
        "endpoint_files" => vec![haptic_journal::EndpointFiles::RECORD_KIND.to_owned()],
        "endpoint_transaction" => {
            vec![haptic_journal::EndpointTransaction::RECORD_KIND.to_owned()]
        }
        "published_checkpoint" => {
            vec![haptic_journal::PublishedCheckpoint::RECORD_KIND.to_owned()]
        }
        "component_state" => {
            vec![haptic_journal::ComponentCheckpoint::RECORD_KIND.to_owned()]
        }
        t => Queue::ALL
            .iter()
            .filter(|q| q.table_name() == t)
            .map(|q| match q {
                Queue::StatusPending | Queue::StatusParked => "work.status".to_owned(),
                q => format!("work.{}", q.as_str()),
            })
            .collect(),
    }
}

/// `--since` applies to tables keyed by a number (events by Seq, FIFO queues by WorkId);
/// `--kind` to tables of enveloped records, and must name (a prefix of) a kind the table holds.
fn check_dump_filters(name: &str, since: Option<u64>, kind: Option<&str>) -> Res {
    let fifo = Queue::ALL
        .iter()
        .any(|q| q.table_name() == name && q.shape() == haptic_journal::QueueShape::Fifo);
    if since.is_some() && name != "events" && !fifo {
        return Err(Fail::Usage(format!(
            "--since does not apply to table {name}: it filters events (by seq) and the FIFO \
             queues publish, publish-deployed, invalid, verdict (by work id)"
        )));
    }
    let Some(k) = kind else {
        return Ok(());
    };
    let known = known_kinds(name);
    if known.is_empty() {
        return Err(Fail::Usage(format!(
            "--kind does not apply to table {name}: its values are not typed records"
        )));
    }
    if k.is_empty() || !known.iter().any(|c| c.starts_with(k)) {
        return Err(Fail::Usage(format!(
            "unknown record kind {k:?} for table {name}: use one of {} (or a prefix such as \
             {:?})",
            known.join(", "),
            known[0]
                .split('.')
                .next()
                .map_or(String::new(), |p| format!("{p}."))
        )));
    }
    Ok(())
}

fn decoded_json(d: &decode::Decoded) -> Value {
    match d {
        decode::Decoded::Event(e) => to_json(e),
        decode::Decoded::Work(w) => to_json(w),
        decode::Decoded::Blob {
            kind,
            size_bytes,
            render,
        } => json!({
            "kind": kind.record_kind(), "size_bytes": size_bytes,
            "render": render.as_ref().map(to_json),
        }),
        decode::Decoded::EndpointApplied(e) => to_json(e),
        decode::Decoded::EndpointFiles(e) => to_json(e),
        decode::Decoded::EndpointTransaction(t) => to_json(t),
        decode::Decoded::PublishedCheckpoint(p) => to_json(p),
        decode::Decoded::ComponentCheckpoint(c) => to_json(c),
        _ => Value::Null,
    }
}

fn dump_blob_refs(j: &Journal, path: &Path, limit: usize, out: &Out) -> Res<u8> {
    let blobs = j.blobs().map_err(|e| read_fail(path, e))?;
    let mut rows = Vec::new();
    for (h, kind, size, c) in blobs.into_iter().take(limit) {
        if out.json {
            out.line(&json!({
                "table": "blob_refs", "key": h.to_string(), "kind": kind.record_kind(),
                "size_bytes": size, "refs": c.refs, "holds": c.holds,
            }));
        } else {
            rows.push(vec![
                h.to_string(),
                kind.record_kind().into(),
                size.to_string(),
                c.refs.to_string(),
                c.holds.to_string(),
            ]);
        }
    }
    if !out.json {
        out.table(&["BLOB", "KIND", "BYTES", "REFS", "HOLDS"], &rows);
    }
    Ok(0)
}

fn show(j: &Journal, path: &Path, seq: u64, out: &Out) -> Res<u8> {
    let Some((h, e)) = j.event(Seq(seq)).map_err(|e| read_fail(path, e))? else {
        let s = j.stats().map_err(|e| read_fail(path, e))?;
        return Err(Fail::Usage(format!(
            "journal {} has no event at seq {seq} (kept: {}..{}; trimmed events are gone): pick \
             a seq from `haptic-journalctl dump {} events`",
            path.display(),
            s.first_seq.map_or("-".into(), |s| s.to_string()),
            s.last_seq.map_or("-".into(), |s| s.to_string()),
            path.display()
        )));
    };
    let mut derived = Vec::new();
    for q in Queue::ALL {
        for w in j.queue(*q).map_err(|e| read_fail(path, e))? {
            if w.record.origin == Some(Seq(seq)) {
                derived.push(json!({
                    "queue": q.as_str(), "key": w.key.to_string(), "id": w.record.id.0,
                    "attempt": w.record.attempt,
                }));
            }
        }
    }
    let mut blobs = Vec::new();
    for c in e.blob_refs() {
        let stored = j.blob_counts(c).map_err(|e| read_fail(path, e))?.is_some();
        blobs.push(json!({"blob": c.to_string(), "stored": stored}));
    }
    let meta = j.meta().map_err(|e| read_fail(path, e))?;
    let v = json!({
        "seq": seq, "kind": h.kind, "term": h.term.0, "accepted_at_ms": h.accepted_at.0,
        "size_bytes": h.size_bytes, "dispatched": seq <= meta.dispatched_through.0,
        "event": to_json(&e), "work_items": derived, "blobs": blobs,
    });
    if out.json {
        out.line(&v);
    } else {
        outln!("seq          {seq}");
        outln!("kind         {}", h.kind);
        outln!("term         {}", h.term);
        outln!("accepted at  {}", time(h.accepted_at));
        outln!("size         {} bytes", h.size_bytes);
        outln!(
            "dispatched   {}",
            if seq <= meta.dispatched_through.0 {
                "yes"
            } else {
                "no (replayed on restart)"
            }
        );
        outln!(
            "event        {}",
            serde_json::to_string_pretty(&v["event"])
                .unwrap_or_default()
                .replace('\n', "\n             ")
        );
        for d in &derived {
            outln!(
                "work item    {} {} (id w{}, attempt {})",
                d["queue"].as_str().unwrap_or(""),
                d["key"].as_str().unwrap_or(""),
                d["id"],
                d["attempt"]
            );
        }
        for b in &blobs {
            outln!(
                "blob         {}{}",
                b["blob"].as_str().unwrap_or(""),
                if b["stored"].as_bool() == Some(true) {
                    ""
                } else {
                    " (not stored)"
                }
            );
        }
    }
    Ok(0)
}

// ----- blob and redaction -----

fn find_blob(j: &Journal, path: &Path, text: &str) -> Res<Checksum> {
    let hexpart = text.strip_prefix("sha256:").unwrap_or(text).to_lowercase();
    if hexpart.len() == 64 {
        return Checksum::parse(&format!("sha256:{hexpart}")).map_err(|e| {
            Fail::Usage(format!("{e}: give the blob as sha256:<64 hex> or a prefix"))
        });
    }
    if hexpart.len() < 6 || !hexpart.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Fail::Usage(format!(
            "invalid blob hash {text:?}: give sha256:<64 hex>, or a hex prefix of at least 6 \
             digits (see `haptic-journalctl dump {} blobs`)",
            path.display()
        )));
    }
    let all = j.blobs().map_err(|e| read_fail(path, e))?;
    let hits: Vec<Checksum> = all
        .iter()
        .map(|b| b.0)
        .filter(|c| hex::encode(c.as_bytes()).starts_with(&hexpart))
        .collect();
    match hits.as_slice() {
        [one] => Ok(*one),
        [] => Err(Fail::Usage(format!(
            "journal {} has no blob starting with {hexpart}: see `haptic-journalctl dump {} \
             blobs`",
            path.display(),
            path.display()
        ))),
        _ => Err(Fail::Usage(format!(
            "blob prefix {hexpart} is ambiguous ({} blobs): give more digits",
            hits.len()
        ))),
    }
}

/// Blobs listed as secret files (`ssl/`) in any render manifest.
fn secret_blobs(j: &Journal, path: &Path) -> Res<BTreeSet<Checksum>> {
    let mut out = BTreeSet::new();
    for (h, kind, _, _) in j.blobs().map_err(|e| read_fail(path, e))? {
        if kind != BlobKind::Render {
            continue;
        }
        if let Some(r) = j.get_render(h).map_err(|e| read_fail(path, e))? {
            for f in r.files.iter().filter(|f| f.kind.is_secret()) {
                out.insert(f.blob);
            }
        }
    }
    Ok(out)
}

const REDACTED: &str = "<redacted: private key material; --reveal-secrets to print it>";

/// Redacts PEM private keys everywhere; in a secret (`ssl/`) file keeps only certificate blocks.
/// Returns the text and whether anything was redacted.
fn redact(text: &str, secret_file: bool) -> (String, bool) {
    let mut out = String::with_capacity(text.len());
    let mut redacted = false;
    let mut in_block: Option<bool> = None; // Some(keep)
    for line in text.split_inclusive('\n') {
        let t = line.trim();
        if let Some(label) = t
            .strip_prefix("-----BEGIN ")
            .and_then(|l| l.strip_suffix("-----"))
        {
            let keep = !label.contains("PRIVATE KEY") && (!secret_file || label.contains("CERT"));
            out.push_str(line);
            if !keep {
                out.push_str(REDACTED);
                out.push('\n');
                redacted = true;
            }
            in_block = Some(keep);
            continue;
        }
        if t.starts_with("-----END ") {
            out.push_str(line);
            in_block = None;
            continue;
        }
        match in_block {
            Some(true) => out.push_str(line),
            Some(false) => {}
            None if secret_file && !t.is_empty() => {
                if !out.ends_with(&format!("{REDACTED}\n")) {
                    out.push_str(REDACTED);
                    out.push('\n');
                }
                redacted = true;
            }
            None => out.push_str(line),
        }
    }
    (out, redacted)
}

fn blob(j: &Journal, path: &Path, hash: &str, reveal: bool, out: &Out) -> Res<u8> {
    let h = find_blob(j, path, hash)?;
    let Some(content) = j.get_blob(h).map_err(|e| read_fail(path, e))? else {
        return Err(Fail::Usage(format!(
            "journal {} has no blob {h}: see `haptic-journalctl dump {} blobs`",
            path.display(),
            path.display()
        )));
    };
    let kind = j
        .blobs()
        .map_err(|e| read_fail(path, e))?
        .into_iter()
        .find(|b| b.0 == h)
        .map_or(BlobKind::File, |b| b.1);
    if kind == BlobKind::Render {
        let r = j
            .get_render(h)
            .map_err(|e| read_fail(path, e))?
            .ok_or_else(|| Fail::Usage(format!("blob {h} vanished")))?;
        if out.json {
            out.line(&json!({"blob": h.to_string(), "kind": "blob.render", "render": to_json(&r)}));
        } else {
            outln!("render   {}", r.checksum);
            outln!("config   {} ({} bytes)", r.config, r.config_size_bytes);
            let rows: Vec<Vec<String>> = r
                .files
                .iter()
                .map(|f| {
                    vec![
                        f.path.clone(),
                        f.kind.as_str().into(),
                        f.size_bytes.to_string(),
                        f.blob.to_string(),
                    ]
                })
                .collect();
            out.table(&["PATH", "KIND", "BYTES", "BLOB"], &rows);
        }
        return Ok(0);
    }
    let secret = secret_blobs(j, path)?.contains(&h);
    let (text, redacted) = match std::str::from_utf8(&content) {
        Ok(t) if !reveal => redact(t, secret),
        Ok(t) => (t.to_owned(), false),
        Err(_) if secret && !reveal => (format!("{REDACTED}\n"), true),
        Err(_) => (String::new(), false),
    };
    let binary = (reveal || !secret) && std::str::from_utf8(&content).is_err();
    if out.json {
        let mut v = json!({
            "blob": h.to_string(), "kind": "blob.file", "size_bytes": content.len(),
            "secret": secret, "redacted": redacted,
        });
        if binary {
            v["content_hex"] = json!(hex::encode(&content));
        } else {
            v["content"] = json!(text);
        }
        out.line(&v);
    } else if binary {
        outln!("{}", hex::encode(&content));
    } else {
        outp!("{text}");
        if redacted {
            eprintln!(
                "haptic-journalctl: {h}: secret material redacted ({} bytes stored); add \
                 --reveal-secrets to print it",
                content.len()
            );
        }
    }
    Ok(0)
}

// ----- verify -----

fn verify(j: &Journal, path: &Path, out: &Out) -> Res<u8> {
    let rep = j.verify().map_err(|e| read_fail(path, e))?;
    if out.json {
        for p in &rep.problems {
            out.line(&json!({
                "table": p.table, "key": key_json(&p.key), "offset": p.offset,
                "problem": p.kind.to_string(),
            }));
        }
        out.line(&json!({
            "file": path.display().to_string(), "records_checked": rep.records_checked,
            "problems": rep.problems.len(), "clean": rep.is_clean(),
        }));
    } else {
        let rows: Vec<Vec<String>> = rep
            .problems
            .iter()
            .map(|p| {
                vec![
                    p.table.to_string(),
                    key_text(&p.key),
                    p.offset.map_or("-".into(), |o| o.to_string()),
                    p.kind.to_string(),
                ]
            })
            .collect();
        if !rows.is_empty() {
            out.table(&["TABLE", "KEY", "OFFSET", "PROBLEM"], &rows);
        }
        outln!(
            "{}: {} records checked, {} problem(s)",
            path.display(),
            rep.records_checked,
            rep.problems.len()
        );
    }
    if rep.is_clean() {
        Ok(0)
    } else {
        let mut per_table: BTreeMap<&str, usize> = BTreeMap::new();
        for p in &rep.problems {
            *per_table.entry(p.table).or_default() += 1;
        }
        Err(Fail::Corrupt(format!(
            "journal {} is corrupt ({}); the controller refuses to start on it: copy it aside, \
             then start with --journal-recovery=rebuild",
            path.display(),
            per_table
                .iter()
                .map(|(t, n)| format!("{n} in {t}"))
                .collect::<Vec<_>>()
                .join(", ")
        )))
    }
}

// ----- compact / migrate (write) -----

fn compact(path: &Path, write: bool, out: &Out) -> Res<u8> {
    if !write {
        return Err(Fail::Usage(format!(
            "compact rewrites {}: stop the controller, then add --write",
            path.display()
        )));
    }
    check_file(path, true)?;
    let before = std::fs::metadata(path).map(|m| m.len()).ok();
    let j =
        Journal::open(&JournalOptions::new(path).create(false)).map_err(|e| open_fail(path, e))?;
    let mut rounds = 0;
    loop {
        rounds += 1;
        match j.compact() {
            Ok(true) if rounds < 8 => {}
            Ok(_) => break,
            Err(e) => {
                return Err(Fail::Usage(format!(
                    "journal {}: {e}: make sure no other process uses it and retry",
                    path.display()
                )));
            }
        }
    }
    drop(j);
    let after = std::fs::metadata(path).map(|m| m.len()).ok();
    if out.json {
        out.line(&json!({
            "file": path.display().to_string(), "before_bytes": before, "after_bytes": after,
        }));
    } else {
        outln!(
            "{}: compacted, {} -> {} bytes{}",
            path.display(),
            before.unwrap_or(0),
            after.unwrap_or(0),
            if after >= before {
                " (no free pages to return: see `haptic-journalctl stats` for page slack and \
                 redb's own pages, which compaction keeps)"
            } else {
                ""
            }
        );
    }
    Ok(0)
}

fn migrate_fail(path: &Path, e: MigrateError) -> Fail {
    match e {
        MigrateError::Open(o) => open_fail(path, o),
        MigrateError::Storage { source, .. } => storage_fail(path, &source),
        other => Fail::Usage(other.to_string()),
    }
}

fn migrate(path: &Path, dry_run: bool, write: bool, out: &Out) -> Res<u8> {
    check_file(path, write)?;
    let opts = JournalOptions::new(path).create(false);
    let mut repaired = None;
    let plan = match haptic_migrations::plan(&opts, haptic_migrations::STEPS) {
        Err(MigrateError::Storage {
            source: redb::Error::RepairAborted,
            ..
        }) => {
            // Not closed cleanly: plan (and dry-run) on a repaired copy; --write migrates the
            // file itself, whose read-write open repairs it.
            let (dir, copy) = repaired_copy(path)?;
            let plan = haptic_migrations::plan(
                &JournalOptions::new(&copy).create(false),
                haptic_migrations::STEPS,
            )
            .map_err(|e| migrate_fail(path, e))?;
            repaired = Some((dir, copy));
            plan
        }
        r => r.map_err(|e| migrate_fail(path, e))?,
    };
    let source = repaired.as_ref().map_or(path, |(_, c)| c.as_path());
    let steps: Vec<Value> = plan
        .steps
        .iter()
        .map(|s| json!({"step": s.name, "from": s.from, "to": s.to, "summary": s.summary}))
        .collect();
    let action = if plan.steps.is_empty() {
        "up to date"
    } else if write {
        "migrated"
    } else if dry_run {
        "dry run: migrated a copy"
    } else {
        "plan only: add --dry-run to try it on a copy, --write to migrate the file"
    };
    if !plan.steps.is_empty() && (dry_run || write) {
        let dir = tempfile::tempdir().map_err(|e| Fail::Usage(format!("temp dir: {e}")))?;
        let target = if write {
            path.to_owned()
        } else {
            let copy = dir.path().join("journal-dry-run.redb");
            std::fs::copy(source, &copy)
                .map_err(|e| Fail::Usage(format!("copying {}: {e}", path.display())))?;
            copy
        };
        let o = JournalOptions::new(&target).create(false);
        haptic_migrations::migrate(&o).map_err(|e| migrate_fail(path, e))?;
        let j = Journal::open(&o.read_only(true)).map_err(|e| open_fail(path, e))?;
        drop(j);
    }
    if out.json {
        out.line(&json!({
            "file": path.display().to_string(), "found": plan.found, "target": plan.target,
            "steps": steps, "result": action,
        }));
    } else {
        outln!(
            "{}: schema {}, this build: {}",
            path.display(),
            plan.found,
            plan.target
        );
        for s in &plan.steps {
            outln!("step {} ({} -> {}): {}", s.name, s.from, s.to, s.summary);
        }
        outln!("{action}");
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_keeps_certificates_and_drops_keys() {
        let pem = "-----BEGIN CERTIFICATE-----\nCERTDATA\n-----END CERTIFICATE-----\n\
                   -----BEGIN RSA PRIVATE KEY-----\nKEYDATA\n-----END RSA PRIVATE KEY-----\n";
        for secret in [false, true] {
            let (t, r) = redact(pem, secret);
            assert!(r);
            assert!(t.contains("CERTDATA"));
            assert!(!t.contains("KEYDATA"));
            assert!(t.contains("-----END RSA PRIVATE KEY-----"));
        }
        let (t, r) = redact("password=hunter2\n", true);
        assert!(r && !t.contains("hunter2"));
        let (t, r) = redact("a b\n", false);
        assert!(!r && t == "a b\n");
    }

    #[test]
    fn checksum_arrays_become_text() {
        let c = Checksum::of(b"x");
        let v = to_json(&json!({"a": c}));
        assert_eq!(v["a"], json!(c.to_string()));
    }

    #[test]
    fn aux_kind_ssl_is_secret() {
        assert!(haptic_journal::AuxKind::Ssl.is_secret());
    }
}
