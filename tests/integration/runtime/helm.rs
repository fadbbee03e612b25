//! The Helm chart (`deploy/helm/haptic`, issue 16) with the real `helm` (tests/peers/build.sh;
//! see `crate::peers::bin`: a missing binary fails the test): lint for the default and the full
//! values, `deploy/*.yaml` equal to the chart rendered, every `haptic run` setting reachable from
//! the values, every object strict k8s-openapi, and every alert expression naming an exported
//! metric (and, through `crate::telemetry`'s full scrape, matching label values and grouping by
//! labels that scrape carries: [`alerts_select_exported_series`]). Applying the rendered objects
//! to a real kube-apiserver is `crate::real_peers`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use clap::{CommandFactory as _, Parser as _};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use serde_json::Value;

use crate::peers::helm;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn chart() -> String {
    root().join("deploy/helm/haptic").display().to_string()
}

fn full_values() -> String {
    root()
        .join("deploy/helm/full-values.yaml")
        .display()
        .to_string()
}

/// `helm template <release> <chart> -n <ns> <extra>`: the documents, in order.
pub fn template(release: &str, ns: &str, extra: &[&str]) -> Vec<Value> {
    let chart = chart();
    let mut args = vec!["template", release, chart.as_str(), "--namespace", ns];
    args.extend_from_slice(extra);
    let (ok, out, err) = helm(&args);
    assert!(ok, "helm template {extra:?} failed: {err}");
    serde_norway::Deserializer::from_str(&out)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .filter(|v: &Value| !v.is_null())
        .collect()
}

/// The rendered text (for the default values).
pub fn template_text(release: &str, ns: &str, extra: &[&str]) -> String {
    let chart = chart();
    let mut args = vec!["template", release, chart.as_str(), "--namespace", ns];
    args.extend_from_slice(extra);
    let (ok, out, err) = helm(&args);
    assert!(ok, "helm template {extra:?} failed: {err}");
    out
}

/// Deserializes into `T` and back; a field `T` does not know is lost on the way, so the round
/// trip must be lossless (as `deploy.rs` checks `deploy/`).
fn strict<T: serde::de::DeserializeOwned + serde::Serialize>(doc: &Value) -> T {
    let typed: T = serde_path_to_error::deserialize(doc.clone())
        .unwrap_or_else(|e| panic!("{}: {e}", doc["kind"]));
    assert_eq!(
        &serde_json::to_value(&typed).unwrap(),
        doc,
        "{}: fields k8s-openapi does not know",
        doc["kind"]
    );
    typed
}

fn kinds(docs: &[Value]) -> Vec<String> {
    let mut k: Vec<String> = docs
        .iter()
        .map(|d| d["kind"].as_str().unwrap().to_owned())
        .collect();
    k.sort();
    k
}

#[test]
fn helm_lint_passes_for_the_default_and_the_full_values() {
    let chart = chart();
    let full = full_values();
    for extra in [vec![], vec!["-f", full.as_str()]] {
        let mut args = vec!["lint", chart.as_str(), "--strict"];
        args.extend_from_slice(&extra);
        let (ok, out, err) = helm(&args);
        assert!(ok, "helm lint {extra:?}:\n{out}{err}");
        assert!(out.contains("0 chart(s) failed"), "{out}");
    }
}

#[test]
fn deploy_manifests_are_the_chart_rendered() {
    let out = tempfile::tempdir().unwrap();
    let status = std::process::Command::new("bash")
        .arg(root().join("deploy/helm/render-manifests.sh"))
        .arg(out.path())
        .env("HELM", crate::peers::bin("helm"))
        .status()
        .unwrap();
    assert!(status.success(), "render-manifests.sh failed");
    let names = |dir: &Path| -> BTreeSet<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .filter_map(Result::ok)
            .map(|e| e.file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".yaml"))
            .collect()
    };
    let rendered = names(out.path());
    assert_eq!(
        rendered,
        names(&root().join("deploy")),
        "deploy/*.yaml and the chart's templates differ in files"
    );
    for name in &rendered {
        let want = std::fs::read_to_string(out.path().join(name)).unwrap();
        let have = std::fs::read_to_string(root().join("deploy").join(name)).unwrap();
        assert!(
            want == have,
            "deploy/{name} is not the chart rendered: run deploy/helm/render-manifests.sh"
        );
    }
    // The chart's copies of the CRDs and the dashboard are deploy/'s.
    for f in std::fs::read_dir(root().join("deploy/crds")).unwrap() {
        let f = f.unwrap();
        assert_eq!(
            std::fs::read(f.path()).unwrap(),
            std::fs::read(root().join("deploy/helm/haptic/crds").join(f.file_name())).unwrap(),
            "deploy/helm/haptic/crds/{:?} differs from deploy/crds",
            f.file_name()
        );
    }
    assert_eq!(
        std::fs::read(root().join("deploy/grafana/haptic-dashboard.json")).unwrap(),
        std::fs::read(root().join("deploy/helm/haptic/files/grafana-dashboard.json")).unwrap(),
        "the chart's dashboard copy differs from deploy/grafana/haptic-dashboard.json"
    );
}

