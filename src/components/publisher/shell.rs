//! The publisher's shell: folds every delivery through [`super::decide::route`] and journals
//! the work it becomes together with the router's checkpoint (DESIGN.md J11), runs the four
//! workers (publish, invalid, verdict, status) and the self-healing watch. Workers read their
//! queues from the journal; `Notify`s only wake them. Every rule is in [`super::decide`]; the
//! shell maps effects to I/O and I/O results to the next decision.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use haptic_journal::{
    Batch, Checksum, ComponentState, Correlation, DrainCheckpoint, Event, Journal, Queue,
    ReadError, Render, RuntimeConfigRef, Seq, Term, UnixMillis, WorkEntry, WorkItem, WorkKey,
};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt as _};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

mod failures;
mod heal;
mod order;
mod publish;
mod retire;
mod status;
mod workers;

use super::decide::{self, Effect, Input, Retry, RouterState};
use super::{PublisherConfig, PublisherError};
use crate::core::error::ErrorClass;
use crate::core::naming::invalid_haproxycfg_name;
use crate::dispatch::checkpoint::Checkpoints;
use crate::k8s::WriteError;
use crate::k8s::crd::{
    HAProxyCRTListFile, HAProxyCfg, HAProxyGeneralFile, HAProxyMapFile, labels,
    summarize_validation_errors,
};
use crate::k8s::writer::{FileContent, PublishSpec, RenderContent, Writer, WriterConfig, k8s_time};

pub use failures::Worker;

/// Counters for tests, benchmarks and metrics.
#[derive(Debug, Default)]
pub struct Counters {
    /// Complete publications of the main HAProxyCfg (including idempotent repeats).
    pub publications: AtomicU64,
    /// ConfigPublished events journaled.
    pub config_published: AtomicU64,
    /// Failed attempts that were retried (every worker).
    pub retries: AtomicU64,
    /// Failed attempts that were retried, per worker.
    pub worker_retries: WorkerRetries,
    /// Failed attempts that need an operator (401, 403, a missing resource type): retried,
    /// and shown (warn naming the fix; `Published=False` for the publish worker).
    pub blocked: AtomicU64,
    /// Items ended by a permanent rejection (400, 413, 422, a too-large 5xx, content not in
    /// the journal): recorded, shown (warn, a Kubernetes Event, `Published=False` for the
    /// publish worker), then acked. Never a transient failure, however long it lasts.
    pub given_up: AtomicU64,
    /// Self-healing republications.
    pub heals: AtomicU64,
    /// Status write rounds (one per HAProxyCfg per round with something to write).
    pub status_rounds: AtomicU64,
}

/// Failed attempts retried, per worker ([`Worker`]).
#[derive(Debug, Default)]
pub struct WorkerRetries {
    /// Publish worker (main HAProxyCfg, auxiliary objects, Secrets).
    pub publish: AtomicU64,
    /// Invalid worker (`-invalid` HAProxyCfg).
    pub invalid: AtomicU64,
    /// Verdict worker (ConfigValidated / ConfigPinned, `-invalid` deletion).
    pub verdict: AtomicU64,
    /// Status worker (per-pod status).
    pub status: AtomicU64,
}

impl WorkerRetries {
    /// The counter of `worker`.
    #[must_use]
    pub fn of(&self, worker: Worker) -> &AtomicU64 {
        match worker {
            Worker::Publish => &self.publish,
            Worker::Invalid => &self.invalid,
            Worker::Verdict => &self.verdict,
            Worker::Status => &self.status,
        }
    }
}

#[derive(Default)]
struct Wake {
    publish: Notify,
    invalid: Notify,
    verdict: Notify,
    status: Notify,
}

/// How many earlier complete publications the heal watch still recognises as its own writes.
const HEAL_HISTORY: usize = 4;

/// (kind, name) of a published object.
type ObjectKey = (String, String);

/// Per-term state, reset at each term: what this publisher wrote and expects, so the heal
/// watch tells its own writes from outside edits (see `heal::outside_edit`).
#[derive(Default)]
struct TermCache {
    /// Objects of the last complete publication: (kind, name) -> content JSON.
    expected: HashMap<ObjectKey, String>,
    /// Objects of the complete publications before it, newest first, at most
    /// [`HEAL_HISTORY`] (their watch events may arrive late, after the cache moved on).
    previous: std::collections::VecDeque<HashMap<ObjectKey, String>>,
    /// Objects of the publication being written now, if any.
    in_flight: Option<HashMap<ObjectKey, String>>,
    /// The last status of the main HAProxyCfg the heal watch saw with conditions or pod
    /// entries (kept when the object is deleted: a delete event carries its final state), so a
    /// restored object gets its status back (see `heal::restore_status`).
    status: Option<crate::k8s::crd::HAProxyCfgStatus>,
}

