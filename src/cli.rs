//! Command-line interface (STYLE.md 2.9).
//!
//! Subcommands so far: `crds` (print the CRD YAML) and `version`. The controller's `run`
//! subcommand and its flag groups (`KubeArgs`, `DataplaneArgs`, `JournalArgs`,
//! `TelemetryArgs`, each flag `long` with an `env = "HAPTIC_..."`) come with the component issues.

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
pub enum Command {
    /// Print the four CustomResourceDefinitions as one multi-document YAML stream
    /// (the content of `deploy/crds/`).
    Crds,
    /// Print the version.
    Version,
}
