//! One publication of the main HAProxyCfg, after [`crate::components::publisher::decide::choose`]
//! said to write: the render read back from the journal, the write with retries, and its end.
//! A complete, still-authoritative publication is acked with its published checkpoint, the
//! render hold and `config.published` (when the checkpoint moves) in one commit; a permanent
//! rejection is shown and its item released; a failure of another class is retried to the cap
//! (a repeat yields to queued publications, a validation retry to a newer render).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use haptic_journal::{
    Checksum, Correlation, DeployedPublishItem, DrainCheckpoint, Event, Origin,
    PublishedCheckpoint, Queue, Render, Seq, UnixMillis, WorkEntry, WorkItem,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use tracing::info;

use super::cache::HealCache;
use super::context::{Context, ack_batch};
use super::failures::{Writes, rejection_message, sleep_or_cancel};
use super::publish::queued;
use super::restore::restore_status;
use crate::components::publisher::PublisherError;
use crate::components::publisher::decide::{self, Publication as Moves, Retry};
use crate::k8s::WriteError;
use crate::k8s::writer::{PublishSpec, Published, k8s_time};

/// What one publication writes.
pub(super) struct Target {
    /// The main HAProxyCfg.
    pub(super) name: String,
    /// The published checkpoint when the publication began.
    pub(super) checkpoint: Option<PublishedCheckpoint>,
    /// The render and its place in render order.
    pub(super) render: Checksum,
    pub(super) render_seq: Seq,
    /// When it was rendered and validated (validation-driven items only).
    pub(super) rendered_at: Option<UnixMillis>,
    pub(super) validated_at: Option<UnixMillis>,
    /// The chain it belongs to (`self-heal` for a repeat).
    pub(super) correlation: Correlation,
    /// The deploy-driven item, if it is one.
    pub(super) deployment: Option<DeployedPublishItem>,
    /// What its ack does to the published checkpoint.
    pub(super) moves: Moves,
}

/// One publication in progress (borrowing the publish worker's parts).
pub(super) struct Publishing<'a> {
    pub(super) ctx: &'a Arc<Context>,
    pub(super) writes: &'a Writes,
    pub(super) cache: &'a HealCache,
    pub(super) heal: &'a AtomicBool,
    pub(super) target: &'a Target,
    /// The queued item (`None`: a repeat).
    pub(super) entry: Option<&'a WorkEntry>,
    /// Items acked with it (older validation work it coalesces, older deploy work a drain
    /// drops).
    pub(super) extra_acks: &'a [&'a WorkEntry],
    /// A leader stop's drain (past the throttle; never superseded; a rejection keeps it).
    pub(super) drain: bool,
}

