//! The status worker's rules and the conditions: the park rule, the per-pod status merge, one
//! round of per-pod changes applied to a HAProxyCfg status and to its auxiliary objects, and
//! the conditions the verdict worker and the publication outcomes write. Pure: the shell reads
//! the objects, these functions say what their status becomes (`None`: write nothing), the
//! writer writes it.
//!
//! A pod's entry is written when a sync failed or changed the pod, or the pod runs another
//! checksum than the entry names: a successful no-op sync of the checksum the entry already
//! names (the deployer reports every endpoint it synced, idle drift checks included) leaves the
//! entry as it is, `deployedAt` included; an object is written only when some entry changed.

use haptic_journal::{Checksum, PodStatusChange, SyncMetadata};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::core::error::ErrorClass;
use crate::core::text::truncate_with_ellipsis;
use crate::k8s::crd::{
    AuxiliaryFileStatus, HAProxyCfg, HAProxyCfgStatus, OperationSummary, PodDeploymentStatus,
    conditions, reasons,
};
use crate::k8s::writer::{k8s_micro_time, k8s_time};

/// One queued per-pod change, as the status worker reads it from `status-pending`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodChange {
    /// Pod name.
    pub pod: String,
    /// Pod namespace.
    pub namespace: String,
    /// What changed (a deployment applied, or the pod removed).
    pub change: PodStatusChange,
}

impl PodChange {
    /// Whether this reports a failed deployment (written even when the pod tried a checksum
    /// other than `spec.checksum`: the error is what an operator needs to see).
    #[must_use]
    pub fn is_failure(&self) -> bool {
        match &self.change {
            PodStatusChange::Applied { sync, .. } => sync.error.is_some(),
            PodStatusChange::Quarantined { .. } => true,
            PodStatusChange::Removed | PodStatusChange::Discovered => false,
        }
    }

    fn checksum(&self) -> Option<Checksum> {
        match &self.change {
            PodStatusChange::Applied { checksum, .. }
            | PodStatusChange::Quarantined { checksum, .. } => Some(*checksum),
            PodStatusChange::Removed | PodStatusChange::Discovered => None,
        }
    }
}

/// What becomes of one change in a status round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodOutcome {
    /// Applied (or already as wanted): ack it.
    Done,
    /// The HAProxyCfg cannot take it yet (missing, not completely published, another
    /// `spec.checksum` for a successful deployment): park it until the next publication.
    Park,
}

/// The park rule for one change, given the HAProxyCfg as read (`None`: absent).
///
/// A successful deployment needs the object completely published (its status has the
/// publication metadata) with the same `spec.checksum`, or with `SizeLimitExceeded=True` for
/// the change's render ([`too_large_render`]: a render the spec never gets, so its statuses
/// would wait forever while every pod runs it), or with `RolledBack=True` holding the change's
/// render (the spec never moves back: [`HAProxyCfgStatus::held_render`]); a failed one, and a discovered pod's pending
/// entry, need the object completely published; a removal is always done (an absent object
/// has no entry to remove).
#[must_use]
pub fn park_rule(cfg: Option<&HAProxyCfg>, change: &PodChange) -> PodOutcome {
    let published = |cfg: &HAProxyCfg| cfg.status.as_ref().is_some_and(|s| s.metadata.is_some());
    if matches!(change.change, PodStatusChange::Discovered) {
        // A discovered pod's pending entry needs the object completely published.
        return if cfg.is_some_and(published) {
            PodOutcome::Done
        } else {
            PodOutcome::Park
        };
    }
    let Some(checksum) = change.checksum() else {
        return PodOutcome::Done;
    };
    let Some(cfg) = cfg else {
        return PodOutcome::Park;
    };
    let published = published(cfg);
    let shown = checksum == cfg.spec.checksum
        || change.is_failure()
        || too_large_render(cfg) == Some(checksum)
        || cfg.status.as_ref().and_then(HAProxyCfgStatus::held_render) == Some(checksum);
    if published && shown {
        PodOutcome::Done
    } else {
        PodOutcome::Park
    }
}

pub use crate::k8s::crd::too_large_message;

/// The render `SizeLimitExceeded=True` names ([`too_large_message`]), if any
/// ([`HAProxyCfgStatus::too_large_render`]).
#[must_use]
pub fn too_large_render(cfg: &HAProxyCfg) -> Option<Checksum> {
    cfg.status.as_ref()?.too_large_render()
}

