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

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use haptic::k8s::crd::HAProxyCfg;
use haptic_tools::sandbox::apiserver::{ApiServer, ApiServerConfig};
use haptic_tools::sandbox::cluster::{Cluster, ClusterConfig, NAMESPACE, POD_LABEL, SECRET};
use haptic_tools::sandbox::control::RequestRecord;
use haptic_tools::sandbox::pods::spec::{SpecCheck, Violation};
use haptic_tools::sandbox::pods::{Sandbox, SandboxConfig};
use kube::Api;

use crate::controller::{Controller, ControllerOpts};
pub use crate::pod::{Faults, Pod, http};
use crate::real::audit::AuditEvent;
use crate::real::setup::RealCluster;
use crate::wait::{Logs, Probe, eventually_with};

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
    /// which share one API server per process, suffixed `-<n>` ([`Fleet::namespace`] says the
    /// one in use). Default: `haptic-sandbox`.
    pub namespace: String,
    /// Install the controller's four CRDs. Default: true.
    pub crds: bool,
    /// Dataplane reload batching (the real agent's default is 5 s). Default: 100 ms.
    pub reload_delay: Duration,
    /// Hold the pods' Dataplane exchanges to the published spec. Default:
    /// [`SpecCheck::Enforce`]: the fleet's end (drop or [`Fleet::shutdown`]) panics naming every
    /// violation recorded ([`Fleet::spec_violations`]).
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
        let pods = real.sandbox.as_ref().map_or_else(Vec::new, |sb| {
            sb.pods()
                .into_iter()
                .map(|info| Pod {
                    info,
                    username: sb.username().to_owned(),
                    password: sb.password().to_owned(),
                    sandbox: true,
                })
                .collect()
        });
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
                    reload_delay: cfg.reload_delay,
                    spec_check: cfg.spec_check,
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
        let pods = sandbox.as_ref().map_or_else(Vec::new, |sb| {
            sb.pods()
                .into_iter()
                .map(|info| Pod {
                    info,
                    username: sb.username().to_owned(),
                    password: sb.password().to_owned(),
                    sandbox: true,
                })
                .collect()
        });
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

    /// Every request the real API server audited since set-up (or the last clear), with the
    /// authenticated user and the authorizer's decision and reason.
    ///
    /// # Errors
    /// [`PeerError::Unsupported`] on the emulator (it has no authorizer: use
    /// [`Fleet::api_requests`]); [`PeerError::Control`] when the log cannot be read.
    pub fn audit(&self) -> Result<Vec<AuditEvent>, PeerError> {
        let real = self.real.as_ref().ok_or_else(|| PeerError::Unsupported {
            peer: "the API emulator".into(),
            what: "audit log",
        })?;
        real.audit().map_err(|e| PeerError::Control {
            what: format!("reading {}", real.api.audit_log.display()),
            message: format!("{e:#}"),
        })
    }

    fn api(&self, what: &'static str) -> Result<&ApiServer, PeerError> {
        self.emulator().ok_or_else(|| PeerError::Unsupported {
            peer: "the API server".into(),
            what,
        })
    }

    /// Every request the API server logged since set-up (or the last clear), oldest first: the
    /// emulator's request log, or the real API server's audit log ([`Fleet::audit`]) in the same
    /// form (the method derived from the verb; the API server's own requests left out).
    ///
    /// # Errors
    /// [`PeerError::Control`] when the real API server's audit log cannot be read.
    pub fn api_requests(&self) -> Result<Vec<RequestRecord>, PeerError> {
        if self.real.is_some() {
            return Ok(self.audit()?.iter().map(AuditEvent::record).collect());
        }
        Ok(self.api("request log")?.requests())
    }

    /// Empties the API server's request log (on real peers: the audit log is read from here on).
    ///
    /// # Errors
    /// None today; kept for peers that may lack a log.
    pub fn clear_api_requests(&self) -> Result<(), PeerError> {
        if let Some(r) = &self.real {
            r.clear_audit();
            return Ok(());
        }
        self.api("request log")?.clear_requests();
        Ok(())
    }

    /// The API server's faults API (`/_sandbox/faults` over HTTP, as a test would use it); on
    /// real peers every call answers [`PeerError::Unsupported`].
    #[must_use]
    pub fn api_faults(&self) -> Faults {
        Faults {
            peer: "the API server".into(),
            base: self.emulator().map(ApiServer::url),
        }
    }

    /// The HAProxyCfg `name` in the fleet's namespace, if it exists (read errors count as
    /// absent).
    ///
    /// # Cancel safety
    /// Cancel safe (a read).
    pub async fn hpcfg(&self, name: &str) -> Option<HAProxyCfg> {
        Api::<HAProxyCfg>::namespaced(self.client(), &self.namespace)
            .get_opt(name)
            .await
            .unwrap_or(None)
    }

    /// The holder of the Lease `lease`, when one holds it.
    ///
    /// # Cancel safety
    /// Cancel safe (a read).
    pub async fn lease_holder(&self, lease: &str) -> Option<String> {
        Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(self.client(), &self.namespace)
            .get_opt(lease)
            .await
            .ok()
            .flatten()
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
            .filter(|h| !h.is_empty())
    }

    /// What each pod answers that differs from what `tests/corpus/renders/README.md` lists for
    /// the corpus render `render` (for a rejected render: the last passed one's answers).
    ///
    /// # Errors
    /// Every wrong answer, `pod: check -> got (want ...)`, joined by `; `.
    ///
    /// # Cancel safety
    /// Cancel safe (requests only).
    pub async fn pods_answer(&self, render: &str) -> Result<(), String> {
        let all: Vec<String> = self.pods.iter().map(|p| p.name.clone()).collect();
        self.pods_answer_of(render, &all).await
    }

    /// [`Fleet::pods_answer`] for the pods named `names` only (the live ones, when the test
    /// killed some).
    ///
    /// # Errors
    /// As [`Fleet::pods_answer`].
    ///
    /// # Cancel safety
    /// Cancel safe (requests only).
    pub async fn pods_answer_of(&self, render: &str, names: &[String]) -> Result<(), String> {
        let checks = crate::render::checks(render);
        let mut wrong = Vec::new();
        let pods: Vec<&Pod> = self
            .pods
            .iter()
            .filter(|p| names.contains(&p.name))
            .collect();
        for pod in pods {
            for c in &checks {
                let body = haptic_tools::sandbox::pods::demo::run_check(pod, c).await;
                if !haptic_tools::sandbox::pods::demo::matches(c, &body) {
                    wrong.push(format!(
                        "{}: {} -> {body:?} (want {:?})",
                        pod.name, c.what, c.expect
                    ));
                }
            }
        }
        if wrong.is_empty() {
            Ok(())
        } else {
            Err(wrong.join("; "))
        }
    }

    /// Successful reloads of every pod, in pod order.
    ///
    /// # Panics
    /// When a pod does not answer.
    ///
    /// # Cancel safety
    /// Cancel safe (reads).
    pub async fn reload_counts(&self) -> Vec<usize> {
        futures::future::join_all(self.pods.iter().map(Pod::reload_count)).await
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

    /// Kills the pod `name` the way `POST /_sandbox/kill` does (processes gone, Pod object
    /// deleted).
    ///
    /// # Errors
    /// [`PeerError`] from the pod's control path.
    ///
    /// # Cancel safety
    /// As [`Faults::call`].
    pub async fn kill_pod(&self, name: &str) -> Result<(), PeerError> {
        let pod = self
            .pods
            .iter()
            .find(|p| p.name == name)
            .ok_or_else(|| PeerError::Control {
                what: format!("kill {name}"),
                message: "no such pod".into(),
            })?;
        pod.faults()
            .call(reqwest::Method::POST, "kill", None)
            .await
            .map(drop)
    }

    /// Deletes the Pod object of `name` (gracePeriodSeconds 0), keeping its HAProxy running:
    /// the pod leaves discovery (as if it were rescheduled) until [`Fleet::register_pod`] lists
    /// it again.
    ///
    /// # Errors
    /// [`PeerError::Control`] when the real API server refuses the delete.
    ///
    /// # Cancel safety
    /// Cancel safe (one request).
    pub async fn unregister_pod(&self, name: &str) -> Result<(), PeerError> {
        if let Some(r) = &self.real {
            return crate::real::setup::delete_pod(&r.admin, &self.namespace, name)
                .await
                .map_err(|e| PeerError::Control {
                    what: format!("unregister {name}"),
                    message: format!("{e:#}"),
                });
        }
        let kube = self.kube_rest("unregister a Pod object")?;
        kube.delete_pod(name).await;
        Ok(())
    }

    /// Registers the Pod object of the fleet's pod `name` again (Running, Ready, with its pod
    /// IP), as the kubelet would report a pod that (re)appeared.
    ///
    /// # Errors
    /// [`PeerError::Control`] for an unknown pod or a refused registration.
    ///
    /// # Cancel safety
    /// Cancel safe before the first request returns; otherwise the object may exist.
    pub async fn register_pod(&self, name: &str) -> Result<(), PeerError> {
        let pod = self
            .pods
            .iter()
            .find(|p| p.name == name)
            .ok_or_else(|| PeerError::Control {
                what: format!("register {name}"),
                message: "no such pod".into(),
            })?;
        let control = |e: anyhow::Error| PeerError::Control {
            what: format!("register {name}"),
            message: format!("{e:#}"),
        };
        if let Some(r) = &self.real {
            return crate::real::setup::register_pod(&r.admin, &self.namespace, &pod.info)
                .await
                .map_err(control);
        }
        let kube = self.kube_rest("register a Pod object")?;
        kube.register_pod(&pod.info).await.map_err(control)
    }

    fn kube_rest(
        &self,
        what: &'static str,
    ) -> Result<haptic_tools::sandbox::cluster::Kube, PeerError> {
        let e = self
            .emulator
            .as_ref()
            .ok_or_else(|| PeerError::Unsupported {
                peer: "the API server".to_owned(),
                what,
            })?;
        Ok(haptic_tools::sandbox::cluster::Kube::new(
            e.api.url(),
            self.namespace.clone(),
        ))
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
mod tests {
    use super::*;

    #[test]
    fn missing_real_peers_fail_naming_build_sh_rather_than_skip() {
        let empty = tempfile::tempdir().unwrap();
        let err = crate::real::check_bin_dir(empty.path()).unwrap_err();
        let err = PeerError::Missing(err);
        let msg = err.to_string();
        assert!(msg.starts_with("real peers: "), "{msg}");
        assert!(msg.contains("run `bash tests/peers/build.sh`"), "{msg}");
        assert!(msg.contains("kube-apiserver is missing"), "{msg}");
    }
}
