//! The Debian packages the demo and the tests need: one table of the programs they start, found
//! on PATH (or in an `sbin` directory a non-root PATH lacks), and how the missing ones get
//! installed: as root with apt-get, else through `sudo -n` when that works, else not at all (the
//! exact line to run is printed and the command stops, before any build).

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

/// What a command needs the packages for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// `cargo xtask demo`: the build and the sandbox's HAProxy pods.
    Demo,
    /// `cargo xtask test`: everything the demo needs plus the tools the tests and the peers'
    /// scripts start.
    Test,
}

/// One program the build, the demo or the tests start, and the Debian packages that ship it.
#[derive(Debug)]
pub struct Need {
    /// The program's name, as started (`Command::new("...")` or a script's command).
    pub command: &'static str,
    /// The Debian packages that provide it (bookworm and trixie names).
    pub packages: &'static [&'static str],
    /// Whether the demo needs it too (the tests need every entry).
    pub demo: bool,
    /// Who starts it, for the message.
    pub why: &'static str,
}

/// Every program started by the code or the scripts beside it, except the peers
/// (`tests/peers/build.sh` builds those), Go (not a Debian package at the version needed) and
/// the C compiler `cc` (Debian `gcc`), which cargo needs to link this very crate, so it is a
/// prerequisite of Rust rather than a step here (it also builds ring's, zstd's and SQLite's C).
/// `every_program_the_code_starts_is_listed` checks the Rust side of this table.
pub const NEEDS: &[Need] = &[
    need("haproxy", &["haproxy"], true, "the pods and `haproxy -c`"),
    need("curl", &["curl"], true, "requests to the pods"),
    need(
        "ip",
        &["iproute2"],
        true,
        "a network namespace per pod (as root)",
    ),
    need("mount", &["mount"], true, "each pod's private /etc/haproxy"),
    need("umount", &["mount"], false, "tests::disk_faults"),
    need("losetup", &["mount"], false, "tests::disk_faults"),
    need(
        "unshare",
        &["util-linux"],
        true,
        "each pod's mount namespace",
    ),
    need("setsid", &["util-linux"], true, "the sandbox's janitor"),
    need("setpriv", &["util-linux"], false, "the sandbox's tests"),
    need("nsenter", &["util-linux"], false, "tests::disk_faults"),
    need("flock", &["util-linux"], false, "tests/peers/build.sh"),
    need("sh", &["dash"], true, "the sandbox"),
    need("bash", &["bash"], false, "tests/peers/build.sh"),
    need("true", &["coreutils"], false, "the sandbox's tests"),
    need("sleep", &["coreutils"], false, "the sandbox's tests"),
    need("touch", &["coreutils"], false, "the sandbox's tests"),
    need("sha256sum", &["coreutils"], false, "tests/peers/build.sh"),
    need("ss", &["iproute2"], false, "the sandbox's tests"),
    need(
        "socat",
        &["socat"],
        false,
        "the sandbox's tests, tests/peers/haproxy-reload.sh",
    ),
    need(
        "openssl",
        &["openssl"],
        false,
        "the real peers' keys (test kit)",
    ),
    need("mkfs.ext4", &["e2fsprogs"], false, "tests::disk_faults"),
    need("e2fsck", &["e2fsprogs"], false, "tests::disk_faults"),
];

const fn need(
    command: &'static str,
    packages: &'static [&'static str],
    demo: bool,
    why: &'static str,
) -> Need {
    Need {
        command,
        packages,
        demo,
        why,
    }
}

/// Directories searched after PATH: a non-root user's PATH often lacks them, while `haproxy`,
/// `losetup` and `mkfs.ext4` live there.
const SBIN: [&str; 3] = ["/usr/local/sbin", "/usr/sbin", "/sbin"];

/// What [`survey`] found.
#[derive(Debug, Default)]
pub struct Survey {
    /// The needs whose program is nowhere.
    pub missing: Vec<&'static Need>,
    /// `sbin` directories not on PATH that hold a needed program: added to the children's PATH.
    pub extra_dirs: Vec<PathBuf>,
}

