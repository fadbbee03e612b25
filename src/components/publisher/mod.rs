//! `config-publisher`: publishes what was rendered, validated and deployed as custom resources
//! (seeds/configpublisher.txt, made durable on the journal). Its workers run while this replica
//! leads; its router folds every event, leader or not (DESIGN.md J11). Built as the scheduler
//! is: the router is one task that owns its state and checkpoint (inputs are messages), each
//! leadership term has one owner (writer, cancellation, heal cache, the drain as a message to
//! its publish worker), each worker is one struct owning its fields, and the heal cache is the
//! only lock (`shell/mod.rs` draws the tasks).
//!
//! ```text
//!  dispatcher --Delivery{seq, event, replayed}--> skip if checkpoint folded it
//!        |                                              |
//!        v                                              v
//!  decide::route(&mut RouterState, Input) --> Vec<Effect>  (queue work: leader or replay)
//!        |  Batch{enqueue work (origin seq) + router checkpoint}   or the checkpoint alone
//!        |  journal commit, then wake; the delivery drops only now
//!        +-------------------+-----------------+---------------+----------------+
//!        v                   v                 v                                v
//!  publish worker      invalid worker     verdict worker                   status worker
//!  (decide::pick,      (`-invalid`,       (ConfigValidated /               (decide::status_round:
//!   decide::publication newest wins)      ConfigPinned; deletes            park rule, merge; one
//!   throttle)                              `-invalid` on pass)              write per changed object)
//!        |  k8s::writer (reads and writes only; idempotent, term-fenced)             ^
//!        |  failure -> decide::on_failure(class): retry to the cap | reject (shown, ack) | stop term
//!        +--> ack + published checkpoint + hold render + ConfigPublished (one commit) -unpark-+
//!  heal watch (HAProxyCfg, aux CRs, Secrets) --> republish the checkpoint render
//! ```
//!
//! # Inputs
//! Accepted events through [`ConfigPublisher::run`] (a dispatcher subscription; or
//! [`ConfigPublisher::on_event`], the leader's path, after their commit, in `Seq` order):
//! ConfigValidated, TemplateRendered, RenderGateCompleted, ValidationFailed,
//! DeployedConfigPublishRequest, ConfigAppliedToPod, HAProxyPodTerminated,
//! HAProxyPodsDiscovered, BecameLeader, LostLeadership, DeploymentRetryRequest,
//! DeploymentQuarantined (the retry time of a pod's quarantine), each folded as
//! [`decide::Input::Event`] (`queue` when a term runs or the delivery is a replay). Term start
//! ([`ConfigPublisher::start`], one [`TermHandle`] per term) folds [`decide::Input::TermStarted`]
//! and, on a journal that had no checkpoint, [`decide::Input::StatusListed`] (the pods the
//! published status lists). Graceful stop through [`ConfigPublisher::drain`]. The workers take
//! their queues from the journal and the outcome of each Kubernetes write.
//!
//! # Effects
//! [`decide::Effect`]: journal work items (with the checkpoint), cache resets. Kubernetes writes
//! through [`crate::k8s::writer::Writer`] (HAProxyCfg and `-invalid`, auxiliary objects,
//! Secrets, per-pod status, conditions `Synced`, `ConfigValidated`, `ConfigPinned`,
//! `Published`, `SizeLimitExceeded`; the catalogue is [`crate::k8s::crd::CONDITIONS`]); Warning
//! Events `PublicationRejected` and `DeploymentRejected` (a pod quarantined a render) on the
//! HAProxyCfg; `config.published` events; `deployment.retry.request` when the main
//! HAProxyCfg's annotation `haproxy-haptic.org/retry-rejected` gets a new value (the heal
//! watch of the main object, which runs also without self-healing).
//!
//! # Journal records
//! - The router's checkpoint: table `component_state`, key `config-publisher`,
//!   `ComponentState::Publisher(PublisherCheckpoint)` (identity, render order, known pods,
//!   whether a discovery was folded, pods owed a status removal, the gate's latch, the last
//!   event whose work was queued, the last `retry-rejected` value folded), restored at
//!   construction with `Checkpoints::restore`,
//!   written in the batch of the work an event is routed to (or alone before the delivery
//!   drops). Replayed deliveries at or below its `through` are skipped.
//! - Queues `publish`, `publish-deployed`, `invalid`, `verdict`, `status-pending`,
//!   `status-parked`, `drain-checkpoint`; an item leaves its table only in the commit that
//!   records its outcome: its write succeeded, or was rejected permanently (J3).
//! - `published_checkpoint` per HAProxyCfg; an explicit hold on the render of the last complete
//!   publication (released when the checkpoint moves), so self-healing can restore it after its
//!   events were trimmed.
//!
//! # Rules
//! - The main spec only holds renders that passed the gate and never moves backwards in render
//!   `Seq` ([`decide::publication`]: an older item is acked without touching the spec).
//! - Validation work coalesces to the newest render (older items are acked with it); deploy work
//!   keeps arrival order and never supersedes validation work ([`decide::pick_publication`]).
//! - Only a complete (every object, status references, GC), still-authoritative (term unchanged,
//!   not cancelled) publication is acked; it emits `config.published` only when the checkpoint
//!   moves to a new render, so repeats (self-healing, term start) emit nothing. Its status
//!   write sets `Published=True`.
//! - Failures follow the one error-class table ([`crate::core::error`]) through
//!   [`decide::on_failure`], in every worker: a transient failure (5xx, 429 with Retry-After,
//!   timeouts, connection failures, 409, a named 404, any other 4xx) and a failure that needs an
//!   operator (401, 403, a missing CRD: warn naming the RBAC rule or what to apply,
//!   `Published=False`, counter `blocked`) back off from [`PublisherConfig::retry`]'s `initial`
//!   to its cap and go on, forever; a permanent rejection (400, 413, 422, a too-large 5xx, content
//!   missing from the journal) is recorded and shown (warn, a `PublicationRejected` Event,
//!   `Published=False` for the publish worker, `SizeLimitExceeded` when too large, counter
//!   `given_up`) and its item acked; fencing (the Lease guard refused: `WriteError::Deposed`, or
//!   an object stamped by a newer term: `WriteError::StaleTerm`) cancels the term's workers at
//!   once, nothing acked or released, the work stays queued for the next term.
//! - A status update the HAProxyCfg cannot take yet is parked ([`decide::park_rule`]); each
//!   publication attempt unparks.
//! - A pod's status entry is written when, and only when, it differs from what the pod runs
//!   ([`decide::merge_pod_entry`]): a report of the checksum and error the entry already names
//!   leaves it as it is (`deployedAt` not moved); an object is written only when some entry
//!   changed.
//! - The outcome of a deployment to a pod that discovery has since reported gone (terminated, or
//!   missing from an authoritative discovery; a recovered deployment still targets its intent's
//!   pods) is no status: it neither brings the pod back nor overwrites its queued removal.
//! - A pod that leaves while no work is queued (this replica follows, or the controller was
//!   down and the first discovery comes before the Lease) is owed a status removal, kept in the
//!   checkpoint and queued at the next term: no seeding read, no race with the first discovery.
//!
//! # Decisions (for the runtime)
//! - Wiring: `Dispatcher::subscribe(subscribe_options())`, `attach(handle)`, then
//!   `run(subscription, cancel)`; `run` starts a term's workers on a live `BecameLeader` and
//!   stops them on a live `LostLeadership` (the BecameLeader batch must carry `set_term`, the
//!   workers ack only while `journal.term()` equals their term). Call `drain()` on graceful stop
//!   after the deployer's drain, before cancelling.
//! - Writes are GET + `replace` with the read `resourceVersion` (not server-side apply); the
//!   client must have `default_retry = false` ([`crate::k8s::client::from_kubeconfig`]).
//! - `-invalid` carries the config and `validationError` only (no auxiliary objects), writes no
//!   checkpoint and emits no event.
//! - `config.published` is emitted exactly when the journal's published checkpoint moves to a new
//!   render, in the ack's commit; repeats (self-healing, term start) emit nothing.
//! - A render's place in render order (`render_seq`) survives restarts: it is in the router's
//!   checkpoint, and a render the router does not remember is placed from the journal
//!   (published checkpoint, queued publications, retained `template.rendered` events;
//!   `shell/order.rs`). A deploy-driven request for a render with no known place while the
//!   checkpoint holds another render updates per-pod status only.
//! - Replayed deliveries queue work even while no term runs (they were accepted before a
//!   restart, when this replica may have led); live ones queue work only while a term runs.
//! - A repeat (self-healing, term start) also restores what the HAProxyCfg's status lacks:
//!   the conditions and per-pod entries last seen on it (the heal watch keeps them across a
//!   delete) or last written, for pods the publisher still knows.
//! - Term start repeats the checkpoint render idempotently, unless the cluster holds another
//!   checksum stamped by another term (a successor's or predecessor's work is not rolled back).
//! - The verdict worker keeps its newest item unacked while the HAProxyCfg does not exist; the
//!   next complete publication wakes it.
//! - A successful per-pod update for another checksum is parked; a failed one is written with
//!   its error.
//! - Per-pod status also goes to every HAProxyMapFile, HAProxyGeneralFile and HAProxyCRTListFile
//!   the HAProxyCfg references, in the same status round (at most one status write per object
//!   per round, only when its entries change): a successful deployment of `spec.checksum` sets
//!   the pod's entry with the file's own checksum (kept as it is while that checksum holds);
//!   failures are not recorded there; a removed pod leaves every object. Each status write sets
//!   `observedGeneration` to the object's `metadata.generation`.
//! - Objects whose JSON exceeds 3 MiB are refused before upload (a permanent 413).
//!
//! # Failpoints
//! `publisher::before_publish_ack`.
//!
//! # Metrics
//! [`shell::Counters`]: `publications`, `config_published`, `retries` (and per worker,
//! `worker_retries`), `blocked` (attempts that need an operator), `given_up` (items ended by a
//! permanent rejection), `heals`, `status_rounds`; exported as `haptic_publishes_total{result}`,
//! `haptic_retries_total{component="config-publisher"}`,
//! `haptic_publisher_blocked_attempts_total`, `haptic_config_published_total`,
//! `haptic_publisher_heals_total`, `haptic_status_write_rounds_total` (the families are the
//! publisher's own: `metrics.rs`).