/// A per-pod change as an auxiliary object takes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuxChange {
    /// The pod runs the HAProxyCfg's `spec.checksum` (so the file's current content); the
    /// index of its change in the round.
    Deployed(usize),
    /// The pod left.
    Removed(String),
}

/// One status round over one HAProxyCfg.
#[derive(Clone, Debug, PartialEq)]
pub struct StatusRound {
    /// One outcome per change, in input order.
    pub outcomes: Vec<PodOutcome>,
    /// The status to write; `None` when neither an entry nor the `Synced` condition changed
    /// (nothing is written).
    pub status: Option<HAProxyCfgStatus>,
    /// What the auxiliary objects the HAProxyCfg references take from the round.
    pub aux: Vec<AuxChange>,
    /// Entries that became `rejected` in this round (pod name, the error), sorted by pod: a
    /// pod that quarantined a render it had not been shown rejecting (a repeated rejection of
    /// the same render only moves the entry's count and time). The shell writes one
    /// `DeploymentRejected` Event for each once the status is written.
    pub rejected: Vec<(String, String)>,
}

/// Applies `changes` to the HAProxyCfg `cfg` as read (`None`: absent) at `now`: outcomes by
/// [`park_rule`], entries by [`merge_pod_entry`] (sorted by pod name), `podsSynced`,
/// `observedGeneration` and the `Synced` condition
/// ([`HAProxyCfgStatus::synced_condition`]) refreshed; a status only when some entry or the
/// `Synced` condition changed (an idle drift check, whose reports repeat what every entry
/// says, writes nothing).
#[must_use]
pub fn status_round(cfg: Option<&HAProxyCfg>, changes: &[PodChange], now: &Time) -> StatusRound {
    let outcomes: Vec<PodOutcome> = changes.iter().map(|c| park_rule(cfg, c)).collect();
    let Some(cfg) = cfg else {
        return StatusRound {
            outcomes,
            status: None,
            aux: Vec::new(),
            rejected: Vec::new(),
        };
    };
    let spec = cfg.spec.checksum;
    let before = cfg.status.clone().unwrap_or_default();
    let mut st = before.clone();
    let mut aux = Vec::new();
    for (i, (c, o)) in changes.iter().zip(&outcomes).enumerate() {
        match (&c.change, o) {
            (PodStatusChange::Removed, _) => {
                st.deployed_to_pods.retain(|p| p.pod_name != c.pod);
                aux.push(AuxChange::Removed(c.pod.clone()));
            }
            (PodStatusChange::Applied { checksum, .. }, PodOutcome::Done) => {
                let pos = st.deployed_to_pods.iter().position(|p| p.pod_name == c.pod);
                let entry = merge_pod_entry(pos.map(|i| &st.deployed_to_pods[i]), c);
                match pos {
                    Some(i) => st.deployed_to_pods[i] = entry,
                    None => st.deployed_to_pods.push(entry),
                }
                if *checksum == spec && !c.is_failure() {
                    aux.push(AuxChange::Deployed(i));
                }
            }
            (PodStatusChange::Discovered, PodOutcome::Done) => {
                // A pending entry (no checksum) until the pod's first sync is reported; a pod
                // with an entry keeps it as it is.
                if !st.deployed_to_pods.iter().any(|p| p.pod_name == c.pod) {
                    st.deployed_to_pods.push(PodDeploymentStatus {
                        pod_name: c.pod.clone(),
                        namespace: Some(c.namespace.clone()),
                        ..PodDeploymentStatus::default()
                    });
                }
            }
            (
                PodStatusChange::Quarantined {
                    checksum,
                    message,
                    next_retry_at,
                    ..
                },
                PodOutcome::Done,
            ) => {
                // The retry schedule of the pod's quarantine: the entry shows the rejection
                // and when it is retried; the failure itself is counted by the deployment's
                // report (its own item), never here.
                // Only an entry whose last sync of this checksum failed takes it (its report
                // was written first: it sorts and is queued before the notice). A pod with no
                // entry, or one that ran this checksum or another since (a stale notice after
                // a success or a newer render), is left as it is.
                if let Some(entry) = st
                    .deployed_to_pods
                    .iter_mut()
                    .find(|p| p.pod_name == c.pod)
                    .filter(|p| p.checksum == Some(*checksum) && p.last_error.is_some())
                {
                    entry.checksum = Some(*checksum);
                    entry.rejected = Some(true);
                    entry.last_error = Some(message.clone());
                    entry.next_retry_at = Some(k8s_time(*next_retry_at));
                }
            }
            (
                PodStatusChange::Applied { .. }
                | PodStatusChange::Discovered
                | PodStatusChange::Quarantined { .. },
                PodOutcome::Park,
            ) => {}
        }
    }
    st.deployed_to_pods
        .sort_by(|a, b| a.pod_name.cmp(&b.pod_name));
    let entries_changed = st.deployed_to_pods != before.deployed_to_pods;
    // Only on a completely published object: the publication's own status write sets it
    // first (with the publication metadata).
    let synced_changed =
        before.metadata.is_some() && st.refresh_synced(&spec, cfg.metadata.generation, now);
    let rejected: Vec<(String, String)> = st
        .deployed_to_pods
        .iter()
        .filter(|p| p.rejected == Some(true))
        .filter(|p| {
            // Shown rejected for this render already: a repeated rejection moves its count,
            // not another Event.
            !before.deployed_to_pods.iter().any(|b| {
                b.pod_name == p.pod_name && b.checksum == p.checksum && b.rejected == Some(true)
            })
        })
        .map(|p| (p.pod_name.clone(), p.last_error.clone().unwrap_or_default()))
        .collect();
    let status = (entries_changed || synced_changed).then(|| {
        st.refresh_pods_synced(&spec);
        st.observed_generation = cfg.metadata.generation;
        st
    });
    StatusRound {
        outcomes,
        status,
        aux,
        rejected,
    }
}

