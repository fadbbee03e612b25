//! `cargo xtask`: the README's two set-up commands, the same on a laptop, a fresh CI machine and
//! here. Each installs or builds what it needs, once (later runs find it), saying what it does
//! and how long each step took, then runs:
//!
//! ```text
//!  cargo xtask demo [ARGS]  1 the Debian packages the demo needs (haproxy, curl, iproute2 ...)
//!                           2 cargo run --release --bin haptic-demo -- ARGS
//!  cargo xtask test [ARGS]  1 the Debian packages the tests need (the demo's, socat, openssl,
//!                             e2fsprogs ...)
//!                           2 Go >= 1.26 on PATH (for step 3)
//!                           3 bash tests/peers/build.sh: kube-apiserver, etcd, helm and the
//!                             pinned kubectl v1.37.2, cached by their pins' hash
//!                           4 cargo test --workspace --all-features ARGS, with HAPTIC_PEERS_BIN
//! ```
//!
//! Packages (`packages::NEEDS`, the one list): as root, `apt-get update` + `apt-get install`;
//! else through `sudo -n` when it works; else the exact line to run is printed and the command
//! stops, within seconds and before any build. Once the set-up ran, plain
//! `cargo test --workspace --all-features` works too (the test kit finds the peers and kubectl
//! through `build.sh --check`).
//!
//! Why an xtask: cargo is the one tool every Rust developer and CI machine already has, and the
//! cargo-xtask convention (a small workspace crate behind a cargo alias, `.cargo/config.toml`)
//! needs nothing else installed first, unlike make, just or a shell script per platform. This
//! crate has no dependencies, so it builds in seconds on a cold `CARGO_HOME`; the product crates
//! do not depend on it and it is not a default member.

mod packages;
mod steps;

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Instant;

use packages::Purpose;
use steps::{Failed, say, step};

const USAGE: &str = "\
usage: cargo xtask demo [ARGS...]  install what the demo needs, then run it
                                   (ARGS go to haptic-demo: --pods N, --renders DIR, --workdir DIR)
       cargo xtask test [ARGS...]  install and build what the tests need, then run every test
                                   (ARGS go to cargo test: a name filter, -- --nocapture, ...)";

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let command = args.next();
    let rest: Vec<OsString> = args.collect();
    let t0 = Instant::now();
    let r = match command.as_ref().and_then(|c| c.to_str()) {
        Some("demo") => demo(rest),
        Some("test") => test(rest),
        Some("-h" | "--help" | "help") => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        other => {
            eprintln!("{USAGE}");
            say(&format!(
                "error: unknown command {:?}: demo or test",
                other.unwrap_or_default()
            ));
            return ExitCode::from(2);
        }
    };
    steps::finish(r, t0)
}

/// `cargo xtask demo`: the packages, then the demo (which needs no peers).
fn demo(args: Vec<OsString>) -> Result<(), Failed> {
    let path = step(1, 2, "the Debian packages the demo needs", || {
        steps::ensure_packages(Purpose::Demo, "cargo xtask demo")
    })?;
    let mut cargo_args: Vec<OsString> = ["run", "--release", "--bin", "haptic-demo", "--"]
        .map(OsString::from)
        .into();
    cargo_args.extend(args);
    step(2, 2, "cargo run --release --bin haptic-demo", || {
        steps::cargo(&cargo_args, &[("PATH", &path)])
    })
}

/// `cargo xtask test`: the packages, Go, the peers and kubectl, then every test.
fn test(args: Vec<OsString>) -> Result<(), Failed> {
    let path = step(1, 4, "the Debian packages the tests need", || {
        steps::ensure_packages(Purpose::Test, "cargo xtask test")
    })?;
    step(2, 4, "Go for the real peers", || {
        steps::ensure_go(&path).map(|v| say(&v))
    })?;
    let bin = step(
        3,
        4,
        "the real peers and kubectl (tests/peers/build.sh; cold: about 15 minutes on 2 cores, \
         then cached)",
        || steps::build_peers(&path),
    )?;
    let mut cargo_args: Vec<OsString> = ["test", "--workspace", "--all-features"]
        .map(OsString::from)
        .into();
    cargo_args.extend(args);
    say(&format!("HAPTIC_PEERS_BIN={}", bin.display()));
    step(4, 4, "cargo test --workspace --all-features", || {
        steps::cargo(
            &cargo_args,
            &[("PATH", &path), ("HAPTIC_PEERS_BIN", bin.as_os_str())],
        )
    })
}
