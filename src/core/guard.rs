//! The hooks every writer is given: the Lease-validity check before each external write
//! (DESIGN.md J7) and the drift report callback. Traits and types only; the runtime provides the
//! implementations over its Lease (`k8s::lease`) and its Kubernetes Events (`k8s::events`).

use std::sync::Arc;

use haptic_journal::PodRef;

/// The Lease-validity check before every Dataplane or Kubernetes write (DESIGN.md J7): `true`
/// while the Lease is held with margin. The runtime provides one over its Lease; tests pass
/// [`AlwaysValid`].
pub trait LeaseGuard: Send + Sync + std::fmt::Debug {
    /// Whether this replica may still write.
    fn is_valid(&self) -> bool;
}

/// A guard that always allows writes (single replica without election, tests).
#[derive(Clone, Copy, Debug, Default)]
pub struct AlwaysValid;

impl LeaseGuard for AlwaysValid {
    fn is_valid(&self) -> bool {
        true
    }
}

/// What the deployer tells an operator about one pod, beyond the deployment's outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeployerNotice {
    /// A drift check found the pod differing from its render: what differed (`config`,
    /// `file maps/hosts.map`).
    Drift(Vec<String>),
    /// Server changes the runtime API applies without a reload went by a transaction with a
    /// reload: the pod's configuration has no admin stats socket (`stats socket <path> level
    /// admin` in `global` is the fix). Once per deployment and pod.
    NoRuntimeApi,
}

/// Called with the pod and a [`DeployerNotice`]. The runtime turns each into a Kubernetes Event
/// (`DriftDetected`, `NoRuntimeApi`); the deployer already logs it and counts it.
pub type NoticeHook = Arc<dyn Fn(&PodRef, &DeployerNotice) + Send + Sync>;
