//! `haptic plan` (issue 28): what the deployer would do to each pod to bring it to a render,
//! read-only. The render comes from a render directory or from a journal (its newest validated
//! render); the pods from `--endpoint` URLs (a sandbox) or from the cluster (the controller's
//! own `--pod-selector`, `--dataplane-secret`, ...: the same flags and `HAPTIC_*` variables as
//! `haptic run`, so it runs beside the controller with its environment). Each pod is read and
//! planned by [`plan_endpoint`], the deployer's own reads and pure planning.
//!
//! Requests made: to the Kubernetes API, one pod list and one Secret read; to each pod, the
//! `GET`s of a sync. Nothing is written anywhere: the journal is opened read-only.
//!
//! Exit codes: 0 when no pod would change, 2 when one would, 1 on an error (a pod that cannot be
//! read, a render that cannot be loaded, a cluster that cannot be listed); the other pods'
//! plans are still printed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use haptic_journal::{
    ComponentCheckpoint, ComponentState, EndpointFiles, Journal, JournalOptions, OpenError,
};
use k8s_openapi::api::core::v1::Pod;

use crate::components::deployer::{
    PodPlan, SCHEDULER_COMPONENT, SyncLimits, SyncPolicy, basic_auth, plan_endpoint,
};
use crate::core::render::{JournaledRender, RenderContent};
use crate::dataplane::{BasicAuth, ClientSettings, Dataplane, Endpoint as DpEndpoint};
use crate::dispatch::render::load as load_render;

mod report;
use report::{json_report, text_report};