impl Survey {
    /// The packages to install, each once, in table order.
    #[must_use]
    pub fn packages(&self) -> Vec<&'static str> {
        let mut out: Vec<&'static str> = Vec::new();
        for p in self.missing.iter().flat_map(|n| n.packages) {
            if !out.contains(p) {
                out.push(p);
            }
        }
        out
    }

    /// `command (package), ...` of the missing programs, for a message.
    #[must_use]
    pub fn describe_missing(&self) -> String {
        self.missing
            .iter()
            .map(|n| format!("{} ({}: {})", n.command, n.packages.join(" "), n.why))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Looks for every program `purpose` needs on `path` (a PATH value), then in [`SBIN`].
#[must_use]
pub fn survey(purpose: Purpose, path: &OsStr) -> Survey {
    let mut s = Survey::default();
    for n in NEEDS.iter().filter(|n| n.demo || purpose == Purpose::Test) {
        if survey_one(n.command, path) {
            continue;
        }
        match SBIN
            .iter()
            .map(Path::new)
            .find(|d| is_executable(&d.join(n.command)))
        {
            Some(d) => {
                if !s.extra_dirs.iter().any(|e| e == d) {
                    s.extra_dirs.push(d.to_path_buf());
                }
            }
            None => s.missing.push(n),
        }
    }
    s
}

/// Whether `command` is on `path` (a PATH value).
#[must_use]
pub fn survey_one(command: &str, path: &OsStr) -> bool {
    std::env::split_paths(path).any(|d| is_executable(&d.join(command)))
}

/// `path` with `extra` appended (the children's PATH).
#[must_use]
pub fn extend_path(path: &OsStr, extra: &[PathBuf]) -> OsString {
    let dirs = std::env::split_paths(path).chain(extra.iter().cloned());
    std::env::join_paths(dirs).unwrap_or_else(|_| path.to_os_string())
}

/// Whether `p` is a file with an execute bit.
#[must_use]
pub fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    p.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// How the missing packages get installed.
#[derive(Debug, PartialEq, Eq)]
pub enum Plan {
    /// Nothing is missing.
    Nothing,
    /// `[sudo -n] apt-get update` and `[sudo -n] apt-get install -y ...`.
    Install {
        /// Through `sudo -n` (not root, and `sudo -n true` worked).
        sudo: bool,
        /// The packages.
        packages: Vec<&'static str>,
    },
    /// Nothing can be installed from here: print `line` (when there is apt-get) and stop.
    Stop {
        /// Why not (not root and no working `sudo -n`; no apt-get).
        reason: String,
        /// The one line the user runs, `None` without apt-get.
        line: Option<String>,
    },
}

/// The facts [`plan`] decides on.
#[derive(Debug)]
pub struct Host {
    /// The effective user is root.
    pub root: bool,
    /// `apt-get` was found.
    pub apt: bool,
    /// `sudo -n true` exited 0; else what it said (or that there is no sudo).
    pub sudo: Result<(), String>,
}

/// Decides how `packages` get installed on `host`.
#[must_use]
pub fn plan(packages: Vec<&'static str>, host: &Host) -> Plan {
    if packages.is_empty() {
        return Plan::Nothing;
    }
    if !host.apt {
        return Plan::Stop {
            reason: "this machine has no apt-get: install the programs above with its own \
                     package manager (the names are Debian's)"
                .into(),
            line: None,
        };
    }
    if host.root {
        return Plan::Install {
            sudo: false,
            packages,
        };
    }
    match &host.sudo {
        Ok(()) => Plan::Install {
            sudo: true,
            packages,
        },
        Err(why) => Plan::Stop {
            reason: format!("not root, and `sudo -n` does not work here ({why})"),
            line: Some(install_line(&packages)),
        },
    }
}

/// Arguments of `apt-get` that install `packages` (after an update).
#[must_use]
pub fn install_args(packages: &[&str]) -> Vec<String> {
    [
        "install",
        "-y",
        "-qq",
        "-o",
        "Dpkg::Use-Pty=0",
        "--no-install-recommends",
    ]
    .into_iter()
    .chain(packages.iter().copied())
    .map(str::to_owned)
    .collect()
}

/// The line a user without root or a working `sudo -n` runs: one line, copied as it is.
#[must_use]
pub fn install_line(packages: &[&str]) -> String {
    format!(
        "sudo apt-get update && sudo apt-get install -y --no-install-recommends {}",
        packages.join(" ")
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
