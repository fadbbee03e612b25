//! The peers a test runs against, chosen by one switch ([`Peers`]): the sandbox's stand-ins (the
//! Kubernetes API emulator and HAProxy pods behind sandbox Dataplane endpoints) or the real
//! programs (etcd + the unmodified kube-apiserver with RBAC and admission on; issue 18).
//!
//! ```text
//!  FleetConfig ──Fleet::start──► Peers::Emulator: ApiServer (+ Sandbox pods, registered as Pod
//!                                 objects, credentials Secret)  ── kubeconfig, namespace
//!                                 Peers::Real: the process's shared etcd + kube-apiserver
//!                                 (crate::real::shared), a namespace of the fleet's own,
//!                                 CRDs, deploy/'s RBAC, the controller's token; the sandbox's
//!                                 HAProxy pods registered as Pod objects through the admin
//!                                 (the real dataplaneapi cannot be built here)
//!  Fleet ─► kubeconfig() [the controller's: exactly deploy/'s Role on real peers],
//!           admin_kubeconfig(), client() [the test's own: admin], controller_client(),
//!           namespace(), pods() [Pod: dataplane URL, credentials, traffic address],
//!           api_faults() [emulator only: PeerError::Unsupported on real peers], Pod::faults(),
//!           api_requests() [the emulator's log, or the real API server's audit log], audit()
//!           [real only], hpcfg(), lease_holder(), eventually()
//! ```
//!
//! Every request log starts empty: what the kit did to set the fleet up is cleared.
//!
//! This file: the fleet, what it is made of and how it ends ([`Fleet::shutdown`]; the peers'
//! destructors stop what a dropped fleet still runs); `start.rs` starts it, `api.rs` reads and
//! faults its API server, `pods.rs` checks, kills and (un)registers its pods.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use haptic_tools::sandbox::apiserver::ApiServer;
use haptic_tools::sandbox::cluster::{POD_LABEL, SECRET};
use haptic_tools::sandbox::pods::Sandbox;
use haptic_tools::sandbox::pods::spec::Violation;

use crate::controller::{Controller, ControllerOpts};
pub use crate::peers::{FleetConfig, PEERS_ENV, PeerError, Peers, Target};
pub use crate::pod::{Faults, Pod, http};
use crate::real::setup::RealCluster;
use crate::wait::{Logs, Probe, eventually_with};

mod api;
mod pods;
mod start;

/// The emulator side of a fleet.
#[derive(Debug)]
struct EmulatorPeers {
    api: ApiServer,
    sandbox: Option<Sandbox>,
}

/// A running fleet: the API server, the pods, kubeconfigs and clients, a work directory.
pub struct Fleet {
    peers: Peers,
    emulator: Option<EmulatorPeers>,
    real: Option<RealCluster>,
    kubeconfig: PathBuf,
    admin_kubeconfig: PathBuf,
    namespace: String,
    client: kube::Client,
    controller_client: kube::Client,
    pods: Vec<Pod>,
    dir: tempfile::TempDir,
    /// Logs of the controllers started through [`Fleet::controller`], for failed waits.
    logs: Arc<Mutex<Vec<PathBuf>>>,
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet")
            .field("kubeconfig", &self.kubeconfig)
            .finish_non_exhaustive()
    }
}

impl Target for Fleet {
    fn kubeconfig(&self) -> &Path {
        Fleet::kubeconfig(self)
    }
    fn namespace(&self) -> &str {
        Fleet::namespace(self)
    }
    fn selector(&self) -> String {
        Fleet::selector(self)
    }
    fn dataplane_secret(&self) -> &'static str {
        Fleet::dataplane_secret(self)
    }
    fn dir(&self) -> &Path {
        Fleet::dir(self)
    }
}

impl Fleet {
    /// Which peer set runs.
    #[must_use]
    pub fn peers(&self) -> Peers {
        self.peers
    }

    /// The controller's kubeconfig (context namespace = [`Fleet::namespace`]): on real peers the
    /// token of deploy/'s ServiceAccount, so it may do exactly what deploy/'s Role grants.
    #[must_use]
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The admin's kubeconfig (`system:masters` on real peers; on the emulator, which has no
    /// authorization, the same as [`Fleet::kubeconfig`]).
    #[must_use]
    pub fn admin_kubeconfig(&self) -> &Path {
        &self.admin_kubeconfig
    }

    /// Writes another controller kubeconfig for the same API server to `path` (context
    /// namespace `ns`).
    ///
    /// # Panics
    /// When the file cannot be written.
    pub fn write_kubeconfig(&self, path: &Path, ns: &str) {
        match (&self.emulator, &self.real) {
            (Some(e), _) => e
                .api
                .write_kubeconfig(path, ns)
                .expect("kubeconfig written"),
            (None, Some(r)) => {
                std::fs::write(path, r.api.kubeconfig(&r.service_account, &r.token, ns))
                    .expect("kubeconfig written")
            }
            (None, None) => unreachable!("a fleet has an API server"),
        }
    }

