//! The router task: the one owner of the router's state ([`RouterState`]) and its checkpoint
//! bookkeeping. Every delivery, term start, listed status and retry request reaches it as a
//! message, in order; it folds the input through [`decide::route`], journals the work it
//! becomes together with the checkpoint in one commit (DESIGN.md J11), wakes the workers, and
//! publishes what they need of it ([`RouterView`]) on a watch channel.
//!
//! ```text
//!  run() / on_event ──Deliver──┐
//!  term start ──TermStarted, StatusListed──┼─► mpsc ─► Router (one task) ─► decide::route
//!  heal watch ──RetryRequested─┘                         │  Batch{work + checkpoint} ─► commit
//!                                                        ├─► wake the workers
//!                                                        └─► watch<RouterView> (known pods)
//! ```

use std::collections::BTreeSet;
use std::sync::Arc;

use haptic_journal::{
    Batch, ComponentState, Correlation, Event, Origin, PodRef, ReadError, Seq, UnixMillis, WorkItem,
};
use tokio::sync::{mpsc, oneshot, watch};
use tracing::{Instrument as _, debug, info};

use super::context::Context;
use super::order::place_render;
use crate::components::publisher::decide::{self, Effect, Input, RouterState};
use crate::components::publisher::{COMPONENT, PublisherError};
use crate::dispatch::checkpoint::Checkpoints;

/// Capacity of the router's mailbox. Every sender waits for the answer before it sends again,
/// so at most one message per requester is queued: `run` (or a caller of `on_event`), a term's
/// start task and its heal watch of the main HAProxyCfg, plus a few terms overlapping while one
/// stops.
const MAILBOX: usize = 16;

/// The answer to one message.
type Reply<T> = oneshot::Sender<Result<T, PublisherError>>;

/// One input of the router.
enum Message {
    /// An accepted event.
    Deliver {
        delivery: Delivery,
        reply: Reply<()>,
    },
    /// A term of this replica began; the answer says whether the published status must be
    /// listed (the journal had no checkpoint and it was not listed yet).
    TermStarted { reply: Reply<bool> },
    /// The pods the published HAProxyCfg status lists.
    StatusListed { pods: Vec<PodRef>, reply: Reply<()> },
    /// The main HAProxyCfg's annotation `haproxy-haptic.org/retry-rejected` holds `value`.
    RetryRequested { value: String, reply: Reply<()> },
    /// The main HAProxyCfg's annotation `haproxy-haptic.org/rollback-to` holds `value`
    /// (`None`: absent).
    RollbackRequested {
        value: Option<String>,
        shown: crate::k8s::crd::RollbackShown,
        reply: Reply<()>,
    },
}

/// One accepted event as the router folds it.
pub(crate) struct Delivery {
    /// Its position in the log.
    pub(crate) seq: Seq,
    /// When it was accepted, when known (else read from the journal).
    pub(crate) at: Option<UnixMillis>,
    /// The event.
    pub(crate) event: Arc<Event>,
    /// Whether a term of this replica runs now.
    pub(crate) leading: bool,
    /// Whether it was committed before this process started (a replay).
    pub(crate) replayed: bool,
}

/// What the workers need of the router, published after every input that changes it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct RouterView {
    /// Names of the pods the router knows (discovered or reported), sorted.
    pub(crate) known_pods: BTreeSet<String>,
}

impl RouterView {
    fn of(state: &RouterState) -> RouterView {
        RouterView {
            known_pods: state.known_pods.keys().cloned().collect(),
        }
    }

    fn matches(&self, state: &RouterState) -> bool {
        self.known_pods.len() == state.known_pods.len()
            && self.known_pods.iter().eq(state.known_pods.keys())
    }
}

/// Sends inputs to the router task and waits for their outcome. Cheap to clone; the task ends
/// when every handle is gone.
#[derive(Clone, Debug)]
pub(crate) struct RouterHandle(mpsc::Sender<Message>);

impl RouterHandle {
    async fn request<T>(
        &self,
        message: impl FnOnce(Reply<T>) -> Message,
    ) -> Result<T, PublisherError> {
        let (tx, rx) = oneshot::channel();
        self.0
            .send(message(tx))
            .await
            .map_err(|_| PublisherError::RouterStopped)?;
        rx.await.map_err(|_| PublisherError::RouterStopped)?
    }

