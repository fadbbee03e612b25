//! The real peers (issue 18): the unmodified etcd and kube-apiserver built by
//! `tests/peers/build.sh`, started on loopback once per test process and shared by its fleets
//! (each in a namespace of its own), with RBAC and admission on.
//!
//! ```text
//!  bin_dir(): $HAPTIC_PEERS_BIN, else the last line of `tests/peers/build.sh --check
//!             kube-apiserver etcd` (cached binaries only: never a build inside a test;
//!             the lookup is haptic_tools::peers', which also finds the pinned kubectl)
//!  shared(): the first real-peer fleet starts ApiPeers in /tmp/haptic-peers-*; every later
//!            one reuses it; the janitor kills both and removes the directory at exit
//!  ApiPeers::start(bin, dir):
//!    dir/sa.key (EC P-256, service-account signing), dir/tokens.csv (the admin token,
//!    system:masters), dir/audit-policy.yaml
//!    etcd           127.0.0.1:{client, peer}, data dir/etcd, --unsafe-no-fsync ─► GET /health
//!    kube-apiserver 127.0.0.1:secure, --authorization-mode=Node,RBAC, default admission plugins
//!                   (ServiceAccount included), --endpoint-reconciler-type=none, self-signed
//!                   serving cert in dir/certs, audit log dir/audit.log ─► GET /readyz = ok
//!    a port taken between picking it and binding it: both restarted on new ports (3 tries)
//!  setup::RealCluster::start(api, ...) (setup.rs): namespace `<cfg.namespace>-<n>` + `default`
//!    ServiceAccount, CRDs
//!    (Established), deploy/'s ServiceAccount/Role/RoleBinding, the controller's token
//!    (TokenRequest), the two kubeconfigs, sandbox pods registered as Pod objects
//!  audit.rs: the audit log read as the fleet's request log
//! ```
//!
//! Start-up bounds (measured on this 2-core VM, idle and under the full suite): etcd healthy in
//! 0.16-0.6 s, bound [`ETCD_READY`]; kube-apiserver ready 2.4-4.4 s after, bound
//! [`APISERVER_READY`]. Every process is killed with the fleet, and by the sandbox's janitor
//! (`setsid sh` reading our stdin) when the test process dies without running destructors.
//!
//! What is not there, because nothing runs but etcd and the API server: no kube-controller-manager
//! (no garbage collection of ownerReferences, no namespace deletion, no default ServiceAccounts:
//! the kit creates `default` in the namespaces it makes), no scheduler, no kubelet (the kit writes
//! the Pod objects and their status for the sandbox's HAProxy processes).

pub mod audit;
pub mod setup;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail};
use haptic_tools::sandbox::pods::netns::Janitor;

use crate::peers::PeerError;

/// Environment variable naming the directory of the peer binaries (`tests/peers/build.sh`
/// prints it on its last line); without it the kit asks `build.sh --check`.
pub const BIN_ENV: &str = haptic_tools::peers::BIN_ENV;

/// Bound of etcd's start-up (measured 0.16-0.6 s).
pub const ETCD_READY: Duration = Duration::from_secs(10);

/// Bound of kube-apiserver's start-up after etcd is healthy (measured 2.4-4.4 s).
pub const APISERVER_READY: Duration = Duration::from_secs(60);

/// The repository's `tests/peers/build.sh`.
#[must_use]
pub fn build_script() -> PathBuf {
    haptic_tools::peers::build_script()
}

/// The directory holding `kube-apiserver` and `etcd`: `$HAPTIC_PEERS_BIN`, else the last line
/// of `bash tests/peers/build.sh --check kube-apiserver etcd`
/// ([`haptic_tools::peers::find_bin_dir`]). Looked up once per process.
///
/// # Errors
/// [`PeerError::Missing`] naming `bash tests/peers/build.sh` when the binaries are not there
/// (the real-peer tests fail then, never skip).
pub fn bin_dir() -> Result<PathBuf, PeerError> {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    DIR.get_or_init(|| haptic_tools::peers::find_bin_dir(&API_PEERS))
        .clone()
        .map_err(PeerError::Missing)
}

/// The peers [`bin_dir`] must hold.
const API_PEERS: [&str; 2] = ["kube-apiserver", "etcd"];

