//! The input side of the controller runtime (issue 6): validation with the real `haproxy -c`,
//! render sources, pod discovery, the Lease, and the deploy manifests.

mod configmap_source;
mod deploy;
mod dir_source;
mod discovery;
pub(crate) mod helm;
mod ingest;
mod lease;
mod validate;

use haptic_tools::sandbox::apiserver::{ApiServer, ApiServerConfig};

/// The namespace the emulator tests use.
pub const NS: &str = "haptic-test";

/// A running Kubernetes API emulator and a kube client for it (retry layer off, as the
/// controller builds it).
pub struct Emulator {
    pub server: ApiServer,
    pub client: kube::Client,
    _dir: tempfile::TempDir,
}

impl Emulator {
    pub async fn start() -> Emulator {
        let server = ApiServer::start(ApiServerConfig::default()).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubeconfig");
        server.write_kubeconfig(&path, NS).unwrap();
        let client = Emulator::client_for(&path).await;
        Emulator {
            server,
            client,
            _dir: dir,
        }
    }

    async fn client_for(path: &std::path::Path) -> kube::Client {
        let kc = kube::config::Kubeconfig::read_from(path).unwrap();
        let mut config =
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .unwrap();
        config.default_retry = false;
        kube::Client::try_from(config).unwrap()
    }

    /// A second, independent client (a second controller replica).
    pub async fn another_client(&self) -> kube::Client {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubeconfig");
        self.server.write_kubeconfig(&path, NS).unwrap();
        Emulator::client_for(&path).await
    }
}