    /// Folds one delivery (see [`Router::deliver`]); returns once its state and work are
    /// durable.
    ///
    /// # Errors
    /// [`PublisherError`] when the journal fails or the router task is gone.
    ///
    /// # Cancel safety
    /// Once sent, the input is folded and committed even if this future is dropped.
    pub(crate) async fn deliver(&self, delivery: Delivery) -> Result<(), PublisherError> {
        self.request(|reply| Message::Deliver { delivery, reply })
            .await
    }

    /// Folds [`Input::TermStarted`]; true when the published status must be listed next.
    ///
    /// # Errors
    /// As [`RouterHandle::deliver`].
    pub(super) async fn term_started(&self) -> Result<bool, PublisherError> {
        self.request(|reply| Message::TermStarted { reply }).await
    }

    /// Folds [`Input::StatusListed`] for `pods`.
    ///
    /// # Errors
    /// As [`RouterHandle::deliver`].
    pub(super) async fn status_listed(&self, pods: Vec<PodRef>) -> Result<(), PublisherError> {
        self.request(|reply| Message::StatusListed { pods, reply })
            .await
    }

    /// Journals `deployment.retry.request` for `value` when it is a new request (see
    /// [`Router::retry_requested`]).
    ///
    /// # Errors
    /// As [`RouterHandle::deliver`].
    pub(super) async fn retry_requested(&self, value: String) -> Result<(), PublisherError> {
        self.request(|reply| Message::RetryRequested { value, reply })
            .await
    }

    /// Journals `deployment.rollback.request` for `value` when it differs from the last value
    /// this process journaled (see [`Router::rollback_requested`]).
    ///
    /// # Errors
    /// As [`RouterHandle::deliver`].
    pub(super) async fn rollback_requested(
        &self,
        value: Option<String>,
        shown: crate::k8s::crd::RollbackShown,
    ) -> Result<(), PublisherError> {
        self.request(|reply| Message::RollbackRequested {
            value,
            shown,
            reply,
        })
        .await
    }
}

/// The router task's state (see the module docs).
pub(super) struct Router {
    ctx: Arc<Context>,
    state: RouterState,
    /// Checkpoint bookkeeping: replayed deliveries it folded are skipped.
    checkpoints: Checkpoints,
    /// Whether the journal held a publisher checkpoint at construction. Without one (a journal
    /// from before checkpoints, or rebuilt), the first term also folds the pods the published
    /// status lists ([`Input::StatusListed`]).
    restored: bool,
    /// Set once the published status was listed for a journal without a checkpoint.
    listed: bool,
    /// The checkpoint could not be read at construction (J10): every input fails, the first
    /// with this error, later ones with [`PublisherError::CheckpointUnreadable`].
    restore_failed: bool,
    restore_error: Option<ReadError>,
    /// The `haproxy-haptic.org/retry-rejected` value of the last `deployment.retry.request`
    /// this process journaled (the router's own value lags until it folds the event).
    retry_journaled: Option<String>,
    /// The `haproxy-haptic.org/rollback-to` value of the last `deployment.rollback.request`
    /// this process journaled (`None`: none yet; `Some(None)`: the annotation's absence).
    rollback_journaled: Option<Option<String>>,
    view: watch::Sender<RouterView>,
}

/// What the router restored from the journal at construction.
pub(super) struct Restored {
    checkpoints: Checkpoints,
    state: RouterState,
    restored: bool,
    restore_error: Option<ReadError>,
}

impl Restored {
    /// Restores the router's checkpoint of the publisher configured by `cfg` (one short read
    /// of `journal`); an unreadable checkpoint is kept as the error every input returns.
    pub(super) fn read(
        journal: &haptic_journal::Journal,
        cfg: &crate::components::publisher::PublisherConfig,
    ) -> Restored {
        let rc = cfg.runtime_config();
        match Checkpoints::restore(journal, COMPONENT) {
            Ok((checkpoints, Some(ComponentState::Publisher(cp)))) => {
                let state = RouterState::restore(cfg.identity.clone(), rc, cp);
                info!(
                    known_pods = state.known_pods.len(),
                    owed_removals = state.gone.len(),
                    pinned = state.pinned,
                    "publisher restored its checkpoint"
                );
                Restored {
                    checkpoints,
                    state,
                    restored: true,
                    restore_error: None,
                }
            }
            Ok((checkpoints, _)) => Restored {
                checkpoints,
                state: RouterState::new(cfg.identity.clone(), rc),
                restored: false,
                restore_error: None,
            },
            Err(e) => Restored {
                checkpoints: Checkpoints::fresh(COMPONENT),
                state: RouterState::new(cfg.identity.clone(), rc),
                restored: false,
                restore_error: Some(e),
            },
        }
    }

