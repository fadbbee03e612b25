//! The invalid worker: the `-invalid` HAProxyCfg of the newest failed render (the config and
//! `validationError` only, no auxiliary objects, no checkpoint, no event). It acks its items
//! only after the write succeeded or was rejected permanently (recorded and shown); a term that
//! ends leaves them queued.

use std::sync::Arc;

use haptic_journal::{Queue, WorkItem};

use super::context::Context;
use super::failures::{Attempts, Worker, Writes, rounds_until_cancelled};
use crate::components::publisher::PublisherError;
use crate::core::naming::invalid_haproxycfg_name;
use crate::k8s::crd::summarize_validation_errors;
use crate::k8s::writer::PublishSpec;

/// The invalid worker of one term.
pub(super) struct InvalidWorker {
    ctx: Arc<Context>,
    writes: Writes,
}

impl InvalidWorker {
    /// The worker; its first round runs at once.
    pub(super) fn new(ctx: Arc<Context>, writes: Writes) -> InvalidWorker {
        InvalidWorker { ctx, writes }
    }

    /// Runs rounds until the term ends (woken by new items); a journal failure stops it.
    pub(super) async fn run(self) {
        rounds_until_cancelled(
            Worker::Invalid,
            &self.writes.cancel,
            &self.ctx.wake.invalid,
            || self.round(),
        )
        .await;
    }

    async fn round(&self) -> Result<(), PublisherError> {
        let Some((items, WorkItem::Invalid(item))) = self.ctx.newest_of(Queue::Invalid)? else {
            return Ok(());
        };
        // The newest failure wins: the older ones are acked with it (`items`, every ack below).
        let name = invalid_haproxycfg_name(self.ctx.cfg.identity.name.as_str());
        let Some(render) = item.render else {
            // A failure without a render (nothing rendered) has no bytes to publish.
            self.ctx.commit.ack_all(&items).await?;
            return Ok(());
        };
        let content = match self.ctx.load_render(render).await {
            Ok(c) => c,
            Err(e) => {
                // Permanent: the rejected render is not in the journal (Unbuildable).
                self.writes.failed(&e, 1, false).await;
                self.ctx.commit.ack_all(&items).await?;
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
            conditions: &[],
        };
        let writer = &self.writes.writer;
        match self.writes.with_retries(|| writer.publish(&spec)).await {
            Attempts::Done(_) | Attempts::Rejected if !self.writes.cancel.is_cancelled() => {
                self.ctx.commit.ack_all(&items).await?;
            }
            _ => {}
        }
        Ok(())
    }
}
