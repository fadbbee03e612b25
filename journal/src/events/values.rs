//! The values events carry: correlation, object references, deployment reasons, sync metadata
//! and gate verdicts (re-exported from [`crate::events`]).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::ids::{
    Checksum, CorrelationId, EndpointUrl, EventId, Generation, HaproxyVersion, Namespace,
    ObjectName, ObjectUid, ReloadId,
};

/// Correlation of an event in a reconciliation chain (HAPTIC `Correlation`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Correlation {
    /// This event's own unique id.
    pub event_id: EventId,
    /// The chain this event belongs to; `None` for events outside a chain.
    pub correlation_id: Option<CorrelationId>,
    /// The event id of the direct cause; `None` at the start of a chain.
    pub causation_id: Option<EventId>,
}

impl Correlation {
    /// A correlation with just an event id (no chain).
    pub fn new(event_id: impl Into<String>) -> Self {
        Correlation {
            event_id: EventId::new(event_id),
            correlation_id: None,
            causation_id: None,
        }
    }
}

/// A pod, by namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PodRef {
    /// Pod namespace.
    pub namespace: Namespace,
    /// Pod name.
    pub name: ObjectName,
}

/// The published HAProxyCfg a deployment or status belongs to (`<config-name>-haproxycfg`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RuntimeConfigRef {
    /// Namespace of the HAProxyCfg.
    pub namespace: Namespace,
    /// Name of the HAProxyCfg.
    pub name: ObjectName,
}

/// The config identity the publications belong to (DESIGN.md section 1, "Identity and names").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigIdentity {
    /// `--config-name`.
    pub name: ObjectName,
    /// The controller's namespace.
    pub namespace: Namespace,
    /// Uid of the render source object (ConfigMap/Secret), when there is one.
    pub source_uid: Option<ObjectUid>,
    /// Generation of the render source object, when there is one.
    pub source_generation: Option<Generation>,
}

/// One HAProxy pod's Dataplane API endpoint, as discovery reports it.
///
/// Credentials are deliberately absent: they stay in the Secret they came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    /// Dataplane API base URL.
    pub url: EndpointUrl,
    /// The pod behind it.
    pub pod: PodRef,
    /// HAProxy version detected through `/v3/info`, when known.
    pub detected_version: Option<HaproxyVersion>,
}

/// Why a deployment was scheduled (DESIGN.md section 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DeploymentCause {
    /// A render passed validation.
    ConfigValidation,
    /// The pod set changed.
    PodDiscovery,
    /// Validation failed; the last passed render is redeployed.
    ValidationFallback,
    /// The drift timer fired.
    DriftPrevention,
    /// This replica became leader.
    BecameLeader,
    /// A render a pod rejected permanently is retried after its quarantine backoff (issue 27;
    /// appended in schema 3: files written before decode unchanged, an older binary refuses
    /// an event that carries it).
    QuarantineRetry,
    /// An operator's rollback (the annotation `haproxy-haptic.org/rollback-to`) began, moved or
    /// ended: the fleet gets the held render, or the newest again (issue 28; appended in
    /// schema 4).
    Rollback,
}

/// A deployment reason: a cause, optionally retried after a deployment timeout.
///
/// Text form: `config_validation`, `pod_discovery`, `validation_fallback`, `drift_prevention`,
/// `became_leader`, `quarantine_retry`, `rollback`, each optionally suffixed `_timeout_retry`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DeploymentReason {
    /// The cause.
    pub cause: DeploymentCause,
    /// Whether this is the retry after a deployment timeout.
    pub timeout_retry: bool,
}

