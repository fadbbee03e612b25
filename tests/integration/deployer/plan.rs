//! `haptic plan` (issue 28) against the sandbox's Dataplane endpoints over real HAProxy: the
//! real binary plans a server-only change as runtime updates with no reload and a new backend
//! as one transaction with one reload; the deployment that follows makes exactly the planned
//! writes and reloads (the sandbox's request log and reload records); the pods see only `GET`s
//! while the plan runs; a pod that runs the render plans as no change (exit 0).

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use super::harness::*;

/// The frontend of every render here (after the harness's [`HEAD`]).
const FRONTEND: &str = "frontend fe_http
    bind *:80
    default_backend be_app
";

/// A render: fe_http to be_app with `web-1 <server>`, then `extra` sections.
fn render(server: &str, extra: &str) -> String {
    format!("{HEAD}{FRONTEND}backend be_app\n    server web-1 {server}\n{extra}")
}

/// How `haptic plan` finds the pods.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pods {
    /// `--endpoint http://user:password@host:port` per pod.
    Endpoints,
    /// From the API server: `--kubeconfig`, `--pod-selector`, `--dataplane-secret`, as the
    /// controller is started.
    Cluster,
}

/// `haptic plan --render-dir <config>` with the pods as `pods` says [`--json`]: (exit code,
/// stdout). Asserts that the pods, and the API server, received nothing but `GET`s while it
/// ran.
async fn plan(sb: &Fleet, config: &str, tag: &str, json: bool) -> (i32, String) {
    plan_with(sb, config, tag, json, Pods::Endpoints).await
}

