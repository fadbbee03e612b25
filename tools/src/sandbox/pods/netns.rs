//! Pod networking (root mode): one network namespace per pod, named `hs<owner pid>-<n>`, joined to
//! the host by a veth pair carrying a /30 from `10.231.0.0/16` (a range no corpus config names) and
//! **no default route**, so any connect to an address outside the /30 fails inside the namespace
//! (`../shared/reference/sandbox-pod-recipe.md` steps 1-3 and 7).
//!
//! Also: stale-namespace removal (owner pid dead), a janitor process that removes what a killed
//! sandbox leaves behind, and binding a listening socket inside a namespace via `setns` on a helper
//! thread (the socket stays in the namespace it was created in).

use std::fs::File;
use std::io::Write as _;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::os::fd::AsFd as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use anyhow::{Context as _, Result, bail};

/// Prefix of every namespace this sandbox creates; the owner pid follows.
pub const NETNS_PREFIX: &str = "hs";
/// Second octet of the pod link range: `10.231.0.0/16`, split into /30s.
pub const LINK_OCTET: u8 = 231;

/// Runs a command to completion; an error carries its stderr.
pub fn run_cmd(program: &str, args: &[&str]) -> Result<String> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {program}"))?;
    if !out.status.success() {
        bail!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The namespace name of pod `n` of sandbox `owner`.
pub fn netns_name(owner: u32, n: &str) -> String {
    format!("{NETNS_PREFIX}{owner}-{n}")
}

/// Parses the owner pid out of a namespace name made by [`netns_name`].
pub fn netns_owner(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(NETNS_PREFIX)?;
    let (pid, _) = rest.split_once('-')?;
    pid.parse().ok()
}

/// True when `pid` names a live process (a zombie counts as dead: PID 1 here does not reap).
pub fn pid_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            // state is the field after the parenthesised command name
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .unwrap_or("?");
            state != "Z" && state != "X"
        }
        Err(_) => false,
    }
}

/// Names of all network namespaces (`ip netns list`).
pub fn list_netns() -> Result<Vec<String>> {
    let out = run_cmd("ip", &["netns", "list"])?;
    Ok(out
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect())
}

