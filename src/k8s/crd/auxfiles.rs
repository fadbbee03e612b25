//! The auxiliary-file custom resources: HAProxyMapFile, HAProxyGeneralFile, HAProxyCRTListFile.

// kube's `printcolumn(...)` repeats `type_ = ...` by design; clippy reads that as a duplicate.
#![allow(clippy::duplicated_attributes)]

use haptic_journal::Checksum;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::status::PodDeploymentStatus;

/// Status of every auxiliary-file object.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuxiliaryFileStatus {
    /// Per-pod state keyed by `podName`; `checksum` is this file's own checksum.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deployed_to_pods: Vec<PodDeploymentStatus>,
    /// `metadata.generation` this status was written for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Conditions keyed by type (e.g. SizeLimitExceeded).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// Spec of a HAProxyMapFile: one map file of a render.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "haproxy-haptic.org",
    version = "v1alpha1",
    kind = "HAProxyMapFile",
    plural = "haproxymapfiles",
    singular = "haproxymapfile",
    shortname = "hpmap",
    namespaced,
    status = "AuxiliaryFileStatus",
    doc = "A map file of a rendered HAProxy configuration.",
    printcolumn(name = "Path", type_ = "string", json_path = ".spec.path"),
    printcolumn(name = "Checksum", type_ = "string", json_path = ".spec.checksum"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct HAProxyMapFileSpec {
    /// Base name of `path`.
    #[schemars(length(min = 1))]
    pub map_name: String,
    /// Path on the pod, e.g. `/etc/haproxy/maps/hosts.map`.
    #[schemars(length(min = 1))]
    pub path: String,
    /// The map's content, or its zstd + base64 form when `compressed`.
    pub entries: String,
    /// `sha256:<hex>` of the uncompressed content.
    #[schemars(with = "String", pattern(super::CHECKSUM_PATTERN))]
    pub checksum: Checksum,
    /// True when `entries` is zstd + base64.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub compressed: bool,
}

/// Spec of a HAProxyGeneralFile: one general file (error page, ...) of a render.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "haproxy-haptic.org",
    version = "v1alpha1",
    kind = "HAProxyGeneralFile",
    plural = "haproxygeneralfiles",
    singular = "haproxygeneralfile",
    shortname = "hpgf",
    namespaced,
    status = "AuxiliaryFileStatus",
    doc = "A general file of a rendered HAProxy configuration.",
    printcolumn(name = "Path", type_ = "string", json_path = ".spec.path"),
    printcolumn(name = "Checksum", type_ = "string", json_path = ".spec.checksum"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct HAProxyGeneralFileSpec {
    /// Base name of `path`.
    #[schemars(length(min = 1))]
    pub file_name: String,
    /// Path on the pod, e.g. `/etc/haproxy/general/503.http`.
    #[schemars(length(min = 1))]
    pub path: String,
    /// The file's content, or its zstd + base64 form when `compressed`.
    pub content: String,
    /// `sha256:<hex>` of the uncompressed content.
    #[schemars(with = "String", pattern(super::CHECKSUM_PATTERN))]
    pub checksum: Checksum,
    /// True when `content` is zstd + base64.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub compressed: bool,
}

/// Spec of a HAProxyCRTListFile: one crt-list of a render.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "haproxy-haptic.org",
    version = "v1alpha1",
    kind = "HAProxyCRTListFile",
    plural = "haproxycrtlistfiles",
    singular = "haproxycrtlistfile",
    shortname = "hpcl",
    namespaced,
    status = "AuxiliaryFileStatus",
    doc = "A crt-list of a rendered HAProxy configuration.",
    printcolumn(name = "Path", type_ = "string", json_path = ".spec.path"),
    printcolumn(name = "Checksum", type_ = "string", json_path = ".spec.checksum"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct HAProxyCRTListFileSpec {
    /// Base name of `path`.
    #[schemars(length(min = 1))]
    pub list_name: String,
    /// Path on the pod, e.g. `/etc/haproxy/general/certs.crtlist`.
    #[schemars(length(min = 1))]
    pub path: String,
    /// The crt-list's content, or its zstd + base64 form when `compressed`.
    pub entries: String,
    /// `sha256:<hex>` of the uncompressed content.
    #[schemars(with = "String", pattern(super::CHECKSUM_PATTERN))]
    pub checksum: Checksum,
    /// True when `entries` is zstd + base64.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub compressed: bool,
}
