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
    /// The identity makes an invalid `User-Agent` header.
    #[error("the identity in user agent {0:?} is not a valid header value: use printable ascii")]
    UserAgent(String),
    /// The client could not be built.
    #[error("cannot build kube client")]
    Build(#[source] kube::Error),
}

/// The `User-Agent` of a replica: `haptic/<version> (<identity>)`.
#[must_use]
pub fn user_agent(identity: &str) -> String {
    format!("haptic/{} ({identity})", env!("CARGO_PKG_VERSION"))
}

/// A client from `config` with `default_retry = false` and `user_agent` as the `User-Agent`.
///
/// # Errors
/// [`ClientError::Build`] when the client cannot be built, [`ClientError::UserAgent`] for an
/// identity that is not a valid header value.
pub fn build(mut config: kube::Config, user_agent: &str) -> Result<kube::Client, ClientError> {
    config.default_retry = false;
    let value = http::HeaderValue::from_str(user_agent)
        .map_err(|_| ClientError::UserAgent(user_agent.to_owned()))?;
    config.headers.push((http::header::USER_AGENT, value));
    kube::Client::try_from(config).map_err(ClientError::Build)
}

/// The configuration of a kubeconfig file's current context.
///
/// # Errors
/// [`ClientError::Kubeconfig`] when the file is unreadable or invalid.
pub async fn load_kubeconfig(path: &Path) -> Result<kube::Config, ClientError> {
    let kc = kube::config::Kubeconfig::read_from(path).map_err(ClientError::Kubeconfig)?;
    kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .map_err(ClientError::Kubeconfig)
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
