//! What a real-peer fleet puts into its fresh API server, through the admin client, before a
//! test runs: what an operator and the kubelet would have put into a cluster.
//!
//! ```text
//!  namespace NS + ServiceAccount NS/default (the ServiceAccount admission plugin stays on;
//!      no controller-manager creates `default`)
//!  CRDs (haptic::k8s::crd::crds()) ─► wait for Established
//!  deploy/*.yaml: every ServiceAccount, Role, RoleBinding, moved into NS ─► the controller's
//!      identity system:serviceaccount:NS:<sa>, its Role exactly as deploy/ says
//!  TokenRequest for <sa> ─► kubeconfig (the controller's: exactly the Role), admin.kubeconfig
//!      ─► wait until the Role is in force (the RBAC authorizer's cache)
//!  pods: the sandbox's HAProxy pods, each a Pod object (created, then its status written as a
//!      kubelet would), the Dataplane credentials Secret; a killed pod's object is deleted with
//!      gracePeriodSeconds 0 (the kubelet's last delete)
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use haptic_tools::sandbox::cluster::{pod_manifest, pod_status, secret_manifest};
use haptic_tools::sandbox::pods::{KillHook, PodInfo, Sandbox, SandboxConfig};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{DeleteParams, ObjectMeta, PostParams};

use super::ApiPeers;
use crate::peers::FleetConfig;

/// Bound of a CRD becoming Established (measured: under 0.1 s).
pub const CRD_ESTABLISHED: Duration = Duration::from_secs(10);

/// Bound of a new Role or RoleBinding taking effect in the RBAC authorizer (its informer cache;
/// measured: under 0.1 s).
pub const RBAC_IN_FORCE: Duration = Duration::from_secs(10);

/// The manifests directory whose RBAC the fleet applies.
#[must_use]
pub fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

/// Every document of kind `kind` in `deploy/*.yaml`, as JSON.
///
/// # Errors
/// When the directory or a file cannot be read or parsed.
pub fn deploy_docs(kind: &str) -> Result<Vec<serde_json::Value>> {
    let mut out = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(deploy_dir())
        .context("reading deploy/")?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    for file in files {
        let text = std::fs::read_to_string(&file)?;
        for doc in serde_norway::Deserializer::from_str(&text) {
            let value: serde_json::Value = serde::Deserialize::deserialize(doc)
                .with_context(|| format!("parsing {}", file.display()))?;
            if value["kind"] == kind {
                out.push(value);
            }
        }
    }
    Ok(out)
}

/// `doc` moved into namespace `ns` (and, for a RoleBinding, its ServiceAccount subjects too).
#[must_use]
pub fn into_namespace(mut doc: serde_json::Value, ns: &str) -> serde_json::Value {
    doc["metadata"]["namespace"] = ns.into();
    if let Some(subjects) = doc["subjects"].as_array_mut() {
        for s in subjects {
            if s["kind"] == "ServiceAccount" {
                s["namespace"] = ns.into();
            }
        }
    }
    doc
}

