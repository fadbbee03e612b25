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

/// One auxiliary-file kind: the same status, print columns and five fields (base name, pod path,
/// content, checksum, compressed flag); what differs is the kind's names, its docs and the names
/// of the name and content fields.
macro_rules! aux_file_crd {
    (
        $spec:ident: $spec_doc:tt; kind $kind:tt, $plural:tt, $singular:tt, $short:tt, $doc:tt;
        $name:ident: $name_doc:tt; path: $path_doc:tt; $content:ident: $content_doc:tt;
        compressed: $compressed_doc:tt
    ) => {
        #[doc = $spec_doc]
        #[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
        #[kube(
                    group = "haproxy-haptic.org",
                    version = "v1alpha1",
                    kind = $kind,
                    plural = $plural,
                    singular = $singular,
                    shortname = $short,
                    namespaced,
                    status = "AuxiliaryFileStatus",
                    doc = $doc,
                    printcolumn(name = "Path", type_ = "string", json_path = ".spec.path"),
                    printcolumn(name = "Checksum", type_ = "string", json_path = ".spec.checksum"),
                    printcolumn(
                        name = "Age",
                        type_ = "date",
                        json_path = ".metadata.creationTimestamp"
                    )
                )]
        #[serde(rename_all = "camelCase")]
        pub struct $spec {
            #[doc = $name_doc]
            #[schemars(length(min = 1))]
            pub $name: String,
            #[doc = $path_doc]
            #[schemars(length(min = 1))]
            pub path: String,
            #[doc = $content_doc]
            pub $content: String,
            /// `sha256:<hex>` of the uncompressed content.
            #[schemars(with = "String", pattern(super::CHECKSUM_PATTERN))]
            pub checksum: Checksum,
            #[doc = $compressed_doc]
            #[serde(default, skip_serializing_if = "std::ops::Not::not")]
            pub compressed: bool,
        }
    };
}

aux_file_crd! {
    HAProxyMapFileSpec: " Spec of a HAProxyMapFile: one map file of a render.";
    kind "HAProxyMapFile", "haproxymapfiles", "haproxymapfile", "hpmap", "A map file of a rendered HAProxy configuration.";
    map_name: " Base name of `path`."; path: " Path on the pod, e.g. `/etc/haproxy/maps/hosts.map`."; entries: " The map's content, or its zstd + base64 form when `compressed`."; compressed: " True when `entries` is zstd + base64."
}

aux_file_crd! {
    HAProxyGeneralFileSpec: " Spec of a HAProxyGeneralFile: one general file (error page, ...) of a render.";
    kind "HAProxyGeneralFile", "haproxygeneralfiles", "haproxygeneralfile", "hpgf", "A general file of a rendered HAProxy configuration.";
    file_name: " Base name of `path`."; path: " Path on the pod, e.g. `/etc/haproxy/general/503.http`."; content: " The file's content, or its zstd + base64 form when `compressed`."; compressed: " True when `content` is zstd + base64."
}

aux_file_crd! {
    HAProxyCRTListFileSpec: " Spec of a HAProxyCRTListFile: one crt-list of a render.";
    kind "HAProxyCRTListFile", "haproxycrtlistfiles", "haproxycrtlistfile", "hpcl", "A crt-list of a rendered HAProxy configuration.";
    list_name: " Base name of `path`."; path: " Path on the pod, e.g. `/etc/haproxy/general/certs.crtlist`."; entries: " The crt-list's content, or its zstd + base64 form when `compressed`."; compressed: " True when `entries` is zstd + base64."
}
