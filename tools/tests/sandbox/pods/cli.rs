//! The `haptic-sandbox` binary: `up` registers its pods in the emulator, falls back to loopback
//! mode without root (and says why when forced), and `demo` walks the render corpus.

use haptic_tools::sandbox::pods::netns;

use super::*;

#[tokio::test]
async fn pods_non_root_fallback_runs_in_loopback_mode() {
    if !nix_is_root() {
        return; // needs root to switch to an unprivileged user
    }
    use std::os::unix::fs::PermissionsExt as _;
    // Nobody must reach the binary wherever the checkout lives (a `mktemp -d` is 0700): run a
    // copy from a directory it can traverse,
    let tools = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(tools.path(), std::fs::Permissions::from_mode(0o755))
        .expect("chmod 0755");
    let bin = tools.path().join("haptic-sandbox");
    std::fs::copy(env!("CARGO_BIN_EXE_haptic-sandbox"), &bin).expect("copy the sandbox binary");
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).expect("chmod 0755");
    let (mut child, _reap, up, err_log) = spawn_up(
        &bin,
        &[
            "up",
            "--pods",
            "1",
            "--no-apiserver",
            "--json",
            "--reload-delay-ms",
            "200",
        ],
        Some(&[
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
        ]),
        true,
    );
    let err_log = err_log.expect("stderr");
    assert_eq!(up["mode"], "loopback");
    let p = &up["pods"][0];
    let pod = PodInfo {
        name: p["name"].as_str().expect("name").into(),
        pod_ip: p["pod_ip"].as_str().expect("ip").parse().expect("ip"),
        dataplane_port: 5555,
        dataplane_url: p["dataplane_url"].as_str().expect("url").into(),
        traffic_address: p["traffic_address"]
            .as_str()
            .expect("t")
            .parse()
            .expect("ip"),
        port_offset: p["port_offset"].as_u64().expect("offset") as u16,
        echo_address: p["echo_address"]
            .as_str()
            .expect("e")
            .parse()
            .expect("addr"),
        netns: None,
        dir: PathBuf::new(),
        stand_in: false,
    };
    assert!(pod.pod_ip.is_loopback());
    let dp = Dp::new(&pod);
    let r = dp
        .push(&render("01-basic", "haproxy.cfg"), "&force_reload=true")
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(curl(&pod, "http", 80, None, "/"), "render 01-basic");
    // paths inside expressions resolve to the pod's own files
    let r = dp
        .upload(
            "storage/maps",
            "hosts.map",
            render("02-maps", "maps/hosts.map").into_bytes(),
        )
        .await;
    assert_eq!(r.status, 201);
    let r = dp
        .push(&render("02-maps", "haproxy.cfg"), "&force_reload=true")
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(
        curl(&pod, "http", 80, Some("shop.haptic.test"), "/"),
        "render 02-maps shop-v1"
    );
    // outbound targets are refused, naming the line
    let v = dp.version().await;
    let r = dp
        .push(&read(&format!("{CORPUS}/servers/enabled-real.cfg")), "")
        .await;
    assert_eq!(r.status, 400);
    let msg = r.message();
    assert!(
        msg.contains("refused") && msg.contains("line ") && msg.contains("server "),
        "{msg}"
    );
    assert_eq!(dp.version().await, v);

    let pids = descendants(child.id());
    assert!(
        pids.len() >= 3,
        "sandbox, haproxy master and worker: {pids:?}"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("SIGTERM");
    let mut exited = None;
    for _ in 0..300 {
        if let Some(st) = child.try_wait().expect("wait") {
            exited = Some(st);
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let st = exited.expect("haptic-sandbox exits within 15 s of SIGTERM");
    assert!(st.success(), "{st}");
    let log = err_log.join().expect("stderr");
    assert!(log.contains("LOOPBACK MODE"), "{log}");
    for pid in pids {
        assert!(!netns::pid_alive(pid), "pid {pid} left behind");
    }
}

/// `haptic-sandbox up --json` registers its pods and the Dataplane Secret in the emulator.
#[tokio::test]
async fn pods_up_registers_pods_and_secret_in_the_emulator() {
    let args = [
        "up",
        "--pods",
        "2",
        "--json",
        "--dataplane-port",
        "5556",
        "--reload-delay-ms",
        "200",
    ];
    let (mut child, _reap, up, _) = spawn_up(sandbox_bin(), &args, None, false);
    let pid = child.id();
    let result = async {
        let kubeconfig = up["kubeconfig"].as_str().expect("kubeconfig");
        let ns = up["namespace"].as_str().expect("ns");
        let kc = kube::config::Kubeconfig::read_from(kubeconfig).expect("read kubeconfig");
        let config =
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .expect("config");
        let client = kube::Client::try_from(config).expect("client");
        let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
            kube::Api::namespaced(client.clone(), ns);
        let list = pods
            .list(
                &kube::api::ListParams::default().labels(up["pod_selector"].as_str().expect("sel")),
            )
            .await
            .expect("list pods");
        assert_eq!(list.items.len(), 2);
        for p in &list.items {
            let st = p.status.as_ref().expect("status");
            assert_eq!(st.phase.as_deref(), Some("Running"));
            let ip = st.pod_ip.clone().expect("podIP");
            assert!(
                up["pods"]
                    .as_array()
                    .expect("pods")
                    .iter()
                    .any(|x| x["pod_ip"] == ip)
            );
            assert!(
                st.conditions
                    .iter()
                    .flatten()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
            );
            let cs = st.container_statuses.clone().unwrap_or_default();
            assert_eq!(cs.len(), 2, "haproxy and dataplane container statuses");
            assert!(
                cs.iter()
                    .all(|c| c.ready && c.state.as_ref().is_some_and(|s| s.running.is_some())),
                "{cs:?}"
            );
            let ann = p.metadata.annotations.clone().unwrap_or_default();
            assert_eq!(
                ann.get("haproxy-haptic.org/dataplane-port")
                    .map(String::as_str),
                Some("5556")
            );
        }
        // kubectl's table shows READY 2/2 (from containerStatuses, like the server-side printer)
        let out = std::process::Command::new(haptic_tools::peers::kubectl())
            .args([
                "--kubeconfig",
                kubeconfig,
                "-n",
                ns,
                "get",
                "pods",
                "--no-headers",
            ])
            .output()
            .expect("kubectl");
        let table = String::from_utf8_lossy(&out.stdout).to_string();
        assert_eq!(table.lines().count(), 2, "{table}");
        for line in table.lines() {
            let cols: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(cols.get(1..3), Some(&["2/2", "Running"][..]), "{table}");
        }
        let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
            kube::Api::namespaced(client, ns);
        let s = secrets
            .get(up["dataplane_secret"].as_str().expect("secret"))
            .await
            .expect("secret");
        let data = s.data.expect("data");
        assert_eq!(data["username"].0, b"admin");
        assert_eq!(data["password"].0, b"haptic-sandbox");
    }
    .await;
    let pids = descendants(pid);
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    for _ in 0..300 {
        if child.try_wait().expect("wait").is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    for p in pids {
        assert!(!netns::pid_alive(p), "pid {p} left behind");
    }
    result
}

#[tokio::test]
async fn pods_demo_walks_the_render_corpus() {
    let bin = env!("CARGO_BIN_EXE_haptic-sandbox");
    let out = tokio::process::Command::new(bin)
        .args(["demo", "--pods", "2", "--renders", RENDERS])
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .expect("demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("no controller is involved"), "{stdout}");
    assert!(
        !stdout.contains("broke the Data Plane API spec"),
        "{stdout}"
    );
    assert!(
        stdout.contains("10 of 10 renders behaved as renders/README.md says on 2 pod(s)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("render 10-large-map backend-047"),
        "{stdout}"
    );
}

/// `up --loopback` as root says the mode was forced, not that it is not running as root.
#[tokio::test]
async fn pods_up_loopback_as_root_says_why() {
    if !nix_is_root() {
        return;
    }
    let args = [
        "up",
        "--pods",
        "1",
        "--no-apiserver",
        "--json",
        "--loopback",
    ];
    let (mut child, _reap, up, err_log) = spawn_up(sandbox_bin(), &args, None, true);
    assert_eq!(up["mode"], "loopback");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("SIGTERM");
    let log = err_log.expect("stderr").join().expect("stderr");
    let _ = child.wait();
    assert!(
        log.contains("forced (--loopback) although running as root"),
        "{log}"
    );
    assert!(!log.contains("not running as root"), "{log}");
}
