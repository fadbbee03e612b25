//! The demo's cluster: the sandbox's own cluster set-up (`haptic_tools::sandbox::cluster`, what
//! `haptic-sandbox up` runs: the Kubernetes API emulator, the HAProxy pods registered as Running,
//! Ready Pod objects, the Dataplane credentials Secret) plus the controller's four CRDs, and a
//! kubeconfig for the controller in the demo's work directory.

use std::path::Path;
use std::time::Duration;

use haptic_tools::sandbox::cluster::{self, ClusterConfig};
use haptic_tools::sandbox::pods::SandboxConfig;

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

/// The running peers.
pub struct Cluster {
    /// The sandbox: API emulator and HAProxy pods.
    pub inner: cluster::Cluster,
    /// A client for the emulator (retry layer off).
    pub client: kube::Client,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl Cluster {
    /// Starts the emulator and `pods` HAProxy pods with the CRDs, the namespace, the Secret and
    /// the Pod objects registered, and writes a kubeconfig for the emulator to `kubeconfig`.
    ///
    /// # Errors
    /// [`DemoError::Sandbox`] when a peer does not start (e.g. `haproxy` missing) or a
    /// registration is refused, [`DemoError::Client`] when the client cannot be built.
    ///
    /// # Cancel safety
    /// Not cancel safe in a useful sense: dropping it midway drops the peers started so far
    /// (which stops them).
    pub async fn start(pods: usize, kubeconfig: &Path) -> Result<Cluster, DemoError> {
        let crds = haptic::k8s::crd::crds()
            .iter()
            .map(serde_json::to_value)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| DemoError::Sandbox(e.into()))?;
        let inner = cluster::Cluster::start(ClusterConfig {
            sandbox: SandboxConfig {
                pods,
                reload_delay: RELOAD_DELAY,
                ..SandboxConfig::default()
            },
            namespace: NAMESPACE.to_owned(),
            crds,
        })
        .await
        .map_err(|e| DemoError::Sandbox(e.into()))?;
        inner
            .api
            .write_kubeconfig(kubeconfig, NAMESPACE)
            .map_err(|e| DemoError::Sandbox(e.into()))?;
        let client = haptic::k8s::client::from_kubeconfig(kubeconfig).await?;
        Ok(Cluster { inner, client })
    }

    /// Stops the pods and the emulator.
    ///
    /// # Cancel safety
    /// Cancelling leaves the rest to the peers' destructors.
    pub async fn shutdown(self) {
        self.inner.shutdown().await;
    }
}
