//! The steps of `cargo xtask demo` / `cargo xtask test`, each announced on stderr and timed:
//! the Debian packages, Go for the peers, the real peers and the pinned kubectl
//! (`tests/peers/build.sh`, which prints a line per peer and a heartbeat itself), then cargo.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use crate::packages::{self, Host, Plan, Purpose};

/// The oldest Go that builds the peers: the `go` line of every `tests/peers/*/go.mod`, with
/// `GOTOOLCHAIN=local` (build.sh never downloads a toolchain).
pub const MIN_GO: (u32, u32) = (1, 26);

/// A step that failed: what to print, and the exit code.
#[derive(Debug)]
pub struct Failed {
    /// The message, naming the input and the fix.
    pub message: String,
    /// The exit code (a child's own when it failed).
    pub code: u8,
}

impl Failed {
    fn new(message: impl Into<String>) -> Failed {
        Failed {
            message: message.into(),
            code: 1,
        }
    }
}

/// Prints `xtask: <line>` on stderr (stdout stays the children's).
pub fn say(line: &str) {
    eprintln!("xtask: {line}");
}

/// `12.3 s` or `13 min 29 s`.
#[must_use]
pub fn elapsed(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 60 {
        format!("{} min {} s", s / 60, s % 60)
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

/// The repository root (this crate is `xtask/` in it).
#[must_use]
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// Checks for the programs `purpose` needs and installs the missing ones (root: apt-get; else
/// `sudo -n` when it works; else stops with the line to run, then `again`, the command to run
/// after it). Returns the PATH for the children (PATH plus any `sbin` directory holding a
/// needed program).
///
/// # Errors
/// [`Failed`] naming the missing programs and the line to run, or apt-get's failure.
pub fn ensure_packages(purpose: Purpose, again: &str) -> Result<OsString, Failed> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let s = packages::survey(purpose, &path);
    if s.missing.is_empty() {
        say("every program needed is installed");
        return Ok(packages::extend_path(&path, &s.extra_dirs));
    }
    say(&format!("missing: {}", s.describe_missing()));
    let host = Host {
        root: is_root(),
        apt: packages::survey_one("apt-get", &path),
        sudo: sudo_works(),
    };
    match packages::plan(s.packages(), &host) {
        Plan::Nothing => {}
        Plan::Stop { reason, line } => {
            let mut message = format!("{reason}, so nothing was installed");
            if let Some(line) = line {
                message.push_str(&format!("; run this line, then `{again}` again:\n{line}"));
            }
            return Err(Failed::new(message));
        }
        Plan::Install { sudo, packages } => apt_install(sudo, &packages)?,
    }
    let after = packages::survey(purpose, &path);
    if !after.missing.is_empty() {
        return Err(Failed::new(format!(
            "still missing after apt-get install: {}",
            after.describe_missing()
        )));
    }
    Ok(packages::extend_path(&path, &after.extra_dirs))
}

/// `apt-get update` and `apt-get install`, through `sudo -n env` when `sudo` (sudo resets the
/// environment, and debconf must not ask). apt's stdout (dpkg's unpacking lines) is kept and
/// printed only when a step fails; its stderr passes through.
fn apt_install(sudo: bool, packages: &[&str]) -> Result<(), Failed> {
    let how = if sudo { "sudo -n apt-get" } else { "apt-get" };
    say(&format!(
        "installing {} ({how} update, then install; apt's output only if it fails)",
        packages.join(" ")
    ));
    let args = packages::install_args(packages);
    for step in [vec!["update".to_owned(), "-qq".to_owned()], args] {
        let mut c = if sudo {
            let mut c = Command::new("sudo");
            c.args(["-n", "env", "DEBIAN_FRONTEND=noninteractive", "apt-get"]);
            c
        } else {
            let mut c = Command::new("apt-get");
            c.env("DEBIAN_FRONTEND", "noninteractive");
            c
        };
        c.args(&step)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let out = c
            .output()
            .map_err(|e| Failed::new(format!("starting {how}: {e}")))?;
        if !out.status.success() {
            eprint!("{}", String::from_utf8_lossy(&out.stdout));
            return Err(Failed::new(format!(
                "`{how} {}` failed ({}): see apt's output above",
                step.join(" "),
                out.status
            )));
        }
    }
    Ok(())
}

/// Whether the effective user is root (`id -u` says 0).
fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// `sudo -n true`: Ok when it ran, else what sudo said (or that there is none).
fn sudo_works() -> Result<(), String> {
    match Command::new("sudo")
        .args(["-n", "true"])
        .stdin(Stdio::null())
        .output()
    {
        Err(e) => Err(format!("no sudo: {e}")),
        Ok(o) if o.status.success() => Ok(()),
        // the last line: sudo may warn first (e.g. that it cannot resolve the host name)
        Ok(o) => Err(String::from_utf8_lossy(&o.stderr)
            .lines()
            .rfind(|l| !l.trim().is_empty())
            .unwrap_or("sudo -n true failed")
            .trim()
            .to_owned()),
    }
}

/// Checks that `go` on `path` is at least [`MIN_GO`].
///
/// # Errors
/// [`Failed`] naming what was found and what to install.
pub fn ensure_go(path: &OsStr) -> Result<String, Failed> {
    let fix = format!(
        "the real peers are built with Go >= {}.{} (not Debian's golang-go, which is older): \
         install a Go release and put its bin directory on PATH",
        MIN_GO.0, MIN_GO.1
    );
    let out = Command::new("go")
        .args(["env", "GOVERSION"])
        .env("PATH", path)
        .env("GOTOOLCHAIN", "local")
        .output()
        .map_err(|e| Failed::new(format!("go: {e}; {fix}")))?;
    let version = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    match go_version(&version) {
        Some(v) if out.status.success() && v >= MIN_GO => Ok(version),
        _ => Err(Failed::new(format!("go says {version:?}; {fix}"))),
    }
}

/// `go1.26.8` -> (1, 26); `None` for anything else.
#[must_use]
pub fn go_version(v: &str) -> Option<(u32, u32)> {
    let mut parts = v.strip_prefix("go")?.split(['.', 'r', 'b', '-', ' ']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// Runs `bash tests/peers/build.sh` (its progress lines pass through on stderr); returns the bin
/// directory it printed last.
///
/// # Errors
/// [`Failed`] with build.sh's exit code when a peer did not build (build.sh named it).
pub fn build_peers(path: &OsStr) -> Result<PathBuf, Failed> {
    let script = repo_root().join("tests/peers/build.sh");
    let out = Command::new("bash")
        .arg(&script)
        .env("PATH", path)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| Failed::new(format!("starting bash {}: {e}", script.display())))?;
    if !out.status.success() {
        return Err(Failed {
            message: format!(
                "{} failed ({}): see its last lines above",
                script.display(),
                out.status
            ),
            code: exit_code(out.status.code()),
        });
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let dir = PathBuf::from(stdout.lines().last().unwrap_or_default().trim());
    if !dir.join("kubectl").is_file() {
        return Err(Failed::new(format!(
            "{} printed {} as its bin directory, which has no kubectl",
            script.display(),
            dir.display()
        )));
    }
    Ok(dir)
}

/// Runs `cargo <args>` in the repository root with `envs`, stdio inherited.
///
/// # Errors
/// [`Failed`] with cargo's exit code when it failed.
pub fn cargo(args: &[OsString], envs: &[(&str, &OsStr)]) -> Result<(), Failed> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let shown = args
        .iter()
        .map(|a| a.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ");
    let mut c = Command::new(&cargo);
    c.args(args).current_dir(repo_root());
    for (k, v) in envs {
        c.env(k, v);
    }
    let status = c
        .status()
        .map_err(|e| Failed::new(format!("starting {}: {e}", Path::new(&cargo).display())))?;
    if status.success() {
        Ok(())
    } else {
        Err(Failed {
            message: format!("cargo {shown} failed ({status})"),
            code: exit_code(status.code()),
        })
    }
}

fn exit_code(code: Option<i32>) -> u8 {
    code.and_then(|c| u8::try_from(c).ok())
        .filter(|c| *c != 0)
        .unwrap_or(1)
}

/// Runs `step`, announced as `[n/total] what` and timed.
///
/// # Errors
/// The step's own.
pub fn step<T>(
    n: usize,
    total: usize,
    what: &str,
    step: impl FnOnce() -> Result<T, Failed>,
) -> Result<T, Failed> {
    say(&format!("[{n}/{total}] {what}"));
    let t0 = Instant::now();
    let r = step();
    let verdict = if r.is_ok() { "done" } else { "failed" };
    say(&format!(
        "[{n}/{total}] {verdict} in {}: {what}",
        elapsed(t0.elapsed())
    ));
    r
}

/// The process's exit: 0, or the failure printed and its code.
#[must_use]
pub fn finish(r: Result<(), Failed>, t0: Instant) -> ExitCode {
    match r {
        Ok(()) => {
            say(&format!("finished in {}", elapsed(t0.elapsed())));
            ExitCode::SUCCESS
        }
        Err(f) => {
            say(&format!("error: {}", f.message));
            ExitCode::from(f.code)
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn go_versions_parse() {
        assert_eq!(go_version("go1.26.8"), Some((1, 26)));
        assert_eq!(go_version("go1.27rc1"), Some((1, 27)));
        assert_eq!(go_version("go1.9"), Some((1, 9)));
        assert_eq!(go_version("devel"), None);
        assert!(go_version("go1.24.4").unwrap() < MIN_GO);
    }

    /// [`MIN_GO`] is what the peers' modules require.
    #[test]
    fn the_go_minimum_is_the_peer_modules_go_line() {
        for m in ["kube", "etcd", "helm"] {
            let text =
                std::fs::read_to_string(repo_root().join("tests/peers").join(m).join("go.mod"))
                    .unwrap();
            let line = text.lines().find_map(|l| l.strip_prefix("go ")).unwrap();
            assert_eq!(go_version(&format!("go{line}")), Some(MIN_GO), "{m}/go.mod");
        }
    }

    #[test]
    fn elapsed_reads_in_minutes_past_one() {
        assert_eq!(elapsed(Duration::from_millis(2_340)), "2.3 s");
        assert_eq!(elapsed(Duration::from_secs(809)), "13 min 29 s");
    }
}
