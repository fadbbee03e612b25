//! Label and annotation keys.

/// Label on HAProxyCfg objects (main and `-invalid`): the config name.
pub const CONFIG: &str = "haproxy-haptic.org/config";
/// Label on auxiliary objects and Secrets: the name of the HAProxyCfg they belong to.
pub const RUNTIME_CONFIG: &str = "haproxy-haptic.org/runtime-config";
/// Annotation on every object the controller writes: the leadership term (decimal) of the
/// writer; a writer never overwrites an object stamped with a newer term (DESIGN.md J7).
pub const LEADER_TERM: &str = "haproxy-haptic.org/leader-term";
/// Annotation an operator sets on the main HAProxyCfg to retry the renders pods rejected
/// permanently (`Synced=False/DeploymentRejected`): any value; each new value is one
/// request (`deployment.retry.request`), a value already seen is not (e.g.
/// `kubectl annotate --overwrite hpcfg/NAME haproxy-haptic.org/retry-rejected="$(date +%s)"`).
pub const RETRY_REJECTED: &str = "haproxy-haptic.org/retry-rejected";
/// Annotation an operator sets on the main HAProxyCfg to hold the fleet on an earlier
/// render (issue 28): a render checksum `sha256:<hex>` from the journal, or `previous` (the
/// render validated before the newest, fixed to its checksum when the scheduler reads the
/// request). Newer renders are validated and journaled meanwhile, not deployed; removing
/// the annotation deploys the newest. The condition `RolledBack` says what holds
/// (`kubectl annotate hpcfg/NAME haproxy-haptic.org/rollback-to=previous`).
pub const ROLLBACK_TO: &str = "haproxy-haptic.org/rollback-to";
