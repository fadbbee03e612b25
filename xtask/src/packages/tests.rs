use super::*;
use std::collections::BTreeSet;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every `Command::new("name")` of the Rust sources under `dir` (target directories skipped).
fn started_programs(dir: &Path, out: &mut BTreeSet<(String, PathBuf)>) {
    for e in std::fs::read_dir(dir).unwrap().map(Result::unwrap) {
        let p = e.path();
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n != "target") {
                started_programs(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs") {
            let text = std::fs::read_to_string(&p).unwrap();
            for piece in text.split("Command::new(\"").skip(1) {
                let name = piece.split('"').next().unwrap();
                out.insert((name.to_owned(), p.clone()));
            }
        }
    }
}

/// A program started by name anywhere in the workspace's Rust code must be in [`NEEDS`], or a
/// fresh machine runs the tests without it (the table is the only list of packages).
#[test]
fn every_program_the_code_starts_is_listed() {
    let mut started = BTreeSet::new();
    for d in [
        "src",
        "journal",
        "migrations",
        "tools",
        "demo",
        "benches",
        "tests",
    ] {
        started_programs(&root().join(d), &mut started);
    }
    assert!(
        started.iter().any(|(n, _)| n == "haproxy"),
        "the scan found no Command::new(\"haproxy\"): {started:?}"
    );
    let unlisted: Vec<_> = started
        .iter()
        .filter(|(n, _)| !NEEDS.iter().any(|need| need.command == n))
        .collect();
    assert!(
        unlisted.is_empty(),
        "started by name but not in xtask's NEEDS (add the command and its Debian package; \
         kubectl is haptic_tools::peers::kubectl(), never one on PATH): {unlisted:?}"
    );
}

fn fake_bin(dir: &Path, names: &[&str], mode: u32) {
    use std::os::unix::fs::PermissionsExt as _;
    for n in names {
        let p = dir.join(n);
        std::fs::write(&p, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
}

#[test]
fn survey_names_what_is_missing_and_each_package_once() {
    let dir = tempfile::tempdir().unwrap();
    let demo: Vec<&str> = NEEDS.iter().filter(|n| n.demo).map(|n| n.command).collect();
    // every demo program but haproxy and mount; `ip` there but not executable
    let present: Vec<&str> = demo
        .iter()
        .copied()
        .filter(|c| !["haproxy", "mount", "ip"].contains(c))
        .collect();
    fake_bin(dir.path(), &present, 0o755);
    fake_bin(dir.path(), &["ip"], 0o644);
    let s = survey(Purpose::Demo, dir.path().as_os_str());
    let missing: Vec<&str> = s.missing.iter().map(|n| n.command).collect();
    // haproxy, mount and ip are in /usr/sbin or /sbin on this machine: found there instead
    for c in ["haproxy", "mount", "ip"] {
        let in_sbin = SBIN.iter().any(|d| is_executable(&Path::new(d).join(c)));
        assert_eq!(!in_sbin, missing.contains(&c), "{c}: {missing:?}");
    }
    assert!(
        missing
            .iter()
            .all(|c| ["haproxy", "mount", "ip"].contains(c)),
        "{missing:?}"
    );

    // an empty PATH and no sbin hit: the tests need every package, each named once
    let empty = tempfile::tempdir().unwrap();
    let all = survey(Purpose::Test, empty.path().as_os_str());
    let sbin_hits = NEEDS
        .iter()
        .filter(|n| {
            SBIN.iter()
                .any(|d| is_executable(&Path::new(d).join(n.command)))
        })
        .count();
    assert_eq!(all.missing.len() + sbin_hits, NEEDS.len());
    let pkgs = all.packages();
    let unique: BTreeSet<_> = pkgs.iter().collect();
    assert_eq!(unique.len(), pkgs.len(), "{pkgs:?}");
}

#[test]
fn sbin_dirs_are_appended_to_the_childrens_path() {
    let path = extend_path(OsStr::new("/a:/b"), &[PathBuf::from("/usr/sbin")]);
    assert_eq!(path, OsString::from("/a:/b:/usr/sbin"));
}

fn host(root: bool, apt: bool, sudo: Result<(), &str>) -> Host {
    Host {
        root,
        apt,
        sudo: sudo.map_err(str::to_owned),
    }
}

#[test]
fn plan_installs_as_root_or_through_sudo_else_prints_the_line() {
    let pkgs = || vec!["haproxy", "socat"];
    assert_eq!(plan(vec![], &host(false, false, Err("x"))), Plan::Nothing);
    assert_eq!(
        plan(pkgs(), &host(true, true, Err("no sudo"))),
        Plan::Install {
            sudo: false,
            packages: pkgs()
        }
    );
    assert_eq!(
        plan(pkgs(), &host(false, true, Ok(()))),
        Plan::Install {
            sudo: true,
            packages: pkgs()
        }
    );
    let Plan::Stop { reason, line } = plan(
        pkgs(),
        &host(false, true, Err("sudo: a password is required")),
    ) else {
        panic!("not root, no sudo: stop")
    };
    assert!(reason.contains("sudo: a password is required"), "{reason}");
    assert_eq!(
        line.as_deref(),
        Some(
            "sudo apt-get update && sudo apt-get install -y --no-install-recommends haproxy socat"
        )
    );
    let Plan::Stop { line: None, reason } = plan(pkgs(), &host(true, false, Ok(()))) else {
        panic!("no apt-get: stop without a line")
    };
    assert!(reason.contains("no apt-get"), "{reason}");
}
