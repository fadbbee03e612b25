//! The real HAProxy behind each pod: start in master-worker mode with a master CLI socket
//! (`../shared/reference/sandbox-pod-recipe.md` step 4), reload through the master CLI and read
//! `show proc` to tell a failed reload (step 6), and validation with `haproxy -c`.
//!
//! Filesystem views. Namespace mode: HAProxy and `haproxy -c` run with the pod's own directories
//! bind-mounted on `/etc/haproxy` and `/var/run` in a private mount namespace, so absolute paths in
//! renders resolve to the pod's files unchanged. Loopback mode (no root): see [`rewrite_for_loopback`].

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::process::{Child, Command};

/// Where a pod's files live on the host and how its HAProxy sees them.
#[derive(Debug, Clone)]
pub struct PodFs {
    /// The pod's root directory.
    pub root: PathBuf,
    /// Host directory seen as `/etc/haproxy` by the pod.
    pub etc: PathBuf,
    /// Host directory seen as `/var/run` by the pod.
    pub run: PathBuf,
}

impl PodFs {
    /// Lays out `root/etc-haproxy/{maps,ssl,general}` and `root/run`.
    pub fn create(root: &Path) -> Result<PodFs> {
        // A pod starts empty, even in a reused --dir.
        if root.exists() {
            std::fs::remove_dir_all(root)?;
        }
        let fs = PodFs {
            root: root.to_path_buf(),
            etc: root.join("etc-haproxy"),
            run: root.join("run"),
        };
        for d in ["maps", "ssl", "general"] {
            std::fs::create_dir_all(fs.etc.join(d))?;
        }
        std::fs::create_dir_all(&fs.run)?;
        Ok(fs)
    }

    /// The stored configuration file (`/etc/haproxy/haproxy.cfg` on the pod).
    pub fn config(&self) -> PathBuf {
        self.etc.join("haproxy.cfg")
    }

    /// Maps a pod path (`/etc/haproxy/...`, `/var/run/...`) to the host path, if it is one of ours.
    pub fn host_path(&self, pod_path: &str) -> Option<PathBuf> {
        let clean = |rest: &str| -> Option<PathBuf> {
            if rest.split('/').any(|c| c == "..") {
                None
            } else {
                Some(PathBuf::from(rest))
            }
        };
        if let Some(rest) = pod_path.strip_prefix("/etc/haproxy/") {
            return clean(rest).map(|r| self.etc.join(r));
        }
        for p in ["/var/run/", "/run/"] {
            if let Some(rest) = pod_path.strip_prefix(p) {
                return clean(rest).map(|r| self.run.join(r));
            }
        }
        None
    }

    /// The master CLI socket on the host.
    pub fn master_sock(&self) -> PathBuf {
        self.run.join("master.sock")
    }

    /// HAProxy's own output (stdout + stderr of the master).
    pub fn log(&self) -> PathBuf {
        self.root.join("haproxy.log")
    }
}

/// How HAProxy reaches a pod's files and network.
#[derive(Debug, Clone)]
pub enum View {
    /// Root: network namespace `netns` + private mount namespace with bind mounts.
    Namespaced {
        /// Namespace to run in.
        netns: String,
    },
    /// No root: paths and bind addresses rewritten ([`rewrite_for_loopback`]).
    Loopback {
        /// The pod's loopback address.
        addr: Ipv4Addr,
        /// Added to bind ports below 1024 (0 when the port can be bound as is).
        port_offset: u16,
    },
}

/// Checks that `haproxy` runs; the error says how to install it.
pub async fn check_installed(bin: &str) -> Result<String> {
    let out = Command::new(bin)
        .arg("-v")
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "`{bin}` cannot be run ({e}); install HAProxy first: apt-get install -y haproxy"
            )
        })?;
    let v = String::from_utf8_lossy(&out.stdout);
    Ok(v.lines().next().unwrap_or_default().to_string())
}

fn mount_script(tail: &str) -> String {
    format!(
        "mount --bind \"$1\" /etc/haproxy && mount --bind \"$2\" /var/run && exec \"$3\" {tail}"
    )
}

/// A command running `haproxy ARGS` with the pod's view (namespace mode: in its netns, with its
/// private `/etc/haproxy` and `/var/run`).
fn haproxy_command(bin: &str, fs: &PodFs, view: &View, args_tail: &str) -> Command {
    match view {
        View::Namespaced { netns } => {
            let mut c = Command::new("ip");
            c.args([
                "netns",
                "exec",
                netns,
                "unshare",
                "--mount",
                "--propagation",
                "private",
            ]);
            c.args(["sh", "-c", &mount_script(args_tail), "sh"]);
            c.arg(&fs.etc).arg(&fs.run).arg(bin);
            c
        }
        View::Loopback { .. } => {
            let mut c = Command::new("sh");
            c.args(["-c", &format!("exec \"$1\" {args_tail}"), "sh", bin]);
            c
        }
    }
}

