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
//!   over the whole render ([`haptic_journal::render_checksum`]), typed as
//!   [`haptic_journal::Checksum`] and constrained by the schema pattern [`CHECKSUM_PATTERN`];
//! - `content`/`entries` have no `minLength` (an empty map file is a valid file);
//! - the status has `podsSynced` (`<pods on spec.checksum>/<pods listed>`) and conditions
//!   [`conditions::SYNCED`], [`conditions::CONFIG_VALIDATED`], [`conditions::CONFIG_PINNED`]
//!   and [`conditions::SIZE_LIMIT_EXCEEDED`], shown by `kubectl get hpcfg`, plus
//!   [`conditions::PUBLISHED`] and [`conditions::VALIDATOR_VERSION_MISMATCH`] (the catalogue:
//!   [`CONDITIONS`]); a pod entry says `rejected: true` when the pod quarantined the render;
//! - auxiliary references include `caFiles`.
//!
//! Serialisation: empty lists and `None` fields are omitted. Write spec and status by replace
//! (resourceVersion-guarded) or server-side apply, not by JSON merge patch: a merge patch does
//! not clear a field it omits (a removed last pod, a cleared `validationError`).

mod auxfiles;
mod haproxycfg;
pub mod labels;
mod rollback;
pub mod secrets;
mod status;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt as _;

pub use auxfiles::{
    AuxiliaryFileStatus, HAProxyCRTListFile, HAProxyCRTListFileSpec, HAProxyGeneralFile,
    HAProxyGeneralFileSpec, HAProxyMapFile, HAProxyMapFileSpec,
};
pub use haproxycfg::{
    AuxiliaryFileReferences, ConfigMetadata, HAProxyCfg, HAProxyCfgSpec, HAProxyCfgStatus,
    ResourceReference, too_large_message,
};
pub use rollback::{RollbackShown, rolled_back_condition};
pub use status::{OperationSummary, PodDeploymentStatus};

