//! Failed writes, for every worker: the decision ([`decide::on_failure`] over the error's
//! class), the retry loop, and how a failure is shown (logs, counters, the `Published`
//! condition, a Kubernetes Event). Work is never acked unfinished: a transient failure is
//! retried forever with a capped backoff; only a permanent rejection, recorded and shown, lets
//! the caller ack its item; fencing stops the term with nothing acked.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use haptic_journal::{Term, UnixMillis};
use kube::runtime::events::EventType;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::context::Context;
use crate::components::publisher::decide::{self, Retry};
use crate::core::error::ErrorClass;
use crate::k8s::WriteError;
use crate::k8s::writer::{Writer, k8s_time};

/// The publisher's workers (logs, metrics).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Worker {
    /// Publications of the main HAProxyCfg (`publish`, `publish-deployed`).
    Publish,
    /// The `-invalid` HAProxyCfg (`invalid`).
    Invalid,
    /// The gate's conditions and the `-invalid` deletion (`verdict`).
    Verdict,
    /// Per-pod status (`status-pending`).
    Status,
}

impl Worker {
    /// Bounded label.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Worker::Publish => "publish",
            Worker::Invalid => "invalid",
            Worker::Verdict => "verdict",
            Worker::Status => "status",
        }
    }

    /// The Kubernetes Event action of the worker's writes.
    fn action(self) -> &'static str {
        match self {
            Worker::Publish => "Publish",
            Worker::Invalid => "PublishInvalid",
            Worker::Verdict => "WriteConditions",
            Worker::Status => "WriteStatus",
        }
    }
}

/// Kubernetes Event reasons of the publisher (CamelCase).
pub(super) mod event_reasons {
    /// A write was refused permanently; its item was released.
    pub(in crate::components::publisher) const PUBLICATION_REJECTED: &str = "PublicationRejected";
    /// A HAProxyCfg published under an earlier `--config-name` was deleted with its auxiliary
    /// objects and Secrets (Normal).
    pub(in crate::components::publisher) const RETIRED_CONFIG_REMOVED: &str =
        "RetiredConfigRemoved";
}

/// How a write with retries ended.
#[derive(Debug)]
pub(super) enum Attempts<T> {
    /// It succeeded.
    Done(T),
    /// It was rejected permanently (recorded and shown): the caller acks its item.
    Rejected,
    /// The term ended (cancelled or fenced): nothing is acked.
    Stopped,
}

/// A permanent rejection as shown (Event, condition): the error, and the fix when there is one
/// (a too-large object: what to do with the render's input it names).
pub(super) fn rejection_message(e: &WriteError) -> String {
    match e.operator_hint() {
        Some(fix) => format!("{e}; {fix}"),
        None => e.to_string(),
    }
}

/// Sleeps `d` unless `cancel` fires first; false when cancelled.
pub(super) async fn sleep_or_cancel(d: Duration, cancel: &CancellationToken) -> bool {
    tokio::select! {
        () = cancel.cancelled() => false,
        () = tokio::time::sleep(d) => true,
    }
}

/// Runs `round` at once and after every wake-up on `wake` until `cancel` fires; a journal
/// failure (`round`'s error) stops the worker, named `worker` in the log.
pub(super) async fn rounds_until_cancelled<Fut>(
    worker: Worker,
    cancel: &CancellationToken,
    wake: &tokio::sync::Notify,
    mut round: impl FnMut() -> Fut,
) where
    Fut: std::future::Future<Output = Result<(), crate::components::publisher::PublisherError>>,
{
    loop {
        if let Err(e) = round().await {
            warn!(worker = worker.as_str(), error = %e, "publisher worker: journal failure; stopping");
            return;
        }
        tokio::select! {
            () = cancel.cancelled() => return,
            () = wake.notified() => {}
        }
    }
}

/// The writes of one worker in one term: its writer, the term's cancellation, and how its
/// failures are decided, counted and shown.
pub(super) struct Writes {
    /// Whose writes (logs, counters, the blocked reason, the Event action).
    pub(super) worker: Worker,
    /// The term's writer.
    pub(super) writer: Writer,
    /// Cancels every worker of the term (fencing cancels it).
    pub(super) cancel: CancellationToken,
    ctx: Arc<Context>,
}

impl Writes {
    /// The writes of `worker` through `writer`, stopped by `cancel`.
    pub(super) fn new(
        ctx: Arc<Context>,
        worker: Worker,
        writer: Writer,
        cancel: CancellationToken,
    ) -> Writes {
        Writes {
            worker,
            writer,
            cancel,
            ctx,
        }
    }

    /// The leadership term of the writes.
    pub(super) fn term(&self) -> Term {
        self.writer.config().term
    }

    /// Whether the term may still ack ([`Context::authoritative`]).
    pub(super) fn authoritative(&self) -> bool {
        self.ctx.authoritative(self.term(), &self.cancel)
    }

