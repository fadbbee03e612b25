//! The real peers of DESIGN.md section 5 for this branch's tests: where their binaries are (the
//! real `helm` for `runtime::helm`), and a real etcd + kube-apiserver on loopback (the recipe of
//! `tests/peers/kube-up.sh`, in Rust) for `real_peers::chart`.
//!
//! A stop-gap, not a second kit: issue 18 wires `haptic_testkit::Peers::Real` with the same
//! peers; when that is on the integration branch, `real_peers::chart` takes its API server from
//! the kit and only [`bin`]/[`helm`] stay (or move into the kit beside its binary lookup).
//!
//! Binaries: `$HAPTIC_PEERS_BIN/<name>`, else the newest `<cache>/<pins-hash>/bin/<name>` under
//! `${HAPTIC_PEERS_CACHE:-$HOME/.cache/haptic-peers}` (where `tests/peers/build.sh` puts them).
//! A missing binary FAILS the test with the fix (never skips): CI builds the peers first.
//!
//! Network: every socket is on 127.0.0.1 (etcd client and peer, the API server); nothing else is
//! contacted.

use haptic_testkit::real::{apiserver_command, etcd_command};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The path of peer binary `name` (`helm`, `kube-apiserver`, `etcd`).
///
/// # Panics
/// When it is in neither place, naming both and the fix.
pub fn bin(name: &str) -> PathBuf {
    if let Some(dir) = std::env::var_os("HAPTIC_PEERS_BIN") {
        let p = Path::new(&dir).join(name);
        assert!(
            p.is_file(),
            "{} does not exist: HAPTIC_PEERS_BIN={} must be the bin dir tests/peers/build.sh printed",
            p.display(),
            Path::new(&dir).display()
        );
        return p;
    }
    let cache = std::env::var_os("HAPTIC_PEERS_CACHE").map_or_else(
        || {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into()))
                .join(".cache/haptic-peers")
        },
        PathBuf::from,
    );
    let newest = std::fs::read_dir(&cache)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|e| e.path().join("bin").join(name))
        .filter(|p| p.is_file())
        .max_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok());
    newest.unwrap_or_else(|| {
        panic!(
            "the real `{name}` is missing: run tests/peers/build.sh (it prints the bin dir) and set \
             HAPTIC_PEERS_BIN, or build into {} (this test fails rather than skips without it)",
            cache.display()
        )
    })
}

/// A free loopback port (bound, then released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// etcd + kube-apiserver (RBAC on, token auth) on loopback, stopped on drop.
pub struct KubeApiServer {
    etcd: Child,
    apiserver: Child,
    /// Everything of this instance: data, certs, logs, the kubeconfig.
    pub dir: tempfile::TempDir,
    /// `https://127.0.0.1:<port>`.
    pub server: String,
    /// An admin token (group system:masters).
    pub token: String,
    /// A kubeconfig for the admin, context namespace `default`.
    pub kubeconfig: PathBuf,
}