/// API group of every haptic custom resource.
pub const GROUP: &str = "haproxy-haptic.org";
/// API version of every haptic custom resource.
pub const VERSION: &str = "v1alpha1";
/// Path of the HAProxy configuration on the pod, written to `HAProxyCfg.spec.path`.
pub const HAPROXY_CONFIG_PATH: &str = "/etc/haproxy/haproxy.cfg";
/// Schema pattern of every checksum field: the text form of [`haptic_journal::Checksum`]. The
/// API server rejects what the controller could not read back.
pub const CHECKSUM_PATTERN: &str = "^sha256:[0-9a-f]{64}$";
/// Schema pattern of `deployedToPods[].syncDuration`: whole milliseconds, e.g. `1250ms`, as the
/// status worker writes it.
pub const DURATION_MS_PATTERN: &str = "^[0-9]+ms$";

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
    /// Whether the newest publication of the main HAProxyCfg is complete: True after a
    /// complete publication; False (with the reason and the fix in the message) after a
    /// permanent rejection, or while a failure that needs an operator (RBAC, credentials)
    /// keeps the publisher retrying.
    pub const PUBLISHED: &str = "Published";
    /// True when a pod's HAProxy major.minor (read through the Dataplane API) differs from the
    /// validator's `haproxy -v`: renders are checked by another HAProxy than the one that runs
    /// them (issue 16). Written by the runtime's version check, not by the publisher.
    pub const VALIDATOR_VERSION_MISMATCH: &str = "ValidatorVersionMismatch";
    /// Whether every live pod runs `spec.checksum`: True when every pod listed in
    /// `deployedToPods` last synced it successfully; False while some pod is deploying, after a
    /// failed sync, when a pod rejected the render permanently (quarantined), or with no pods.
    /// See [`super::HAProxyCfgStatus::synced_condition`]. `kubectl wait
    /// --for=condition=Synced hpcfg/NAME` waits for it.
    pub const SYNCED: &str = "Synced";
    /// Whether the controller's journal takes commits: False while its volume is full,
    /// read-only or failing, or the file was removed (the controller then refuses new input,
    /// keeps the fleet on what it runs, and says the fix in the message). Written by the
    /// runtime's journal watch directly to the API (not through the journal), leader only, best
    /// effort.
    pub const JOURNAL_WRITABLE: &str = "JournalWritable";
    /// Whether an operator's rollback holds the fleet on an earlier render (the annotation
    /// `haproxy-haptic.org/rollback-to`, issue 28). True: the message starts
    /// `render <checksum> is held`, names the annotation's value and the newest validated render
    /// (which `spec.checksum` shows: the spec never moves back); `Synced` then counts a pod on
    /// the held render as synced. False: no hold (ended, or a request was refused, saying why).
    /// Written by the leader from the journaled `deployment.rollback` decision, best effort.
    pub const ROLLED_BACK: &str = "RolledBack";
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
    /// `Published=True`: the newest publication is complete.
    pub const PUBLICATION_SUCCEEDED: &str = "PublicationSucceeded";
    /// `Published=False`: the API server refused an object permanently (400, 422).
    pub const PUBLICATION_REJECTED: &str = "PublicationRejected";
    /// `Published=False`: the render to publish is not in the journal (or not text).
    pub const CONTENT_UNAVAILABLE: &str = "ContentUnavailable";
    /// `Published=False`: RBAC denies a call (403); retried until granted.
    pub const FORBIDDEN: &str = "Forbidden";
    /// `Published=False`: the credentials are refused (401); retried.
    pub const UNAUTHORIZED: &str = "Unauthorized";
    /// `Published=False`: a resource type is not served (CRDs not installed); retried.
    pub const RESOURCE_TYPE_MISSING: &str = "ResourceTypeMissing";
    /// `ValidatorVersionMismatch=True`: some pods run another HAProxy major.minor than the
    /// validator; the message names both versions and the fix.
    pub const HAPROXY_VERSION_DIFFERS: &str = "HAProxyVersionDiffers";
    /// `ValidatorVersionMismatch=False`: every pod that reports a version runs the validator's
    /// major.minor.
    pub const HAPROXY_VERSION_MATCHES: &str = "HAProxyVersionMatches";
    /// `Synced=True`: every live pod's last sync succeeded on `spec.checksum`.
    pub const ALL_PODS_SYNCED: &str = "AllPodsSynced";
    /// `Synced=False`: some live pod has not taken `spec.checksum` yet (another checksum, no
    /// error): a deployment is due or running.
    pub const PODS_PENDING: &str = "PodsPending";
    /// `Synced=False`: some live pod's last sync failed (retried with backoff); the message
    /// names the pods and the errors.
    pub const PODS_FAILED: &str = "PodsFailed";
    /// `Synced=False`: some live pod rejected `spec.checksum` permanently and is quarantined
    /// (retried at its entry's `nextRetryAt`, sooner on a new render, a pod change or the annotation
    /// [`super::labels::RETRY_REJECTED`]); the message names the pods and HAProxy's messages.
    pub const DEPLOYMENT_REJECTED: &str = "DeploymentRejected";
    /// `Synced=False`: the pods that do not run `spec.checksum` run the newest render, which
    /// is too large to publish (`SizeLimitExceeded=True` names it): the spec keeps the last
    /// render that could be published, so no deployment is due; the fix is a smaller render
    /// (issue 27: this was shown as `PodsPending`, which never converges).
    pub const RENDER_TOO_LARGE: &str = "RenderTooLarge";
    /// `Synced=False`: no pod is listed in `deployedToPods` (none discovered, or none reported
    /// on yet).
    pub const NO_PODS: &str = "NoPods";
    /// `JournalWritable=True`: journal commits succeed.
    pub const JOURNAL_WRITABLE: &str = "JournalWritable";
    /// `JournalWritable=False`: the journal's volume is full (`ENOSPC`, `EDQUOT`).
    pub const JOURNAL_FULL: &str = "JournalFull";
    /// `JournalWritable=False`: the journal's volume is read-only (`EROFS`).
    pub const JOURNAL_READ_ONLY: &str = "JournalReadOnly";
    /// `JournalWritable=False`: the journal file was removed, or another I/O error.
    pub const JOURNAL_UNAVAILABLE: &str = "JournalUnavailable";
    /// `RolledBack=True`: the fleet is held on an earlier render.
    pub const ROLLBACK_HELD: &str = "RollbackHeld";
    /// `RolledBack=False`: the hold ended; the fleet gets the newest validated render.
    pub const ROLLBACK_ENDED: &str = "RollbackEnded";
    /// `RolledBack=False`: a rollback request was refused (render not in the journal, fails
    /// `haproxy -c`, no earlier render, not a checksum); the fleet unchanged.
    pub const ROLLBACK_REFUSED: &str = "RollbackRefused";
}

