//! `deploy/` manifests parse strictly with k8s-openapi types and say what issue 6 asks for; the
//! StatefulSet runs the image the `Dockerfile` builds with flags the real CLI accepts; the
//! `Dockerfile` copies files that exist and `.dockerignore` keeps. The Role's grants are checked
//! against a real run in `tests/integration/e2e/rbac.rs`.

use std::path::{Path, PathBuf};

use clap::{CommandFactory as _, Parser as _};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Namespace, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Deserializes into `T` and back; anything `T` does not know (a misspelled or misplaced field)
/// is lost on the way, so the round trip must be lossless.
fn strict<T: DeserializeOwned + Serialize>(file: &Path, doc: &Value) -> T {
    let typed: T = serde_path_to_error::deserialize(doc.clone())
        .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let back = serde_json::to_value(&typed).unwrap();
    assert_eq!(
        &back,
        doc,
        "{}: fields k8s-openapi does not know",
        file.display()
    );
    typed
}

fn manifests() -> Vec<(PathBuf, Value)> {
    let mut out = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("deploy"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for doc in serde_norway::Deserializer::from_str(&text) {
            let value: Value = serde::Deserialize::deserialize(doc)
                .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            if !value.is_null() {
                out.push((file.clone(), value));
            }
        }
    }
    out
}

/// The kinds `deploy/` holds besides the Namespace, sorted: what the Helm chart's default
/// values render too (`runtime::helm`).
pub(crate) const NAMESPACED_KINDS: [&str; 6] = [
    "PodDisruptionBudget",
    "Role",
    "RoleBinding",
    "Service",
    "ServiceAccount",
    "StatefulSet",
];

#[test]
fn every_manifest_parses_strictly_and_says_what_the_issue_asks() {
    let mut kinds = Vec::new();
    let mut sts = None;
    let mut role = None;
    let mut binding = None;
    for (file, doc) in manifests() {
        let kind = doc["kind"].as_str().unwrap_or_default().to_owned();
        match kind.as_str() {
            "StatefulSet" => sts = Some(strict::<StatefulSet>(&file, &doc)),
            "Role" => role = Some(strict::<Role>(&file, &doc)),
            "RoleBinding" => binding = Some(strict::<RoleBinding>(&file, &doc)),
            "ServiceAccount" => drop(strict::<ServiceAccount>(&file, &doc)),
            "Service" => drop(strict::<Service>(&file, &doc)),
            "PodDisruptionBudget" => drop(strict::<PodDisruptionBudget>(&file, &doc)),
            "Namespace" => drop(strict::<Namespace>(&file, &doc)),
            other => panic!("{}: unexpected kind {other}", file.display()),
        }
        kinds.push(kind);
    }
    kinds.sort();
    assert_eq!(kinds[0], "Namespace");
    assert_eq!(kinds[1..], NAMESPACED_KINDS);

    let pod = sts.unwrap().spec.unwrap().template.spec.unwrap();

    // The grants themselves are checked against a real run in tests/integration/e2e/rbac.rs;
    // here: the binding ties that Role to the ServiceAccount the pod runs as.
    let role = role.unwrap();
    let binding = binding.unwrap();
    assert_eq!(binding.role_ref.kind, "Role");
    assert_eq!(Some(&binding.role_ref.name), role.metadata.name.as_ref());
    let subject = &binding.subjects.unwrap()[0];
    assert_eq!(subject.kind, "ServiceAccount");
    assert_eq!(pod.service_account_name.as_ref(), Some(&subject.name));
    assert_eq!(subject.namespace, role.metadata.namespace);
}

/// The StatefulSet, strictly parsed.
fn statefulset() -> StatefulSet {
    let (file, doc) = manifests()
        .into_iter()
        .find(|(_, d)| d["kind"] == "StatefulSet")
        .unwrap();
    strict(&file, &doc)
}

/// The Dockerfile's instructions (continuation lines joined, comments dropped), per stage;
/// the global `ARG`s before the first `FROM` are [`dockerfile_global_args`].
fn dockerfile_stages() -> Vec<Vec<String>> {
    dockerfile_instructions()
        .into_iter()
        .skip_while(|i| !i.starts_with("FROM "))
        .fold(Vec::new(), |mut stages: Vec<Vec<String>>, i| {
            if i.starts_with("FROM ") {
                stages.push(Vec::new());
            }
            if let Some(stage) = stages.last_mut() {
                stage.push(i);
            }
            stages
        })
}