impl DeploymentReason {
    /// The stable text form.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        use DeploymentCause as C;
        match (self.cause, self.timeout_retry) {
            (C::ConfigValidation, false) => "config_validation",
            (C::PodDiscovery, false) => "pod_discovery",
            (C::ValidationFallback, false) => "validation_fallback",
            (C::DriftPrevention, false) => "drift_prevention",
            (C::BecameLeader, false) => "became_leader",
            (C::ConfigValidation, true) => "config_validation_timeout_retry",
            (C::PodDiscovery, true) => "pod_discovery_timeout_retry",
            (C::ValidationFallback, true) => "validation_fallback_timeout_retry",
            (C::DriftPrevention, true) => "drift_prevention_timeout_retry",
            (C::BecameLeader, true) => "became_leader_timeout_retry",
            (C::QuarantineRetry, false) => "quarantine_retry",
            (C::QuarantineRetry, true) => "quarantine_retry_timeout_retry",
            (C::Rollback, false) => "rollback",
            (C::Rollback, true) => "rollback_timeout_retry",
        }
    }

    /// Parses the text form; `None` for anything else.
    #[must_use]
    pub fn parse(text: &str) -> Option<DeploymentReason> {
        let (base, timeout_retry) = match text.strip_suffix("_timeout_retry") {
            Some(b) => (b, true),
            None => (text, false),
        };
        let cause = match base {
            "config_validation" => DeploymentCause::ConfigValidation,
            "pod_discovery" => DeploymentCause::PodDiscovery,
            "validation_fallback" => DeploymentCause::ValidationFallback,
            "drift_prevention" => DeploymentCause::DriftPrevention,
            "became_leader" => DeploymentCause::BecameLeader,
            "quarantine_retry" => DeploymentCause::QuarantineRetry,
            "rollback" => DeploymentCause::Rollback,
            _ => return None,
        };
        Some(DeploymentReason {
            cause,
            timeout_retry,
        })
    }
}

impl fmt::Display for DeploymentReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Added/removed/modified counts of one configuration section.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeCounts {
    /// Objects added.
    pub added: u32,
    /// Objects removed.
    pub removed: u32,
    /// Objects modified.
    pub modified: u32,
}

/// Operation counts of one endpoint sync (HAPTIC `OperationCounts`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperationCounts {
    /// Total Dataplane API operations.
    pub total_api_operations: u32,
    /// Backends.
    pub backends: ChangeCounts,
    /// Servers.
    pub servers: ChangeCounts,
    /// Frontends.
    pub frontends: ChangeCounts,
    /// Map files.
    pub maps: ChangeCounts,
    /// SSL certificates.
    pub ssl_certs: ChangeCounts,
    /// General files.
    pub general_files: ChangeCounts,
}

/// How one endpoint sync applied a configuration change (HAPTIC `SyncMode`, plus
/// `raw_unmodelled`). `fallback_used` is true only for [`SyncMode::RawFallback`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SyncMode {
    /// One configuration transaction (exactly one reload at commit), or nothing to change.
    FineGrained,
    /// Server updates through the Dataplane API's server endpoints, outside a transaction,
    /// applied at runtime by the API (no reload).
    Runtime,
    /// A raw push because the pod was at configuration version 1 (fresh).
    RawInitial,
    /// A raw push because the change had more operations than `raw_push_threshold`.
    RawThreshold,
    /// A raw push after the fine-grained attempt failed (transaction aborted).
    RawFallback,
    /// A raw push because the change touches an object the structural comparison does not
    /// model (never guessed).
    RawUnmodelled,
    /// A raw push because the pod's Dataplane API holds another configuration in memory than
    /// its file (a reload failed: the API restored the file, kept its in-memory one; schema 2).
    RawResync,
    /// A transaction with one reload for changes the runtime API would apply without one:
    /// the pod's configuration has no admin stats socket (schema 2).
    NoRuntimeApi,
}

impl SyncMode {
    /// The stable name (`fine_grained`, `runtime`, `raw_initial`, `raw_threshold`,
    /// `raw_fallback`, `raw_unmodelled`), used in the pod status and as a metric label.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            SyncMode::FineGrained => "fine_grained",
            SyncMode::Runtime => "runtime",
            SyncMode::RawInitial => "raw_initial",
            SyncMode::RawThreshold => "raw_threshold",
            SyncMode::RawFallback => "raw_fallback",
            SyncMode::RawUnmodelled => "raw_unmodelled",
            SyncMode::RawResync => "raw_resync",
            SyncMode::NoRuntimeApi => "no_runtime_api",
        }
    }

    /// Every mode, in declaration order.
    pub const ALL: [SyncMode; 8] = [
        SyncMode::FineGrained,
        SyncMode::Runtime,
        SyncMode::RawInitial,
        SyncMode::RawThreshold,
        SyncMode::RawFallback,
        SyncMode::RawUnmodelled,
        SyncMode::RawResync,
        SyncMode::NoRuntimeApi,
    ];

    /// True for the raw-push modes.
    #[must_use]
    pub fn is_raw(self) -> bool {
        !matches!(self, SyncMode::FineGrained | SyncMode::Runtime)
    }
}