#[test]
fn the_default_values_render_what_deploy_holds_and_nothing_optional() {
    let docs = template("haptic", "haptic-system", &[]);
    assert_eq!(kinds(&docs), super::deploy::NAMESPACED_KINDS);
    for d in &docs {
        assert_eq!(d["metadata"]["namespace"], "haptic-system", "{}", d["kind"]);
    }
}

/// The `--long` flag of `haptic run` whose env twin is `env`.
fn flag_of(env: &str) -> Option<String> {
    let cmd = haptic::cli::Cli::command();
    let run = cmd.find_subcommand("run").unwrap();
    run.get_arguments()
        .find(|a| a.get_env().is_some_and(|e| e == env))
        .map(|a| a.get_long().unwrap().to_owned())
}

#[test]
fn the_full_values_reach_every_setting_and_every_object() {
    let docs = template("edge", "edge", &["-f", &full_values()]);
    assert_eq!(
        kinds(&docs),
        [
            "ConfigMap",
            "NetworkPolicy",
            "PodDisruptionBudget",
            "PodMonitor",
            "PrometheusRule",
            "Role",
            "RoleBinding",
            "Secret",
            "Service",
            "ServiceAccount",
            "ServiceMonitor",
            "StatefulSet"
        ]
    );
    let mut sts = None;
    for d in &docs {
        assert_eq!(d["metadata"]["namespace"], "edge");
        assert_eq!(d["metadata"]["labels"]["team"], "edge", "{}", d["kind"]);
        match d["kind"].as_str().unwrap() {
            "StatefulSet" => sts = Some(strict::<StatefulSet>(d)),
            "NetworkPolicy" => drop(strict::<NetworkPolicy>(d)),
            "Role" => drop(strict::<Role>(d)),
            "RoleBinding" => drop(strict::<RoleBinding>(d)),
            "Service" => drop(strict::<Service>(d)),
            "ServiceAccount" => drop(strict::<ServiceAccount>(d)),
            "PodDisruptionBudget" => drop(strict::<PodDisruptionBudget>(d)),
            "Secret" => {
                let s: Secret = strict(d);
                let data = s.data.unwrap();
                assert_eq!(data["username"].0, b"admin");
                assert_eq!(data["password"].0, b"change-me");
            }
            "ConfigMap" => {
                let cm: ConfigMap = strict(d);
                let json = &cm.data.unwrap()["haptic.json"];
                let dash: Value = serde_json::from_str(json).unwrap();
                assert_eq!(dash["uid"], "haptic-controller");
            }
            "Namespace" => drop(strict::<Namespace>(d)),
            _ => {}
        }
    }
    let sts = sts.unwrap();
    let spec = sts.spec.unwrap();
    assert_eq!(spec.replicas, Some(2));
    let claim = &spec.volume_claim_templates.as_ref().unwrap()[0];
    let claim_spec = claim.spec.as_ref().unwrap();
    assert_eq!(claim_spec.storage_class_name.as_deref(), Some("fast-ssd"));
    assert_eq!(
        claim_spec
            .resources
            .as_ref()
            .unwrap()
            .requests
            .as_ref()
            .unwrap()["storage"]
            .0,
        "5Gi"
    );
    let pod = spec.template.spec.unwrap();
    assert!(pod.node_selector.is_some() && pod.tolerations.is_some());
    assert!(pod.affinity.is_some() && pod.topology_spread_constraints.is_some());
    assert_eq!(pod.priority_class_name.as_deref(), Some("edge-critical"));
    assert_eq!(
        pod.service_account_name.as_deref(),
        Some("edge-haptic-controller")
    );
    let c = &pod.containers[0];
    assert_eq!(
        c.image.as_deref(),
        Some("registry.example.invalid/haptic:0.1.0-dev-haproxy3.0")
    );
    let labels = spec.template.metadata.unwrap().labels.unwrap();
    assert_eq!(labels["tier"], "control-plane");

    // Every HAPTIC_* variable of `haptic run` is set by these values, except the two that are
    // derived in a pod (the service account instead of a kubeconfig; POD_NAME as the identity).
    let cmd = haptic::cli::Cli::command();
    let all: BTreeSet<String> = cmd
        .find_subcommand("run")
        .unwrap()
        .get_arguments()
        .filter_map(|a| a.get_env().map(|e| e.to_string_lossy().into_owned()))
        .collect();
    let env = c.env.as_deref().unwrap();
    let set: BTreeSet<String> = env
        .iter()
        .map(|e| e.name.clone())
        .filter(|n| n.starts_with("HAPTIC_"))
        .collect();
    let missing: Vec<&String> = all
        .iter()
        .filter(|e| {
            !set.contains(*e) && !["HAPTIC_KUBECONFIG", "HAPTIC_IDENTITY"].contains(&e.as_str())
        })
        .collect();
    assert!(
        missing.is_empty(),
        "settings the chart cannot set: {missing:?}"
    );
    // ... and they parse with the real CLI.
    let mut argv = vec!["haptic".to_owned(), "run".to_owned()];
    for var in env.iter().filter(|v| v.name.starts_with("HAPTIC_")) {
        let value = var.value.clone().unwrap_or_else(|| "edge".to_owned());
        let flag = flag_of(&var.name).unwrap_or_else(|| panic!("{} is no flag", var.name));
        argv.push(format!("--{flag}={value}"));
    }
    let cli = haptic::cli::Cli::try_parse_from(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    let haptic::cli::Command::Run(args) = cli.command else {
        panic!("not run")
    };
    assert_eq!(
        args.pod_selector,
        "app.kubernetes.io/component=loadbalancer,app.kubernetes.io/instance=edge"
    );
    assert_eq!(args.dataplane_port, 5556);
    assert_eq!(args.dataplane_secret, "edge-dataplane");
    assert_eq!(args.lease_name, "edge-leader");
    assert_eq!(args.max_parallel, 20);
    assert_eq!(args.compression_threshold, 524_288);
    assert_eq!(args.metrics_addr.port(), 9191);
    let drain = i64::try_from(args.drain_timeout.as_secs()).unwrap();
    let sleep = c
        .lifecycle
        .as_ref()
        .unwrap()
        .pre_stop
        .as_ref()
        .unwrap()
        .sleep
        .as_ref()
        .unwrap()
        .seconds;
    assert_eq!(sleep, 10);
    assert!(
        pod.termination_grace_period_seconds.unwrap() >= sleep + drain + 10,
        "SIGKILL after the preStop sleep plus the drain, with 10 s to spare"
    );
}

#[test]
fn an_unbuilt_haproxy_version_is_refused_naming_the_choices() {
    let chart = chart();
    let (ok, _, err) = helm(&[
        "template",
        "haptic",
        chart.as_str(),
        "--set",
        "haproxyVersion=3.2",
    ]);
    assert!(!ok);
    assert!(
        err.contains("haproxyVersion \"3.2\" is not built") && err.contains("2.6, 3.0"),
        "{err}"
    );
}

/// Every metric-like identifier starting with `haptic_` in a PromQL expression.
fn metric_names(expr: &str) -> Vec<String> {
    expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|w| w.starts_with("haptic_"))
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_alert_names_only_exported_metrics() {
    let docs = template(
        "haptic",
        "haptic-system",
        &["--set", "monitoring.prometheusRule.enabled=true"],
    );
    let rule = docs
        .iter()
        .find(|d| d["kind"] == "PrometheusRule")
        .expect("a PrometheusRule");
    assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1");
    let exported =
        crate::telemetry::openmetrics::parse_openmetrics(&haptic::runtime::metrics().encode())
            .unwrap();
    let mut alerts = BTreeSet::new();
    for group in rule["spec"]["groups"].as_array().unwrap() {
        for r in group["rules"].as_array().unwrap() {
            let expr = r["expr"].as_str().unwrap();
            let names = metric_names(expr);
            assert!(
                !names.is_empty(),
                "{}: names no haptic metric: {expr}",
                r["alert"]
            );
            for n in names {
                assert!(
                    exported.exports(&n),
                    "{}: {n} is not exported by /metrics: {expr}",
                    r["alert"]
                );
            }
            assert!(r["for"].is_string(), "{} has a `for`", r["alert"]);
            alerts.insert(r["alert"].as_str().unwrap().to_owned());
        }
    }
    // The issue's alerts: fleet pinned, pods not converged, journal queue stuck, publish
    // failures (retried or given up, and refused until an operator acts), leader missing.
    for want in [
        "HapticFleetPinned",
        "HapticPodsNotConverged",
        "HapticJournalQueueStuck",
        "HapticPublishFailing",
        "HapticPublishBlocked",
        "HapticLeaderMissing",
    ] {
        assert!(alerts.contains(want), "no alert {want}: {alerts:?}");
    }
    // The full values' extra rule is checked the same way.
    let docs = template("edge", "edge", &["-f", &full_values()]);
    let rule = docs.iter().find(|d| d["kind"] == "PrometheusRule").unwrap();
    let exprs: Vec<&str> = rule["spec"]["groups"][0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["expr"].as_str().unwrap())
        .collect();
    assert!(exprs.iter().any(|e| e.contains("haptic_journal_readable")));
    for e in exprs {
        for n in metric_names(e) {
            assert!(exported.exports(&n), "{n}: {e}");
        }
    }
}

/// Labels a scrape adds to every series (the target's), which no exposition carries.
const TARGET_LABELS: &[&str] = &[
    "namespace",
    "pod",
    "instance",
    "job",
    "service",
    "container",
];

/// One selector of a PromQL expression: the metric and its `label op "value"` matchers.
#[derive(Debug)]
struct Selector {
    metric: String,
    matchers: Vec<(String, String, String)>,
}

/// Every `haptic_*{...}` selector of `expr` (a bare name has no matchers), and every label named
/// in a `by (...)` or `without (...)` clause.
fn selectors(expr: &str) -> (Vec<Selector>, Vec<String>) {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let b: Vec<char> = expr.chars().collect();
    let (mut out, mut grouped) = (Vec::new(), Vec::new());
    let mut i = 0;
    while i < b.len() {
        if !ident(b[i]) || (i > 0 && ident(b[i - 1])) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && ident(b[i]) {
            i += 1;
        }
        let word: String = b[start..i].iter().collect();
        let mut j = i;
        while j < b.len() && b[j] == ' ' {
            j += 1;
        }
        if (word == "by" || word == "without") && b.get(j) == Some(&'(') {
            let end = j + b[j..]
                .iter()
                .position(|&c| c == ')')
                .expect("`)` closes by (...)");
            let list: String = b[j + 1..end].iter().collect();
            grouped.extend(list.split(',').map(|l| l.trim().to_owned()));
            i = end + 1;
        } else if word.starts_with("haptic_") {
            let mut matchers = Vec::new();
            if b.get(i) == Some(&'{') {
                let end = i + b[i..]
                    .iter()
                    .position(|&c| c == '}')
                    .expect("`}` closes a selector");
                let body: String = b[i + 1..end].iter().collect();
                for m in body.split(',').map(str::trim).filter(|m| !m.is_empty()) {
                    let at = m
                        .find(['=', '!'])
                        .unwrap_or_else(|| panic!("a matcher: {m}"));
                    let (label, rest) = m.split_at(at);
                    let op_len = if rest.starts_with("!=")
                        || rest.starts_with("=~")
                        || rest.starts_with("!~")
                    {
                        2
                    } else {
                        1
                    };
                    let value = rest[op_len..].trim().trim_matches('"');
                    matchers.push((
                        label.trim().to_owned(),
                        rest[..op_len].to_owned(),
                        value.to_owned(),
                    ));
                }
                i = end + 1;
            }
            out.push(Selector {
                metric: word,
                matchers,
            });
        }
    }
    (out, grouped)
}

/// The label pairs of one exposition sample key `name{a="x",b="y"}`.
fn sample_labels(key: &str) -> Vec<(String, String)> {
    key.split_once('{')
        .map(|(_, rest)| rest.trim_end_matches('}'))
        .unwrap_or("")
        .split("\",")
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.trim_matches('"').to_owned()))
        .collect()
}