/// The `ARG name=default` instructions before the first `FROM`.
fn dockerfile_global_args() -> Vec<(String, String)> {
    dockerfile_instructions()
        .into_iter()
        .take_while(|i| !i.starts_with("FROM "))
        .filter_map(|i| {
            let arg = i.strip_prefix("ARG ")?;
            let (name, default) = arg.split_once('=').unwrap_or((arg, ""));
            Some((name.trim().to_owned(), default.trim().to_owned()))
        })
        .collect()
}

/// Every instruction of the Dockerfile, continuation lines joined, comments dropped.
fn dockerfile_instructions() -> Vec<String> {
    let text = std::fs::read_to_string(root().join("Dockerfile")).unwrap();
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with('#') || (line.is_empty() && current.is_empty()) {
            continue;
        }
        if let Some(head) = line.strip_suffix('\\') {
            current.push_str(head);
            current.push(' ');
            continue;
        }
        current.push_str(line);
        out.push(std::mem::take(&mut current));
    }
    out
}

/// The `.dockerignore` patterns (plain names anchored at the root, or `**/name`).
fn dockerignore() -> Vec<String> {
    std::fs::read_to_string(root().join(".dockerignore"))
        .expect(".dockerignore exists")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

/// Whether `path` (relative to the context root) is excluded by one of `patterns`.
fn ignored(patterns: &[String], path: &Path) -> bool {
    patterns.iter().any(|p| {
        assert!(!p.starts_with('!'), "exceptions are not used: {p}");
        if let Some(tail) = p.strip_prefix("**/") {
            if let Some(ext) = tail.strip_prefix("*.") {
                return path.extension().is_some_and(|e| e == ext);
            }
            assert!(!tail.contains('*'), "unsupported pattern {p}");
            return path.components().any(|c| c.as_os_str() == tail);
        }
        assert!(!p.contains('*'), "unsupported pattern {p}");
        path.starts_with(p.trim_start_matches('/'))
    })
}

/// Copies the context path `rel` into `to`, skipping what `.dockerignore` excludes.
fn copy_context(patterns: &[String], rel: &Path, to: &Path) -> usize {
    let from = root().join(rel);
    if ignored(patterns, rel) {
        return 0;
    }
    if from.is_dir() {
        std::fs::create_dir_all(to.join(rel)).unwrap();
        let mut n = 0;
        for e in std::fs::read_dir(&from).unwrap() {
            n += copy_context(patterns, &rel.join(e.unwrap().file_name()), to);
        }
        n
    } else {
        std::fs::copy(&from, to.join(rel)).unwrap();
        1
    }
}

/// This machine's target triple (`rustc -vV`, line `host:`).
fn host_triple() -> String {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let out = std::process::Command::new(rustc)
        .arg("-vV")
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .expect("rustc -vV names the host")
        .trim()
        .to_owned()
}

#[test]
fn dockerfile_copies_files_that_exist_and_builds_a_loadable_workspace() {
    let stages = dockerfile_stages();
    assert_eq!(stages.len(), 2, "multi-stage: build, runtime");
    let patterns = dockerignore();
    for must in [".git", "**/target"] {
        assert!(
            patterns.iter().any(|p| p == must),
            ".dockerignore has {must}"
        );
    }
    let context = tempfile::tempdir().unwrap();
    let mut copied = 0;
    for line in &stages[0] {
        let Some(rest) = line.strip_prefix("COPY ") else {
            continue;
        };
        assert!(
            !rest.starts_with("--from="),
            "the build stage copies from the context"
        );
        let parts: Vec<&str> = rest.split_whitespace().collect();
        for src in &parts[..parts.len() - 1] {
            let rel = Path::new(src);
            assert!(root().join(rel).exists(), "Dockerfile copies missing {src}");
            assert!(!ignored(&patterns, rel), ".dockerignore excludes {src}");
            if let Some(parent) = rel.parent() {
                std::fs::create_dir_all(context.path().join(parent)).unwrap();
            }
            copied += copy_context(&patterns, rel, context.path());
        }
    }
    assert!(copied >= 5, "{copied} files copied");
    // What the build stage sees is a workspace Cargo can load with the lock file it builds
    // `--locked` with (`cargo metadata` resolves every member), and whose manifests are complete
    // (every declared target present). Both run `--offline` on what this machine's build
    // downloaded: the resolve is filtered to the host platform (a fresh cargo cache holds no
    // Windows-only crates, so an unfiltered resolve would need the network), and the manifest
    // check stops at the first compiler call (a `RUSTC` that does not exist), after Cargo loaded
    // every manifest and its targets but before it compiled or fetched anything.
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let manifest = context.path().join("Cargo.toml");
    let host = host_triple();
    let out = std::process::Command::new(&cargo)
        .args(["metadata", "--offline", "--locked", "--format-version", "1"])
        .args(["--filter-platform", &host])
        .arg("--manifest-path")
        .arg(&manifest)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cargo cannot resolve the build context: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let no_rustc = context.path().join("no-such-rustc");
    let out = std::process::Command::new(&cargo)
        .args(["check", "--offline", "--locked", "-p", "haptic"])
        .arg("--manifest-path")
        .arg(&manifest)
        .arg("--target-dir")
        .arg(context.path().join("target"))
        .env("RUSTC", &no_rustc)
        .env_remove("RUSTC_WRAPPER")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("could not execute process") && stderr.contains("no-such-rustc"),
        "cargo cannot load the build context's manifests: {stderr}"
    );
    let build = stages[0].join("\n");
    assert!(build.contains("cargo build --release --locked -p haptic"));
}

