//! `haptic-journalctl`: offline (and, in single-writer mode, live) inspection of a haptic journal.
//!
//! ```text
//!  FILE --(read-only redb open: exclusive, else single-writer beside a live controller)--> Journal
//!     summary | pending | dump TABLE | show SEQ | blob HASH | verify | stats | history
//!                                                                              (never write)
//!  FILE --(read-write, exclusive, only with --write)--> compact | migrate
//! ```
//!
//! Output: a plain table by default; `--json` prints JSON lines. Secrets (private-key PEM blocks,
//! anything but certificates in `ssl/` files) are redacted unless `--reveal-secrets`.
//!
//! Exit codes (every subcommand): 0 success / clean, 1 corruption found, 2 usage or open error
//! (missing file, file in use, schema too new or too old, not a journal).
//!
//! One module per subcommand (`summary`, `pending`, `dump`, `show`, `blob`, `verify`, `stats`,
//! `history`, `compact`, `migrate`); `open` opens the file (and names each failure), `format` holds what
//! their outputs share. This file: the command line, the output sink and the exit codes.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use serde_json::Value;

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
    /// The per-pod deployment history this replica made: one pod's syncs (--pod), the syncs of
    /// one render (--render: which pods ran it, when), or the fleet's timeline; leader terms
    /// this replica has no sync of are shown as gaps.
    History {
        /// The journal file.
        file: PathBuf,
        /// One pod, `NAMESPACE/NAME`.
        #[arg(long)]
        pod: Option<String>,
        /// One render, `sha256:<hex>`.
        #[arg(long)]
        render: Option<String>,
        /// Only syncs that ended at or after this time (RFC 3339).
        #[arg(long)]
        since: Option<String>,
        /// Only syncs that started at or before this time (RFC 3339).
        #[arg(long)]
        until: Option<String>,
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
            | Command::History { file, .. }
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
        $crate::emit(format_args!(""), true)
    };
    ($($t:tt)*) => {
        $crate::emit(format_args!($($t)*), true)
    };
}

/// `print!` that exits quietly when stdout is closed.
macro_rules! outp {
    ($($t:tt)*) => {
        $crate::emit(format_args!($($t)*), false)
    };
}

// The subcommands, declared after the macros (a `macro_rules!` is seen by what follows it).
mod blob;
mod compact;
mod dump;
mod format;
mod history;
mod migrate;
mod open;
mod pending;
mod show;
mod stats;
mod summary;
mod verify;

use blob::blob;
use compact::compact;
use dump::dump;
use migrate::migrate;
use open::open_ro;
use pending::pending;
use show::show;
use stats::stats;
use summary::summary;
use verify::verify;

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

    /// [`Out::table`] of one row per item, its cells as `row` makes them.
    fn table_of<T>(
        &self,
        header: &[&str],
        items: impl IntoIterator<Item = T>,
        row: impl FnMut(T) -> Vec<String>,
    ) {
        let rows: Vec<Vec<String>> = items.into_iter().map(row).collect();
        self.table(header, &rows);
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
        Command::History {
            file,
            pod,
            render,
            since,
            until,
        } => history::history(
            &*open_ro(&file, mode)?,
            &file,
            &history::Query {
                pod: pod.as_deref(),
                render: render.as_deref(),
                since: since.as_deref(),
                until: until.as_deref(),
            },
            out,
        ),
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
