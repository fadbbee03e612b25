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
use clap::{Args, Parser, Subcommand};
use haptic_tools::sandbox::apiserver::{ApiServer, ApiServerConfig};
use haptic_tools::sandbox::cluster::{Kube, POD_LABEL, SECRET};
use haptic_tools::sandbox::pods::spec::SpecCheck;
use haptic_tools::sandbox::pods::{DEFAULT_DATAPLANE_PORT, Mode, Sandbox, SandboxConfig, demo};
use serde_json::json;

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
    /// Hold every Dataplane exchange to the published OpenAPI document
    /// (shared/reference/dataplaneapi/): `record` logs each violation and lists them at
    /// `GET /_sandbox/spec-violations`; `enforce` also fails the shutdown when any was recorded.
    #[arg(long, value_enum, default_value_t = SpecCheck::Record)]
    spec_check: SpecCheck,
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
        spec_check: a.spec_check,
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

async fn up(a: UpArgs) -> Result<()> {
    let api = if a.no_apiserver {
        None
    } else {
        Some(ApiServer::start(ApiServerConfig::default()).await.context(
            "the Kubernetes API emulator failed to start (--no-apiserver runs the pods alone)",
        )?)
    };
    let kube = api
        .as_ref()
        .map(|api| Kube::new(api.url(), a.namespace.clone()));
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
            kube.register_sandbox(&sandbox).await?;
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
        "through their Dataplane API endpoints over HTTP; no controller is involved (the controller's demo is `haptic-demo`)."
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
        // Recorded and summed up below, not a panic at the end of a demo.
        spec_check: SpecCheck::Record,
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
    let violations = sandbox.spec_violations();
    if !violations.is_empty() {
        println!(
            "demo: the pods' exchanges broke the Data Plane API spec: {}",
            haptic_tools::sandbox::pods::spec::report(&violations)
        );
    }
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