/// The status of one auxiliary object (whose own checksum is `file`, at `generation`) after a
/// round's `aux` changes ([`merge_aux_pod_entry`]); `None` when no entry changed.
#[must_use]
pub fn aux_round(
    before: Option<&AuxiliaryFileStatus>,
    file: Checksum,
    generation: Option<i64>,
    changes: &[PodChange],
    aux: &[AuxChange],
) -> Option<AuxiliaryFileStatus> {
    let mut st = before.cloned().unwrap_or_default();
    for a in aux {
        match a {
            AuxChange::Deployed(i) => {
                let Some(c) = changes.get(*i) else { continue };
                let pos = st.deployed_to_pods.iter().position(|p| p.pod_name == c.pod);
                let entry = merge_aux_pod_entry(pos.map(|i| &st.deployed_to_pods[i]), c, file);
                match pos {
                    Some(i) => st.deployed_to_pods[i] = entry,
                    None => st.deployed_to_pods.push(entry),
                }
            }
            AuxChange::Removed(pod) => st.deployed_to_pods.retain(|p| &p.pod_name != pod),
        }
    }
    st.deployed_to_pods
        .sort_by(|a, b| a.pod_name.cmp(&b.pod_name));
    let unchanged = before.map_or(&[][..], |b| &b.deployed_to_pods[..]) == &st.deployed_to_pods[..];
    if unchanged {
        return None;
    }
    st.observed_generation = generation;
    Some(st)
}

