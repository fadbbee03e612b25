//! The publish worker: validation- and deploy-driven publications of the main HAProxyCfg, the
//! throttle, the self-healing repeats and the drain. The pick, the publication choice, the spec
//! rule and the retry rule are [`decide`]'s; one publication's write loop and ack are
//! [`super::attempt`]'s.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use haptic_journal::{
    Checksum, Correlation, DeployedPublishItem, Queue, Seq, UnixMillis, WorkEntry, WorkItem,
};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use super::attempt::{Publishing, Target};
use super::cache::HealCache;
use super::context::Context;
use super::failures::Writes;
use super::term::DrainRequest;
use crate::components::publisher::PublisherError;
use crate::components::publisher::decide::{self, Choice, Facts, Live};

/// The publish worker of one term (see the module docs).
pub(super) struct PublishWorker {
    ctx: Arc<Context>,
    /// The worker's writes (its writer, the term's cancellation, failures).
    writes: Writes,
    /// The term's heal cache: what this worker writes and wrote.
    cache: Arc<HealCache>,
    /// A repeat of the last complete publication is due (term start, an outside edit, a
    /// rejected publication that may have reached the spec).
    heal: Arc<AtomicBool>,
    /// Drain requests ([`super::term::drain`]); handled between publications.
    drain: mpsc::Receiver<DrainRequest>,
    /// When the last queued publication completed (the throttle's leading edge).
    last: Option<Instant>,
}

impl PublishWorker {
    /// The worker over the term's `cache`, `heal` request and `drain` requests.
    pub(super) fn new(
        ctx: Arc<Context>,
        writes: Writes,
        cache: Arc<HealCache>,
        heal: Arc<AtomicBool>,
        drain: mpsc::Receiver<DrainRequest>,
    ) -> PublishWorker {
        PublishWorker {
            ctx,
            writes,
            cache,
            heal,
            drain,
            last: None,
        }
    }

    /// Runs until the term ends: each wake-up handles what is due; a throttled publication
    /// waits for the interval; a drain request is answered while the worker waits.
    pub(super) async fn run(mut self) {
        loop {
            match self.round().await {
                Ok(Some(wait)) => {
                    if !self.wait(Some(wait)).await {
                        return;
                    }
                    continue;
                }
                Ok(None) => {}
                Err(e) => {
                    warn!(error = %e, "publish worker: journal failure; stopping");
                    return;
                }
            }
            if !self.wait(None).await {
                return;
            }
        }
    }

    /// Waits for `throttle` to pass (`Some`) or for a wake-up (`None`), answering drain
    /// requests meanwhile; false when the term ended.
    async fn wait(&mut self, throttle: Option<Duration>) -> bool {
        let cancel = self.writes.cancel.clone();
        let until = throttle.map(|d| tokio::time::Instant::now() + d);
        loop {
            tokio::select! {
                () = cancel.cancelled() => return false,
                () = sleep_until(until), if until.is_some() => return true,
                () = self.ctx.wake.publish.notified(), if until.is_none() => return true,
                Some(reply) = self.drain.recv() => self.answer_drain(reply).await,
            }
        }
    }

