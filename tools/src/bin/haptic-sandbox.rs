//! `haptic-sandbox`: local, protocol-faithful peers for haptic (DESIGN.md §5): a Kubernetes API
//! emulator and HAProxy pods with Dataplane API v3 endpoints.
//!
//! - `haptic-sandbox up --pods 3 [--dir D] [--json]`: starts both peers, registers each pod as a Pod
//!   object (and the Dataplane credentials as a Secret) in namespace `haptic-sandbox`, and stays up
//!   until Ctrl-C or SIGTERM. With `--json`, stdout carries exactly one JSON line once ready; logs
//!   go to stderr.
//! - `haptic-sandbox demo`: pushes `tests/corpus/renders/` to every pod and checks the answers.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result};
use base64::Engine as _;
use clap::{Args, Parser, Subcommand};
use haptic_tools::sandbox::apiserver::{ApiServer, ApiServerConfig};
use haptic_tools::sandbox::pods::{
    DEFAULT_DATAPLANE_PORT, Mode, PodInfo, Sandbox, SandboxConfig, demo,
};
use serde_json::json;

/// Label every sandbox pod carries (the pod selector).
const POD_LABEL: (&str, &str) = ("app.kubernetes.io/name", "haproxy");
/// Secret holding the Dataplane credentials.
const SECRET: &str = "haproxy-dataplane-credentials";

#[derive(Debug, Parser)]
#[command(
    name = "haptic-sandbox",
    about = "Local Kubernetes API and HAProxy Dataplane API peers for haptic"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Start the Kubernetes API emulator and the HAProxy pods; stay up until Ctrl-C/SIGTERM.
    Up(UpArgs),
    /// Push every render of tests/corpus/renders/ to every pod and check the answers.
    Demo(DemoArgs),
}

#[derive(Debug, Args)]
struct PodArgs {
    /// HAProxy pods.
    #[arg(long, default_value_t = 3)]
    pods: usize,
    /// Stand-in pods (Dataplane endpoints without HAProxy) for scale tests.
    #[arg(long, default_value_t = 0)]
    stand_in_pods: usize,
    /// Delay of every answer of a stand-in pod, in ms.
    #[arg(long, default_value_t = 0)]
    stand_in_delay_ms: u64,
    /// Working directory (pod files, kubeconfig); a temporary one by default.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Dataplane port on each pod address.
    #[arg(long, default_value_t = DEFAULT_DATAPLANE_PORT)]
    dataplane_port: u16,
    /// Reload batching delay in ms (the real Dataplane API's --reload-delay defaults to 5 s).
    #[arg(long, default_value_t = 5000)]
    reload_delay_ms: u64,
    /// Use loopback mode even as root (no namespaces).
    #[arg(long)]
    loopback: bool,
    /// Dataplane user.
    #[arg(long, default_value = "admin")]
    username: String,
    /// Dataplane password.
    #[arg(long, default_value = "haptic-sandbox")]
    password: String,
}

#[derive(Debug, Args)]
struct UpArgs {
    #[command(flatten)]
    pods: PodArgs,
    /// Print exactly one JSON line on stdout once ready.
    #[arg(long)]
    json: bool,
    /// Namespace of the Pod objects and the Secret.
    #[arg(long, default_value = "haptic-sandbox")]
    namespace: String,
    /// Run the pods only, without the Kubernetes API emulator.
    #[arg(long)]
    no_apiserver: bool,
}

#[derive(Debug, Args)]
struct DemoArgs {
    /// HAProxy pods.
    #[arg(long, default_value_t = 2)]
    pods: usize,
    /// The render corpus.
    #[arg(long, default_value = "tests/corpus/renders")]
    renders: PathBuf,
    /// Use loopback mode even as root.
    #[arg(long)]
    loopback: bool,
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("haptic-sandbox: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let res = rt.block_on(async {
        match cli.cmd {
            Cmd::Up(a) => up(a).await.map(|()| true),
            Cmd::Demo(a) => run_demo(a).await,
        }
    });
    match res {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::FAILURE,
        Err(e) => {
            eprintln!("haptic-sandbox: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn sandbox_config(
    a: &PodArgs,
    on_kill: Option<haptic_tools::sandbox::pods::KillHook>,
) -> SandboxConfig {
    SandboxConfig {
        pods: a.pods,
        stand_in_pods: a.stand_in_pods,
        stand_in_delay: Duration::from_millis(a.stand_in_delay_ms),
        dir: a.dir.clone(),
        dataplane_port: a.dataplane_port,
        username: a.username.clone(),
        password: a.password.clone(),
        reload_delay: Duration::from_millis(a.reload_delay_ms),
        force_loopback: a.loopback,
        on_kill,
        ..SandboxConfig::default()
    }
}

async fn wait_for_signal() -> Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r?,
        _ = term.recv() => {}
    }
    Ok(())
}

/// The emulator's REST API, as kubectl would use it (plain HTTP on loopback).
#[derive(Debug, Clone)]
struct Kube {
    http: reqwest::Client,
    base: String,
    ns: String,
}

