//! Custom resources of group `haproxy-haptic.org`, version `v1alpha1` (upstream-behaviour.md
//! section 11, with the fixes of DESIGN.md section 3).
//!
//! | kind | plural | short | what it holds |
//! |---|---|---|---|
//! | [`HAProxyCfg`] | `haproxycfgs` | `hpcfg` | the config that passed the render gate; `-invalid` holds a rejected one |
//! | [`HAProxyMapFile`] | `haproxymapfiles` | `hpmap` | one map file |
//! | [`HAProxyGeneralFile`] | `haproxygeneralfiles` | `hpgf` | one general file (error pages, ...) |
//! | [`HAProxyCRTListFile`] | `haproxycrtlistfiles` | `hpcl` | one crt-list |
//!
//! SSL certificates and CA files are core Secrets (type Opaque), see [`secrets`].
//!
//! Deliberate differences from HAPTIC's schemas:
//! - `deployedToPods[].deployedAt` is optional: a pod whose first deployment failed is listed
//!   with its error and no zero timestamp;
//! - `spec.checksum` of a HAProxyCfg and each pod's `checksum` use one format, `sha256:<hex>`
//!   over the whole render ([`crate::core::Checksum::of_render`]);
//! - `content`/`entries` have no `minLength` (an empty map file is a valid file);
//! - the status has `podsSynced` (`<pods on spec.checksum>/<pods listed>`) and conditions
//!   [`conditions::CONFIG_VALIDATED`], [`conditions::CONFIG_PINNED`] and
//!   [`conditions::SIZE_LIMIT_EXCEEDED`], shown by `kubectl get hpcfg`;
//! - auxiliary references include `caFiles`.

mod auxfiles;
mod haproxycfg;
mod status;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt as _;

pub use auxfiles::{
    AuxiliaryFileStatus, HAProxyCRTListFile, HAProxyCRTListFileSpec, HAProxyGeneralFile,
    HAProxyGeneralFileSpec, HAProxyMapFile, HAProxyMapFileSpec,
};
pub use haproxycfg::{
    AuxiliaryFileReferences, ConfigMetadata, HAProxyCfg, HAProxyCfgSpec, HAProxyCfgStatus,
    ResourceReference,
};
pub use status::{OperationSummary, PodDeploymentStatus};

/// API group of every haptic custom resource.
pub const GROUP: &str = "haproxy-haptic.org";
/// API version of every haptic custom resource.
pub const VERSION: &str = "v1alpha1";
/// Path of the HAProxy configuration on the pod, written to `HAProxyCfg.spec.path`.
pub const HAPROXY_CONFIG_PATH: &str = "/etc/haproxy/haproxy.cfg";

/// Condition types (CamelCase, linkerd style).
pub mod conditions {
    /// Verdict of the render gate on the newest render: True = passed.
    pub const CONFIG_VALIDATED: &str = "ConfigValidated";
    /// True while the gate is pinned: the newest render was rejected and the fleet keeps the
    /// last render that passed.
    pub const CONFIG_PINNED: &str = "ConfigPinned";
    /// True when an object is still over the API server's size limit after compression
    /// (413, or a 500 saying the request is too large); the publisher does not retry it.
    pub const SIZE_LIMIT_EXCEEDED: &str = "SizeLimitExceeded";
}

/// Condition reasons (CamelCase).
pub mod reasons {
    /// `ConfigValidated=True`: the newest render passed `haproxy -c`.
    pub const VALIDATION_SUCCEEDED: &str = "ValidationSucceeded";
    /// `ConfigValidated=False`: the newest render was rejected.
    pub const VALIDATION_FAILED: &str = "ValidationFailed";
    /// `ConfigPinned=True`: the newest render was rejected, the spec keeps the last good one.
    pub const NEWEST_RENDER_REJECTED: &str = "NewestRenderRejected";
    /// `ConfigPinned=False`: the newest render passed, nothing is pinned.
    pub const NEWEST_RENDER_PASSED: &str = "NewestRenderPassed";
    /// `SizeLimitExceeded=True`: the object is too large even compressed.
    pub const OBJECT_TOO_LARGE: &str = "ObjectTooLarge";
    /// `SizeLimitExceeded=False`: the last write fit.
    pub const WITHIN_SIZE_LIMIT: &str = "WithinSizeLimit";
}

/// Label and annotation keys.
pub mod labels {
    /// Label on HAProxyCfg objects (main and `-invalid`): the config name.
    pub const CONFIG: &str = "haproxy-haptic.org/config";
    /// Label on auxiliary objects and Secrets: the name of the HAProxyCfg they belong to.
    pub const RUNTIME_CONFIG: &str = "haproxy-haptic.org/runtime-config";
    /// Annotation on every object the controller writes: the leadership term (decimal) of the
    /// writer; a writer never overwrites an object stamped with a newer term (DESIGN.md J7).
    pub const LEADER_TERM: &str = "haproxy-haptic.org/leader-term";
}

/// Conventions of the Secrets that carry SSL certificates and CA files
/// (upstream-behaviour.md 11.3).
pub mod secrets {
    /// Label `haproxy-haptic.org/type` on such Secrets.
    pub const TYPE_LABEL: &str = "haproxy-haptic.org/type";
    /// Value of [`TYPE_LABEL`] for a certificate + key.
    pub const TYPE_SSL_CERTIFICATE: &str = "ssl-certificate";
    /// Value of [`TYPE_LABEL`] for a CA file.
    pub const TYPE_CA_FILE: &str = "ssl-ca-file";
    /// Annotation: `"true"` when the `certificate` data is zstd + base64.
    pub const COMPRESSED_ANNOTATION: &str = "haproxy-haptic.org/compressed";
    /// Annotation: `sha256:<hex>` of the uncompressed content.
    pub const CHECKSUM_ANNOTATION: &str = "haproxy-haptic.org/checksum";
    /// Data key of the PEM content (possibly compressed).
    pub const CERTIFICATE_KEY: &str = "certificate";
    /// Data key of the path on the pod.
    pub const PATH_KEY: &str = "path";
    /// Secret type.
    pub const SECRET_TYPE: &str = "Opaque";
}

/// The four CustomResourceDefinitions, in a fixed order: HAProxyCfg, HAProxyMapFile,
/// HAProxyGeneralFile, HAProxyCRTListFile.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        HAProxyCfg::crd(),
        HAProxyMapFile::crd(),
        HAProxyGeneralFile::crd(),
        HAProxyCRTListFile::crd(),
    ]
}

/// One CRD as a YAML document (no leading `---`), as stored in `deploy/crds/<plural>.yaml`.
///
/// # Errors
/// The YAML serialiser's error; it does not fail for these types in practice.
pub fn crd_yaml(crd: &CustomResourceDefinition) -> Result<String, serde_norway::Error> {
    serde_norway::to_string(crd)
}

/// All four CRDs as one multi-document YAML stream (each document starts with `---`), the
/// output of `haptic crds`.
///
/// # Errors
/// See [`crd_yaml`].
pub fn all_crds_yaml() -> Result<String, serde_norway::Error> {
    let mut out = String::new();
    for crd in crds() {
        out.push_str("---\n");
        out.push_str(&crd_yaml(&crd)?);
    }
    Ok(out)
}
