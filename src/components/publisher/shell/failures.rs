//! Failed writes, for every worker: the decision ([`decide::on_failure`] over the error's
//! class), the retry loop, and how a failure is shown (logs, counters, the `Published`
//! condition, a Kubernetes Event). Work is never acked unfinished: a transient failure is
//! retried forever with a capped backoff; only a permanent rejection, recorded and shown, lets
//! the caller ack its item; fencing stops the term with nothing acked.

use kube::runtime::events::{Event as KubeEvent, EventType};

use super::*;

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
pub mod event_reasons {
    /// A write was refused permanently; its item was released.
    pub const PUBLICATION_REJECTED: &str = "PublicationRejected";
    /// A HAProxyCfg published under an earlier `--config-name` was deleted with its auxiliary
    /// objects and Secrets (Normal).
    pub const RETIRED_CONFIG_REMOVED: &str = "RetiredConfigRemoved";
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

impl Inner {
    /// Decides what failed attempt `attempt` of `worker`, with `e`, leads to, and counts and
    /// shows it: retries are counted (per worker) and logged at warn, naming the fix when an
    /// operator must act; a permanent rejection is counted, logged and shown
    /// ([`Inner::show_rejection`]); fencing cancels the term. `condition`: the failure is also
    /// shown as `Published=False` (a queued publication of the main HAProxyCfg, whose success
    /// sets `Published=True` again; not a self-healing repeat).
    pub(super) async fn failed(
        &self,
        writer: &Writer,
        worker: Worker,
        e: &WriteError,
        attempt: u32,
        cancel: &CancellationToken,
        condition: bool,
    ) -> Retry {
        let class = e.class();
        let decision = decide::on_failure(&self.cfg.retry, class, attempt, e.retry_after());
        match decision {
            Retry::After(d) => {
                self.counters.retries.fetch_add(1, Ordering::Relaxed);
                self.counters
                    .worker_retries
                    .of(worker)
                    .fetch_add(1, Ordering::Relaxed);
                let delay_ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
                if class.needs_operator() {
                    self.counters.blocked.fetch_add(1, Ordering::Relaxed);
                    let fix = e.operator_hint().unwrap_or_default();
                    self.set_blocked(worker, Some(format!("{e}; {fix}")));
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
                        self.show_condition(writer, class, &format!("{e}; {fix}"))
                            .await;
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
                cancel.cancel();
            }
            Retry::Reject => {
                self.counters.given_up.fetch_add(1, Ordering::Relaxed);
                warn!(
                    worker = worker.as_str(),
                    error = %e,
                    class = class.metric_label(),
                    "write rejected permanently; item released"
                );
                self.show_rejection(writer, worker, e, condition).await;
            }
        }
        decision
    }

    /// Records (`Some`: the error and the fix) or clears (`None`) that `worker`'s writes wait
    /// for an operator.
    pub(super) fn set_blocked(&self, worker: Worker, reason: Option<String>) {
        let mut b = self
            .blocked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match reason {
            Some(r) => {
                b.insert(worker.as_str(), r);
            }
            None => {
                b.remove(worker.as_str());
            }
        }
    }

    /// Runs `op` until it succeeds, is rejected permanently, or the term ends; transient
    /// failures back off ([`Inner::failed`]) and go on.
    pub(super) async fn with_retries<T, F, Fut>(
        &self,
        writer: &Writer,
        worker: Worker,
        cancel: &CancellationToken,
        mut op: F,
    ) -> Attempts<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, WriteError>>,
    {
        let mut attempt = 0;
        loop {
            if cancel.is_cancelled() {
                return Attempts::Stopped;
            }
            attempt += 1;
            match op().await {
                Ok(v) => {
                    self.set_blocked(worker, None);
                    return Attempts::Done(v);
                }
                Err(e) => match self
                    .failed(writer, worker, &e, attempt, cancel, false)
                    .await
                {
                    Retry::After(d) => {
                        if !sleep_or_cancel(d, cancel).await {
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
    pub(super) async fn show_rejection(
        &self,
        writer: &Writer,
        worker: Worker,
        e: &WriteError,
        condition: bool,
    ) {
        let what = rejection_message(e);
        let note = format!("{} write rejected permanently: {what}", worker.as_str());
        self.event(
            EventType::Warning,
            event_reasons::PUBLICATION_REJECTED,
            worker.action(),
            note,
        );
        if condition {
            self.show_condition(writer, e.class(), &what).await;
        }
    }

    /// Sets `Published=False` for `class` on the main HAProxyCfg (one attempt, best effort).
    async fn show_condition(&self, writer: &Writer, class: ErrorClass, message: &str) {
        let Some(c) = decide::failure_condition(class, message, &k8s_time(now_ms())) else {
            return;
        };
        let name = self.cfg.haproxycfg_name();
        if let Err(e) = writer.set_conditions(&name, &[c]).await {
            debug!(error = %e, "failure condition not written");
        }
    }

    /// Writes a Kubernetes Event on the main HAProxyCfg, detached and bounded by
    /// [`crate::k8s::events::EVENT_WRITE_TIMEOUT`]; a failure is logged at warn.
    pub(super) fn event(&self, type_: EventType, reason: &str, action: &str, note: String) {
        let mut note = note;
        if note.len() > 1024 {
            let mut end = 1021;
            while !note.is_char_boundary(end) {
                end -= 1;
            }
            note.truncate(end);
            note.push_str("...");
        }
        let event = KubeEvent {
            type_,
            reason: reason.to_owned(),
            note: Some(note),
            action: action.to_owned(),
            secondary: None,
        };
        let recorder = self.recorder.clone();
        let reference = crate::k8s::events::haproxycfg_reference(&self.cfg.runtime_config());
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
