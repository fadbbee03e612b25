//! What every task of the publisher shares: its settings and clients, the one way to commit
//! (the dispatcher's handle once attached), and values each with one writer: counters
//! (atomics), the blocked reasons (one watch per worker), the gate conditions last written (the
//! verdict worker's watch), the running term (published at term start), the router's view (its
//! task's watch). Wake-ups are `Notify`s. Nothing here is behind a lock.

use std::sync::{Arc, OnceLock};

use haptic_journal::{
    Accepted, Batch, Checksum, Journal, Op, OpOutcome, PublishedCheckpoint, Queue, Term, WorkEntry,
    WorkItem,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::Client;
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::counters::Counters;
use super::failures::Worker;
use super::router::RouterView;
use super::term::TermLink;
use crate::components::publisher::{PublisherConfig, PublisherError};
use crate::core::render::JournaledRender;
use crate::dispatch::render::RenderStore;
use crate::k8s::WriteError;
use crate::k8s::writer::{Writer, WriterConfig};

/// The shared part of the publisher (see the module docs).
pub(crate) struct Context {
    /// Settings.
    pub(crate) cfg: PublisherConfig,
    /// The journal (reads; writes go through [`Context::commit`]).
    pub(super) journal: Arc<Journal>,
    /// Renders by checksum, read on a blocking thread.
    renders: RenderStore,
    /// The Kubernetes client (kube's retry layer off).
    pub(super) client: Client,
    /// Every journal commit of the publisher.
    pub(crate) commit: Commit,
    /// Counters.
    pub(crate) counters: Counters,
    /// Why each worker's writes wait for an operator.
    pub(crate) blocked: Blocked,
    /// Wake-ups of the workers (their queues are in the journal).
    pub(super) wake: Wake,
    /// Kubernetes Events on the main HAProxyCfg.
    pub(super) events: EventWriter,
    /// The gate conditions (ConfigValidated, ConfigPinned) the verdict worker last wrote; a
    /// repeat's status restore reads them.
    pub(super) last_conditions: watch::Sender<Vec<Condition>>,
    /// The running term (set at term start; a stopped term's link stays, cancelled): drain
    /// requests and the router's cache reset reach it here.
    pub(crate) current: watch::Sender<Option<TermLink>>,
    /// What the workers need of the router: its known pods.
    pub(crate) view: watch::Receiver<RouterView>,
}

impl Context {
    /// The shared part over `journal` and `client`, with the router's `view`.
    pub(super) fn new(
        journal: Arc<Journal>,
        client: Client,
        cfg: PublisherConfig,
        view: watch::Receiver<RouterView>,
    ) -> Context {
        let events = EventWriter {
            recorder: Recorder::new(
                client.clone(),
                Reporter {
                    controller: crate::k8s::events::CONTROLLER.to_owned(),
                    instance: cfg.reporter_instance.clone(),
                },
            ),
            reference: crate::k8s::events::haproxycfg_reference(&cfg.runtime_config()),
        };
        Context {
            commit: Commit {
                journal: Arc::clone(&journal),
                dispatch: OnceLock::new(),
            },
            renders: RenderStore::new(Arc::clone(&journal)),
            journal,
            client,
            cfg,
            counters: Counters::default(),
            blocked: Blocked::default(),
            wake: Wake::default(),
            events,
            last_conditions: watch::Sender::new(Vec::new()),
            current: watch::Sender::new(None),
            view,
        }
    }

    /// The writer of leadership term `term` (fenced by the configured Lease check).
    pub(super) fn writer(&self, term: Term) -> Writer {
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

    /// Whether term `term` may still ack: not cancelled, and still the journal's term.
    pub(super) fn authoritative(&self, term: Term, cancel: &CancellationToken) -> bool {
        !cancel.is_cancelled() && self.journal.term().is_ok_and(|t| t == term)
    }

    /// The items of queue `q`, in queue order.
    pub(super) fn queue(&self, q: Queue) -> Result<Vec<WorkEntry>, PublisherError> {
        self.journal.queue(q).map_err(PublisherError::Read)
    }

    /// The items of queue `q` and the newest one's work item (a copy); `None` when the queue is
    /// empty. For the workers where the newest item wins and the older ones are acked with it.
    pub(super) fn newest_of(
        &self,
        q: Queue,
    ) -> Result<Option<(Vec<WorkEntry>, WorkItem)>, PublisherError> {
        let items = self.queue(q)?;
        Ok(items
            .last()
            .map(|newest| newest.record.item.clone())
            .map(|item| (items, item)))
    }

    /// The published checkpoint of the HAProxyCfg `name`, if any.
    pub(super) fn published_checkpoint(&self, name: &str) -> Option<PublishedCheckpoint> {
        self.journal
            .published_checkpoints()
            .ok()?
            .into_iter()
            .find(|c| c.name.as_str() == name)
    }

    /// The render `checksum` read back from the journal's blobs (the render store: a blocking
    /// thread, never this task).
    ///
    /// # Errors
    /// [`WriteError::Content`] (permanent: unbuildable) when the render or one of its blobs is
    /// missing or unreadable, or a content is not UTF-8 (Kubernetes objects hold text).
    ///
    /// # Cancel safety
    /// Cancel safe (the read finishes in its blocking task).
    pub(super) async fn load_render(
        &self,
        checksum: Checksum,
    ) -> Result<JournaledRender, WriteError> {
        let content_err = |reason: String| WriteError::Content { reason };
        let render = self
            .renders
            .load(checksum)
            .await
            .map_err(|e| content_err(crate::core::error::chain(&e)))?;
        match render.not_text() {
            Some(blob) => Err(content_err(format!("blob {blob} is not utf-8"))),
            None => Ok(render),
        }
    }
}

/// Every journal commit of the publisher: through the dispatcher once attached (its
/// subscribers get `config.published` at once, and a storage fault makes the commit wait
/// instead of failing), else straight to the journal on a blocking thread.
pub(crate) struct Commit {
    journal: Arc<Journal>,
    /// Set once by [`Commit::attach`], before the publisher runs.
    dispatch: OnceLock<crate::dispatch::DispatchHandle>,
}

impl Commit {
    /// Sends every later commit through `handle` (the first call wins).
    pub(crate) fn attach(&self, handle: crate::dispatch::DispatchHandle) {
        let _ = self.dispatch.set(handle);
    }

    /// Commits `batch`. Durable when this returns.
    ///
    /// # Errors
    /// [`PublisherError`] when the commit failed (nothing of the batch is durable).
    ///
    /// # Cancel safety
    /// Once handed to the journal's writer the commit completes even if this is dropped.
    pub(super) async fn commit(&self, batch: Batch) -> Result<Accepted, PublisherError> {
        if let Some(h) = self.dispatch.get() {
            return h.accept(batch).await.map_err(PublisherError::Dispatch);
        }
        let j = Arc::clone(&self.journal);
        tokio::task::spawn_blocking(move || j.accept(batch))
            .await
            .map_err(|_| PublisherError::Join)?
            .map_err(PublisherError::Accept)
    }

    /// Acks exactly the versions of `items` taken (compare-and-delete), in one commit.
    ///
    /// # Errors
    /// As [`Commit::commit`].
    pub(super) async fn ack_all<'a>(
        &self,
        items: impl IntoIterator<Item = &'a WorkEntry>,
    ) -> Result<(), PublisherError> {
        self.commit(ack_batch(items)).await.map(|_| ())
    }

    /// Moves every parked status back to pending (a parked item whose pod already has a newer
    /// pending one is dropped); returns how many were handled. Durable when this returns.
    ///
    /// # Errors
    /// As [`Commit::commit`].
    pub(super) async fn unpark_all(&self) -> Result<u32, PublisherError> {
        let mut b = Batch::new();
        b.push(Op::Unpark { key: None });
        let accepted = self.commit(b).await?;
        Ok(match accepted.outcomes.first() {
            Some(OpOutcome::Unparked(n)) => *n,
            _ => 0,
        })
    }
}

/// A batch acking exactly the versions of `items` taken (compare-and-delete), in their order.
pub(super) fn ack_batch<'a>(items: impl IntoIterator<Item = &'a WorkEntry>) -> Batch {
    let mut b = Batch::new();
    for e in items {
        b.ack(e.queue, e.key.clone(), e.record.id);
    }
    b
}

