//! The chart and `deploy/` applied with server-side apply to a real etcd + kube-apiserver on
//! loopback with RBAC (issue 16), the real `helm` and `kubectl`:
//!
//! - `deploy/` and the chart (default and full values) apply: the four CRDs first (until
//!   Established), then the objects; ServiceMonitor, PodMonitor and PrometheusRule after
//!   stand-in CRDs for them (`monitoring-crds.yaml`: prometheus-operator's group, kinds and
//!   names, with structural schemas of the subset of the real fields the chart writes, so the
//!   API server's strict field validation refuses a misspelled or misplaced field; the real
//!   CRDs cannot be fetched here, so this is not prometheus-operator's full validation);
//! - the API server keeps what was applied (no field pruned), and the chart's RBAC grants the
//!   ServiceAccount what the controller calls (`kubectl auth can-i --as`).
//!
//! The API server comes from `crate::peers::KubeApiServer`, a stop-gap of this branch: the
//! test kit's `Peers::Real` (issue 18) starts the same peers; once it is on the integration
//! branch this test takes its API server and admin kubeconfig from there and `crate::peers`
//! goes.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use crate::peers::KubeApiServer;
use crate::runtime::helm::template_text;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `kubectl apply --server-side` of `yaml` (or files); panics with kubectl's output on failure.
fn apply(kube: &KubeApiServer, what: &str, args: &[&str], yaml: Option<&str>) -> String {
    let mut all = vec!["apply", "--server-side", "--field-manager=haptic-test"];
    all.extend_from_slice(args);
    let (ok, out) = kube.kubectl(&all, yaml);
    assert!(ok, "applying {what} failed:\n{out}\n{}", kube.logs());
    out
}

fn get_json(kube: &KubeApiServer, args: &[&str]) -> Value {
    let mut all = vec!["get", "-o", "json"];
    all.extend_from_slice(args);
    let (ok, out) = kube.kubectl(&all, None);
    assert!(ok, "kubectl get {args:?}: {out}");
    serde_json::from_str(&out).unwrap()
}

fn wait_established(kube: &KubeApiServer, crds: &[&str]) {
    let mut args = vec!["wait", "--for=condition=Established", "--timeout=60s"];
    let names: Vec<String> = crds.iter().map(|c| format!("crd/{c}")).collect();
    args.extend(names.iter().map(String::as_str));
    let (ok, out) = kube.kubectl(&args, None);
    assert!(ok, "CRDs not established: {out}");
}

fn can_i(kube: &KubeApiServer, sa: &str, ns: &str, verb: &str, resource: &str) -> bool {
    let (_, out) = kube.kubectl(
        &["auth", "can-i", verb, resource, "-n", ns, "--as", sa],
        None,
    );
    out.trim() == "yes"
}

#[test]
fn deploy_and_the_chart_apply_to_a_real_api_server() {
    let kube = KubeApiServer::start();

    // The CRDs first, then deploy/ (kubectl apply -f deploy/ of an operator, namespace first).
    let out = apply(
        &kube,
        "deploy/crds",
        &["-f", root().join("deploy/crds").to_str().unwrap()],
        None,
    );
    assert_eq!(out.matches("serverside-applied").count(), 4, "{out}");
    wait_established(
        &kube,
        &[
            "haproxycfgs.haproxy-haptic.org",
            "haproxymapfiles.haproxy-haptic.org",
            "haproxygeneralfiles.haproxy-haptic.org",
            "haproxycrtlistfiles.haproxy-haptic.org",
        ],
    );
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("deploy"))
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort_by_key(|p| !p.ends_with("namespace.yaml"));
    for f in &files {
        apply(
            &kube,
            &f.display().to_string(),
            &["-f", f.to_str().unwrap()],
            None,
        );
    }
    let sts = get_json(&kube, &["statefulset", "haptic", "-n", "haptic-system"]);
    let c = &sts["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["startupProbe"]["httpGet"]["path"], "/startupz");
    let sa = "system:serviceaccount:haptic-system:haptic";
    for (verb, resource) in [
        ("list", "pods"),
        ("watch", "secrets"),
        ("update", "haproxycfgs.haproxy-haptic.org/status"),
        ("create", "leases.coordination.k8s.io"),
        ("create", "events.events.k8s.io"),
    ] {
        assert!(
            can_i(&kube, sa, "haptic-system", verb, resource),
            "{sa} cannot {verb} {resource}"
        );
    }
    assert!(
        !can_i(&kube, sa, "default", "list", "pods"),
        "namespaced grants only"
    );

    // The chart with its default values, in another namespace (helm install --create-namespace).
    let (ok, out) = kube.kubectl(&["create", "namespace", "haptic-helm"], None);
    assert!(ok, "{out}");
    let text = template_text("haptic", "haptic-helm", &[]);
    let out = apply(
        &kube,
        "the chart (default values)",
        &["-f", "-"],
        Some(&text),
    );
    assert_eq!(out.matches("serverside-applied").count(), 6, "{out}");

    // The full values: ServiceMonitor, PodMonitor and PrometheusRule need their CRDs first.
    let crds = root().join("tests/integration/real_peers/monitoring-crds.yaml");
    apply(
        &kube,
        "monitoring CRDs",
        &["-f", crds.to_str().unwrap()],
        None,
    );
    wait_established(
        &kube,
        &[
            "servicemonitors.monitoring.coreos.com",
            "podmonitors.monitoring.coreos.com",
            "prometheusrules.monitoring.coreos.com",
        ],
    );
    let (ok, out) = kube.kubectl(&["create", "namespace", "edge"], None);
    assert!(ok, "{out}");
    let full = root().join("deploy/helm/full-values.yaml");
    let text = template_text("edge", "edge", &["-f", full.to_str().unwrap()]);
    // A CRD's REST mapping may lag its Established condition in kubectl's discovery cache.
    let mut out = String::new();
    for attempt in 0..10 {
        let (ok, o) = kube.kubectl(
            &[
                "apply",
                "--server-side",
                "--field-manager=haptic-test",
                "-f",
                "-",
            ],
            Some(&text),
        );
        out = o;
        if ok {
            break;
        }
        assert!(attempt < 9, "applying the full values failed:\n{out}");
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_eq!(out.matches("serverside-applied").count(), 12, "{out}");
    let rule = get_json(&kube, &["prometheusrule", "edge-haptic", "-n", "edge"]);
    let rules = rule["spec"]["groups"][0]["rules"].as_array().unwrap();
    assert!(rules.iter().any(|r| r["alert"] == "HapticLeaderMissing"));
    assert!(
        rules
            .iter()
            .all(|r| r["expr"].is_string() && r["for"].is_string())
    );
    let np = get_json(&kube, &["networkpolicy", "edge-haptic", "-n", "edge"]);
    assert_eq!(np["spec"]["egress"].as_array().unwrap().len(), 4);
    let sts = get_json(&kube, &["statefulset", "edge-haptic", "-n", "edge"]);
    let pod = &sts["spec"]["template"]["spec"];
    assert_eq!(pod["priorityClassName"], "edge-critical");
    assert_eq!(
        sts["spec"]["volumeClaimTemplates"][0]["spec"]["storageClassName"],
        "fast-ssd"
    );
    let sa = "system:serviceaccount:edge:edge-haptic-controller";
    assert!(can_i(&kube, sa, "edge", "watch", "pods"));
    assert!(can_i(&kube, sa, "edge", "get", "secrets"));
}
