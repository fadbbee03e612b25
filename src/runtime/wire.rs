//! Wire: the task set, the dispatcher with one subscription per component (taken before it
//! runs, in a fixed order), the config identity, and what every replica runs whether it leads
//! or follows: the validator, the Kubernetes Events of the fleet, the journal watch, the
//! version check and the fleet's metrics (the leader-only components are [`super::lead`]'s).
//!
//! Three cancellation tokens order the stop ([`super::stop`]): `inputs` stops the sources and
//! discovery (first); `lease` stops the elector after the drains; `work` stops the dispatcher
//! and the components (last).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use futures::FutureExt as _;
use haptic_journal::{ConfigIdentity, RuntimeConfigRef};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument as _, error, info_span};

use super::lead::Leading;
use super::open::{Opened, Probes, identity_and_owner};
use super::{Settings, journal_watch, notify, version_check};
use crate::components::{drift, publisher, scheduler, validator};
use crate::dispatch::{DispatchHandle, Dispatcher, Subscription};

/// Capacity of the channel critical tasks report their end on (one report per task).
const FATAL_CAPACITY: usize = 32;

/// A critical task ended: its name and, when it failed, why.
pub(super) type Ended = (&'static str, Result<(), String>);

/// Spawns critical tasks: each reports its end (error, panic, or an early `Ok`).
#[derive(Clone)]
pub(super) struct Critical {
    tracker: TaskTracker,
    ended: mpsc::Sender<Ended>,
}

impl Critical {
    /// Spawns `fut` on the tracker as the component `name`; its end is reported.
    pub(super) fn spawn<F, E>(&self, name: &'static str, fut: F) -> tokio::task::JoinHandle<()>
    where
        F: Future<Output = Result<(), E>> + Send + 'static,
        E: std::error::Error,
    {
        let ended = self.ended.clone();
        self.tracker.spawn(
            async move {
                let result = match std::panic::AssertUnwindSafe(fut).catch_unwind().await {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(e)) => Err(crate::core::error::chain(&e)),
                    Err(_) => Err("panicked".to_owned()),
                };
                if let Err(reason) = &result {
                    error!(component = name, %reason, "component failed");
                }
                let _ = ended.try_send((name, result));
            }
            .instrument(info_span!("component", name)),
        )
    }
}

/// Every long-lived task of the process and the tokens that stop them.
pub(super) struct Tasks {
    /// Tracks every task (critical or not), so the stop can wait for all of them.
    pub(super) tracker: TaskTracker,
    /// Spawns the tasks whose end stops the process.
    pub(super) critical: Critical,
    /// The ends of critical tasks ([`Critical::spawn`]).
    pub(super) ended: mpsc::Receiver<Ended>,
    /// Stops the dispatcher and the components (last).
    pub(super) work: CancellationToken,
    /// Stops the render source, pod discovery and the ingest endpoint (first).
    pub(super) inputs: CancellationToken,
    /// Stops the Lease elector (after the drains; it releases the Lease).
    pub(super) lease: CancellationToken,
}

/// The subscriptions of the leader-only components.
pub(super) struct LeaderSubscriptions {
    /// The scheduler's.
    pub(super) scheduler: Subscription,
    /// The drift monitor's.
    pub(super) drift: Subscription,
    /// The config publisher's.
    pub(super) publisher: Subscription,
}

/// The subscriptions of what every replica runs.
pub(super) struct ReplicaSubscriptions {
    /// The validator's.
    validator: Subscription,
    /// The fleet Events' ([`notify`]).
    notify: Subscription,
    /// The fleet metrics' ([`crate::telemetry::fleet`]).
    fleet: Subscription,
}

/// Every subscription, taken before the dispatcher runs.
pub(super) struct Subscriptions {
    /// Leader-only components ([`super::lead`]).
    pub(super) leader: LeaderSubscriptions,
    /// Every replica ([`start_every_replica`]).
    pub(super) replica: ReplicaSubscriptions,
}

/// What the wiring built, shared by the roles after it.
pub(super) struct Wired {
    /// The tasks and their tokens.
    pub(super) tasks: Tasks,
    /// The dispatcher's handle (it runs).
    pub(super) dispatch: DispatchHandle,
    /// The config identity (DESIGN.md section 1).
    pub(super) identity: ConfigIdentity,
    /// The HAProxyCfg's owner (the source ConfigMap, when it exists).
    pub(super) owner: Option<OwnerReference>,
    /// The main HAProxyCfg.
    pub(super) runtime_config: RuntimeConfigRef,
    /// The Kubernetes Events of the process.
    pub(super) notifier: notify::Notifier,
}

/// Reads the config identity, builds the task set and the notifier, subscribes every
/// component and starts the dispatcher.
pub(super) async fn wire(settings: &Settings, opened: &Opened) -> (Wired, Subscriptions) {
    let (identity, owner) = identity_and_owner(&opened.client, settings, &opened.namespace).await;
    let runtime_config =
        publisher::PublisherConfig::new(identity.clone(), &opened.namespace).runtime_config();
    let mut dispatcher = Dispatcher::new(opened.journal.clone());
    let subscriptions = Subscriptions {
        leader: LeaderSubscriptions {
            scheduler: dispatcher.subscribe(scheduler::subscribe_options()),
            drift: dispatcher.subscribe(drift::subscribe_options()),
            publisher: dispatcher.subscribe(publisher::subscribe_options()),
        },
        replica: ReplicaSubscriptions {
            validator: dispatcher.subscribe(validator::subscribe_options()),
            notify: dispatcher.subscribe(notify::subscribe_options()),
            fleet: dispatcher.subscribe(crate::telemetry::fleet::subscribe_options()),
        },
    };
    let dispatch = dispatcher.handle();
    let notifier = notify::Notifier::new(opened.client.clone(), &opened.identity, &runtime_config);
    let tracker = TaskTracker::new();
    let (ended_tx, ended) = mpsc::channel::<Ended>(FATAL_CAPACITY);
    let tasks = Tasks {
        critical: Critical {
            tracker: tracker.clone(),
            ended: ended_tx,
        },
        tracker,
        ended,
        work: CancellationToken::new(),
        inputs: CancellationToken::new(),
        lease: CancellationToken::new(),
    };
    tasks
        .critical
        .spawn("dispatcher", dispatcher.run(tasks.work.clone()));
    let wired = Wired {
        tasks,
        dispatch,
        identity,
        owner,
        runtime_config,
        notifier,
    };
    (wired, subscriptions)
}

/// Starts what every replica runs: the validator, the metrics and stall checks of every
/// component, the fleet Events, the journal watch, the version check, and the fleet metrics
/// (folded from the journal first). Announces a journal rebuilt at open.
pub(super) async fn start_every_replica(
    opened: &Opened,
    wired: &Wired,
    subscriptions: ReplicaSubscriptions,
    leading: &Leading,
    probes: &Probes,
) {
    let ReplicaSubscriptions {
        validator: validator_sub,
        notify: notify_sub,
        fleet: fleet_sub,
    } = subscriptions;
    let (dispatch, work, metrics) = (&wired.dispatch, &wired.tasks.work, &probes.metrics);
    let validation_stats = Arc::new(validator::ValidationStats::default());
    wired.tasks.critical.spawn(
        validator::COMPONENT,
        validator::run(
            opened.validator.clone(),
            dispatch.clone(),
            validator_sub,
            validation_stats.clone(),
            work.clone(),
        ),
    );
    metrics.register(validation_stats.clone());
    metrics.register_dispatch(dispatch.clone());
    leading.register_metrics(metrics);
    // A component waiting for the journal (a storage fault) is not stalled: a restart would not
    // help, so the stall checks pass while it lasts and for a stall period after it.
    let last_fault_ms = Arc::new(AtomicU64::new(0));
    let excused = |check: crate::telemetry::HealthCheck| {
        crate::telemetry::excused_while_journal_faulted(move || check(), last_fault_ms.clone())
    };
    for (component, check) in leading.stall_checks() {
        probes.health.add_liveness(component, excused(check));
    }
    probes.health.add_liveness(
        validator::COMPONENT,
        excused(Arc::new(crate::telemetry::component_stall_check(
            validation_stats.health.clone(),
        ))),
    );
    let tracker = &wired.tasks.tracker;
    tracker.spawn(notify::run(
        notify_sub,
        dispatch.clone(),
        wired.notifier.clone(),
    ));
    tracker.spawn(
        journal_watch::run(
            opened.journal.clone(),
            dispatch.clone(),
            journal_watch::Reporters {
                notifier: wired.notifier.clone(),
                metrics: metrics.clone(),
                client: opened.client.clone(),
                runtime_config: wired.runtime_config.clone(),
                lease: leading.lease(),
                last_fault_ms: last_fault_ms.clone(),
                announced: probes.announced.clone(),
            },
            work.clone(),
        )
        .instrument(info_span!("journal-watch")),
    );
    tracker.spawn(
        version_check::run(
            leading.deployer.version_report(),
            wired.notifier.clone(),
            opened.client.clone(),
            wired.runtime_config.clone(),
            metrics.clone(),
            leading.lease(),
            work.clone(),
        )
        .instrument(info_span!("version-check")),
    );
    {
        let (j, m) = (opened.journal.clone(), metrics.clone());
        let _ = tokio::task::spawn_blocking(move || crate::telemetry::fleet::fold_journal(&j, &m))
            .await;
    }
    tracker.spawn(
        crate::telemetry::fleet::run(fleet_sub, dispatch.clone(), metrics.clone())
            .instrument(info_span!("telemetry")),
    );
    if let Some((aside, reason)) = &opened.rebuilt_from {
        wired.notifier.emit(
            kube::runtime::events::EventType::Warning,
            notify::reasons::JOURNAL_REBUILT,
            "Recover",
            format!(
                "journal damaged ({reason}); moved to {} and rebuilt empty",
                aside.display()
            ),
        );
    }
}
