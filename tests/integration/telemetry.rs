//! Health and metrics are real (issue 6): the telemetry server on `127.0.0.1:0` over a real
//! journal and dispatcher, with real component handles whose counters the test moves.
//!
//! - `/metrics` is valid OpenMetrics text (every line checked) with every `haptic_*` family, and
//!   its values follow the journal, the dispatcher and the components;
//! - a failing liveness check (and, with `failpoints`, the test hook) turns `/healthz` to 503
//!   naming it, and back to 200;
//! - `/readyz` answers 503 until a readiness check passes;
//! - every PromQL expression in `deploy/grafana/haptic-dashboard.json` names only series `/metrics`
//!   exports.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use haptic::components::deployer::{Deployer, DeployerSettings};
use haptic::components::publisher::{ConfigPublisher, PublisherConfig};
use haptic::components::scheduler::SchedulerStats;
use haptic::core::guard::AlwaysValid;
use haptic::dataplane::{ClientSettings, Dataplane};
use haptic::dispatch::{Dispatcher, SubscribeOptions};
use haptic::telemetry::{
    HealthRegistry, METRICS_CONTENT_TYPE, Metrics, RenderSource, journal_writable_check,
};
use haptic_journal::{
    Batch, ConfigIdentity, Correlation, Event, Identity, Journal, JournalOptions, Namespace,
    ObjectName, Origin, PodRef, PodStatusChange, PodStatusItem, RuntimeConfigRef, Term, WorkItem,
};
use haptic_testkit::eventually;
use tokio_util::sync::CancellationToken;

pub(crate) mod openmetrics;

use openmetrics::parse_openmetrics;

/// Generous bound for anything polled (shared, noisy machines).
const DEADLINE: Duration = Duration::from_secs(30);

struct Server {
    base: String,
    http: reqwest::Client,
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Server {
    async fn start(metrics: Arc<Metrics>, health: HealthRegistry) -> Server {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let cancel = CancellationToken::new();
        let task = tokio::spawn(haptic::telemetry::serve(
            listener,
            metrics,
            health,
            cancel.clone(),
        ));
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(20))
            .build()
            .unwrap();
        Server {
            base,
            http,
            cancel,
            task,
        }
    }

    async fn get(&self, path: &str) -> (u16, String, String) {
        let r = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let ct = r
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default();
        (status, ct, r.text().await.unwrap())
    }

    /// Polls `path` until it answers `status`; returns the body.
    async fn wait_for(&self, path: &str, status: u16) -> String {
        eventually(DEADLINE, &format!("{path} to answer {status}"), || async {
            let (s, _, body) = self.get(path).await;
            (s == status)
                .then_some(body.clone())
                .ok_or(format!("{s}: {body}"))
        })
        .await
    }

    async fn stop(self) {
        self.cancel.cancel();
        tokio::time::timeout(DEADLINE, self.task)
            .await
            .expect("server stops on cancel")
            .unwrap()
            .unwrap();
    }
}

// ----- fixtures -----

fn open_journal(dir: &tempfile::TempDir) -> Arc<Journal> {
    Arc::new(Journal::open(&JournalOptions::new(dir.path().join("j.redb"))).unwrap())
}

/// A deployer that never runs (the test sets its counters).
fn idle_deployer(handle: &haptic::dispatch::DispatchHandle) -> Arc<Deployer> {
    Arc::new(Deployer::new(
        handle.clone(),
        Dataplane::new(&ClientSettings::default()).unwrap(),
        DeployerSettings::default(),
        Arc::new(AlwaysValid),
        None,
    ))
}

fn publisher(journal: Arc<Journal>) -> ConfigPublisher {
    // Never used to send: the test only reads its counters (no traffic leaves the process).
    let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    let identity = ConfigIdentity {
        name: ObjectName::new("telemetry"),
        namespace: Namespace::new("haptic-test"),
        source_uid: None,
        source_generation: None,
    };
    ConfigPublisher::new(
        journal,
        client,
        PublisherConfig::new(identity, "haptic-test"),
    )
}