    /// The first view the router publishes.
    pub(super) fn view(&self) -> RouterView {
        RouterView::of(&self.state)
    }
}

impl Router {
    /// Spawns the router task over `restored` and returns its handle.
    ///
    /// # Panics
    /// Outside a Tokio runtime.
    pub(super) fn spawn(
        ctx: Arc<Context>,
        restored: Restored,
        view: watch::Sender<RouterView>,
    ) -> RouterHandle {
        let (tx, rx) = mpsc::channel(MAILBOX);
        let router = Router {
            ctx,
            state: restored.state,
            checkpoints: restored.checkpoints,
            restored: restored.restored,
            listed: false,
            restore_failed: restored.restore_error.is_some(),
            restore_error: restored.restore_error,
            retry_journaled: None,
            rollback_journaled: None,
            view,
        };
        // Its end is seen by every caller (a closed mailbox or a dropped answer is
        // `PublisherError::RouterStopped`, which ends `ConfigPublisher::run`).
        tokio::spawn(router.run(rx).in_current_span());
        RouterHandle(tx)
    }

    async fn run(mut self, mut rx: mpsc::Receiver<Message>) {
        while let Some(message) = rx.recv().await {
            match message {
                Message::Deliver { delivery, reply } => {
                    let _ = reply.send(self.deliver(delivery).await);
                }
                Message::TermStarted { reply } => {
                    let r = self.step(Input::TermStarted).await;
                    let _ = reply.send(r.map(|()| !self.restored && !self.listed));
                }
                Message::StatusListed { pods, reply } => {
                    let r = self.step(Input::StatusListed { pods: &pods }).await;
                    if r.is_ok() {
                        self.listed = true;
                    }
                    let _ = reply.send(r);
                }
                Message::RollbackRequested {
                    value,
                    shown,
                    reply,
                } => {
                    let _ = reply.send(self.rollback_requested(value, shown).await);
                }
                Message::RetryRequested { value, reply } => {
                    let _ = reply.send(self.retry_requested(value).await);
                }
            }
        }
    }

    fn check_restored(&mut self) -> Result<(), PublisherError> {
        if !self.restore_failed {
            return Ok(());
        }
        match self.restore_error.take() {
            Some(e) => Err(PublisherError::Read(e)),
            None => Err(PublisherError::CheckpointUnreadable),
        }
    }

    /// Folds one delivery and journals the work it becomes (`leading`: a term of this replica
    /// runs; `replayed`: committed before this process started, when the router decides from
    /// the log instead) with the router's checkpoint in one commit; a delivery the checkpoint already folded is skipped. Then wakes the workers.
    async fn deliver(&mut self, delivery: Delivery) -> Result<(), PublisherError> {
        let Delivery {
            seq,
            at,
            event,
            leading,
            replayed,
        } = delivery;
        let event = &*event;
        self.check_restored()?;
        if self.checkpoints.folded(seq) {
            debug!(
                seq = seq.0,
                "delivery already folded into the checkpoint; skipped"
            );
            return Ok(());
        }
        let at = match at {
            Some(at) => at,
            None => match self.ctx.journal.event(seq).map_err(PublisherError::Read)? {
                Some((h, _)) => h.accepted_at,
                None => UnixMillis::now(),
            },
        };
        let place = place_render(&self.ctx, &self.state, seq, event)?;
        self.checkpoints.saw(seq);
        let effects = self.fold(Input::Event {
            seq,
            at,
            event,
            leading,
            replayed,
            place,
        });
        self.apply(effects, Origin::Seq(seq)).await
    }

    /// Folds a non-event input ([`Input::TermStarted`], [`Input::StatusListed`]) as
    /// [`Router::deliver`] does.
    async fn step(&mut self, input: Input<'_>) -> Result<(), PublisherError> {
        self.check_restored()?;
        let effects = self.fold(input);
        self.apply(effects, Origin::None).await
    }

