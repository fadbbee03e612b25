//! The sandbox as a small cluster: the Kubernetes API emulator plus the HAProxy pods, with each pod
//! registered as a Running, Ready Pod object (labels `app.kubernetes.io/name=haproxy`) and the
//! Dataplane credentials Secret created, and a kubeconfig written. What `haptic-sandbox up` runs,
//! and what the controller's end-to-end tests and `haptic-demo` start in-process.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result};
use base64::Engine as _;
use serde_json::json;

use super::apiserver::{ApiServer, ApiServerConfig};
use super::pods::{DEFAULT_DATAPLANE_PORT, KillHook, PodInfo, Sandbox, SandboxConfig};

/// Label every sandbox Pod object carries (the selector is `app.kubernetes.io/name=haproxy`).
pub const POD_LABEL: (&str, &str) = ("app.kubernetes.io/name", "haproxy");

/// The Dataplane credentials Secret (keys `username`, `password`).
pub const SECRET: &str = "haproxy-dataplane-credentials";

/// Default namespace of the Pod objects and the Secret.
pub const NAMESPACE: &str = "haptic-sandbox";

/// The Pod object of the sandbox pod `pod` in namespace `ns`, as created (no status): labels
/// [`POD_LABEL`], the `haproxy-haptic.org/dataplane-port` annotation when the port is not the
/// default, two containers (`haproxy`, `dataplane`), bound to the node `haptic-sandbox`. The same
/// object goes to the emulator and to a real kube-apiserver (`haptic-testkit`).
#[must_use]
pub fn pod_manifest(pod: &PodInfo, ns: &str) -> serde_json::Value {
    let mut annotations = serde_json::Map::new();
    if pod.dataplane_port != DEFAULT_DATAPLANE_PORT {
        annotations.insert(
            "haproxy-haptic.org/dataplane-port".into(),
            json!(pod.dataplane_port.to_string()),
        );
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod.name,
            "namespace": ns,
            "labels": {POD_LABEL.0: POD_LABEL.1, "app.kubernetes.io/instance": "haptic-sandbox"},
            "annotations": annotations,
        },
        "spec": {
            "nodeName": "haptic-sandbox",
            "containers": [
                {"name": "haproxy", "image": "haproxy:2.6", "ports": [{"name": "http", "containerPort": 80}, {"name": "https", "containerPort": 443}]},
                {"name": "dataplane", "image": "haproxytech/dataplaneapi:3", "ports": [{"name": "dataplane", "containerPort": pod.dataplane_port}]}
            ]
        }
    })
}

/// The `status` a kubelet reports for the running sandbox pod `pod` (`now`: RFC 3339): Running,
/// Ready, its pod IP, both containers running and ready (so `kubectl get pods` prints READY 2/2).
#[must_use]
pub fn pod_status(pod: &PodInfo, now: &str) -> serde_json::Value {
    json!({
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
        "containerStatuses": [
            {"name": "dataplane", "image": "haproxytech/dataplaneapi:3",
             "imageID": "", "containerID": format!("sandbox://{}/dataplane", pod.name),
             "ready": true, "started": true, "restartCount": 0,
             "state": {"running": {"startedAt": now}}},
            {"name": "haproxy", "image": "haproxy:2.6",
             "imageID": "", "containerID": format!("sandbox://{}/haproxy", pod.name),
             "ready": true, "started": true, "restartCount": 0,
             "state": {"running": {"startedAt": now}}}
        ],
    })
}

/// The Dataplane credentials Secret [`SECRET`] in `ns` (keys `username`, `password`).
#[must_use]
pub fn secret_manifest(ns: &str, user: &str, pass: &str) -> serde_json::Value {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": SECRET, "namespace": ns},
        "type": "Opaque",
        "data": {"username": b64(user), "password": b64(pass)},
    })
}

/// The DeleteOptions of a Pod whose containers are gone (`gracePeriodSeconds: 0`): what the
/// kubelet sends after a pod's processes died. A bound pod deleted with the default grace period
/// only gets a `deletionTimestamp` on a real API server, and no kubelet here finishes it.
#[must_use]
pub fn pod_gone() -> serde_json::Value {
    json!({"gracePeriodSeconds": 0})
}

/// The emulator's REST API, as kubectl would use it (plain HTTP on loopback).
#[derive(Debug, Clone)]
pub struct Kube {
    http: reqwest::Client,
    base: String,
    ns: String,
}

impl Kube {
    /// Sends one JSON request.
    ///
    /// # Errors
    /// Transport errors and non-success answers (with the API's message).
    pub async fn send(
        &self,
        m: reqwest::Method,
        path: &str,
        body: serde_json::Value,
    ) -> Result<serde_json::Value> {
        let r = self
            .http
            .request(m.clone(), format!("{}{path}", self.base))
            .json(&body)
            .send()
            .await
            .with_context(|| format!("{m} {path}"))?;
        let status = r.status();
        let v: serde_json::Value = r.json().await.unwrap_or_default();
        if !status.is_success() {
            anyhow::bail!("{m} {path}: {status}: {}", v["message"]);
        }
        Ok(v)
    }