/// Whether `status: "True"` of a condition type is the good state (`Synced`) or the bad one
/// (`SizeLimitExceeded`), for tools that summarise conditions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Polarity {
    /// True is good: the condition holds when all is well.
    Positive,
    /// True is bad: the condition holds when something needs attention.
    Negative,
}

/// One condition type of the catalogue: its type, polarity and the reasons written with each
/// status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConditionSpec {
    /// The condition type (a constant of [`conditions`]).
    pub type_: &'static str,
    /// Whether True is good.
    pub polarity: Polarity,
    /// Reasons written with `status: "True"` (constants of [`reasons`]).
    pub true_reasons: &'static [&'static str],
    /// Reasons written with `status: "False"`, in precedence order where several could apply
    /// (the first that applies is written).
    pub false_reasons: &'static [&'static str],
}

impl ConditionSpec {
    /// Whether `reason` is one this type is written with at `status` (`"True"`/`"False"`).
    #[must_use]
    pub fn allows(&self, status: &str, reason: &str) -> bool {
        match status {
            "True" => self.true_reasons.contains(&reason),
            "False" => self.false_reasons.contains(&reason),
            _ => false,
        }
    }
}

/// The catalogue of every condition haptic writes on a HAProxyCfg, with polarity and reasons
/// (one table for every issue that adds conditions). Each reason belongs to one type and one
/// status; a unit test checks that every reason constant and every condition the code builds
/// are listed here.
pub const CONDITIONS: &[ConditionSpec] = &[
    ConditionSpec {
        type_: conditions::SYNCED,
        polarity: Polarity::Positive,
        true_reasons: &[reasons::ALL_PODS_SYNCED],
        false_reasons: &[
            reasons::DEPLOYMENT_REJECTED,
            reasons::PODS_FAILED,
            reasons::PODS_PENDING,
            reasons::RENDER_TOO_LARGE,
            reasons::NO_PODS,
        ],
    },
    ConditionSpec {
        type_: conditions::PUBLISHED,
        polarity: Polarity::Positive,
        true_reasons: &[reasons::PUBLICATION_SUCCEEDED],
        false_reasons: &[
            reasons::PUBLICATION_REJECTED,
            reasons::OBJECT_TOO_LARGE,
            reasons::CONTENT_UNAVAILABLE,
            reasons::FORBIDDEN,
            reasons::UNAUTHORIZED,
            reasons::RESOURCE_TYPE_MISSING,
        ],
    },
    ConditionSpec {
        type_: conditions::CONFIG_VALIDATED,
        polarity: Polarity::Positive,
        true_reasons: &[reasons::VALIDATION_SUCCEEDED],
        false_reasons: &[reasons::VALIDATION_FAILED],
    },
    ConditionSpec {
        type_: conditions::CONFIG_PINNED,
        polarity: Polarity::Negative,
        true_reasons: &[reasons::NEWEST_RENDER_REJECTED],
        false_reasons: &[reasons::NEWEST_RENDER_PASSED],
    },
    ConditionSpec {
        type_: conditions::SIZE_LIMIT_EXCEEDED,
        polarity: Polarity::Negative,
        true_reasons: &[reasons::OBJECT_TOO_LARGE],
        false_reasons: &[reasons::WITHIN_SIZE_LIMIT],
    },
    ConditionSpec {
        type_: conditions::VALIDATOR_VERSION_MISMATCH,
        polarity: Polarity::Negative,
        true_reasons: &[reasons::HAPROXY_VERSION_DIFFERS],
        false_reasons: &[reasons::HAPROXY_VERSION_MATCHES],
    },
    ConditionSpec {
        type_: conditions::JOURNAL_WRITABLE,
        polarity: Polarity::Positive,
        true_reasons: &[reasons::JOURNAL_WRITABLE],
        false_reasons: &[
            reasons::JOURNAL_FULL,
            reasons::JOURNAL_READ_ONLY,
            reasons::JOURNAL_UNAVAILABLE,
        ],
    },
    ConditionSpec {
        type_: conditions::ROLLED_BACK,
        polarity: Polarity::Negative,
        true_reasons: &[reasons::ROLLBACK_HELD],
        false_reasons: &[reasons::ROLLBACK_REFUSED, reasons::ROLLBACK_ENDED],
    },
];

/// The catalogue entry of condition type `type_`, if haptic writes it.
#[must_use]
pub fn condition_spec(type_: &str) -> Option<&'static ConditionSpec> {
    CONDITIONS.iter().find(|c| c.type_ == type_)
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

