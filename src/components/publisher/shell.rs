//! The publisher's shell: journals what [`super::decide::route`] returns, runs the four workers
//! (publish, invalid, verdict, status) and the self-healing watch. Workers read their queues
//! from the journal; `Notify`s only wake them.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use haptic_journal::{
    Batch, Checksum, Correlation, DrainCheckpoint, Event, Journal, PodStatusChange, Queue, Render,
    RuntimeConfigRef, Seq, Term, UnixMillis, WorkEntry, WorkItem, WorkKey,
};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt as _};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

mod heal;
mod order;
mod publish;
mod status;
mod workers;

use super::decide::{self, Effect, Retry, RouterState};
use super::{PublisherConfig, PublisherError};
use crate::core::naming::invalid_haproxycfg_name;
use crate::k8s::WriteError;
use crate::k8s::crd::{
    HAProxyCRTListFile, HAProxyCfg, HAProxyGeneralFile, HAProxyMapFile, conditions, labels,
    reasons, summarize_validation_errors,
};
use crate::k8s::writer::{
    FileContent, PodEntryChange, PodEntryOutcome, PodStatusInput, PublishSpec, RenderContent,
    Writer, WriterConfig, k8s_time,
};

/// Counters for tests, benchmarks and metrics.
#[derive(Debug, Default)]
pub struct Counters {
    /// Complete publications of the main HAProxyCfg (including idempotent repeats).
    pub publications: AtomicU64,
    /// ConfigPublished events journaled.
    pub config_published: AtomicU64,
    /// Failed attempts that were retried.
    pub retries: AtomicU64,
    /// Items released after a permanent error or too many attempts.
    pub given_up: AtomicU64,
    /// Self-healing republications.
    pub heals: AtomicU64,
    /// Status write rounds (one per HAProxyCfg per round with something to write).
    pub status_rounds: AtomicU64,
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
    router: Mutex<RouterState>,
    wake: Wake,
    cache: Mutex<TermCache>,
    heal: AtomicBool,
    /// Held for one publication (worker or drain), so the drain never races the worker.
    publish_lock: tokio::sync::Mutex<()>,
    term: Mutex<Option<(Term, CancellationToken)>>,
    /// The gate conditions (ConfigValidated, ConfigPinned) the verdict worker last wrote.
    last_conditions: Mutex<Vec<Condition>>,
    pub(super) counters: Counters,
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

/// True when `e` ends this term's writes (DESIGN.md J7): the Lease guard refused
/// ([`WriteError::Deposed`]) or an object is stamped by a newer term
/// ([`WriteError::StaleTerm`]). The caller cancels the term's workers at once and acks nothing:
/// the item stays queued for the next term (never released as a permanent rejection).
fn stops_term(e: &WriteError) -> bool {
    e.is_deposed() || matches!(e, WriteError::StaleTerm { .. })
}

/// Cancels the term after `e` when [`stops_term`]; returns whether it did.
fn stop_term_on(e: &WriteError, cancel: &CancellationToken) -> bool {
    if !stops_term(e) {
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
    pub(super) fn new(journal: Arc<Journal>, client: Client, cfg: PublisherConfig) -> Inner {
        let rc = cfg.runtime_config();
        Inner {
            router: Mutex::new(RouterState::new(cfg.identity.clone(), rc)),
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

    pub(super) async fn on_event(&self, seq: Seq, event: &Event) -> Result<(), PublisherError> {
        let at = match self.journal.event(seq).map_err(PublisherError::Read)? {
            Some((h, _)) => h.accepted_at,
            None => now_ms(),
        };
        let unplaced = self.place_render(seq, event)?;
        let effects = {
            let mut r = self
                .router
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            decide::route(&mut r, seq, at, event)
        };
        let mut batch = Batch::new();
        let mut wake = [false; 4];
        for e in effects {
            match e {
                Effect::Enqueue(item) => {
                    let mut item = *item;
                    if unplaced && let WorkItem::PublishDeployed(d) = &mut item {
                        debug!(render = %d.render, "deploy-driven render of unknown order: status only");
                        d.render_seq = decide::UNPLACED_RENDER_SEQ;
                    }
                    match &item {
                        WorkItem::Publish(_) | WorkItem::PublishDeployed(_) => wake[0] = true,
                        WorkItem::Invalid(_) => wake[1] = true,
                        WorkItem::Verdict(_) => wake[2] = true,
                        _ => wake[3] = true,
                    }
                    batch.enqueue(item, haptic_journal::Origin::Seq(seq));
                }
                Effect::ClearCaches => {
                    *self
                        .cache
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) = TermCache::default();
                }
            }
        }
        if !batch.is_empty() {
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
        // Seed the known pod set from the published status, so the next discovery also clears
        // entries of pods that went away while another term (or no controller) ran.
        tracker.spawn(Arc::clone(self).seed_known_pods(w.clone()));
        tracker.spawn(Arc::clone(self).publish_worker(w.clone(), cancel.clone()));
        tracker.spawn(Arc::clone(self).invalid_worker(w.clone(), cancel.clone()));
        tracker.spawn(Arc::clone(self).verdict_worker(w.clone(), cancel.clone()));
        tracker.spawn(Arc::clone(self).status_worker(w, cancel.clone()));
        if self.cfg.self_heal {
            let name = self.cfg.haproxycfg_name();
            let ns = &self.cfg.namespace;
            let by_cfg = format!(
                "{}={}",
                labels::CONFIG,
                crate::core::naming::label_value(self.cfg.identity.name.as_str())
            );
            let by_rc = format!("{}={name}", labels::RUNTIME_CONFIG);
            let c = &self.client;
            tracker.spawn(Arc::clone(self).heal_watch(
                Api::<HAProxyCfg>::namespaced(c.clone(), ns),
                by_cfg,
                term,
                cancel.clone(),
            ));
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