/// A pod's new `deployedToPods[]` entry from the old one and a change
/// (upstream-behaviour.md 10.4, without zero timestamps: `deployedAt` only on success, or the
/// old one kept).
///
/// An old entry is returned as it is only for a successful sync that changed nothing on the pod
/// (no reload, no object or file added, removed or modified: [`changed_the_pod`]) of the
/// checksum the entry names, with no error and no rejection on it (an idle drift check of a
/// healthy pod writes nothing), or for a replay of the failure the entry already counts (same
/// checksum, error and `lastErrorAt` to the millisecond). Every failure is written (issue 27): `consecutiveErrors` counts
/// failed syncs in a row and `lastErrorAt` is the newest one's time, even when the error text
/// repeats; every sync that changed the pod is written too, so a drift repair shows its
/// reload (`lastReloadAt`, `lastReloadID`) and its operation summary, as upstream records
/// the repair. `rejected: true` only for a failure the deployer classified as a permanent
/// rejection ([`haptic_journal::SyncMetadata::rejected`]). A removal returns the old entry
/// (removals are applied by [`status_round`]).
#[must_use]
pub fn merge_pod_entry(
    old: Option<&PodDeploymentStatus>,
    change: &PodChange,
) -> PodDeploymentStatus {
    let PodStatusChange::Applied {
        checksum,
        sync,
        observed_at,
        ..
    } = &change.change
    else {
        return old.cloned().unwrap_or_default();
    };
    let rejected = (sync.error.is_some() && sync.rejected).then_some(true);
    if let Some(o) = old
        && o.checksum == Some(*checksum)
        && o.rejected == rejected
        && o.last_error == sync.error
    {
        // A successful sync that changed nothing, or a replay of the failure the entry
        // already counts (the same time to the millisecond: a report the status worker wrote
        // but had not acknowledged when the controller stopped).
        let replayed_failure =
            sync.error.is_some() && o.last_error_at.as_ref() == Some(&k8s_micro_time(*observed_at));
        if (sync.error.is_none() && !changed_the_pod(sync)) || replayed_failure {
            return o.clone();
        }
    }
    let ok = sync.error.is_none();
    let c = &sync.operation_counts;
    let summary = (c.total_api_operations > 0).then(|| OperationSummary {
        total_api_operations: i64::from(c.total_api_operations),
        backends_added: i64::from(c.backends.added),
        backends_removed: i64::from(c.backends.removed),
        backends_modified: i64::from(c.backends.modified),
        servers_added: i64::from(c.servers.added),
        servers_removed: i64::from(c.servers.removed),
        servers_modified: i64::from(c.servers.modified),
        frontends_added: i64::from(c.frontends.added),
        frontends_removed: i64::from(c.frontends.removed),
        frontends_modified: i64::from(c.frontends.modified),
    });
    let old_errors = old.and_then(|o| o.consecutive_errors).unwrap_or(0);
    PodDeploymentStatus {
        pod_name: change.pod.clone(),
        namespace: Some(change.namespace.clone()),
        checksum: Some(*checksum),
        deployed_at: if ok {
            Some(k8s_time(*observed_at))
        } else {
            old.and_then(|o| o.deployed_at.clone())
        },
        last_reload_at: if sync.reload_triggered {
            Some(k8s_time(*observed_at))
        } else {
            old.and_then(|o| o.last_reload_at.clone())
        },
        last_reload_id: if sync.reload_triggered {
            sync.reload_id.clone()
        } else {
            old.and_then(|o| o.last_reload_id.clone())
        },
        sync_duration: Some(format!("{}ms", sync.sync_duration_ms)),
        version_conflict_retries: Some(i64::from(sync.version_conflict_retries)),
        fallback_used: Some(sync.fallback_used),
        sync_mode: sync
            .sync_mode
            .map(|m| m.as_str().to_owned())
            .or_else(|| old.and_then(|o| o.sync_mode.clone())),
        last_operation_summary: summary
            .or_else(|| old.and_then(|o| o.last_operation_summary.clone())),
        last_error: sync.error.clone(),
        // A rejection of the render the entry already shows quarantined keeps its retry time
        // (the scheduler's `deployment.quarantined` item moves it); anything else clears it.
        next_retry_at: match old {
            Some(o)
                if rejected.is_some() && o.rejected.is_some() && o.checksum == Some(*checksum) =>
            {
                o.next_retry_at.clone()
            }
            _ => None,
        },
        rejected,
        consecutive_errors: Some(if ok { 0 } else { old_errors + 1 }),
        last_error_at: (!ok).then(|| k8s_micro_time(*observed_at)),
    }
}

/// Whether a sync changed what the pod runs: a reload, or any object or file added, removed
/// or modified (reads, such as a drift check's, count in `total_api_operations` only).
#[must_use]
pub fn changed_the_pod(sync: &SyncMetadata) -> bool {
    let c = &sync.operation_counts;
    sync.reload_triggered
        || [
            c.backends,
            c.servers,
            c.frontends,
            c.maps,
            c.ssl_certs,
            c.general_files,
        ]
        .iter()
        .any(|n| n.added + n.removed + n.modified > 0)
}

/// The pod entry of an auxiliary object (upstream-behaviour.md section 10.5): an entry that
/// already has `file_checksum` is kept as it is (its `deployedAt` included); otherwise a fresh
/// entry {podName, namespace, checksum = the file's own checksum, deployedAt = when the
/// deployment was applied, or the old entry's}. Aux entries carry no reload, sync or error
/// fields.
#[must_use]
pub fn merge_aux_pod_entry(
    old: Option<&PodDeploymentStatus>,
    change: &PodChange,
    file_checksum: Checksum,
) -> PodDeploymentStatus {
    if let Some(o) = old
        && o.checksum == Some(file_checksum)
    {
        return o.clone();
    }
    let deployed_at = match &change.change {
        PodStatusChange::Applied { observed_at, .. } => Some(k8s_time(*observed_at)),
        PodStatusChange::Removed
        | PodStatusChange::Discovered
        | PodStatusChange::Quarantined { .. } => None,
    };
    PodDeploymentStatus {
        pod_name: change.pod.clone(),
        namespace: Some(change.namespace.clone()),
        checksum: Some(file_checksum),
        deployed_at: deployed_at.or_else(|| old.and_then(|o| o.deployed_at.clone())),
        ..PodDeploymentStatus::default()
    }
}