/// Creates the namespace `ns` (if absent) and its `default` ServiceAccount.
///
/// # Errors
/// When a create fails other than with 409 AlreadyExists.
///
/// # Cancel safety
/// Cancel safe; a cancelled call may have created the namespace.
pub async fn ensure_namespace(admin: &kube::Client, ns: &str) -> Result<()> {
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(ns.to_owned()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    ok_or_exists(
        Api::<Namespace>::all(admin.clone())
            .create(&PostParams::default(), &namespace)
            .await,
    )
    .with_context(|| format!("creating the namespace {ns}"))?;
    let sa = ServiceAccount {
        metadata: ObjectMeta {
            name: Some("default".into()),
            ..ObjectMeta::default()
        },
        ..ServiceAccount::default()
    };
    ok_or_exists(
        Api::<ServiceAccount>::namespaced(admin.clone(), ns)
            .create(&PostParams::default(), &sa)
            .await,
    )
    .with_context(|| format!("creating {ns}/default"))?;
    Ok(())
}

fn ok_or_exists<T>(r: kube::Result<T>) -> Result<()> {
    match r {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Creates `crds` and waits until each is Established.
///
/// # Errors
/// A refused create, or a CRD not Established within [`CRD_ESTABLISHED`].
///
/// # Cancel safety
/// Cancel safe; a cancelled call may have created some.
pub async fn install_crds(admin: &kube::Client, crds: &[CustomResourceDefinition]) -> Result<()> {
    let api = Api::<CustomResourceDefinition>::all(admin.clone());
    for crd in crds {
        ok_or_exists(api.create(&PostParams::default(), crd).await).with_context(|| {
            format!(
                "creating the CRD {}",
                crd.metadata.name.as_deref().unwrap_or_default()
            )
        })?;
    }
    let deadline = Instant::now() + CRD_ESTABLISHED;
    for crd in crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        loop {
            let got = api.get(&name).await?;
            let established = got
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            if established {
                break;
            }
            if Instant::now() >= deadline {
                bail!("the CRD {name} is not Established within {CRD_ESTABLISHED:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    Ok(())
}

/// Applies deploy/'s ServiceAccounts, Roles and RoleBindings in `ns`; returns the name of the
/// ServiceAccount the RoleBinding binds (the controller's identity).
///
/// # Errors
/// When deploy/ holds no ServiceAccount or a create is refused.
///
/// # Cancel safety
/// Cancel safe; a cancelled call may have created some.
pub async fn install_rbac(admin: &kube::Client, ns: &str) -> Result<String> {
    let sas = deploy_docs("ServiceAccount")?;
    let name = sas
        .first()
        .and_then(|s| s["metadata"]["name"].as_str())
        .context("deploy/ has no ServiceAccount")?
        .to_owned();
    for doc in sas {
        let sa: ServiceAccount = serde_json::from_value(into_namespace(doc, ns))?;
        ok_or_exists(
            Api::<ServiceAccount>::namespaced(admin.clone(), ns)
                .create(&PostParams::default(), &sa)
                .await,
        )?;
    }
    create_deploy_docs::<Role>(admin, ns, "Role").await?;
    create_deploy_docs::<RoleBinding>(admin, ns, "RoleBinding").await?;
    Ok(name)
}

/// Creates deploy/'s objects of `kind` (`K`) in `ns`.
async fn create_deploy_docs<K>(admin: &kube::Client, ns: &str, kind: &str) -> Result<()>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    for doc in deploy_docs(kind)? {
        let object: K = serde_json::from_value(into_namespace(doc, ns))?;
        Api::<K>::namespaced(admin.clone(), ns)
            .create(&PostParams::default(), &object)
            .await
            .with_context(|| format!("creating deploy/'s {kind}"))?;
    }
    Ok(())
}

/// A token for the ServiceAccount `ns/sa` (TokenRequest, valid 24 h, the API server's audience).
///
/// # Errors
/// When the request is refused.
///
/// # Cancel safety
/// Cancel safe (the token is not stored anywhere).
pub async fn token(admin: &kube::Client, ns: &str, sa: &str) -> Result<String> {
    let req = TokenRequest {
        spec: TokenRequestSpec {
            audiences: Vec::new(),
            expiration_seconds: Some(24 * 3600),
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    let got = Api::<ServiceAccount>::namespaced(admin.clone(), ns)
        .create_token_request(sa, &PostParams::default(), &req)
        .await
        .with_context(|| format!("TokenRequest for {ns}/{sa}"))?;
    Ok(got.status.context("a TokenRequest without status")?.token)
}

/// Waits until `client` may list pods in `ns` (the RoleBinding is in the authorizer's cache).
///
/// # Errors
/// When it is still refused after [`RBAC_IN_FORCE`].
///
/// # Cancel safety
/// Cancel safe (reads).
pub async fn rbac_in_force(client: &kube::Client, ns: &str) -> Result<()> {
    let deadline = Instant::now() + RBAC_IN_FORCE;
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    loop {
        match pods.list(&kube::api::ListParams::default().limit(1)).await {
            Ok(_) => return Ok(()),
            Err(e) if Instant::now() >= deadline => {
                bail!("the controller's Role is not in force within {RBAC_IN_FORCE:?}: {e}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// Registers the sandbox pod `pod` in `ns` as a kubelet would: the Pod object created, then its
/// status (Running, Ready, podIP, containerStatuses) written through `/status`.
///
/// # Errors
/// When the API server refuses either write.
///
/// # Cancel safety
/// Cancel safe before the create returns; otherwise the object may exist without its status.
pub async fn register_pod(admin: &kube::Client, ns: &str, pod: &PodInfo) -> Result<()> {
    let api = Api::<Pod>::namespaced(admin.clone(), ns);
    let manifest: Pod = serde_json::from_value(pod_manifest(pod, ns))?;
    let mut created = api
        .create(&PostParams::default(), &manifest)
        .await
        .with_context(|| format!("creating the Pod {}", pod.name))?;
    created.status = Some(serde_json::from_value(pod_status(
        pod,
        &jiff::Timestamp::now().to_string(),
    ))?);
    api.replace_status(&pod.name, &PostParams::default(), &created)
        .await
        .with_context(|| format!("writing the status of the Pod {}", pod.name))?;
    Ok(())
}

/// Deletes the Pod object `name` with gracePeriodSeconds 0 (a bound pod deleted gracefully keeps
/// its object, Terminating, until a kubelet finishes it; none runs here).
///
/// # Errors
/// When the API server refuses the delete (404 included).
///
/// # Cancel safety
/// Cancel safe; a cancelled call may have deleted it.
pub async fn delete_pod(admin: &kube::Client, ns: &str, name: &str) -> Result<()> {
    Api::<Pod>::namespaced(admin.clone(), ns)
        .delete(
            name,
            &DeleteParams {
                grace_period_seconds: Some(0),
                ..DeleteParams::default()
            },
        )
        .await
        .with_context(|| format!("deleting the Pod {name}"))?;
    Ok(())
}

/// Starts the sandbox's pods as `cfg` asks, with a kill hook deleting the Pod object, then
/// creates the credentials Secret and registers every pod in `ns`.
///
/// # Errors
/// When the sandbox does not start or a write is refused.
///
/// # Cancel safety
/// Dropping it midway stops the pods started so far.
pub async fn start_pods(admin: &kube::Client, ns: &str, cfg: &FleetConfig) -> Result<Sandbox> {
    let hook_client = admin.clone();
    let hook_ns = ns.to_owned();
    let rt = tokio::runtime::Handle::current();
    let hook: KillHook = Arc::new(move |name: String| {
        let (c, ns) = (hook_client.clone(), hook_ns.clone());
        rt.spawn(async move {
            if let Err(e) = delete_pod(&c, &ns, &name).await {
                eprintln!("haptic-testkit: {e:#}");
            }
        });
    });
    let sandbox = Sandbox::start(SandboxConfig {
        pods: cfg.pods,
        stand_in_pods: cfg.stand_in_pods,
        stand_in_delay: cfg.stand_in_delay,
        reload_delay: cfg.reload_delay,
        on_kill: Some(hook),
        spec_check: cfg.spec_check,
        ..SandboxConfig::default()
    })
    .await?;
    let secret: Secret =
        serde_json::from_value(secret_manifest(ns, sandbox.username(), sandbox.password()))?;
    Api::<Secret>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &secret)
        .await
        .context("creating the Dataplane credentials Secret")?;
    for p in sandbox.pods() {
        register_pod(admin, ns, &p).await?;
    }
    Ok(sandbox)
}

/// The API server, its objects and pods of a real-peer fleet.
pub struct RealCluster {
    /// etcd and kube-apiserver: the process's shared pair ([`super::shared`]).
    pub api: &'static ApiPeers,
    /// The fleet's own namespace: the one asked for, suffixed `-<n>` (the n-th real-peer fleet
    /// of the process), since every fleet shares the API server.
    pub namespace: String,
    /// The HAProxy pods (sandbox Dataplane stand-ins: the real dataplaneapi cannot be built
    /// here, tests/peers/README.md).
    pub sandbox: Option<Sandbox>,
    /// The admin client (system:masters).
    pub admin: kube::Client,
    /// The admin's kubeconfig.
    pub admin_kubeconfig: PathBuf,
    /// The controller's ServiceAccount (its name in deploy/).
    pub service_account: String,
    /// The controller's token (TokenRequest).
    pub token: String,
    /// Where the audit log is read from (a clear moves it to the log's end).
    pub audit_offset: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for RealCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RealCluster")
            .field("api", &self.api)
            .field("service_account", &self.service_account)
            .finish_non_exhaustive()
    }
}

impl RealCluster {
    /// Sets up a namespace of its own on the process's shared API server (`api`, started by the
    /// first caller: [`super::shared`]) as the module doc says; writes the admin's kubeconfig
    /// to `dir` and the controller's to `kubeconfig`.
    ///
    /// # Errors
    /// When a set-up write is refused.
    ///
    /// # Cancel safety
    /// Dropping it midway stops the pods started so far; objects written stay (in a namespace
    /// no later fleet uses).
    pub async fn start(
        api: &'static ApiPeers,
        dir: &Path,
        kubeconfig: &Path,
        cfg: &FleetConfig,
    ) -> Result<RealCluster> {
        static FLEETS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = FLEETS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let namespace = format!("{}-{n}", cfg.namespace);
        let admin = api.admin_client().await?;
        let ns = namespace.as_str();
        ensure_namespace(&admin, ns).await?;
        if cfg.crds {
            install_crds(&admin, &haptic::k8s::crd::crds()).await?;
        }
        let service_account = install_rbac(&admin, ns).await?;
        let token = token(&admin, ns, &service_account).await?;
        let admin_kubeconfig = dir.join("admin.kubeconfig");
        std::fs::write(
            &admin_kubeconfig,
            api.kubeconfig("admin", &api.admin_token, ns),
        )?;
        std::fs::write(kubeconfig, api.kubeconfig(&service_account, &token, ns))?;
        let controller = super::client_for(&api.kubeconfig(&service_account, &token, ns)).await?;
        rbac_in_force(&controller, ns).await?;
        let sandbox = if cfg.pods + cfg.stand_in_pods > 0 {
            Some(start_pods(&admin, ns, cfg).await?)
        } else {
            None
        };
        let audit_offset = super::audit::end(&api.audit_log).into();
        Ok(RealCluster {
            api,
            namespace,
            sandbox,
            admin,
            admin_kubeconfig,
            service_account,
            token,
            audit_offset,
        })
    }

    /// The audited requests since set-up or the last [`RealCluster::clear_audit`].
    ///
    /// # Errors
    /// When the log cannot be read or parsed.
    pub fn audit(&self) -> Result<Vec<super::audit::AuditEvent>> {
        let offset = self.audit_offset.load(std::sync::atomic::Ordering::SeqCst);
        // The log is the shared API server's: this fleet's requests are those in its
        // namespace and those of its controller's ServiceAccount (whose name holds the
        // namespace), cluster-scoped ones included.
        let sa = format!(
            "system:serviceaccount:{}:{}",
            self.namespace, self.service_account
        );
        Ok(super::audit::read(&self.api.audit_log, offset)?
            .into_iter()
            .filter(|e| e.namespace == self.namespace || e.user == sa)
            .collect())
    }

    /// Forgets what the audit log holds so far.
    pub fn clear_audit(&self) {
        self.audit_offset.store(
            super::audit::end(&self.api.audit_log),
            std::sync::atomic::Ordering::SeqCst,
        );
    }
}
