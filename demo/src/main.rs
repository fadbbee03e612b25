//! `haptic-demo`: the main job on its embedded default (README command 1).
//!
//! ```text
//!  cluster::start: a test-kit fleet on the sandbox (API emulator on 127.0.0.1 + N HAProxy pods,
//!                  Namespace, Secret, Pod objects, the CRDs), <workdir>/kubeconfig
//!  Controller::spawn: <this exe> __controller run --kubeconfig ... --render-dir <workdir>/render
//!                     --journal <workdir>/journal.redb          (log: <workdir>/controller.log)
//!                     (the hidden `__controller` re-enters this binary and runs `haptic::run`,
//!                      the same code the `haptic` binary runs; no prebuilt binary needed)
//!  for each render of tests/corpus/renders, in name order:
//!      haptic_testkit::render::write_render -> <workdir>/render (aux folders first, haproxy.cfg
//!      renamed last)
//!      poll until every pod answers as renders/README.md says and the HAProxyCfg objects agree
//!      (bounded), printing progress
//!  stop the controller (SIGTERM, then SIGKILL after 30 s), stop the sandbox, print the summary
//! ```
//!
//! The evidence is independent of the journal: real HTTP(S) answers from every pod and the
//! objects in the emulator. The journal stays in the work directory for `haptic-journalctl`.
//!
//! A crate of its own so that the product (`haptic`) never links the sandbox (the Kubernetes API
//! emulator, the HAProxy pod runner, network namespaces); nothing depends on it.

mod cluster;
mod controller;
mod observe;
mod report;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Parser as _;
use haptic_journal::Checksum;

use controller::{CONFIG_NAME, Controller, Paths};
use observe::{Names, Observer, RenderCase, short, shortfalls};
use report::{Row, Verdict};

/// How long one render may take to reach its expected state.
const RENDER_DEADLINE: Duration = Duration::from_secs(60);
/// Pause between two looks at the fleet (each look is a few curl runs per pod).
const POLL: Duration = Duration::from_millis(500);
/// Lines of `controller.log` printed when something did not match.
const LOG_TAIL_LINES: usize = 40;

/// The hidden first argument that makes this binary the controller (`haptic::cli::Cli`).
pub const CONTROLLER_ARG: &str = "__controller";

/// haptic-demo: the controller against a local sandbox (a Kubernetes API emulator and real
/// HAProxy pods), fed the render stream of `tests/corpus/renders/`; prints what every pod
/// answers after each render.
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "haptic-demo", version, about)]
pub struct DemoArgs {
    /// Number of HAProxy pods.
    #[arg(long, default_value_t = 3)]
    pub pods: usize,
    /// Render stream directory (one sub-directory per render, in name order).
    #[arg(long)]
    pub renders: Option<PathBuf>,
    /// Where to keep the journal and the controller's log (default: a new directory under
    /// the system temp dir, kept after the demo for `haptic-journalctl`).
    #[arg(long)]
    pub workdir: Option<PathBuf>,
}

fn main() -> std::process::ExitCode {
    let mut argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let controller = argv.get(1).is_some_and(|a| a == CONTROLLER_ARG);
    let runtime = match haptic::cli::tokio_runtime() {
        Ok(r) => r,
        Err(code) => return code,
    };
    let result: Result<(), Box<dyn std::error::Error>> = if controller {
        // `haptic-demo __controller run ...` is `haptic run ...`.
        argv.remove(1);
        argv[0] = "haptic".into();
        let cli = haptic::cli::Cli::parse_from(argv);
        runtime
            .block_on(haptic::run(cli))
            .map(|_| ())
            .map_err(|e| Box::new(e) as Box<dyn std::error::Error>)
    } else {
        let args = DemoArgs::parse_from(argv);
        runtime
            .block_on(run(args))
            .map_err(|e| Box::new(e) as Box<dyn std::error::Error>)
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", haptic::core::error::chain(e.as_ref()));
            std::process::ExitCode::FAILURE
        }
    }
}

