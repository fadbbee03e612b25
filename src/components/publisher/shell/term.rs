//! One leadership term of the publisher: its owner spawns the term's tasks (term start,
//! retirement, the four workers, the heal watches), each with its own fields, the term's
//! writer and its cancellation; the term's heal cache and heal request are shared by the
//! publish worker and the heal watches only. The drain is a message to the publish worker (it
//! never races a publication); [`TermLink`] is how the rest of the publisher reaches the term.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use haptic_journal::{Checksum, Term};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::cache::HealCache;
use super::context::Context;
use super::failures::{Worker, Writes};
use super::heal::HealWatch;
use super::invalid::InvalidWorker;
use super::publish::PublishWorker;
use super::retire::Retire;
use super::router::RouterHandle;
use super::start::TermStart;
use super::status::StatusWorker;
use super::verdict::VerdictWorker;
use crate::components::publisher::PublisherError;
use crate::k8s::crd::{HAProxyCRTListFile, HAProxyCfg, HAProxyGeneralFile, HAProxyMapFile, labels};

/// A drain request to the publish worker: the render published, if any.
pub(super) type DrainRequest = oneshot::Sender<Result<Option<Checksum>, PublisherError>>;

/// How the rest of the publisher reaches the running term ([`Context::current`]).
#[derive(Clone, Debug)]
pub(crate) struct TermLink {
    /// The term.
    pub(super) term: Term,
    /// Cancels every task of the term.
    pub(super) cancel: CancellationToken,
    /// The term's heal cache (a lost leadership clears it).
    pub(super) cache: Arc<HealCache>,
    /// Drain requests to the term's publish worker (capacity 1: a leader stop drains once).
    pub(super) drain: mpsc::Sender<DrainRequest>,
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

/// Starts the tasks of term `term` (the term already journaled) and publishes its
/// [`TermLink`]. Queued work of earlier terms is picked up; the last complete publication is
/// repeated idempotently against the cluster first (the heal request starts set).
pub(crate) fn start(ctx: &Arc<Context>, router: &RouterHandle, term: Term) -> TermHandle {
    let cancel = CancellationToken::new();
    let cache = Arc::new(HealCache::default());
    // Dedup against the cluster at term start: repeat the last complete publication
    // idempotently (reads; writes only what differs) before anything else.
    let heal = Arc::new(AtomicBool::new(true));
    let (drain_tx, drain_rx) = mpsc::channel(1);
    ctx.current.send_replace(Some(TermLink {
        term,
        cancel: cancel.clone(),
        cache: Arc::clone(&cache),
        drain: drain_tx,
    }));
    let writer = ctx.writer(term);
    let writes = |worker| Writes::new(Arc::clone(ctx), worker, writer.clone(), cancel.clone());
    let tracker = TaskTracker::new();
    // Queue what the router owes a new term (status removals of pods that went away while this
    // replica did not lead), and, on a journal without a checkpoint, fold the pods the
    // published status lists.
    tracker.spawn(TermStart::new(Arc::clone(ctx), router.clone(), writes(Worker::Status)).run());
    tracker.spawn(Retire::new(Arc::clone(ctx), writes(Worker::Publish)).run());
    tracker.spawn(
        PublishWorker::new(
            Arc::clone(ctx),
            writes(Worker::Publish),
            Arc::clone(&cache),
            Arc::clone(&heal),
            drain_rx,
        )
        .run(),
    );
    tracker.spawn(InvalidWorker::new(Arc::clone(ctx), writes(Worker::Invalid)).run());
    tracker.spawn(VerdictWorker::new(Arc::clone(ctx), writes(Worker::Verdict)).run());
    tracker.spawn(StatusWorker::new(Arc::clone(ctx), writes(Worker::Status)).run());
    let watch = |retries: Option<RouterHandle>| HealWatch {
        ctx: Arc::clone(ctx),
        retries,
        cache: Arc::clone(&cache),
        heal: Arc::clone(&heal),
        term,
        cancel: cancel.clone(),
    };
    let (client, ns) = (&ctx.client, ctx.cfg.namespace.as_str());
    // The HAProxyCfg watch also carries the operator's retry requests (annotation
    // `haproxy-haptic.org/retry-rejected`), so it runs without self-healing too.
    let by_cfg = format!(
        "{}={}",
        labels::CONFIG,
        crate::core::naming::label_value(ctx.cfg.identity.name.as_str())
    );
    tracker.spawn(
        watch(Some(router.clone())).run(Api::<HAProxyCfg>::namespaced(client.clone(), ns), by_cfg),
    );
    if ctx.cfg.self_heal {
        let by_rc = format!("{}={}", labels::RUNTIME_CONFIG, ctx.cfg.haproxycfg_name());
        tracker.spawn(watch(None).run(
            Api::<HAProxyMapFile>::namespaced(client.clone(), ns),
            by_rc.clone(),
        ));
        tracker.spawn(watch(None).run(
            Api::<HAProxyGeneralFile>::namespaced(client.clone(), ns),
            by_rc.clone(),
        ));
        tracker.spawn(watch(None).run(
            Api::<HAProxyCRTListFile>::namespaced(client.clone(), ns),
            by_rc.clone(),
        ));
        tracker.spawn(watch(None).run(Api::<Secret>::namespaced(client.clone(), ns), by_rc));
    }
    let w = &ctx.wake;
    w.publish.notify_one();
    w.invalid.notify_one();
    w.verdict.notify_one();
    w.status.notify_one();
    TermHandle { cancel, tracker }
}

/// Graceful leader stop: asks the running term's publish worker to publish the newest queued
/// deploy-driven render past the throttle (see [`PublishWorker`]). `None` when no term runs,
/// it ended, or there was nothing to publish.
///
/// # Errors
/// [`PublisherError`] when the journal fails.
///
/// # Cancel safety
/// Cancelling leaves the queue as it was or drained (the ack is one commit).
pub(crate) async fn drain(ctx: &Context) -> Result<Option<Checksum>, PublisherError> {
    let Some(link) = ctx.current.borrow().clone() else {
        return Ok(None);
    };
    if !ctx.authoritative(link.term, &link.cancel) {
        return Ok(None);
    }
    let (tx, rx) = oneshot::channel();
    if link.drain.send(tx).await.is_err() {
        return Ok(None);
    }
    rx.await.unwrap_or(Ok(None))
}