/// Whether `dir` holds `kube-apiserver` and `etcd`.
///
/// # Errors
/// The first one missing, and the command that builds it.
pub fn check_bin_dir(dir: &Path) -> Result<(), String> {
    haptic_tools::peers::check_bin_dir(dir, &API_PEERS)
}

/// The peer binary `name` (`kube-apiserver`, `etcd`, `helm`) in [`bin_dir`].
///
/// # Errors
/// [`PeerError::Missing`] naming `bash tests/peers/build.sh` when it is not there.
pub fn peer_bin(name: &str) -> Result<PathBuf, PeerError> {
    let path = bin_dir()?.join(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(PeerError::Missing(format!(
            "{} is missing: run `bash tests/peers/build.sh`",
            path.display()
        )))
    }
}

/// Runs the pinned `kubectl --kubeconfig <kubeconfig> --cache-dir <cache> <args>`
/// ([`haptic_tools::peers::kubectl`]: v1.37.2 from `tests/peers/build.sh`, never one on PATH;
/// with `stdin` piped in when given; proxy variables removed); returns whether it exited 0 and
/// its stdout followed by its stderr.
///
/// # Panics
/// When the pinned `kubectl` is not built (naming `bash tests/peers/build.sh`) or cannot be
/// started.
#[must_use]
pub fn kubectl(
    kubeconfig: &Path,
    cache: &Path,
    args: &[&str],
    stdin: Option<&str>,
) -> (bool, String) {
    use std::io::Write as _;
    let mut cmd = Command::new(haptic_tools::peers::kubectl());
    cmd.arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--cache-dir")
        .arg(cache)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for v in [
        "HTTPS_PROXY",
        "https_proxy",
        "HTTP_PROXY",
        "http_proxy",
        "ALL_PROXY",
        "all_proxy",
    ] {
        cmd.env_remove(v);
    }
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("the pinned kubectl starts: {e}"));
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        let _ = pipe.write_all(text.as_bytes());
    }
    let out = child.wait_with_output().expect("kubectl runs");
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// The test process's one etcd + kube-apiserver pair, started by the first real-peer fleet (in
/// a temporary directory) and shared by every later one: each fleet gets its own namespace
/// ([`setup::RealCluster::start`]), so tests in one binary share the API server and never
/// its objects. It lives until the process ends; the janitor then kills both and removes the
/// directory (a test binary runs no destructors of statics).
///
/// Started on a thread of its own (with its own runtime): it outlives the runtime of the test
/// that started it, and holds nothing bound to one.
///
/// # Errors
/// [`PeerError::Missing`] without the binaries; [`PeerError::Start`] when they did not start
/// (every later caller gets the same error: one failed start fails every real-peer test).
pub fn shared() -> Result<&'static ApiPeers, PeerError> {
    static PEERS: OnceLock<Result<ApiPeers, String>> = OnceLock::new();
    let bin = bin_dir()?;
    PEERS
        .get_or_init(|| {
            std::thread::spawn(move || -> Result<ApiPeers, String> {
                let dir = tempfile::Builder::new()
                    .prefix("haptic-peers-")
                    .tempdir()
                    .map_err(|e| format!("a directory for the shared API server: {e}"))?
                    .keep();
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| format!("a runtime for the shared API server: {e}"))?;
                let started = rt.block_on(ApiPeers::start(&bin, &dir));
                match started {
                    Ok(mut p) => {
                        if let Some(j) = p.janitor.as_mut() {
                            j.watch_dir(&dir);
                        }
                        Ok(p)
                    }
                    Err(e) => {
                        let _ = std::fs::remove_dir_all(&dir);
                        Err(format!("{e:#}"))
                    }
                }
            })
            .join()
            .unwrap_or_else(|_| Err("the thread starting the API server panicked".into()))
        })
        .as_ref()
        .map_err(|e| PeerError::Start(anyhow!("{e}")))
}