pub mod decide;
mod metrics;
pub mod shell;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use haptic_journal::{
    AcceptError, Checksum, ConfigIdentity, Event, Journal, ReadError, RuntimeConfigRef, Seq, Term,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

pub use shell::{Counters, TermHandle, Worker, WorkerRetries};

/// Component identifier (logs, metrics, health).
pub const COMPONENT: &str = "config-publisher";

/// The dispatcher subscription the publisher needs: the kinds it handles plus the leadership
/// events. Not leader-only at the dispatcher: while no term runs, [`ConfigPublisher::run`]
/// only notes where live renders stand in render order (`template.rendered`,
/// `config.validated`) and queues nothing, so a render that passed the gate before this
/// replica led is still placed right when its deployment is published.
#[must_use]
pub fn subscribe_options() -> crate::dispatch::SubscribeOptions {
    use haptic_journal::EventKind as K;
    crate::dispatch::SubscribeOptions::new(COMPONENT).kinds(&[
        K::ConfigValidated,
        K::TemplateRendered,
        K::RenderGateCompleted,
        K::ValidationFailed,
        K::DeployedConfigPublishRequest,
        K::ConfigAppliedToPod,
        K::HAProxyPodTerminated,
        K::HAProxyPodsDiscovered,
        K::BecameLeader,
        K::LostLeadership,
        K::DeploymentRetryRequest,
        K::DeploymentQuarantined,
    ])
}

/// Settings of the publisher.
#[derive(Clone, Debug)]
pub struct PublisherConfig {
    /// The config identity (name = `--config-name`); the HAProxyCfg is
    /// `<name>-haproxycfg`.
    pub identity: ConfigIdentity,
    /// Namespace of every object.
    pub namespace: String,
    /// Owner reference of the HAProxyCfg (the source ConfigMap), if any.
    pub owner: Option<OwnerReference>,
    /// Leading-edge throttle of publications and status writes; zero = off. Default: 0.
    pub publish_interval: Duration,
    /// Compression threshold in bytes (0 = never). Default: 1 MiB.
    pub compression_threshold_bytes: u64,
    /// Timeout of one API request (`--kube-request-timeout`). Default: 10 s.
    pub request_timeout: Duration,
    /// Retry policy of every worker: capped exponential backoff, forever (work is never acked
    /// unfinished). Flags `--publish-retry-initial` / `--publish-retry-max`. Default:
    /// [`decide::RetryPolicy::default`] (200 ms doubling to 30 s).
    pub retry: decide::RetryPolicy,
    /// The `reportingInstance` of the Kubernetes Events the publisher writes (the replica's
    /// identity). Default: none.
    pub reporter_instance: Option<String>,
    /// Watch the published objects and restore them. Default: true.
    pub self_heal: bool,
    /// The Lease check before every Kubernetes write (DESIGN.md J7); the runtime passes its
    /// [`crate::k8s::lease::LeaseGuard`]. A refusal stops the term's workers at once, leaving
    /// their work queued. Default: [`crate::core::guard::AlwaysValid`].
    pub lease: Arc<dyn crate::core::guard::LeaseGuard>,
}

impl PublisherConfig {
    /// Defaults for `identity` in `namespace`.
    #[must_use]
    pub fn new(identity: ConfigIdentity, namespace: &str) -> Self {
        PublisherConfig {
            identity,
            namespace: namespace.to_owned(),
            owner: None,
            publish_interval: Duration::ZERO,
            compression_threshold_bytes:
                crate::core::compression::DEFAULT_COMPRESSION_THRESHOLD_BYTES,
            request_timeout: crate::k8s::client::DEFAULT_REQUEST_TIMEOUT,
            retry: decide::RetryPolicy::default(),
            reporter_instance: None,
            self_heal: true,
            lease: Arc::new(crate::core::guard::AlwaysValid),
        }
    }

