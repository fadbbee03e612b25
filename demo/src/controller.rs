//! The controller under demonstration: `haptic run`, as a child process of this same binary
//! (`haptic-demo __controller run ...`, which calls `haptic::run` exactly as the `haptic` binary
//! does) pointed at the sandbox through a generated kubeconfig, its output in `controller.log`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::DemoError;
use super::cluster::{DATAPLANE_SECRET, NAMESPACE, POD_LABEL};

/// Name of the config the controller serves; the HAProxyCfg is `demo-haproxycfg`.
pub const CONFIG_NAME: &str = "demo";
/// How long a SIGTERM'd controller gets for its drains (deployer, then publisher) before SIGKILL;
/// above `haptic run`'s default `--drain-timeout` of 25 s.
const STOP_GRACE: Duration = Duration::from_secs(30);

/// Where the controller keeps its files, all under the demo's work directory.
#[derive(Debug, Clone)]
pub struct Paths {
    /// The kubeconfig for the emulator.
    pub kubeconfig: PathBuf,
    /// The journal file (kept after the demo).
    pub journal: PathBuf,
    /// The watched render directory.
    pub render_dir: PathBuf,
    /// The controller's stdout and stderr.
    pub log: PathBuf,
}

impl Paths {
    /// The layout under `workdir`.
    #[must_use]
    pub fn under(workdir: &Path) -> Paths {
        Paths {
            kubeconfig: workdir.join("kubeconfig"),
            journal: workdir.join("journal.redb"),
            render_dir: workdir.join("render"),
            log: workdir.join("controller.log"),
        }
    }
}

/// The arguments of `haptic run` for the demo (short intervals so the stream moves quickly).
#[must_use]
pub fn run_args(paths: &Paths) -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = vec!["run".into()];
    let mut flag = |name: &str, value: &std::ffi::OsStr| {
        args.push(format!("--{name}").into());
        args.push(value.to_owned());
    };
    flag("kubeconfig", paths.kubeconfig.as_os_str());
    flag("namespace", NAMESPACE.as_ref());
    flag("journal", paths.journal.as_os_str());
    flag("render-dir", paths.render_dir.as_os_str());
    let selector = format!("{}={}", POD_LABEL.0, POD_LABEL.1);
    flag("pod-selector", selector.as_ref());
    flag("dataplane-secret", DATAPLANE_SECRET.as_ref());
    flag("metrics-addr", "127.0.0.1:0".as_ref());
    flag("min-deployment-interval", "500ms".as_ref());
    flag("lease-duration", "4s".as_ref());
    flag("lease-renew-deadline", "3s".as_ref());
    flag("lease-retry-period", "500ms".as_ref());
    flag("config-name", CONFIG_NAME.as_ref());
    args
}

/// A running controller child; dropping it kills it (SIGKILL), [`Controller::stop`] stops it
/// gracefully.
#[derive(Debug)]
pub struct Controller {
    child: tokio::process::Child,
}

impl Controller {
    /// Spawns `current_exe() __controller run ...` with stdout and stderr appended to `paths.log`.
    ///
    /// `HAPTIC_*` variables of the demo's environment are not passed on (the flags above are the
    /// whole configuration), nor are proxy variables (every peer is local).
    ///
    /// # Errors
    /// [`DemoError::Spawn`] when the executable cannot be found or started or the log file cannot
    /// be opened.
    pub fn spawn(paths: &Paths) -> Result<Controller, DemoError> {
        let exe = std::env::current_exe().map_err(|source| DemoError::Spawn {
            path: PathBuf::from("<current executable>"),
            source,
        })?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&paths.log)
            .map_err(|source| DemoError::Spawn {
                path: paths.log.clone(),
                source,
            })?;
        let log2 = log.try_clone().map_err(|source| DemoError::Spawn {
            path: paths.log.clone(),
            source,
        })?;
        let mut cmd = tokio::process::Command::new(&exe);
        cmd.arg(super::CONTROLLER_ARG)
            .args(run_args(paths))
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log2))
            .kill_on_drop(true);
        for (key, _) in std::env::vars_os() {
            let k = key.to_string_lossy();
            let proxy = k.eq_ignore_ascii_case("http_proxy")
                || k.eq_ignore_ascii_case("https_proxy")
                || k.eq_ignore_ascii_case("all_proxy");
            if k.starts_with("HAPTIC_") || proxy {
                cmd.env_remove(&key);
            }
        }
        let child = cmd
            .spawn()
            .map_err(|source| DemoError::Spawn { path: exe, source })?;
        Ok(Controller { child })
    }

    /// The child's pid, if it has not been reaped.
    #[must_use]
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// `Some(status)` once the child has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// SIGTERM, then waits up to 30 s for the drains, then SIGKILL. Returns the exit status
    /// (`None` when it could not be read) and whether SIGKILL was needed.
    ///
    /// # Cancel safety
    /// Dropping the future drops the child, which kills it.
    pub async fn stop(mut self) -> (Option<std::process::ExitStatus>, bool) {
        if let Some(status) = self.exited() {
            return (Some(status), false);
        }
        if let Some(pid) = self.child.id().and_then(|p| i32::try_from(p).ok()) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
        }
        match tokio::time::timeout(STOP_GRACE, self.child.wait()).await {
            Ok(status) => (status.ok(), false),
            Err(_) => {
                let _ = self.child.kill().await;
                (self.child.wait().await.ok(), true)
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use clap::Parser as _;

    use super::*;
    use haptic::cli::{Cli, Command};

    #[test]
    fn the_run_arguments_parse_as_haptic_run() {
        let paths = Paths::under(Path::new("/tmp/haptic-demo-x"));
        let mut argv: Vec<std::ffi::OsString> = vec!["haptic".into()];
        argv.extend(run_args(&paths));
        let cli = Cli::try_parse_from(argv).unwrap();
        let Command::Run(a) = cli.command else {
            panic!("not run")
        };
        assert_eq!(a.kubeconfig.as_deref(), Some(paths.kubeconfig.as_path()));
        assert_eq!(a.namespace.as_deref(), Some(NAMESPACE));
        assert_eq!(a.journal, paths.journal);
        assert_eq!(a.render_dir.as_deref(), Some(paths.render_dir.as_path()));
        assert_eq!(a.pod_selector, "app.kubernetes.io/name=haproxy");
        assert_eq!(a.dataplane_secret, DATAPLANE_SECRET);
        assert_eq!(a.config_name.as_deref(), Some(CONFIG_NAME));
        assert_eq!(a.min_deployment_interval, Duration::from_millis(500));
        assert_eq!(a.lease_duration, Duration::from_secs(4));
        assert_eq!(a.lease_renew_deadline, Duration::from_secs(3));
        assert_eq!(a.lease_retry_period, Duration::from_millis(500));
        assert_eq!(a.metrics_addr.port(), 0);
    }
}
