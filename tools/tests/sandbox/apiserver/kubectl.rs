//! The real kubectl (the pinned v1.37.2 of `tests/peers/build.sh`, never one on PATH) against
//! the emulator, through the written kubeconfig.

use super::{Env, WAIT, create, haproxycfg_crd, merge_patch};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::Api;
use serde_json::{Value, json};
use std::process::Stdio;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};

/// Output of one kubectl run.
struct Run {
    ok: bool,
    stdout: String,
    stderr: String,
}

fn command(env: &Env, args: &[&str]) -> tokio::process::Command {
    let mut c = tokio::process::Command::new(haptic_tools::peers::kubectl());
    c.args(args)
        .env("KUBECONFIG", &env.kubeconfig)
        .env("KUBECACHEDIR", env.dir.path().join("cache"))
        .env("HOME", env.dir.path())
        .env_remove("HTTPS_PROXY")
        .env_remove("https_proxy")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    c
}

async fn kubectl(env: &Env, args: &[&str], stdin: Option<&str>) -> Run {
    let mut child = command(env, args).spawn().unwrap();
    let mut input = child.stdin.take().unwrap();
    if let Some(text) = stdin {
        input.write_all(text.as_bytes()).await.unwrap();
    }
    drop(input);
    let out = tokio::time::timeout(WAIT, child.wait_with_output())
        .await
        .expect("kubectl hung")
        .unwrap();
    Run {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

async fn ok(env: &Env, args: &[&str], stdin: Option<&str>) -> String {
    let r = kubectl(env, args, stdin).await;
    assert!(r.ok, "kubectl {args:?} failed: {}\n{}", r.stderr, r.stdout);
    r.stdout
}

async fn get_json(env: &Env, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    serde_json::from_str(&ok(env, &all, None).await).unwrap()
}

/// Reads a watch's output until a line satisfies `done`; returns all lines read.
async fn watch_until(
    child: &mut tokio::process::Child,
    mut done: impl FnMut(&str) -> bool,
) -> Vec<String> {
    let stdout = child.stdout.as_mut().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let mut seen = Vec::new();
    tokio::time::timeout(WAIT, async {
        while let Some(l) = lines.next_line().await.unwrap() {
            let stop = done(&l);
            seen.push(l);
            if stop {
                return;
            }
        }
        panic!("kubectl watch ended early: {seen:?}");
    })
    .await
    .expect("kubectl watch did not show the expected line");
    seen
}

/// The kubectl every test here runs is the one `tests/peers/build.sh` pins (its `KUBE_VERSION`),
/// whatever `kubectl` the machine has first on PATH.
#[tokio::test]
async fn the_kubectl_run_is_the_pinned_build() {
    let script = std::fs::read_to_string(haptic_tools::peers::build_script()).unwrap();
    let pin = script
        .lines()
        .find_map(|l| l.strip_prefix("KUBE_VERSION="))
        .and_then(|v| v.split_whitespace().next())
        .expect("build.sh pins KUBE_VERSION");
    let env = Env::start().await;
    let out = command(&env, &["version", "--client"])
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout.lines().next(),
        Some(format!("Client Version: {pin}").as_str()),
        "{stdout}"
    );
}

#[tokio::test]
async fn kubectl_get_json_and_table_output() {
    let env = Env::start().await;
    let cms: Api<ConfigMap> = Api::namespaced(env.client(true).await, "default");
    create(
        &cms,
        json!({"metadata": {"name": "one", "labels": {"app": "x"}}, "data": {"a": "1", "b": "2"}}),
    )
    .await;

    let one = get_json(&env, &["get", "configmap", "one"]).await;
    assert_eq!(one["data"], json!({"a": "1", "b": "2"}));
    assert_eq!(one["kind"], "ConfigMap");
    let list = get_json(&env, &["get", "cm", "-l", "app=x"]).await;
    assert_eq!(list["items"].as_array().unwrap().len(), 1);
    assert_eq!(list["items"][0]["metadata"]["name"], "one");

    let table = ok(&env, &["get", "cm"], None).await;
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, vec!["NAME", "DATA", "AGE"]);
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(&row[..2], &["one", "2"]);
    let ns = ok(&env, &["get", "namespaces"], None).await;
    assert!(
        ns.lines()
            .any(|l| l.starts_with("default ") && l.contains("Active")),
        "{ns}"
    );
}

const CM_YAML: &str =
    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: from-yaml\ndata:\n  k: v1\n";