/// Pids of the processes inside namespace `ns`.
pub fn netns_pids(ns: &str) -> Vec<u32> {
    run_cmd("ip", &["netns", "pids", ns])
        .map(|o| o.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

/// Kills every process inside `ns` and deletes it (the veth pair goes with it). Idempotent.
pub fn delete_netns(ns: &str) {
    for pid in netns_pids(ns) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let _ = run_cmd("ip", &["netns", "del", ns]);
}

/// Removes the namespaces of sandboxes whose owner process is dead (a killed run must never break
/// the next one); namespaces of live sandboxes are left alone so several can run at once.
pub fn cleanup_stale() -> Result<Vec<String>> {
    let mut removed = Vec::new();
    for ns in list_netns()? {
        if let Some(owner) = netns_owner(&ns)
            && !pid_alive(owner)
        {
            delete_netns(&ns);
            removed.push(ns);
        }
    }
    Ok(removed)
}

/// One pod's link: host side `.1`, pod side `.2` of a /30.
#[derive(Debug, Clone)]
pub struct Link {
    /// Host-side interface name.
    pub host_if: String,
    /// Host-side address (echo servers listen here).
    pub host_ip: Ipv4Addr,
    /// Pod-side address (`status.podIP`).
    pub pod_ip: Ipv4Addr,
}

/// The /30 with index `slot` in `10.231.0.0/16`.
pub fn slot_addrs(slot: u32) -> (Ipv4Addr, Ipv4Addr) {
    let base = u32::from(Ipv4Addr::new(10, LINK_OCTET, 0, 0)) + slot * 4;
    (Ipv4Addr::from(base + 1), Ipv4Addr::from(base + 2))
}

/// Addresses of `10.231.0.0/16` already configured on the host (links of other live sandboxes).
fn used_slots() -> Result<std::collections::HashSet<u32>> {
    let out = run_cmd("ip", &["-o", "-4", "addr", "show"])?;
    let base = u32::from(Ipv4Addr::new(10, LINK_OCTET, 0, 0));
    let mut used = std::collections::HashSet::new();
    for line in out.lines() {
        for tok in line.split_whitespace() {
            if let Some((a, _)) = tok.split_once('/')
                && let Ok(ip) = a.parse::<Ipv4Addr>()
            {
                let v = u32::from(ip);
                if v & 0xffff_0000 == base {
                    used.insert((v - base) / 4);
                }
            }
        }
    }
    Ok(used)
}

/// Creates the namespaces named in `names` (pod links for `Some`, a link-less namespace for the
/// validation namespace), under a host-wide lock so two sandboxes starting at once never pick the
/// same /30.
pub fn create_namespaces(names: &[(String, bool)]) -> Result<Vec<Option<Link>>> {
    let lock = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open("/run/haptic-sandbox.lock")
        .context("opening /run/haptic-sandbox.lock")?;
    let _guard = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| e)
        .context("locking /run/haptic-sandbox.lock")?;
    let mut used = used_slots()?;
    let mut out = Vec::new();
    for (ns, with_link) in names {
        run_cmd("ip", &["netns", "add", ns])?;
        run_cmd(
            "ip",
            &["netns", "exec", ns, "ip", "link", "set", "lo", "up"],
        )?;
        if !*with_link {
            out.push(None);
            continue;
        }
        let slot = (1..16383u32)
            .find(|s| !used.contains(s))
            .context("no free /30 left in 10.231.0.0/16")?;
        used.insert(slot);
        let (host_ip, pod_ip) = slot_addrs(slot);
        // interface names follow the namespace name (unique per sandbox and pod; <= 15 chars)
        let suffix = ns.strip_prefix(NETNS_PREFIX).unwrap_or(ns);
        let host_if = format!("hv{suffix}");
        let pod_if = format!("hp{suffix}");
        run_cmd(
            "ip",
            &[
                "link", "add", &host_if, "type", "veth", "peer", "name", &pod_if,
            ],
        )?;
        run_cmd("ip", &["link", "set", &pod_if, "netns", ns])?;
        // No IPv6 on the link (no link-local or router-discovery chatter); IPv6 stays on inside the
        // pod so `bind [::]:80` still works, with nowhere to go but ::1.
        let _ = run_cmd(
            "ip",
            &[
                "netns",
                "exec",
                ns,
                "sysctl",
                "-qw",
                &format!("net.ipv6.conf.{pod_if}.disable_ipv6=1"),
            ],
        );
        run_cmd(
            "ip",
            &["addr", "add", &format!("{host_ip}/30"), "dev", &host_if],
        )?;
        run_cmd("ip", &["link", "set", &host_if, "up"])?;
        let pod_cidr = format!("{pod_ip}/30");
        run_cmd(
            "ip",
            &[
                "netns", "exec", ns, "ip", "addr", "add", &pod_cidr, "dev", &pod_if,
            ],
        )?;
        run_cmd(
            "ip",
            &["netns", "exec", ns, "ip", "link", "set", &pod_if, "up"],
        )?;
        // Deliberately no default route (network safety rule).
        out.push(Some(Link {
            host_if,
            host_ip,
            pod_ip,
        }));
    }
    Ok(out)
}

/// Binds a TCP listener inside namespace `ns` (a helper thread joins the namespace with `setns`,
/// creates the socket and exits; the socket keeps belonging to `ns`).
pub fn bind_in_netns(ns: &str, addr: SocketAddr) -> Result<TcpListener> {
    let path = format!("/var/run/netns/{ns}");
    std::thread::spawn(move || -> Result<TcpListener> {
        let f = File::open(&path).with_context(|| format!("opening {path}"))?;
        nix::sched::setns(f.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET)
            .with_context(|| format!("setns {path}"))?;
        let l = TcpListener::bind(addr).with_context(|| format!("binding {addr} in {path}"))?;
        l.set_nonblocking(true)?;
        Ok(l)
    })
    .join()
    .map_err(|_| anyhow::anyhow!("netns helper thread panicked"))?
}

/// A helper process that removes this sandbox's namespaces, kills its processes and removes the
/// directories it was told about if the sandbox dies without cleaning up (it sees end-of-file on its stdin when our process is gone, whatever
/// killed it). It runs in its own session so a Ctrl-C to our process group does not reach it.
#[derive(Debug)]
pub struct Janitor {
    child: Option<Child>,
}

const JANITOR_SCRIPT: &str = r#"
NS=; P=; D=
while read kind val; do
  case "$kind" in
    ns) NS="$NS $val" ;;
    pid) P="$P $val" ;;
    dir) D="$D $val" ;;
    forget) NS=; P=; D= ;;
  esac
done
for p in $P; do kill -9 "$p" 2>/dev/null; done
for n in $NS; do
  for p in $(ip netns pids "$n" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
  ip netns del "$n" 2>/dev/null
done
sleep 0.2
for d in $D; do rm -rf "$d"; done
exit 0
"#;

impl Janitor {
    /// Starts the janitor.
    pub fn start() -> Result<Janitor> {
        let child = Command::new("setsid")
            .args(["sh", "-c", JANITOR_SCRIPT])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting the janitor (setsid sh)")?;
        Ok(Janitor { child: Some(child) })
    }

    /// The janitor's pid.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    fn say(&mut self, line: &str) {
        if let Some(stdin) = self.child.as_mut().and_then(|c| c.stdin.as_mut()) {
            let _ = writeln!(stdin, "{line}");
            let _ = stdin.flush();
        }
    }

    /// Registers a namespace to delete if we die.
    pub fn watch_netns(&mut self, ns: &str) {
        self.say(&format!("ns {ns}"));
    }

    /// Registers a pid to kill if we die.
    pub fn watch_pid(&mut self, pid: u32) {
        self.say(&format!("pid {pid}"));
    }

    /// Registers a directory (a path without whitespace) to remove, after the pids are killed,
    /// if we die.
    pub fn watch_dir(&mut self, dir: &std::path::Path) {
        self.say(&format!("dir {}", dir.display()));
    }

    /// Orderly end: everything was cleaned up already; the janitor forgets it and exits.
    pub fn finish(&mut self) {
        self.say("forget");
        if let Some(mut child) = self.child.take() {
            drop(child.stdin.take());
            let _ = child.wait();
        }
    }
}

impl Drop for Janitor {
    fn drop(&mut self) {
        // Not finished: closing stdin makes the janitor clean up what it was told about.
        if let Some(mut child) = self.child.take() {
            drop(child.stdin.take());
            let _ = child.wait();
        }
    }
}

/// Whether `path` exists as a namespace file (used by tests).
pub fn netns_exists(ns: &str) -> bool {
    Path::new(&format!("/var/run/netns/{ns}")).exists()
}
