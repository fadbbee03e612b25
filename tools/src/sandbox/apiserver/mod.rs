//! Kubernetes API emulator (placeholder: being built; the signatures below are the contract the
//! pods module and `haptic-sandbox up` use).

use std::net::SocketAddr;
use std::path::Path;

/// Settings of one emulator instance.
#[derive(Debug, Clone)]
pub struct ApiServerConfig {
    /// Address to listen on; port 0 lets the OS choose. Default: `127.0.0.1:0`.
    pub listen: SocketAddr,
}

impl Default for ApiServerConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        }
    }
}

/// A running emulator; dropping it (or [`ApiServer::shutdown`]) stops it.
#[derive(Debug)]
pub struct ApiServer {
    _private: (),
}

impl ApiServer {
    /// Starts the emulator and returns once it accepts connections.
    pub async fn start(config: ApiServerConfig) -> anyhow::Result<ApiServer> {
        let _ = config;
        anyhow::bail!("the Kubernetes API emulator is not built yet")
    }

    /// Base URL, e.g. `http://127.0.0.1:40123`.
    pub fn url(&self) -> String {
        String::new()
    }

    /// Writes a kubeconfig (plain http, a bearer token, the given default namespace) for this emulator.
    pub fn write_kubeconfig(&self, path: &Path, namespace: &str) -> anyhow::Result<()> {
        let _ = (path, namespace);
        anyhow::bail!("the Kubernetes API emulator is not built yet")
    }

    /// Stops serving; open watch streams end.
    pub async fn shutdown(self) {}
}