fn park_one_status(journal: &Journal) {
    let item = PodStatusItem {
        runtime_config: RuntimeConfigRef {
            namespace: Namespace::new("haptic-test"),
            name: ObjectName::new("telemetry-haproxycfg"),
        },
        pod: PodRef {
            namespace: Namespace::new("haptic-test"),
            name: ObjectName::new("haproxy-0"),
        },
        change: PodStatusChange::Removed,
    };
    let key = item.key();
    let id = journal
        .enqueue(WorkItem::Status(item), Origin::None)
        .unwrap();
    assert!(journal.park(key, id).unwrap());
}

/// Two pods discovered, a render that passes and reaches one of them, a completed deployment
/// of 1.5 s, then a rejected render (the gate pins to the first).
fn fleet_events() -> Vec<Event> {
    let pod = |n: &str| PodRef {
        namespace: Namespace::new("haptic-test"),
        name: ObjectName::new(n),
    };
    let render = haptic_journal::Checksum::of(b"render-1");
    vec![
        Event::HAProxyPodsDiscovered {
            correlation: Correlation::new("d"),
            endpoints: ["haproxy-0", "haproxy-1"]
                .iter()
                .map(|n| haptic_journal::Endpoint {
                    url: haptic_journal::EndpointUrl::new(format!("http://{n}:5555")),
                    pod: pod(n),
                    detected_version: None,
                })
                .collect(),
            authoritative: true,
        },
        Event::RenderGateCompleted {
            correlation: Correlation::new("g1"),
            render,
            verdict: haptic_journal::GateVerdict::Pass,
            messages: Vec::new(),
            pinned_to: None,
        },
        Event::ConfigAppliedToPod {
            correlation: Correlation::new("a"),
            runtime_config: RuntimeConfigRef {
                namespace: Namespace::new("haptic-test"),
                name: ObjectName::new("telemetry-haproxycfg"),
            },
            pod: pod("haproxy-0"),
            checksum: render,
            is_drift_check: false,
            sync: haptic_journal::SyncMetadata::default(),
        },
        Event::DeploymentCompleted {
            correlation: Correlation::new("c"),
            deployment: haptic_journal::DeploymentId::new("dep-1"),
            total: 2,
            succeeded: 1,
            failed: 1,
            duration_ms: 1500,
            reloads_triggered: 1,
            total_api_operations: 3,
            operation_breakdown: std::collections::BTreeMap::new(),
        },
        Event::RenderGateCompleted {
            correlation: Correlation::new("g2"),
            render: haptic_journal::Checksum::of(b"render-2"),
            verdict: haptic_journal::GateVerdict::Fail,
            messages: vec!["bad".into()],
            pinned_to: Some(render),
        },
    ]
}