    /// Registers `pod` as a Running, Ready Pod object: [`pod_manifest`] created, then
    /// [`pod_status`] written through `/status`, as the kubelet would.
    ///
    /// # Errors
    /// The API answer when it is not a success.
    pub async fn register_pod(&self, pod: &PodInfo) -> Result<()> {
        let path = format!("/api/v1/namespaces/{}/pods", self.ns);
        let mut created = self
            .send(reqwest::Method::POST, &path, pod_manifest(pod, &self.ns))
            .await?;
        created["status"] = pod_status(pod, &jiff::Timestamp::now().to_string());
        self.send(
            reqwest::Method::PUT,
            &format!("{path}/{}/status", pod.name),
            created,
        )
        .await?;
        Ok(())
    }

    /// Makes `sandbox` known to the API: the namespace (an existing one is kept), the
    /// credentials Secret ([`Kube::create_secret`]) and each pod's Pod object
    /// ([`Kube::register_pod`]), in that order.
    ///
    /// # Errors
    /// The API answer to the Secret or a Pod when it is not a success.
    pub async fn register_sandbox(&self, sandbox: &Sandbox) -> Result<()> {
        let namespace =
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.ns}});
        let _ = self
            .send(reqwest::Method::POST, "/api/v1/namespaces", namespace)
            .await;
        self.create_secret(sandbox.username(), sandbox.password())
            .await?;
        for p in sandbox.pods() {
            self.register_pod(&p).await?;
        }
        Ok(())
    }

    /// Creates the credentials Secret [`SECRET`] ([`secret_manifest`]).
    ///
    /// # Errors
    /// The API answer when it is not a success.
    pub async fn create_secret(&self, user: &str, pass: &str) -> Result<()> {
        self.send(
            reqwest::Method::POST,
            &format!("/api/v1/namespaces/{}/secrets", self.ns),
            secret_manifest(&self.ns, user, pass),
        )
        .await?;
        Ok(())
    }

    /// Deletes a Pod object (logged, never fails) with [`pod_gone`], as the kubelet does once
    /// the containers are dead.
    pub async fn delete_pod(&self, name: &str) {
        let path = format!("/api/v1/namespaces/{}/pods/{name}", self.ns);
        if let Err(e) = self.send(reqwest::Method::DELETE, &path, pod_gone()).await {
            tracing::warn!("deleting Pod {name}: {e:#}");
        }
    }
}

impl Kube {
    /// A client for the emulator at `base` (`http://127.0.0.1:PORT`), objects in `ns`.
    #[must_use]
    pub fn new(base: String, ns: String) -> Kube {
        Kube {
            http: reqwest::Client::builder()
                .no_proxy()
                .build()
                .unwrap_or_default(),
            base,
            ns,
        }
    }
}

/// Settings of a [`Cluster`].
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// The pods (the emulator is always started).
    pub sandbox: SandboxConfig,
    /// Namespace of the Pod objects and the Secret. Default [`NAMESPACE`].
    pub namespace: String,
    /// CustomResourceDefinition objects (JSON, `apiextensions.k8s.io/v1`) created before the
    /// namespace, e.g. the controller's four CRDs. Default: none.
    pub crds: Vec<serde_json::Value>,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            sandbox: SandboxConfig {
                pods: 3,
                reload_delay: Duration::from_millis(200),
                ..SandboxConfig::default()
            },
            namespace: NAMESPACE.to_owned(),
            crds: Vec::new(),
        }
    }
}

/// A running emulator plus pods, registered. [`Cluster::shutdown`] stops both.
#[derive(Debug)]
pub struct Cluster {
    /// The Kubernetes API emulator.
    pub api: ApiServer,
    /// The HAProxy pods.
    pub sandbox: Sandbox,
    /// REST access to the emulator.
    pub kube: Kube,
    /// The kubeconfig (in the sandbox's directory), context namespace = `namespace`.
    pub kubeconfig: PathBuf,
    /// Namespace of the Pod objects and the Secret.
    pub namespace: String,
}

impl Cluster {
    /// Starts the emulator and the pods, creates the CRDs, the namespace and the Secret,
    /// registers the pods and writes the kubeconfig. A pod killed through `POST /_sandbox/kill` loses its Pod
    /// object too.
    ///
    /// # Errors
    /// When a peer cannot start or a registration is refused.
    pub async fn start(mut cfg: ClusterConfig) -> Result<Cluster> {
        let api = ApiServer::start(ApiServerConfig::default())
            .await
            .context("the Kubernetes API emulator failed to start")?;
        let kube = Kube::new(api.url(), cfg.namespace.clone());
        let k = kube.clone();
        let rt = tokio::runtime::Handle::current();
        let hook: KillHook = Arc::new(move |name: String| {
            let k = k.clone();
            rt.spawn(async move { k.delete_pod(&name).await });
        });
        cfg.sandbox.on_kill = Some(hook);
        let sandbox = Sandbox::start(cfg.sandbox).await?;
        for crd in cfg.crds {
            kube.send(
                reqwest::Method::POST,
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                crd,
            )
            .await
            .context("creating a CustomResourceDefinition")?;
        }
        kube.register_sandbox(&sandbox).await?;
        let kubeconfig = sandbox.dir().join("kubeconfig");
        api.write_kubeconfig(&kubeconfig, &cfg.namespace)?;
        Ok(Cluster {
            api,
            sandbox,
            kube,
            kubeconfig,
            namespace: cfg.namespace,
        })
    }

    /// The pods' label selector.
    #[must_use]
    pub fn selector(&self) -> String {
        format!("{}={}", POD_LABEL.0, POD_LABEL.1)
    }

    /// Stops the pods, then the emulator.
    pub async fn shutdown(self) {
        self.sandbox.shutdown().await;
        self.api.shutdown().await;
    }
}
