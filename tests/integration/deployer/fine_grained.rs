//! Fine-grained sync (issue 14) against the sandbox's Dataplane endpoints over real HAProxy:
//! server changes go through the server endpoints at runtime (0 reloads) and real traffic
//! reaches the new servers; a new backend or a changed frontend rule is one transaction and one
//! reload; above `raw_push_threshold` one raw push; a failed fine-grained attempt is aborted
//! (no open transaction left) and replaced by one raw push. Reloads are counted by the
//! sandbox's reload records, pushes and transactions by its request log.

use std::time::Duration;

use haptic::components::deployer::structure;
use haptic_journal::{Checksum, SyncMode};
use haptic_tools::sandbox::pods::Mode;

use super::harness::*;
use super::truth_kit::{http_get, open_transactions, running_config};

/// Local "servers" inside each pod: frontends on loopback answering `server sN`.
const LOCAL: &str = "frontend fe_s1
    bind 127.0.0.1:9101
    http-request return status 200 content-type text/plain string \"server s1\"
frontend fe_s2
    bind 127.0.0.1:9102
    http-request return status 200 content-type text/plain string \"server s2\"
frontend fe_s3
    bind 127.0.0.2:9103
    http-request return status 200 content-type text/plain string \"server s3\"
";

/// A render: fe_http on :80 to be_app with `servers` (name, rest of the server line), plus
/// `extra` sections and lines in fe_http.
fn app(servers: &[(&str, &str)], fe_extra: &str, extra: &str) -> String {
    let mut s = format!(
        "{HEAD}frontend fe_http\n    bind *:80\n{fe_extra}    default_backend be_app\n{LOCAL}backend be_app\n    balance roundrobin\n"
    );
    for (name, rest) in servers {
        s.push_str(&format!("    server {name} {rest}\n"));
    }
    s.push_str(extra);
    s
}

/// Whether the fleet's pods run in network namespaces (real traffic to loopback backends).
fn netns(sb: &Fleet) -> bool {
    sb.sandbox().is_some_and(|s| s.mode() == Mode::Netns)
}

fn count(reqs: &[(String, String)], method: &str, suffix: &str) -> usize {
    reqs.iter()
        .filter(|(m, p)| m == method && p.ends_with(suffix))
        .count()
}

/// Two pods, a leading harness on them with `knobs`, and whether the pods run in network
/// namespaces ([`netns`]).
async fn leading(knobs: Knobs) -> (Fleet, Harness, bool) {
    let sb = sandbox(2).await;
    let (h, eps) = Harness::on(&sb, knobs).await;
    h.lead(&eps).await;
    let netns = netns(&sb);
    (sb, h, netns)
}

async fn deploy(h: &Harness, sb: &Fleet, config: &str, tag: &str) -> Checksum {
    let r = h.feed_config(config, tag).await;
    h.wait_applied(r, &endpoints(sb)).await;
    r
}

