//! The publisher's shell, in the scheduler's shape: one owner per task, values instead of
//! locks. Every rule is in [`super::decide`]; the shell maps effects to I/O and I/O results to
//! the next decision.
//!
//! ```text
//!  router (one task, router.rs): RouterState + checkpoints; folds every input; journals work
//!    |  with the checkpoint in one commit; wakes the workers; watch<RouterView> (known pods)
//!    v
//!  term (term.rs), one per leadership term: writer, cancellation, heal cache, drain channel
//!    +-- term start (start.rs)    +-- retirement (retire.rs)     +-- heal watches (heal.rs)
//!    +-- publish worker (publish.rs; one publication: attempt.rs; status restore: restore.rs)
//!    +-- invalid worker (invalid.rs) +-- verdict worker (verdict.rs) +-- status worker (status.rs)
//!  shared (context.rs): settings, clients, the one commit path, counters, blocked reasons,
//!    the gate conditions last written, the running term; the heal cache (cache.rs) is the
//!    only lock
//! ```
//!
//! Workers read their queues from the journal; `Notify`s only wake them. Every journal commit
//! goes through [`context::Commit`] (the dispatcher's handle once attached).

mod attempt;
mod cache;
mod context;
mod counters;
mod failures;
mod heal;
mod invalid;
mod order;
mod publish;
mod restore;
mod retire;
mod router;
mod start;
mod status;
mod term;
mod verdict;

use std::sync::Arc;

use haptic_journal::Journal;
use tokio::sync::watch;

pub(crate) use context::Context;
pub use counters::{Counters, WorkerRetries};
pub use failures::Worker;
pub(crate) use router::{Delivery, RouterHandle};
pub use term::TermHandle;
pub(crate) use term::{drain, start};

use super::PublisherConfig;

/// Restores the router's checkpoint (one short read of the journal), builds the shared part
/// and spawns the router task.
///
/// # Panics
/// Outside a Tokio runtime (the router task is spawned).
pub(crate) fn build(
    journal: Arc<Journal>,
    client: kube::Client,
    cfg: PublisherConfig,
) -> (Arc<Context>, RouterHandle) {
    let restored = router::Restored::read(&journal, &cfg);
    let (view, view_rx) = watch::channel(restored.view());
    let ctx = Arc::new(Context::new(journal, client, cfg, view_rx));
    let router = router::Router::spawn(Arc::clone(&ctx), restored, view);
    (ctx, router)
}
