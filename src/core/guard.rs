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

/// Called when a drift check found a pod differing from its render: the pod and what differed.
/// The runtime turns it into a Kubernetes Event (`DriftDetected`); the deployer already logs
/// it and counts it.
pub type DriftHook = Arc<dyn Fn(&PodRef, &[String]) + Send + Sync>;