impl KubeApiServer {
    /// Starts both and waits (bounded) until `/readyz` answers `ok`.
    ///
    /// # Panics
    /// When a binary is missing, a process exits, or readiness takes over 90 s (the logs are
    /// in the panic message).
    pub fn start() -> KubeApiServer {
        let (etcd_bin, api_bin) = (bin("etcd"), bin("kube-apiserver"));
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let (ec, ep, ap) = (free_port(), free_port(), free_port());
        let openssl = |args: &[&str]| {
            let out = Command::new("openssl")
                .args(args)
                .output()
                .expect("openssl");
            assert!(out.status.success(), "openssl {args:?}: {out:?}");
        };
        let (key, public) = (d.join("sa.key"), d.join("sa.pub"));
        openssl(&["genrsa", "-out", key.to_str().unwrap(), "2048"]);
        openssl(&[
            "rsa",
            "-in",
            key.to_str().unwrap(),
            "-pubout",
            "-out",
            public.to_str().unwrap(),
        ]);
        let token = format!("{:032x}", rand_u128());
        std::fs::write(
            d.join("tokens.csv"),
            format!("{token},admin,admin-uid,system:masters\n"),
        )
        .unwrap();
        let log = |name: &str| std::fs::File::create(d.join(name)).unwrap();
        let etcd = etcd_command(&etcd_bin, &d.join("etcd"), ec, ep)
            .stdin(Stdio::null())
            .stdout(log("etcd.log"))
            .stderr(log("etcd.err"))
            .spawn()
            .expect("etcd starts");
        let apiserver = apiserver_command(&api_bin, d, ec, ap, &public, &key)
            // No controller-manager creates `default` ServiceAccounts (tests/peers/README.md).
            .arg("--disable-admission-plugins=ServiceAccount")
            .stdin(Stdio::null())
            .stdout(log("apiserver.log"))
            .stderr(log("apiserver.err"))
            .spawn()
            .expect("kube-apiserver starts");
        let server = format!("https://127.0.0.1:{ap}");
        let kubeconfig = d.join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n  - name: peers\n    cluster:\n      \
                 server: {server}\n      certificate-authority: {}\nusers:\n  - name: admin\n    \
                 user:\n      token: {token}\ncontexts:\n  - name: peers\n    context: {{cluster: \
                 peers, user: admin, namespace: default}}\ncurrent-context: peers\n",
                d.join("certs/apiserver.crt").display()
            ),
        )
        .unwrap();
        let mut me = KubeApiServer {
            etcd,
            apiserver,
            dir,
            server,
            token,
            kubeconfig,
        };
        me.wait_ready(Duration::from_secs(90));
        me
    }

    fn wait_ready(&mut self, bound: Duration) {
        let deadline = Instant::now() + bound;
        loop {
            let out = Command::new("curl")
                .args(["-sk", "--noproxy", "*", "-m", "2", "-H"])
                .arg(format!("Authorization: Bearer {}", self.token))
                .arg(format!("{}/readyz", self.server))
                .output()
                .expect("curl");
            if out.stdout == b"ok" {
                return;
            }
            let exited = [
                ("etcd", &mut self.etcd),
                ("kube-apiserver", &mut self.apiserver),
            ]
            .into_iter()
            .find_map(|(name, child)| child.try_wait().ok().flatten().map(|s| (name, s)));
            if let Some((name, status)) = exited {
                panic!("{name} exited ({status}):\n{}", self.logs());
            }
            assert!(
                Instant::now() < deadline,
                "kube-apiserver not ready within {bound:?}:\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The ends of the peers' logs.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for f in ["etcd.err", "apiserver.err"] {
            let text = std::fs::read_to_string(self.dir.path().join(f)).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(15).collect();
            out.push_str(&format!("--- {f}\n"));
            for l in tail.into_iter().rev() {
                out.push_str(l);
                out.push('\n');
            }
        }
        out
    }

    /// The pinned `kubectl --kubeconfig <ours> <args>` ([`haptic_tools::peers::kubectl`]) with
    /// `stdin`; (success, stdout + stderr).
    pub fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> (bool, String) {
        let mut cmd = Command::new(haptic_tools::peers::kubectl());
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .env("NO_PROXY", "127.0.0.1")
            .env_remove("HTTPS_PROXY")
            .env_remove("https_proxy")
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("kubectl runs");
        if let Some(input) = stdin {
            use std::io::Write as _;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(input.as_bytes())
                .unwrap();
        }
        let out = child.wait_with_output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    }
}

impl Drop for KubeApiServer {
    fn drop(&mut self) {
        for child in [&mut self.apiserver, &mut self.etcd] {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap_or(0)),
                nix::sys::signal::Signal::SIGTERM,
            );
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// 128 random bits from the OS (the admin token).
fn rand_u128() -> u128 {
    let mut buf = [0u8; 16];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        let _ = std::io::Read::read_exact(&mut f, &mut buf);
    }
    u128::from_le_bytes(buf)
}

/// Runs the real `helm` with `args`; (success, stdout, stderr).
pub fn helm(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(bin("helm"))
        .args(args)
        .env(
            "HELM_CACHE_HOME",
            std::env::temp_dir().join("haptic-helm-cache"),
        )
        .env(
            "HELM_CONFIG_HOME",
            std::env::temp_dir().join("haptic-helm-config"),
        )
        .env(
            "HELM_DATA_HOME",
            std::env::temp_dir().join("haptic-helm-data"),
        )
        .output()
        .expect("helm runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
