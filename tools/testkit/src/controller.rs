//! The controller under test as a child process: `haptic run` (or any program taking the same
//! flags) pointed at a [`Target`] (a [`crate::Fleet`]) through its kubeconfig, stdout and stderr
//! in a log file.
//!
//! ```text
//!  ControllerOpts { program, identity, journal, source flags, intervals, extra flags, env }
//!      └─Fleet::controller──► <program> [pre_args] run --kubeconfig K --namespace NS --journal J
//!                              <source> --pod-selector S --dataplane-secret D --metrics-addr
//!                              127.0.0.1:0 --identity I --config-name C <intervals> <extra>
//!                              > <journal dir>/controller-<ms>.log 2>&1
//! ```

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::peers::Target;
use crate::wait::{Logs, Probe, eventually_with};

/// The controller's intervals, passed as its real flags; the kit's bounds derive from them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Intervals {
    /// `--min-deployment-interval`. Default: 300 ms.
    pub min_deployment_interval: Duration,
    /// `--deployment-timeout`. Default: 20 s.
    pub deployment_timeout: Duration,
    /// `--lease-duration`. Default: 4 s.
    pub lease_duration: Duration,
    /// `--lease-renew-deadline`. Default: 3 s.
    pub lease_renew_deadline: Duration,
    /// `--lease-retry-period`. Default: 500 ms.
    pub lease_retry_period: Duration,
    /// `--drain-timeout`. Default: 10 s.
    pub drain_timeout: Duration,
}

impl Default for Intervals {
    fn default() -> Self {
        Intervals {
            min_deployment_interval: Duration::from_millis(300),
            deployment_timeout: Duration::from_secs(20),
            lease_duration: Duration::from_secs(4),
            lease_renew_deadline: Duration::from_secs(3),
            lease_retry_period: Duration::from_millis(500),
            drain_timeout: Duration::from_secs(10),
        }
    }
}

impl Intervals {
    /// The flags, e.g. `["--min-deployment-interval", "300ms", ...]`.
    #[must_use]
    pub fn flags(&self) -> Vec<String> {
        let d = |d: Duration| humantime_ms(d);
        vec![
            "--min-deployment-interval".into(),
            d(self.min_deployment_interval),
            "--lease-duration".into(),
            d(self.lease_duration),
            "--lease-renew-deadline".into(),
            d(self.lease_renew_deadline),
            "--lease-retry-period".into(),
            d(self.lease_retry_period),
            "--deployment-timeout".into(),
            d(self.deployment_timeout),
            "--drain-timeout".into(),
            d(self.drain_timeout),
        ]
    }

    /// One deployment from the moment a render is there: the minimum interval, then a
    /// deployment that may run to its timeout.
    #[must_use]
    pub fn deployment(&self) -> Duration {
        self.min_deployment_interval + self.deployment_timeout
    }

    /// A render reaching every pod and the published status: the deployment of the render, a
    /// retry after a timed-out one, and the drift-free follow-up the publisher waits for (three
    /// [`Intervals::deployment`]s).
    #[must_use]
    pub fn converge(&self) -> Duration {
        self.deployment() * 3
    }

    /// A write that follows a deployment (status, pinning, garbage collection, the `-invalid`
    /// object's removal): the deployment, then the drain bound the publisher keeps to.
    #[must_use]
    pub fn follow_up(&self) -> Duration {
        self.deployment() + self.drain_timeout
    }

    /// A Lease changing hands: the old holder's lease runs out (a lease duration past its last
    /// renewal, which may come a renew deadline late), the new holder acquires within another
    /// lease duration, and its first deployment (start-up reconciliation) runs.
    #[must_use]
    pub fn takeover(&self) -> Duration {
        self.lease_duration * 2 + self.lease_renew_deadline + self.deployment()
    }

    /// A SIGTERM'd controller exiting: its drain, after a deployment still in flight.
    #[must_use]
    pub fn stop(&self) -> Duration {
        self.drain_timeout + self.deployment()
    }
}

