//! Inputs: what brings facts into the journal, started last so that everything that reacts to
//! them is wired: the acceptor (the one door, [`run`]), the config identity, the render source,
//! pod discovery, the ingest endpoint, and the Lease elector (its `leader.became` is an input
//! like any other).
//!
//! ```text
//!  dir / ConfigMap source ─┐
//!  pod discovery ──────────┤
//!  ingest endpoint ────────┼─► input channel (bounded) ─► acceptor ─► Journal::accept ─► dispatcher
//!  Lease elector ──────────┘
//! ```

mod acceptor;
mod source;

use std::sync::Arc;

use haptic_journal::Event;
use tokio::sync::mpsc;
use tracing::{Instrument as _, info_span};

pub use acceptor::{AcceptorStats, INPUT_CAPACITY, batch_of, run};

use super::RuntimeError;
use super::args::RunArgs;
use super::open::{Opened, Probes};
use super::settings::Settings;
use super::wire::Wired;
use crate::dispatch::input::Input;
use crate::k8s::discovery::{DiscoveryConfig, PodDiscovery};
use crate::k8s::lease::{LeaderElector, LeaseError};

/// The input side, running.
pub(super) struct Running {
    /// The acceptor: the stop waits for it to journal what the inputs sent before they stopped.
    pub(super) acceptor: tokio::task::JoinHandle<()>,
    /// The Lease elector: the stop waits for it to release the Lease.
    pub(super) elector: tokio::task::JoinHandle<Result<(), LeaseError>>,
}

/// Starts the acceptor, journals the config identity (before any render: the scheduler and the
/// publisher need it), then starts the render source, pod discovery, the ingest endpoint and
/// `elector`.
///
/// # Errors
/// [`RuntimeError::Dispatch`] when the config identity cannot be journaled;
/// [`RuntimeError::Ingest`] and [`RuntimeError::Bind`] from the ingest endpoint.
pub(super) async fn start(
    args: &RunArgs,
    settings: &Settings,
    opened: &Opened,
    wired: &Wired,
    elector: LeaderElector,
    probes: &Probes,
) -> Result<Running, RuntimeError> {
    let (critical, dispatch, cancel) =
        (&wired.tasks.critical, &wired.dispatch, &wired.tasks.inputs);
    let (tx, rx) = mpsc::channel::<Input>(INPUT_CAPACITY);
    let acceptor = critical.spawn(
        "acceptor",
        run(
            rx,
            dispatch.clone(),
            Arc::new(AcceptorStats::default()),
            probes.metrics.clone(),
        ),
    );

    dispatch
        .publish(Event::ConfigValidated {
            correlation: crate::dispatch::input::chain_start("config"),
            identity: wired.identity.clone(),
        })
        .await
        .map_err(RuntimeError::Dispatch)?;

    let last = {
        let j = opened.journal.clone();
        tokio::task::spawn_blocking(move || source::last_rendered(&j))
            .await
            .unwrap_or(None)
    };
    source::start_source(
        critical,
        settings,
        &opened.client,
        dispatch,
        wired.identity.clone(),
        last,
        tx.clone(),
        cancel,
    );
    let discovery = PodDiscovery::new(
        opened.client.clone(),
        DiscoveryConfig {
            namespace: opened.namespace.clone(),
            selector: args.pod_selector.clone(),
            dataplane_port: args.dataplane_port,
        },
    );
    {
        let synced = discovery.synced();
        probes.health.add_readiness("pod-discovery", move || {
            if *synced.borrow() {
                Ok(())
            } else {
                Err("the first pod list has not arrived".to_owned())
            }
        });
    }
    critical.spawn("pod-discovery", discovery.run(tx.clone(), cancel.clone()));
    source::start_ingest(
        critical,
        args,
        &opened.client,
        &opened.namespace,
        &tx,
        dispatch,
        &probes.metrics,
        cancel,
    )
    .await?;
    let elector = {
        let (tx, c) = (tx.clone(), wired.tasks.lease.clone());
        wired
            .tasks
            .tracker
            .spawn(async move { elector.run(tx, c).await }.instrument(info_span!("lease")))
    };
    drop(tx);
    Ok(Running { acceptor, elector })
}
