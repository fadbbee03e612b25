//! The figure registry: each figure of issue 12 part 2 is one [`Figure`], run in number order.
//!
//! Adding a figure is one
//! module here and one entry in [`FIGURES`]: a `run` function that measures the figure and its
//! reference side by side and returns [`Row`]s.

use std::path::PathBuf;

use anyhow::Result;

use crate::report::Row;

pub mod accept;
pub mod e2e;
pub mod fanout;
pub mod fleet;
pub mod floor;
pub mod history_size;
pub mod recovery;
pub mod reloads;
pub mod size;
pub mod status;

/// What every figure gets.
#[derive(Debug)]
pub struct Ctx {
    /// Where the figure's files go (the journal's disk: its fsync rate is figure 1).
    pub dir: PathBuf,
    /// `--quick`: fewer samples and events (under 2 minutes in all).
    pub quick: bool,
    /// `--large`: also the 1 GiB journal cases.
    pub large: bool,
    /// This binary (figures that need a child process re-exec it with a hidden argument).
    pub exe: PathBuf,
}

impl Ctx {
    /// `full` in a full run, `quick` with `--quick`.
    pub fn pick<T>(&self, quick: T, full: T) -> T {
        if self.quick { quick } else { full }
    }

    /// A fresh sub-directory of [`Self::dir`] for one figure.
    pub fn subdir(&self, name: &str) -> Result<PathBuf> {
        let d = self.dir.join(name);
        if d.exists() {
            std::fs::remove_dir_all(&d)?;
        }
        std::fs::create_dir_all(&d)?;
        Ok(d)
    }
}

/// Runs `measure` on a runtime of two worker threads (the machine the figures are measured on
/// has two cores), the way every figure that drives async peers does.
///
/// # Errors
/// The runtime cannot be built, or `measure`'s error.
pub fn on_runtime<T>(measure: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(measure)
}

/// One figure.
#[derive(Debug)]
pub struct Figure {
    /// Its number in issue 12.
    pub id: u32,
    /// A fleet-scale figure (issue 28): run only with `--large`, selected as `<id>L`.
    pub large: bool,
    /// Other `--only` names that select it (e.g. `6L` for figure 6, which is at 1,000 pods in
    /// every run).
    pub also: &'static [&'static str],
    /// Short name (`--only` accepts [`Figure::label`] and [`Figure::also`]).
    pub name: &'static str,
    /// Measures it.
    pub run: fn(&Ctx) -> Result<Vec<Row>>,
}

impl Figure {
    /// The `--only` name: the number, with an `L` for a `--large` figure (`7`, `7L`).
    #[must_use]
    pub fn label(&self) -> String {
        if self.large {
            format!("{}L", self.id)
        } else {
            self.id.to_string()
        }
    }

    /// Whether the `--only` name `name` (case-insensitive) selects this figure.
    #[must_use]
    pub fn selected_by(&self, name: &str) -> bool {
        self.label().eq_ignore_ascii_case(name)
            || self.also.iter().any(|a| a.eq_ignore_ascii_case(name))
    }
}

/// Every figure this binary measures, in order: figures 1-8, then the fleet-scale ones
/// (`--large`).
pub const FIGURES: &[Figure] = &[
    Figure {
        id: 1,
        large: false,
        also: &[],
        name: "commit floor",
        run: floor::run,
    },
    Figure {
        id: 2,
        large: false,
        also: &[],
        name: "durable accept",
        run: accept::run,
    },
    Figure {
        id: 3,
        large: false,
        also: &[],
        name: "end to end (and 9, memory)",
        run: e2e::run,
    },
    Figure {
        id: 4,
        large: false,
        also: &[],
        name: "recovery",
        run: recovery::run,
    },
    Figure {
        id: 5,
        large: false,
        also: &[],
        name: "size",
        run: size::run,
    },
    Figure {
        id: 6,
        large: false,
        also: &["6L"],
        name: "status coalescing",
        run: status::run,
    },
    Figure {
        id: 7,
        large: false,
        also: &[],
        name: "fan-out",
        run: fanout::run,
    },
    Figure {
        id: 8,
        large: false,
        also: &[],
        name: "reloads per 100 server changes, fine-grained vs raw push",
        run: reloads::run,
    },
    Figure {
        id: 5,
        large: true,
        also: &[],
        name: "journal size with full pod history, 1,000 pods",
        run: history_size::run,
    },
    Figure {
        id: 7,
        large: true,
        also: &["9L"],
        name: "fan-out to 1,000 stand-ins (and 9.L, the deployer process's RSS)",
        run: fleet::run,
    },
];