pub(super) struct Inner {
    pub(super) journal: Arc<Journal>,
    pub(super) client: Client,
    pub(super) cfg: PublisherConfig,
    /// The router's state: changed only by [`Inner::step`] (under `steps`), read by the
    /// workers (known pods) and [`Inner::place_render`].
    router: Mutex<RouterState>,
    /// Serialises router steps (decide, then the journal commit that carries the checkpoint),
    /// so checkpoints are committed in the order of the states they describe; holds the
    /// checkpoint bookkeeping (DESIGN.md J11).
    steps: tokio::sync::Mutex<Checkpoints>,
    /// Whether the journal held a publisher checkpoint at construction. Without one (a journal
    /// from before checkpoints, or rebuilt), the first term also folds the pods the published
    /// status lists ([`Input::StatusListed`]).
    restored: bool,
    /// Set once the published status was listed for a journal without a checkpoint.
    listed: AtomicBool,
    /// The checkpoint could not be read at construction (J10): every step fails, the first
    /// with this error, later ones with [`PublisherError::CheckpointUnreadable`].
    restore_failed: bool,
    restore_error: Mutex<Option<ReadError>>,
    /// Kubernetes Events on the HAProxyCfg (permanent rejections).
    recorder: kube::runtime::events::Recorder,
    /// The `haproxy-haptic.org/retry-rejected` value of the last `deployment.retry.request`
    /// this process journaled (the router's own value lags until it folds the event).
    retry_journaled: Mutex<Option<String>>,
    wake: Wake,
    cache: Mutex<TermCache>,
    heal: AtomicBool,
    /// Held for one publication (worker or drain), so the drain never races the worker.
    publish_lock: tokio::sync::Mutex<()>,
    term: Mutex<Option<(Term, CancellationToken)>>,
    /// The gate conditions (ConfigValidated, ConfigPinned) the verdict worker last wrote.
    last_conditions: Mutex<Vec<Condition>>,
    pub(super) counters: Counters,
    /// Per worker, why its writes are refused until an operator acts (a 401, a 403, a
    /// resource type the API server does not serve), with the fix: set by a failed attempt of
    /// such a class, cleared by that worker's next successful write. Read by `/readyz`.
    pub(super) blocked: Mutex<BTreeMap<&'static str, String>>,
    /// When attached, commits go through the dispatcher (its subscribers get `config.published`
    /// at once instead of at its next poll).
    pub(super) dispatch: std::sync::OnceLock<crate::dispatch::DispatchHandle>,
}

/// A running term: cancel it, then wait.
#[derive(Debug)]
pub struct TermHandle {
    /// Cancels every worker of the term.
    pub cancel: CancellationToken,
    tracker: TaskTracker,
}

impl TermHandle {
    /// Cancels the term's workers and waits for them (they stop at effect boundaries).
    ///
    /// # Cancel safety
    /// Cancel safe: the workers are already cancelled.
    pub async fn stop(self) {
        self.cancel.cancel();
        self.tracker.close();
        self.tracker.wait().await;
    }
}

fn now_ms() -> UnixMillis {
    UnixMillis::now()
}

/// Cancels the term when `e` is a fencing refusal (DESIGN.md J7: the Lease guard refused, or
/// an object is stamped by a newer term); returns whether it did. Used where a write has no
/// retry loop of its own (status restore); the workers decide through [`Inner::failed`].
fn stop_term_on(e: &WriteError, cancel: &CancellationToken) -> bool {
    if e.class() != ErrorClass::Fenced {
        return false;
    }
    warn!(error = %e, "leadership of this term is gone; stopping its writes, work stays queued");
    cancel.cancel();
    true
}

async fn sleep_or_cancel(d: Duration, cancel: &CancellationToken) -> bool {
    tokio::select! {
        () = cancel.cancelled() => false,
        () = tokio::time::sleep(d) => true,
    }
}