    /// Name of the main HAProxyCfg.
    #[must_use]
    pub fn haproxycfg_name(&self) -> String {
        crate::core::naming::haproxycfg_name(self.identity.name.as_str())
    }

    /// The main HAProxyCfg as a reference.
    #[must_use]
    pub fn runtime_config(&self) -> RuntimeConfigRef {
        RuntimeConfigRef {
            namespace: self.namespace.as_str().into(),
            name: self.haproxycfg_name().into(),
        }
    }
}

/// Errors of the publisher's journal side (Kubernetes errors are handled by the workers).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PublisherError {
    /// A journal commit failed: stop acting and reopen the journal.
    #[error("journal commit failed")]
    Accept(#[source] AcceptError),
    /// A journal read failed.
    #[error("journal read failed")]
    Read(#[source] ReadError),
    /// A blocking journal task panicked or was cancelled.
    #[error("journal task failed")]
    Join,
    /// A commit through the dispatcher failed.
    #[error("dispatcher commit failed")]
    Dispatch(#[source] crate::dispatch::DispatchError),
    /// The publisher's checkpoint could not be read at start (the read error was returned by
    /// the first step): DESIGN.md J10, refuse to go on.
    #[error("publisher checkpoint unreadable")]
    CheckpointUnreadable,
    /// The router task ended (it panicked): nothing more is folded; stop and restart.
    #[error("publisher router task stopped")]
    RouterStopped,
}

impl PublisherError {
    /// Classification: storage failures are fatal for the component.
    #[must_use]
    pub fn kind(&self) -> crate::core::ErrorKind {
        crate::core::ErrorKind::Fatal
    }
}

/// The config publisher: a handle on its router task (started here) and its shared part; a
/// term's workers start with [`ConfigPublisher::start`] or, on a dispatcher, from
/// [`ConfigPublisher::run`].
#[derive(Clone)]
pub struct ConfigPublisher {
    ctx: Arc<shell::Context>,
    router: shell::RouterHandle,
}

impl std::fmt::Debug for ConfigPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigPublisher")
            .field("cfg", &self.ctx.cfg)
            .finish()
    }
}

impl ConfigPublisher {
    /// A publisher on `journal`, writing through `client` (kube's retry layer off). Restores
    /// the router's checkpoint (one short journal read) and spawns the router task, which ends
    /// when the last handle (this, its clones, a running term) is dropped.
    ///
    /// # Panics
    /// Outside a Tokio runtime.
    #[must_use]
    pub fn new(journal: Arc<Journal>, client: kube::Client, cfg: PublisherConfig) -> Self {
        let (ctx, router) = shell::build(journal, client, cfg);
        ConfigPublisher { ctx, router }
    }