/// Whether `expr` selects series `exp` (a scrape) has: each `label="v"` matcher other than the
/// scrape's target labels names a label value some sample of that metric carries (an alert on a
/// value never exported would never fire), and each label of a `by (...)` clause is a target
/// label or carried by a metric the expression selects.
///
/// # Errors
/// What does not match, with what the exposition has instead.
fn selects_exported_series(
    expr: &str,
    exp: &crate::telemetry::openmetrics::Exposition,
) -> Result<(), String> {
    let samples_of = |metric: &str| -> Vec<Vec<(String, String)>> {
        exp.samples
            .keys()
            .filter(|k| k.split('{').next() == Some(metric))
            .map(|k| sample_labels(k))
            .collect()
    };
    let (sels, grouped) = selectors(expr);
    let mut carried: BTreeSet<String> = TARGET_LABELS.iter().map(|l| (*l).to_owned()).collect();
    for s in &sels {
        let samples = samples_of(&s.metric);
        if samples.is_empty() {
            return Err(format!("no sample of {} in the scrape", s.metric));
        }
        carried.extend(samples.iter().flatten().map(|(k, _)| k.clone()));
        for (label, op, value) in &s.matchers {
            if TARGET_LABELS.contains(&label.as_str()) {
                continue;
            }
            if !samples.iter().flatten().any(|(k, _)| k == label) {
                return Err(format!(
                    "{} carries no label `{label}`: {samples:?}",
                    s.metric
                ));
            }
            if op == "="
                && !samples
                    .iter()
                    .flatten()
                    .any(|(k, v)| k == label && v == value)
            {
                return Err(format!(
                    "no series {}{{{label}=\"{value}\"}} is exported: {samples:?}",
                    s.metric
                ));
            }
        }
    }
    match grouped.iter().find(|l| !carried.contains(*l)) {
        Some(l) => Err(format!(
            "`by ({l})` names a label no selected series carries"
        )),
        None => Ok(()),
    }
}

