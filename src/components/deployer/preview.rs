//! What a sync would do on one pod, without doing it (`haptic plan`, issue 28): the sync's own
//! reads, then the same pure [`plan`](super::decide::plan) the deployer runs, and nothing else.
//!
//! ```text
//!  GET .../transactions                     (open ones: the sync would delete them first)
//!  GET storage listings, render files, configuration/raw, reloads, runtime views
//!                                           (exactly the reads of a sync: exec::read_running)
//!  plan(running, render, record, policy) ─► PodPlan { operations, mode, changes, reloads }
//! ```
//!
//! Read-only by construction: the reads go through the executor's read path with a journal
//! that keeps nothing ([`NoPodJournal`]) and no write call is reachable from here; the
//! sandbox's request log checks it (`tests/integration/deployer/plan.rs`). Absent failures (a
//! version conflict, a raw-push fallback, a reload that fails) the plan is what the next sync
//! of the same render does: both take the same reads to the same pure function.

use std::sync::Arc;

use haptic_journal::{ConfigVersion, EndpointFiles, SyncMode};
use tokio::sync::Semaphore;

use super::decide::{Operation, SyncPolicy, config_changes, expected_reloads, mode_of, plan};
use super::exec;
use super::structure::ConfigChange;
use super::sync::{Calls, NoPodJournal, SyncError, SyncLimits, SyncReport};
use crate::core::guard::AlwaysValid;
use crate::core::render::JournaledRender;
use crate::dataplane::DataplaneClient;

/// What a sync of one render would do on one pod.
#[derive(Clone, Debug, PartialEq)]
pub struct PodPlan {
    /// The configuration version the pod reports (`Configuration-Version`).
    pub version: ConfigVersion,
    /// Transactions open on the pod, which the first sync of a leader term deletes before
    /// writing (left by a kill, a timeout or another writer).
    pub open_transactions: usize,
    /// The operations, in the order the sync applies them (empty: the pod runs the render).
    pub operations: Vec<Operation>,
    /// How the configuration would be applied ([`mode_of`]).
    pub mode: SyncMode,
    /// The structural configuration changes, when the difference is one the model covers
    /// (`None`: equal, or a difference only a raw push applies).
    pub config_changes: Option<Vec<ConfigChange>>,
    /// Reloads the operations make when every answer is the expected one
    /// ([`expected_reloads`]: 0 or 1).
    pub reloads: u32,
    /// Dataplane API reads made to plan (all `GET`).
    pub reads: u32,
}

impl PodPlan {
    /// Whether the sync would change anything on the pod (writes, deletes or a reload).
    #[must_use]
    pub fn changes(&self) -> bool {
        !self.operations.is_empty() || self.open_transactions > 0
    }
}

/// Plans the sync of `render` on the pod behind `client` (module doc). `record` is the
/// journal's record of the endpoint when one is at hand (a stopped controller's journal): with
/// it, files the record knows loaded are not reloaded for, as the deployer decides; without
/// it, general files with no runtime view count as not known loaded (one reload, as a new
/// leader with an empty journal would do).
///
/// # Errors
/// [`SyncError::Dataplane`] when a read fails (naming the step).
///
/// # Cancel safety
/// Cancel safe: reads only.
pub async fn plan_endpoint(
    client: &DataplaneClient,
    render: &JournaledRender,
    record: Option<&EndpointFiles>,
    limits: &SyncLimits,
    policy: &SyncPolicy,
) -> Result<PodPlan, SyncError> {
    let permits = Arc::new(Semaphore::new(Semaphore::MAX_PERMITS));
    let calls = Calls {
        client,
        permits: &permits,
        journal: &NoPodJournal,
        lease: &AlwaysValid,
        limits,
    };
    let open_transactions = exec::list_transactions(&calls).await?.len();
    let mut report = SyncReport::default();
    let running = exec::read_running(&calls, render, record, &mut report).await?;
    let operations = plan(&running, render, record, policy);
    Ok(PodPlan {
        version: running.config.version,
        open_transactions,
        mode: mode_of(&operations),
        config_changes: config_changes(&running, render),
        reloads: expected_reloads(&operations),
        reads: report.ops.total_api_operations + 1,
        operations,
    })
}