// ----- tests -----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_valid_openmetrics_and_follow_the_components() {
    let dir = tempfile::tempdir().unwrap();
    let journal = open_journal(&dir);
    let mut dispatcher = Dispatcher::new(journal.clone());
    let mut sub = dispatcher.subscribe(SubscribeOptions::new("telemetry-test"));
    let handle = dispatcher.handle();
    let cancel = CancellationToken::new();
    let dispatch_task = tokio::spawn(dispatcher.run(cancel.clone()));
    let consumer = tokio::spawn(async move {
        // Processing = dropping the delivery.
        while let Some(d) = sub.recv().await {
            drop(d);
        }
    });

    let metrics = haptic::runtime::metrics();
    let health = HealthRegistry::new();
    let server = Server::start(metrics.clone(), health.clone()).await;

    // Before any registration every family is there, at 0.
    let (status, ct, body) = server.get("/metrics").await;
    assert_eq!(status, 200);
    assert_eq!(ct, METRICS_CONTENT_TYPE);
    let exp = parse_openmetrics(&body).unwrap_or_else(|e| panic!("{e}\n{body}"));
    assert_eq!(exp.value("haptic_journal_readable"), 0.0);
    assert_eq!(exp.value("haptic_leader_election_is_leader"), 0.0);

    // Registration after the server started, as the runtime does at each term.
    metrics.register_journal(journal.clone());
    metrics.register_dispatch(handle.clone());
    let deployer = idle_deployer(&handle);
    deployer.stats.deployments.store(3, Ordering::Relaxed);
    deployer
        .stats
        .failed_deployments
        .store(1, Ordering::Relaxed);
    deployer.stats.deposed.store(1, Ordering::Relaxed);
    deployer
        .stats
        .endpoint_successes
        .store(8, Ordering::Relaxed);
    deployer.stats.endpoint_failures.store(1, Ordering::Relaxed);
    deployer.stats.reloads.store(2, Ordering::Relaxed);
    metrics.register(deployer.clone());
    let publisher = publisher(journal.clone());
    publisher
        .counters()
        .publications
        .store(4, Ordering::Relaxed);
    publisher.counters().retries.store(5, Ordering::Relaxed);
    publisher.counters().given_up.store(1, Ordering::Relaxed);
    metrics.register(publisher.clone());
    let scheduler = Arc::new(SchedulerStats::default());
    scheduler.timeouts.store(2, Ordering::Relaxed);
    scheduler.started.store(6, Ordering::Relaxed);
    metrics.register(scheduler.clone());

    // Real commits through the dispatcher, timed as the runtime times them.
    let b = Batch::became_leader(
        Correlation::new("lead"),
        Identity::new("replica-0"),
        Term(7),
    );
    let t = Instant::now();
    handle.accept(b).await.unwrap();
    metrics.observe_commit(t.elapsed());
    metrics.events_accepted(1);
    for n in 0..4 {
        let t = Instant::now();
        let drift = Event::DriftPreventionTriggered {
            correlation: Correlation::new(format!("t{n}")),
            time_since_last_deployment_ms: n,
        };
        handle.publish(drift).await.unwrap();
        metrics.observe_commit(t.elapsed());
        metrics.events_accepted(1);
    }
    park_one_status(&journal);
    metrics.render_accepted(RenderSource::Dir);
    metrics.render_accepted(RenderSource::Dir);
    let validations = Arc::new(haptic::components::validator::ValidationStats::default());
    validations.passed.fetch_add(1, Ordering::Relaxed);
    validations.failed.fetch_add(1, Ordering::Relaxed);
    metrics.register(validations);
    // Issue 16: the fleet gauges and the deployment histogram, folded from journal events.
    for e in fleet_events() {
        metrics.observe_event(&e, false);
    }
    // A replayed completion is not observed again (it was, before the restart).
    metrics.observe_event(&fleet_events()[3], true);
    metrics.set_version_mismatch_pods(1);

    // The leader gauge follows the dispatcher's live stream: poll until it saw BecameLeader.
    let commits_before = journal.commit_stats().commits;
    let exp = eventually(DEADLINE, "the leader gauge at 1", || async {
        let (_, _, body) = server.get("/metrics").await;
        let exp = parse_openmetrics(&body).unwrap_or_else(|e| panic!("{e}\n{body}"));
        if exp.value("haptic_leader_election_is_leader") == 1.0
            && exp.value("haptic_dispatch_deliveries_total") >= 5.0
        {
            Ok(exp)
        } else {
            Err(body)
        }
    })
    .await;
    let commits = journal.commit_stats();
    for (key, want) in [
        ("haptic_journal_readable", 1.0),
        ("haptic_term", 7.0),
        ("haptic_events_published_total", 5.0),
        ("haptic_journal_commit_duration_seconds_count", 5.0),
        ("haptic_journal_committed_events_total", 5.0),
        ("haptic_journal_queue_depth{queue=\"status-parked\"}", 1.0),
        ("haptic_journal_queue_depth{queue=\"status-pending\"}", 0.0),
        ("haptic_parked_statuses", 1.0),
        ("haptic_deployment_total", 3.0),
        ("haptic_deployment_errors_total", 1.0),
        ("haptic_deployments_deposed_total", 1.0),
        ("haptic_endpoint_syncs_total{result=\"success\"}", 8.0),
        ("haptic_endpoint_syncs_total{result=\"failure\"}", 1.0),
        ("haptic_reloads_total", 2.0),
        ("haptic_publishes_total{result=\"success\"}", 4.0),
        ("haptic_publishes_total{result=\"given_up\"}", 1.0),
        ("haptic_retries_total{component=\"config-publisher\"}", 5.0),
        (
            "haptic_retries_total{component=\"deployment-scheduler\"}",
            2.0,
        ),
        ("haptic_scheduler_deployments_started_total", 6.0),
        ("haptic_renders_total{source=\"dir\"}", 2.0),
        ("haptic_validation_total", 2.0),
        ("haptic_validation_errors_total", 1.0),
        ("haptic_managed_pods", 2.0),
        ("haptic_pods_not_on_spec_checksum", 1.0),
        ("haptic_fleet_pinned", 1.0),
        ("haptic_validator_version_mismatch_pods", 1.0),
        ("haptic_deployment_duration_seconds_count", 1.0),
        ("haptic_deployment_duration_seconds_bucket{le=\"2.5\"}", 1.0),
        ("haptic_deployment_duration_seconds_bucket{le=\"1.0\"}", 0.0),
        ("haptic_leader_election_transitions_total", 0.0),
    ] {
        assert_eq!(exp.value(key), want, "{key}");
    }
    assert!(exp.value("haptic_journal_commits_total") >= 6.0); // 5 accepts + enqueue + park
    // The dispatcher commits its progress in the background: the scraped count lies between
    // the counts read before and after the scrape.
    let scraped = exp.value("haptic_journal_commits_total");
    assert!(
        (commits_before as f64..=commits.commits as f64).contains(&scraped),
        "haptic_journal_commits_total {scraped} outside {commits_before}..={}",
        commits.commits
    );
    assert!(
        exp.samples
            .contains_key("haptic_journal_queue_oldest_age_seconds{queue=\"status-parked\"}")
    );
    assert!(
        !exp.samples
            .contains_key("haptic_journal_queue_oldest_age_seconds{queue=\"publish\"}")
    );
    // Issue 16: every alert of the chart's PrometheusRule selects series this full scrape has
    // (label values it matches on, labels it groups by), not only metric names.
    crate::runtime::helm::alerts_select_exported_series(&exp);

    // A new term's deployer replaces the old one; the counters stay monotonic.
    let next = idle_deployer(&handle);
    next.stats.deployments.store(1, Ordering::Relaxed);
    metrics.register(next);
    let (_, _, body) = server.get("/metrics").await;
    let exp = parse_openmetrics(&body).unwrap();
    assert_eq!(exp.value("haptic_deployment_total"), 4.0);

    server.stop().await;
    cancel.cancel();
    tokio::time::timeout(DEADLINE, dispatch_task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    consumer.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_names_a_failing_check_and_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let journal = open_journal(&dir);
    let health = HealthRegistry::new();
    health.add_liveness("journal", journal_writable_check(journal.clone()));
    let stalled = Arc::new(AtomicBool::new(false));
    {
        let stalled = stalled.clone();
        health.add_liveness("deployer", move || {
            if stalled.load(Ordering::Relaxed) {
                Err("handler running for 121 s".to_owned())
            } else {
                Ok(())
            }
        });
    }
    let server = Server::start(Metrics::new(), health.clone()).await;
    let (status, _, body) = server.get("/healthz").await;
    assert_eq!((status, body.as_str()), (200, "ok\n"));

    stalled.store(true, Ordering::Relaxed);
    let body = server.wait_for("/healthz", 503).await;
    assert_eq!(body, "deployer: handler running for 121 s\n");
    stalled.store(false, Ordering::Relaxed);
    assert_eq!(server.wait_for("/healthz", 200).await, "ok\n");

    // The journal probe does not write.
    let before = journal.commit_stats();
    for _ in 0..3 {
        server.wait_for("/healthz", 200).await;
    }
    assert_eq!(journal.commit_stats(), before);
    server.stop().await;
}

