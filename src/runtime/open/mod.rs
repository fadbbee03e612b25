//! Open: what the process needs before anything is wired, in this order: the probes and
//! `/metrics` (served from the first moment), `haproxy` for validation, the journal, the
//! Kubernetes client and the Lease settings, then the Dataplane credentials.
//!
//! `/startupz`, `/healthz` and `/readyz` answer before the journal opens (issue 16), which after
//! a kill -9 can take seconds (redb's repair of a large file; the StatefulSet's startupProbe
//! budget covers it). Startup fails only until the journal is open (issue 27: never on what is
//! outside the pod, CRDs, RBAC, the credentials Secret, which would crash-loop the controller);
//! liveness has no failing check meanwhile; readiness says the journal is opening, then
//! replaying, then waiting for the credentials, until [`Probes::started`].

mod cluster;
pub mod journal;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use haptic_journal::Journal;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument as _, info, info_span};

use super::RuntimeError;
use super::args::RunArgs;
use crate::dataplane::BasicAuth;
use crate::k8s::credentials::{CredentialsReceiver, CredentialsWatch};
use crate::k8s::lease::{LeaseConfig, default_identity};
use crate::telemetry::{HealthRegistry, Metrics};
use crate::validate::Validator;

pub(super) use cluster::identity_and_owner;

/// A poisoned lock only means a thread panicked while holding it; the value is still valid.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The probes and metrics server, up from the first moment until the very end.
pub(super) struct Probes {
    /// The process's metrics (every family from the first scrape).
    pub(super) metrics: Arc<Metrics>,
    /// The liveness and readiness checks.
    pub(super) health: HealthRegistry,
    /// The journal once open, with the next seq it had then (readiness: replayed yet?).
    opened: Arc<OnceLock<(Arc<Journal>, u64)>>,
    /// A journal storage fault as the journal watch announced it (its readiness text).
    pub(super) announced: Arc<Mutex<Option<String>>>,
    /// Set once everything is wired and the inputs run (readiness `startup`).
    started: Arc<AtomicBool>,
    /// Stops the server.
    cancel: CancellationToken,
    /// The server.
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Probes {
    /// Binds `--metrics-addr` and serves `/startupz`, `/healthz`, `/readyz` and `/metrics` on
    /// it; startup `journal` fails until the journal is open, readiness `journal` until it is
    /// also replayed.
    ///
    /// # Errors
    /// [`RuntimeError::Bind`] when the address cannot be bound.
    pub(super) async fn serve(args: &RunArgs) -> Result<Probes, RuntimeError> {
        let metrics = super::metrics();
        let health = HealthRegistry::new();
        let opened: Arc<OnceLock<(Arc<Journal>, u64)>> = Arc::new(OnceLock::new());
        let announced: Arc<Mutex<Option<String>>> = Arc::default();
        {
            let (slot, path) = (opened.clone(), args.journal.display().to_string());
            health.add_startup("journal", move || match slot.get() {
                None => Err(format!(
                    "journal opening: {path} (open, repair after a crash, verify)"
                )),
                Some(_) => Ok(()),
            });
        }
        {
            let (slot, path) = (opened.clone(), args.journal.display().to_string());
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
        let cancel = CancellationToken::new();
        let listener = tokio::net::TcpListener::bind(args.metrics_addr)
            .await
            .map_err(|source| RuntimeError::Bind {
                what: "--metrics-addr",
                addr: args.metrics_addr,
                source,
            })?;
        info!(addr = %listener.local_addr().map_or_else(|_| args.metrics_addr.to_string(), |a| a.to_string()),
            "serving /startupz, /healthz, /readyz and /metrics");
        let task = tokio::spawn(crate::telemetry::serve(
            listener,
            metrics.clone(),
            health.clone(),
            cancel.clone(),
        ));
        Ok(Probes {
            metrics,
            health,
            opened,
            announced,
            started: Arc::new(AtomicBool::new(false)),
            cancel,
            task,
        })
    }

    /// Readiness `startup` passes from now on.
    pub(super) fn started(&self) {
        self.started.store(true, Ordering::Relaxed);
    }

    /// Stops the server (last: the probes answer while everything else stops).
    pub(super) async fn stop(self) {
        self.cancel.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(5), self.task).await;
    }
}

/// The watched Dataplane credentials Secret (for the process's life: a rotated password is used
/// from the deployer's next endpoint sync on, issue 16).
pub(super) struct Credentials {
    /// The credentials read first (`None` when the watch ended before it read any).
    pub(super) first: Option<BasicAuth>,
    /// Every later value of the Secret.
    pub(super) rx: CredentialsReceiver,
    /// Stops the watch (after everything else).
    cancel: CancellationToken,
    /// The watch.
    task: tokio::task::JoinHandle<Result<(), std::convert::Infallible>>,
}

impl Credentials {
    /// Stops the watch.
    pub(super) async fn stop(self) {
        self.cancel.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(5), self.task).await;
    }
}

