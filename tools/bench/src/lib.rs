//! `haptic-bench`: the journal's performance figures (issue 12, part 2), one Markdown table.
//!
//! Every figure is measured beside its reference in the same run (raw redb doing the same work,
//! SQLite in WAL mode with `synchronous=FULL`, the disk's own fsync rate), interleaved where the
//! disk's latency drifts, and printed as one row: value, reference, ratio, target, pass, and what
//! limits it.
//!
//! ```text
//! haptic-bench [--quick] [--large] [--json] [--dir DIR] [--only 1,2,7L]
//!   figures (registry: figures/mod.rs)  ->  rows  ->  Markdown table | JSON lines
//!   1 commit floor   2 durable accept   3 end to end (9 memory)   4 recovery   5 size
//!   6 status coalescing   7 fan-out   8 reloads
//!   --large: 4.2, and at fleet scale (issue 28): 5L history size, 7L fan-out (9L RSS)
//! ```
//!
//! - `--quick`: fewer samples (under 2 minutes on 2 cores); the full run takes a few minutes.
//! - `--large`: adds the 1 GiB journal reopened after kill -9 (figure 4.2; it re-executes this
//!   binary with the hidden `__burst` argument as the writer process) and the fleet-scale
//!   figures of issue 28, 1,000 pods each:
//!   - 5.L ([`figures::history_size`]): a journal with full pod history (1,000 pods x the
//!     default 200 records, 200 distinct renders kept alive) beside the same journal without
//!     history: file, live bytes, bytes per record, append throughput.
//!   - 6.L: figure 6 itself (1,000 pods in every run); `--large` only notes it in the row.
//!   - 7.L and 9.L ([`figures::fleet`]): figure 7's fan-out to 1,000 stand-ins (capped and
//!     not), the product's `Deployer` in a child process (this binary with the hidden
//!     `__fanout` argument, driven through stdin) whose peak and idle RSS are 9.L.
//! - `--only`: figure numbers, and `5L`, `6L`, `7L`, `9L` (same as `7L`) for the fleet-scale
//!   ones (they need `--large`); an unknown name is an error.
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
    /// Only these figures (comma-separated: numbers, and `5L`, `6L`, `7L`, `9L` for the
    /// fleet-scale figures of `--large`). Default: all (the `L` ones with `--large`).
    #[arg(long, value_delimiter = ',', env = "HAPTIC_BENCH_ONLY")]
    only: Vec<String>,
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
    /// The deployer process of figures 7.L and 9.L (driven through stdin).
    #[command(name = "__fanout", hide = true)]
    Fanout {
        /// Its journal's directory.
        dir: PathBuf,
        /// The fleet (endpoints and credentials, JSON) written by the parent.
        spec: PathBuf,
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
    match &args.hidden {
        Some(Hidden::Burst { path, max_bytes }) => {
            return figures::recovery::burst_child(path, *max_bytes);
        }
        Some(Hidden::Fanout { dir, spec }) => return figures::fleet::child(dir, spec),
        None => {}
    }
    for name in &args.only {
        let Some(f) = FIGURES.iter().find(|f| f.selected_by(name)) else {
            let names: Vec<String> = FIGURES
                .iter()
                .flat_map(|f| {
                    std::iter::once(f.label()).chain(f.also.iter().map(|a| (*a).to_owned()))
                })
                .collect();
            anyhow::bail!("--only {name}: no such figure ({})", names.join(", "));
        };
        if f.large && !args.large {
            anyhow::bail!("--only {name}: figure {} needs --large", f.label());
        }
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
        let selected = if args.only.is_empty() {
            !f.large || args.large
        } else {
            args.only.iter().any(|n| f.selected_by(n))
        };
        if !selected {
            continue;
        }
        let t = Instant::now();
        let id = f.label();
        eprintln!("haptic-bench: figure {id} ({})...", f.name);
        let mut r = (f.run)(&ctx).with_context(|| format!("figure {id} ({})", f.name))?;
        eprintln!(
            "haptic-bench: figure {id} done in {:.0} s",
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