/// `300ms`, `20000ms`: whole milliseconds, as humantime reads them.
fn humantime_ms(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

/// How a controller is started.
#[derive(Debug, Clone)]
pub struct ControllerOpts {
    /// The executable, e.g. `env!("CARGO_BIN_EXE_haptic")`.
    pub program: PathBuf,
    /// Arguments before `run` (e.g. the demo's hidden `__controller`). Default: none.
    pub pre_args: Vec<String>,
    /// `--identity`.
    pub identity: String,
    /// `--journal`; the log goes beside it.
    pub journal: PathBuf,
    /// Environment added to the child's (`RUST_LOG` is `info,kube=warn,haptic=debug` unless
    /// set here). `HAPTIC_*` and proxy variables of the test's environment are never passed on.
    pub env: Vec<(String, String)>,
    /// Source flags, e.g. `--render-dir D`.
    pub source: Vec<String>,
    /// `--config-name`.
    pub config_name: String,
    /// Interval flags.
    pub intervals: Intervals,
    /// More flags, after the others.
    pub extra: Vec<String>,
    /// Log file; default `<journal dir>/controller-<unix ms>.log`.
    pub log: Option<PathBuf>,
}

impl ControllerOpts {
    /// `program` as `identity` on the render directory `render_dir`, journal
    /// `<fleet dir>/<identity>/journal.redb`, config name `config_name`.
    #[must_use]
    pub fn dir(
        fleet: &impl Target,
        program: &Path,
        identity: &str,
        config_name: &str,
        render_dir: &Path,
    ) -> ControllerOpts {
        ControllerOpts {
            program: program.to_path_buf(),
            pre_args: Vec::new(),
            identity: identity.to_owned(),
            journal: fleet.dir().join(identity).join("journal.redb"),
            source: vec!["--render-dir".into(), render_dir.display().to_string()],
            config_name: config_name.to_owned(),
            intervals: Intervals::default(),
            extra: Vec::new(),
            env: Vec::new(),
            log: None,
        }
    }

    /// The same controller on the ConfigMap `configmap` (plus the certificate Secret `secret`,
    /// when given): `--source configmap`.
    #[must_use]
    pub fn with_configmap(mut self, configmap: &str, secret: Option<&str>) -> ControllerOpts {
        self.source = vec![
            "--source".into(),
            "configmap".into(),
            "--configmap".into(),
            configmap.into(),
        ];
        if let Some(s) = secret {
            self.source.extend(["--configmap-secret".into(), s.into()]);
        }
        self
    }

    /// Adds the HTTP ingest endpoint on a free loopback port, its token in the Secret
    /// `token_secret` (key `token`); find the port with [`Controller::ingest_addr`].
    #[must_use]
    pub fn ingest(mut self, token_secret: &str) -> ControllerOpts {
        self.extra.extend([
            "--ingest-addr".into(),
            "127.0.0.1:0".into(),
            "--ingest-token-secret".into(),
            token_secret.into(),
        ]);
        self
    }

    /// Every argument after the program, in order.
    #[must_use]
    pub fn args(&self, fleet: &impl Target) -> Vec<std::ffi::OsString> {
        let mut a: Vec<std::ffi::OsString> = self.pre_args.iter().map(Into::into).collect();
        a.push("run".into());
        a.push("--kubeconfig".into());
        a.push(fleet.kubeconfig().into());
        a.extend(["--namespace".into(), fleet.namespace().into()]);
        a.push("--journal".into());
        a.push(self.journal.clone().into());
        a.extend(self.source.iter().map(Into::into));
        a.extend(["--pod-selector".into(), fleet.selector().into()]);
        a.extend(["--dataplane-secret".into(), fleet.dataplane_secret().into()]);
        a.extend(["--metrics-addr".into(), "127.0.0.1:0".into()]);
        a.extend(["--identity".into(), self.identity.clone().into()]);
        a.extend(["--config-name".into(), self.config_name.clone().into()]);
        a.extend(self.intervals.flags().into_iter().map(Into::into));
        a.extend(self.extra.iter().map(Into::into));
        a
    }
}

/// A running controller child; dropping it kills it.
#[derive(Debug)]
pub struct Controller {
    /// The child process.
    pub child: Child,
    /// Its stdout and stderr.
    pub log: PathBuf,
    /// How it was started.
    pub opts: ControllerOpts,
}

impl Controller {
    /// Spawns the controller `opts` describes against `fleet` (prefer [`crate::Fleet::controller`],
    /// which attaches the log to the fleet's waits).
    ///
    /// # Panics
    /// When the journal directory or the log cannot be created or the program cannot start.
    #[must_use]
    pub fn spawn(fleet: &impl Target, opts: ControllerOpts) -> Controller {
        let parent = opts
            .journal
            .parent()
            .expect("a journal path has a directory");
        std::fs::create_dir_all(parent).expect("journal directory");
        let log = opts.log.clone().unwrap_or_else(|| {
            parent.join(format!(
                "controller-{}.log",
                haptic_journal::UnixMillis::now().0
            ))
        });
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .expect("controller log");
        let mut cmd = Command::new(&opts.program);
        cmd.args(opts.args(fleet))
            .env("RUST_LOG", "info,kube=warn,haptic=debug")
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("log handle"))
            .stderr(file);
        for (key, _) in std::env::vars_os() {
            let k = key.to_string_lossy();
            let proxy = ["http_proxy", "https_proxy", "all_proxy"]
                .iter()
                .any(|p| k.eq_ignore_ascii_case(p));
            if k.starts_with("HAPTIC_") || proxy {
                cmd.env_remove(&key);
            }
        }
        for (k, v) in &opts.env {
            cmd.env(k, v);
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("{} starts: {e}", opts.program.display()));
        Controller { child, log, opts }
    }

    /// The child's pid.
    ///
    /// # Panics
    /// When the pid does not fit an `i32` (never on Linux).
    #[must_use]
    pub fn pid(&self) -> nix::unistd::Pid {
        nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).expect("pid fits i32"))
    }

    /// Sends `sig` (errors ignored: the child may be gone).
    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        let _ = nix::sys::signal::kill(self.pid(), sig);
    }

    /// SIGTERM, then waits up to `bound` for the exit status (`None` when it did not exit).
    pub fn stop(&mut self, bound: Duration) -> Option<std::process::ExitStatus> {
        self.signal(nix::sys::signal::Signal::SIGTERM);
        self.wait(bound)
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits up to `bound` for the exit status (`None` when still running).
    ///
    /// Called on a worker of a multi-thread tokio runtime, the wait runs in
    /// [`tokio::task::block_in_place`]: the fleet's API emulator runs in the test's runtime, and a
    /// worker parked in a plain blocking wait keeps the task in its LIFO slot (never stolen),
    /// which may be the emulator's answer to the controller's Lease release on SIGTERM; the
    /// controller then sat out its 10 s release timeout and the 10 s acceptor wait after it
    /// (found by the crash matrix: a clean stop "not within" [`Intervals::stop`]).
    pub fn wait(&mut self, bound: Duration) -> Option<std::process::ExitStatus> {
        let multi_thread = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        if multi_thread {
            tokio::task::block_in_place(|| self.wait_blocking(bound))
        } else {
            self.wait_blocking(bound)
        }
    }

    fn wait_blocking(&mut self, bound: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + bound;
        loop {
            if let Ok(Some(s)) = self.child.try_wait() {
                return Some(s);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The whole log so far (empty when unreadable).
    #[must_use]
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last `lines` lines of the log.
    #[must_use]
    pub fn log_tail(&self, lines: usize) -> String {
        crate::wait::log_tail(&self.log, lines)
    }

    /// [`crate::eventually`] printing this controller's log tail on failure.
    ///
    /// # Panics
    /// When `bound` passes first.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn eventually<T, P, F, Fut>(&self, bound: Duration, what: &str, f: F) -> T
    where
        P: Probe<T>,
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = P>,
    {
        eventually_with(&Logs(vec![self.log.clone()]), bound, what, f).await
    }

    /// The address a log line `<message> ... addr=<ip:port>` names (the first such line), within
    /// [`Intervals::converge`] (the line appears once the listener is bound).
    ///
    /// # Panics
    /// When no such line appears in time, with the log tail.
    pub async fn logged_addr(&self, message: &str) -> std::net::SocketAddr {
        let bound = self.opts.intervals.converge();
        self.eventually(bound, &format!("a `{message} addr=` log line"), || {
            let log = self.log_text();
            let found = log
                .lines()
                .filter(|l| l.contains(message))
                .find_map(|l| l.split("addr=").nth(1))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|a| a.trim_matches('"').parse().ok());
            std::future::ready(found.ok_or_else(|| "no such line yet".to_owned()))
        })
        .await
    }

    /// The `--metrics-addr` the controller bound (`/startupz`, `/healthz`, `/readyz`, `/metrics`).
    ///
    /// # Panics
    /// As [`Controller::logged_addr`].
    pub async fn metrics_addr(&self) -> std::net::SocketAddr {
        self.logged_addr("serving /startupz, /healthz, /readyz and /metrics")
            .await
    }

    /// The `--ingest-addr` the controller bound (see [`ControllerOpts::ingest`]).
    ///
    /// # Panics
    /// As [`Controller::logged_addr`].
    pub async fn ingest_addr(&self) -> std::net::SocketAddr {
        self.logged_addr("ingest endpoint listening (POST /v1/renders)")
            .await
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.signal(nix::sys::signal::Signal::SIGCONT);
            self.kill();
        }
    }
}