impl fmt::Display for SyncMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What one endpoint sync did (HAPTIC `SyncMetadata`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncMetadata {
    /// Whether HAProxy reloaded.
    pub reload_triggered: bool,
    /// The `Reload-ID`, when a reload happened.
    pub reload_id: Option<ReloadId>,
    /// Duration of the sync in milliseconds.
    pub sync_duration_ms: u64,
    /// 409 version conflicts retried.
    pub version_conflict_retries: u32,
    /// Whether a raw configuration push was used as the fallback of a failed fine-grained
    /// attempt (true only for `SyncMode::RawFallback`).
    pub fallback_used: bool,
    /// How the configuration was applied; `None` for a failed sync or an event that reports
    /// no sync (a deployment given up).
    pub sync_mode: Option<SyncMode>,
    /// Operation counts.
    pub operation_counts: OperationCounts,
    /// The error, when the sync failed.
    pub error: Option<String>,
    /// The failure is a permanent rejection of the render by the pod's Dataplane API (a
    /// 400/422 on the configuration push that persisted after the pod's files were synced
    /// again): the render is quarantined for this pod (retried with backoff, sooner on a new
    /// render, a pod change or the `haproxy-haptic.org/retry-rejected` annotation). False on
    /// success.
    pub rejected: bool,
}

/// What the scheduler decided on a rollback request ([`crate::Event::DeploymentRollback`],
/// issue 28; appended in schema 4). Variant order is the bincode tag.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RollbackChange {
    /// The fleet is held on `render` (a new hold, or the hold moved to another render): it was
    /// validated again with `haproxy -c` and is deployed like any render; newer renders are
    /// validated and journaled but not deployed while it holds.
    Held {
        /// The annotation's value (`sha256:<hex>` or `previous`).
        value: String,
        /// The held render.
        render: Checksum,
        /// The newest validated render (what the fleet would run without the hold).
        newest: Option<Checksum>,
    },
    /// The hold ended (the annotation was removed): the fleet gets the newest validated render.
    Released {
        /// The render that was held.
        render: Checksum,
        /// The newest validated render, deployed now.
        newest: Option<Checksum>,
    },
    /// A request was refused and nothing changed: the named render is not in the journal, it
    /// failed `haproxy -c`, there is no earlier render, or the value is not a checksum.
    Refused {
        /// The annotation's value.
        value: String,
        /// Why, naming the fix.
        reason: String,
        /// The hold that stays, if one did: its annotation value and render.
        held: Option<(String, Checksum)>,
    },
    /// The hold continues, said again for the condition (no Kubernetes Event): at each new
    /// leader term and when a newer render is validated during the hold (`newest` moved).
    Holding {
        /// The annotation's value.
        value: String,
        /// The held render.
        render: Checksum,
        /// The newest validated render.
        newest: Option<Checksum>,
    },
}

/// Verdict of the render gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum GateVerdict {
    /// The render passed `haproxy -c`; the gate releases it.
    Pass,
    /// The render failed; the gate stays pinned to the last passed render.
    Fail,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_round_trip() {
        for cause in [
            DeploymentCause::ConfigValidation,
            DeploymentCause::PodDiscovery,
            DeploymentCause::ValidationFallback,
            DeploymentCause::DriftPrevention,
            DeploymentCause::BecameLeader,
            DeploymentCause::QuarantineRetry,
            DeploymentCause::Rollback,
        ] {
            for timeout_retry in [false, true] {
                let r = DeploymentReason {
                    cause,
                    timeout_retry,
                };
                assert_eq!(DeploymentReason::parse(r.as_str()), Some(r));
            }
        }
        assert_eq!(DeploymentReason::parse("nope"), None);
    }
}