#[tokio::test]
async fn kubectl_create_apply_replace_patch_delete() {
    let env = Env::start().await;
    let cms: Api<ConfigMap> = Api::namespaced(env.client(true).await, "default");

    ok(&env, &["create", "-f", "-"], Some(CM_YAML)).await;
    let json_doc = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "from-json"}, "data": {"k": "j"}});
    ok(&env, &["create", "-f", "-"], Some(&json_doc.to_string())).await;
    assert_eq!(cms.get("from-yaml").await.unwrap().data.unwrap()["k"], "v1");
    assert_eq!(cms.get("from-json").await.unwrap().data.unwrap()["k"], "j");
    let again = kubectl(&env, &["create", "-f", "-"], Some(CM_YAML)).await;
    assert!(
        !again.ok && again.stderr.contains("AlreadyExists"),
        "{}",
        again.stderr
    );

    // client-side apply: create, then a strategic-merge update
    let applied =
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\ndata:\n  k: a1\n  gone: x\n";
    ok(&env, &["apply", "-f", "-"], Some(applied)).await;
    ok(
        &env,
        &["apply", "-f", "-"],
        Some(&applied.replace("a1", "a2").replace("  gone: x\n", "")),
    )
    .await;
    let data = cms.get("applied").await.unwrap().data.unwrap();
    assert_eq!(data.get("k").map(String::as_str), Some("a2"));
    assert!(
        !data.contains_key("gone"),
        "client-side apply must delete the dropped key: {data:?}"
    );

    // server-side apply, and a second manager conflicting
    let ssa = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\ndata:\n  k: s1\n";
    ok(&env, &["apply", "--server-side", "-f", "-"], Some(ssa)).await;
    // the second manager's apply, forcing the conflicts or not
    let as_other = |force: bool| {
        let mut args = vec!["apply", "--server-side", "--field-manager", "other"];
        if force {
            args.push("--force-conflicts");
        }
        args.extend(["-f", "-"]);
        args
    };
    let conflict = kubectl(&env, &as_other(false), Some(&ssa.replace("s1", "s2"))).await;
    assert!(
        !conflict.ok && conflict.stderr.contains("conflict"),
        "{}",
        conflict.stderr
    );
    ok(&env, &as_other(true), Some(&ssa.replace("s1", "s2"))).await;
    assert_eq!(cms.get("ssa").await.unwrap().data.unwrap()["k"], "s2");

    // replace with a stale resourceVersion
    let mut live = get_json(&env, &["get", "cm", "from-yaml"]).await;
    merge_patch(&cms, "from-yaml", json!({"data": {"k": "moved"}})).await;
    live["data"]["k"] = json!("stale");
    let stale = kubectl(&env, &["replace", "-f", "-"], Some(&live.to_string())).await;
    assert!(!stale.ok, "stale replace succeeded");
    assert!(
        stale.stderr.contains("Conflict") || stale.stderr.contains("the object has been modified"),
        "{}",
        stale.stderr
    );
    assert_eq!(
        cms.get("from-yaml").await.unwrap().data.unwrap()["k"],
        "moved"
    );
    live["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    live["data"]["k"] = json!("replaced");
    ok(&env, &["replace", "-f", "-"], Some(&live.to_string())).await;
    assert_eq!(
        cms.get("from-yaml").await.unwrap().data.unwrap()["k"],
        "replaced"
    );

    ok(
        &env,
        &[
            "patch",
            "cm",
            "from-json",
            "--type",
            "merge",
            "-p",
            r#"{"data":{"k":"patched","n":"2"}}"#,
        ],
        None,
    )
    .await;
    let data = cms.get("from-json").await.unwrap().data.unwrap();
    assert_eq!((data["k"].as_str(), data["n"].as_str()), ("patched", "2"));

    ok(&env, &["delete", "cm", "from-json"], None).await;
    let err = cms.get("from-json").await.unwrap_err();
    assert!(matches!(err, kube::Error::Api(s) if s.code == 404));
}

