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
pub mod notify;
pub mod open;
pub mod settings;
pub mod version_check;
mod wiring;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt as _;
use haptic_journal::Event;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument as _, error, info, info_span, warn};

use crate::components::deployer::{Deployer, DeployerSettings};
use crate::components::publisher::{ConfigPublisher, PublisherConfig};
use crate::components::scheduler::{SchedulerSettings, SchedulerShell, SchedulerState};
use crate::components::{drift, publisher, scheduler, validator};
use crate::dataplane::{ClientSettings, Dataplane};
use crate::dispatch::Dispatcher;
use crate::dispatch::input::Input;
use crate::k8s::discovery::{DiscoveryConfig, PodDiscovery};
use crate::k8s::lease::{LeaderElector, LeaseConfig, default_identity};
use crate::validate::Validator;
use args::RunArgs;

pub use inputs::{AcceptorStats, INPUT_CAPACITY, batch_of};
pub use settings::{Settings, SettingsError};
use wiring::{
    drain, identity_and_owner, kube_client, last_rendered, shutdown_signal, start_ingest,
    start_source, wait_dispatched, wait_for_credentials,
};

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
    Journal(#[from] open::JournalOpenError),
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

/// Capacity of the channel critical tasks report their end on (one report per task).
const FATAL_CAPACITY: usize = 32;

/// A critical task ended: its name and, when it failed, why.
type Ended = (&'static str, Result<(), String>);

/// Spawns critical tasks: each reports its end (error, panic, or an early `Ok`).
#[derive(Clone)]
struct Critical {
    tracker: TaskTracker,
    ended: mpsc::Sender<Ended>,
}

impl Critical {
    fn spawn<F, E>(&self, name: &'static str, fut: F) -> tokio::task::JoinHandle<()>
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

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
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
    let signal = shutdown_signal()?;
    tokio::pin!(signal);
    // `/healthz` and `/readyz` from the first moment (issue 16): the server is up before the
    // journal opens, which after a kill -9 can take seconds (redb's repair of a large file; the
    // StatefulSet's startupProbe budget covers it). Liveness has no failing check meanwhile;
    // readiness says the journal is opening.
    let metrics = crate::telemetry::Metrics::new();
    let health = crate::telemetry::HealthRegistry::new();
    let opened_slot: Arc<std::sync::OnceLock<(Arc<haptic_journal::Journal>, u64)>> =
        Arc::new(std::sync::OnceLock::new());
    // A journal storage fault as the journal watch announced it (its readiness text).
    let announced: Arc<std::sync::Mutex<Option<String>>> = Arc::default();
    {
        let (slot, path) = (opened_slot.clone(), args.journal.display().to_string());
        let announced = announced.clone();
        health.add_readiness("journal", move || match slot.get() {
            None => Err(format!(
                "journal opening: {path} (open, repair after a crash, verify)"
            )),
            Some(_) if lock(&announced).is_some() => {
                Err(lock(&announced).clone().unwrap_or_default())
            }
            // A fault the watch has not announced yet (it looks every 250 ms).
            Some((j, _)) if j.storage_fault().is_some() => {
                crate::telemetry::journal_fault_check(j.clone())()
            }
            Some((j, start_next_seq)) => match j.meta() {
                Ok(m) if m.dispatched_through.0 + 1 >= *start_next_seq => Ok(()),
                Ok(m) => Err(format!(
                    "replaying: dispatched through {} of {}",
                    m.dispatched_through.0,
                    start_next_seq - 1
                )),
                Err(e) => Err(format!("journal not readable: {e}")),
            },
        });
    }
    let telemetry_cancel = CancellationToken::new();
    let listener = tokio::net::TcpListener::bind(args.metrics_addr)
        .await
        .map_err(|source| RuntimeError::Bind {
            what: "--metrics-addr",
            addr: args.metrics_addr,
            source,
        })?;
    info!(addr = %listener.local_addr().map_or_else(|_| args.metrics_addr.to_string(), |a| a.to_string()),
        "serving /healthz, /readyz and /metrics");
    let telemetry_task = tokio::spawn(crate::telemetry::serve(
        listener,
        metrics.clone(),
        health.clone(),
        telemetry_cancel.clone(),
    ));

    let validator = Validator::new(&args.haproxy_bin, args.validation_timeout).await?;
    info!(haproxy = validator.version(), "validation uses haproxy -c");
    let validator_version = validator.version().to_owned();
    let (path, recovery, concurrency) = (
        args.journal.clone(),
        args.journal_recovery,
        args.journal_concurrency,
    );
    let opened = tokio::task::spawn_blocking(move || open::open(&path, recovery, concurrency))
        .await
        .map_err(|_| RuntimeError::Join)??;
    let journal = Arc::new(opened.journal);
    info!(journal = %args.journal.display(), "journal open");
    let start_next_seq = journal.meta().map_or(1, |m| m.next_seq.0);
    let _ = opened_slot.set((journal.clone(), start_next_seq));
    metrics.register_journal(journal.clone());
    health.add_liveness(
        "journal",
        crate::telemetry::journal_writable_check(journal.clone()),
    );
    let identity = default_identity(args.identity.as_deref());
    let client = kube_client(&args, &identity).await?;
    let namespace = args
        .namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_owned());
    let lease_config = LeaseConfig {
        duration: args.lease_duration,
        renew_deadline: args.lease_renew_deadline,
        retry_period: args.lease_retry_period,
        margin: args
            .lease_duration
            .saturating_sub(args.lease_renew_deadline),
        ..LeaseConfig::new(namespace.clone(), args.lease_name.clone(), identity.clone())
    };
    lease_config.check()?;
    info!(%namespace, %identity, "kubernetes client ready");

    let started = Arc::new(std::sync::atomic::AtomicBool::new(false));
    {
        let (started, secret) = (
            started.clone(),
            format!("{namespace}/{}", args.dataplane_secret),
        );
        health.add_readiness("startup", move || {
            if started.load(std::sync::atomic::Ordering::Relaxed) {
                Ok(())
            } else {
                Err(format!(
                    "starting: waiting for the dataplane credentials Secret {secret}"
                ))
            }
        });
    }
    // The credentials Secret is watched for the process's life: a rotated password is used from
    // the deployer's next endpoint sync on (issue 16).
    let credentials_cancel = CancellationToken::new();
    let credentials_watch = crate::k8s::credentials::CredentialsWatch::new(
        client.clone(),
        &namespace,
        &args.dataplane_secret,
    );
    let mut credentials_rx = credentials_watch.subscribe();
    let credentials_task = tokio::spawn(
        credentials_watch
            .run(credentials_cancel.clone())
            .instrument(info_span!("dataplane-credentials")),
    );
    let credentials = tokio::select! {
        c = wait_for_credentials(&mut credentials_rx, &credentials_cancel) => c,
        s = &mut signal => {
            info!(signal = s, "stopping before start-up completed");
            credentials_cancel.cancel();
            return Ok(());
        }
    };

    let (config_identity, owner) = identity_and_owner(&client, &settings, &namespace).await;
    let mut publisher_cfg = PublisherConfig::new(config_identity.clone(), &namespace);
    publisher_cfg.owner = owner;
    publisher_cfg.publish_interval = args.publish_interval;
    publisher_cfg.compression_threshold_bytes = args.compression_threshold;
    publisher_cfg.retry = publisher::decide::RetryPolicy {
        initial: args.publish_retry_initial,
        max_delay: args.publish_retry_max,
    };
    publisher_cfg.request_timeout = args.kube_request_timeout;
    publisher_cfg.reporter_instance = Some(identity.clone());
    let runtime_config = publisher_cfg.runtime_config();

    let mut dispatcher = Dispatcher::new(journal.clone());
    let sched_sub = dispatcher.subscribe(scheduler::subscribe_options());
    let drift_sub = dispatcher.subscribe(drift::subscribe_options());
    let pub_sub = dispatcher.subscribe(publisher::subscribe_options());
    let val_sub = dispatcher.subscribe(validator::subscribe_options());
    let notify_sub = dispatcher.subscribe(notify::subscribe_options());
    let fleet_sub = dispatcher.subscribe(crate::telemetry::fleet::subscribe_options());
    let dispatch = dispatcher.handle();

    let floor_journal = journal.clone();
    let elector = LeaderElector::new(client.clone(), lease_config)
        .with_term_floor(move || floor_journal.term().map_or(0, |t| t.0));
    let guard = elector.guard();
    publisher_cfg.lease = Arc::new(guard.clone());

    let dataplane = Dataplane::new(&ClientSettings {
        user_agent: crate::k8s::client::user_agent(&identity),
        ..ClientSettings::default()
    })
    .map_err(RuntimeError::Dataplane)?;
    let deployer = Arc::new(Deployer::new(
        dispatch.clone(),
        dataplane,
        DeployerSettings {
            max_parallel: args.max_parallel,
            raw_push_threshold: args.raw_push_threshold,
            endpoint_timeout: args
                .deployment_timeout
                .saturating_sub(Duration::from_secs(5))
                .max(args.deployment_timeout / 2),
            credentials,
            credentials_source: Some(credentials_rx.clone()),
            validator_version: Some(validator_version.clone()),
            ..DeployerSettings::default()
        },
        Arc::new(guard.clone()),
        Some(crate::k8s::events::notice_hook(
            client.clone(),
            &identity,
            &runtime_config,
            crate::k8s::events::EVENT_WRITE_TIMEOUT,
        )),
    ));
    let state = SchedulerState::new(
        SchedulerSettings::with_intervals(args.min_deployment_interval, args.deployment_timeout),
        format!("{identity}-{}", haptic_journal::UnixMillis::now().0),
    );
    let (shell, scheduler) =
        SchedulerShell::new(state, dispatch.clone(), deployer.clone(), sched_sub);
    let publisher = ConfigPublisher::new(journal.clone(), client.clone(), publisher_cfg);
    publisher.attach(dispatch.clone());
    {
        // Not ready while publishing waits for an operator (CRDs missing, RBAC, credentials):
        // the message names what failed and the fix; the writes are retried meanwhile.
        let publisher = publisher.clone();
        health.add_readiness("publisher", move || match publisher.blocked() {
            None => Ok(()),
            Some(why) => Err(format!(
                "publishing is blocked until an operator acts: {why}"
            )),
        });
    }
    let notifier = notify::Notifier::new(client.clone(), &identity, &runtime_config);

    // Tasks. `work` stops the dispatcher and the components (last); `inputs` stops the sources
    // and discovery (first); `lease` stops the elector after the drains.
    let tracker = TaskTracker::new();
    let (ended_tx, mut ended_rx) = mpsc::channel::<Ended>(FATAL_CAPACITY);
    let critical = Critical {
        tracker: tracker.clone(),
        ended: ended_tx,
    };
    let work = CancellationToken::new();
    let inputs_cancel = CancellationToken::new();
    let lease_cancel = CancellationToken::new();

    critical.spawn("dispatcher", dispatcher.run(work.clone()));
    let acceptor_stats = Arc::new(AcceptorStats::default());
    let (tx, rx) = mpsc::channel::<Input>(INPUT_CAPACITY);
    let acceptor = critical.spawn(
        "acceptor",
        inputs::run(
            rx,
            dispatch.clone(),
            acceptor_stats.clone(),
            metrics.clone(),
        ),
    );
    critical.spawn(scheduler::COMPONENT, shell.run(work.clone()));
    let drift_handle = drift::DriftHandle::default();
    critical.spawn(
        drift::COMPONENT,
        drift::run(
            args.drift_prevention_interval,
            dispatch.clone(),
            drift_sub,
            drift_handle.clone(),
            work.clone(),
        ),
    );
    {
        let (p, w) = (publisher.clone(), work.clone());
        critical.spawn(publisher::COMPONENT, async move { p.run(pub_sub, w).await });
    }
    let validation_stats = Arc::new(validator::ValidationStats::default());
    critical.spawn(
        validator::COMPONENT,
        validator::run(
            validator,
            dispatch.clone(),
            val_sub,
            validation_stats.clone(),
            work.clone(),
        ),
    );
    metrics.register_validator(validation_stats.clone());
    metrics.register_dispatch(dispatch.clone());
    metrics.register_deployer(deployer.clone());
    metrics.register_publisher(publisher.clone());
    metrics.register_scheduler(scheduler.stats.clone());
    metrics.register_drift(drift_handle.clone());
    // A component waiting for the journal (a storage fault) is not stalled: a restart would not
    // help, so the stall checks pass while it lasts and for a stall period after it.
    let last_fault_ms = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let excused = |check: crate::telemetry::HealthCheck| {
        crate::telemetry::excused_while_journal_faulted(move || check(), last_fault_ms.clone())
    };
    health.add_liveness(
        scheduler::COMPONENT,
        excused(Arc::new(crate::telemetry::component_stall_check(
            scheduler.health.clone(),
        ))),
    );
    health.add_liveness(
        crate::components::deployer::COMPONENT,
        excused(Arc::new(crate::telemetry::deployer_stall_check(
            deployer.clone(),
        ))),
    );
    health.add_liveness(
        drift::COMPONENT,
        excused(Arc::new(crate::telemetry::drift_stall_check(drift_handle))),
    );
    health.add_liveness(
        validator::COMPONENT,
        excused(Arc::new(crate::telemetry::component_stall_check(
            validation_stats.health.clone(),
        ))),
    );
    tracker.spawn(notify::run(notify_sub, dispatch.clone(), notifier.clone()));
    tracker.spawn(
        journal_watch::run(
            journal.clone(),
            dispatch.clone(),
            journal_watch::Reporters {
                notifier: notifier.clone(),
                metrics: metrics.clone(),
                client: client.clone(),
                runtime_config: runtime_config.clone(),
                lease: Arc::new(guard.clone()),
                last_fault_ms: last_fault_ms.clone(),
                announced: announced.clone(),
            },
            work.clone(),
        )
        .instrument(info_span!("journal-watch")),
    );
    tracker.spawn(
        version_check::run(
            deployer.version_report(),
            notifier.clone(),
            client.clone(),
            runtime_config.clone(),
            metrics.clone(),
            Arc::new(guard.clone()),
            work.clone(),
        )
        .instrument(info_span!("version-check")),
    );
    {
        let (j, m) = (journal.clone(), metrics.clone());
        let _ = tokio::task::spawn_blocking(move || crate::telemetry::fleet::fold_journal(&j, &m))
            .await;
    }
    tracker.spawn(
        crate::telemetry::fleet::run(fleet_sub, dispatch.clone(), metrics.clone())
            .instrument(info_span!("telemetry")),
    );
    if let Some((aside, reason)) = &opened.rebuilt_from {
        notifier.emit(
            kube::runtime::events::EventType::Warning,
            notify::reasons::JOURNAL_REBUILT,
            "Recover",
            format!(
                "journal damaged ({reason}); moved to {} and rebuilt empty",
                aside.display()
            ),
        );
    }

    // The config identity, before any render (the scheduler and the publisher need it).
    dispatch
        .publish(Event::ConfigValidated {
            correlation: crate::dispatch::input::chain_start("config"),
            identity: config_identity.clone(),
        })
        .await
        .map_err(RuntimeError::Dispatch)?;

    // The input side.
    let last = {
        let j = journal.clone();
        tokio::task::spawn_blocking(move || last_rendered(&j))
            .await
            .unwrap_or(None)
    };
    start_source(
        &critical,
        &settings,
        &client,
        &dispatch,
        config_identity,
        last,
        tx.clone(),
        &inputs_cancel,
    );
    let discovery = PodDiscovery::new(
        client.clone(),
        DiscoveryConfig {
            namespace: namespace.clone(),
            selector: args.pod_selector.clone(),
            dataplane_port: args.dataplane_port,
        },
    );
    {
        let synced = discovery.synced();
        health.add_readiness("pod-discovery", move || {
            if *synced.borrow() {
                Ok(())
            } else {
                Err("the first pod list has not arrived".to_owned())
            }
        });
    }
    critical.spawn(
        "pod-discovery",
        discovery.run(tx.clone(), inputs_cancel.clone()),
    );
    start_ingest(
        &critical,
        &args,
        &client,
        &namespace,
        &tx,
        &dispatch,
        &metrics,
        &inputs_cancel,
    )
    .await?;
    let elector_task = {
        let (tx, c) = (tx.clone(), lease_cancel.clone());
        tracker.spawn(async move { elector.run(tx, c).await }.instrument(info_span!("lease")))
    };
    drop(tx);
    started.store(true, std::sync::atomic::Ordering::Relaxed);
    info!("haptic running");

    let failure = tokio::select! {
        s = &mut signal => { info!(signal = s, "shutting down"); None }
        Some((component, result)) = ended_rx.recv() => Some(RuntimeError::Component {
            component,
            reason: result.err().unwrap_or_else(|| "ended unexpectedly".to_owned()),
        }),
    };

    // Graceful stop.
    inputs_cancel.cancel();
    let leading = dispatch.leadership().borrow().is_leader();
    if leading && failure.is_none() {
        drain(&scheduler, &publisher, &journal, args.drain_timeout).await;
    }
    lease_cancel.cancel();
    match tokio::time::timeout(Duration::from_secs(10), elector_task).await {
        Ok(Ok(Err(error))) => warn!(%error, "lease elector ended with an error"),
        Err(_) => warn!("lease release timed out"),
        _ => {}
    }
    if tokio::time::timeout(Duration::from_secs(10), acceptor)
        .await
        .is_err()
    {
        warn!("input acceptor did not finish in 10s");
    }
    wait_dispatched(&journal, Duration::from_secs(3)).await;
    work.cancel();
    tracker.close();
    if tokio::time::timeout(Duration::from_secs(15), tracker.wait())
        .await
        .is_err()
    {
        warn!("some tasks did not stop within 15s");
    }
    credentials_cancel.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(5), credentials_task).await;
    telemetry_cancel.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(5), telemetry_task).await;
    info!("haptic stopped");
    match failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
