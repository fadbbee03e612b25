//! haptic: a controller for fleets of HAProxy pods on Kubernetes, with a crash-safe redb journal.
//!
//! ```text
//!  render source --> TemplateRendered --+                        +--> Deployer --> Dataplane API of each HAProxy pod
//!  (ConfigMap/dir/   ValidationCompleted|   Journal.accept()     |   (DeploymentScheduler -> DeploymentScheduled ->
//!   ingest API)      ValidationFailed   +--> commit (fsync) --> dispatch    Deployer -> DeploymentCompleted, ConfigAppliedToPod)
//!  pod discovery --> HAProxyPodsDiscovered, HAProxyPodTerminated          |   DriftPreventionMonitor -> DriftPreventionTriggered
//!  Lease elector --> BecameLeader / LostLeadership                        +--> ConfigPublisher --> Kubernetes API
//!                                                                              HAProxyCfg (+ -invalid), HAProxyMapFile,
//!                                  redb file on the PV <-- haptic-journalctl    HAProxyGeneralFile, HAProxyCRTListFile,
//!                                                         (offline inspection)   Secrets, per-pod status, conditions
//! ```
//!
//! Modules:
//! - [`core`]: pure code (checksums, names, compression, IDs, error classification); no I/O,
//!   no clock, no randomness (enforced by the architecture test);
//! - [`k8s`]: the custom resource types and their CRDs, the Lease, pod discovery, the writer;
//! - [`dataplane`]: the HAProxy Dataplane API v3 client;
//! - [`components`]: `deployment-scheduler`, `deployer`, `drift-monitor`, `config-publisher`;
//! - [`dispatch`]: the event dispatcher (journal first, then the components, in `Seq` order);
//! - [`source`]: render sources (directory, ConfigMap, HTTP ingest) and the input boundary type;
//! - [`validate`]: `haproxy -c` on a render in a private temp dir;
//! - [`runtime`]: `haptic run`, the wiring of all of the above into one process (leadership,
//!   drain on SIGTERM, journal recovery, Kubernetes Events);
//! - [`telemetry`]: logs, `/healthz`, `/readyz`, `/metrics`;
//! - [`cli`]: the command line (the flags of `run` live in [`runtime::args`]).
//!
//! Layers, bottom up (each points only down; `tests/integration/architecture.rs` holds it):
//! `haptic_journal` (ids, events, work items) -> [`core`] -> [`dispatch`] -> adapters ([`k8s`],
//! [`dataplane`], [`source`], [`validate`]) -> [`components`] -> [`telemetry`] -> [`runtime`] ->
//! [`cli`] and the binaries. The demo (README command 1) is the separate crate `haptic-demo`, so
//! the product never links the sandbox.
//!
//! Invariants every component keeps: an event is acted on only after its journal commit; one
//! checksum format (`sha256:<hex>`, [`haptic_journal::render_checksum`]) identifies a render
//! everywhere; retries
//! belong to the components' pure decision code, never to the HTTP clients.

#![warn(missing_docs)]

/// Implements `Debug` for a type that holds clients, channels or tasks: its name, the fields
/// given as `"label" => expression over the binding`, then `..` (`finish_non_exhaustive`).
///
/// `debug_non_exhaustive!(Deployer, |d| "settings" => d.settings);`
macro_rules! debug_non_exhaustive {
    ($t:ty, |$s:ident| $($label:literal => $value:expr),+ $(,)?) => {
        impl std::fmt::Debug for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                let $s = self;
                f.debug_struct(stringify!($t))
                    $(.field($label, &$value))+
                    .finish_non_exhaustive()
            }
        }
    };
}

pub mod cli;
pub mod components;
pub mod core;
pub mod dataplane;
pub mod dispatch;
pub mod k8s;
pub mod runtime;
pub mod source;
pub mod telemetry;
pub mod validate;

use std::io::Write as _;

/// Errors of [`run`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// The CRDs could not be rendered as YAML.
    #[error("cannot render the crds as yaml")]
    CrdYaml(#[source] serde_norway::Error),
    /// Writing to standard output failed.
    #[error("cannot write to stdout")]
    Stdout(#[source] std::io::Error),
    /// The controller stopped with an error.
    #[error(transparent)]
    Runtime(#[from] runtime::RuntimeError),
    /// `haptic plan` could not plan every pod.
    #[error(transparent)]
    Plan(#[from] runtime::plan::PlanError),
}

/// How a CLI invocation ended without an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Done (exit code 0).
    Done,
    /// `haptic plan`: some pod would change (exit code 2).
    WouldChange,
}

impl Outcome {
    /// The process exit code: 0, or 2 for [`Outcome::WouldChange`].
    #[must_use]
    pub fn exit_code(self) -> std::process::ExitCode {
        match self {
            Outcome::Done => std::process::ExitCode::SUCCESS,
            Outcome::WouldChange => std::process::ExitCode::from(2),
        }
    }
}

/// Run one CLI invocation.
///
/// # Errors
/// [`RunError::CrdYaml`] if the CRD YAML cannot be produced, [`RunError::Stdout`] if standard
/// output cannot be written.
///
/// # Cancel safety
/// The subcommands so far do no asynchronous work; dropping the future is safe.
pub async fn run(cli: cli::Cli) -> Result<Outcome, RunError> {
    let out = match cli.command {
        cli::Command::Plan(args) => {
            return Ok(if runtime::plan::run(args).await? {
                Outcome::WouldChange
            } else {
                Outcome::Done
            });
        }
        cli::Command::Crds => k8s::crd::all_crds_yaml().map_err(RunError::CrdYaml)?,
        cli::Command::Version => format!("haptic {}\n", env!("CARGO_PKG_VERSION")),
        cli::Command::Run(args) => {
            if let Err(error) = telemetry::init_tracing(args.log_format) {
                eprintln!("haptic: logging not initialised: {error}");
            }
            runtime::run(args).await?;
            return Ok(Outcome::Done);
        }
    };
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(out.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(RunError::Stdout)?;
    Ok(Outcome::Done)
}
