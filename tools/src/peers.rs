//! Where the real peer programs are: the binaries `tests/peers/build.sh` builds from their pinned
//! Go modules (kube-apiserver, etcd, helm, and the `kubectl` every test runs), one lookup for the
//! test kit, the sandbox's tests and the integration tests.
//!
//! ```text
//!  bin dir: $HAPTIC_PEERS_BIN, else the last stdout line of
//!           `bash tests/peers/build.sh --check <peers>` (cached binaries only: a test never
//!           starts a build; `cargo xtask test` builds them first)
//!  kubectl(): <bin dir>/kubectl, v1.37.2 (the pin of tests/peers/build.sh), looked up once per
//!             process; whatever `kubectl` a machine has on PATH is never run
//! ```

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// Environment variable naming the directory of the peer binaries (`tests/peers/build.sh`
/// prints it on its last line); without it the lookup asks `build.sh --check`.
pub const BIN_ENV: &str = "HAPTIC_PEERS_BIN";

/// The repository's `tests/peers/build.sh`.
#[must_use]
pub fn build_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/peers/build.sh")
}

/// The directory holding the built `peers` (names as `build.sh` takes them, e.g.
/// `["kube-apiserver", "etcd"]`): `$HAPTIC_PEERS_BIN`, else the last line of
/// `bash tests/peers/build.sh --check <peers>`. Not cached: callers keep the answer.
///
/// # Errors
/// A message naming `bash tests/peers/build.sh` (or `cargo xtask test`, which runs it) when
/// `build.sh --check` fails (a peer not built for the current pins, no `go`), or when the
/// directory lacks one of `peers`.
pub fn find_bin_dir(peers: &[&str]) -> Result<PathBuf, String> {
    let dir = match std::env::var_os(BIN_ENV) {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => {
            let script = build_script();
            let out = Command::new("bash")
                .arg(&script)
                .arg("--check")
                .args(peers)
                .stdin(Stdio::null())
                .output()
                .map_err(|e| format!("running bash {}: {e}", script.display()))?;
            if !out.status.success() {
                let stderr = String::from_utf8_lossy(&out.stderr);
                return Err(format!(
                    "the real peers are not built ({}): run `bash tests/peers/build.sh` or \
                     `cargo xtask test` (or set {BIN_ENV}); build.sh --check said: {}",
                    out.status,
                    stderr.trim()
                ));
            }
            let stdout = String::from_utf8_lossy(&out.stdout);
            PathBuf::from(stdout.lines().last().unwrap_or_default().trim())
        }
    };
    check_bin_dir(&dir, peers)?;
    Ok(dir)
}

/// Whether `dir` holds every one of `peers`.
///
/// # Errors
/// The first one missing, and the command that builds it.
pub fn check_bin_dir(dir: &Path, peers: &[&str]) -> Result<(), String> {
    for b in peers {
        if !dir.join(b).is_file() {
            return Err(format!(
                "{} is missing: run `bash tests/peers/build.sh` (it prints the bin dir on its \
                 last line; {BIN_ENV} names it)",
                dir.join(b).display()
            ));
        }
    }
    Ok(())
}

/// The pinned `kubectl` (v1.37.2, built by `tests/peers/build.sh` from the `k8s.io/kubernetes`
/// module its kube-apiserver comes from): `<bin dir>/kubectl`, looked up once per process. The
/// tests run this one, never a `kubectl` found on PATH, so no test depends on what a machine has.
///
/// # Panics
/// When it is not built, with the command that builds it (the tests that need kubectl fail
/// then, never skip).
#[must_use]
pub fn kubectl() -> PathBuf {
    static KUBECTL: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match KUBECTL.get_or_init(|| find_bin_dir(&["kubectl"]).map(|d| d.join("kubectl"))) {
        Ok(path) => path.clone(),
        Err(e) => panic!("the pinned kubectl: {e}"),
    }
}
