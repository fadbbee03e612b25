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

/// Per-term state, reset at each term.
#[derive(Default)]
struct TermCache {
    /// Objects of the last complete publication: (kind, name) -> content JSON.
    expected: HashMap<(String, String), String>,
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
                    let item = *item;
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

    /// One main-HAProxyCfg publication with retries. Returns true when it committed (or was
    /// stale and released), false when cancelled or superseded (item left as it is / acked).
    #[allow(clippy::too_many_lines)]
    async fn publish_main(
        &self,
        writer: &Writer,
        cancel: &CancellationToken,
        entry: Option<&WorkEntry>,
        extra_acks: &[&WorkEntry],
        drain: bool,
    ) -> Result<bool, PublisherError> {
        let name = self.cfg.haproxycfg_name();
        let cp = self.checkpoint(&name);
        let (render, render_seq, rendered_at, validated_at, correlation, deployment) =
            match entry.map(|e| &e.record.item) {
                Some(WorkItem::Publish(p)) => (
                    p.render,
                    p.render_seq,
                    Some(p.rendered_at),
                    Some(p.validated_at),
                    p.correlation.clone(),
                    None,
                ),
                Some(WorkItem::PublishDeployed(d)) => (
                    d.render,
                    d.render_seq,
                    None,
                    None,
                    d.correlation.clone(),
                    Some(d.clone()),
                ),
                // A self-healing repeat of the last complete publication.
                _ => match &cp {
                    Some(c) => (
                        c.render,
                        c.render_seq,
                        None,
                        None,
                        Correlation::new("self-heal"),
                        None,
                    ),
                    None => return Ok(true),
                },
            };
        // A repeat (term start, self-healing) never overwrites another leader's newer render:
        // when the cluster holds another checksum stamped by another term, leave it (queued
        // work of ours still publishes; dedup compares with the cluster, not only the journal).
        if entry.is_none() {
            match writer.get_cfg(&name).await {
                Ok(Some(live))
                    if live.spec.checksum != render
                        && crate::k8s::writer::stamped_term(&live.metadata)
                            != Some(writer.config().term) =>
                {
                    info!(name = %name, "cluster holds another leader's render; repeat skipped");
                    return Ok(true);
                }
                Ok(_) => {}
                Err(e) => {
                    debug!(error = %e, "repeat: read failed; trying the publication");
                }
            }
        }
        // The spec never moves backwards in render sequence.
        if let (Some(e), Some(c)) = (entry, &cp)
            && render_seq < c.render_seq
            && render != c.render
        {
            {
                debug!(seq = render_seq.0, "older render: spec left as it is");
                let mut b = Batch::new();
                b.ack(e.queue, e.key.clone(), e.record.id);
                for x in extra_acks {
                    b.ack(x.queue, x.key.clone(), x.record.id);
                }
                self.commit(b).await?;
                return Ok(true);
            }
        }
        let (manifest, content) = match self.load_render(render) {
            Ok(x) => x,
            Err(e) => {
                warn!(error = %e, "render unavailable; publication released");
                self.counters.given_up.fetch_add(1, Ordering::Relaxed);
                if let Some(e) = entry {
                    let mut b = Batch::new();
                    b.ack(e.queue, e.key.clone(), e.record.id);
                    self.commit(b).await?;
                }
                return Ok(true);
            }
        };
        let mut attempt = 0u32;
        loop {
            if cancel.is_cancelled() {
                return Ok(false);
            }
            attempt += 1;
            let result = writer
                .publish(&PublishSpec {
                    name: &name,
                    render: &content,
                    with_files: true,
                    rendered_at,
                    validated_at,
                    validation_error: None,
                })
                .await;
            // The publication attempt moves parked statuses back to pending.
            let unparked = {
                let j = Arc::clone(&self.journal);
                tokio::task::spawn_blocking(move || j.unpark(None))
                    .await
                    .map_err(|_| PublisherError::Join)?
                    .map_err(PublisherError::Accept)?
            };
            if unparked > 0 {
                self.wake.status.notify_one();
            }
            match result {
                Ok(p) => {
                    let term = writer.config().term;
                    if !self.authoritative(term, cancel) {
                        return Ok(false);
                    }
                    let mut b = Batch::new();
                    if let Some(e) = entry {
                        b.ack(e.queue, e.key.clone(), e.record.id);
                    }
                    for x in extra_acks {
                        b.ack(x.queue, x.key.clone(), x.record.id);
                    }
                    let new_content = cp.as_ref().is_none_or(|c| c.render != render);
                    let advances = cp.as_ref().is_none_or(|c| render_seq >= c.render_seq);
                    if new_content && advances {
                        b.hold_render(&manifest);
                        if let Some(c) = &cp {
                            b.release_blob(c.render);
                        }
                        b.put_published_checkpoint(haptic_journal::PublishedCheckpoint {
                            name: name.clone().into(),
                            render,
                            render_seq,
                            resource_version: p.resource_version.clone().map(Into::into),
                            published_at: now_ms(),
                        });
                        b.event(Event::ConfigPublished {
                            correlation: correlation.clone(),
                            runtime_config: self.cfg.runtime_config(),
                            render,
                            map_file_count: p.map_files,
                            secret_count: p.secrets,
                        });
                    }
                    if drain && let Some(d) = &deployment {
                        {
                            b.enqueue(
                                WorkItem::DrainCheckpoint(DrainCheckpoint {
                                    runtime_config: d.runtime_config.clone(),
                                    render,
                                    render_seq,
                                    deployment: d.deployment.clone(),
                                }),
                                haptic_journal::Origin::None,
                            );
                        }
                    }
                    haptic_journal::crash_point!("publisher::before_publish_ack");
                    self.commit(b).await?;
                    self.counters.publications.fetch_add(1, Ordering::Relaxed);
                    if new_content && advances {
                        self.counters
                            .config_published
                            .fetch_add(1, Ordering::Relaxed);
                        info!(name = %name, checksum = %render, "config published");
                    }
                    {
                        let mut c = self
                            .cache
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner);
                        c.expected = p
                            .objects
                            .into_iter()
                            .map(|o| ((o.kind.to_owned(), o.name), o.content))
                            .collect();
                    }
                    self.wake.verdict.notify_one();
                    self.wake.status.notify_one();
                    return Ok(true);
                }
                Err(e) => {
                    if let WriteError::StaleTerm { .. } = e {
                        warn!(error = %e, "a newer term owns the object; stopping");
                        cancel.cancel();
                        return Ok(false);
                    }
                    if e.is_deposed() {
                        warn!(error = %e, "lease lost; stopping this term's writes");
                        cancel.cancel();
                        return Ok(false);
                    }
                    match decide::on_failure(&self.cfg.retry, e.kind(), attempt, e.retry_after()) {
                        Retry::After(d) => {
                            self.counters.retries.fetch_add(1, Ordering::Relaxed);
                            warn!(error = %e, attempt, delay_ms = d.as_millis() as u64, "publication failed; retrying");
                            if !sleep_or_cancel(d, cancel).await {
                                return Ok(false);
                            }
                            // A newer validation generation supersedes an older validation retry.
                            if let Some(e) = entry
                                && e.queue == Queue::Publish
                                && !drain
                                && self.newer_validated(render_seq, e)?
                            {
                                return Ok(false);
                            }
                        }
                        Retry::GiveUp => {
                            self.counters.given_up.fetch_add(1, Ordering::Relaxed);
                            warn!(error = %e, kind = e.kind().as_str(), "publication rejected; released");
                            if e.is_too_large() {
                                let _ = writer.set_too_large(&name, &e.to_string(), now_ms()).await;
                            }
                            if drain {
                                return Ok(false);
                            }
                            if let Some(e) = entry {
                                let mut b = Batch::new();
                                b.ack(e.queue, e.key.clone(), e.record.id);
                                self.commit(b).await?;
                            }
                            return Ok(true);
                        }
                    }
                }
            }
        }
    }

    fn newer_validated(&self, render_seq: Seq, e: &WorkEntry) -> Result<bool, PublisherError> {
        Ok(self
            .queue(Queue::Publish)?
            .iter()
            .any(|x| x.record.id != e.record.id && item_seq(x) >= render_seq))
    }

    async fn publish_worker(self: Arc<Self>, writer: Writer, cancel: CancellationToken) {
        let mut last: Option<Instant> = None;
        loop {
            match self.publish_round(&writer, &cancel, &mut last).await {
                Ok(Some(wait)) => {
                    tokio::select! {
                        () = cancel.cancelled() => return,
                        () = tokio::time::sleep(wait) => {}
                    }
                    continue;
                }
                Ok(None) => {}
                Err(e) => {
                    warn!(error = %e, "publish worker: journal failure; stopping");
                    return;
                }
            }
            tokio::select! {
                () = cancel.cancelled() => return,
                () = self.wake.publish.notified() => {}
            }
        }
    }

    /// Handles what is due. `Ok(Some(wait))`: throttled, come back after `wait`.
    async fn publish_round(
        &self,
        writer: &Writer,
        cancel: &CancellationToken,
        last: &mut Option<Instant>,
    ) -> Result<Option<Duration>, PublisherError> {
        loop {
            if cancel.is_cancelled() {
                return Ok(None);
            }
            let validated = self.queue(Queue::Publish)?;
            let deployed = self.queue(Queue::PublishDeployed)?;
            let heal = self.heal.load(Ordering::Acquire);
            if validated.is_empty() && deployed.is_empty() && !heal {
                return Ok(None);
            }
            if let Some(wait) =
                decide::throttle_wait(self.cfg.publish_interval, *last, Instant::now())
                && (!validated.is_empty() || !deployed.is_empty())
            {
                return Ok(Some(wait));
            }
            let _g = self.publish_lock.lock().await;
            // Validation work coalesces to the newest render; deploy work keeps arrival order.
            let newest_v = validated.iter().max_by_key(|e| (item_seq(e), e.record.id));
            let superseded: Vec<&WorkEntry> = validated
                .iter()
                .filter(|e| newest_v.is_some_and(|n| n.record.id != e.record.id))
                .collect();
            let oldest_d = deployed.first();
            let pick = match (newest_v, oldest_d) {
                (Some(v), Some(d)) => Some(if d.record.id < v.record.id { d } else { v }),
                (v, d) => v.or(d),
            };
            let extra: Vec<&WorkEntry> = match pick {
                Some(p) if p.queue == Queue::Publish => superseded,
                _ => Vec::new(),
            };
            if pick.is_none() {
                self.heal.store(false, Ordering::Release);
                self.counters.heals.fetch_add(1, Ordering::Relaxed);
            }
            let done = self
                .publish_main(writer, cancel, pick, &extra, false)
                .await?;
            if pick.is_some() && done {
                *last = Some(Instant::now());
            }
            if !done && cancel.is_cancelled() {
                return Ok(None);
            }
        }
    }

    async fn invalid_worker(self: Arc<Self>, writer: Writer, cancel: CancellationToken) {
        loop {
            if let Err(e) = self.invalid_round(&writer, &cancel).await {
                warn!(error = %e, "invalid worker: journal failure; stopping");
                return;
            }
            tokio::select! {
                () = cancel.cancelled() => return,
                () = self.wake.invalid.notified() => {}
            }
        }
    }

    async fn invalid_round(
        &self,
        writer: &Writer,
        cancel: &CancellationToken,
    ) -> Result<(), PublisherError> {
        let items = self.queue(Queue::Invalid)?;
        let Some(newest) = items.last() else {
            return Ok(());
        };
        let WorkItem::Invalid(item) = &newest.record.item else {
            return Ok(());
        };
        let mut ack = Batch::new();
        for e in &items {
            ack.ack(e.queue, e.key.clone(), e.record.id);
        }
        let name = invalid_haproxycfg_name(self.cfg.identity.name.as_str());
        let Some(render) = item.render else {
            self.commit(ack).await?;
            return Ok(());
        };
        let content = match self.load_render(render) {
            Ok((_, c)) => c,
            Err(e) => {
                warn!(error = %e, "rejected render unavailable");
                self.commit(ack).await?;
                return Ok(());
            }
        };
        let spec = PublishSpec {
            name: &name,
            render: &content,
            with_files: false,
            rendered_at: None,
            validated_at: None,
            validation_error: summarize_validation_errors(&item.errors),
        };
        self.with_retries(cancel, || writer.publish(&spec)).await?;
        if !cancel.is_cancelled() {
            self.commit(ack).await?;
        }
        Ok(())
    }

    /// Runs `op` with the retry policy; `Ok(true)` when it succeeded, `Ok(false)` when it was
    /// released or cancelled.
    async fn with_retries<T, F, Fut>(
        &self,
        cancel: &CancellationToken,
        mut op: F,
    ) -> Result<bool, PublisherError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, WriteError>>,
    {
        let mut attempt = 0;
        loop {
            if cancel.is_cancelled() {
                return Ok(false);
            }
            attempt += 1;
            match op().await {
                Ok(_) => return Ok(true),
                Err(e) if e.is_deposed() => {
                    warn!(error = %e, "lease lost; stopping this term's writes");
                    cancel.cancel();
                    return Ok(false);
                }
                Err(e) => {
                    match decide::on_failure(&self.cfg.retry, e.kind(), attempt, e.retry_after()) {
                        Retry::After(d) => {
                            self.counters.retries.fetch_add(1, Ordering::Relaxed);
                            warn!(error = %e, attempt, "write failed; retrying");
                            if !sleep_or_cancel(d, cancel).await {
                                return Ok(false);
                            }
                        }
                        Retry::GiveUp => {
                            self.counters.given_up.fetch_add(1, Ordering::Relaxed);
                            warn!(error = %e, "write rejected; released");
                            return Ok(false);
                        }
                    }
                }
            }
        }
    }

    async fn verdict_worker(self: Arc<Self>, writer: Writer, cancel: CancellationToken) {
        loop {
            if let Err(e) = self.verdict_round(&writer, &cancel).await {
                warn!(error = %e, "verdict worker: journal failure; stopping");
                return;
            }
            tokio::select! {
                () = cancel.cancelled() => return,
                () = self.wake.verdict.notified() => {}
            }
        }
    }

    async fn verdict_round(
        &self,
        writer: &Writer,
        cancel: &CancellationToken,
    ) -> Result<(), PublisherError> {
        let items = self.queue(Queue::Verdict)?;
        let Some(newest) = items.last() else {
            return Ok(());
        };
        let WorkItem::Verdict(v) = &newest.record.item else {
            return Ok(());
        };
        let name = self.cfg.haproxycfg_name();
        let now = k8s_time(now_ms());
        let message = v.messages.first().cloned().unwrap_or_default();
        let conds = [
            Condition {
                type_: conditions::CONFIG_VALIDATED.into(),
                status: if v.passed { "True" } else { "False" }.into(),
                reason: if v.passed {
                    reasons::VALIDATION_SUCCEEDED
                } else {
                    reasons::VALIDATION_FAILED
                }
                .into(),
                message: if v.passed { String::new() } else { message },
                last_transition_time: now.clone(),
                observed_generation: None,
            },
            Condition {
                type_: conditions::CONFIG_PINNED.into(),
                status: if v.pinned { "True" } else { "False" }.into(),
                reason: if v.pinned {
                    reasons::NEWEST_RENDER_REJECTED
                } else {
                    reasons::NEWEST_RENDER_PASSED
                }
                .into(),
                message: String::new(),
                last_transition_time: now,
                observed_generation: None,
            },
        ];
        // The HAProxyCfg may not exist yet: wait (unacked) for a publication to wake us.
        match writer.get_cfg(&name).await {
            Ok(Some(_)) => {}
            Ok(None) => return Ok(()),
            Err(e) => {
                warn!(error = %e, "verdict: read failed");
                return Ok(());
            }
        }
        let ok = self
            .with_retries(cancel, || writer.set_conditions(&name, &conds))
            .await?;
        if v.passed && ok {
            let invalid = invalid_haproxycfg_name(self.cfg.identity.name.as_str());
            self.with_retries(cancel, || writer.delete_cfg(&invalid))
                .await?;
        }
        if cancel.is_cancelled() {
            return Ok(());
        }
        let mut b = Batch::new();
        for e in &items {
            b.ack(e.queue, e.key.clone(), e.record.id);
        }
        self.commit(b).await?;
        Ok(())
    }

    async fn status_worker(self: Arc<Self>, writer: Writer, cancel: CancellationToken) {
        let mut last: Option<Instant> = None;
        let mut attempt = 0u32;
        loop {
            let mut wait = None;
            if let Some(w) = decide::throttle_wait(self.cfg.publish_interval, last, Instant::now())
            {
                wait = Some(w);
            } else {
                match self.status_round(&writer).await {
                    Ok(true) => {
                        attempt = 0;
                        last = Some(Instant::now());
                    }
                    Ok(false) => {}
                    Err(StatusErr::Journal(e)) => {
                        warn!(error = %e, "status worker: journal failure; stopping");
                        return;
                    }
                    Err(StatusErr::Write(e)) if e.is_deposed() => {
                        warn!(error = %e, "lease lost; stopping this term's writes");
                        cancel.cancel();
                        return;
                    }
                    Err(StatusErr::Write(e)) => {
                        attempt += 1;
                        match decide::on_failure(
                            &self.cfg.retry,
                            e.kind(),
                            attempt,
                            e.retry_after(),
                        ) {
                            Retry::After(d) => {
                                self.counters.retries.fetch_add(1, Ordering::Relaxed);
                                warn!(error = %e, attempt, "status write failed; retrying");
                                wait = Some(d);
                            }
                            Retry::GiveUp => {
                                self.counters.given_up.fetch_add(1, Ordering::Relaxed);
                                warn!(error = %e, "status write rejected; items released");
                                attempt = 0;
                                if self.drop_pending().await.is_err() {
                                    return;
                                }
                            }
                        }
                    }
                }
            }
            match wait {
                Some(d) => {
                    if !sleep_or_cancel(d, &cancel).await {
                        return;
                    }
                }
                None => {
                    tokio::select! {
                        () = cancel.cancelled() => return,
                        () = self.wake.status.notified() => {}
                    }
                }
            }
        }
    }

    async fn drop_pending(&self) -> Result<(), PublisherError> {
        let mut b = Batch::new();
        for e in self.queue(Queue::StatusPending)? {
            b.ack(e.queue, e.key.clone(), e.record.id);
        }
        self.commit(b).await.map(|_| ())
    }

    /// One round over every pending status. `Ok(true)` when something was written.
    async fn status_round(&self, writer: &Writer) -> Result<bool, StatusErr> {
        let pending = self
            .queue(Queue::StatusPending)
            .map_err(StatusErr::Journal)?;
        if pending.is_empty() {
            return Ok(false);
        }
        let mut by_cfg: BTreeMap<String, Vec<&WorkEntry>> = BTreeMap::new();
        for e in &pending {
            if let WorkItem::Status(s) = &e.record.item {
                by_cfg
                    .entry(s.runtime_config.name.as_str().to_owned())
                    .or_default()
                    .push(e);
            }
        }
        let mut wrote = false;
        for (name, entries) in by_cfg {
            let changes: Vec<PodEntryChange> = entries
                .iter()
                .filter_map(|e| match &e.record.item {
                    WorkItem::Status(s) => Some(match &s.change {
                        PodStatusChange::Applied { checksum, .. } => PodEntryChange::Applied {
                            pod: s.pod.name.as_str().to_owned(),
                            checksum: *checksum,
                            merge: decide::merge_pod_entry,
                            input: Box::new(PodStatusInput {
                                pod: s.pod.name.as_str().to_owned(),
                                namespace: s.pod.namespace.as_str().to_owned(),
                                change: s.change.clone(),
                            }),
                        },
                        PodStatusChange::Removed => PodEntryChange::Removed {
                            pod: s.pod.name.as_str().to_owned(),
                        },
                    }),
                    _ => None,
                })
                .collect();
            let outcomes = writer
                .update_pod_statuses(&name, &changes)
                .await
                .map_err(StatusErr::Write)?;
            self.counters.status_rounds.fetch_add(1, Ordering::Relaxed);
            let mut b = Batch::new();
            for (e, o) in entries.iter().zip(outcomes) {
                match (o, &e.key) {
                    (PodEntryOutcome::Done, k) => {
                        wrote = true;
                        b.ack(e.queue, k.clone(), e.record.id);
                    }
                    (PodEntryOutcome::Park, WorkKey::Pod(k)) => {
                        b.park(k.clone(), e.record.id);
                    }
                    (PodEntryOutcome::Park, _) => {}
                }
            }
            self.commit(b).await.map_err(StatusErr::Journal)?;
        }
        Ok(wrote)
    }

    async fn heal_watch<K>(
        self: Arc<Self>,
        api: Api<K>,
        selector: String,
        cancel: CancellationToken,
    ) where
        K: Resource
            + Clone
            + serde::de::DeserializeOwned
            + serde::Serialize
            + std::fmt::Debug
            + Send
            + Sync
            + 'static,
        K::DynamicType: Default,
    {
        let kind = K::kind(&K::DynamicType::default()).into_owned();
        let stream = watcher(api, watcher::Config::default().labels(&selector));
        futures::pin_mut!(stream);
        loop {
            let ev = tokio::select! {
                () = cancel.cancelled() => return,
                ev = stream.next() => ev,
            };
            let Some(ev) = ev else { return };
            let drifted = match ev {
                Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                    let key = (kind.clone(), o.name_any());
                    let c = self
                        .cache
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    c.expected
                        .get(&key)
                        .is_some_and(|want| *want != content_json(&o))
                }
                Ok(watcher::Event::Delete(o)) => {
                    let key = (kind.clone(), o.name_any());
                    let c = self
                        .cache
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    c.expected.contains_key(&key)
                }
                Ok(_) => false,
                Err(e) => {
                    debug!(error = %e, "heal watch error");
                    if !sleep_or_cancel(Duration::from_millis(500), &cancel).await {
                        return;
                    }
                    false
                }
            };
            if drifted {
                info!(kind = %kind, "published object deleted or edited; restoring");
                self.heal.store(true, Ordering::Release);
                self.wake.publish.notify_one();
            }
        }
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
                cancel.clone(),
            ));
            tracker.spawn(Arc::clone(self).heal_watch(
                Api::<HAProxyMapFile>::namespaced(c.clone(), ns),
                by_rc.clone(),
                cancel.clone(),
            ));
            tracker.spawn(Arc::clone(self).heal_watch(
                Api::<HAProxyGeneralFile>::namespaced(c.clone(), ns),
                by_rc.clone(),
                cancel.clone(),
            ));
            tracker.spawn(Arc::clone(self).heal_watch(
                Api::<HAProxyCRTListFile>::namespaced(c.clone(), ns),
                by_rc.clone(),
                cancel.clone(),
            ));
            tracker.spawn(Arc::clone(self).heal_watch(
                Api::<Secret>::namespaced(c.clone(), ns),
                by_rc,
                cancel.clone(),
            ));
        }
        self.wake.publish.notify_one();
        self.wake.invalid.notify_one();
        self.wake.verdict.notify_one();
        self.wake.status.notify_one();
        TermHandle { cancel, tracker }
    }

    async fn seed_known_pods(self: Arc<Self>, writer: Writer) {
        let name = self.cfg.haproxycfg_name();
        let Ok(Some(cfg)) = writer.get_cfg(&name).await else {
            return;
        };
        let mut r = self
            .router
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for p in cfg.status.iter().flat_map(|s| s.deployed_to_pods.iter()) {
            let ns = p
                .namespace
                .clone()
                .unwrap_or_else(|| self.cfg.namespace.clone());
            r.known_pods
                .entry(p.pod_name.clone())
                .or_insert_with(|| haptic_journal::PodRef {
                    namespace: ns.into(),
                    name: p.pod_name.as_str().into(),
                });
        }
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

enum StatusErr {
    Journal(PublisherError),
    Write(WriteError),
}

fn item_seq(e: &WorkEntry) -> Seq {
    match &e.record.item {
        WorkItem::Publish(p) => p.render_seq,
        WorkItem::PublishDeployed(d) => d.render_seq,
        _ => Seq(0),
    }
}

fn content_json<K: serde::Serialize>(obj: &K) -> String {
    let mut v = serde_json::to_value(obj).unwrap_or_default();
    if let Some(m) = v.as_object_mut() {
        m.remove("metadata");
        m.remove("status");
        m.remove("apiVersion");
        m.remove("kind");
    }
    v.to_string()
}

/// Names the runtime config (for tests).
#[must_use]
pub fn runtime_config(namespace: &str, name: &str) -> RuntimeConfigRef {
    RuntimeConfigRef {
        namespace: namespace.into(),
        name: name.into(),
    }
}