    /// Decides what failed attempt `attempt` with `e` leads to, and counts and shows it:
    /// retries are counted (per worker) and logged at warn, naming the fix when an operator
    /// must act; a permanent rejection is counted, logged and shown
    /// ([`Writes::show_rejection`]); fencing cancels the term. `condition`: the failure is also
    /// shown as `Published=False` (a queued publication of the main HAProxyCfg, whose success
    /// sets `Published=True` again; not a self-healing repeat).
    pub(super) async fn failed(&self, e: &WriteError, attempt: u32, condition: bool) -> Retry {
        let worker = self.worker;
        let class = e.class();
        let decision = decide::on_failure(&self.ctx.cfg.retry, class, attempt, e.retry_after());
        let counters = &self.ctx.counters;
        match decision {
            Retry::After(d) => {
                counters.retries.fetch_add(1, Ordering::Relaxed);
                counters
                    .worker_retries
                    .of(worker)
                    .fetch_add(1, Ordering::Relaxed);
                let delay_ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
                if class.needs_operator() {
                    counters.blocked.fetch_add(1, Ordering::Relaxed);
                    let fix = e.operator_hint().unwrap_or_default();
                    self.set_blocked(Some(format!("{e}; {fix}")));
                    warn!(
                        worker = worker.as_str(),
                        error = %e,
                        class = class.metric_label(),
                        %fix,
                        attempt,
                        delay_ms,
                        "write refused until an operator acts; retrying"
                    );
                    if condition && attempt == 1 {
                        self.show_condition(class, &format!("{e}; {fix}")).await;
                    }
                } else if class == ErrorClass::Conflict || class == ErrorClass::NotFound {
                    debug!(worker = worker.as_str(), error = %e, attempt, delay_ms, "write raced another change; retrying");
                } else {
                    warn!(
                        worker = worker.as_str(),
                        error = %e,
                        class = class.metric_label(),
                        attempt,
                        delay_ms,
                        "write failed; retrying"
                    );
                }
            }
            Retry::StopTerm => {
                warn!(worker = worker.as_str(), error = %e, "leadership of this term is gone; stopping its writes, work stays queued");
                self.cancel.cancel();
            }
            Retry::Reject => {
                counters.given_up.fetch_add(1, Ordering::Relaxed);
                warn!(
                    worker = worker.as_str(),
                    error = %e,
                    class = class.metric_label(),
                    "write rejected permanently; item released"
                );
                self.show_rejection(e, condition).await;
            }
        }
        decision
    }

    /// Records (`Some`: the error and the fix) or clears (`None`) that the worker's writes wait
    /// for an operator.
    pub(super) fn set_blocked(&self, reason: Option<String>) {
        self.ctx.blocked.set(self.worker, reason);
    }

    /// Runs `op` until it succeeds, is rejected permanently, or the term ends; transient
    /// failures back off ([`Writes::failed`]) and go on.
    pub(super) async fn with_retries<T, F, Fut>(&self, mut op: F) -> Attempts<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, WriteError>>,
    {
        let mut attempt = 0;
        loop {
            if self.cancel.is_cancelled() {
                return Attempts::Stopped;
            }
            attempt += 1;
            match op().await {
                Ok(v) => {
                    self.set_blocked(None);
                    return Attempts::Done(v);
                }
                Err(e) => match self.failed(&e, attempt, false).await {
                    Retry::After(d) => {
                        if !sleep_or_cancel(d, &self.cancel).await {
                            return Attempts::Stopped;
                        }
                    }
                    Retry::Reject => return Attempts::Rejected,
                    Retry::StopTerm => return Attempts::Stopped,
                },
            }
        }
    }

    /// Shows a permanent rejection: a Warning Event `PublicationRejected` on the HAProxyCfg
    /// naming the object and the reason and, with `condition` (a queued publication of the
    /// main HAProxyCfg), `Published=False` with the reason. The other workers' rejections are
    /// shown by the Event, the log and the counter (a rejected status or condition write cannot
    /// be shown on the object that refused it). Best effort: a failure to show is logged.
    async fn show_rejection(&self, e: &WriteError, condition: bool) {
        let what = rejection_message(e);
        let note = format!(
            "{} write rejected permanently: {what}",
            self.worker.as_str()
        );
        self.ctx.events.emit(
            EventType::Warning,
            event_reasons::PUBLICATION_REJECTED,
            self.worker.action(),
            note,
        );
        if condition {
            self.show_condition(e.class(), &what).await;
        }
    }

    /// Sets `Published=False` for `class` on the main HAProxyCfg (one attempt, best effort).
    async fn show_condition(&self, class: ErrorClass, message: &str) {
        let Some(c) = decide::failure_condition(class, message, &k8s_time(UnixMillis::now()))
        else {
            return;
        };
        let name = self.ctx.cfg.haproxycfg_name();
        if let Err(e) = self.writer.set_conditions(&name, &[c]).await {
            debug!(error = %e, "failure condition not written");
        }
    }
}
