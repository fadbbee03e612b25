//! The verdict worker: the gate's conditions (ConfigValidated / ConfigPinned) on the main
//! HAProxyCfg, and the `-invalid` HAProxyCfg deleted when a render passes. It keeps its newest
//! item unacked while the HAProxyCfg does not exist (the next complete publication wakes it);
//! it acks only after the writes succeeded or were rejected permanently.

use std::sync::Arc;

use haptic_journal::{Queue, UnixMillis, WorkItem};

use super::context::Context;
use super::failures::{Attempts, Worker, Writes, rounds_until_cancelled};
use crate::components::publisher::PublisherError;
use crate::components::publisher::decide;
use crate::core::naming::invalid_haproxycfg_name;
use crate::k8s::writer::k8s_time;

/// The verdict worker of one term.
pub(super) struct VerdictWorker {
    ctx: Arc<Context>,
    writes: Writes,
}

impl VerdictWorker {
    /// The worker; its first round runs at once.
    pub(super) fn new(ctx: Arc<Context>, writes: Writes) -> VerdictWorker {
        VerdictWorker { ctx, writes }
    }

    /// Runs rounds until the term ends (woken by new items and publications); a journal
    /// failure stops it.
    pub(super) async fn run(self) {
        rounds_until_cancelled(
            Worker::Verdict,
            &self.writes.cancel,
            &self.ctx.wake.verdict,
            || self.round(),
        )
        .await;
    }

    async fn round(&self) -> Result<(), PublisherError> {
        let Some((items, WorkItem::Verdict(v))) = self.ctx.newest_of(Queue::Verdict)? else {
            return Ok(());
        };
        let name = self.ctx.cfg.haproxycfg_name();
        let conds = decide::verdict_conditions(
            v.passed,
            v.pinned,
            &v.messages,
            &k8s_time(UnixMillis::now()),
        );
        let writer = &self.writes.writer;
        // The HAProxyCfg may not exist yet: wait (unacked) for a publication to wake us.
        match self.writes.with_retries(|| writer.get_cfg(&name)).await {
            Attempts::Done(Some(_)) => {}
            Attempts::Done(None) | Attempts::Stopped => return Ok(()),
            Attempts::Rejected => return self.ctx.commit.ack_all(&items).await,
        }
        match self
            .writes
            .with_retries(|| writer.set_conditions(&name, &conds))
            .await
        {
            Attempts::Done(_) => {
                self.ctx.last_conditions.send_replace(conds.to_vec());
            }
            Attempts::Rejected => return self.ctx.commit.ack_all(&items).await,
            Attempts::Stopped => return Ok(()),
        }
        if v.passed {
            let invalid = invalid_haproxycfg_name(self.ctx.cfg.identity.name.as_str());
            if let Attempts::Stopped = self
                .writes
                .with_retries(|| writer.delete_cfg(&invalid))
                .await
            {
                return Ok(());
            }
        }
        if self.writes.cancel.is_cancelled() {
            return Ok(());
        }
        self.ctx.commit.ack_all(&items).await
    }
}