    /// Handles what is due. `Ok(Some(wait))`: throttled, come back after `wait`.
    async fn round(&mut self) -> Result<Option<Duration>, PublisherError> {
        loop {
            if self.writes.cancel.is_cancelled() {
                return Ok(None);
            }
            // Between two publications, as a drain comes first.
            if let Ok(reply) = self.drain.try_recv() {
                self.answer_drain(reply).await;
            }
            let validated = self.ctx.queue(Queue::Publish)?;
            let deployed = self.ctx.queue(Queue::PublishDeployed)?;
            let heal = self.heal.load(Ordering::Acquire);
            if validated.is_empty() && deployed.is_empty() && !heal {
                return Ok(None);
            }
            if let Some(wait) =
                decide::throttle_wait(self.ctx.cfg.publish_interval, self.last, Instant::now())
                && (!validated.is_empty() || !deployed.is_empty())
            {
                return Ok(Some(wait));
            }
            // Validation work coalesces to the newest render; deploy work keeps arrival order.
            let v: Vec<decide::Queued> = validated.iter().map(queued).collect();
            let d: Vec<decide::Queued> = deployed.iter().map(queued).collect();
            let (pick, extra): (Option<&WorkEntry>, Vec<&WorkEntry>) =
                match decide::pick_publication(&v, &d) {
                    Some(decide::Pick::Validated { index, superseded }) => (
                        Some(&validated[index]),
                        superseded.into_iter().map(|i| &validated[i]).collect(),
                    ),
                    Some(decide::Pick::Deployed { index }) => (Some(&deployed[index]), Vec::new()),
                    None => (None, Vec::new()),
                };
            if pick.is_none() {
                self.heal.store(false, Ordering::Release);
                self.ctx.counters.heals.fetch_add(1, Ordering::Relaxed);
            }
            let done = self.publish(pick, &extra, false).await?;
            if pick.is_some() && done {
                self.last = Some(Instant::now());
            }
            if !done && self.writes.cancel.is_cancelled() {
                return Ok(None);
            }
        }
    }

    async fn answer_drain(&mut self, reply: DrainRequest) {
        let r = self.drain_now().await;
        let _ = reply.send(r);
    }

    /// The drain: publishes the newest queued deploy-driven render past the throttle; once it
    /// commits the older ones are acked with it and the drain checkpoint records it. `None`
    /// when there was nothing, the term already ended, or the publication failed (queue left
    /// as it was).
    async fn drain_now(&mut self) -> Result<Option<Checksum>, PublisherError> {
        if !self.writes.authoritative() {
            return Ok(None);
        }
        let deployed = self.ctx.queue(Queue::PublishDeployed)?;
        let Some(newest) = deployed.last() else {
            return Ok(None);
        };
        let WorkItem::PublishDeployed(d) = &newest.record.item else {
            return Ok(None);
        };
        let render = d.render;
        let older: Vec<&WorkEntry> = deployed[..deployed.len() - 1].iter().collect();
        haptic_journal::crash_point!("drain::before_publish");
        let done = self.publish(Some(newest), &older, true).await?;
        Ok(done.then_some(render))
    }

    /// One main-HAProxyCfg publication of `entry` (`None`: a repeat of the last complete one),
    /// acking `extra_acks` with it. Returns true when it committed (or was stale and released),
    /// false when cancelled or superseded (item left as it is / acked). While it runs, its
    /// objects are the cache's `in_flight` set (the heal watch does not take their writes, or
    /// the GC of what it drops, for outside edits).
    async fn publish(
        &mut self,
        entry: Option<&WorkEntry>,
        extra_acks: &[&WorkEntry],
        drain: bool,
    ) -> Result<bool, PublisherError> {
        let r = self.publish_entry(entry, extra_acks, drain).await;
        // An incomplete publication (superseded, cancelled, rejected) still wrote some of its
        // objects: their late events are ours too. A rejected one asks for a heal itself.
        self.cache.with(|c| c.settle());
        r
    }

    async fn publish_entry(
        &mut self,
        entry: Option<&WorkEntry>,
        extra_acks: &[&WorkEntry],
        drain: bool,
    ) -> Result<bool, PublisherError> {
        let name = self.ctx.cfg.haproxycfg_name();
        let checkpoint = self.ctx.published_checkpoint(&name);
        let item = entry.and_then(Item::of);
        // A repeat reads the cluster first: it never overwrites another leader's newer render
        // and yields to a queued publication of the render the spec holds (dedup compares with
        // the cluster, not only the journal).
        let live = match (entry, &checkpoint) {
            (None, Some(c)) => self.live(&name, c.render).await?,
            _ => None,
        };
        let facts = Facts {
            item: item.as_ref().map(|i| (i.render, i.render_seq)),
            checkpoint: checkpoint.as_ref().map(|c| (c.render, c.render_seq)),
            live,
        };
        let (render, render_seq, moves) = match decide::choose(&facts) {
            Choice::Nothing => return Ok(true),
            Choice::Skip => {
                info!(name = %name, "cluster holds another leader's render; repeat skipped");
                return Ok(true);
            }
            Choice::Defer => {
                debug!(name = %name, "spec holds a queued render; repeat deferred");
                self.heal.store(true, Ordering::Release);
                return Ok(false);
            }
            Choice::AckOlder => {
                debug!(
                    seq = facts.item.map_or(0, |(_, s)| s.0),
                    "older render: spec left as it is"
                );
                self.ctx
                    .commit
                    .ack_all(entry.into_iter().chain(extra_acks.iter().copied()))
                    .await?;
                return Ok(true);
            }
            Choice::Write {
                render,
                render_seq,
                moves,
            } => (render, render_seq, moves),
        };
        let item = item.unwrap_or_else(|| Item::repeat(render, render_seq));
        let target = Target {
            name,
            checkpoint,
            render,
            render_seq,
            rendered_at: item.rendered_at,
            validated_at: item.validated_at,
            correlation: item.correlation,
            deployment: item.deployment,
            moves,
        };
        Publishing {
            ctx: &self.ctx,
            writes: &self.writes,
            cache: &self.cache,
            heal: &self.heal,
            target: &target,
            entry,
            extra_acks,
            drain,
        }
        .run()
        .await
    }