#[test]
fn the_statefulset_runs_the_image_as_the_dockerfile_builds_it() {
    let stages = dockerfile_stages();
    let runtime = stages.last().unwrap();
    let find = |prefix: &str| -> String {
        runtime
            .iter()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("runtime stage has {prefix}"))
            .trim()
            .to_owned()
    };
    let run = find("RUN ");
    assert!(
        run.contains("apt-get install -y --no-install-recommends haproxy"),
        "haproxy in the runtime stage for `haproxy -c`"
    );
    let user = find("USER ");
    let (uid, gid) = user.split_once(':').unwrap();
    let (uid, gid): (i64, i64) = (uid.parse().unwrap(), gid.parse().unwrap());
    assert!(uid != 0 && run.contains(&format!("--uid {uid}")));
    assert!(run.contains(&format!("--gid {gid}")));
    let entrypoint: Vec<String> = serde_json::from_str(&find("ENTRYPOINT ")).unwrap();
    let cmd: Vec<String> = serde_json::from_str(&find("CMD ")).unwrap();
    assert_eq!(entrypoint, ["/usr/local/bin/haptic"]);
    assert_eq!(cmd, ["run"]);
    assert!(find("COPY ").ends_with(&format!(" {}", entrypoint[0])));
    let expose: u16 = find("EXPOSE ").parse().unwrap();

    let sts = statefulset().spec.unwrap();
    assert_eq!(
        sts.replicas,
        Some(1),
        "one replica by default (DESIGN.md J9)"
    );
    let pod = sts.template.spec.unwrap();
    let c = &pod.containers[0];
    // The default image validates with HAProxy 2.6 (the Dockerfile's default suite, bookworm).
    assert_eq!(
        c.image.as_deref(),
        Some(format!("haptic:{}-haproxy2.6", env!("CARGO_PKG_VERSION")).as_str())
    );
    assert!(
        std::fs::read_to_string(root().join("Dockerfile"))
            .unwrap()
            .contains(c.image.as_deref().unwrap()),
        "the Dockerfile names the image"
    );
    // `haptic run`: the image's entrypoint with `run`.
    assert_eq!(c.command, None);
    assert_eq!(c.args.as_deref(), Some(&["run".to_owned()][..]));
    let sc = pod.security_context.unwrap();
    assert_eq!(sc.run_as_non_root, Some(true));
    assert_eq!((sc.run_as_user, sc.run_as_group), (Some(uid), Some(gid)));
    assert_eq!(sc.fs_group, Some(gid), "the journal volume's group");

    // Every HAPTIC_* variable is a flag of `haptic run`, and the whole set parses with the real
    // CLI (values from the downward API get a stand-in).
    let run_cmd = haptic::cli::Cli::command();
    let run_cmd = run_cmd.find_subcommand("run").unwrap();
    let mut argv = vec!["haptic".to_owned(), "run".to_owned()];
    let mut pod_name_from_api = false;
    for var in c.env.as_deref().unwrap_or_default() {
        let value = match (&var.value, &var.value_from) {
            (Some(v), None) => v.clone(),
            (None, Some(from)) => {
                let path = &from.field_ref.as_ref().unwrap().field_path;
                if var.name == "POD_NAME" {
                    assert_eq!(path, "metadata.name");
                    pod_name_from_api = true;
                }
                format!("from-{path}")
            }
            _ => panic!("{}: a value or a field reference", var.name),
        };
        if !var.name.starts_with("HAPTIC_") {
            assert!(
                ["POD_NAME", "TMPDIR"].contains(&var.name.as_str()),
                "{}",
                var.name
            );
            continue;
        }
        let arg = run_cmd
            .get_arguments()
            .find(|a| a.get_env().is_some_and(|e| e == var.name.as_str()))
            .unwrap_or_else(|| panic!("{} is no flag of `haptic run`", var.name));
        argv.push(format!("--{}={value}", arg.get_long().unwrap()));
    }
    assert!(
        pod_name_from_api,
        "POD_NAME (the Lease identity) from the downward API"
    );
    let cli = haptic::cli::Cli::try_parse_from(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    let haptic::cli::Command::Run(args) = cli.command else {
        panic!("not `run`")
    };
    assert_eq!(args.identity, None, "the identity is POD_NAME");
    assert_eq!(args.source, haptic::cli::SourceKind::Configmap);
    assert!(args.configmap.is_some());

    // The journal on the volumeClaimTemplate mount.
    let claim = &sts.volume_claim_templates.unwrap()[0];
    let mount = c
        .volume_mounts
        .as_deref()
        .unwrap()
        .iter()
        .find(|m| Some(&m.name) == claim.metadata.name.as_ref())
        .expect("the claim is mounted");
    assert_eq!(args.journal.parent(), Some(Path::new(&mount.mount_path)));

    // Health and metrics on the named port the Service targets.
    let port = &c.ports.as_deref().unwrap()[0];
    assert_eq!(port.name.as_deref(), Some("metrics"));
    assert_eq!(i32::from(args.metrics_addr.port()), port.container_port);
    assert_eq!(args.metrics_addr.port(), expose);
    for (probe, path) in [
        (&c.liveness_probe, "/healthz"),
        (&c.readiness_probe, "/readyz"),
        (&c.startup_probe, "/startupz"),
    ] {
        let get = probe.as_ref().unwrap().http_get.as_ref().unwrap();
        assert_eq!(get.path.as_deref(), Some(path));
        assert_eq!(get.port, IntOrString::String("metrics".into()));
    }

    // SIGKILL comes after the preStop sleep plus the drain, with at least 10 s to spare.
    let pre_stop = c.lifecycle.as_ref().unwrap().pre_stop.as_ref().unwrap();
    let sleep = pre_stop.sleep.as_ref().map_or(0, |s| s.seconds);
    let grace = pod.termination_grace_period_seconds.unwrap();
    let drain = i64::try_from(args.drain_timeout.as_secs()).unwrap();
    assert!(
        grace >= sleep + drain + 10,
        "grace {grace}s, preStop {sleep}s, drain {drain}s"
    );
}

