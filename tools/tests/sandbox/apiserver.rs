//! Kubernetes API emulator tests: clients we did not write (kubectl, kube's typed client and
//! `watcher`) against an in-process emulator on 127.0.0.1:0.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod custom;
mod faults;
mod kube_client;
mod kubectl;
mod leases;
mod watch;

use haptic_tools::sandbox::apiserver::{ApiServer, ApiServerConfig};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::Duration;

/// `PATCH` of `name` with a JSON merge patch (default parameters); the object stored.
pub async fn merge_patch<K>(api: &kube::Api<K>, name: &str, patch: Value) -> K
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch(
        name,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(patch),
    )
    .await
    .unwrap()
}

/// `POST` of the object `obj` describes (default parameters); the object stored.
pub async fn create<K>(api: &kube::Api<K>, obj: Value) -> K
where
    K: Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(obj).unwrap();
    api.create(&kube::api::PostParams::default(), &obj)
        .await
        .unwrap()
}

/// Upper bound of any wait in these tests (never an assertion on timing).
pub const WAIT: Duration = Duration::from_secs(60);

/// A running emulator with a kubeconfig in a temporary directory.
pub struct Env {
    pub server: ApiServer,
    pub dir: tempfile::TempDir,
    pub kubeconfig: PathBuf,
}

impl Env {
    pub async fn start() -> Env {
        let server = ApiServer::start(ApiServerConfig::default()).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        server.write_kubeconfig(&kubeconfig, "default").unwrap();
        Env {
            server,
            dir,
            kubeconfig,
        }
    }

    /// kube client from the written kubeconfig; `retry` = kube's default 429/503/504 retries.
    pub async fn client(&self, retry: bool) -> kube::Client {
        let kc = kube::config::Kubeconfig::read_from(&self.kubeconfig).unwrap();
        let mut cfg =
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .unwrap();
        cfg.default_retry = retry;
        kube::Client::try_from(cfg).unwrap()
    }

    /// A raw `GET` of `path` ([`Env::http`] without a body).
    pub async fn get(&self, path: &str) -> (u16, Value, reqwest::header::HeaderMap) {
        self.http("GET", path, "", None).await
    }

    /// Raw HTTP helper: (status, body as JSON or Null).
    pub async fn http(
        &self,
        method: &str,
        path: &str,
        ct: &str,
        body: Option<Vec<u8>>,
    ) -> (u16, Value, reqwest::header::HeaderMap) {
        let client = reqwest::Client::new();
        let mut req = client.request(
            method.parse().unwrap(),
            format!("{}{}", self.server.url(), path),
        );
        if let Some(b) = body {
            req = req.header("content-type", ct).body(b);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let text = resp.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::Null),
            headers,
        )
    }
}

/// The test CRD: the shape of haptic's HAProxyCfg.
pub fn haproxycfg_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "haproxycfgs.haproxy-haptic.org"},
        "spec": {
            "group": "haproxy-haptic.org",
            "scope": "Namespaced",
            "names": {"plural": "haproxycfgs", "singular": "haproxycfg", "kind": "HAProxyCfg",
                "listKind": "HAProxyCfgList", "shortNames": ["hpcfg"]},
            "versions": [{
                "name": "v1alpha1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Checksum", "type": "string", "jsonPath": ".spec.checksum"},
                    {"name": "Mode", "type": "string", "jsonPath": ".spec.mode"},
                    {"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
                ],
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {"type": "object", "required": ["checksum", "content"], "properties": {
                            "checksum": {"type": "string", "minLength": 1},
                            "content": {"type": "string"},
                            "mode": {"type": "string", "enum": ["full", "partial"]},
                            "replicas": {"type": "integer"}
                        }},
                        "status": {"type": "object", "properties": {
                            "observedGeneration": {"type": "integer"},
                            "conditions": {"type": "array", "x-kubernetes-list-type": "map",
                                "x-kubernetes-list-map-keys": ["type"], "items": {"type": "object",
                                "required": ["type", "status"],
                                "properties": {"type": {"type": "string"}, "status": {"type": "string"},
                                    "reason": {"type": "string"}}}}
                        }}
                    }
                }}
            }]
        }
    })
}

/// Runs `kube::runtime::watcher` on its own task (it only makes requests while polled) and hands
/// its items over a channel; the task ends with the returned receiver.
pub fn spawn_watcher<K>(api: kube::Api<K>) -> Watcher<K>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    spawn_watcher_with(api, kube::runtime::watcher::Config::default())
}

/// [`spawn_watcher`] with a watcher configuration.
pub fn spawn_watcher_with<K>(
    api: kube::Api<K>,
    config: kube::runtime::watcher::Config,
) -> Watcher<K>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    use futures::StreamExt as _;
    let (tx, rx) = tokio::sync::mpsc::channel(1024);
    let task = tokio::spawn(async move {
        let mut s = kube::runtime::watcher(api, config).boxed();
        while let Some(item) = s.next().await {
            if tx.send(item.map_err(|e| e.to_string())).await.is_err() {
                return;
            }
        }
    });
    Watcher { rx, task }
}

/// A watcher running on its own task.
pub struct Watcher<K> {
    rx: tokio::sync::mpsc::Receiver<Result<kube::runtime::watcher::Event<K>, String>>,
    task: tokio::task::JoinHandle<()>,
}

impl<K> Watcher<K> {
    /// The next item, waiting at most [`WAIT`].
    pub async fn next(&mut self) -> Result<kube::runtime::watcher::Event<K>, String> {
        tokio::time::timeout(WAIT, self.rx.recv())
            .await
            .expect("watcher stalled")
            .expect("watcher ended")
    }

    /// The next event, panicking on an error item.
    pub async fn event(&mut self) -> kube::runtime::watcher::Event<K> {
        self.next().await.unwrap()
    }
}

impl<K> Drop for Watcher<K> {
    fn drop(&mut self) {
        self.task.abort();
    }
}
