//! `haptic-bench`: the journal's performance figures (issue 12, part 2), one Markdown table.
//!
//! Every figure is measured beside its reference in the same run (raw redb doing the same work,
//! SQLite in WAL mode with `synchronous=FULL`, the disk's own fsync rate), interleaved where the
//! disk's latency drifts, and printed as one row: value, reference, ratio, target, pass, and what
//! limits it.
//!
//! ```text
//! haptic-bench [--quick] [--large] [--json] [--dir DIR] [--only 1,2]
//!   figures (registry: figures/mod.rs)  ->  rows  ->  Markdown table | JSON lines
//!   1 commit floor   2 durable accept   4 recovery   5 size
//! ```
//!
//! - `--quick`: fewer samples (under 2 minutes on 2 cores); the full run takes a few minutes.
//! - `--large`: adds the 1 GiB journal reopened after kill -9 (figure 4.2); it re-executes this
//!   binary with the hidden `__burst` argument as the writer process.
//! - `--json`: one object per row and line, `{"figure","value","unit","reference","ratio",
//!   "target","pass"}` plus `reference_name`, `detail` and `limit`.
//! - `--dir`: where the files go (default: a temporary directory under the current directory,
//!   so the journal's disk is measured, not `/tmp`'s); removed afterwards.
//!
//! Progress goes to stderr; stdout holds only the table (or the JSON lines).
//!
//! The binary is `src/main.rs`; `cargo bench -p haptic-bench --bench journal` runs the same
//! [`run`] (a thin wrapper).

#![warn(missing_docs)]

pub mod figures;
pub mod peers;
pub mod report;
pub mod stats;

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};

use figures::{Ctx, FIGURES};

/// What the table's columns mean, printed under it.
const NOTES: &str = "Each reference is measured in the same run, interleaved with the figure \
(samples or short slices in turn). \"(paired)\": the ratio is the median of the ratios of adjacent \
samples, which cancels the disk's drift; the two p50s are shown for scale. Throughput references \
(raw redb, SQLite WAL synchronous=FULL) commit, from one thread, batches of the size the journal \
reached. 2.6 is not durable (Durability::None on both sides): the CPU ceiling. 4.1 and 4.2 are the \
journal's part of start-up (open, verify, pending, every queue, undispatched events), not \
haptic::runtime::open and the components' Recovered folds.";

/// The journal's performance figures, each beside its reference, in one table.
#[derive(Debug, Parser)]
#[command(name = "haptic-bench", version)]
struct Args {
    /// Fewer samples and events: under 2 minutes on 2 cores.
    #[arg(long, env = "HAPTIC_BENCH_QUICK")]
    quick: bool,
    /// Also the 1 GiB journal cases (figure 4.2).
    #[arg(long, env = "HAPTIC_BENCH_LARGE")]
    large: bool,
    /// One JSON object per row and line instead of the table.
    #[arg(long, env = "HAPTIC_BENCH_JSON")]
    json: bool,
    /// Where the benchmark files go (the disk under test). Default: a temporary directory in
    /// the current directory.
    #[arg(long, env = "HAPTIC_BENCH_DIR")]
    dir: Option<PathBuf>,
    /// Only these figures (numbers, comma-separated). Default: all.
    #[arg(long, value_delimiter = ',', env = "HAPTIC_BENCH_ONLY")]
    only: Vec<u32>,
    #[command(subcommand)]
    hidden: Option<Hidden>,
}

#[derive(Debug, Subcommand)]
enum Hidden {
    /// The writer process of figure 4.2 (killed by the parent).
    #[command(name = "__burst", hide = true)]
    Burst {
        /// The journal file.
        path: PathBuf,
        /// Stop by itself past this file size (bytes).
        max_bytes: u64,
    },
}

/// The hidden first argument that makes this binary the controller (`haptic run ...`), for
/// figure 3: the product's own code, no prebuilt `haptic` binary needed (as `haptic-demo`).
pub const CONTROLLER_ARG: &str = "__controller";

/// Runs the command line `args` (the first item is the program name, as in `std::env::args`).
///
/// # Errors
/// A figure failed (its I/O, the journal, redb or SQLite), or the arguments are wrong.
pub fn run(args: impl IntoIterator<Item = String>) -> Result<()> {
    let args = Args::parse_from(args);
    if let Some(Hidden::Burst { path, max_bytes }) = &args.hidden {
        return figures::recovery::burst_child(path, *max_bytes);
    }
    let base = match &args.dir {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            d.clone()
        }
        None => std::env::current_dir()?,
    };
    let tmp = tempfile::Builder::new()
        .prefix("haptic-bench-")
        .tempdir_in(&base)
        .with_context(|| format!("temporary directory in {}", base.display()))?;
    let ctx = Ctx {
        dir: tmp.path().to_owned(),
        quick: args.quick,
        large: args.large,
        exe: std::env::current_exe()?,
    };
    let started = Instant::now();
    let mut rows = Vec::new();
    for f in FIGURES {
        if !args.only.is_empty() && !args.only.contains(&f.id) {
            continue;
        }
        let t = Instant::now();
        eprintln!("haptic-bench: figure {} ({})...", f.id, f.name);
        let mut r = (f.run)(&ctx).with_context(|| format!("figure {} ({})", f.id, f.name))?;
        eprintln!(
            "haptic-bench: figure {} done in {:.0} s",
            f.id,
            t.elapsed().as_secs_f64()
        );
        rows.append(&mut r);
    }
    // Rows in figure-number order (a figure may measure its parts in another order).
    rows.sort_by_key(|r| report::number(&r.figure));
    if args.json {
        for r in &rows {
            println!("{}", r.json());
        }
    } else {
        println!(
            "haptic-bench {}: {} run, redb 4.6, SQLite {} (WAL, synchronous=FULL), Durability::Immediate, {} CPUs, files in {}, {:.0} s",
            env!("CARGO_PKG_VERSION"),
            if args.quick { "quick" } else { "full" },
            peers::sqlite_version(),
            std::thread::available_parallelism().map_or(0, usize::from),
            base.display(),
            started.elapsed().as_secs_f64()
        );
        println!();
        print!("{}", report::markdown(&rows));
        println!();
        println!("{NOTES}");
    }
    Ok(())
}