impl Inner {
    /// Restores the router's checkpoint (one short read of the journal) and builds the shell.
    pub(super) fn new(journal: Arc<Journal>, client: Client, cfg: PublisherConfig) -> Inner {
        let rc = cfg.runtime_config();
        let (checkpoints, router, restored, restore_error) =
            match Checkpoints::restore(&journal, super::COMPONENT) {
                Ok((c, Some(ComponentState::Publisher(cp)))) => {
                    let r = RouterState::restore(cfg.identity.clone(), rc, cp);
                    info!(
                        known_pods = r.known_pods.len(),
                        owed_removals = r.gone.len(),
                        pinned = r.pinned,
                        "publisher restored its checkpoint"
                    );
                    (c, r, true, None)
                }
                Ok((c, _)) => (c, RouterState::new(cfg.identity.clone(), rc), false, None),
                Err(e) => (
                    Checkpoints::fresh(super::COMPONENT),
                    RouterState::new(cfg.identity.clone(), rc),
                    false,
                    Some(e),
                ),
            };
        let recorder = kube::runtime::events::Recorder::new(
            client.clone(),
            kube::runtime::events::Reporter {
                controller: crate::k8s::events::CONTROLLER.to_owned(),
                instance: cfg.reporter_instance.clone(),
            },
        );
        Inner {
            router: Mutex::new(router),
            steps: tokio::sync::Mutex::new(checkpoints),
            restored,
            listed: AtomicBool::new(false),
            restore_failed: restore_error.is_some(),
            restore_error: Mutex::new(restore_error),
            recorder,
            retry_journaled: Mutex::new(None),
            journal,
            client,
            cfg,
            wake: Wake::default(),
            cache: Mutex::new(TermCache::default()),
            heal: AtomicBool::new(false),
            publish_lock: tokio::sync::Mutex::new(()),
            term: Mutex::new(None),
            last_conditions: Mutex::new(Vec::new()),
            counters: Counters::default(),
            blocked: Mutex::new(BTreeMap::new()),
            dispatch: std::sync::OnceLock::new(),
        }
    }

    async fn commit(&self, batch: Batch) -> Result<haptic_journal::Accepted, PublisherError> {
        if let Some(h) = self.dispatch.get() {
            return h.accept(batch).await.map_err(PublisherError::Dispatch);
        }
        let j = Arc::clone(&self.journal);
        tokio::task::spawn_blocking(move || j.accept(batch))
            .await
            .map_err(|_| PublisherError::Join)?
            .map_err(PublisherError::Accept)
    }

    fn queue(&self, q: Queue) -> Result<Vec<WorkEntry>, PublisherError> {
        self.journal.queue(q).map_err(PublisherError::Read)
    }

    fn check_restored(&self) -> Result<(), PublisherError> {
        if !self.restore_failed {
            return Ok(());
        }
        match self
            .restore_error
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
        {
            Some(e) => Err(PublisherError::Read(e)),
            None => Err(PublisherError::CheckpointUnreadable),
        }
    }

    /// Folds one delivery (`seq`, accepted at `at` when known) into the router and journals the
    /// work it becomes (`leading`: a term of this replica runs; `replayed`: committed before
    /// this process started, when the router decides from the log instead) with the router's
    /// checkpoint in one commit; a delivery the checkpoint already folded is skipped. Then wakes
    /// the workers.
    pub(super) async fn deliver(
        &self,
        seq: Seq,
        at: Option<UnixMillis>,
        event: &Event,
        leading: bool,
        replayed: bool,
    ) -> Result<(), PublisherError> {
        self.check_restored()?;
        let mut steps = self.steps.lock().await;
        if steps.folded(seq) {
            debug!(
                seq = seq.0,
                "delivery already folded into the checkpoint; skipped"
            );
            return Ok(());
        }
        let at = match at {
            Some(at) => at,
            None => match self.journal.event(seq).map_err(PublisherError::Read)? {
                Some((h, _)) => h.accepted_at,
                None => now_ms(),
            },
        };
        let place = self.place_render(seq, event)?;
        steps.saw(seq);
        let effects = self.fold(
            &mut steps,
            Input::Event {
                seq,
                at,
                event,
                leading,
                replayed,
                place,
            },
        );
        self.apply(&mut steps, effects, haptic_journal::Origin::Seq(seq))
            .await
    }

