//! Health and metrics of the real binary (issue 6 "Tests"): after a short end-to-end run the
//! counters it should move are non-zero, every query of `deploy/grafana/haptic-dashboard.json` names
//! a metric its `/metrics` exports, `/readyz` and `/healthz` answer 200; a second controller
//! started with a component blocked by the test hook (`HAPTIC_TEST_STALL`, feature
//! `failpoints`) answers `/healthz` 503 naming it, while the first stays 200.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;

use haptic_testkit::{eventually, http};

use super::{Peers, bounds, feed_and_check, opts, solo, stop_cleanly};

on_peers!(Emulator, metrics_and_health_of_the_real_binary => metrics_and_health);

/// One `/metrics` scrape: `# TYPE` families and every sample (`name{labels}` as written).
#[derive(Debug, Default)]
pub struct Scrape {
    pub text: String,
    pub families: BTreeMap<String, String>,
    pub samples: BTreeMap<String, f64>,
}

impl Scrape {
    pub fn parse(text: &str) -> Scrape {
        let mut s = Scrape {
            text: text.to_owned(),
            ..Scrape::default()
        };
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let mut w = rest.split_whitespace();
                if let (Some(name), Some(kind)) = (w.next(), w.next()) {
                    s.families.insert(name.to_owned(), kind.to_owned());
                }
            } else if !line.starts_with('#') && !line.is_empty() {
                let (key, rest) = match line.find('}') {
                    Some(i) => line.split_at(i + 1),
                    None => line.split_once(' ').unwrap_or((line, "")),
                };
                if let Some(v) = rest.split_whitespace().next().and_then(|v| v.parse().ok()) {
                    s.samples.insert(key.to_owned(), v);
                }
            }
        }
        s
    }

    /// The value of the sample `key` (`name` or `name{labels}` as exposed); 0 when absent.
    pub fn value(&self, key: &str) -> f64 {
        self.samples.get(key).copied().unwrap_or(0.0)
    }

    /// Whether a PromQL metric name selects a series of this exposition as Prometheus stores
    /// it: counters as `<family>_total`, histograms as `_bucket`/`_sum`/`_count`, gauges by the
    /// family name.
    pub fn exports(&self, name: &str) -> bool {
        self.families.iter().any(|(family, kind)| {
            let suffixes: &[&str] = match kind.as_str() {
                "counter" => &["_total", "_created"],
                "histogram" => &["_bucket", "_sum", "_count", "_created"],
                _ => &[""],
            };
            name.strip_prefix(family.as_str())
                .is_some_and(|suffix| suffixes.contains(&suffix))
        })
    }
}

pub async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let resp = http()
        .get(format!("http://{addr}{path}"))
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    (resp.status().as_u16(), resp.text().await.unwrap())
}

/// GETs `/metrics` of the controller at `addr`.
pub async fn scrape(addr: SocketAddr) -> Scrape {
    let (status, text) = get(addr, "/metrics").await;
    assert_eq!(status, 200, "{text}");
    assert!(text.ends_with("# EOF\n"), "OpenMetrics text ends in # EOF");
    Scrape::parse(&text)
}

/// Polls `path` until it answers `status` (within [`haptic_testkit::Intervals::converge`]);
/// returns the body.
async fn wait_status(addr: SocketAddr, path: &str, status: u16) -> String {
    eventually(
        bounds().converge(),
        &format!("{path} to answer {status}"),
        || async {
            let (s, body) = get(addr, path).await;
            (s == status)
                .then_some(body.clone())
                .ok_or(format!("{s}: {body}"))
        },
    )
    .await
}

/// Every `haptic_*` identifier of every PromQL `expr` in the dashboard.
fn dashboard_metric_names() -> BTreeSet<String> {
    fn walk(v: &serde_json::Value, out: &mut BTreeSet<String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, v) in m {
                    match (k.as_str(), v.as_str()) {
                        ("expr", Some(expr)) => {
                            assert!(
                                expr.contains("haptic_"),
                                "query names no haptic metric: {expr}"
                            );
                            out.extend(
                                expr.split(|c: char| {
                                    !(c.is_ascii_alphanumeric() || c == '_' || c == ':')
                                })
                                .filter(|w| w.starts_with("haptic_"))
                                .map(str::to_owned),
                            );
                        }
                        _ => walk(v, out),
                    }
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/grafana/haptic-dashboard.json"
    );
    let dash: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut names = BTreeSet::new();
    walk(&dash, &mut names);
    names
}

/// The counters a short run (a valid render, maps, a rejected render, a large map) must move,
/// and the gauges of a leader; `None` when all hold, else the ones that do not.
fn unmoved(m: &Scrape) -> Option<Vec<String>> {
    let positive = [
        "haptic_events_published_total",
        "haptic_renders_total{source=\"dir\"}",
        "haptic_validation_total",
        "haptic_validation_errors_total",
        "haptic_deployment_total",
        "haptic_deployment_duration_seconds_count",
        "haptic_leader_election_transitions_total",
        "haptic_managed_pods",
        "haptic_endpoint_syncs_total{result=\"success\"}",
        "haptic_publishes_total{result=\"success\"}",
        "haptic_journal_commit_duration_seconds_count",
        "haptic_journal_commits_total",
        "haptic_config_published_total",
        "haptic_reloads_total",
        "haptic_term",
        "haptic_leader_election_is_leader",
    ];
    let mut bad: Vec<String> = positive
        .iter()
        .filter(|k| m.value(k) < 1.0)
        .map(|k| format!("{k} = {}", m.value(k)))
        .collect();
    if m.value("haptic_leader_election_is_leader") != 1.0 {
        bad.push(format!(
            "haptic_leader_election_is_leader = {}",
            m.value("haptic_leader_election_is_leader")
        ));
    }
    if m.value("haptic_validation_total") - m.value("haptic_validation_errors_total") < 3.0 {
        bad.push("fewer than 3 passed validations (01, 02, 10)".to_owned());
    }
    if m.value("haptic_managed_pods") != 3.0 {
        bad.push(format!(
            "haptic_managed_pods = {}",
            m.value("haptic_managed_pods")
        ));
    }
    if bad.is_empty() { None } else { Some(bad) }
}