async fn plan_with(sb: &Fleet, config: &str, tag: &str, json: bool, pods: Pods) -> (i32, String) {
    let dir = sb.dir().join(format!("plan-{tag}"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("haproxy.cfg"), config).unwrap();
    for p in sb.pods() {
        clear_requests(&p).await;
    }
    sb.clear_api_requests().unwrap();
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_haptic"));
    cmd.arg("plan").arg("--render-dir").arg(Path::new(&dir));
    match pods {
        Pods::Endpoints => {
            for p in sb.pods() {
                cmd.arg("--endpoint").arg(endpoint_arg(&p));
            }
        }
        Pods::Cluster => {
            cmd.arg("--kubeconfig")
                .arg(sb.kubeconfig())
                .args(["--namespace", sb.namespace()])
                .args(["--pod-selector", &sb.selector()])
                .args(["--dataplane-secret", sb.dataplane_secret()]);
        }
    }
    if json {
        cmd.arg("--json");
    }
    let out = cmd.env_clear().output().await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let code = out.status.code().unwrap_or(-1);
    assert!(
        code == 0 || code == 2,
        "{tag}: exit {code}: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let api: Vec<(String, String)> = sb
        .api_requests()
        .unwrap()
        .into_iter()
        .map(|r| (r.method, r.path))
        .collect();
    if pods == Pods::Cluster {
        assert!(
            api.iter().any(|(_, p)| p.ends_with("/pods")),
            "{tag}: the plan listed the pods: {api:?}"
        );
    }
    assert_eq!(
        writes(&api),
        Vec::<(String, String)>::new(),
        "{tag}: the API server saw only reads"
    );
    for p in sb.pods() {
        let reqs = requests(&p).await;
        assert!(!reqs.is_empty(), "{tag}: {}: the plan read the pod", p.name);
        assert_eq!(
            writes(&reqs),
            Vec::<(String, String)>::new(),
            "{tag}: {}: a plan only reads",
            p.name
        );
    }
    (code, stdout)
}

/// `--endpoint` of a pod: its Dataplane URL with the credentials as user info.
fn endpoint_arg(p: &Pod) -> String {
    p.dataplane_url
        .replacen("://", &format!("://{}:{}@", p.username, p.password), 1)
}

fn pods_of(plan: &str) -> Vec<Value> {
    let v: Value = serde_json::from_str(plan).unwrap();
    v["pods"].as_array().unwrap().clone()
}

/// Deploys `config` and returns each pod's (writes, reloads) it made, in pod order.
async fn deploy_and_count(
    h: &Harness,
    sb: &Fleet,
    config: &str,
    tag: &str,
) -> Vec<(Vec<(String, String)>, usize)> {
    let before = sb.reload_counts().await;
    for p in sb.pods() {
        clear_requests(&p).await;
    }
    let r = h.feed_config(config, tag).await;
    h.wait_applied(r, &endpoints(sb)).await;
    let after = sb.reload_counts().await;
    let mut out = Vec::new();
    for (i, p) in sb.pods().iter().enumerate() {
        out.push((writes(&requests(p).await), after[i] - before[i]));
    }
    out
}

crate::e2e::on_peers!(
    Emulator,
    plan_says_what_the_deployment_then_does_and_only_reads => plan_then_deploy,
);

/// The scenario of the module doc on `peers` (the API server's reads come from its request
/// log, or the real one's audit log).
pub async fn plan_then_deploy(peers: haptic_testkit::Peers) {
    let sb = sandbox_on(peers, 2).await;
    // No drift check during the test: every request the pods see is the plan's or the
    // deployment's.
    let (h, eps) = Harness::on(&sb, Knobs::drift(Duration::from_secs(3600))).await;
    h.lead(&eps).await;
    let base = render("127.0.0.1:9101 weight 10", "");
    let r = h.feed_config(&base, "base").await;
    h.wait_applied(r, &endpoints(&sb)).await;

    // A usage error is exit 1, never 2 ("some pod would change").
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_haptic"))
        .args(["plan", "--render-dir", "x", "--no-such-flag"])
        .env_clear()
        .output()
        .await
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The render the pods run: no change, exit 0.
    let (code, text) = plan(&sb, &base, "same", false).await;
    assert_eq!(code, 0, "{text}");
    assert_eq!(text.matches(": no change").count(), 2, "{text}");

    // A server-only change: runtime updates, no reload, on every pod.
    let weight = render("127.0.0.1:9101 weight 50", "");
    let (code, text) = plan(&sb, &weight, "weight-text", false).await;
    assert_eq!(code, 2, "{text}");
    assert_eq!(
        text.matches(": no reload, mode runtime").count(),
        2,
        "{text}"
    );
    let (code, json) = plan(&sb, &weight, "weight", true).await;
    assert_eq!(code, 2, "{json}");
    let planned = pods_of(&json);
    assert_eq!(planned.len(), 2, "{json}");
    for p in &planned {
        assert_eq!(p["reloads"], 0, "{p}");
        assert_eq!(p["mode"], "runtime", "{p}");
        assert_eq!(p["raw_push"], false, "{p}");
        let ops = p["operations"].as_array().unwrap();
        assert_eq!(ops.len(), 1, "{p}");
        assert_eq!(ops[0]["op"], "update_server", "{p}");
        assert_eq!(ops[0]["backend"], "be_app", "{p}");
        assert_eq!(ops[0]["name"], "web-1", "{p}");
    }
    for (i, (writes, reloads)) in deploy_and_count(&h, &sb, &weight, "weight")
        .await
        .into_iter()
        .enumerate()
    {
        assert_eq!(reloads, 0, "pod {i}: planned no reload");
        assert_eq!(
            writes.len(),
            1,
            "pod {i}: one server update planned: {writes:?}"
        );
        assert!(
            writes[0].0 == "PUT" && writes[0].1.ends_with("/backends/be_app/servers/web-1"),
            "pod {i}: {writes:?}"
        );
    }

    // A new backend: one transaction, one reload, on every pod.
    let backend = render(
        "127.0.0.1:9101 weight 50",
        "backend be_new\n    server n1 127.0.0.1:9102\n",
    );
    let (code, json) = plan(&sb, &backend, "backend", true).await;
    assert_eq!(code, 2, "{json}");
    // The same plan with the pods listed from the API server, as the controller finds them; a
    // selected Pod that is not admitted (Pending, no IP) is named as skipped, not planned.
    let (key, value) = sb
        .selector()
        .split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .unwrap();
    let pending = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: haproxy-pending\n  namespace: {}\n  labels:\n    {key}: {value}\nspec:\n  containers:\n  - name: haproxy\n    image: haproxy:3.2\n",
        sb.namespace()
    );
    let (ok, out) = sb.kubectl(&["apply", "-f", "-"], Some(&pending));
    assert!(ok, "{out}");
    let (code, from_cluster) = plan_with(&sb, &backend, "cluster", true, Pods::Cluster).await;
    assert_eq!(code, 2, "{from_cluster}");
    let cluster: Value = serde_json::from_str(&from_cluster).unwrap();
    assert_eq!(
        cluster["skipped"],
        serde_json::json!([format!("{}/haproxy-pending", sb.namespace())]),
        "{from_cluster}"
    );
    let (ok, out) = sb.kubectl(
        &[
            "delete",
            "pod",
            "haproxy-pending",
            "-n",
            sb.namespace(),
            "--grace-period=0",
            "--force",
        ],
        None,
    );
    assert!(ok, "{out}");
    let by_url = |plan: &str| {
        let mut pods: Vec<(String, Value)> = pods_of(plan)
            .into_iter()
            .map(|mut p| {
                let url = p["endpoint"].as_str().unwrap().to_owned();
                p.as_object_mut().unwrap().remove("pod");
                (url, p)
            })
            .collect();
        pods.sort_by(|a, b| a.0.cmp(&b.0));
        pods
    };
    assert_eq!(
        by_url(&from_cluster),
        by_url(&json),
        "cluster and endpoint plans agree"
    );
    for p in &pods_of(&json) {
        assert_eq!(p["reloads"], 1, "{p}");
        assert_eq!(p["mode"], "fine_grained", "{p}");
        assert_eq!(p["raw_push"], false, "{p}");
        let ops = p["operations"].as_array().unwrap();
        assert_eq!(ops.len(), 1, "{p}");
        assert_eq!(ops[0]["op"], "transaction", "{p}");
        let changes: Vec<&str> = ops[0]["changes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap())
            .collect();
        assert!(changes.contains(&"create backend be_new"), "{changes:?}");
        assert!(changes.contains(&"create servers be_new/n1"), "{changes:?}");
    }
    for (i, (writes, reloads)) in deploy_and_count(&h, &sb, &backend, "backend")
        .await
        .into_iter()
        .enumerate()
    {
        assert_eq!(reloads, 1, "pod {i}: planned one reload: {writes:?}");
        assert_eq!(
            config_writes(&writes),
            1,
            "pod {i}: planned one transaction: {writes:?}"
        );
        assert!(
            !writes
                .iter()
                .any(|(_, p)| p.ends_with("/configuration/raw")),
            "pod {i}: no raw push planned: {writes:?}"
        );
    }
    let (code, text) = plan(&sb, &backend, "after", false).await;
    assert_eq!(code, 0, "the deployment did what was planned: {text}");
    h.stop().await;

    // The stopped controller's journal: its newest validated render (the backend one, which
    // the pods run) and its records; nothing to do.
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_haptic"));
    cmd.arg("plan").arg("--journal").arg(journal_path(&sb));
    for p in sb.pods() {
        cmd.arg("--endpoint").arg(endpoint_arg(&p));
    }
    let out = cmd.env_clear().output().await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let want = haptic::core::render::JournaledRender::of(
        &haptic::core::render::RenderContent::new(backend.clone().into_bytes(), Vec::new()),
    )
    .checksum;
    assert!(text.starts_with(&format!("render {want} ")), "{text}");
}