/// Every alert of the PrometheusRule (the default alerts and the full values' additional rule)
/// selects series of `exp`, a scrape with every component registered
/// ([`selects_exported_series`]); called by `crate::telemetry`'s full-exposition test.
///
/// # Panics
/// Naming the alert, its expression and what does not match.
pub fn alerts_select_exported_series(exp: &crate::telemetry::openmetrics::Exposition) {
    for docs in [
        template(
            "haptic",
            "haptic-system",
            &["--set", "monitoring.prometheusRule.enabled=true"],
        ),
        template("edge", "edge", &["-f", &full_values()]),
    ] {
        let rule = docs
            .iter()
            .find(|d| d["kind"] == "PrometheusRule")
            .expect("a PrometheusRule");
        for group in rule["spec"]["groups"].as_array().unwrap() {
            for r in group["rules"].as_array().unwrap() {
                let expr = r["expr"].as_str().unwrap();
                if let Err(e) = selects_exported_series(expr, exp) {
                    panic!("{}: {e}\n{expr}", r["alert"]);
                }
            }
        }
    }
}

#[test]
fn the_alert_series_checker_rejects_what_it_should() {
    let exp = crate::telemetry::openmetrics::parse_openmetrics(
        "# TYPE haptic_retries counter\nhaptic_retries_total{component=\"config-publisher\"} 0\n\
         # TYPE haptic_fleet_pinned gauge\nhaptic_fleet_pinned 0\n# EOF\n",
    )
    .unwrap();
    let ok = [
        r#"sum by (namespace) (rate(haptic_retries_total{namespace="x", component="config-publisher"}[5m])) > 0"#,
        r#"max by (namespace, pod) (haptic_fleet_pinned{namespace="x"}) == 1"#,
        r#"sum by (component) (haptic_retries_total{component!="other"})"#,
    ];
    for e in ok {
        assert_eq!(selects_exported_series(e, &exp), Ok(()), "{e}");
    }
    let bad = [
        // A label value the exposition never carries (the alert could never fire).
        r#"rate(haptic_retries_total{component="publisher"}[5m]) > 0"#,
        // A label the metric does not have.
        r#"haptic_fleet_pinned{queue="publish"} == 1"#,
        // Grouping by a label nothing selected carries.
        r#"max by (queue) (haptic_fleet_pinned) > 0"#,
        // A metric with no sample at all.
        r#"haptic_managed_pods > 0"#,
    ];
    for e in bad {
        assert!(selects_exported_series(e, &exp).is_err(), "accepted: {e}");
    }
}
