//! Renders and corpus configurations served through each pod's HAProxy, and the network
//! safety rules (namespaces without a default route; loopback mode's outbound refusal).

use haptic_tools::sandbox::pods::{Mode, netns};

use super::*;

/// Renders 01, 02 and 05 pushed with their files: HAProxy answers from them.
#[tokio::test]
async fn pods_renders_01_02_05_serve_traffic() {
    let (l, dp) = real_pod().await;
    let reload = dp.push_and_wait(&render("01-basic", "haproxy.cfg")).await;
    assert_eq!(reload["status"], "succeeded");
    assert_eq!(curl(&l.pod, "http", 80, None, "/"), "render 01-basic");
    assert_eq!(dp.upload_hosts_map().await.status, 201);
    let reload = dp.push_and_wait(&render("02-maps", "haproxy.cfg")).await;
    assert_eq!(reload["status"], "succeeded");
    assert_eq!(
        curl(&l.pod, "http", 80, Some("shop.haptic.test"), "/"),
        "render 02-maps shop-v1"
    );
    assert_eq!(
        curl(&l.pod, "http", 80, Some("unknown.haptic.test"), "/"),
        "render 02-maps no-route"
    );
    assert_eq!(dp.upload_site_pem("site.pem").await.status, 201);
    let reload = dp.push_and_wait(&render("05-tls", "haproxy.cfg")).await;
    assert_eq!(reload["status"], "succeeded");
    assert_eq!(curl(&l.pod, "https", 443, None, "/"), "render 05-tls ssl=1");
    assert_eq!(curl(&l.pod, "http", 80, None, "/"), "render 05-tls ssl=0");
}

/// A corpus configuration with a frontend serves on the pod's port (its backend server sits at
/// an unreachable address: HAProxy's 503); one naming a map validates once the map is stored.
#[tokio::test]
async fn pods_corpus_configs_serve_and_validate_with_their_maps() {
    let (l, dp) = real_pod().await;
    let r = dp
        .push(
            &read(&format!("{CORPUS}/frontends/basic.cfg")),
            "&force_reload=true",
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(curl_status(&l.pod, 80, "/"), "503");
    let with_map = read(&format!("{CORPUS}/map-frontend/with-map.cfg"));
    assert_eq!(dp.push(&with_map, "").await.status, 400);
    let map = read(&format!("{CORPUS}/map-files/domains.map"));
    assert_eq!(
        dp.upload("storage/maps", "domains.map", map).await.status,
        201
    );
    assert_eq!(dp.push_and_wait(&with_map).await["status"], "succeeded");
}

/// Peer addresses of the sockets of processes named haproxy, from `ss -tanpu` (optionally run in
/// namespace `ns`).
fn haproxy_peers(ns: Option<&str>) -> Vec<String> {
    let mut cmd = match ns {
        Some(ns) => {
            let mut c = std::process::Command::new("ip");
            c.args(["netns", "exec", ns, "ss", "-tanpu"]);
            c
        }
        None => {
            let mut c = std::process::Command::new("ss");
            c.arg("-tanpu");
            c
        }
    };
    let out = cmd.output().expect("ss");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("\"haproxy\""))
        .filter_map(|l| l.split_whitespace().nth(5).map(str::to_string))
        .collect()
}

fn peer_allowed(peer: &str) -> bool {
    let host = peer
        .rsplit_once(':')
        .map(|(h, _)| h)
        .unwrap_or(peer)
        .trim_matches(['[', ']']);
    if host == "*" || host == "0.0.0.0" || host == "::" || host.is_empty() {
        return true; // listening / unconnected
    }
    match host
        .split('%')
        .next()
        .unwrap_or(host)
        .parse::<std::net::IpAddr>()
    {
        Ok(std::net::IpAddr::V4(ip)) => {
            ip.is_loopback()
                || ip.is_unspecified()
                || (ip.octets()[0] == 10 && ip.octets()[1] == netns::LINK_OCTET)
        }
        Ok(std::net::IpAddr::V6(ip)) => ip.is_loopback() || ip.is_unspecified(),
        Err(_) => false,
    }
}

fn assert_no_outbound(ns: &str, what: &str) {
    for peer in haproxy_peers(Some(ns))
        .into_iter()
        .chain(haproxy_peers(None))
    {
        assert!(peer_allowed(&peer), "{what} made haproxy connect to {peer}");
    }
}

