//! Retirement of what this journal published under an earlier `--config-name`: at each term
//! start, every HAProxyCfg with a published checkpoint in this journal whose name is neither
//! the main HAProxyCfg nor the `-invalid` one of the current config name is deleted with its
//! auxiliary objects and Secrets ([`crate::k8s::writer::Writer::retire_cfg`]), then its
//! checkpoint is removed in the batch that releases the render hold the publication took. Only
//! objects this journal recorded as published, and only while they still hold the render it
//! recorded: a second controller in the namespace, or one that took the old name over, keeps
//! its objects. Each retirement is logged and shown as a Normal Event on the main HAProxyCfg.

use std::sync::Arc;

use haptic_journal::{Batch, PublishedCheckpoint, ReadError};
use kube::runtime::events::EventType;
use tracing::{info, warn};

use super::context::Context;
use super::failures::{Attempts, Writes, event_reasons};
use crate::core::naming::invalid_haproxycfg_name;

/// The retirement task of one term (the publish worker's failure handling).
pub(super) struct Retire {
    ctx: Arc<Context>,
    writes: Writes,
}

impl Retire {
    /// The task.
    pub(super) fn new(ctx: Arc<Context>, writes: Writes) -> Retire {
        Retire { ctx, writes }
    }

    /// The published checkpoints that belong to an earlier config name (not the main or the
    /// `-invalid` HAProxyCfg of the configured identity), by name.
    fn retired_checkpoints(&self) -> Result<Vec<PublishedCheckpoint>, ReadError> {
        let main = self.ctx.cfg.haproxycfg_name();
        let invalid = invalid_haproxycfg_name(self.ctx.cfg.identity.name.as_str());
        Ok(self
            .ctx
            .journal
            .published_checkpoints()?
            .into_iter()
            .filter(|c| c.name.as_str() != main && c.name.as_str() != invalid)
            .collect())
    }

    /// Retires every HAProxyCfg an earlier config name left (see the module docs). Transient
    /// API failures are retried (the publish worker's policy); a permanent rejection leaves
    /// the checkpoint for the next term; the end of the term stops it with nothing removed.
    pub(super) async fn run(self) {
        let retired = match self.retired_checkpoints() {
            Ok(r) => r,
            Err(e) => {
                warn!(error = %e, "publisher: published checkpoints unreadable; earlier config names not retired this term");
                return;
            }
        };
        let writer = &self.writes.writer;
        for cp in retired {
            let name = cp.name.as_str().to_owned();
            let outcome = match self
                .writes
                .with_retries(|| writer.retire_cfg(&name, cp.render))
                .await
            {
                Attempts::Done(o) => o,
                Attempts::Rejected => continue,
                Attempts::Stopped => return,
            };
            if !self.writes.authoritative() {
                return;
            }
            let mut b = Batch::new();
            b.release_blob(cp.render);
            b.remove_published_checkpoint(cp.name.clone());
            if let Err(e) = self.ctx.commit.commit(b).await {
                warn!(error = %e, name = %name, "publisher: journal failure removing a retired checkpoint; stopping the term");
                self.writes.cancel.cancel();
                return;
            }
            let current = self.ctx.cfg.haproxycfg_name();
            if let Some(theirs) = outcome.not_ours {
                info!(
                    name = %name,
                    recorded = %cp.render,
                    holds = %theirs,
                    "publisher: a HAProxyCfg of an earlier config name now holds another publisher's render; left in place, forgotten"
                );
                continue;
            }
            info!(
                name = %name,
                cfg_deleted = outcome.cfg_deleted,
                objects_deleted = outcome.objects_deleted,
                current = %current,
                "publisher: retired the HAProxyCfg of an earlier config name"
            );
            self.ctx.events.emit(
                EventType::Normal,
                event_reasons::RETIRED_CONFIG_REMOVED,
                "Retire",
                format!(
                    "HAProxyCfg {name} (published by this controller under an earlier \
                     --config-name) {} with {} auxiliary objects and Secrets; {current} \
                     replaces it",
                    if outcome.cfg_deleted {
                        "deleted"
                    } else {
                        "already gone"
                    },
                    outcome.objects_deleted
                ),
            );
        }
    }
}