/// The gate's conditions for a verdict: `ConfigValidated` (True/False, reason
/// `ValidationSucceeded`/`ValidationFailed`, the first message on a failure) and
/// `ConfigPinned` (True while pinned, reason `NewestRenderRejected`, else
/// `NewestRenderPassed`), stamped `now` (the writer keeps the old transition time when the
/// status does not change).
#[must_use]
pub fn verdict_conditions(
    passed: bool,
    pinned: bool,
    messages: &[String],
    now: &Time,
) -> [Condition; 2] {
    let message = messages.first().cloned().unwrap_or_default();
    let condition =
        |type_: &str, on: bool, (if_on, if_off): (&str, &str), message: String| Condition {
            type_: type_.into(),
            status: if on { "True" } else { "False" }.into(),
            reason: if on { if_on } else { if_off }.into(),
            message,
            last_transition_time: now.clone(),
            observed_generation: None,
        };
    [
        condition(
            conditions::CONFIG_VALIDATED,
            passed,
            (reasons::VALIDATION_SUCCEEDED, reasons::VALIDATION_FAILED),
            if passed { String::new() } else { message },
        ),
        condition(
            conditions::CONFIG_PINNED,
            pinned,
            (
                reasons::NEWEST_RENDER_REJECTED,
                reasons::NEWEST_RENDER_PASSED,
            ),
            String::new(),
        ),
    ]
}

/// `Published=True` (reason `PublicationSucceeded`): the newest publication of the main
/// HAProxyCfg is complete.
#[must_use]
pub fn published_condition(now: &Time) -> Condition {
    Condition {
        type_: conditions::PUBLISHED.into(),
        status: "True".into(),
        reason: reasons::PUBLICATION_SUCCEEDED.into(),
        message: String::new(),
        last_transition_time: now.clone(),
        observed_generation: None,
    }
}

/// `SizeLimitExceeded=False` (reason `WithinSizeLimit`): the newest publication fit, so a
/// `SizeLimitExceeded=True` left by an earlier render is cleared. Written with
/// [`published_condition`] by a queued publication that completes (not by a self-healing
/// repeat of an older render, which says nothing about the newest one).
#[must_use]
pub fn within_size_limit_condition(now: &Time) -> Condition {
    Condition {
        type_: conditions::SIZE_LIMIT_EXCEEDED.into(),
        status: "False".into(),
        reason: reasons::WITHIN_SIZE_LIMIT.into(),
        message: String::new(),
        last_transition_time: now.clone(),
        observed_generation: None,
    }
}

/// `Published=False` for a failure of class `class` that is shown on the HAProxyCfg: a
/// permanent rejection (`PublicationRejected`, `ObjectTooLarge`, `ContentUnavailable`) or a
/// failure an operator must fix (`Forbidden`, `Unauthorized`, `ResourceTypeMissing`), with
/// `message` (what failed and the fix). `None` for classes that are not shown this way.
#[must_use]
pub fn failure_condition(class: ErrorClass, message: &str, now: &Time) -> Option<Condition> {
    let reason = match class {
        ErrorClass::Rejected => reasons::PUBLICATION_REJECTED,
        ErrorClass::TooLarge => reasons::OBJECT_TOO_LARGE,
        ErrorClass::Unbuildable => reasons::CONTENT_UNAVAILABLE,
        ErrorClass::Forbidden => reasons::FORBIDDEN,
        ErrorClass::Unauthorized => reasons::UNAUTHORIZED,
        ErrorClass::MissingResourceType => reasons::RESOURCE_TYPE_MISSING,
        _ => return None,
    };
    Some(Condition {
        type_: conditions::PUBLISHED.into(),
        status: "False".into(),
        reason: reason.into(),
        message: truncate_with_ellipsis(message.to_owned(), 1024),
        last_transition_time: now.clone(),
        observed_generation: None,
    })
}