#[tokio::test]
async fn pods_network_safety_corpus_targets_never_leave_the_pod() {
    let (l, dp) = real_pod().await;
    let Some(ns) = l.pod.netns.clone() else {
        return; // loopback mode (not root): the outbound refusal is tested below
    };
    let routes =
        netns::run_cmd("ip", &["netns", "exec", &ns, "ip", "-4", "route"]).expect("ip route");
    assert!(!routes.contains("default"), "{routes}");
    assert!(
        routes
            .lines()
            .all(|r| r.starts_with(&format!("10.{}.", netns::LINK_OCTET))),
        "{routes}"
    );
    let unreachable = netns::run_cmd(
        "ip",
        &["netns", "exec", &ns, "ip", "route", "get", "8.8.8.8"],
    );
    assert!(
        unreachable.is_err(),
        "8.8.8.8 must be unreachable from the pod: {unreachable:?}"
    );
    let mut accepted = 0;
    for dir in [
        "resolvers",
        "peers",
        "mailers",
        "servers",
        "http-checks",
        "tcp-checks",
    ] {
        let mut files: Vec<PathBuf> = std::fs::read_dir(corpus_dir(dir))
            .expect("corpus dir")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "cfg"))
            .collect();
        files.sort();
        for f in files {
            // a listener so the worker starts even for configs without one
            let cfg = format!(
                "{}\nfrontend sandbox_probe\n    mode http\n    bind *:8405\n    http-request return status 200\n",
                read(&f.display().to_string())
            );
            if dp.push(&cfg, "&force_reload=true").await.status != 201 {
                continue;
            }
            accepted += 1;
            // let health checks, resolvers, peers and mailers try for a while
            for _ in 0..2 {
                tokio::time::sleep(Duration::from_millis(150)).await;
                assert_no_outbound(&ns, &f.display().to_string());
            }
        }
    }
    assert!(accepted >= 6, "only {accepted} corpus configs ran");
    // Health checks do run and fail locally (L4CON: network unreachable), never reaching out.
    let cfg = "global\n    stats socket /var/run/haproxy.sock mode 600 level admin\ndefaults\n    mode http\n    timeout connect 1s\n    timeout client 5s\n    timeout server 5s\nbackend be\n    server s1 192.168.1.10:8080 check inter 100ms\nfrontend sandbox_probe\n    bind *:8405\n    default_backend be\n";
    assert_eq!(dp.push(cfg, "&force_reload=true").await.status, 201);
    let sock = l.pod.dir.join("run/haproxy.sock");
    let mut stat = String::new();
    for _ in 0..100 {
        let out = std::process::Command::new("sh")
            .args([
                "-c",
                &format!("echo 'show stat' | socat - UNIX-CONNECT:{}", sock.display()),
            ])
            .output()
            .expect("socat");
        stat = String::from_utf8_lossy(&out.stdout).into_owned();
        if stat
            .lines()
            .any(|l| l.starts_with("be,s1,") && l.contains("L4CON"))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        stat.lines()
            .any(|l| l.starts_with("be,s1,") && l.contains("L4CON")),
        "{stat}"
    );
    assert_no_outbound(&ns, "the health check");
}

/// Loopback mode (forced here; what a non-root run gets) refuses every config the review found
/// connecting off-host, with a 400 naming the offending line, and the version does not move.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_loopback_mode_refuses_every_outbound_directive() {
    let sb = Sandbox::start(SandboxConfig {
        pods: 1,
        force_loopback: true,
        reload_delay: Duration::from_millis(100),
        ..SandboxConfig::default()
    })
    .await
    .expect("start");
    assert_eq!(sb.mode(), Mode::Loopback);
    let dp = Dp::new(&sb.pods()[0]);
    let head = "defaults\n    mode http\n    timeout connect 1s\n    timeout client 1s\n    timeout server 1s\nfrontend f\n    bind *:8404\n    default_backend b\n";
    let cases = [
        "backend b\n    option httpchk\n    http-check connect addr 10.0.0.5 port 80\n    server s 127.0.0.1:1 check\n",
        "backend b\n    mode tcp\n    option tcp-check\n    tcp-check connect addr 10.0.0.6 port 80\n    server s 127.0.0.1:1 check\n",
        "backend b\n    server s 127.0.0.1:1 agent-check agent-addr 10.0.0.8 agent-port 9999\n",
        "backend b\n    default-server agent-addr 10.0.0.8\n    server s 127.0.0.1:1 agent-check agent-port 9999\n",
        "resolvers r\n    parse-resolv-conf\nbackend b\n    server s 127.0.0.1:1\n",
        "backend b\n    option httpchk\n    http-check connect addr 192.0.2.2 port 9999\n    server s 127.0.0.1:1 check\n",
    ];
    for body in cases {
        let cfg = format!("{head}{body}");
        let bad = body
            .lines()
            .find(|l| {
                l.contains("10.0.0.") || l.contains("192.0.2.") || l.contains("parse-resolv-conf")
            })
            .expect("an offending line")
            .trim()
            .to_string();
        let line_no = cfg.lines().position(|l| l.trim() == bad).expect("line") + 1;
        let v = dp.version().await;
        let r = dp.push(&cfg, "&force_reload=true").await;
        assert_eq!(r.status, 400, "{cfg}");
        let msg = r.message();
        assert!(
            msg.contains("refused")
                && msg.contains(&format!("line {line_no}:"))
                && msg.contains(&bad),
            "{cfg}\n→ {msg}"
        );
        assert_eq!(dp.version().await, v);
        // the out-of-band edit hook applies the same rule
        let r =
            dp.c.post(format!("{}/_sandbox/edit-config", dp.base))
                .body(cfg.clone())
                .send()
                .await
                .unwrap();
        assert_eq!(r.status(), 400, "{cfg}");
    }
    // a loopback-only health-checked config is still accepted
    let ok = format!(
        "{head}backend b\n    option httpchk\n    http-check connect addr 127.0.0.1 port 80\n    server s 127.0.0.1:1 check agent-check agent-addr 127.0.0.1 agent-port 9\n"
    );
    let r = dp.push(&ok, "&force_reload=true").await;
    assert_eq!(r.status, 201, "{}", r.text);
    sb.shutdown().await;
}