/// A short run's counters moved, the dashboard's metrics exported, `/readyz` and `/healthz`
/// 200; a stalled replica's `/healthz` 503 names the component.
pub async fn metrics_and_health(peers: Peers) {
    let (world, render_dir, mut ctl) = solo(peers, 3).await;
    feed_and_check(
        &world,
        &render_dir,
        ["01-basic", "02-maps", "08-invalid", "10-large-map"],
    )
    .await;
    let addr = ctl.metrics_addr().await;
    // Counters read at scrape time may trail the published status by a moment: poll.
    let m = ctl
        .eventually(bounds().follow_up(), "the counters to move", || async {
            let m = scrape(addr).await;
            match unmoved(&m) {
                None => Ok(m),
                Some(bad) => Err(format!(
                    "counters that should have moved: {bad:?}\n{}",
                    m.text
                )),
            }
        })
        .await;
    // Every dashboard query names a metric this binary exports.
    let names = dashboard_metric_names();
    assert!(names.len() >= 10, "too few dashboard metrics: {names:?}");
    let missing: Vec<&String> = names.iter().filter(|n| !m.exports(n)).collect();
    assert!(
        missing.is_empty(),
        "dashboard names metrics /metrics does not export: {missing:?}\n{}",
        m.text
    );
    assert_eq!(wait_status(addr, "/readyz", 200).await, "ok\n");
    assert_eq!(wait_status(addr, "/healthz", 200).await, "ok\n");

    // The per-pod history, live from the running controller's journal: every pod has synced
    // (applied) records; a bad parameter is a 400 naming the form.
    let live = history_lines(addr, "").await;
    let pods: Vec<String> = world
        .pods()
        .iter()
        .map(|p| format!("{}/{}", world.namespace(), p.name))
        .collect();
    for pod in &pods {
        let of_pod = history_lines(addr, &format!("?pod={pod}")).await;
        assert!(
            of_pod.iter().any(|l| l["result"] == "applied"),
            "{pod}: an applied sync in {of_pod:?}"
        );
        assert!(
            of_pod
                .iter()
                .all(|l| l["pod"] == *pod || l.get("gap").is_some())
        );
    }
    // A limit keeps the newest records and says how many it left out first.
    let newest = history_lines(addr, "?limit=1").await;
    assert_eq!(newest.len(), 2, "{newest:?}");
    assert_eq!(newest[0]["truncated"]["limit"], 1, "{newest:?}");
    assert!(newest[0]["truncated"]["omitted"].as_u64().unwrap() >= 1);
    assert!(newest[1]["pod"].is_string(), "{newest:?}");
    let (status, body) = get(addr, "/debug/history?pod=nonamespace").await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("NAMESPACE/NAME"), "{body}");

    // A second replica with the deployer blocked by the test hook: /healthz 503 naming it.
    let mut opts = opts(&world, "stalled", &render_dir);
    opts.env
        .push(("HAPTIC_TEST_STALL".to_owned(), "deployer".to_owned()));
    let mut stalled = world.controller(opts);
    let stalled_addr = stalled.metrics_addr().await;
    let body = wait_status(stalled_addr, "/healthz", 503).await;
    assert!(
        body.lines()
            .any(|l| l.starts_with("deployer: ") && l.contains("stalled")),
        "the 503 body names the blocked component: {body:?}"
    );
    let (status, body) = get(addr, "/healthz").await;
    assert_eq!(
        (status, body.as_str()),
        (200, "ok\n"),
        "the first replica stays healthy"
    );
    stalled.kill();
    stop_cleanly(&mut ctl);
    // Offline, the stopped controller's journal answers the same lines (it may hold more: syncs
    // after the live read).
    let path = super::opts(&world, "solo", &render_dir).journal;
    let j =
        haptic_journal::Journal::open(&haptic_journal::JournalOptions::new(&path).read_only(true))
            .unwrap();
    let all = haptic_journal::HistoryQuery::parse(None, None, None, None).unwrap();
    let offline: Vec<serde_json::Value> = haptic_journal::timeline(&j.history_query(&all).unwrap())
        .iter()
        .map(haptic_journal::TimelineLine::to_json)
        .collect();
    assert!(
        !live.is_empty() && offline.len() >= live.len() && offline[..live.len()] == live[..],
        "live {live:#?}\noffline {offline:#?}"
    );
    world.shutdown().await;
}

/// `GET /debug/history<query>` of the controller at `addr`: its JSON lines.
async fn history_lines(addr: SocketAddr, query: &str) -> Vec<serde_json::Value> {
    let (status, body) = get(addr, &format!("/debug/history{query}")).await;
    assert_eq!(status, 200, "{body}");
    body.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}