#[tokio::test]
async fn kubectl_custom_resources_crd_table_apply_and_watch() {
    let env = Env::start().await;
    ok(
        &env,
        &["apply", "-f", "-"],
        Some(&haproxycfg_crd().to_string()),
    )
    .await;
    ok(
        &env,
        &[
            "wait",
            "--for=condition=Established",
            "crd/haproxycfgs.haproxy-haptic.org",
        ],
        None,
    )
    .await;

    let cr = "apiVersion: haproxy-haptic.org/v1alpha1\nkind: HAProxyCfg\nmetadata:\n  name: cfg\nspec:\n  checksum: abc\n  content: global\n  mode: full\n";
    ok(&env, &["apply", "-f", "-"], Some(cr)).await;
    let got = get_json(&env, &["get", "hpcfg", "cfg"]).await;
    assert_eq!(got["spec"]["checksum"], "abc");
    assert_eq!(got["metadata"]["generation"], 1);

    let table = ok(&env, &["get", "haproxycfgs"], None).await;
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, vec!["NAME", "CHECKSUM", "MODE", "READY", "AGE"]);
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(&row[..3], &["cfg", "abc", "full"]);

    // client-side apply update of a custom kind goes as a merge patch
    ok(&env, &["apply", "-f", "-"], Some(&cr.replace("abc", "def"))).await;
    let got = get_json(&env, &["get", "hpcfg", "cfg"]).await;
    assert_eq!(
        (
            got["spec"]["checksum"].as_str(),
            got["metadata"]["generation"].as_i64()
        ),
        (Some("def"), Some(2))
    );

    // schema violation reported by the server
    let bad = kubectl(
        &env,
        &["apply", "--server-side", "-f", "-"],
        Some(
            &cr.replace("name: cfg", "name: bad")
                .replace("  checksum: abc\n", ""),
        ),
    )
    .await;
    assert!(
        !bad.ok && bad.stderr.contains("spec.checksum: Required value"),
        "{}",
        bad.stderr
    );

    let mut child = command(&env, &["get", "hpcfg", "--watch"]).spawn().unwrap();
    let first = watch_until(&mut child, |l| l.starts_with("cfg ")).await;
    assert!(first[0].starts_with("NAME"), "{first:?}");
    let client = env.client(true).await;
    let ar = kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("haproxy-haptic.org", "v1alpha1", "HAProxyCfg"),
        "haproxycfgs",
    );
    let api: Api<kube::api::DynamicObject> = Api::namespaced_with(client, "default", &ar);
    create(&api, json!({"apiVersion": "haproxy-haptic.org/v1alpha1", "kind": "HAProxyCfg",
        "metadata": {"name": "second"}, "spec": {"checksum": "zz9", "content": "x", "mode": "partial"}}))
    .await;
    let more = watch_until(&mut child, |l| l.starts_with("second ")).await;
    assert!(more.last().unwrap().contains("zz9"), "{more:?}");
    child.kill().await.unwrap();
}

#[tokio::test]
async fn kubectl_watch_pods() {
    let env = Env::start().await;
    let pods: Api<Pod> = Api::namespaced(env.client(true).await, "default");
    create(
        &pods,
        json!({"metadata": {"name": "p0", "labels": {"app": "haproxy"}},
        "spec": {"containers": [{"name": "haproxy", "image": "haproxy:3.2"}]}}),
    )
    .await;

    let mut child = command(&env, &["get", "pods", "--watch", "-l", "app=haproxy"])
        .spawn()
        .unwrap();
    let first = watch_until(&mut child, |l| l.starts_with("p0 ")).await;
    assert!(first.last().unwrap().contains("Pending"), "{first:?}");
    let status = json!({"status": {"phase": "Running", "podIP": "10.77.0.2",
        "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": [{"name": "haproxy", "ready": true, "restartCount": 0, "image": "haproxy:3.2", "imageID": "", "started": true}]}});
    pods.patch_status("p0", &Default::default(), &kube::api::Patch::Merge(status))
        .await
        .unwrap();
    let more = watch_until(&mut child, |l| {
        l.starts_with("p0 ") && l.contains("Running")
    })
    .await;
    assert!(more.last().unwrap().contains("1/1"), "{more:?}");
    child.kill().await.unwrap();
}

/// Unsupported field labels are a 400 as upstream (`field label not supported`); the per-kind
/// labels (pods' `status.phase`, `spec.nodeName`) and `metadata.name` work.
#[tokio::test]
async fn kubectl_field_selectors_only_on_supported_labels() {
    let env = Env::start().await;
    let cms: Api<ConfigMap> = Api::namespaced(env.client(true).await, "default");
    create(
        &cms,
        json!({"metadata": {"name": "one"}, "data": {"x": "y"}}),
    )
    .await;

    let r = kubectl(&env, &["get", "cm", "--field-selector", "data.x=y"], None).await;
    assert!(!r.ok, "{}", r.stdout);
    assert!(
        r.stderr.contains("(BadRequest)") && r.stderr.contains("field label not supported: data.x"),
        "{}",
        r.stderr
    );
    let (code, body, _) = env
        .get("/api/v1/namespaces/default/configmaps?fieldSelector=data.x%3Dy")
        .await;
    assert_eq!((code, body["reason"].as_str()), (400, Some("BadRequest")));
    let (code, _, _) = env
        .get("/api/v1/namespaces/default/configmaps?watch=true&fieldSelector=data.x%3Dy")
        .await;
    assert_eq!(code, 400, "watches too");

    let list = get_json(
        &env,
        &["get", "cm", "--field-selector", "metadata.name=one"],
    )
    .await;
    assert_eq!(list["items"].as_array().map(Vec::len), Some(1));
    let list = get_json(
        &env,
        &[
            "get",
            "pods",
            "--field-selector",
            "status.phase=Running,spec.nodeName!=x",
        ],
    )
    .await;
    assert_eq!(list["items"], json!([]));
    let r = kubectl(
        &env,
        &["get", "secrets", "--field-selector", "type=Opaque"],
        None,
    )
    .await;
    assert!(r.ok, "{}", r.stderr);
}
