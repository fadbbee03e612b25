//! Order where HAProxy cares, on sandbox pods (issue 24): a render that moves `default-server`
//! after a server, or swaps health-check steps, is a change that goes by one raw push, and the
//! pod ends running the render's order; after a fine-grained write (one transaction, the file in
//! the API's layout) ten drift checks write nothing. One fleet for the three cases.

use std::time::Duration;

use haptic::components::deployer::structure;
use haptic_journal::{Event, SyncMode};

use super::harness::*;
use super::truth_kit::running_config;

/// The frontend every render of this test routes through.
const FRONTEND: &str = "frontend fe_http
    bind *:80
    default_backend be_app
";

/// `be_app` with two connect-send-expect check sequences (`/a` then `/b`, or swapped), a
/// `default-server` line before the servers or after the first one, and `servers`.
fn render(default_server_late: bool, steps_swapped: bool, servers: &[&str]) -> String {
    let (first, second) = if steps_swapped {
        ("/b", "/a")
    } else {
        ("/a", "/b")
    };
    let mut s = format!(
        "{HEAD}{FRONTEND}backend be_app\n    balance roundrobin\n    option httpchk\n    http-check connect\n    http-check send meth GET uri {first}\n    http-check expect status 200\n    http-check connect\n    http-check send meth GET uri {second}\n    http-check expect status 200\n"
    );
    let ds = "    default-server inter 2s fall 2\n";
    if !default_server_late {
        s.push_str(ds);
    }
    for (i, server) in servers.iter().enumerate() {
        s.push_str(&format!("    {server}\n"));
        if i == 0 && default_server_late {
            s.push_str(ds);
        }
    }
    s
}

const SERVERS: &[&str] = &[
    "server web-1 127.0.0.1:9101 check",
    "server web-2 127.0.0.1:9102 check",
];

/// The index of the first line of `text` containing `needle`.
fn line_of(text: &str, needle: &str) -> usize {
    text.lines()
        .position(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no {needle:?} in\n{text}"))
}

/// Deploys `config`; every pod reports `mode` and runs `config` (by structure), not `before`.
async fn deploy_as(
    h: &Harness,
    sb: &Fleet,
    config: &str,
    before: &str,
    tag: &str,
    mode: SyncMode,
) -> Vec<String> {
    let seen = h.events().len();
    let r = h.feed_config(config, tag).await;
    h.wait_applied(r, &endpoints(sb)).await;
    // This deployment's own report per pod (drift checks report the render too, and the render
    // may have been deployed before).
    let deployed: Vec<_> = h
        .events()
        .into_iter()
        .skip(seen)
        .filter_map(|e| match e {
            Event::ConfigAppliedToPod {
                pod,
                checksum,
                sync,
                is_drift_check: false,
                ..
            } if checksum == r => Some((pod.name.to_string(), sync)),
            _ => None,
        })
        .collect();
    assert_eq!(deployed.len(), sb.pods().len(), "{tag}: {deployed:?}");
    for (pod, sync) in deployed {
        assert_eq!(sync.sync_mode, Some(mode), "{tag}: {pod}: {sync:?}");
        assert!(
            sync.reload_triggered,
            "{tag}: {pod}: HAProxy loads the new order"
        );
    }
    let mut texts = Vec::new();
    for p in sb.pods() {
        let text = running_config(&p).await;
        let running = structure::parse(&text);
        assert!(
            structure::equal(&running, &structure::parse(config)),
            "{tag}: {} runs the render:\n{text}",
            p.name
        );
        assert!(
            !structure::equal(&running, &structure::parse(before)),
            "{tag}: {} still runs the previous order:\n{text}",
            p.name
        );
        texts.push(text);
    }
    texts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployer_default_server_and_check_step_order_reach_the_pods_and_drift_stays_idle() {
    let sb = sandbox(2).await;
    let (h, eps) = Harness::on(&sb, Knobs::drift(Duration::from_millis(700))).await;
    h.lead(&eps).await;
    let base = render(false, false, SERVERS);
    let r = h.feed_config(&base, "base").await;
    h.wait_applied(r, &eps).await;

    // (a) default-server after the first server: it no longer applies to web-1.
    let late = render(true, false, SERVERS);
    for text in deploy_as(
        &h,
        &sb,
        &late,
        &base,
        "default-server late",
        SyncMode::RawUnmodelled,
    )
    .await
    {
        assert!(
            line_of(&text, "server web-1") < line_of(&text, "default-server")
                && line_of(&text, "default-server") < line_of(&text, "server web-2"),
            "the render's order:\n{text}"
        );
    }

    // (b) check steps swapped (default-server first again): `/b` is checked first.
    let swapped = render(false, true, SERVERS);
    for text in deploy_as(
        &h,
        &sb,
        &swapped,
        &base,
        "steps swapped",
        SyncMode::RawUnmodelled,
    )
    .await
    {
        assert!(
            line_of(&text, "uri /b") < line_of(&text, "uri /a"),
            "the render's step order:\n{text}"
        );
    }

    // (c) back to the base order, then a server added: one transaction, the file rewritten in
    // the API's layout; ten drift checks find it equal and write nothing.
    deploy_as(
        &h,
        &sb,
        &base,
        &swapped,
        "base again",
        SyncMode::RawUnmodelled,
    )
    .await;
    let mut three = SERVERS.to_vec();
    three.push("server web-3 127.0.0.1:9103 check");
    let fine = render(false, false, &three);
    let texts = deploy_as(&h, &sb, &fine, &base, "server added", SyncMode::FineGrained).await;
    for text in &texts {
        assert_ne!(
            haptic::dataplane::normalize_raw_config(text),
            haptic::dataplane::normalize_raw_config(&fine),
            "the API rewrote the file in its own layout"
        );
    }
    let pods = sb.pods();
    let reloads = mark(&pods).await;
    h.wait_drift_rounds(10).await;
    for p in &pods {
        let reqs = requests(p).await;
        assert!(
            reqs.iter()
                .any(|(_, path)| path.ends_with("/configuration/raw")),
            "drift read {}",
            p.name
        );
        assert_eq!(writes(&reqs), vec![], "idle drift wrote to {}", p.name);
    }
    assert_eq!(sb.reload_counts().await, reloads, "no reload while idle");
    h.stop().await;
}