/// The test hook the end-to-end run arms through `HAPTIC_TEST_STALL` (read by
/// `HealthRegistry::new`), driven here in-process.
#[cfg(feature = "failpoints")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocked_component_turns_healthz_to_503_naming_it() {
    let health = HealthRegistry::new();
    health.add_liveness("deployer", || Ok(()));
    health.add_liveness("config-publisher", || Ok(()));
    let server = Server::start(Metrics::new(), health.clone()).await;
    server.wait_for("/healthz", 200).await;
    health.block_for_test("deployer");
    let body = server.wait_for("/healthz", 503).await;
    assert_eq!(body, "deployer: stalled (blocked by test hook)\n");
    health.unblock_for_test("deployer");
    assert_eq!(server.wait_for("/healthz", 200).await, "ok\n");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_is_503_until_a_readiness_check_passes() {
    let health = HealthRegistry::new();
    let server = Server::start(Metrics::new(), health.clone()).await;
    // Nothing registered yet: not ready.
    let body = server.wait_for("/readyz", 503).await;
    assert!(body.contains("no checks registered"), "{body}");
    let replayed = Arc::new(AtomicBool::new(false));
    {
        let replayed = replayed.clone();
        health.add_readiness("journal-replayed", move || {
            if replayed.load(Ordering::Relaxed) {
                Ok(())
            } else {
                Err("replaying".to_owned())
            }
        });
    }
    let body = server.wait_for("/readyz", 503).await;
    assert_eq!(body, "journal-replayed: replaying\n");
    // Liveness is independent of readiness.
    server.wait_for("/healthz", 200).await;
    replayed.store(true, Ordering::Relaxed);
    assert_eq!(server.wait_for("/readyz", 200).await, "ok\n");
    server.stop().await;
}