/// The running master process of one pod.
#[derive(Debug)]
pub struct Master {
    /// The child (the master itself: every wrapper execs).
    pub child: Child,
    /// Its pid.
    pub pid: u32,
    /// Its master CLI socket on the host.
    pub sock: PathBuf,
}

/// The config file HAProxy is started with (loopback mode runs a rewritten copy).
pub fn live_config_arg(fs: &PodFs, view: &View) -> String {
    match view {
        View::Namespaced { .. } => "/etc/haproxy/haproxy.cfg".into(),
        View::Loopback { .. } => fs.run.join("live.cfg").display().to_string(),
    }
}

/// Prepares the file HAProxy will load (loopback: rewrites the stored config into `run/live.cfg`).
pub fn prepare_live(fs: &PodFs, view: &View) -> Result<()> {
    if let View::Loopback { addr, port_offset } = view {
        let text = std::fs::read_to_string(fs.config())?;
        let rewritten = rewrite_for_loopback(&text, fs, *addr, *port_offset)?;
        std::fs::write(fs.run.join("live.cfg"), rewritten)?;
    }
    Ok(())
}

/// Starts `haproxy -W -S master.sock -f haproxy.cfg` for the pod and waits until the master CLI
/// answers (bounded wait).
pub async fn start(bin: &str, fs: &PodFs, view: &View) -> Result<Master> {
    prepare_live(fs, view)?;
    let sock = match view {
        View::Namespaced { .. } => "/var/run/master.sock".to_string(),
        View::Loopback { .. } => fs.master_sock().display().to_string(),
    };
    let tail = format!("-W -S {sock} -f {}", live_config_arg(fs, view));
    let log = std::fs::File::create(fs.log())?;
    let mut cmd = haproxy_command(bin, fs, view, &tail);
    cmd.stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .kill_on_drop(true);
    let mut child = cmd.spawn().context("spawning haproxy")?;
    let pid = child.id().context("haproxy exited at once")?;
    for _ in 0..200 {
        if let Some(status) = child.try_wait()? {
            let log = std::fs::read_to_string(fs.log()).unwrap_or_default();
            bail!("haproxy exited ({status}) at start-up:\n{log}");
        }
        if show_proc(&fs.master_sock()).await.is_ok() {
            return Ok(Master {
                child,
                pid,
                sock: fs.master_sock(),
            });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = child.kill().await;
    bail!("haproxy's master CLI did not come up within 10 s")
}

/// Sends one command to the master CLI and returns the answer.
pub async fn master_cmd(sock: &Path, cmd: &str) -> Result<String> {
    let mut s = tokio::net::UnixStream::connect(sock)
        .await
        .with_context(|| format!("connecting {}", sock.display()))?;
    s.write_all(format!("{cmd}\n").as_bytes()).await?;
    // Half-close: the master CLI answers and closes once it sees the end of input.
    s.shutdown().await?;
    let mut out = String::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut out))
        .await
        .context("master CLI timed out")??;
    Ok(out)
}

/// What `show proc` says.
#[derive(Debug, Clone, Default)]
pub struct ProcInfo {
    /// Master pid.
    pub master: u32,
    /// Reloads so far.
    pub reloads: u64,
    /// HAProxy's "failed" counter (consecutive failed reloads).
    pub failed: u64,
    /// Worker pids.
    pub workers: Vec<u32>,
}

/// Reads `show proc` from the master CLI.
pub async fn show_proc(sock: &Path) -> Result<ProcInfo> {
    let out = master_cmd(sock, "show proc").await?;
    let mut info = ProcInfo::default();
    let mut seen_master = false;
    for line in out.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 3 || line.starts_with('#') {
            continue;
        }
        let Ok(pid) = f[0].parse::<u32>() else {
            continue;
        };
        match f[1] {
            "master" => {
                seen_master = true;
                info.master = pid;
                info.reloads = f[2].parse().unwrap_or(0);
                if let Some(i) = line.find("failed:") {
                    info.failed = line[i + 7..]
                        .trim_start()
                        .split(|c: char| !c.is_ascii_digit())
                        .next()
                        .and_then(|d| d.parse().ok())
                        .unwrap_or(0);
                }
            }
            "worker" => info.workers.push(pid),
            _ => {}
        }
    }
    if !seen_master {
        bail!("unexpected `show proc` answer: {out}");
    }
    Ok(info)
}

