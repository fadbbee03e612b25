//! The HAProxyCfg custom resource.

// kube's `printcolumn(...)` repeats `type_ = ...` by design; clippy reads that as a duplicate.
#![allow(clippy::duplicated_attributes)]

use haptic_journal::Checksum;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::status::PodDeploymentStatus;

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
    /// Conditions keyed by type: ConfigValidated, ConfigPinned, Published, SizeLimitExceeded.
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