    /// The main HAProxyCfg as the cluster holds it, for a repeat of `render` (`None`: absent,
    /// or the read failed: the publication is tried).
    async fn live(&self, name: &str, render: Checksum) -> Result<Option<Live>, PublisherError> {
        match self.writes.writer.get_cfg(name).await {
            Ok(Some(live)) => {
                let checksum = live.spec.checksum;
                Ok(Some(Live {
                    checksum,
                    ours: crate::k8s::writer::stamped_term(&live.metadata)
                        == Some(self.writes.term()),
                    queued: checksum != render && self.render_queued(checksum)?,
                }))
            }
            Ok(None) => Ok(None),
            Err(e) => {
                debug!(error = %e, "repeat: read failed; trying the publication");
                Ok(None)
            }
        }
    }

    fn render_queued(&self, render: Checksum) -> Result<bool, PublisherError> {
        let mut all = self.ctx.queue(Queue::Publish)?;
        all.extend(self.ctx.queue(Queue::PublishDeployed)?);
        Ok(all.iter().any(|e| match &e.record.item {
            WorkItem::Publish(p) => p.render == render,
            WorkItem::PublishDeployed(d) => d.render == render,
            _ => false,
        }))
    }
}

/// What a queued publication item says (or a repeat, from the published checkpoint).
struct Item {
    render: Checksum,
    render_seq: Seq,
    rendered_at: Option<UnixMillis>,
    validated_at: Option<UnixMillis>,
    correlation: Correlation,
    deployment: Option<DeployedPublishItem>,
}

impl Item {
    fn of(e: &WorkEntry) -> Option<Item> {
        match &e.record.item {
            WorkItem::Publish(p) => Some(Item {
                render: p.render,
                render_seq: p.render_seq,
                rendered_at: Some(p.rendered_at),
                validated_at: Some(p.validated_at),
                correlation: p.correlation.clone(),
                deployment: None,
            }),
            WorkItem::PublishDeployed(d) => Some(Item {
                render: d.render,
                render_seq: d.render_seq,
                rendered_at: None,
                validated_at: None,
                correlation: d.correlation.clone(),
                deployment: Some(d.clone()),
            }),
            _ => None,
        }
    }

    /// A self-healing repeat of the last complete publication.
    fn repeat(render: Checksum, render_seq: Seq) -> Item {
        Item {
            render,
            render_seq,
            rendered_at: None,
            validated_at: None,
            correlation: Correlation::new("self-heal"),
            deployment: None,
        }
    }
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// A queued publication's place in render order.
pub(super) fn item_seq(e: &WorkEntry) -> Seq {
    match &e.record.item {
        WorkItem::Publish(p) => p.render_seq,
        WorkItem::PublishDeployed(d) => d.render_seq,
        _ => Seq(0),
    }
}

/// A queued publication as [`decide::pick_publication`] sees it.
pub(super) fn queued(e: &WorkEntry) -> decide::Queued {
    decide::Queued {
        id: e.record.id,
        render_seq: item_seq(e),
    }
}