    /// Folds a non-event input ([`Input::TermStarted`], [`Input::StatusListed`]) as
    /// [`Inner::deliver`] does.
    async fn step(&self, input: Input<'_>) -> Result<(), PublisherError> {
        self.check_restored()?;
        let mut steps = self.steps.lock().await;
        let effects = self.fold(&mut steps, input);
        self.apply(&mut steps, effects, haptic_journal::Origin::None)
            .await
    }

    fn fold(&self, steps: &mut Checkpoints, input: Input<'_>) -> Vec<Effect> {
        let mut r = self
            .router
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let effects = decide::route(&mut r, input);
        steps.note(ComponentState::Publisher(r.checkpoint()));
        effects
    }

    /// Journals the effects of one step: the work items, with the carried checkpoint, in one
    /// batch; the checkpoint alone when there is no work (before the delivery drops).
    async fn apply(
        &self,
        steps: &mut Checkpoints,
        effects: Vec<Effect>,
        origin: haptic_journal::Origin,
    ) -> Result<(), PublisherError> {
        let mut batch = Batch::new();
        let mut wake = [false; 4];
        for e in effects {
            match e {
                Effect::Enqueue(item) => {
                    match &*item {
                        WorkItem::Publish(_) | WorkItem::PublishDeployed(_) => wake[0] = true,
                        WorkItem::Invalid(_) => wake[1] = true,
                        WorkItem::Verdict(_) => wake[2] = true,
                        _ => wake[3] = true,
                    }
                    batch.enqueue(*item, origin);
                }
                Effect::ClearCaches => {
                    *self
                        .cache
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) = TermCache::default();
                }
            }
        }
        if batch.is_empty() {
            if let Some(b) = steps.leftover() {
                self.commit(b).await?;
            }
        } else {
            steps.attach(&mut batch);
            self.commit(batch).await?;
        }
        let w = &self.wake;
        for (on, n) in wake
            .iter()
            .zip([&w.publish, &w.invalid, &w.verdict, &w.status])
        {
            if *on {
                n.notify_one();
            }
        }
        Ok(())
    }

    fn writer(&self, term: Term) -> Writer {
        Writer::new(
            self.client.clone(),
            WriterConfig {
                namespace: self.cfg.namespace.clone(),
                config_label: crate::core::naming::label_value(self.cfg.identity.name.as_str()),
                owner: self.cfg.owner.clone(),
                term,
                compression_threshold_bytes: self.cfg.compression_threshold_bytes,
                request_timeout: self.cfg.request_timeout,
                lease: Arc::clone(&self.cfg.lease),
            },
        )
    }

    fn current_term(&self) -> Option<(Term, CancellationToken)> {
        self.term
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn authoritative(&self, term: Term, cancel: &CancellationToken) -> bool {
        !cancel.is_cancelled() && self.journal.term().is_ok_and(|t| t == term)
    }

    fn load_render(&self, checksum: Checksum) -> Result<(Render, RenderContent), WriteError> {
        let content_err = |reason: String| WriteError::Content { reason };
        let render = self
            .journal
            .get_render(checksum)
            .map_err(|e| content_err(e.to_string()))?
            .ok_or_else(|| content_err(format!("render {checksum} not in the journal")))?;
        let text = |hash: Checksum| -> Result<String, WriteError> {
            let bytes = self
                .journal
                .get_blob(hash)
                .map_err(|e| content_err(e.to_string()))?
                .ok_or_else(|| content_err(format!("blob {hash} missing")))?;
            String::from_utf8(bytes).map_err(|_| content_err(format!("blob {hash} is not utf-8")))
        };
        let config = text(render.config)?;
        let mut files = Vec::new();
        for f in &render.files {
            files.push(FileContent {
                kind: f.kind,
                path: f.path.clone(),
                content: text(f.blob)?,
            });
        }
        Ok((
            render.clone(),
            RenderContent {
                checksum,
                config,
                files,
            },
        ))
    }

    fn checkpoint(&self, name: &str) -> Option<haptic_journal::PublishedCheckpoint> {
        self.journal
            .published_checkpoints()
            .ok()?
            .into_iter()
            .find(|c| c.name.as_str() == name)
    }
    pub(super) fn start(self: &Arc<Self>, term: Term) -> TermHandle {
        let cancel = CancellationToken::new();
        *self
            .term
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some((term, cancel.clone()));
        *self
            .cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = TermCache::default();
        // Dedup against the cluster at term start: repeat the last complete publication
        // idempotently (reads; writes only what differs) before anything else.
        self.heal.store(true, Ordering::Release);
        let tracker = TaskTracker::new();
        let w = self.writer(term);
        // Queue what the router owes a new term (status removals of pods that went away
        // while this replica did not lead), and, on a journal without a checkpoint, fold the
        // pods the published status lists.
        tracker.spawn(Arc::clone(self).term_started(w.clone(), cancel.clone()));
        tracker.spawn(Arc::clone(self).retire_earlier_configs(w.clone(), cancel.clone()));
        tracker.spawn(Arc::clone(self).publish_worker(w.clone(), cancel.clone()));
        tracker.spawn(Arc::clone(self).invalid_worker(w.clone(), cancel.clone()));
        tracker.spawn(Arc::clone(self).verdict_worker(w.clone(), cancel.clone()));
        tracker.spawn(Arc::clone(self).status_worker(w, cancel.clone()));
        // The HAProxyCfg watch also carries the operator's retry requests (annotation
        // `haproxy-haptic.org/retry-rejected`), so it runs without self-healing too.
        let by_cfg = format!(
            "{}={}",
            labels::CONFIG,
            crate::core::naming::label_value(self.cfg.identity.name.as_str())
        );
        tracker.spawn(Arc::clone(self).heal_watch(
            Api::<HAProxyCfg>::namespaced(self.client.clone(), &self.cfg.namespace),
            by_cfg,
            term,
            cancel.clone(),
        ));
        if self.cfg.self_heal {
            let name = self.cfg.haproxycfg_name();
            let ns = &self.cfg.namespace;
            let by_rc = format!("{}={name}", labels::RUNTIME_CONFIG);
            let c = &self.client;
            tracker.spawn(Arc::clone(self).heal_watch(
                Api::<HAProxyMapFile>::namespaced(c.clone(), ns),
                by_rc.clone(),
                term,
                cancel.clone(),
            ));
            tracker.spawn(Arc::clone(self).heal_watch(
                Api::<HAProxyGeneralFile>::namespaced(c.clone(), ns),
                by_rc.clone(),
                term,
                cancel.clone(),
            ));
            tracker.spawn(Arc::clone(self).heal_watch(
                Api::<HAProxyCRTListFile>::namespaced(c.clone(), ns),
                by_rc.clone(),
                term,
                cancel.clone(),
            ));
            tracker.spawn(Arc::clone(self).heal_watch(
                Api::<Secret>::namespaced(c.clone(), ns),
                by_rc,
                term,
                cancel.clone(),
            ));
        }
        self.wake.publish.notify_one();
        self.wake.invalid.notify_one();
        self.wake.verdict.notify_one();
        self.wake.status.notify_one();
        TermHandle { cancel, tracker }
    }
    pub(super) fn known_pod_count(&self) -> usize {
        self.router
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .known_pods
            .len()
    }

    pub(super) async fn drain(&self) -> Result<Option<Checksum>, PublisherError> {
        let Some((term, cancel)) = self.current_term() else {
            return Ok(None);
        };
        if !self.authoritative(term, &cancel) {
            return Ok(None);
        }
        let _g = self.publish_lock.lock().await;
        let deployed = self.queue(Queue::PublishDeployed)?;
        let Some(newest) = deployed.last() else {
            return Ok(None);
        };
        let WorkItem::PublishDeployed(d) = &newest.record.item else {
            return Ok(None);
        };
        let render = d.render;
        let older: Vec<&WorkEntry> = deployed[..deployed.len() - 1].iter().collect();
        let writer = self.writer(term);
        haptic_journal::crash_point!("drain::before_publish");
        let done = self
            .publish_main(&writer, &cancel, Some(newest), &older, true)
            .await?;
        Ok(done.then_some(render))
    }
}

fn item_seq(e: &WorkEntry) -> Seq {
    match &e.record.item {
        WorkItem::Publish(p) => p.render_seq,
        WorkItem::PublishDeployed(d) => d.render_seq,
        _ => Seq(0),
    }
}

/// Names the runtime config (for tests).
#[must_use]
pub fn runtime_config(namespace: &str, name: &str) -> RuntimeConfigRef {
    RuntimeConfigRef {
        namespace: namespace.into(),
        name: name.into(),
    }
}