/// Every metric-like identifier in a PromQL expression.
fn metric_names(expr: &str) -> Vec<String> {
    // Identifiers are maximal runs of [A-Za-z0-9_:]; keep those starting with `haptic_`.
    expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|w| w.starts_with("haptic_"))
        .map(str::to_owned)
        .collect()
}

fn exprs(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                if k == "expr" {
                    out.push(v.as_str().expect("expr is a string").to_owned());
                } else {
                    exprs(v, out);
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|v| exprs(v, out)),
        _ => {}
    }
}

#[test]
fn dashboard_queries_name_only_exported_metrics() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/grafana/haptic-dashboard.json"
    );
    let dash: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(dash["schemaVersion"], 39);
    let templating = dash["templating"]["list"].as_array().unwrap();
    assert!(
        templating
            .iter()
            .any(|t| t["name"] == "datasource" && t["query"] == "prometheus")
    );
    let exp = parse_openmetrics(&haptic::runtime::metrics().encode()).unwrap();
    let mut all = Vec::new();
    exprs(&dash, &mut all);
    assert!(all.len() >= 10, "too few queries: {all:?}");
    let mut used = BTreeSet::new();
    for expr in &all {
        let names = metric_names(expr);
        assert!(!names.is_empty(), "query names no haptic metric: {expr}");
        for name in names {
            assert!(
                exp.exports(&name),
                "dashboard query names {name}, which /metrics does not export: {expr}"
            );
            used.insert(name);
        }
    }
    // The panels: commit latency, events, queues, deployments, publishes, retries,
    // parked statuses, term; issue 16: deployment duration and the fleet (upstream names where
    // upstream has the metric).
    for want in [
        "haptic_journal_commit_duration_seconds_bucket",
        "haptic_events_published_total",
        "haptic_journal_queue_depth",
        "haptic_deployment_total",
        "haptic_deployment_errors_total",
        "haptic_publishes_total",
        "haptic_retries_total",
        "haptic_parked_statuses",
        "haptic_term",
        "haptic_leader_election_is_leader",
        "haptic_deployment_duration_seconds_bucket",
        "haptic_managed_pods",
        "haptic_fleet_pinned",
        "haptic_pods_not_on_spec_checksum",
        "haptic_validator_version_mismatch_pods",
    ] {
        assert!(used.contains(want), "no panel uses {want}");
    }
    for p in dash["panels"].as_array().unwrap() {
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{}", p["title"]);
    }
}
