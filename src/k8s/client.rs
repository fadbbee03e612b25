//! Building the kube client the controller uses: kube's built-in retry layer off (DESIGN.md
//! section 2: retries are ours).

use std::path::Path;

/// Errors building a client.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The kubeconfig could not be read or used.
    #[error("cannot load kubeconfig")]
    Kubeconfig(#[source] kube::config::KubeconfigError),
    /// The client could not be built.
    #[error("cannot build kube client")]
    Build(#[source] kube::Error),
}

/// A client from a kubeconfig file with `default_retry = false`.
///
/// # Errors
/// [`ClientError`] when the file is unreadable or invalid.
///
/// # Cancel safety
/// Cancel safe (no side effects).
pub async fn from_kubeconfig(path: &Path) -> Result<kube::Client, ClientError> {
    let kc = kube::config::Kubeconfig::read_from(path).map_err(ClientError::Kubeconfig)?;
    let mut cfg =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(ClientError::Kubeconfig)?;
    cfg.default_retry = false;
    kube::Client::try_from(cfg).map_err(ClientError::Build)
}
