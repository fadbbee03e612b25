//! Starting a fleet on the emulator or on the real peers.

use std::sync::Arc;

use haptic_tools::sandbox::apiserver::{ApiServer, ApiServerConfig};
use haptic_tools::sandbox::cluster::{Cluster, ClusterConfig};
use haptic_tools::sandbox::pods::{Sandbox, SandboxConfig};

use super::{EmulatorPeers, Fleet};
use crate::peers::{FleetConfig, PeerError, Peers};
use crate::pod::Pod;
use crate::real::setup::RealCluster;

impl Fleet {
    /// Starts the fleet `cfg` describes.
    ///
    /// # Panics
    /// When a peer does not start, with the reason; on [`Peers::Real`] without the binaries,
    /// naming `bash tests/peers/build.sh`.
    ///
    /// # Cancel safety
    /// Dropping it midway drops (stops) the peers started so far.
    pub async fn start(cfg: FleetConfig) -> Fleet {
        Fleet::try_start(cfg)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Fleet::start`] returning the error.
    ///
    /// # Errors
    /// [`PeerError::Missing`] for [`Peers::Real`] without the binaries, [`PeerError::Start`]
    /// when a peer does not start or a registration is refused.
    ///
    /// # Cancel safety
    /// As [`Fleet::start`].
    pub async fn try_start(cfg: FleetConfig) -> Result<Fleet, PeerError> {
        match cfg.peers {
            Peers::Emulator => Fleet::start_emulator(cfg).await,
            Peers::Real => Fleet::start_real(cfg).await,
        }
    }

    async fn start_real(cfg: FleetConfig) -> Result<Fleet, PeerError> {
        let api = crate::real::shared()?;
        let dir = tempfile::tempdir().map_err(|e| PeerError::Start(e.into()))?;
        let kubeconfig = dir.path().join("kubeconfig");
        let real = RealCluster::start(api, dir.path(), &kubeconfig, &cfg)
            .await
            .map_err(PeerError::Start)?;
        let controller_client = haptic::k8s::client::from_kubeconfig(&kubeconfig)
            .await
            .map_err(|e| PeerError::Start(e.into()))?;
        let pods = pods_of(real.sandbox.as_ref());
        real.clear_audit();
        Ok(Fleet {
            peers: Peers::Real,
            emulator: None,
            client: real.admin.clone(),
            admin_kubeconfig: real.admin_kubeconfig.clone(),
            namespace: real.namespace.clone(),
            real: Some(real),
            kubeconfig,
            controller_client,
            pods,
            dir,
            logs: Arc::default(),
        })
    }

    async fn start_emulator(cfg: FleetConfig) -> Result<Fleet, PeerError> {
        let crds = if cfg.crds {
            haptic::k8s::crd::crds()
                .iter()
                .map(serde_json::to_value)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| PeerError::Start(e.into()))?
        } else {
            Vec::new()
        };
        let dir = tempfile::tempdir().map_err(|e| PeerError::Start(e.into()))?;
        let kubeconfig = dir.path().join("kubeconfig");
        let (api, sandbox) = if cfg.pods + cfg.stand_in_pods == 0 {
            let api = ApiServer::start(ApiServerConfig::default())
                .await
                .map_err(PeerError::Start)?;
            let kube = haptic_tools::sandbox::cluster::Kube::new(api.url(), cfg.namespace.clone());
            for crd in crds {
                kube.send(
                    reqwest::Method::POST,
                    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                    crd,
                )
                .await
                .map_err(PeerError::Start)?;
            }
            (api, None)
        } else {
            let cluster = Cluster::start(ClusterConfig {
                sandbox: SandboxConfig {
                    pods: cfg.pods,
                    stand_in_pods: cfg.stand_in_pods,
                    stand_in_delay: cfg.stand_in_delay,
                    spec_check: cfg.spec_check,
                    reload_delay: cfg.reload_delay,
                    ..SandboxConfig::default()
                },
                namespace: cfg.namespace.clone(),
                crds,
            })
            .await
            .map_err(PeerError::Start)?;
            (cluster.api, Some(cluster.sandbox))
        };
        api.write_kubeconfig(&kubeconfig, &cfg.namespace)
            .map_err(PeerError::Start)?;
        api.clear_requests();
        let client = haptic::k8s::client::from_kubeconfig(&kubeconfig)
            .await
            .map_err(|e| PeerError::Start(e.into()))?;
        let pods = pods_of(sandbox.as_ref());
        Ok(Fleet {
            peers: Peers::Emulator,
            emulator: Some(EmulatorPeers { api, sandbox }),
            real: None,
            admin_kubeconfig: kubeconfig.clone(),
            kubeconfig,
            namespace: cfg.namespace,
            controller_client: client.clone(),
            client,
            pods,
            dir,
            logs: Arc::default(),
        })
    }
}

/// The pods `sandbox` runs, with its Dataplane credentials (none without a sandbox).
fn pods_of(sandbox: Option<&Sandbox>) -> Vec<Pod> {
    sandbox.map_or_else(Vec::new, |sb| {
        sb.pods()
            .into_iter()
            .map(|info| Pod {
                info,
                username: sb.username().to_owned(),
                password: sb.password().to_owned(),
                sandbox: true,
            })
            .collect()
    })
}