    /// Handles one accepted event as a leader (or a replay) does: folds it into the router and
    /// journals the work it becomes (origin `seq`) with the router's checkpoint, in one commit,
    /// then wakes the workers. An event the checkpoint already folded is skipped. Call after
    /// the event's commit, in `Seq` order; call `mark_dispatched` after it returns.
    ///
    /// # Errors
    /// [`PublisherError`] when the journal commit fails (nothing was queued).
    ///
    /// # Cancel safety
    /// Once handed to the router the event is folded and committed even if this future is
    /// dropped; the workers re-read their queues at every term start, so nothing is lost.
    pub async fn on_event(&self, seq: Seq, event: &Event) -> Result<(), PublisherError> {
        self.router
            .deliver(shell::Delivery {
                seq,
                at: None,
                event: Arc::new(event.clone()),
                leading: true,
                replayed: false,
            })
            .await
    }

    /// Starts the workers for leadership term `term` (the term already journaled). Queued work
    /// of earlier terms is picked up; the last complete publication is repeated idempotently
    /// against the cluster first.
    #[must_use]
    pub fn start(&self, term: Term) -> TermHandle {
        shell::start(&self.ctx, &self.router, term)
    }

    /// Graceful leader stop: publishes the newest queued deploy-driven render past the
    /// throttle; once it commits the older ones are dropped and the drain checkpoint records it.
    /// Call after every accepted event was delivered. Returns the render published, `None`
    /// when there was nothing, the term already ended, or the publication failed (queue left
    /// as it was). The running term's publish worker does it, between two publications.
    ///
    /// # Errors
    /// [`PublisherError`] when the journal fails.
    ///
    /// # Cancel safety
    /// Cancelling leaves the queue as it was or drained (the ack is one commit).
    pub async fn drain(&self) -> Result<Option<Checksum>, PublisherError> {
        shell::drain(&self.ctx).await
    }