/// Errors of the demo.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DemoError {
    /// The render stream (or one render of it) could not be read.
    #[error("cannot read renders at {path}")]
    Renders {
        /// The folder.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The render stream folder holds no render (no sub-folder with a `haproxy.cfg`).
    #[error("no render (a folder holding haproxy.cfg) in {path}")]
    NoRenders {
        /// The folder.
        path: PathBuf,
    },
    /// The work directory could not be created.
    #[error("cannot create the work directory {path}")]
    Workdir {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The work directory already holds a journal from an earlier run.
    #[error("{path} already exists (an earlier demo's journal); choose another --workdir")]
    WorkdirInUse {
        /// The journal found there.
        path: PathBuf,
    },
    /// A sandbox peer (API emulator, HAProxy pods) did not start, e.g. `haproxy` is missing.
    #[error("the sandbox failed")]
    Sandbox(#[source] Box<dyn std::error::Error + Send + Sync + 'static>),
    /// The kube client for the emulator could not be built.
    #[error(transparent)]
    Client(#[from] haptic::k8s::client::ClientError),
    /// A call to the emulator failed.
    #[error("cannot {what}")]
    Kube {
        /// What was being done, e.g. `register pod`.
        what: &'static str,
        /// The kube error.
        #[source]
        source: kube::Error,
    },
    /// The controller could not be started.
    #[error("cannot start the controller ({path})")]
    Spawn {
        /// The executable or log file concerned.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A render could not be written into the render directory.
    #[error("cannot write render {render}")]
    Feed {
        /// The render's name.
        render: String,
        /// The write error.
        #[source]
        source: haptic_testkit::render::FeedError,
    },
    /// The controller process ended before the stream was through.
    #[error("the controller exited early ({status}); its log is {log}")]
    ControllerExited {
        /// Its exit status.
        status: std::process::ExitStatus,
        /// Its log file.
        log: PathBuf,
    },
    /// Interrupted (Ctrl-C).
    #[error("interrupted")]
    Interrupted,
    /// The stream ran through, but these renders did not reach their expected state.
    #[error("not as expected: {}", renders.join(", "))]
    NotAsExpected {
        /// Names of the renders that did not converge as `tests/corpus/renders/README.md` says.
        renders: Vec<String>,
    },
}

/// Runs the demo: sandbox, controller, the render stream, the summary (module docs).
///
/// Prints progress on stdout. The work directory (journal, controller log, kubeconfig, render
/// directory) is kept.
///
/// # Errors
/// [`DemoError::NotAsExpected`] naming the renders that did not converge (after the summary and
/// the last lines of the controller log); [`DemoError::ControllerExited`] when the controller
/// stopped by itself; the other variants when a set-up step failed.
///
/// # Cancel safety
/// Not cancel safe: dropping the future kills the controller (SIGKILL) and the sandbox without
/// the summary. Ctrl-C is handled inside and stops both in order.
pub async fn run(args: DemoArgs) -> Result<(), DemoError> {
    init_logging();
    let renders = args.renders.unwrap_or_else(default_renders);
    let stream = observe::load_stream(&renders)?;
    let workdir = prepare_workdir(args.workdir)?;
    let paths = Paths::under(&workdir);
    if paths.journal.exists() {
        return Err(DemoError::WorkdirInUse {
            path: paths.journal,
        });
    }
    println!(
        "haptic-demo: {} renders from {}",
        stream.len(),
        renders.display()
    );
    println!("work directory: {}", workdir.display());
    println!(
        "starting the sandbox: a Kubernetes API emulator and {} HAProxy pods",
        args.pods
    );
    let cluster = cluster::start(args.pods, &paths.kubeconfig).await?;
    let mode = cluster
        .sandbox()
        .map_or_else(String::new, |s| format!("{:?}", s.mode()));
    let api = cluster.emulator().map(|a| a.url()).unwrap_or_default();
    println!("  API emulator {api} ({mode} mode)");
    for p in cluster.pods() {
        println!("  pod {} (Dataplane API {})", p.name, p.dataplane_url);
    }
    let mut controller = match Controller::spawn(&paths) {
        Ok(c) => c,
        Err(e) => {
            cluster.shutdown().await;
            return Err(e);
        }
    };
    println!(
        "controller: haptic run, as `haptic-demo {CONTROLLER_ARG} run` (pid {}), log {}",
        controller.pid().unwrap_or_default(),
        paths.log.display()
    );
    let outcome = tokio::select! {
        r = drive(&cluster, &mut controller, &stream, &paths) => r,
        () = interrupted() => Err(DemoError::Interrupted),
    };
    let (status, killed) = controller.stop().await;
    println!(
        "controller stopped{} ({})",
        if killed {
            " by SIGKILL after its grace"
        } else {
            ""
        },
        status.map_or_else(|| "status unknown".into(), |s| s.to_string())
    );
    cluster.shutdown().await;
    let rows = match outcome {
        Ok(rows) => rows,
        Err(e) => {
            print_log_tail(&paths.log);
            return Err(e);
        }
    };
    println!("\n== summary ({} pods)", args.pods);
    print!("{}", report::summary_table(&rows));
    println!("\njournal: {}", paths.journal.display());
    println!(
        "inspect it: cargo run -p haptic-tools --bin haptic-journalctl -- summary {}",
        paths.journal.display()
    );
    let failed: Vec<&Row> = rows
        .iter()
        .filter(|r| matches!(r.verdict, Verdict::NotConverged(_)))
        .collect();
    if failed.is_empty() {
        println!("every render converged as tests/corpus/renders/README.md says");
        return Ok(());
    }
    for r in &failed {
        if let Verdict::NotConverged(why) = &r.verdict {
            println!("{} did not converge:", r.render);
            for w in why {
                println!("  - {w}");
            }
        }
    }
    print_log_tail(&paths.log);
    Err(DemoError::NotAsExpected {
        renders: failed.iter().map(|r| r.render.clone()).collect(),
    })
}

/// Feeds the stream and waits for each render; one summary row per render.
async fn drive(
    cluster: &haptic_testkit::Fleet,
    controller: &mut Controller,
    stream: &[RenderCase],
    paths: &Paths,
) -> Result<Vec<Row>, DemoError> {
    let observer = Observer::new(
        cluster.client(),
        cluster::NAMESPACE,
        CONFIG_NAME,
        cluster.pods(),
    );
    let mut rows = Vec::with_capacity(stream.len());
    // The stream's last render that must be applied (the one a rejection keeps).
    let mut last_applied: Option<(&str, Checksum)> = None;
    for case in stream {
        let row = one_render(&observer, controller, case, last_applied, paths).await?;
        rows.push(row);
        if case.valid {
            last_applied = Some((&case.name, case.checksum));
        }
    }
    Ok(rows)
}

/// Writes one render and waits (at most [`RENDER_DEADLINE`]) for its expected state.
async fn one_render(
    observer: &Observer,
    controller: &mut Controller,
    case: &RenderCase,
    last_applied: Option<(&str, Checksum)>,
    paths: &Paths,
) -> Result<Row, DemoError> {
    let kept = last_applied.map_or("the previous render", |(n, _)| n);
    println!(
        "\n== {}: checksum {}, {} auxiliary file(s); must be {}",
        case.name,
        short(&case.checksum),
        case.content.files.len(),
        if case.valid {
            "applied".to_owned()
        } else {
            format!("rejected (the fleet keeps {kept})")
        }
    );
    if case.checks.is_empty() {
        println!(
            "  (tests/corpus/renders/README.md lists no answers for this render: only the \
             published objects are checked)"
        );
    }
    let names = Names {
        main: observer.main_name(),
        invalid: observer.invalid_name(),
    };
    let started = Instant::now();
    haptic_testkit::render::write_render(&case.content, &paths.render_dir).map_err(|source| {
        DemoError::Feed {
            render: case.name.clone(),
            source,
        }
    })?;
    let mut answered = BTreeSet::new();
    let mut published = false;
    let (obs, missing) = loop {
        if let Some(status) = controller.exited() {
            return Err(DemoError::ControllerExited {
                status,
                log: paths.log.clone(),
            });
        }
        let obs = observer.observe(&case.checks).await?;
        let at = started.elapsed().as_secs_f64();
        for p in obs
            .pods
            .iter()
            .filter(|p| !case.checks.is_empty() && p.all_ok())
        {
            if answered.insert(p.pod.clone()) {
                if case.valid {
                    println!("  +{at:.1}s {} answers {}", p.pod, case.name);
                } else {
                    println!("  +{at:.1}s {} still answers {kept}", p.pod);
                }
            }
        }
        let holder = if case.valid { &obs.main } else { &obs.invalid };
        let holder_name = if case.valid {
            names.main
        } else {
            names.invalid
        };
        if !published
            && holder
                .as_ref()
                .is_some_and(|c| c.spec.checksum == case.checksum)
        {
            published = true;
            println!("  +{at:.1}s HAProxyCfg {holder_name} holds this render");
        }
        let missing = shortfalls(
            case,
            last_applied.map(|(_, c)| c).as_ref(),
            observer.pod_count(),
            names,
            &obs,
        );
        if missing.is_empty() || started.elapsed() >= RENDER_DEADLINE {
            break (obs, missing);
        }
        tokio::time::sleep(POLL).await;
    };
    let took = started.elapsed();
    let reloads = observer.reload_counts().await;
    print!(
        "{}",
        report::render_block(case, &obs, (names.main, names.invalid), &reloads)
    );
    let verdict = if !missing.is_empty() {
        println!(
            "  NOT as expected after {:.1}s: {}",
            took.as_secs_f64(),
            missing.join("; ")
        );
        Verdict::NotConverged(missing)
    } else if case.valid {
        println!("  applied on every pod in {:.1}s", took.as_secs_f64());
        Verdict::Applied
    } else {
        println!(
            "  rejected as expected in {:.1}s; every pod still answers {kept}",
            took.as_secs_f64()
        );
        Verdict::Rejected
    };
    Ok(Row {
        render: case.name.clone(),
        verdict,
        pods_ok: obs.pods.iter().filter(|p| p.all_ok()).count(),
        pods: observer.pod_count(),
        took,
    })
}

/// The repository's `tests/corpus/renders` (path fixed at build time), else
/// `./tests/corpus/renders`.
fn default_renders() -> PathBuf {
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/corpus/renders");
    if built.is_dir() {
        built
    } else {
        PathBuf::from("tests/corpus/renders")
    }
}

/// `dir` (created when absent), else a new `haptic-demo-*` directory under the system temp dir
/// that outlives the demo. The render directory inside starts empty.
fn prepare_workdir(dir: Option<PathBuf>) -> Result<PathBuf, DemoError> {
    let err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| DemoError::Workdir { path, source }
    };
    let dir = match dir {
        Some(d) => {
            std::fs::create_dir_all(&d).map_err(err(&d))?;
            d
        }
        None => {
            let tmp = std::env::temp_dir();
            tempfile::Builder::new()
                .prefix("haptic-demo-")
                .tempdir_in(&tmp)
                .map_err(err(&tmp))?
                .keep()
        }
    };
    let render = dir.join("render");
    if render.exists() {
        std::fs::remove_dir_all(&render).map_err(err(&render))?;
    }
    std::fs::create_dir_all(&render).map_err(err(&render))?;
    Ok(dir)
}

/// Resolves on Ctrl-C; never when the signal cannot be listened for.
async fn interrupted() {
    if tokio::signal::ctrl_c().await.is_err() {
        std::future::pending::<()>().await;
    }
}

fn print_log_tail(log: &Path) {
    println!("\nlast {LOG_TAIL_LINES} lines of {}:", log.display());
    for line in haptic_testkit::log_tail(log, LOG_TAIL_LINES).lines() {
        println!("  {line}");
    }
}

/// Warnings of the in-process peers on stderr (`RUST_LOG` overrides); a no-op when a subscriber
/// is already installed.
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter)
        .try_init();
}
