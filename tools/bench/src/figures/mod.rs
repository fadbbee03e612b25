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
pub mod floor;
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
    /// Short name (`--only` accepts the number).
    pub name: &'static str,
    /// Measures it.
    pub run: fn(&Ctx) -> Result<Vec<Row>>,
}

/// Every figure this binary measures, in order.
pub const FIGURES: &[Figure] = &[
    Figure {
        id: 1,
        name: "commit floor",
        run: floor::run,
    },
    Figure {
        id: 2,
        name: "durable accept",
        run: accept::run,
    },
    Figure {
        id: 3,
        name: "end to end (and 9, memory)",
        run: e2e::run,
    },
    Figure {
        id: 4,
        name: "recovery",
        run: recovery::run,
    },
    Figure {
        id: 5,
        name: "size",
        run: size::run,
    },
    Figure {
        id: 6,
        name: "status coalescing",
        run: status::run,
    },
    Figure {
        id: 7,
        name: "fan-out",
        run: fanout::run,
    },
    Figure {
        id: 8,
        name: "reloads per 100 server changes, fine-grained vs raw push",
        run: reloads::run,
    },
];
