//! What the fleet, its pods, the real peers' set-up and the controllers share, below all of
//! them: which peer set runs ([`Peers`], chosen by [`PEERS_ENV`]), what fleet to start
//! ([`FleetConfig`]), how a peer fails ([`PeerError`]), and what a controller is pointed at
//! ([`Target`], which [`crate::Fleet`] is).

use std::path::Path;
use std::time::Duration;

use haptic_tools::sandbox::cluster::NAMESPACE;
use haptic_tools::sandbox::pods::spec::SpecCheck;

/// Environment variable choosing the peer set: `emulator` (default) or `real`.
pub const PEERS_ENV: &str = "HAPTIC_TEST_PEERS";

/// Which programs play the Kubernetes API server and the Dataplane API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peers {
    /// The sandbox's stand-ins: the API emulator and sandbox HAProxy pods (in-process, with the
    /// faults API and request logs).
    Emulator,
    /// The real programs built by `tests/peers/build.sh`: etcd and kube-apiserver (RBAC and
    /// admission on; no faults API). The pods stay the sandbox's (HAProxy behind sandbox
    /// Dataplane endpoints): the real dataplaneapi cannot be built here (tests/peers/README.md).
    /// Starting fails naming `bash tests/peers/build.sh` when the binaries are missing.
    Real,
}

impl Peers {
    /// The peer set `HAPTIC_TEST_PEERS` names (`emulator`, `real`); [`Peers::Emulator`] when
    /// unset.
    ///
    /// # Panics
    /// On any other value (a misspelt switch must not silently test the other set).
    #[must_use]
    pub fn from_env() -> Peers {
        match std::env::var(PEERS_ENV).as_deref() {
            Err(_) | Ok("" | "emulator") => Peers::Emulator,
            Ok("real") => Peers::Real,
            Ok(other) => panic!("{PEERS_ENV}={other}: expected `emulator` or `real`"),
        }
    }
}

/// Why a fleet could not start or a peer cannot do what was asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PeerError {
    /// The real peers' binaries are missing (the message names `bash tests/peers/build.sh`).
    #[error("real peers: {0}")]
    Missing(String),
    /// The peer has no sandbox control paths (faults, request logs): real programs do not.
    #[error("{peer} has no {what} (only the sandbox's stand-ins do)")]
    Unsupported {
        /// Which peer, e.g. `the API server` or a pod name.
        peer: String,
        /// The missing facility, e.g. `faults API`.
        what: &'static str,
    },
    /// A peer did not start.
    #[error("the peers did not start: {0:#}")]
    Start(anyhow::Error),
    /// A control request failed or was refused.
    #[error("{what}: {message}")]
    Control {
        /// The request, e.g. `POST http://.../_sandbox/faults`.
        what: String,
        /// The transport error or the peer's answer.
        message: String,
    },
}

/// What fleet to start.
#[derive(Debug, Clone)]
pub struct FleetConfig {
    /// Peer set. Default: [`Peers::from_env`].
    pub peers: Peers,
    /// HAProxy pods (each with a Dataplane endpoint). With no pods and no stand-ins only the API
    /// server runs (no Pod objects, no credentials Secret). Default: 0.
    pub pods: usize,
    /// Dataplane endpoints without HAProxy (emulator only; fan-out benchmarks). Default: 0.
    pub stand_in_pods: usize,
    /// Delay before each answer of a stand-in pod. Default: 0.
    pub stand_in_delay: Duration,
    /// Namespace of the Pod objects, the Secret and the kubeconfig's context; on real peers,
    /// which share one API server per process, suffixed `-<n>` ([`crate::Fleet::namespace`] says the
    /// one in use). Default: `haptic-sandbox`.
    pub namespace: String,
    /// Install the controller's four CRDs. Default: true.
    pub crds: bool,
    /// Dataplane reload batching (the real agent's default is 5 s). Default: 100 ms.
    pub reload_delay: Duration,
    /// Hold the pods' Dataplane exchanges to the published spec. Default:
    /// [`SpecCheck::Enforce`]: the fleet's end (drop or [`crate::Fleet::shutdown`]) panics
    /// naming every violation recorded ([`crate::Fleet::spec_violations`]).
    pub spec_check: SpecCheck,
}

impl Default for FleetConfig {
    fn default() -> Self {
        FleetConfig {
            peers: Peers::from_env(),
            pods: 0,
            stand_in_pods: 0,
            stand_in_delay: Duration::ZERO,
            namespace: NAMESPACE.to_owned(),
            crds: true,
            reload_delay: Duration::from_millis(100),
            spec_check: SpecCheck::Enforce,
        }
    }
}

impl FleetConfig {
    /// `n` HAProxy pods registered in the default namespace, the CRDs installed.
    #[must_use]
    pub fn pods(n: usize) -> FleetConfig {
        FleetConfig {
            pods: n,
            ..FleetConfig::default()
        }
    }

    /// Only the API server, objects in `namespace`, the CRDs installed.
    #[must_use]
    pub fn api_only(namespace: &str) -> FleetConfig {
        FleetConfig {
            namespace: namespace.to_owned(),
            ..FleetConfig::default()
        }
    }

    /// The same, without the CRDs.
    #[must_use]
    pub fn without_crds(mut self) -> FleetConfig {
        self.crds = false;
        self
    }

    /// The same, the pods' exchanges not held to the spec ([`SpecCheck::Off`]): for benchmarks
    /// and the demo, which measure or show the controller (the check costs CPU: buffering and
    /// validating every request and answer).
    #[must_use]
    pub fn without_spec_check(mut self) -> FleetConfig {
        self.spec_check = SpecCheck::Off;
        self
    }
}

/// What a controller is pointed at ([`crate::ControllerOpts`], [`crate::Controller::spawn`]):
/// the API server's kubeconfig and namespace, the pods' selector and credentials Secret, and a
/// directory for its journal and log. [`crate::Fleet`] is one.
pub trait Target {
    /// The controller's kubeconfig (its `--kubeconfig`).
    fn kubeconfig(&self) -> &Path;
    /// The namespace of the Pod objects and the Secret (its `--namespace`).
    fn namespace(&self) -> &str;
    /// The pods' label selector (its `--pod-selector`).
    fn selector(&self) -> String;
    /// The Dataplane credentials Secret (its `--dataplane-secret`).
    fn dataplane_secret(&self) -> &'static str;
    /// A scratch directory that outlives the controller (journals, logs).
    fn dir(&self) -> &Path;
}