/// What [`open`] opened.
pub(super) struct Opened {
    /// `haproxy -c`.
    pub(super) validator: Validator,
    /// The journal.
    pub(super) journal: Arc<Journal>,
    /// Where a damaged journal was moved (`--journal-recovery=rebuild`), with the reason.
    pub(super) rebuilt_from: Option<(std::path::PathBuf, String)>,
    /// The Kubernetes client.
    pub(super) client: kube::Client,
    /// The controller's namespace (`--namespace`, else the client's).
    pub(super) namespace: String,
    /// This replica's identity (`--identity`, else the host name).
    pub(super) identity: String,
    /// The Lease settings, checked.
    pub(super) lease: LeaseConfig,
    /// The Dataplane credentials.
    pub(super) credentials: Credentials,
}

/// Opens, in order: `haproxy` (its version), the journal (registered on the probes), the
/// Kubernetes client and the Lease settings, then waits for the Dataplane credentials Secret.
/// `None` when `signal` fires first (a stop before start-up completed).
///
/// # Errors
/// [`RuntimeError::Haproxy`], [`RuntimeError::Journal`], [`RuntimeError::Join`],
/// [`RuntimeError::Kube`], [`RuntimeError::Lease`], each naming the input and the fix.
pub(super) async fn open(
    args: &RunArgs,
    probes: &Probes,
    signal: Pin<&mut impl Future<Output = &'static str>>,
) -> Result<Option<Opened>, RuntimeError> {
    let validator = Validator::new(&args.haproxy_bin, args.validation_timeout).await?;
    info!(haproxy = validator.version(), "validation uses haproxy -c");
    let (path, recovery, concurrency) = (
        args.journal.clone(),
        args.journal_recovery,
        args.journal_concurrency,
    );
    let opened = tokio::task::spawn_blocking(move || journal::open(&path, recovery, concurrency))
        .await
        .map_err(|_| RuntimeError::Join)??;
    let journal = Arc::new(opened.journal);
    info!(journal = %args.journal.display(), "journal open");
    let start_next_seq = journal.meta().map_or(1, |m| m.next_seq.0);
    let _ = probes.opened.set((journal.clone(), start_next_seq));
    probes.metrics.register_journal(journal.clone());
    probes.health.add_liveness(
        "journal",
        crate::telemetry::journal_writable_check(journal.clone()),
    );
    let identity = default_identity(args.identity.as_deref());
    let client = cluster::kube_client(args, &identity).await?;
    let namespace = args
        .namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_owned());
    let lease = LeaseConfig {
        duration: args.lease_duration,
        renew_deadline: args.lease_renew_deadline,
        retry_period: args.lease_retry_period,
        margin: args
            .lease_duration
            .saturating_sub(args.lease_renew_deadline),
        ..LeaseConfig::new(namespace.clone(), args.lease_name.clone(), identity.clone())
    };
    lease.check()?;
    info!(%namespace, %identity, "kubernetes client ready");
    let Some(credentials) = credentials(args, probes, &client, &namespace, signal).await else {
        return Ok(None);
    };
    Ok(Some(Opened {
        validator,
        journal,
        rebuilt_from: opened.rebuilt_from,
        client,
        namespace,
        identity,
        lease,
        credentials,
    }))
}

/// Starts the watch of the credentials Secret and waits until it was read once (readiness
/// `startup` says what it waits for; the watcher logs what is missing). `None` when `signal`
/// fires first.
async fn credentials(
    args: &RunArgs,
    probes: &Probes,
    client: &kube::Client,
    namespace: &str,
    signal: Pin<&mut impl Future<Output = &'static str>>,
) -> Option<Credentials> {
    {
        let (started, secret) = (
            probes.started.clone(),
            format!("{namespace}/{}", args.dataplane_secret),
        );
        probes.health.add_readiness("startup", move || {
            if started.load(Ordering::Relaxed) {
                Ok(())
            } else {
                Err(format!(
                    "starting: waiting for the dataplane credentials Secret {secret}"
                ))
            }
        });
    }
    let cancel = CancellationToken::new();
    let watch = CredentialsWatch::new(client.clone(), namespace, &args.dataplane_secret);
    let mut rx = watch.subscribe();
    let task = tokio::spawn(
        watch
            .run(cancel.clone())
            .instrument(info_span!("dataplane-credentials")),
    );
    let first = tokio::select! {
        c = cluster::wait_for_credentials(&mut rx, &cancel) => c,
        s = signal => {
            info!(signal = s, "stopping before start-up completed");
            cancel.cancel();
            return None;
        }
    };
    Some(Credentials {
        first,
        rx,
        cancel,
        task,
    })
}
