//! Sandboxes started, killed and dropped: nothing left behind (processes, namespaces,
//! directories), the janitor of a SIGKILLed sandbox, stand-ins without validation, a missing
//! `haproxy`.

use haptic_tools::sandbox::pods::{Mode, netns};

use super::*;

/// `stand_in_validate: false` (the fan-out benchmark): a stand-in takes a configuration
/// `haproxy -c` would refuse; the default refuses it (above).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stand_ins_without_validation_take_any_configuration() {
    let (sb, dp) = unvalidated_stand_in().await;
    let r = dp.push(&render("08-invalid", "haproxy.cfg"), "").await;
    assert_eq!(r.status, 202, "validation off: the push is taken");
    sb.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_own_sandbox_leaves_nothing_behind_and_stand_ins_answer() {
    if !nix_is_root() {
        return;
    }
    // A stale namespace of a dead sandbox is removed at start-up.
    let stale = netns::netns_name(dead_pid(), "0");
    netns::run_cmd("ip", &["netns", "add", &stale]).expect("ip netns add");
    let sb = Sandbox::start(SandboxConfig {
        pods: 1,
        stand_in_pods: 1,
        stand_in_delay: Duration::from_millis(20),
        reload_delay: Duration::from_millis(100),
        ..SandboxConfig::default()
    })
    .await
    .expect("start");
    assert!(!netns::netns_exists(&stale), "stale namespace removed");
    assert_eq!(sb.mode(), Mode::Netns);
    let pods = sb.pods();
    let standin = pods.iter().find(|p| p.stand_in).expect("stand-in").clone();
    let dp = Dp::new(&standin);
    let r = dp.push(&render("08-invalid", "haproxy.cfg"), "").await;
    assert_eq!(r.status, 400, "stand-ins validate with haproxy -c");
    let r = dp.push(&render("01-basic", "haproxy.cfg"), "").await;
    dp.assert_reloaded(&r).await;
    let real = pods.iter().find(|p| !p.stand_in).expect("real").clone();
    // the echo server on the host side of the link, reached from inside the pod by HAProxy
    let dpr = Dp::new(&real);
    let cfg = format!(
        "{}    default_backend be\nbackend be\n    server echo {}\n",
        render("01-basic", "haproxy.cfg").replace(
            "    http-request return status 200 content-type text/plain string \"render 01-basic\"\n",
            ""
        ),
        real.echo_address
    );
    let r = dpr.push(&cfg, "&force_reload=true").await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert!(
        curl(&real, "http", 80, None, "/hello")
            .starts_with(&format!("echo {} GET /hello", real.name))
    );

    let pids = sb.pids().await;
    assert!(pids.len() >= 3, "master, worker, janitor: {pids:?}");
    let namespaces = sb.namespaces().to_vec();
    sb.shutdown().await;
    for pid in &pids {
        assert!(!netns::pid_alive(*pid), "pid {pid} left behind");
    }
    for ns in &namespaces {
        assert!(!netns::netns_exists(ns), "namespace {ns} left behind");
    }

    // POST /_sandbox/kill: the pod disappears (processes gone, endpoint closed).
    let sb = Sandbox::start(SandboxConfig::default())
        .await
        .expect("start");
    let pods = sb.pids().await;
    let pod = sb.pods()[0].clone();
    let dp = Dp::new(&pod);
    let r =
        dp.c.post(format!("{}/_sandbox/kill", dp.base))
            .send()
            .await
            .expect("kill");
    assert_eq!(r.status(), 200);
    let mut gone = false;
    for _ in 0..100 {
        if dp.c.get(dp.url("/v3/info")).send().await.is_err() && sb.pids().await.len() == 1 {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(gone, "killed pod still answers or runs processes");
    let left = sb.pids().await; // the janitor only
    for pid in pods.iter().filter(|p| !left.contains(p)) {
        // SIGKILL is asynchronous: a dying process can still be scheduled for a moment under
        // load (seen once in CI); wait for it, bounded.
        let mut alive = netns::pid_alive(*pid);
        for _ in 0..100 {
            if !alive {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            alive = netns::pid_alive(*pid);
        }
        assert!(!alive, "pid {pid} of the killed pod still runs after 5 s");
    }
    drop(sb);

    // Drop without shutdown cleans up as well.
    let sb = Sandbox::start(SandboxConfig::default())
        .await
        .expect("start");
    let pids = sb.pids().await;
    let namespaces = sb.namespaces().to_vec();
    drop(sb);
    for pid in &pids {
        assert!(!netns::pid_alive(*pid), "pid {pid} left behind after drop");
    }
    for ns in &namespaces {
        assert!(
            !netns::netns_exists(ns),
            "namespace {ns} left behind after drop"
        );
    }
}

#[tokio::test]
async fn pods_missing_haproxy_is_a_clear_error() {
    let err = Sandbox::start(SandboxConfig {
        haproxy_bin: "/nonexistent/haproxy".into(),
        ..SandboxConfig::default()
    })
    .await
    .expect_err("no haproxy");
    assert!(
        format!("{err:#}").contains("apt-get install -y haproxy"),
        "{err:#}"
    );
}

#[tokio::test]
async fn pods_killed_sandbox_is_cleaned_up_by_its_janitor() {
    if !nix_is_root() {
        return;
    }
    let (mut child, _reap, up, _) = spawn_up(
        sandbox_bin(),
        &["up", "--pods", "2", "--no-apiserver", "--json"],
        None,
        false,
    );
    assert_eq!(up["mode"], "netns");
    assert_eq!(up["pods"].as_array().map(Vec::len), Some(2));
    let prefix = format!("hs{}-", child.id());
    let ours = || {
        netns::list_netns()
            .unwrap_or_default()
            .into_iter()
            .filter(|n| n.starts_with(&prefix))
            .collect::<Vec<_>>()
    };
    assert_eq!(ours().len(), 2);
    let mut pids = descendants(child.id());
    for ns in ours() {
        pids.extend(netns::netns_pids(&ns));
    }
    // SIGKILL: no clean-up code of ours runs; the janitor sees its input end and cleans up.
    child.kill().expect("SIGKILL");
    child.wait().expect("reap");
    let mut clean = false;
    for _ in 0..200 {
        if ours().is_empty() && pids.iter().all(|p| !netns::pid_alive(*p)) {
            clean = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        clean,
        "left behind: namespaces {:?}, pids {:?}",
        ours(),
        pids.iter()
            .filter(|p| netns::pid_alive(**p))
            .collect::<Vec<_>>()
    );
}

/// The stale-cleanup pass removes the temporary directories of dead sandboxes (kubeconfig, pod
/// files, private keys): marked with a dead owner, or unmarked (older sandboxes), old and used by
/// no process. Live owners' and in-use directories stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_stale_cleanup_removes_dead_sandboxes_directories() {
    use haptic_tools::sandbox::pods::{OWNER_FILE, cleanup_stale_dirs};
    let parent = tempfile::tempdir().expect("tempdir");
    let mk = |name: &str, owner: Option<u32>, old: bool| {
        let d = parent.path().join(name);
        std::fs::create_dir_all(d.join("haproxy-0/ssl")).expect("mkdir");
        std::fs::write(d.join("haproxy-0/ssl/key.pem"), "PRIVATE KEY").expect("write");
        if let Some(pid) = owner {
            std::fs::write(d.join(OWNER_FILE), pid.to_string()).expect("owner");
        }
        if old {
            let ok = std::process::Command::new("touch")
                .args(["-d", "1 hour ago"])
                .arg(&d)
                .status()
                .expect("touch")
                .success();
            assert!(ok);
        }
        d
    };
    let dead = mk("haptic-sandbox-dead01", Some(dead_pid()), false);
    let live = mk("haptic-sandbox-live01", Some(std::process::id()), true);
    let unmarked_old = mk("haptic-sandbox-unmk01", None, true);
    let unmarked_new = mk("haptic-sandbox-unmk02", None, false);
    let in_use = mk("haptic-sandbox-used01", None, true);
    let other = mk("not-a-sandbox-dir", Some(dead_pid()), true);
    let mut sleeper = std::process::Command::new("sleep")
        .arg("30")
        .current_dir(&in_use)
        .spawn()
        .expect("sleep");
    let removed = cleanup_stale_dirs(parent.path());
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    let mut removed: Vec<_> = removed.into_iter().collect();
    removed.sort();
    assert_eq!(removed, vec![dead.clone(), unmarked_old.clone()]);
    assert!(!dead.exists() && !unmarked_old.exists());
    assert!(live.exists() && unmarked_new.exists() && in_use.exists() && other.exists());

    // Sandbox::start runs the pass on the system temp dir and marks its own directory.
    let stale = std::env::temp_dir().join(format!("haptic-sandbox-t{}", dead_pid()));
    std::fs::create_dir_all(&stale).expect("mkdir");
    std::fs::write(stale.join(OWNER_FILE), dead_pid().to_string()).expect("owner");
    let sb = Sandbox::start(SandboxConfig {
        pods: 0,
        stand_in_pods: 1,
        force_loopback: true,
        ..SandboxConfig::default()
    })
    .await
    .expect("start");
    assert!(
        !stale.exists(),
        "a dead sandbox's directory is removed at start-up"
    );
    let own = std::fs::read_to_string(sb.dir().join(OWNER_FILE)).expect("owner file");
    assert_eq!(own, std::process::id().to_string());
    sb.shutdown().await;
}