/// Reloads through the master CLI and tells success from failure by `show proc` (the reload count
/// moves; "failed" > 0 means HAProxy rejected the new file and the old workers keep serving).
/// On failure returns HAProxy's output for this reload.
pub async fn reload(fs: &PodFs, view: &View) -> Result<(), String> {
    prepare_live(fs, view).map_err(|e| e.to_string())?;
    let sock = fs.master_sock();
    let before = show_proc(&sock).await.map_err(|e| e.to_string())?;
    let log_off = std::fs::metadata(fs.log()).map(|m| m.len()).unwrap_or(0);
    let _ = master_cmd(&sock, "reload").await;
    for _ in 0..300 {
        tokio::time::sleep(Duration::from_millis(30)).await;
        if let Ok(now) = show_proc(&sock).await
            && now.reloads > before.reloads
        {
            if now.failed > 0 {
                let log = std::fs::read(fs.log()).unwrap_or_default();
                let tail =
                    String::from_utf8_lossy(&log[(log_off as usize).min(log.len())..]).into_owned();
                let alerts = alert_lines(&tail);
                return Err(if alerts.is_empty() { tail } else { alerts });
            }
            return Ok(());
        }
    }
    Err("reload did not complete within 9 s".into())
}

/// The `[ALERT]` lines of HAProxy's output, joined by newlines.
pub fn alert_lines(out: &str) -> String {
    out.lines()
        .filter(|l| l.contains("[ALERT]"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Validates `text` with `haproxy -c` as the pod would load it (its files at their pod paths).
/// On failure: `exit status N: ` and the ALERT lines (client-native `configuration/check.go`:
/// the command's error, then the list of ALERT lines; ecosystem.md §A.2).
pub async fn validate(bin: &str, fs: &PodFs, view: &View, text: &str) -> Result<(), String> {
    let n = std::process::id() ^ rand_u32();
    let name = format!(".candidate-{n}.cfg");
    let host_file = fs.etc.join(&name);
    let (file_arg, to_write) = match view {
        View::Namespaced { .. } => (format!("/etc/haproxy/{name}"), text.to_string()),
        View::Loopback { addr, port_offset } => (
            host_file.display().to_string(),
            rewrite_for_loopback(text, fs, *addr, *port_offset).map_err(|e| e.to_string())?,
        ),
    };
    std::fs::write(&host_file, to_write).map_err(|e| e.to_string())?;
    let mut cmd = haproxy_command(bin, fs, view, &format!("-c -f {file_arg}"));
    cmd.stdin(Stdio::null()).kill_on_drop(true);
    let out = cmd.output().await;
    let _ = std::fs::remove_file(&host_file);
    let out = out.map_err(|e| format!("running haproxy -c: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let mut all = String::from_utf8_lossy(&out.stderr).into_owned();
    all.push_str(&String::from_utf8_lossy(&out.stdout));
    // Name the file as the client pushed it, not our temporary name.
    let all = all
        .replace(&file_arg, "/etc/haproxy/haproxy.cfg")
        .replace(&format!("{}/", fs.etc.display()), "/etc/haproxy/");
    let alerts = alert_lines(&all);
    let status = out
        .status
        .code()
        .map_or_else(|| out.status.to_string(), |c| format!("exit status {c}"));
    Err(if alerts.is_empty() {
        format!("{status}: haproxy -c printed no ALERT line: {}", all.trim())
    } else {
        format!("{status}: {alerts}")
    })
}

fn rand_u32() -> u32 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(1);
    N.fetch_add(1, Ordering::Relaxed)
        .wrapping_mul(2_654_435_761)
}

/// Loopback mode (no root, no namespaces): the documented rewrite applied to the file HAProxy
/// loads (the stored file, which `GET .../raw` returns, is never rewritten):
/// - every `bind` address (`*`, `0.0.0.0`, `::`, `[::]`, empty, or any IP) becomes the pod's own
///   loopback address `127.232.x.y`; ports below 1024 get `port_offset` added (10000 when not root:
///   `:80` → `:10080`, `:443` → `:10443`);
/// - the absolute paths `/etc/haproxy/…`, `/var/run/…` and `/run/…` become the pod's directories;
/// - files named after `crt-list` are rewritten the same way into `run/rewritten/`.
pub fn rewrite_for_loopback(
    text: &str,
    fs: &PodFs,
    addr: Ipv4Addr,
    port_offset: u16,
) -> Result<String> {
    let mut out = String::with_capacity(text.len() + 256);
    for line in text.lines() {
        let trimmed = line.trim_start();
        let mut l = rewrite_paths(line, fs);
        if trimmed.starts_with("bind ") || trimmed == "bind" {
            l = rewrite_bind(&l, addr, port_offset);
        }
        if let Some(i) = l.find("crt-list ") {
            let after = &l[i + 9..];
            let path = after
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_string();
            if !path.is_empty() && Path::new(&path).exists() {
                let content = std::fs::read_to_string(&path)?;
                let dir = fs.run.join("rewritten");
                std::fs::create_dir_all(&dir)?;
                let dest = dir.join(path.replace('/', "_"));
                std::fs::write(&dest, rewrite_paths(&content, fs))?;
                l = l.replacen(&path, &dest.display().to_string(), 1);
            }
        }
        out.push_str(&l);
        out.push('\n');
    }
    Ok(out)
}

fn rewrite_paths(line: &str, fs: &PodFs) -> String {
    let etc = format!("{}/", fs.etc.display());
    let run = format!("{}/", fs.run.display());
    let mut out = String::with_capacity(line.len());
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < line.len() {
        let boundary = i == 0
            || matches!(
                bytes[i - 1],
                b' ' | b'\t' | b'"' | b'\'' | b'=' | b',' | b'@' | b'('
            );
        let rest = &line[i..];
        if boundary {
            if let Some(r) = rest.strip_prefix("/etc/haproxy/") {
                out.push_str(&etc);
                i = line.len() - r.len();
                continue;
            }
            if let Some(r) = rest.strip_prefix("/var/run/") {
                out.push_str(&run);
                i = line.len() - r.len();
                continue;
            }
            if let Some(r) = rest.strip_prefix("/run/") {
                out.push_str(&run);
                i = line.len() - r.len();
                continue;
            }
        }
        let ch = rest.chars().next().unwrap_or(' ');
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

fn rewrite_bind(line: &str, addr: Ipv4Addr, port_offset: u16) -> String {
    let indent_len = line.len() - line.trim_start().len();
    let (indent, rest) = line.split_at(indent_len);
    let mut parts = rest.splitn(3, char::is_whitespace);
    let kw = parts.next().unwrap_or_default();
    let Some(addrs) = parts.next() else {
        return line.to_string();
    };
    let tail = parts.next().unwrap_or_default();
    let new_addrs: Vec<String> = addrs
        .split(',')
        .map(|a| {
            // IP families keep their protocol, on IPv4 (the pod address is IPv4)
            let families = [
                ("ipv4@", ""),
                ("ipv6@", ""),
                ("tcp@", "tcp4@"),
                ("tcp4@", "tcp4@"),
                ("tcp6@", "tcp4@"),
                ("udp@", "udp4@"),
                ("udp4@", "udp4@"),
                ("udp6@", "udp4@"),
                ("quic4@", "quic4@"),
                ("quic6@", "quic4@"),
            ];
            let (prefix, a) = families
                .iter()
                .find_map(|(p, to)| a.strip_prefix(p).map(|rest| (*to, rest)))
                .unwrap_or(("", a));
            // unix sockets, abstract namespaces, fds: paths were rewritten already
            if a.starts_with('/') || a.contains('@') {
                return format!("{prefix}{a}");
            }
            let Some(colon) = a.rfind(':') else {
                return a.to_string();
            };
            let ports = &a[colon + 1..];
            let new_ports = ports
                .split('-')
                .map(|p| match p.parse::<u16>() {
                    Ok(n) if n < 1024 => (n + port_offset).to_string(),
                    _ => p.to_string(),
                })
                .collect::<Vec<_>>()
                .join("-");
            format!("{prefix}{addr}:{new_ports}")
        })
        .collect();
    format!(
        "{indent}{kw} {}{}{tail}",
        new_addrs.join(","),
        if tail.is_empty() { "" } else { " " }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bind_rewrite() {
        let a = Ipv4Addr::new(127, 232, 0, 6);
        assert_eq!(
            rewrite_bind("    bind *:80", a, 10000),
            "    bind 127.232.0.6:10080"
        );
        assert_eq!(
            rewrite_bind("  bind :443 ssl crt /x", a, 0),
            "  bind 127.232.0.6:443 ssl crt /x"
        );
        assert_eq!(
            rewrite_bind("bind [::]:8404", a, 10000),
            "bind 127.232.0.6:8404"
        );
    }
}
