//! Term start: the router queues what it owes the new term (status removals of pods that went
//! away while this replica did not lead). On a journal that had no checkpoint, the pods the
//! published status lists are folded too ([`Input::StatusListed`]; the router folds them
//! whatever their order with the first discovery, so nothing waits for this read).
//!
//! [`Input::StatusListed`]: crate::components::publisher::decide::Input::StatusListed

use std::sync::Arc;

use haptic_journal::PodRef;
use tracing::warn;

use super::context::Context;
use super::failures::{Attempts, Writes};
use super::router::RouterHandle;

/// The term-start task of one term.
pub(super) struct TermStart {
    ctx: Arc<Context>,
    router: RouterHandle,
    /// Reads the published status (the status worker's failure handling).
    writes: Writes,
}

impl TermStart {
    /// The task; `writes` reads the main HAProxyCfg when its status must be listed.
    pub(super) fn new(ctx: Arc<Context>, router: RouterHandle, writes: Writes) -> TermStart {
        TermStart {
            ctx,
            router,
            writes,
        }
    }

    /// Folds the term start and, when needed, the listed pods; a journal failure stops the
    /// term's workers.
    pub(super) async fn run(self) {
        let list = match self.router.term_started().await {
            Ok(list) => list,
            Err(e) => {
                warn!(error = %e, "publisher: journal failure at term start; stopping the term");
                self.writes.cancel.cancel();
                return;
            }
        };
        if !list {
            return;
        }
        let name = self.ctx.cfg.haproxycfg_name();
        let writer = &self.writes.writer;
        let cfg = match self.writes.with_retries(|| writer.get_cfg(&name)).await {
            Attempts::Done(cfg) => cfg,
            Attempts::Rejected | Attempts::Stopped => return,
        };
        let pods: Vec<PodRef> = cfg
            .iter()
            .flat_map(|c| c.status.iter().flat_map(|s| s.deployed_to_pods.iter()))
            .map(|p| PodRef {
                namespace: p
                    .namespace
                    .clone()
                    .unwrap_or_else(|| self.ctx.cfg.namespace.clone())
                    .into(),
                name: p.pod_name.as_str().into(),
            })
            .collect();
        if let Err(e) = self.router.status_listed(pods).await {
            warn!(error = %e, "publisher: journal failure folding the listed pods; stopping the term");
            self.writes.cancel.cancel();
        }
    }
}