/// The slowest reopen of a 1 GiB journal after a kill -9 the README's "Performance" section
/// reports (every row of haptic-bench figure 4.2, e.g. `| 4.2 reopen after kill -9 ... | 4.62 s
/// (repair ...`), in seconds.
fn measured_reopen_secs() -> f64 {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let figures: Vec<f64> = readme
        .lines()
        .filter(|l| l.starts_with("| 4.2 reopen after kill -9"))
        .filter_map(|l| {
            let measured = l.split('|').nth(2)?.trim();
            measured.split(" s").next()?.trim().parse().ok()
        })
        .collect();
    assert!(
        !figures.is_empty(),
        "README's Performance section has no figure 4.2 row"
    );
    figures.into_iter().fold(0.0, f64::max)
}

/// Issue 16: the startupProbe's budget covers the measured reopen of a large journal after a
/// kill -9 (haptic-bench figure 4.2, read from the README) at least 15 times over, so a slow
/// open is not a restart loop; liveness starts only after it.
#[test]
fn the_startup_probe_covers_a_slow_journal_open() {
    let reopen = measured_reopen_secs();
    let sts = statefulset().spec.unwrap();
    let c = &sts.template.spec.unwrap().containers[0];
    let startup = c.startup_probe.as_ref().expect("a startupProbe");
    let budget = startup.period_seconds.unwrap() * startup.failure_threshold.unwrap();
    assert!(
        f64::from(budget) >= 15.0 * reopen,
        "startup budget {budget}s is under 15x the measured 1 GiB reopen ({reopen} s)"
    );
    assert!(
        budget <= 600,
        "startup budget {budget}s hides a hung start for too long"
    );
    let liveness = c.liveness_probe.as_ref().unwrap();
    assert!(
        liveness.period_seconds.unwrap() * liveness.failure_threshold.unwrap() < budget,
        "the startupProbe is what covers the open, not a long liveness budget"
    );
}

