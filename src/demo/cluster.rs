//! The demo's cluster: the sandbox's Kubernetes API emulator and HAProxy pods, with the objects
//! `haptic-sandbox up` registers (namespace, Dataplane credentials Secret, one Running and Ready
//! Pod object per HAProxy pod) plus the four CRDs, and a kubeconfig for the controller.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use haptic_tools::sandbox::apiserver::{ApiServer, ApiServerConfig};
use haptic_tools::sandbox::pods::{DEFAULT_DATAPLANE_PORT, PodInfo, Sandbox, SandboxConfig};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use serde_json::json;

use super::DemoError;

/// Namespace of the Pod objects, the Secret, the Lease and the published objects.
pub const NAMESPACE: &str = "haptic-sandbox";
/// The pods' label (the controller's `--pod-selector`).
pub const POD_LABEL: (&str, &str) = ("app.kubernetes.io/name", "haproxy");
/// The Secret holding the Dataplane credentials (`username`, `password`).
pub const DATAPLANE_SECRET: &str = "haproxy-dataplane-credentials";
/// Dataplane reload batching of the sandbox pods (the real agent's default is 5 s; shorter keeps
/// the demo brisk while still batching).
const RELOAD_DELAY: Duration = Duration::from_secs(1);

/// The running peers.
pub struct Cluster {
    /// The Kubernetes API emulator.
    pub api: ApiServer,
    /// The HAProxy pods.
    pub sandbox: Sandbox,
    /// A client for the emulator (retry layer off).
    pub client: kube::Client,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("api", &self.api)
            .field("sandbox", &self.sandbox)
            .finish_non_exhaustive()
    }
}

impl Cluster {
    /// Starts the emulator and `pods` HAProxy pods, registers the namespace, the Secret, the Pod
    /// objects and the CRDs, and writes a kubeconfig for the emulator to `kubeconfig`.
    ///
    /// # Errors
    /// [`DemoError::Sandbox`] when a peer does not start (e.g. `haproxy` missing),
    /// [`DemoError::Kube`] when registering an object fails.
    ///
    /// # Cancel safety
    /// Not cancel safe in a useful sense: dropping it midway drops the peers started so far
    /// (which stops them).
    pub async fn start(pods: usize, kubeconfig: &Path) -> Result<Cluster, DemoError> {
        let api = ApiServer::start(ApiServerConfig::default())
            .await
            .map_err(|e| DemoError::Sandbox(e.into()))?;
        let sandbox = Sandbox::start(SandboxConfig {
            pods,
            reload_delay: RELOAD_DELAY,
            ..SandboxConfig::default()
        })
        .await
        .map_err(|e| DemoError::Sandbox(e.into()))?;
        api.write_kubeconfig(kubeconfig, NAMESPACE)
            .map_err(|e| DemoError::Sandbox(e.into()))?;
        let client = crate::k8s::client::from_kubeconfig(kubeconfig).await?;
        let cluster = Cluster {
            api,
            sandbox,
            client,
        };
        cluster.register().await?;
        Ok(cluster)
    }

    async fn register(&self) -> Result<(), DemoError> {
        let kube = |what: &'static str| move |source| DemoError::Kube { what, source };
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(NAMESPACE.into()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        create(&Api::all(self.client.clone()), &ns)
            .await
            .map_err(kube("create namespace"))?;
        let crds: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        for crd in crate::k8s::crd::crds() {
            create(&crds, &crd).await.map_err(kube("create crd"))?;
        }
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(DATAPLANE_SECRET.into()),
                namespace: Some(NAMESPACE.into()),
                ..ObjectMeta::default()
            },
            type_: Some("Opaque".into()),
            data: Some(BTreeMap::from([
                (
                    "username".to_owned(),
                    ByteString(self.sandbox.username().as_bytes().to_vec()),
                ),
                (
                    "password".to_owned(),
                    ByteString(self.sandbox.password().as_bytes().to_vec()),
                ),
            ])),
            ..Secret::default()
        };
        create(&Api::namespaced(self.client.clone(), NAMESPACE), &secret)
            .await
            .map_err(kube("create secret"))?;
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), NAMESPACE);
        for pod in self.sandbox.pods() {
            register_pod(&pods, &pod)
                .await
                .map_err(kube("register pod"))?;
        }
        Ok(())
    }

    /// Stops the pods and the emulator.
    ///
    /// # Cancel safety
    /// Cancelling leaves the rest to the peers' destructors.
    pub async fn shutdown(self) {
        self.sandbox.shutdown().await;
        self.api.shutdown().await;
    }
}

/// Creates `obj`; an object that already exists is fine.
async fn create<K>(api: &Api<K>, obj: &K) -> Result<(), kube::Error>
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.create(&PostParams::default(), obj).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Registers one pod as `haptic-sandbox up` does: the Pod object, then its status (Running,
/// Ready, `podIP`), as a kubelet would report it.
async fn register_pod(api: &Api<Pod>, pod: &PodInfo) -> Result<(), kube::Error> {
    let mut annotations = serde_json::Map::new();
    if pod.dataplane_port != DEFAULT_DATAPLANE_PORT {
        annotations.insert(
            "haproxy-haptic.org/dataplane-port".into(),
            json!(pod.dataplane_port.to_string()),
        );
    }
    let obj: Pod = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod.name,
            "namespace": NAMESPACE,
            "labels": {POD_LABEL.0: POD_LABEL.1, "app.kubernetes.io/instance": "haptic-demo"},
            "annotations": annotations,
        },
        "spec": {
            "nodeName": "haptic-sandbox",
            "containers": [
                {"name": "haproxy", "image": "haproxy:2.6"},
                {"name": "dataplane", "image": "haproxytech/dataplaneapi:3",
                 "ports": [{"name": "dataplane", "containerPort": pod.dataplane_port}]}
            ]
        }
    }))
    .map_err(kube::Error::SerdeError)?;
    let mut created = api.create(&PostParams::default(), &obj).await?;
    let now = jiff_now();
    created.status = Some(
        serde_json::from_value(json!({
            "phase": "Running",
            "podIP": pod.pod_ip.to_string(),
            "podIPs": [{"ip": pod.pod_ip.to_string()}],
            "hostIP": "127.0.0.1",
            "startTime": now,
            "conditions": [
                {"type": "Initialized", "status": "True", "lastTransitionTime": now},
                {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
                {"type": "Ready", "status": "True", "lastTransitionTime": now}
            ],
        }))
        .map_err(kube::Error::SerdeError)?,
    );
    api.replace_status(&pod.name, &PostParams::default(), &created)
        .await?;
    Ok(())
}

/// Now as RFC 3339 (the demo's only clock read for object timestamps).
fn jiff_now() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}