/// Wake-ups of the workers, one each; their work is in the journal's queues.
#[derive(Default)]
pub(super) struct Wake {
    /// The publish worker (`publish`, `publish-deployed`, a heal).
    pub(super) publish: Notify,
    /// The invalid worker (`invalid`).
    pub(super) invalid: Notify,
    /// The verdict worker (`verdict`).
    pub(super) verdict: Notify,
    /// The status worker (`status-pending`).
    pub(super) status: Notify,
}

/// Per worker, why its writes are refused until an operator acts (a 401, a 403, a resource type
/// the API server does not serve), with the fix: set by a failed attempt of such a class,
/// cleared by that worker's next successful write. Read by `/readyz`.
#[derive(Default)]
pub(crate) struct Blocked {
    publish: watch::Sender<Option<String>>,
    invalid: watch::Sender<Option<String>>,
    verdict: watch::Sender<Option<String>>,
    status: watch::Sender<Option<String>>,
}

impl Blocked {
    fn of(&self, worker: Worker) -> &watch::Sender<Option<String>> {
        match worker {
            Worker::Publish => &self.publish,
            Worker::Invalid => &self.invalid,
            Worker::Verdict => &self.verdict,
            Worker::Status => &self.status,
        }
    }

    /// Records (`Some`: the error and the fix) or clears (`None`) why `worker` is blocked.
    pub(super) fn set(&self, worker: Worker, reason: Option<String>) {
        self.of(worker).send_if_modified(|now| {
            let changed = *now != reason;
            *now = reason;
            changed
        });
    }