/// Flags of `haptic plan`.
#[derive(Debug, Clone, Args)]
pub struct PlanArgs {
    /// The render to plan for: a render directory (`haproxy.cfg` plus `maps/`, `ssl/`, `ca/`,
    /// `general/`, `crt-lists/`). Without it, the newest validated render of `--journal`.
    #[arg(long)]
    pub render_dir: Option<PathBuf>,
    /// A controller's journal, opened read-only: a stopped controller's file, a consistent
    /// copy, or a live one in `--journal-concurrency single-writer`. Gives the newest
    /// validated render (without `--render-dir`) and the controller's record of which files
    /// each pod loaded (so the plan reloads for what the deployer would).
    #[arg(long)]
    pub journal: Option<PathBuf>,
    /// A pod's Dataplane API, `http://user:password@host:port` (repeat per pod; credentials in
    /// the URL's user info). Without any, the pods are listed from the cluster.
    #[arg(long = "endpoint", value_name = "URL")]
    pub endpoints: Vec<String>,
    /// Kubeconfig file (cluster mode); in-cluster configuration when absent.
    #[arg(long, env = "HAPTIC_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Namespace of the HAProxy pods (default: the kubeconfig context's, or the pod's own).
    #[arg(long, env = "HAPTIC_NAMESPACE")]
    pub namespace: Option<String>,
    /// Label selector of the HAProxy pods (cluster mode), as `haptic run`'s.
    #[arg(long, env = "HAPTIC_POD_SELECTOR")]
    pub pod_selector: Option<String>,
    /// Dataplane API port (per pod: annotation `haproxy-haptic.org/dataplane-port`).
    #[arg(long, env = "HAPTIC_DATAPLANE_PORT", default_value_t = 5555)]
    pub dataplane_port: u16,
    /// Secret holding the Dataplane API credentials (cluster mode), as `haptic run`'s.
    #[arg(long, env = "HAPTIC_DATAPLANE_SECRET")]
    pub dataplane_secret: Option<String>,
    /// As `haptic run`'s: a change of more operations than this is planned as one raw push.
    #[arg(long, env = "HAPTIC_RAW_PUSH_THRESHOLD", default_value_t = 100)]
    pub raw_push_threshold: u32,
    /// Pods read at once (each with the reads of one sync, one after the other).
    #[arg(long, default_value_t = 16)]
    pub parallel_pods: usize,
    /// Bound of one Kubernetes or Dataplane request.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    pub request_timeout: Duration,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Why `haptic plan` could not plan (exit code 1).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// The command line names no render, or no pods.
    #[error("{0}")]
    Usage(String),
    /// The render directory could not be read.
    #[error("cannot read the render directory {dir}")]
    RenderDir {
        /// The directory.
        dir: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The journal could not be opened or read, or holds no render to plan for.
    #[error("journal {path}: {message}")]
    Journal {
        /// The journal file.
        path: PathBuf,
        /// What went wrong, with the fix.
        message: String,
    },
    /// The cluster could not be asked for the pods or the credentials.
    #[error("cluster: {0}")]
    Cluster(String),
    /// Some pods could not be read: their lines say why (the others' plans are printed).
    #[error("{failed} of {pods} pods could not be planned")]
    Pods {
        /// Pods that failed.
        failed: usize,
        /// Pods asked.
        pods: usize,
    },
    /// Standard output could not be written.
    #[error("cannot write to stdout")]
    Stdout(#[source] std::io::Error),
}

/// One pod to plan: its name for the output and its Dataplane endpoint.
struct Target {
    pod: String,
    url: String,
    endpoint: DpEndpoint,
    /// The journal's quarantine of the planned render for this pod (`--journal`): rejections
    /// in a row and the wall-clock time of the deployer's next attempt.
    quarantine: Option<(u32, haptic_journal::UnixMillis)>,
}

/// Runs `haptic plan`: `Ok(true)` when some pod would change (exit code 2), `Ok(false)` when
/// none would (0).
///
/// # Errors
/// [`PlanError`] (exit code 1), after printing the plans of the pods that could be read.
pub async fn run(args: PlanArgs) -> Result<bool, PlanError> {
    let (render, records, rejected) = render_and_records(&args)?;
    let (mut targets, skipped) = targets(&args).await?;
    for t in &mut targets {
        t.quarantine = rejected
            .get(&t.url)
            .filter(|r| r.render == render.checksum)
            .map(|r| (r.attempts, r.next_retry_at));
    }
    if targets.is_empty() {
        return Err(PlanError::Usage(if skipped.is_empty() {
            "no pod to plan: the cluster lists no pod for the selector".to_owned()
        } else {
            format!(
                "no pod to plan: the selected pods are not admitted (not Running, no pod IP, \
                 being deleted, or their Dataplane container not ready): {}",
                skipped.join(", ")
            )
        }));
    }
    let dataplane = Dataplane::new(&ClientSettings {
        request_timeout: args.request_timeout,
        ..ClientSettings::default()
    })
    .map_err(|e| PlanError::Usage(format!("cannot build the HTTP client: {e}")))?;
    let limits = SyncLimits::default();
    let policy = SyncPolicy {
        raw_push_threshold: args.raw_push_threshold,
    };
    let plans: Vec<Result<PodPlan, String>> =
        futures::StreamExt::collect(futures::StreamExt::buffered(
            futures::stream::iter(targets.iter().map(|t| {
                let client = dataplane.client(t.endpoint.clone());
                let record = records.get(&t.url);
                let (render, limits, policy) = (&render, &limits, &policy);
                async move {
                    plan_endpoint(&client, render, record, limits, policy)
                        .await
                        .map_err(|e| crate::core::error::chain(&e))
                }
            })),
            args.parallel_pods.max(1),
        ))
        .await;
    let out = if args.json {
        let mut v = serde_json::to_string_pretty(&json_report(&render, &targets, &plans, &skipped))
            .unwrap_or_default();
        v.push('\n');
        v
    } else {
        text_report(&render, &targets, &plans, &skipped)
    };
    {
        use std::io::Write as _;
        let mut stdout = std::io::stdout().lock();
        stdout
            .write_all(out.as_bytes())
            .and_then(|()| stdout.flush())
            .map_err(PlanError::Stdout)?;
    }
    let failed = plans.iter().filter(|p| p.is_err()).count();
    if failed > 0 {
        return Err(PlanError::Pods {
            failed,
            pods: plans.len(),
        });
    }
    Ok(plans.iter().flatten().any(PodPlan::changes))
}

/// The render to plan for, the journal's pod records by endpoint URL and its scheduler's
/// quarantine by endpoint URL (both empty without a journal).
#[allow(clippy::type_complexity)] // three plain maps, named in the doc
fn render_and_records(
    args: &PlanArgs,
) -> Result<
    (
        JournaledRender,
        HashMap<String, EndpointFiles>,
        HashMap<String, haptic_journal::RejectedRender>,
    ),
    PlanError,
> {
    let journal = args.journal.as_deref().map(open_journal).transpose()?;
    let rejected = match (&journal, &args.journal) {
        (Some(j), Some(path)) => match j
            .component_checkpoint(SCHEDULER_COMPONENT)
            .map_err(|e| journal_error(path, &e))?
        {
            Some(ComponentCheckpoint {
                state: ComponentState::Scheduler(s),
                ..
            }) => s
                .rejected
                .into_iter()
                .map(|r| (r.endpoint.to_string(), r))
                .collect(),
            _ => HashMap::new(),
        },
        _ => HashMap::new(),
    };
    let records = match (&journal, &args.journal) {
        (Some(j), Some(path)) => j
            .endpoints_files()
            .map_err(|e| journal_error(path, &e))?
            .into_iter()
            .map(|f| (f.endpoint.to_string(), f))
            .collect(),
        _ => HashMap::new(),
    };
    let render = match (&args.render_dir, &journal, &args.journal) {
        (Some(dir), _, _) if !dir.is_dir() => {
            return Err(PlanError::Usage(format!(
                "--render-dir {}: not a directory; give a render directory (haproxy.cfg plus \
                 maps/, ssl/, ca/, general/, crt-lists/)",
                dir.display()
            )));
        }
        (Some(dir), _, _) => {
            let content: RenderContent =
                crate::source::dir::read_render(dir).map_err(|source| PlanError::RenderDir {
                    dir: dir.clone(),
                    source,
                })?;
            JournaledRender::of(&content)
        }
        (None, Some(j), Some(path)) => newest_render(j, path)?,
        _ => {
            return Err(PlanError::Usage(
                "name the render to plan for: --render-dir DIR, or --journal PATH for its newest \
                 validated render"
                    .to_owned(),
            ));
        }
    };
    Ok((render, records, rejected))
}

fn journal_error(path: &Path, e: &dyn std::error::Error) -> PlanError {
    PlanError::Journal {
        path: path.to_owned(),
        message: crate::core::error::chain(e),
    }
}

/// Opens `path` read-only: exclusive first, then beside a live single-writer controller.
fn open_journal(path: &Path) -> Result<Journal, PlanError> {
    let opts = |c| {
        JournalOptions::new(path)
            .read_only(true)
            .verify_on_open(false)
            .concurrency(c)
    };
    match Journal::open(&opts(haptic_journal::Concurrency::Exclusive)) {
        Err(OpenError::InUse { .. }) => {
            Journal::open(&opts(haptic_journal::Concurrency::SingleWriter)).map_err(|e| {
                PlanError::Journal {
                    path: path.to_owned(),
                    message: format!(
                        "{}: a running controller holds it; plan with --render-dir, or read a \
                         copy (haptic-journalctl backup), or run the controller with \
                         --journal-concurrency single-writer",
                        crate::core::error::chain(&e)
                    ),
                }
            })
        }
        r => r.map_err(|e| journal_error(path, &e)),
    }
}

/// The render the journal's scheduler would deploy: the held render while a rollback holds
/// (the annotation `haproxy-haptic.org/rollback-to`), else the newest validated one.
fn newest_render(journal: &Journal, path: &Path) -> Result<JournaledRender, PlanError> {
    let checkpoint = journal
        .component_checkpoint(SCHEDULER_COMPONENT)
        .map_err(|e| journal_error(path, &e))?;
    let Some(ComponentCheckpoint {
        state: ComponentState::Scheduler(s),
        ..
    }) = checkpoint
    else {
        return Err(PlanError::Journal {
            path: path.to_owned(),
            message: "holds no validated render yet: plan with --render-dir".to_owned(),
        });
    };
    let held = s.rollback.map(|h| h.render);
    let Some(checksum) = held.or(s.last_validated.map(|(c, _)| c)) else {
        return Err(PlanError::Journal {
            path: path.to_owned(),
            message: "holds no validated render yet: plan with --render-dir".to_owned(),
        });
    };
    load_render(journal, checksum).map_err(|e| journal_error(path, &e))
}

/// The pods: `--endpoint` URLs, else the cluster's admitted pods for the selector; and the
/// selected pods not admitted (by name), which a deployment would not reach either.
async fn targets(args: &PlanArgs) -> Result<(Vec<Target>, Vec<String>), PlanError> {
    if !args.endpoints.is_empty() {
        let targets = args
            .endpoints
            .iter()
            .map(|u| endpoint_target(u))
            .collect::<Result<_, _>>()?;
        return Ok((targets, Vec::new()));
    }
    let (Some(selector), Some(secret)) = (&args.pod_selector, &args.dataplane_secret) else {
        return Err(PlanError::Usage(
            "name the pods: --endpoint URL (repeat), or --pod-selector and --dataplane-secret \
             (HAPTIC_POD_SELECTOR, HAPTIC_DATAPLANE_SECRET) to list them from the cluster"
                .to_owned(),
        ));
    };
    let cluster = |e: &dyn std::error::Error| PlanError::Cluster(crate::core::error::chain(e));
    let config = match &args.kubeconfig {
        Some(path) => crate::k8s::client::load_kubeconfig(path)
            .await
            .map_err(|e| cluster(&e))?,
        None => kube::Config::incluster().map_err(|e| cluster(&e))?,
    };
    let client = crate::k8s::client::build(
        config,
        &crate::k8s::client::user_agent("haptic-plan"),
        args.request_timeout,
    )
    .map_err(|e| cluster(&e))?;
    let namespace = args
        .namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_owned());
    let credentials = crate::k8s::discovery::read_credentials(client.clone(), &namespace, secret)
        .await
        .map_err(|e| cluster(&e))?;
    let auth = basic_auth(&credentials);
    let pods = kube::Api::<Pod>::namespaced(client, &namespace)
        .list(&kube::api::ListParams::default().labels(selector))
        .await
        .map_err(|e| cluster(&e))?;
    let mut out = Vec::new();
    let mut skipped = Vec::new();
    for pod in &pods.items {
        let Some(ep) = crate::k8s::discovery::admitted_endpoint(pod, args.dataplane_port) else {
            skipped.push(format!(
                "{namespace}/{}",
                pod.metadata.name.as_deref().unwrap_or_default()
            ));
            continue;
        };
        let url = ep.url.to_string();
        let pod = format!("{}/{}", ep.pod.namespace, ep.pod.name);
        let base = reqwest::Url::parse(&url)
            .map_err(|e| PlanError::Cluster(format!("pod {pod}: url {url}: {e}")))?;
        out.push(Target {
            pod,
            url,
            endpoint: DpEndpoint::new(base, Some(auth.clone())),
            quarantine: None,
        });
    }
    out.sort_by(|a, b| a.pod.cmp(&b.pod));
    skipped.sort();
    Ok((out, skipped))
}

/// A `--endpoint` URL: the credentials come out of its user info.
fn endpoint_target(raw: &str) -> Result<Target, PlanError> {
    let mut url = reqwest::Url::parse(raw).map_err(|e| {
        PlanError::Usage(format!(
            "--endpoint {raw}: {e}: give http://user:password@host:port"
        ))
    })?;
    let auth = (!url.username().is_empty()).then(|| BasicAuth {
        username: url.username().to_owned(),
        password: url.password().unwrap_or_default().to_owned(),
    });
    let _ = url.set_username("");
    let _ = url.set_password(None);
    let shown = url.as_str().trim_end_matches('/').to_owned();
    Ok(Target {
        pod: shown.clone(),
        url: shown,
        endpoint: DpEndpoint::new(url, auth),
        quarantine: None,
    })
}