/// Insert or update the condition of `condition.type_` in a condition list (keyed by type,
/// order kept).
///
/// When a condition of that type exists with the same `status`, its `lastTransitionTime` is
/// kept (Kubernetes convention: the time only moves when the status changes); reason,
/// message and observedGeneration are replaced. Returns true when the list changed, so the
/// caller can skip a write that would change nothing.
pub fn set_condition(
    conditions: &mut Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
    mut condition: k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition,
) -> bool {
    match conditions.iter_mut().find(|c| c.type_ == condition.type_) {
        Some(existing) => {
            if existing.status == condition.status {
                condition.last_transition_time = existing.last_transition_time.clone();
            }
            if *existing == condition {
                return false;
            }
            *existing = condition;
            true
        }
        None => {
            conditions.push(condition);
            true
        }
    }
}

/// Sets one condition (`type_`, True when `status`, with `reason` and `message`) on the status
/// of the HAProxyCfg `runtime_config` names, merged with the others by type ([`set_condition`]),
/// `observedGeneration` the object's generation: reads the object and writes its status
/// subresource only when the condition changed, again after a 409 (3 attempts in all). For the
/// conditions a component owns outside the publisher (`JournalWritable`,
/// `ValidatorVersionMismatch`).
///
/// `Ok(false)` when the HAProxyCfg does not exist (yet) or the conflicts kept winning.
///
/// # Errors
/// Any other API error.
pub async fn write_cfg_condition(
    client: &kube::Client,
    runtime_config: &haptic_journal::RuntimeConfigRef,
    (type_, status, reason): (&str, bool, &str),
    message: &str,
) -> Result<bool, kube::Error> {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
    let api: kube::Api<HAProxyCfg> =
        kube::Api::namespaced(client.clone(), runtime_config.namespace.as_str());
    let name = runtime_config.name.as_str();
    for _ in 0..3 {
        let Some(mut cfg) = api.get_opt(name).await? else {
            return Ok(false);
        };
        let mut cfg_status = cfg.status.clone().unwrap_or_default();
        let changed = set_condition(
            &mut cfg_status.conditions,
            Condition {
                type_: type_.into(),
                status: if status { "True" } else { "False" }.into(),
                reason: reason.into(),
                message: message.into(),
                last_transition_time: Time(k8s_openapi::jiff::Timestamp::now()),
                observed_generation: cfg.metadata.generation,
            },
        );
        if !changed && cfg.status.is_some() {
            return Ok(true);
        }
        cfg.status = Some(cfg_status);
        match api
            .replace_status(name, &kube::api::PostParams::default(), &cfg)
            .await
        {
            Ok(_) => return Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(false)
}

/// `status.validationError` of an `-invalid` HAProxyCfg: the first error, plus
/// ` (+N more errors)` when there are more; `None` for no errors.
pub fn summarize_validation_errors<S: AsRef<str>>(errors: &[S]) -> Option<String> {
    let first = errors.first()?.as_ref();
    Some(match errors.len() - 1 {
        0 => first.to_owned(),
        1 => format!("{first} (+1 more error)"),
        more => format!("{first} (+{more} more errors)"),
    })
}

#[cfg(test)]
#[allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
    use k8s_openapi::jiff::Timestamp;

    use super::*;

    fn cond(status: &str, reason: &str, at_secs: i64) -> Condition {
        Condition {
            last_transition_time: Time(Timestamp::from_second(at_secs).unwrap_or_default()),
            message: String::new(),
            observed_generation: None,
            reason: reason.into(),
            status: status.into(),
            type_: conditions::CONFIG_PINNED.into(),
        }
    }

    #[test]
    fn transition_time_moves_only_with_the_status() {
        let mut list = Vec::new();
        assert!(set_condition(
            &mut list,
            cond("False", reasons::NEWEST_RENDER_PASSED, 100)
        ));
        assert!(!set_condition(
            &mut list,
            cond("False", reasons::NEWEST_RENDER_PASSED, 200)
        ));
        assert_eq!(
            list[0].last_transition_time,
            cond("False", "", 100).last_transition_time
        );
        assert!(set_condition(
            &mut list,
            cond("True", reasons::NEWEST_RENDER_REJECTED, 300)
        ));
        assert_eq!(list.len(), 1);
        assert_eq!(
            list[0].last_transition_time,
            cond("True", "", 300).last_transition_time
        );
    }

    /// The `const NAME: &str = "Value";` items (of any visibility) of `mod <module> {` in `source`, whatever
    /// the module's visibility (`pub`, `pub(super)`, ...).
    fn consts_of(source: &str, module: &str) -> Vec<(String, String)> {
        let start = source
            .find(&format!(" mod {module} {{"))
            .unwrap_or_else(|| panic!("no mod {module}"));
        let body = &source[start..];
        let body = &body[..body.find("\n}\n").expect("end of the module")];
        // One item per `;`, its words joined: rustfmt may break a long one after the `=`.
        body.split(';')
            .map(|item| item.split_whitespace().collect::<Vec<_>>().join(" "))
            .filter_map(|item| {
                let at = item.rfind("const ")?;
                let (name, rest) = item[at + "const ".len()..].split_once(": &str = \"")?;
                Some((name.to_owned(), rest.split_once('"')?.0.to_owned()))
            })
            .collect()
    }

    fn rust_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).expect("readable src") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                rust_files(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }

    /// One catalogue: every condition type and every reason constant is listed once, with one
    /// type and status; every reason constant the code names is a catalogued condition reason
    /// or an Event reason (`k8s::events::reasons`, `runtime::notify::reasons`, the publisher's
    /// `event_reasons`).
    #[test]
    fn every_condition_reason_the_code_writes_is_in_the_catalogue() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let crd = std::fs::read_to_string(root.join("k8s/crd/mod.rs")).expect("crd source");
        let events = std::fs::read_to_string(root.join("k8s/events.rs")).expect("events source");
        let notify =
            std::fs::read_to_string(root.join("runtime/notify.rs")).expect("notify source");
        let publisher =
            std::fs::read_to_string(root.join("components/publisher/shell/failures.rs"))
                .expect("publisher failures source");
        for (name, value) in consts_of(&crd, "conditions") {
            assert!(
                condition_spec(&value).is_some(),
                "conditions::{name} not catalogued"
            );
        }
        let condition_reasons = consts_of(&crd, "reasons");
        for (name, value) in &condition_reasons {
            let owners: Vec<(&str, &str)> = CONDITIONS
                .iter()
                .flat_map(|c| {
                    [("True", c.true_reasons), ("False", c.false_reasons)]
                        .into_iter()
                        .filter(|(_, rs)| rs.contains(&value.as_str()))
                        .map(move |(st, _)| (c.type_, st))
                })
                .collect();
            // `ObjectTooLarge` is both `Published=False` and `SizeLimitExceeded=True`: one
            // failure, shown on both.
            let max = if value == reasons::OBJECT_TOO_LARGE {
                2
            } else {
                1
            };
            assert!(
                !owners.is_empty() && owners.len() <= max,
                "reasons::{name} ({value}) is in the catalogue {owners:?}"
            );
        }
        let known: std::collections::BTreeSet<String> = condition_reasons
            .into_iter()
            .chain(consts_of(&events, "reasons"))
            .chain(consts_of(&notify, "reasons"))
            .chain(consts_of(&publisher, "event_reasons"))
            .map(|(n, _)| n)
            .collect();
        let mut files = Vec::new();
        rust_files(&root, &mut files);
        let mut used = 0;
        for f in files {
            let text = std::fs::read_to_string(&f).expect("source");
            for (i, _) in text.match_indices("reasons::") {
                let ident: String = text[i + "reasons::".len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_uppercase() || *c == '_')
                    .collect();
                if ident.is_empty() {
                    continue;
                }
                used += 1;
                assert!(
                    known.contains(&ident),
                    "{}: reasons::{ident} is not catalogued",
                    f.display()
                );
            }
        }
        assert!(used > 20, "the scan found the uses ({used})");
        for c in CONDITIONS {
            for r in c.true_reasons.iter().chain(c.false_reasons) {
                assert!(
                    !r.is_empty() && r.chars().next().is_some_and(|ch| ch.is_ascii_uppercase())
                );
            }
        }
    }

    #[test]
    fn validation_error_summary() {
        assert_eq!(summarize_validation_errors::<&str>(&[]), None);
        assert_eq!(summarize_validation_errors(&["a"]).as_deref(), Some("a"));
        assert_eq!(
            summarize_validation_errors(&["a", "b"]).as_deref(),
            Some("a (+1 more error)")
        );
        assert_eq!(
            summarize_validation_errors(&["a", "b", "c"]).as_deref(),
            Some("a (+2 more errors)")
        );
    }
}