impl Publishing<'_> {
    /// Writes the target until it is complete, rejected, superseded or the term ends. Returns
    /// true when it committed (or was released), false when cancelled or superseded.
    pub(super) async fn run(self) -> Result<bool, PublisherError> {
        let t = self.target;
        let content = match self.ctx.load_render(t.render).await {
            Ok(x) => x,
            Err(e) => {
                // Permanent (Unbuildable): recorded and shown by `failed`, then released.
                self.writes.failed(&e, 1, self.entry.is_some()).await;
                if let Some(e) = self.entry {
                    self.ctx.commit.ack_all([e]).await?;
                }
                return Ok(true);
            }
        };
        // A queued publication that completes sets `Published=True` and, since every object
        // fit, `SizeLimitExceeded=False`; a self-healing repeat of the checkpoint leaves the
        // conditions as they are (they may show a rejection of a newer render, which the
        // repeat does not undo).
        let published: Vec<Condition> = self
            .entry
            .map(|_| {
                let now = k8s_time(UnixMillis::now());
                [
                    decide::published_condition(&now),
                    decide::within_size_limit_condition(&now),
                ]
            })
            .into_iter()
            .flatten()
            .collect();
        let writer = &self.writes.writer;
        let mut attempt = 0u32;
        loop {
            if self.writes.cancel.is_cancelled() {
                return Ok(false);
            }
            attempt += 1;
            let spec = PublishSpec {
                name: &t.name,
                render: &content,
                with_files: true,
                rendered_at: t.rendered_at,
                validated_at: t.validated_at,
                validation_error: None,
                conditions: &published,
            };
            let planned = writer
                .planned_objects(&spec)
                .into_iter()
                .map(|o| ((o.kind.to_owned(), o.name), o.content))
                .collect();
            self.cache.with(|c| c.begin(planned));
            let result = writer.publish(&spec).await;
            // The publication attempt moves parked statuses back to pending.
            if self.ctx.commit.unpark_all().await? > 0 {
                haptic_journal::crash_point!("status::after_unpark");
                self.ctx.wake.status.notify_one();
            }
            let e = match result {
                Ok(p) => return self.complete(p, &content.manifest()).await,
                Err(e) => e,
            };
            match self.writes.failed(&e, attempt, self.entry.is_some()).await {
                Retry::StopTerm => return Ok(false),
                Retry::After(d) => {
                    if !sleep_or_cancel(d, &self.writes.cancel).await {
                        return Ok(false);
                    }
                    if self.yields()? {
                        return Ok(false);
                    }
                }
                Retry::Reject => return self.rejected(&e).await,
            }
        }
    }

    /// After a retry's back-off: a repeat yields to queued publications (they are complete and
    /// newer; it runs again after them); a validation retry yields to a newer validation
    /// generation.
    fn yields(&self) -> Result<bool, PublisherError> {
        let Some(e) = self.entry else {
            let queued = !self.ctx.queue(Queue::Publish)?.is_empty()
                || !self.ctx.queue(Queue::PublishDeployed)?.is_empty();
            if queued {
                self.heal.store(true, Ordering::Release);
            }
            return Ok(queued);
        };
        if e.queue != Queue::Publish || self.drain {
            return Ok(false);
        }
        let validated: Vec<decide::Queued> =
            self.ctx.queue(Queue::Publish)?.iter().map(queued).collect();
        Ok(decide::superseded(
            decide::Queued {
                id: e.record.id,
                render_seq: self.target.render_seq,
            },
            &validated,
        ))
    }

    /// The publication is complete: acks it (with the checkpoint, the render hold and
    /// `config.published` when it advances; the drain checkpoint for a drain) in one commit,
    /// when the term is still authoritative.
    async fn complete(&self, p: Published, manifest: &Render) -> Result<bool, PublisherError> {
        let t = self.target;
        self.writes.set_blocked(None);
        if !self.writes.authoritative() {
            return Ok(false);
        }
        let mut b = ack_batch(
            self.entry
                .into_iter()
                .chain(self.extra_acks.iter().copied()),
        );
        let advances = t.moves == Moves::Advance;
        if advances {
            b.hold_render(manifest);
            if let Some(c) = &t.checkpoint {
                b.release_blob(c.render);
            }
            b.put_published_checkpoint(PublishedCheckpoint {
                name: t.name.clone().into(),
                render: t.render,
                render_seq: t.render_seq,
                resource_version: p.resource_version.clone().map(Into::into),
                published_at: UnixMillis::now(),
            });
            b.event(Event::ConfigPublished {
                correlation: t.correlation.clone(),
                runtime_config: self.ctx.cfg.runtime_config(),
                render: t.render,
                map_file_count: p.map_files,
                secret_count: p.secrets,
            });
        }
        if self.drain {
            if let Some(d) = &t.deployment {
                b.enqueue(
                    WorkItem::DrainCheckpoint(DrainCheckpoint {
                        runtime_config: d.runtime_config.clone(),
                        render: t.render,
                        render_seq: t.render_seq,
                        deployment: d.deployment.clone(),
                    }),
                    Origin::None,
                );
            }
            haptic_journal::crash_point!("drain::after_publish");
        }
        haptic_journal::crash_point!("publisher::before_publish_ack");
        self.ctx.commit.commit(b).await?;
        if advances {
            haptic_journal::crash_point!("publisher::after_config_published");
        }
        let counters = &self.ctx.counters;
        counters.publications.fetch_add(1, Ordering::Relaxed);
        if advances {
            counters.config_published.fetch_add(1, Ordering::Relaxed);
            info!(name = %t.name, checksum = %t.render, "config published");
        }
        let objects = p
            .objects
            .into_iter()
            .map(|o| ((o.kind.to_owned(), o.name), o.content))
            .collect();
        self.cache.with(|c| c.completed(objects));
        if self.entry.is_none() {
            restore_status(self.ctx, self.cache, self.writes).await;
        }
        self.ctx.wake.verdict.notify_one();
        self.ctx.wake.status.notify_one();
        Ok(true)
    }

    /// A permanent rejection (already shown by `failed`): a render too large to publish gets
    /// `SizeLimitExceeded=True` naming it (so its pods' statuses may be written: the park
    /// rule); the last complete publication is restored (the rejected render may have reached
    /// the spec first); the item is released, a drain's kept.
    async fn rejected(&self, e: &WriteError) -> Result<bool, PublisherError> {
        let t = self.target;
        if e.is_too_large() {
            let what = decide::too_large_message(t.render, &rejection_message(e));
            let _ = self
                .writes
                .writer
                .set_too_large(&t.name, &what, UnixMillis::now())
                .await;
            // The pods' statuses for this render, parked until the spec had it, may be written
            // now (the park rule).
            if self.ctx.commit.unpark_all().await? > 0 {
                self.ctx.wake.status.notify_one();
            }
        }
        // Never a complete one older than the spec: the rejected render is not.
        self.heal.store(true, Ordering::Release);
        if self.drain {
            return Ok(false);
        }
        if let Some(e) = self.entry {
            self.ctx.commit.ack_all([e]).await?;
        }
        Ok(true)
    }
}
