//! Status types shared by every haptic custom resource.

use haptic_journal::{Checksum, ReloadId};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One pod's deployment state, an entry of `status.deployedToPods` (keyed by `podName`,
/// unordered).
///
/// On a HAProxyCfg, `checksum` is the render checksum the pod runs (the same format as
/// `spec.checksum`); on an auxiliary object it is the file's own checksum. Only `podName` is
/// required: `deployedAt` is absent until a deployment to the pod succeeded.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodDeploymentStatus {
    /// Name of the HAProxy pod.
    #[schemars(length(min = 1))]
    pub pod_name: String,
    /// Namespace of the pod (always written by the controller).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// `sha256:<hex>` of what the pod runs; with `lastError`, the render its last sync tried
    /// (the pod keeps what it ran before); absent for a discovered pod not synced yet (counted
    /// as pending in `Synced`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>", pattern(super::CHECKSUM_PATTERN))]
    pub checksum: Option<Checksum>,
    /// When the pod last took this checksum successfully; absent if it never did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployed_at: Option<Time>,
    /// When the last reload triggered by a deployment to this pod was requested.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_reload_at: Option<Time>,
    /// Reload-ID of that reload.
    #[serde(
        default,
        rename = "lastReloadID",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<String>")]
    pub last_reload_id: Option<ReloadId>,
    /// Duration of the last sync in whole milliseconds, e.g. `1250ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(super::DURATION_MS_PATTERN))]
    pub sync_duration: Option<String>,
    /// Configuration-version conflicts (409) retried during the last sync.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub version_conflict_retries: Option<i64>,
    /// True when the last sync fell back to a raw push after a failed fine-grained attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback_used: Option<bool>,
    /// How the last successful sync applied the configuration: `fine_grained`, `runtime`,
    /// `raw_initial`, `raw_threshold`, `raw_fallback`, `raw_unmodelled`, `raw_resync` (the
    /// pod's Dataplane API held a configuration its file did not, after a failed reload) or
    /// `no_runtime_api` (server changes reloaded: the configuration has no admin stats socket).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_mode: Option<String>,
    /// What the last sync changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_operation_summary: Option<OperationSummary>,
    /// Error of the last failed sync; cleared by a success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// True when the pod's Dataplane API rejected `checksum` permanently (400/422 on the
    /// configuration push, again after the pod's files were synced again; `lastError` holds
    /// HAProxy's message): the render is quarantined for this pod, which keeps running what it
    /// ran, and is retried at `nextRetryAt` (sooner on a new render, a pod change, or the
    /// annotation `haproxy-haptic.org/retry-rejected` on the HAProxyCfg). Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejected: Option<bool>,
    /// With `rejected`: when the controller sends the quarantined render to the pod again
    /// (`--quarantine-retry-initial`, default the drift interval, after the first rejection,
    /// doubling per rejection in a row up to `--quarantine-retry-max`, default 1 h; journaled,
    /// so a restart of the replica keeps it). Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_retry_at: Option<Time>,
    /// Failed syncs in a row; 0 after a success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub consecutive_errors: Option<i64>,
    /// When `lastError` happened: the newest failed sync's time, with microseconds (RFC 3339,
    /// e.g. `2026-12-04T02:00:00.123000Z`; upstream writes whole seconds). The precision is what
    /// tells a replayed report of the same failure (after a restart: already counted) from a new
    /// failure with the same message (counted in `consecutiveErrors`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error_at: Option<MicroTime>,
}

/// Counts of what a sync changed (all counts, at least 0).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OperationSummary {
    /// Dataplane API operations performed.
    #[serde(default, rename = "totalAPIOperations")]
    #[schemars(range(min = 0))]
    pub total_api_operations: i64,
    /// Backends added.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub backends_added: i64,
    /// Backends removed.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub backends_removed: i64,
    /// Backends modified.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub backends_modified: i64,
    /// Servers added.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub servers_added: i64,
    /// Servers removed.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub servers_removed: i64,
    /// Servers modified.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub servers_modified: i64,
    /// Frontends added.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub frontends_added: i64,
    /// Frontends removed.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub frontends_removed: i64,
    /// Frontends modified.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub frontends_modified: i64,
}