impl Kube {
    async fn send(
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

    async fn register_pod(&self, pod: &PodInfo) -> Result<()> {
        let mut annotations = serde_json::Map::new();
        if pod.dataplane_port != DEFAULT_DATAPLANE_PORT {
            annotations.insert(
                "haproxy-haptic.org/dataplane-port".into(),
                json!(pod.dataplane_port.to_string()),
            );
        }
        let obj = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": pod.name,
                "namespace": self.ns,
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
        });
        let path = format!("/api/v1/namespaces/{}/pods", self.ns);
        let mut created = self.send(reqwest::Method::POST, &path, obj).await?;
        let now = jiff::Timestamp::now().to_string();
        created["status"] = json!({
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
        });
        self.send(
            reqwest::Method::PUT,
            &format!("{path}/{}/status", pod.name),
            created,
        )
        .await?;
        Ok(())
    }

    async fn create_secret(&self, user: &str, pass: &str) -> Result<()> {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let obj = json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": SECRET, "namespace": self.ns},
            "type": "Opaque",
            "data": {"username": b64(user), "password": b64(pass)},
        });
        self.send(
            reqwest::Method::POST,
            &format!("/api/v1/namespaces/{}/secrets", self.ns),
            obj,
        )
        .await?;
        Ok(())
    }

    async fn delete_pod(&self, name: &str) {
        let path = format!("/api/v1/namespaces/{}/pods/{name}", self.ns);
        if let Err(e) = self.send(reqwest::Method::DELETE, &path, json!({})).await {
            tracing::warn!("deleting Pod {name}: {e:#}");
        }
    }
}

async fn up(a: UpArgs) -> Result<()> {
    let api = if a.no_apiserver {
        None
    } else {
        Some(ApiServer::start(ApiServerConfig::default()).await.context(
            "the Kubernetes API emulator failed to start (--no-apiserver runs the pods alone)",
        )?)
    };
    let kube = api.as_ref().map(|api| Kube {
        http: reqwest::Client::builder()
            .no_proxy()
            .build()
            .unwrap_or_default(),
        base: api.url(),
        ns: a.namespace.clone(),
    });
    let hook: Option<haptic_tools::sandbox::pods::KillHook> = kube.clone().map(|k| {
        let rt = tokio::runtime::Handle::current();
        Arc::new(move |name: String| {
            let k = k.clone();
            rt.spawn(async move { k.delete_pod(&name).await });
        }) as haptic_tools::sandbox::pods::KillHook
    });
    let sandbox = Sandbox::start(sandbox_config(&a.pods, hook)).await?;
    let result = async {
        let pods = sandbox.pods();
        let mut kubeconfig = None;
        if let (Some(api), Some(kube)) = (&api, &kube) {
            let _ = kube
                .send(
                    reqwest::Method::POST,
                    "/api/v1/namespaces",
                    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": a.namespace}}),
                )
                .await;
            kube.create_secret(sandbox.username(), sandbox.password()).await?;
            for p in &pods {
                kube.register_pod(p).await?;
            }
            let path = sandbox.dir().join("kubeconfig");
            api.write_kubeconfig(&path, &a.namespace)?;
            kubeconfig = Some(path);
        }
        let line = json!({
            "kubeconfig": kubeconfig,
            "namespace": a.namespace,
            "pod_selector": format!("{}={}", POD_LABEL.0, POD_LABEL.1),
            "dataplane_secret": SECRET,
            "api_server": api.as_ref().map(ApiServer::url),
            "mode": sandbox.mode(),
            "pods": pods.iter().map(|p| json!({
                "name": p.name,
                "pod_ip": p.pod_ip.to_string(),
                "dataplane_url": p.dataplane_url,
                "username": sandbox.username(),
                "password": sandbox.password(),
                "traffic_address": p.traffic_address.to_string(),
                "port_offset": p.port_offset,
                "echo_address": p.echo_address.to_string(),
                "stand_in": p.stand_in,
            })).collect::<Vec<_>>(),
        });
        if a.json {
            println!("{line}");
        } else {
            eprintln!("haptic-sandbox is up ({:?} mode):\n{}", sandbox.mode(), serde_json::to_string_pretty(&line)?);
        }
        if sandbox.mode() == Mode::Loopback {
            eprintln!("haptic-sandbox: loopback mode (not root): see the start-up notice above for the rewrites");
        }
        eprintln!("haptic-sandbox: up; Ctrl-C or SIGTERM stops it");
        wait_for_signal().await
    }
    .await;
    eprintln!("haptic-sandbox: stopping");
    sandbox.shutdown().await;
    if let Some(api) = api {
        api.shutdown().await;
    }
    result
}

async fn run_demo(a: DemoArgs) -> Result<bool> {
    println!(
        "haptic-sandbox demo: this is the SANDBOX demo. It drives the sandbox's HAProxy pods directly"
    );
    println!(
        "through their Dataplane API endpoints over HTTP; the haptic controller does not exist yet."
    );
    let api = match ApiServer::start(ApiServerConfig::default()).await {
        Ok(api) => {
            println!("Kubernetes API emulator: {}", api.url());
            Some(api)
        }
        Err(e) => {
            println!("Kubernetes API emulator not started ({e}); the demo does not need it");
            None
        }
    };
    let sandbox = Sandbox::start(SandboxConfig {
        pods: a.pods,
        reload_delay: Duration::from_millis(200),
        force_loopback: a.loopback,
        ..SandboxConfig::default()
    })
    .await?;
    println!(
        "{} pod(s) in {:?} mode: {}",
        a.pods,
        sandbox.mode(),
        sandbox
            .pods()
            .iter()
            .map(|p| format!("{} {}", p.name, p.dataplane_url))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let res = demo::run(
        &sandbox.pods(),
        sandbox.username(),
        sandbox.password(),
        &a.renders,
    )
    .await;
    sandbox.shutdown().await;
    if let Some(api) = api {
        api.shutdown().await;
    }
    let ok = res?;
    println!(
        "{}",
        if ok {
            "demo: everything matched"
        } else {
            "demo: MISMATCHES (see above)"
        }
    );
    Ok(ok)
}