/// A running etcd + kube-apiserver pair on loopback; dropping it kills both.
#[derive(Debug)]
pub struct ApiPeers {
    etcd: Option<Child>,
    apiserver: Option<Child>,
    janitor: Option<Janitor>,
    /// `https://127.0.0.1:<port>`.
    pub server: String,
    /// The serving certificate and its CA (`certs/apiserver.crt`), the kubeconfigs'
    /// `certificate-authority`.
    pub ca: PathBuf,
    /// The admin's bearer token (user `admin`, group `system:masters`).
    pub admin_token: String,
    /// The audit log (JSON lines, level Metadata, every stage but RequestReceived).
    pub audit_log: PathBuf,
    /// Where everything lives (etcd data, certs, keys, logs).
    pub dir: PathBuf,
    /// How long etcd and the API server took to become ready.
    pub started_in: (Duration, Duration),
}

/// The audit policy: every request at level Metadata (who, what, the authorizer's decision and
/// reason, the answer's code), except the API server's own loopback client and health probes.
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: None
    users: [system:apiserver]
  - level: None
    nonResourceURLs: [/readyz, /healthz, /livez, /readyz/*, /healthz/*, /livez/*]
  - level: Metadata
";

impl ApiPeers {
    /// Starts etcd, then kube-apiserver, with everything under `dir`.
    ///
    /// # Errors
    /// When a program does not start or is not ready within its bound, with the end of its log.
    ///
    /// # Cancel safety
    /// Dropping the future kills what was started (the children are owned by values dropped
    /// with it).
    pub async fn start(bin: &Path, dir: &Path) -> Result<ApiPeers> {
        std::fs::create_dir_all(dir.join("certs"))?;
        let key = dir.join("sa.key");
        let out = Command::new("openssl")
            .args([
                "ecparam",
                "-name",
                "prime256v1",
                "-genkey",
                "-noout",
                "-out",
            ])
            .arg(&key)
            .output()
            .context("running openssl (service-account signing key)")?;
        if !out.status.success() {
            bail!("openssl ecparam: {}", String::from_utf8_lossy(&out.stderr));
        }
        let admin_token = random_hex(16)?;
        std::fs::write(
            dir.join("tokens.csv"),
            format!("{admin_token},admin,admin-uid,system:masters\n"),
        )?;
        std::fs::write(dir.join("audit-policy.yaml"), AUDIT_POLICY)?;
        let mut last = None;
        for _attempt in 0..3 {
            match ApiPeers::try_start(bin, dir, &admin_token).await {
                Ok(p) => return Ok(p),
                Err(Retry::Port(e)) => last = Some(e),
                Err(Retry::No(e)) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| anyhow!("no attempt made")))
            .context("every attempt met a port taken by another process")
    }

    async fn try_start(bin: &Path, dir: &Path, admin_token: &str) -> Result<ApiPeers, Retry> {
        let [ec, ep, ap] = free_ports::<3>().map_err(Retry::No)?;
        let janitor = Janitor::start().map_err(Retry::No)?;
        let mut peers = ApiPeers {
            etcd: None,
            apiserver: None,
            janitor: Some(janitor),
            server: format!("https://127.0.0.1:{ap}"),
            ca: dir.join("certs/apiserver.crt"),
            admin_token: admin_token.to_owned(),
            audit_log: dir.join("audit.log"),
            dir: dir.to_path_buf(),
            started_in: (Duration::ZERO, Duration::ZERO),
        };
        let _ = std::fs::remove_dir_all(dir.join("etcd"));
        let t0 = Instant::now();
        let etcd_log = dir.join("etcd.log");
        let mut etcd = etcd_command(&bin.join("etcd"), &dir.join("etcd"), ec, ep);
        // a test's etcd need not survive a power cut; the shared disk's fsync is slow
        etcd.arg("--unsafe-no-fsync");
        peers.etcd = Some(spawn(etcd, &etcd_log, peers.janitor.as_mut()).map_err(Retry::No)?);
        let health = format!("http://127.0.0.1:{ec}/health");
        wait_ready(&mut peers.etcd, &etcd_log, ETCD_READY, "etcd", || async {
            let r = crate::http().get(&health).send().await.ok()?;
            let body = r.text().await.ok()?;
            body.contains("\"health\":\"true\"").then_some(())
        })
        .await?;
        let t1 = Instant::now();

        let api_log = dir.join("apiserver.log");
        let d = |p: &str| dir.join(p).display().to_string();
        let sa_key = dir.join("sa.key");
        let mut api = apiserver_command(&bin.join("kube-apiserver"), dir, ec, ap, &sa_key, &sa_key);
        api.arg(format!("--audit-policy-file={}", d("audit-policy.yaml")))
            .arg(format!("--audit-log-path={}", d("audit.log")))
            .arg("--audit-log-maxsize=0")
            .arg("--profiling=false");
        peers.apiserver = Some(spawn(api, &api_log, peers.janitor.as_mut()).map_err(Retry::No)?);
        // The serving certificate (and so the kubeconfigs' CA) exists once the server wrote it.
        let yaml = peers.kubeconfig("admin", admin_token, "default");
        let client: std::sync::Mutex<Option<kube::Client>> = std::sync::Mutex::default();
        wait_ready(
            &mut peers.apiserver,
            &api_log,
            APISERVER_READY,
            "kube-apiserver",
            || async {
                let cached = client.lock().ok()?.clone();
                let c = match cached {
                    Some(c) => c,
                    None => {
                        let c = client_for(&yaml).await.ok()?;
                        *client.lock().ok()? = Some(c.clone());
                        c
                    }
                };
                let req = http::Request::get("/readyz").body(Vec::new()).ok()?;
                let text = c.request_text(req).await.ok()?;
                (text == "ok").then_some(())
            },
        )
        .await?;
        peers.started_in = (t1 - t0, t1.elapsed());
        Ok(peers)
    }

    /// The admin kubeconfig's content with context namespace `ns`.
    #[must_use]
    pub fn kubeconfig(&self, user: &str, token: &str, ns: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n  - name: real\n    cluster:\n      \
             server: {}\n      certificate-authority: {}\nusers:\n  - name: {user}\n    user:\n      \
             token: {token}\ncontexts:\n  - name: real\n    context: {{cluster: real, user: {user}, \
             namespace: {ns}}}\ncurrent-context: real\n",
            self.server,
            self.ca.display()
        )
    }

    /// An admin client (no retries, as the controller's), built without a kubeconfig file.
    ///
    /// # Errors
    /// When the client cannot be built.
    ///
    /// # Cancel safety
    /// Cancel safe (no side effects).
    pub async fn admin_client(&self) -> Result<kube::Client> {
        client_for(&self.kubeconfig("admin", &self.admin_token, "default")).await
    }

    /// Kills both programs and reaps them.
    pub fn kill(&mut self) {
        for child in [self.apiserver.take(), self.etcd.take()]
            .into_iter()
            .flatten()
        {
            let mut child = child;
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(mut j) = self.janitor.take() {
            j.finish();
        }
    }

    /// The last `lines` lines of the API server's log.
    #[must_use]
    pub fn log_tail(&self, lines: usize) -> String {
        crate::wait::log_tail(&self.dir.join("apiserver.log"), lines)
    }
}

impl Drop for ApiPeers {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A client (no retries, as the controller's) for the kubeconfig `yaml`.
///
/// # Errors
/// When the kubeconfig does not parse or the client cannot be built.
///
/// # Cancel safety
/// Cancel safe (no side effects).
pub async fn client_for(yaml: &str) -> Result<kube::Client> {
    let kc = kube::config::Kubeconfig::from_yaml(yaml)?;
    let mut cfg =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await?;
    cfg.default_retry = false;
    Ok(kube::Client::try_from(cfg)?)
}

/// Why a start attempt failed: a port someone else took (try new ports) or anything else.
enum Retry {
    Port(anyhow::Error),
    No(anyhow::Error),
}

/// The `etcd` command of a one-member loopback cluster named `peers`, without a metrics
/// listener: its data in `data_dir`, clients on `client_port`, its peer URL on `peer_port`.
pub fn etcd_command(etcd: &Path, data_dir: &Path, client_port: u16, peer_port: u16) -> Command {
    let (ec, ep) = (client_port, peer_port);
    let mut cmd = Command::new(etcd);
    cmd.args(["--name", "peers", "--data-dir"])
        .arg(data_dir)
        .arg(format!("--listen-client-urls=http://127.0.0.1:{ec}"))
        .arg(format!("--advertise-client-urls=http://127.0.0.1:{ec}"))
        .arg(format!("--listen-peer-urls=http://127.0.0.1:{ep}"))
        .arg(format!(
            "--initial-advertise-peer-urls=http://127.0.0.1:{ep}"
        ))
        .arg(format!("--initial-cluster=peers=http://127.0.0.1:{ep}"))
        .arg("--listen-metrics-urls=");
    cmd
}

/// The `kube-apiserver` command on loopback port `secure_port` over the etcd whose clients are
/// on `etcd_port`: RBAC (`Node,RBAC`), tokens from `<dir>/tokens.csv`, its certificates in
/// `<dir>/certs`, service-account tokens checked with `sa_key_file` and signed with
/// `sa_signing_key_file`, no endpoint reconciler.
pub fn apiserver_command(
    apiserver: &Path,
    dir: &Path,
    etcd_port: u16,
    secure_port: u16,
    sa_key_file: &Path,
    sa_signing_key_file: &Path,
) -> Command {
    let mut cmd = Command::new(apiserver);
    cmd.arg(format!("--etcd-servers=http://127.0.0.1:{etcd_port}"))
        .args(["--bind-address=127.0.0.1", "--advertise-address=127.0.0.1"])
        .arg(format!("--secure-port={secure_port}"))
        // required with a loopback advertise address (tests/peers/README.md)
        .arg("--endpoint-reconciler-type=none")
        .arg(format!("--cert-dir={}", dir.join("certs").display()))
        .arg("--authorization-mode=Node,RBAC")
        .arg(format!(
            "--token-auth-file={}",
            dir.join("tokens.csv").display()
        ))
        .arg("--service-account-issuer=https://kubernetes.default.svc.cluster.local")
        .arg(format!(
            "--service-account-key-file={}",
            sa_key_file.display()
        ))
        .arg(format!(
            "--service-account-signing-key-file={}",
            sa_signing_key_file.display()
        ))
        .arg("--service-cluster-ip-range=10.96.0.0/16");
    cmd
}

fn spawn(mut cmd: Command, log: &Path, janitor: Option<&mut Janitor>) -> Result<Child> {
    let file = std::fs::File::create(log)?;
    let child = cmd
        .stdin(Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file)
        .env_remove("HTTPS_PROXY")
        .env_remove("https_proxy")
        .env_remove("HTTP_PROXY")
        .env_remove("http_proxy")
        .spawn()
        .with_context(|| format!("starting {:?}", cmd.get_program()))?;
    if let Some(j) = janitor {
        j.watch_pid(child.id());
    }
    Ok(child)
}

/// Probes `ready` until it answers, within `bound`; fails at once when the process exits (a
/// taken port is told apart, to retry).
async fn wait_ready<F, Fut>(
    child: &mut Option<Child>,
    log: &Path,
    bound: Duration,
    what: &str,
    mut ready: F,
) -> Result<(), Retry>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<()>>,
{
    let deadline = Instant::now() + bound;
    loop {
        if ready().await.is_some() {
            return Ok(());
        }
        let exited = child.as_mut().and_then(|c| c.try_wait().ok().flatten());
        if let Some(status) = exited {
            let tail = crate::wait::log_tail(log, 15);
            let e = anyhow!("{what} exited ({status}); {}:\n{tail}", log.display());
            return Err(if tail.contains("address already in use") {
                Retry::Port(e)
            } else {
                Retry::No(e)
            });
        }
        if Instant::now() >= deadline {
            let tail = crate::wait::log_tail(log, 15);
            return Err(Retry::No(anyhow!(
                "{what} not ready within {bound:?}; {}:\n{tail}",
                log.display()
            )));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `N` distinct free loopback ports (bound to port 0, then released: another process may take
/// one before we bind it, which [`ApiPeers::start`] retries).
fn free_ports<const N: usize>() -> Result<[u16; N]> {
    let listeners = (0..N)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<Vec<_>>>()?;
    let mut out = [0; N];
    for (o, l) in out.iter_mut().zip(&listeners) {
        *o = l.local_addr()?.port();
    }
    Ok(out)
}

/// `n` random bytes as hex, from the kernel.
fn random_hex(n: usize) -> Result<String> {
    use std::io::Read as _;
    let mut buf = vec![0u8; n];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut buf)?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}