    fn fold(&mut self, input: Input<'_>) -> Vec<Effect> {
        let effects = decide::route(&mut self.state, input);
        self.checkpoints
            .note(ComponentState::Publisher(self.state.checkpoint()));
        let state = &self.state;
        self.view.send_if_modified(|view| {
            let changed = !view.matches(state);
            if changed {
                *view = RouterView::of(state);
            }
            changed
        });
        effects
    }

    /// Journals the effects of one input: the work items, with the carried checkpoint, in one
    /// batch; the checkpoint alone when there is no work (before the delivery drops).
    async fn apply(&mut self, effects: Vec<Effect>, origin: Origin) -> Result<(), PublisherError> {
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
                    if let Some(term) = self.ctx.current.borrow().as_ref() {
                        term.cache.clear();
                    }
                }
            }
        }
        if batch.is_empty() {
            if let Some(b) = self.checkpoints.leftover() {
                self.ctx.commit.commit(b).await?;
            }
        } else {
            self.checkpoints.attach(&mut batch);
            self.ctx.commit.commit(batch).await?;
        }
        let w = &self.ctx.wake;
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

    /// Journals `deployment.retry.request` when the main HAProxyCfg's annotation
    /// [`crate::k8s::crd::labels::RETRY_REJECTED`] holds `value` and it is neither the value of
    /// the last request the router folded ([`decide::retry_requested`], restored from the
    /// checkpoint) nor one this process already journaled (the router folds it a moment
    /// later). Durable when this returns; the scheduler clears its quarantine and deploys the
    /// last validated render to the pods that had rejected it, once.
    async fn retry_requested(&mut self, value: String) -> Result<(), PublisherError> {
        let new = decide::retry_requested(&self.state, Some(&value))
            && self.retry_journaled.as_deref() != Some(&value);
        if !new {
            return Ok(());
        }
        info!(annotation = crate::k8s::crd::labels::RETRY_REJECTED, value = %value, "retry of rejected renders requested");
        let mut b = Batch::new();
        b.event(Event::DeploymentRetryRequest {
            correlation: Correlation::new(format!("retry-rejected-{}", UnixMillis::now().0)),
            runtime_config: self.ctx.cfg.runtime_config(),
            value: value.clone(),
        });
        self.ctx.commit.commit(b).await?;
        self.retry_journaled = Some(value);
        Ok(())
    }

    /// Journals `deployment.rollback.request` when the main HAProxyCfg's annotation
    /// [`crate::k8s::crd::labels::ROLLBACK_TO`] holds `value` (`None`: absent) and it differs
    /// from the last value this process journaled, with the hold the `RolledBack` condition
    /// shows (`shown`). The first value a process sees is journaled, its absence included (a
    /// hold whose annotation was removed while no replica led ends then), except a value the
    /// condition shows refused: a refusal stands until the annotation changes (a restart or a
    /// new leader does not try it again, which could hold the fleet unasked once `previous`
    /// resolves). The scheduler changes nothing for a value its hold was asked with, so the
    /// repeat after a restart moves nothing. Durable when this returns.
    async fn rollback_requested(
        &mut self,
        value: Option<String>,
        shown: crate::k8s::crd::RollbackShown,
    ) -> Result<(), PublisherError> {
        if !decide::rollback_requested(self.rollback_journaled.as_ref(), value.as_deref(), &shown) {
            if self.rollback_journaled.is_none() {
                info!(annotation = crate::k8s::crd::labels::ROLLBACK_TO, value = ?value, "rollback annotation was refused before; not tried again until it changes");
            }
            self.rollback_journaled = Some(value);
            return Ok(());
        }
        info!(annotation = crate::k8s::crd::labels::ROLLBACK_TO, value = ?value, "rollback annotation read");
        let mut b = Batch::new();
        b.event(Event::DeploymentRollbackRequest {
            correlation: Correlation::new(format!("rollback-{}", UnixMillis::now().0)),
            runtime_config: self.ctx.cfg.runtime_config(),
            value: value.clone(),
            shown: shown.held,
        });
        self.ctx.commit.commit(b).await?;
        self.rollback_journaled = Some(value);
        Ok(())
    }
}
