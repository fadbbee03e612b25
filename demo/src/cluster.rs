//! The demo's cluster: a fleet of the test kit (`haptic_testkit::Fleet`, on the sandbox's peers:
//! the Kubernetes API emulator, the HAProxy pods registered as Running, Ready Pod objects, the
//! Dataplane credentials Secret, the controller's four CRDs), and a kubeconfig for the controller
//! in the demo's work directory.

use std::path::Path;
use std::time::Duration;

use haptic_testkit::{Fleet, FleetConfig, Peers};
use haptic_tools::sandbox::cluster;

use super::DemoError;

/// Namespace of the Pod objects, the Secret, the Lease and the published objects.
pub const NAMESPACE: &str = cluster::NAMESPACE;
/// The pods' label (the controller's `--pod-selector`).
pub const POD_LABEL: (&str, &str) = cluster::POD_LABEL;
/// The Secret holding the Dataplane credentials (`username`, `password`).
pub const DATAPLANE_SECRET: &str = cluster::SECRET;
/// Dataplane reload batching of the sandbox pods (the real agent's default is 5 s; shorter keeps
/// the demo brisk while still batching).
const RELOAD_DELAY: Duration = Duration::from_secs(1);

/// Starts the emulator and `pods` HAProxy pods with the CRDs, the namespace, the Secret and the
/// Pod objects registered, and writes a kubeconfig for the emulator to `kubeconfig`.
///
/// # Errors
/// [`DemoError::Sandbox`] when a peer does not start (e.g. `haproxy` missing) or a registration
/// is refused.
///
/// # Cancel safety
/// Not cancel safe in a useful sense: dropping it midway drops the peers started so far (which
/// stops them).
pub async fn start(pods: usize, kubeconfig: &Path) -> Result<Fleet, DemoError> {
    let fleet = Fleet::try_start(FleetConfig {
        peers: Peers::Emulator,
        pods,
        namespace: NAMESPACE.to_owned(),
        reload_delay: RELOAD_DELAY,
        ..FleetConfig::default().without_spec_check()
    })
    .await
    .map_err(|e| DemoError::Sandbox(e.into()))?;
    fleet.write_kubeconfig(kubeconfig, NAMESPACE);
    Ok(fleet)
}
