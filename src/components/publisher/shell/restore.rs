//! After a repeat of the last complete publication (self-healing, term start): the main
//! HAProxyCfg gets back the conditions and per-pod entries it had before it was deleted.

use std::sync::Arc;

use tracing::{info, warn};

use super::cache::HealCache;
use super::context::Context;
use super::failures::Writes;
use crate::core::error::ErrorClass;

/// Gives the main HAProxyCfg back what its status lacks: the last status the heal watch saw
/// (else the gate's conditions the verdict worker last wrote; pods the router no longer knows
/// are left out), filling only what it lacks; newer status writes are never overwritten. Write
/// failures are logged: the next status or verdict write repairs them (a fencing refusal
/// cancels the term, DESIGN.md J7).
pub(super) async fn restore_status(ctx: &Arc<Context>, cache: &HealCache, writes: &Writes) {
    let name = ctx.cfg.haproxycfg_name();
    let (mut conditions, pods) = cache.with(|c| {
        c.status.as_ref().map_or_else(
            || (Vec::new(), Vec::new()),
            |s| (s.conditions.clone(), s.deployed_to_pods.clone()),
        )
    });
    for c in ctx.last_conditions.borrow().iter() {
        if !conditions.iter().any(|x| x.type_ == c.type_) {
            conditions.push(c.clone());
        }
    }
    // Only pods the router still knows (a pod removed meanwhile stays removed).
    let pods: Vec<_> = {
        let view = ctx.view.borrow();
        let known = &view.known_pods;
        pods.into_iter()
            .filter(|p| known.is_empty() || known.contains(&p.pod_name))
            .collect()
    };
    if conditions.is_empty() && pods.is_empty() {
        return;
    }
    match writes
        .writer
        .restore_status(&name, &conditions, &pods)
        .await
    {
        Ok(wrote) => {
            if wrote {
                info!(name = %name, "status restored");
            }
        }
        Err(e) if e.class() == ErrorClass::Fenced => {
            warn!(error = %e, "leadership of this term is gone; stopping its writes, work stays queued");
            writes.cancel.cancel();
        }
        Err(e) => warn!(error = %e, "status restore failed"),
    }
}