/// Issue 16: one image per HAProxy release line. The Dockerfile takes the Debian suite as a
/// build argument (both stages), its table maps suites to HAProxy versions and image tags as the
/// version check (`core::version`) and the chart's `haproxyVersion` do, and the default suite is
/// the default image's.
#[test]
fn the_dockerfile_builds_one_image_per_haproxy_release_line() {
    use haptic::core::version::HaproxyVersion;
    let args = dockerfile_global_args();
    let suite_default = args
        .iter()
        .find(|(n, _)| n == "DEBIAN_SUITE")
        .map(|(_, d)| d.clone())
        .expect("ARG DEBIAN_SUITE=<default> before the first FROM");
    assert_eq!(suite_default, "bookworm");
    let stages = dockerfile_stages();
    for stage in &stages {
        assert!(
            stage[0].contains("${DEBIAN_SUITE}"),
            "every stage's base follows the suite: {}",
            stage[0]
        );
    }
    // The table in the Dockerfile's header: `#   <suite>  <haproxy>  <tag>`.
    let text = std::fs::read_to_string(root().join("Dockerfile")).unwrap();
    let version = env!("CARGO_PKG_VERSION");
    let rows: Vec<(String, String, String)> = text
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.trim_start_matches('#').split_whitespace().collect();
            (w.len() >= 3 && w[2].starts_with("haptic:"))
                .then(|| (w[0].to_owned(), w[1].to_owned(), w[2].to_owned()))
        })
        .collect();
    assert!(rows.len() >= 2, "the suite table: {rows:?}");
    let mut lines = Vec::new();
    for (suite, haproxy, tag) in &rows {
        let v = HaproxyVersion::parse(haproxy).unwrap();
        assert_eq!(
            v.debian_suite(),
            Some(suite.as_str()),
            "{suite} ships {haproxy}"
        );
        assert_eq!(tag, &format!("haptic:{version}-haproxy{haproxy}"));
        assert!(
            text.contains(&format!("--build-arg DEBIAN_SUITE={suite} -t {tag}")),
            "the build command for {suite}"
        );
        lines.push(haproxy.clone());
    }
    // The chart builds image tags for exactly these versions and defaults to the default suite's.
    let helpers =
        std::fs::read_to_string(root().join("deploy/helm/haptic/templates/_helpers.tpl")).unwrap();
    let supported = format!(
        "list {}",
        lines
            .iter()
            .map(|l| format!("{l:?}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    assert!(
        helpers.contains(&supported),
        "_helpers.tpl has `{supported}`"
    );
    let values: serde_json::Value = serde_norway::from_str(
        &std::fs::read_to_string(root().join("deploy/helm/haptic/values.yaml")).unwrap(),
    )
    .unwrap();
    let default_line = &rows.iter().find(|(s, _, _)| *s == suite_default).unwrap().1;
    assert_eq!(
        values["haproxyVersion"].as_str(),
        Some(default_line.as_str())
    );
}