    /// One line per blocked worker, by worker name (`<worker>: <error>; <fix>`); `None` when
    /// none is.
    pub(crate) fn describe(&self) -> Option<String> {
        let mut lines: Vec<(&'static str, String)> = [
            Worker::Publish,
            Worker::Invalid,
            Worker::Verdict,
            Worker::Status,
        ]
        .into_iter()
        .filter_map(|w| {
            self.of(w)
                .borrow()
                .as_ref()
                .map(|r| (w.as_str(), r.clone()))
        })
        .collect();
        lines.sort_by_key(|(w, _)| *w);
        (!lines.is_empty()).then(|| {
            lines
                .iter()
                .map(|(w, r)| format!("{w}: {r}"))
                .collect::<Vec<_>>()
                .join("\n")
        })
    }
}

/// Kubernetes Events on the main HAProxyCfg.
pub(super) struct EventWriter {
    recorder: Recorder,
    reference: k8s_openapi::api::core::v1::ObjectReference,
}

impl EventWriter {
    /// Writes one Event, detached and bounded by [`crate::k8s::events::EVENT_WRITE_TIMEOUT`]
    /// (a note over 1 KiB is cut); a failure is logged at warn.
    pub(super) fn emit(&self, type_: EventType, reason: &str, action: &str, note: String) {
        let note = crate::core::text::truncate_with_ellipsis(note, 1024);
        let event = KubeEvent {
            type_,
            reason: reason.to_owned(),
            note: Some(note),
            action: action.to_owned(),
            secondary: None,
        };
        let recorder = self.recorder.clone();
        let reference = self.reference.clone();
        let timeout = crate::k8s::events::EVENT_WRITE_TIMEOUT;
        let reason = reason.to_owned();
        tokio::spawn(async move {
            match tokio::time::timeout(timeout, recorder.publish(&event, &reference)).await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => warn!(%reason, %error, "event not written"),
                Err(_) => warn!(%reason, "event write timed out"),
            }
        });
    }
}
