//! The HAProxyCfg custom resource.

// kube's `printcolumn(...)` repeats `type_ = ...` by design; clippy reads that as a duplicate.
#![allow(clippy::duplicated_attributes)]

use haptic_journal::Checksum;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::status::PodDeploymentStatus;
use crate::core::text::truncate_with_ellipsis;

/// Spec of a HAProxyCfg: the HAProxy configuration of one render.
///
/// On `<config>-haproxycfg` it only ever holds a render that passed the gate; on
/// `<config>-haproxycfg-invalid` it holds the rejected render.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "haproxy-haptic.org",
    version = "v1alpha1",
    kind = "HAProxyCfg",
    plural = "haproxycfgs",
    singular = "haproxycfg",
    shortname = "hpcfg",
    namespaced,
    status = "HAProxyCfgStatus",
    doc = "A rendered HAProxy configuration and where it is deployed.",
    printcolumn(name = "Checksum", type_ = "string", json_path = ".spec.checksum"),
    printcolumn(
        name = "Pods",
        type_ = "string",
        description = "pods whose last sync succeeded on spec.checksum / pods known",
        json_path = ".status.podsSynced"
    ),
    printcolumn(
        name = "Synced",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Synced\")].status"
    ),
    printcolumn(
        name = "ConfigValidated",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"ConfigValidated\")].status"
    ),
    printcolumn(
        name = "ConfigPinned",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"ConfigPinned\")].status"
    ),
    printcolumn(
        name = "Size",
        type_ = "integer",
        priority = 1,
        json_path = ".status.metadata.totalSize"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct HAProxyCfgSpec {
    /// Path of the configuration on the pod, `/etc/haproxy/haproxy.cfg`.
    #[schemars(length(min = 1))]
    pub path: String,
    /// The configuration text, or its zstd + base64 form when `compressed`.
    pub content: String,
    /// `sha256:<hex>` of the whole render (config and every auxiliary file, uncompressed).
    #[schemars(with = "String", pattern(super::CHECKSUM_PATTERN))]
    pub checksum: Checksum,
    /// True when `content` is zstd + base64.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub compressed: bool,
}

/// Status of a HAProxyCfg.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HAProxyCfgStatus {
    /// Per-pod deployment state, keyed by `podName`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deployed_to_pods: Vec<PodDeploymentStatus>,
    /// `<pods whose last sync succeeded on spec.checksum>/<pods listed>`, e.g. `3/3`; a pod
    /// whose last sync failed is not counted; see [`HAProxyCfgStatus::refresh_pods_synced`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods_synced: Option<String>,
    /// The auxiliary objects and Secrets of the published render.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auxiliary_files: Option<AuxiliaryFileReferences>,
    /// Sizes and times of the published render.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ConfigMetadata>,
    /// On `-invalid` only: the first validation error plus `(+N more errors)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validation_error: Option<String>,
    /// `metadata.generation` this status was written for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Conditions keyed by type: Synced, ConfigValidated, ConfigPinned, Published,
    /// SizeLimitExceeded, ValidatorVersionMismatch (see [`super::CONDITIONS`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

impl HAProxyCfgStatus {
    /// Recompute `podsSynced` from `deployedToPods`: entries whose last sync succeeded (no
    /// `lastError`) on `spec_checksum`, out of all entries. A failed sync names the checksum
    /// it tried; that pod is not synced.
    pub fn refresh_pods_synced(&mut self, spec_checksum: &Checksum) {
        let on_spec = self
            .deployed_to_pods
            .iter()
            .filter(|p| p.checksum.as_ref() == Some(spec_checksum) && p.last_error.is_none())
            .count();
        self.pods_synced = Some(format!("{on_spec}/{}", self.deployed_to_pods.len()));
    }

    /// The `Synced` condition of a main HAProxyCfg whose spec holds `spec_checksum` at
    /// `generation` (its `observedGeneration`), stamped `now` (see [`super::set_condition`]:
    /// the time moves only with the status).
    ///
    /// The live pods are the pods `deployedToPods` lists: a pod gets its entry when discovery
    /// first lists it (no checksum yet: pending, issue 27) or from the first report of a
    /// deployment to it (the scheduler deploys to every pod discovery lists, and the deployer
    /// reports every pod it synced, a pod that already ran the render included), and loses it
    /// when discovery no longer lists it or it terminated. So a scale-up is `PodsPending`,
    /// naming the new pods, until each has been configured.
    ///
    /// While a rollback holds (`RolledBack=True`, [`HAProxyCfgStatus::held_render`]), the held
    /// render takes the place of `spec_checksum` below.
    ///
    /// Per entry: *synced* when its last sync succeeded on `spec_checksum`; *rejected* when it
    /// rejected `spec_checksum` permanently (`rejected: true`, quarantined); *failed* when its
    /// last sync failed otherwise (any checksum: retried); *pending* otherwise (another
    /// checksum, no error: deploying). The condition is True/`AllPodsSynced` when every entry
    /// is synced and there is at least one; else False with the first reason that applies, in
    /// this precedence: `DeploymentRejected` (retried at the quarantine's backoff, may need an
    /// operator or a new render), then `PodsFailed` (retried, may need an operator), then
    /// `PodsPending` (will converge by itself), then `RenderTooLarge` (the pods run the newest
    /// render, which `SizeLimitExceeded=True` names: it needs a smaller render), then `NoPods`. The message names the pods concerned (sorted by name) and, for
    /// rejected and failed pods, their errors; at most 1024 bytes. Deterministic: the same
    /// status gives the same condition, so a no-op round writes nothing.
    #[must_use]
    pub fn synced_condition(
        &self,
        spec_checksum: &Checksum,
        generation: Option<i64>,
        now: &Time,
    ) -> Condition {
        use super::{conditions, reasons};
        let (mut rejected, mut failed, mut pending) = (Vec::new(), Vec::new(), Vec::new());
        let mut unpublished = Vec::new();
        let too_large = self.too_large_render();
        // A rollback holds: the pods are to run the held render, not the spec's (newest).
        let spec_checksum = &self.held_render().unwrap_or(*spec_checksum);
        let mut pods: Vec<&PodDeploymentStatus> = self.deployed_to_pods.iter().collect();
        pods.sort_by(|a, b| a.pod_name.cmp(&b.pod_name));
        for p in &pods {
            let on_spec = p.checksum.as_ref() == Some(spec_checksum);
            let error = p.last_error.as_deref();
            match error {
                None if on_spec => {}
                Some(e) if on_spec && p.rejected == Some(true) => rejected.push((p, e)),
                Some(e) => failed.push((p, e)),
                None if p.checksum.is_some() && p.checksum == too_large => unpublished.push(p),
                None => pending.push(p),
            }
        }
        let names = |ps: &[(&&PodDeploymentStatus, &str)]| {
            ps.iter()
                .map(|(p, e)| format!("{}: {e}", p.pod_name))
                .collect::<Vec<_>>()
                .join("; ")
        };
        let total = pods.len();
        let (status, reason, message) = if !rejected.is_empty() {
            (
                "False",
                reasons::DEPLOYMENT_REJECTED,
                format!(
                    "{} of {total} pods rejected {spec_checksum} permanently and keep what they ran; retried at each entry's nextRetryAt, sooner on a new render, a pod change or the annotation {}: {}",
                    rejected.len(),
                    super::labels::RETRY_REJECTED,
                    names(&rejected)
                ),
            )
        } else if !failed.is_empty() {
            (
                "False",
                reasons::PODS_FAILED,
                format!(
                    "the last sync of {} of {total} pods failed (retried): {}",
                    failed.len(),
                    names(&failed)
                ),
            )
        } else if !pending.is_empty() {
            (
                "False",
                reasons::PODS_PENDING,
                format!(
                    "{} of {total} pods run {spec_checksum}; deploying to {}",
                    total - pending.len(),
                    pending
                        .iter()
                        .map(|p| p.pod_name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
        } else if let Some(render) = too_large.filter(|_| !unpublished.is_empty()) {
            (
                "False",
                reasons::RENDER_TOO_LARGE,
                format!(
                    "{} of {total} pods run {render}, which is too large to publish (SizeLimitExceeded); spec.checksum keeps {spec_checksum}: make the render smaller ({})",
                    unpublished.len(),
                    unpublished
                        .iter()
                        .map(|p| p.pod_name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
        } else if total == 0 {
            (
                "False",
                reasons::NO_PODS,
                "no HAProxy pod is listed in deployedToPods".to_owned(),
            )
        } else {
            (
                "True",
                reasons::ALL_PODS_SYNCED,
                format!("{total} of {total} pods run {spec_checksum}"),
            )
        };
        Condition {
            type_: conditions::SYNCED.into(),
            status: status.into(),
            reason: reason.into(),
            message: truncate_with_ellipsis(message, 1024),
            last_transition_time: now.clone(),
            observed_generation: generation,
        }
    }

    /// The render `SizeLimitExceeded=True` names ([`too_large_message`]), if any: the newest
    /// render, too large to publish, which the pods may run while the spec keeps an older one.
    #[must_use]
    pub fn too_large_render(&self) -> Option<Checksum> {
        let c = self
            .conditions
            .iter()
            .find(|c| c.type_ == super::conditions::SIZE_LIMIT_EXCEEDED && c.status == "True")?;
        let (sum, _) = c.message.strip_prefix("render ")?.split_once(' ')?;
        Checksum::parse(sum).ok()
    }

    /// The render a rollback holds the fleet on: the checksum `RolledBack=True` names (its
    /// message starts `render <checksum> is held`, [`super::RollbackShown`]), if any.
    #[must_use]
    pub fn held_render(&self) -> Option<Checksum> {
        super::RollbackShown::of(&self.conditions)
            .held
            .map(|(_, c)| c)
    }

    /// Sets [`HAProxyCfgStatus::synced_condition`] in `conditions`; returns whether it changed.
    pub fn refresh_synced(
        &mut self,
        spec_checksum: &Checksum,
        generation: Option<i64>,
        now: &Time,
    ) -> bool {
        let c = self.synced_condition(spec_checksum, generation, now);
        super::set_condition(&mut self.conditions, c)
    }
}

/// The message of `SizeLimitExceeded=True` for `render`, whose publication failed with `what`
/// (the error and the fix): `render <checksum> is not published: <what>`;
/// [`HAProxyCfgStatus::too_large_render`] reads the checksum back.
#[must_use]
pub fn too_large_message(render: Checksum, what: &str) -> String {
    format!("render {render} is not published: {what}")
}

/// References to the objects that publish a render's auxiliary files (each list sorted by name).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuxiliaryFileReferences {
    /// HAProxyMapFile objects.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub map_files: Vec<ResourceReference>,
    /// Secrets holding certificates.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ssl_certificates: Vec<ResourceReference>,
    /// Secrets holding CA files.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ca_files: Vec<ResourceReference>,
    /// HAProxyGeneralFile objects.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub general_files: Vec<ResourceReference>,
    /// HAProxyCRTListFile objects.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub crt_list_files: Vec<ResourceReference>,
}

/// A reference to a namespaced object.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceReference {
    /// Kind, e.g. `HAProxyMapFile` or `Secret`.
    #[schemars(length(min = 1))]
    pub kind: String,
    /// Object name.
    #[schemars(length(min = 1))]
    pub name: String,
    /// Object namespace; the referring object's namespace when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// Sizes and times of the published render.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMetadata {
    /// Bytes of the published render as stored: `spec.content` plus the content of every
    /// auxiliary object and Secret it references (each compressed size when compressed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub total_size: Option<i64>,
    /// Bytes of the uncompressed configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub content_size: Option<i64>,
    /// When the render was produced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rendered_at: Option<Time>,
    /// When the render passed (or failed) validation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validated_at: Option<Time>,
}