    /// Sends the publisher's own commits (acks with `config.published`) through the dispatcher
    /// so its subscribers are woken at once. Call once, before [`ConfigPublisher::run`].
    pub fn attach(&self, handle: crate::dispatch::DispatchHandle) {
        self.ctx.commit.attach(handle);
    }

    /// Runs the component on a dispatcher subscription made with [`subscribe_options`]: each
    /// delivery is folded into the router (identity, render order, known pods, the gate's
    /// latch: the checkpoint, written with the work it queues) and then marked processed. A
    /// live `BecameLeader` starts the term's workers (stopping the previous term's), a live
    /// `LostLeadership` stops them; replayed leadership events change nothing. While no term
    /// runs, live events queue no work (replays do); a pod that leaves meanwhile is owed a
    /// status removal, queued when the next term starts.
    ///
    /// # Errors
    /// [`PublisherError`] when the journal fails (stop acting and reopen), or the router task
    /// stopped.
    ///
    /// # Cancel safety
    /// Cancel via `cancel`: the current delivery is finished (or left undone, so it is replayed)
    /// and the term's workers are stopped at effect boundaries.
    pub async fn run(
        &self,
        mut sub: crate::dispatch::Subscription,
        cancel: tokio_util::sync::CancellationToken,
    ) -> Result<(), PublisherError> {
        let mut term: Option<TermHandle> = None;
        let result = loop {
            let d = tokio::select! {
                () = cancel.cancelled() => break Ok(()),
                d = sub.recv() => d,
            };
            let Some(d) = d else { break Ok(()) };
            match &*d.event {
                Event::BecameLeader { term: t, .. } if !d.replayed => {
                    if let Some(h) = term.take() {
                        h.stop().await;
                    }
                    term = Some(self.start(*t));
                }
                Event::LostLeadership { .. } if !d.replayed => {
                    if let Some(h) = term.take() {
                        h.stop().await;
                    }
                }
                _ => {}
            }
            // Work is queued by a leader; a replay (accepted before a restart) becomes work as it
            // did for the process that first delivered it (the router decides from the log); a
            // follower only folds.
            if let Err(e) = self
                .router
                .deliver(shell::Delivery {
                    seq: d.seq,
                    at: Some(d.accepted_at),
                    event: Arc::clone(&d.event),
                    leading: term.is_some(),
                    replayed: d.replayed,
                })
                .await
            {
                break Err(e);
            }
            // Dropped only now: the state this event produced is durable (J11).
            d.done();
        };
        if let Some(h) = term {
            h.stop().await;
        }
        result
    }

    /// Number of pods the publisher knows (discovered or reported; restored from its
    /// checkpoint at construction); a discovery without them clears their status entries.
    #[must_use]
    pub fn known_pod_count(&self) -> usize {
        self.ctx.view.borrow().known_pods.len()
    }

    /// Counters.
    #[must_use]
    pub fn counters(&self) -> &Counters {
        &self.ctx.counters
    }

    /// Why the publisher's writes wait for an operator, one line per blocked worker
    /// (`<worker>: <error>; <fix>`), e.g. the CRDs not installed; `None` when none is blocked.
    /// The runtime's `/readyz` reports it (the writes are retried meanwhile).
    #[must_use]
    pub fn blocked(&self) -> Option<String> {
        self.ctx.blocked.describe()
    }

    /// Settings.
    #[must_use]
    pub fn config(&self) -> &PublisherConfig {
        &self.ctx.cfg
    }
}
