//! The controller runtime (`haptic run`): wires the journal, the dispatcher, the input side
//! (render source, pod discovery, the Lease elector, validation) and the leader-only components
//! (scheduler + deployer, drift monitor, config publisher) into one process (issue 6).
//!
//! ```text
//!  dir / ConfigMap source ─┐
//!  pod discovery ──────────┼─► input channel (bounded) ─► acceptor ─► Journal::accept ─► dispatcher
//!  Lease elector ──────────┘                                                              │ Seq order
//!     ┌───────────────────────────────┬──────────────────────────┬────────────────────────┤
//!     ▼                               ▼                          ▼                        ▼
//!  validator (every replica)   scheduler ─► deployer      drift monitor            config publisher
//!  haproxy -c ─► verdicts      (gates on leadership)      (leader only)            (leader only)
//! ```
//!
//! Every component reacts to journaled events only; components journal their own events the
//! same way (J1). Leader-only components start their work on a live `leader.became` and stop on
//! `leader.lost` (the dispatcher gates delivery, the components gate themselves), so one process
//! follows, leads, loses and leads again without restarting.
//!
//! [`run`] is the sequence of five roles, one module each: [`open`] (probes, `haproxy`, the
//! journal, the Kubernetes client, the credentials), `wire` (the dispatcher, one subscription
//! per component, the task set, what every replica runs), `lead` (the Lease elector and the
//! leader-only components), [`inputs`] (the acceptor, the config identity, the render source,
//! pod discovery, the ingest endpoint, the elector started) and `stop`.
//!
//! Shutdown (SIGTERM or SIGINT): stop the inputs; when leading, the deployer's drain, then every
//! accepted event is dispatched, then the publisher's drain; then the Lease is released (its
//! `leader.lost` journaled); then everything else stops. A critical task that fails or ends
//! early stops the process with a non-zero exit.
//!
//! # Failpoints
//! Those of the components and the journal (feature `failpoints`).
//! # Metrics
//! `/metrics` (see [`crate::telemetry`] once wired).

pub mod args;
pub mod inputs;
mod journal_watch;
mod lead;
pub mod notify;
pub mod open;
pub mod plan;
pub mod settings;
mod stop;
#[cfg(test)]
mod tests;
pub mod version_check;
mod wire;

use std::sync::Arc;

use tracing::info;

use args::RunArgs;

pub use inputs::{AcceptorStats, INPUT_CAPACITY, batch_of};
pub use settings::{Settings, SettingsError};

/// Why `haptic run` stopped with an error. Each message names the input and the fix.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// A flag combination that cannot work.
    #[error(transparent)]
    Settings(#[from] SettingsError),
    /// `haproxy` is missing (validation needs it).
    #[error(transparent)]
    Haproxy(#[from] crate::validate::ValidatorError),
    /// The journal could not be opened.
    #[error(transparent)]
    Journal(#[from] open::journal::JournalOpenError),
    /// No usable Kubernetes configuration.
    #[error(
        "cannot configure the kubernetes client: pass --kubeconfig PATH, or run in a pod with a service account"
    )]
    Kube(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The Dataplane HTTP client could not be built.
    #[error("cannot build the dataplane http client")]
    Dataplane(#[source] crate::dataplane::DataplaneError),
    /// The Lease settings cannot fence.
    #[error(transparent)]
    Lease(#[from] crate::k8s::lease::LeaseConfigError),
    /// A journal commit failed at start-up.
    #[error("journal commit failed at start-up")]
    Dispatch(#[source] crate::dispatch::DispatchError),
    /// A critical task failed or ended on its own.
    #[error("component {component} stopped: {reason}")]
    Component {
        /// The component.
        component: &'static str,
        /// What happened.
        reason: String,
    },
    /// A listening address could not be bound.
    #[error("cannot listen on {addr} ({what}): pick a free address")]
    Bind {
        /// The flag.
        what: &'static str,
        /// The address.
        addr: std::net::SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The ingest token could not be read.
    #[error(transparent)]
    Ingest(#[from] crate::source::ingest::IngestError),
    /// The signal handler could not be installed.
    #[error("cannot install the signal handler")]
    Signal(#[source] std::io::Error),
    /// A blocking start-up task failed.
    #[error("a start-up task failed")]
    Join,
}

/// The process's metrics: the telemetry's own families and every component's, each family
/// exported (at 0) from the first scrape, before the components exist.
#[must_use]
pub fn metrics() -> Arc<crate::telemetry::Metrics> {
    use crate::components::{deployer, drift, publisher, scheduler, validator};
    let metrics = crate::telemetry::Metrics::new();
    metrics.declare::<Arc<validator::ValidationStats>>();
    metrics.declare::<Arc<deployer::Deployer>>();
    metrics.declare::<publisher::ConfigPublisher>();
    metrics.declare::<Arc<scheduler::SchedulerStats>>();
    metrics.declare::<drift::DriftHandle>();
    metrics
}

/// Runs the controller until SIGTERM/SIGINT (graceful, exit 0) or until a critical component
/// fails (error).
///
/// # Errors
/// [`RuntimeError`], each naming the input and the fix.
///
/// # Cancel safety
/// Not cancel safe: stop it with a signal, which runs the drain.
pub async fn run(args: RunArgs) -> Result<(), RuntimeError> {
    let settings = Settings::resolve(&args)?;
    info!(settings = ?settings.args, config_name = %settings.config_name, "haptic starting");
    let signal = stop::shutdown_signal()?;
    tokio::pin!(signal);
    let probes = open::Probes::serve(&args).await?;
    let Some(opened) = open::open(&args, &probes, signal.as_mut()).await? else {
        return Ok(());
    };
    let (mut wired, subscriptions) = wire::wire(&settings, &opened).await;
    let (leading, elector) = lead::start(&args, &opened, &wired, subscriptions.leader, &probes)?;
    wire::start_every_replica(&opened, &wired, subscriptions.replica, &leading, &probes).await;
    let inputs = inputs::start(&args, &settings, &opened, &wired, elector, &probes).await?;
    probes.started();
    info!("haptic running");

    let failure = stop::wait_for_end(signal.as_mut(), &mut wired.tasks).await;
    stop::stop(
        stop::Stopping {
            tasks: wired.tasks,
            dispatch: wired.dispatch,
            inputs,
            leading,
            journal: opened.journal,
            credentials: opened.credentials,
            probes,
            drain_timeout: args.drain_timeout,
        },
        failure.is_some(),
    )
    .await;
    match failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