    /// Runs `kubectl` as the admin ([`Fleet::admin_kubeconfig`]) with `args` (and `stdin`, when
    /// given, for `-f -`), its discovery cache in the fleet's directory; returns whether it
    /// exited 0 and its stdout followed by its stderr.
    ///
    /// # Panics
    /// When the pinned `kubectl` is not built (`tests/peers/build.sh`; README "Set-up") or
    /// cannot be started.
    pub fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> (bool, String) {
        crate::real::kubectl(
            &self.admin_kubeconfig,
            &self.dir().join("kubectl-cache"),
            args,
            stdin,
        )
    }

    /// The namespace of the Pod objects and the Secret.
    #[must_use]
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The test's own kube client (retry layer off, as the controller builds it): the admin on
    /// real peers, for writing what an operator or a kubelet writes and reading anything.
    #[must_use]
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// A client with the controller's identity ([`Fleet::kubeconfig`]): for product components
    /// a test runs in-process, so that they meet the Role the controller gets.
    #[must_use]
    pub fn controller_client(&self) -> kube::Client {
        self.controller_client.clone()
    }

    /// A second, independent client with the controller's identity (its own connection pool; a
    /// second controller replica).
    ///
    /// # Panics
    /// When the client cannot be built.
    pub async fn another_client(&self) -> kube::Client {
        haptic::k8s::client::from_kubeconfig(&self.kubeconfig)
            .await
            .expect("a second client")
    }

    /// The pods, in start order (stand-ins last).
    #[must_use]
    pub fn pods(&self) -> Vec<Pod> {
        self.pods.clone()
    }

    /// The pods' label selector (the controller's `--pod-selector`).
    #[must_use]
    pub fn selector(&self) -> String {
        format!("{}={}", POD_LABEL.0, POD_LABEL.1)
    }

    /// The Dataplane credentials Secret (keys `username`, `password`; the controller's
    /// `--dataplane-secret`).
    #[must_use]
    pub fn dataplane_secret(&self) -> &'static str {
        SECRET
    }

    /// A scratch directory that lives as long as the fleet (journals, render directories, logs).
    #[must_use]
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The API emulator, for what only it can do (compaction, resource versions); `None` on
    /// real peers.
    #[must_use]
    pub fn emulator(&self) -> Option<&ApiServer> {
        self.emulator.as_ref().map(|e| &e.api)
    }

    /// The sandbox running the pods (`None` without pods).
    #[must_use]
    pub fn sandbox(&self) -> Option<&Sandbox> {
        match (&self.emulator, &self.real) {
            (Some(e), _) => e.sandbox.as_ref(),
            (None, Some(r)) => r.sandbox.as_ref(),
            (None, None) => None,
        }
    }

    /// Every Data Plane API spec violation the pods recorded so far (requests the controller
    /// sent, answers the stand-in gave; empty without pods or with the check off).
    #[must_use]
    pub fn spec_violations(&self) -> Vec<Violation> {
        self.sandbox()
            .map_or_else(Vec::new, Sandbox::spec_violations)
    }

    /// [`Fleet::spec_violations`], forgotten by the pods: for a test that provoked them on
    /// purpose (they would fail the fleet's end otherwise).
    pub fn take_spec_violations(&self) -> Vec<Violation> {
        self.sandbox()
            .map_or_else(Vec::new, Sandbox::take_spec_violations)
    }

    /// The real API server's side of the fleet (its processes, admin, the controller's
    /// ServiceAccount and token, the audit log); `None` on the emulator.
    #[must_use]
    pub fn real(&self) -> Option<&RealCluster> {
        self.real.as_ref()
    }

    /// Starts `haptic run` as a child process against this fleet (see [`ControllerOpts`]); its
    /// log is attached to [`Fleet::eventually`].
    #[must_use]
    pub fn controller(&self, opts: ControllerOpts) -> Controller {
        let c = Controller::spawn(self, opts);
        self.logs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(c.log.clone());
        c
    }

    /// [`crate::eventually`] printing, on failure, the log tails of every controller started
    /// through [`Fleet::controller`].
    ///
    /// # Panics
    /// When `bound` passes first (see [`crate::wait::eventually_with`]).
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn eventually<T, P, F, Fut>(&self, bound: Duration, what: &str, f: F) -> T
    where
        P: Probe<T>,
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = P>,
    {
        let logs = Logs(
            self.logs
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone(),
        );
        eventually_with(&logs, bound, what, f).await
    }

    /// Stops the pods, then the API server (the emulator; the real one is shared by the
    /// process's fleets and stays until the process ends).
    ///
    /// # Cancel safety
    /// Cancelling leaves the rest to the peers' destructors.
    pub async fn shutdown(self) {
        if let Some(e) = self.emulator {
            if let Some(sb) = e.sandbox {
                sb.shutdown().await;
            }
            e.api.shutdown().await;
        }
        // On real peers only the pods stop: the API server is shared by the process's fleets.
        if let Some(mut r) = self.real
            && let Some(sb) = r.sandbox.take()
        {
            sb.shutdown().await;
        }
    }
}

#[cfg(test)]
mod tests;