/// Deploys `config` and asserts: no reload, no raw push, no transaction, only server PUTs,
/// mode `runtime` on every pod; then that every pod answers `want` on `/` (namespace mode).
async fn runtime_step(h: &Harness, sb: &Fleet, config: &str, tag: &str, want: Option<&str>) {
    let before = mark(&sb.pods()).await;
    let r = deploy(h, sb, config, tag).await;
    for (pod, sync) in syncs(h, r) {
        assert_eq!(
            sync.sync_mode,
            Some(SyncMode::Runtime),
            "{tag}: {pod}: {sync:?}"
        );
        assert!(
            !sync.fallback_used && !sync.reload_triggered,
            "{tag}: {pod}"
        );
        assert!(sync.operation_counts.servers.modified >= 1, "{tag}: {pod}");
    }
    for p in sb.pods() {
        let reqs = requests(&p).await;
        for (m, path) in writes(&reqs) {
            assert!(
                m == "PUT"
                    && path.contains("/configuration/backends/")
                    && path.contains("/servers/"),
                "{tag}: {}: only server updates, got {m} {path}",
                p.name
            );
        }
        assert!(
            count(&reqs, "PUT", "") >= 1,
            "{tag}: {}: a server update",
            p.name
        );
    }
    assert_eq!(
        sb.reload_counts().await,
        before,
        "{tag}: no reload on any pod"
    );
    if let Some(want) = want {
        for p in sb.pods() {
            wait_answer(&p, want, |p| http_get(p, "/", None)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployer_server_changes_apply_at_runtime_with_zero_reloads_and_drift_is_repaired() {
    let (sb, h, netns) = leading(Knobs::drift(Duration::from_secs(3))).await;
    let want = |w: &'static str| netns.then_some(w);
    let slots =
        |s1: &str, s2: &str, s3: &str| app(&[("web-1", s1), ("web-2", s2), ("web-3", s3)], "", "");
    let base = slots(
        "127.0.0.1:9101",
        "127.0.0.1:1 disabled",
        "127.0.0.1:1 disabled",
    );
    let r = deploy(&h, &sb, &base, "base").await;
    for (pod, sync) in syncs(&h, r) {
        assert_eq!(
            sync.sync_mode,
            Some(SyncMode::RawInitial),
            "{pod}: a fresh pod"
        );
    }
    if netns {
        for p in sb.pods() {
            wait_answer(&p, "server s1", |p| http_get(p, "/", None)).await;
        }
    }
    // Port, address + port, weight, template slots enabled and disabled, state only.
    let steps = [
        (
            "port",
            slots(
                "127.0.0.1:9102",
                "127.0.0.1:1 disabled",
                "127.0.0.1:1 disabled",
            ),
            "server s2",
        ),
        (
            "address",
            slots(
                "127.0.0.2:9103",
                "127.0.0.1:1 disabled",
                "127.0.0.1:1 disabled",
            ),
            "server s3",
        ),
        (
            "weight",
            slots(
                "127.0.0.2:9103 weight 50",
                "127.0.0.1:1 disabled",
                "127.0.0.1:1 disabled",
            ),
            "server s3",
        ),
        (
            "slot 2 on, 1 off",
            slots(
                "127.0.0.2:9103 weight 50 disabled",
                "127.0.0.1:9101",
                "127.0.0.1:1 disabled",
            ),
            "server s1",
        ),
        (
            "slot 3 on, 2 off",
            slots(
                "127.0.0.2:9103 weight 50 disabled",
                "127.0.0.1:1 disabled",
                "127.0.0.1:9102 enabled",
            ),
            "server s2",
        ),
        (
            "state only",
            slots(
                "127.0.0.2:9103 weight 50",
                "127.0.0.1:1 disabled",
                "127.0.0.1:9102 disabled",
            ),
            "server s3",
        ),
    ];
    for (tag, config, answer) in &steps {
        runtime_step(&h, &sb, config, tag, want(answer)).await;
    }

    // Drift: the file is in the API's layout now; idle drift rounds find nothing.
    let last = &steps[steps.len() - 1].1;
    let pods = sb.pods();
    for p in &pods {
        let text = running_config(p).await;
        assert_ne!(
            haptic::dataplane::normalize_raw_config(&text),
            haptic::dataplane::normalize_raw_config(last),
            "the API rewrote the file in its own layout"
        );
        assert!(structure::equal(
            &structure::parse(&text),
            &structure::parse(last)
        ));
        clear_requests(p).await;
    }
    h.wait_drift_rounds(2).await;
    for p in &pods {
        assert_eq!(
            writes(&requests(p).await),
            vec![],
            "idle drift wrote to {}",
            p.name
        );
    }
    // A pod edited out of band (weight and a server address) is repaired at runtime.
    let edited = last
        .replace("127.0.0.2:9103 weight 50", "127.0.0.1:9101 weight 7")
        .replace("timeout server 5s", "timeout server 5000ms # same");
    pods[0].faults().edit_config(&edited, true).await.unwrap();
    if netns {
        wait_answer(&pods[0], "server s1", |p| http_get(p, "/", None)).await;
    }
    let before = pods[0].reload_count().await;
    clear_requests(&pods[0]).await;
    wait_for("drift repairs pod 0", h.converge, || {
        h.deployer
            .stats
            .drift_detected
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 1
    })
    .await;
    // The repair's deployment done: one further drift round, nothing in flight.
    h.wait_drift_rounds(1).await;
    let text = running_config(&pods[0]).await;
    assert!(
        structure::equal(&structure::parse(&text), &structure::parse(last)),
        "pod 0 repaired:\n{text}"
    );
    if netns {
        wait_answer(&pods[0], "server s3", |p| http_get(p, "/", None)).await;
    }
    assert_eq!(pods[0].reload_count().await, before, "repaired at runtime");
    let reqs = requests(&pods[0]).await;
    assert_eq!(raw_pushes(&reqs), 0, "{reqs:?}");

    h.stop().await;
}

/// Corpus server changes (`servers/`, `server-templates/`) on real pods: 0 reloads each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployer_corpus_server_streams_reload_nothing() {
    let sb = sandbox(2).await;
    if !netns(&sb) {
        // The corpus points at private addresses, refused in loopback mode.
        eprintln!("skipped: loopback mode refuses the corpus' server addresses");
        return;
    }
    let corpus = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/corpus/haproxy/");
    let read = |f: &str| std::fs::read_to_string(format!("{corpus}{f}")).unwrap();
    let (h, eps) = Harness::on(&sb, Knobs::default()).await;
    h.lead(&eps).await;
    let template = read("server-templates/backend-with-template.cfg");
    let streams: Vec<Vec<(String, String)>> = vec![
        [
            "disabled-dummy",
            "enabled-dummy",
            "enabled-real",
            "disabled-dummy",
        ]
        .iter()
        .map(|f| ((*f).to_owned(), read(&format!("servers/{f}.cfg"))))
        .collect(),
        ["weight-100", "weight-200", "weight-100"]
            .iter()
            .map(|f| ((*f).to_owned(), read(&format!("servers/{f}.cfg"))))
            .collect(),
        ["address-changed", "port-changed"]
            .iter()
            .map(|f| ((*f).to_owned(), read(&format!("servers/{f}.cfg"))))
            .collect(),
        vec![
            ("backend-with-template".into(), template.clone()),
            (
                "template, srv1 moved and weighted".into(),
                template.replace(
                    "server srv1 192.168.1.10:8080 check",
                    "server srv1 192.168.1.30:8081 check weight 20",
                ),
            ),
            (
                "template, srv1 in maintenance".into(),
                template.replace(
                    "server srv1 192.168.1.10:8080 check",
                    "server srv1 192.168.1.30:8081 check weight 20 disabled",
                ),
            ),
        ],
    ];
    for stream in streams {
        // The first render of a stream replaces a different configuration (reloads allowed).
        deploy(&h, &sb, &stream[0].1, &stream[0].0).await;
        for (tag, config) in &stream[1..] {
            runtime_step(&h, &sb, config, tag, None).await;
        }
    }
    h.stop().await;
}

/// A new backend with a frontend rule, then a changed frontend rule: one transaction and one
/// reload per pod each time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployer_new_backend_or_changed_frontend_rule_is_one_transaction_and_one_reload() {
    let (sb, h, netns) = leading(Knobs::default()).await;
    let servers = [("web-1", "127.0.0.1:9101")];
    deploy(&h, &sb, &app(&servers, "", ""), "base").await;
    let be_new = "backend be_new\n    server new1 127.0.0.1:9102\n";
    let with_backend = app(
        &servers,
        "    use_backend be_new if { path_beg /new }\n",
        be_new,
    );
    let changed_rule = app(
        &servers,
        "    use_backend be_new if { path_beg /newer }\n    http-request set-header X-Seen yes\n",
        be_new,
    );
    for (tag, config, path) in [
        ("backend added", &with_backend, "/new"),
        ("frontend rule changed", &changed_rule, "/newer"),
    ] {
        let before = mark(&sb.pods()).await;
        let r = deploy(&h, &sb, config, tag).await;
        for (pod, sync) in syncs(&h, r) {
            assert_eq!(sync.sync_mode, Some(SyncMode::FineGrained), "{tag}: {pod}");
            assert!(!sync.fallback_used && sync.reload_triggered, "{tag}: {pod}");
        }
        let after = sb.reload_counts().await;
        for (i, (b, a)) in before.iter().zip(&after).enumerate() {
            assert_eq!(a - b, 1, "{tag}: pod {i}: exactly one reload");
        }
        for p in sb.pods() {
            let reqs = requests(&p).await;
            assert_eq!(
                count(&reqs, "POST", "/services/haproxy/transactions"),
                1,
                "{tag}"
            );
            assert_eq!(
                reqs.iter()
                    .filter(|(m, path)| m == "PUT" && path.contains("/transactions/"))
                    .count(),
                1,
                "{tag}: one commit"
            );
            assert_eq!(raw_pushes(&reqs), 0, "{tag}: no raw push");
            assert!(open_transactions(&p).await.is_empty());
            if netns {
                wait_answer(&p, "server s2", |p| http_get(p, path, None)).await;
                wait_answer(&p, "server s1", |p| http_get(p, "/", None)).await;
            }
        }
        if tag == "backend added" {
            for (_, sync) in syncs(&h, r) {
                let c = sync.operation_counts;
                assert_eq!(
                    (c.backends.added, c.servers.added, c.frontends.modified),
                    (1, 1, 1)
                );
            }
        }
    }
    h.stop().await;
}

/// `raw_push_threshold` 5 and a 20-change render: one raw push per pod, mode `raw_threshold`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployer_above_the_raw_push_threshold_pushes_once() {
    let (sb, h, _) = leading(Knobs {
        raw_push_threshold: 5,
        ..Knobs::default()
    })
    .await;
    let names: Vec<String> = (1..=20).map(|i| format!("web-{i}")).collect();
    let off: Vec<(&str, &str)> = names
        .iter()
        .map(|n| (n.as_str(), "127.0.0.1:1 disabled"))
        .collect();
    let on: Vec<(&str, &str)> = names
        .iter()
        .map(|n| (n.as_str(), "127.0.0.1:9101"))
        .collect();
    deploy(&h, &sb, &app(&off, "", ""), "off").await;
    let before = mark(&sb.pods()).await;
    let r = deploy(&h, &sb, &app(&on, "", ""), "on").await;
    for (pod, sync) in syncs(&h, r) {
        assert_eq!(sync.sync_mode, Some(SyncMode::RawThreshold), "{pod}");
        assert!(!sync.fallback_used, "{pod}: not a fallback");
        assert_eq!(sync.operation_counts.servers.modified, 20, "{pod}");
    }
    let after = sb.reload_counts().await;
    for (i, p) in sb.pods().iter().enumerate() {
        let reqs = requests(p).await;
        assert_eq!(raw_pushes(&reqs), 1, "pod {i}: one raw push");
        assert_eq!(count(&reqs, "POST", "/services/haproxy/transactions"), 0);
        assert!(!reqs.iter().any(|(_, path)| path.contains("/servers/")));
        assert_eq!(after[i] - before[i], 1, "pod {i}: one reload");
    }
    h.stop().await;
}

/// A 500 on one operation inside the transaction: the transaction is deleted, one raw push
/// replaces it (`raw_fallback`, `fallbackUsed`), and the pod runs the render.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployer_fine_grained_failure_aborts_the_transaction_and_falls_back_to_one_raw_push() {
    let (sb, h, netns) = leading(Knobs::default()).await;
    let servers = [("web-1", "127.0.0.1:9101")];
    deploy(&h, &sb, &app(&servers, "", ""), "base").await;
    let pods = sb.pods();
    for p in &pods {
        clear_requests(p).await;
    }
    fault(
        &pods[0],
        serde_json::json!({"method": "POST", "path": "/configuration/backends/be_new/servers$", "status": 500, "times": 1}),
    )
    .await;
    let config = app(
        &servers,
        "    use_backend be_new if { path_beg /new }\n",
        "backend be_new\n    server new1 127.0.0.1:9102\n",
    );
    let r = deploy(&h, &sb, &config, "backend added").await;
    let by_pod = syncs(&h, r);
    let failed = &by_pod.iter().find(|(p, _)| *p == pods[0].name).unwrap().1;
    assert_eq!(failed.sync_mode, Some(SyncMode::RawFallback));
    assert!(failed.fallback_used && failed.error.is_none() && failed.reload_triggered);
    let other = &by_pod.iter().find(|(p, _)| *p == pods[1].name).unwrap().1;
    assert_eq!(other.sync_mode, Some(SyncMode::FineGrained));
    assert!(!other.fallback_used);

    let reqs = requests(&pods[0]).await;
    assert_eq!(count(&reqs, "POST", "/services/haproxy/transactions"), 1);
    assert_eq!(
        reqs.iter()
            .filter(|(m, p)| m == "DELETE" && p.contains("/transactions/"))
            .count(),
        1,
        "the transaction was aborted: {reqs:?}"
    );
    assert!(
        !reqs
            .iter()
            .any(|(m, p)| m == "PUT" && p.contains("/transactions/")),
        "never committed"
    );
    assert_eq!(raw_pushes(&reqs), 1, "one raw push");
    for p in &pods {
        assert!(
            open_transactions(p).await.is_empty(),
            "no orphaned transaction on {}",
            p.name
        );
        let text = running_config(p).await;
        assert!(
            structure::equal(&structure::parse(&text), &structure::parse(&config)),
            "{}",
            p.name
        );
        if netns {
            wait_answer(p, "server s2", |p| http_get(p, "/new", None)).await;
        }
    }
    h.stop().await;
}
