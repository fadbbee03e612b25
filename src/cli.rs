//! Command-line interface (STYLE.md 2.9).
//!
//! Subcommands: `run` (the controller), `plan` (what a deployment would do, read-only), `crds`
//! (print the CRD YAML) and `version`. The flags of
//! `run` are [`RunArgs`] (defined beside the runtime that consumes them). The demo (README
//! command 1) is its own binary, `haptic-demo`, so the product never links the sandbox.

use clap::{Parser, Subcommand};

/// haptic: a controller for fleets of HAProxy pods on Kubernetes.
#[derive(Debug, Parser)]
#[command(name = "haptic", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once
pub enum Command {
    /// Run the controller.
    Run(RunArgs),
    /// Print, per pod, what a deployment of a render would do (runtime changes, a
    /// transaction's operations, files written and deleted, raw push or not, reload or not),
    /// read-only. Exit code 0: no pod would change; 2: some would; 1: an error.
    Plan(PlanArgs),
    /// Print the four CustomResourceDefinitions as one multi-document YAML stream
    /// (the content of `deploy/crds/`).
    Crds,
    /// Print the version.
    Version,
}

pub use crate::runtime::args::{
    JournalConcurrency, JournalRecovery, LogFormat, RunArgs, SourceKind,
};
pub use crate::runtime::plan::PlanArgs;

/// The multi-threaded tokio runtime a binary runs on (the `haptic` binary, and `haptic-demo`
/// both for itself and for the controller it re-enters).
///
/// # Errors
/// When the runtime cannot be built: the error is printed as `error: ...` and the binary's exit
/// code (1) returned.
pub fn tokio_runtime() -> Result<tokio::runtime::Runtime, std::process::ExitCode> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("error: cannot build the tokio runtime: {e}");
            std::process::ExitCode::FAILURE
        })
}
