//! Transactions owned by the journal (issue 24, "What must be shown"; issue 29): the faults the
//! Data Plane API spec lists on the transaction paths and the runtime server updates converge
//! (re-read, plan again, bounded) with nothing left open, and a transaction a pod lists that no
//! sync of this deployer opened (left by a kill, by a predecessor, or by a start answered past
//! the endpoint timeout) is deleted before the next write. One fleet for the whole table, pod 0
//! faulted, pod 1 the control. Each row changes the `http-request return` text of the frontend
//! (a transaction and one reload: the real API's finding that the text loses its quotes), or
//! server weights (at runtime); after each: every pod serves the render through real HTTP, no
//! pod lists a transaction, no pod reloaded more than twice for the change. Last, a render
//! without an admin stats socket: a weight change of two servers is one transaction and one
//! reload per pod (`no_runtime_api`), and the deployer's notice hook hears `NoRuntimeApi`.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use haptic::components::deployer::{
    NoPodJournal, PodLedger, PodSync, SyncLimits, SyncPolicy, sync_endpoint,
};
use haptic::core::guard::{AlwaysValid, DeployerNotice, NoticeHook};
use haptic::core::render::{JournaledRender, RenderContent};
use haptic_journal::{Checksum, Endpoint, SyncMetadata, SyncMode};
use serde_json::{Value, json};

use super::harness::*;
use super::truth_kit::*;

/// The deployer's endpoint timeout in this test (a start answered past it leaves an orphan).
const ENDPOINT_TIMEOUT: Duration = Duration::from_secs(10);

fn knobs() -> Knobs {
    Knobs {
        endpoint_timeout: ENDPOINT_TIMEOUT,
        ..Knobs::default()
    }
}

/// What the fleet should run.
#[derive(Clone, Copy, Debug)]
struct Want {
    /// The `http-request return` text (`step N`).
    step: u32,
    weights: (u32, u32),
    /// `stats socket ... level admin` in `global`.
    admin: bool,
}

impl Want {
    fn config(&self) -> String {
        let socket = if self.admin {
            "    stats socket /var/run/haproxy.sock mode 600 level admin\n"
        } else {
            ""
        };
        format!(
            "global
    maxconn 200
{socket}defaults
    mode http
    timeout connect 1s
    timeout client 5s
    timeout server 5s
frontend fe_http
    bind *:80
    http-request return status 200 content-type text/plain string \"step {}\"
backend be_app
    server web-1 127.0.0.1:9101 weight {}
    server web-2 127.0.0.1:9102 weight {}
",
            self.step, self.weights.0, self.weights.1
        )
    }
}

/// How the row's render differs from the last.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Change {
    /// The `http-request return` text: one transaction, one reload.
    ReturnText,
    /// The weight of `web-1`: a runtime server update, no reload.
    Weight,
    /// The weights of both servers.
    BothWeights,
}

/// One row: what pod 0 meets and what its sync must then report.
struct Row {
    name: &'static str,
    change: Change,
    /// Faults armed on pod 0 before the render is fed.
    faults: Vec<Value>,
    /// Transactions opened by hand on pod 0 before the render is fed.
    by_hand: usize,
    /// A new leader term starts before the render is fed.
    new_term: bool,
    /// Pod 0's sync mode once converged.
    mode: SyncMode,
    /// Pod 0 reported a failure first (then the retry converged).
    fails_first: bool,
    /// Pod 0's reloads for the change (`None`: at most 2).
    reloads: Option<usize>,
}

impl Row {
    fn new(name: &'static str, change: Change, mode: SyncMode) -> Row {
        Row {
            name,
            change,
            faults: vec![],
            by_hand: 0,
            new_term: false,
            mode,
            fails_first: false,
            reloads: None,
        }
    }

    fn fault(mut self, f: Value) -> Row {
        self.faults.push(f);
        self
    }
}

struct Table {
    _sb: Fleet,
    pods: Vec<Pod>,
    eps: Vec<Endpoint>,
    h: Harness,
    term: u64,
    want: Want,
}

/// `(id, status)` of the transaction requests pod 0 answered (`POST .../transactions` has
/// none: its id is in the answer).
fn transaction_requests(log: &[haptic_tools::sandbox::control::RequestRecord]) -> Vec<String> {
    log.iter()
        .filter(|r| r.path.contains("/services/haproxy/transactions"))
        .map(|r| format!("{} {} {}", r.method, r.path, r.status))
        .collect()
}

impl Table {
    fn next(&self, change: Change) -> Want {
        let mut w = self.want;
        match change {
            Change::ReturnText => w.step += 1,
            Change::Weight => w.weights.0 += 1,
            Change::BothWeights => w.weights = (w.weights.0 + 1, w.weights.1 + 1),
        }
        w
    }

    /// Deploys `want` and waits until every pod runs it and serves it.
    async fn deploy(&mut self, want: Want, tag: &str) -> Checksum {
        self.want = want;
        let r = self.h.feed_config(&want.config(), tag).await;
        self.h.wait_applied(r, &self.eps).await;
        for pod in &self.pods {
            wait_answer(pod, &format!("step {}", want.step), |p| {
                http_get(p, "/", None)
            })
            .await;
        }
        r
    }

    async fn row(&mut self, row: Row) -> (Checksum, SyncMetadata) {
        let what = row.name;
        let want = self.next(row.change);
        reset(&self.pods).await;
        let before = reload_counts(&self.pods).await;
        let mut hand = Vec::new();
        for _ in 0..row.by_hand {
            hand.push(start_transaction_by_hand(&self.pods[0]).await);
        }
        // The request log then holds the deployer's requests only.
        clear_requests(&self.pods[0]).await;
        if row.new_term {
            self.term += 1;
            self.h.become_leader(self.term).await;
        }
        for f in &row.faults {
            fault(&self.pods[0], f.clone()).await;
        }
        let p0 = self.pods[0].name.clone();
        let r = self.deploy(want, what).await;
        let reported = reports(&self.h, &p0, r);
        let sync = reported
            .iter()
            .rev()
            .find_map(|r| r.as_ref().ok().cloned())
            .unwrap();
        assert_eq!(
            reported.iter().any(Result::is_err),
            row.fails_first,
            "{what}: pod 0's reports {reported:?}"
        );
        assert_eq!(sync.sync_mode, Some(row.mode), "{what}: {sync:?}");
        assert_eq!(
            sync.fallback_used,
            row.mode == SyncMode::RawFallback,
            "{what}: {sync:?}"
        );
        let p1 = self.pods[1].name.clone();
        assert!(
            reports(&self.h, &p1, r).iter().all(Result::is_ok),
            "{what}: pod 1 never failed"
        );
        assert_no_transactions(&self.pods, what).await;
        let log = request_log(&self.pods[0]).await;
        for id in &hand {
            assert!(
                log.iter()
                    .any(|q| q.method == "DELETE"
                        && q.path.ends_with(&format!("/transactions/{id}"))),
                "{what}: the transaction {id} opened by hand was deleted: {:?}",
                transaction_requests(&log)
            );
        }
        if !hand.is_empty() {
            // Deleted before the first write that landed (a start refused with 429 wrote
            // nothing).
            let first_write = log
                .iter()
                .position(|q| q.method != "GET" && q.method != "DELETE" && q.status < 300)
                .unwrap();
            let last_delete = log
                .iter()
                .rposition(|q| {
                    q.method == "DELETE" && hand.iter().any(|id| q.path.ends_with(id.as_str()))
                })
                .unwrap();
            assert!(
                last_delete < first_write,
                "{what}: {:?}",
                transaction_requests(&log)
            );
        }
        let after = reload_counts(&self.pods).await;
        let delta: Vec<usize> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
        let expected = match row.change {
            Change::ReturnText => 1,
            Change::Weight | Change::BothWeights if self.want.admin => 0,
            Change::Weight | Change::BothWeights => 1,
        };
        assert_eq!(delta[1], expected, "{what}: pod 1's reloads");
        match row.reloads {
            Some(n) => assert_eq!(delta[0], n, "{what}: pod 0's reloads"),
            None => assert!(delta[0] <= 2, "{what}: pod 0 reloaded {} times", delta[0]),
        }
        (r, sync)
    }
}

/// `PUT .../frontends/fe_http/http_request_rules/0` inside a transaction: the one change of a
/// changed return text.
const RULE_CHANGE: &str = "/frontends/fe_http/http_request_rules/";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployer_transaction_faults_converge_and_leave_no_transaction_open() {
    let sb = sandbox(2).await;
    let pods = sb.pods();
    let eps = endpoints(&sb);
    // A transaction left on pod 0 before the deployer starts (a killed predecessor's).
    let left = start_transaction_by_hand(&pods[0]).await;
    // The request log then holds the deployer's requests only.
    pods[0].faults().clear_requests().await.unwrap();
    let h = Harness::start(&journal_path(&sb), &sb, knobs()).await;
    let notices: Arc<Mutex<Vec<(String, DeployerNotice)>>> = Arc::default();
    let n = notices.clone();
    let hook: NoticeHook = Arc::new(move |pod, notice| {
        n.lock()
            .unwrap()
            .push((pod.name.as_str().to_owned(), notice.clone()));
    });
    h.deployer.set_notice_hook(Some(hook));
    h.lead(&eps).await;
    let mut t = Table {
        _sb: sb,
        pods,
        eps,
        h,
        term: 1,
        want: Want {
            step: 0,
            weights: (1, 1),
            admin: true,
        },
    };
    t.deploy(t.want, "base").await;
    let log = request_log(&t.pods[0]).await;
    let deleted = log
        .iter()
        .position(|q| q.method == "DELETE" && q.path.ends_with(&format!("/transactions/{left}")));
    let first_write = log.iter().position(|q| q.method == "POST");
    assert!(
        deleted.is_some() && deleted < first_write,
        "the transaction left before the start was deleted before the first write: {:?}",
        transaction_requests(&log)
    );
    assert_no_transactions(&t.pods, "after the first sync").await;

    let stats = &t.h.deployer.stats;
    let (fine0, fallback0, reloads0) = (
        stats.mode(SyncMode::FineGrained),
        stats.mode(SyncMode::RawFallback),
        stats.reloads.load(Ordering::Relaxed),
    );
    use Change::*;
    use SyncMode::*;
    let late = ENDPOINT_TIMEOUT.as_millis() as u64 + 500;
    let rows = vec![
        // The real API's finding: a changed `http-request return` text by one transaction.
        Row {
            reloads: Some(1),
            ..Row::new("return text changed", ReturnText, FineGrained)
        },
        Row {
            new_term: true,
            by_hand: 1,
            reloads: Some(1),
            ..Row::new("a transaction left open, a new leader term", ReturnText, FineGrained)
        },
        Row {
            reloads: Some(1),
            ..Row::new("429 on the start", ReturnText, FineGrained).fault(
                json!({"method": "POST", "path": "/services/haproxy/transactions$", "status": 429, "times": 1}),
            )
        },
        Row {
            by_hand: 20,
            reloads: Some(1),
            ..Row::new("20 transactions open (max_open_transactions): 429", ReturnText, FineGrained)
        },
        Row {
            reloads: Some(1),
            ..Row::new("406 on the commit", ReturnText, FineGrained).fault(
                json!({"method": "PUT", "path": "/services/haproxy/transactions/", "status": 406, "times": 1}),
            )
        },
        Row {
            reloads: Some(1),
            // The real API leaves the transaction in_progress after a 409 commit (the version
            // moved, observed-v3.4.md): it must be deleted (no transaction left, checked below).
            ..Row::new("409 on the commit (the version moved)", ReturnText, FineGrained).fault(
                json!({"method": "PUT", "path": "/services/haproxy/transactions/", "status": 409, "times": 1}),
            )
        },
        Row {
            reloads: Some(0),
            ..Row::new("409 on a runtime server update", Weight, Runtime).fault(
                json!({"method": "PUT", "path": "/backends/be_app/servers/web-1$", "status": 409, "times": 1}),
            )
        },
        Row {
            reloads: Some(1),
            ..Row::new("500 on the start", ReturnText, RawFallback).fault(
                json!({"method": "POST", "path": "/services/haproxy/transactions$", "status": 500, "times": 1}),
            )
        },
        Row {
            reloads: Some(1),
            ..Row::new("500 on the change", ReturnText, RawFallback).fault(
                json!({"method": "PUT", "path": RULE_CHANGE, "status": 500, "times": 1}),
            )
        },
        Row {
            reloads: Some(1),
            ..Row::new("500 on the commit", ReturnText, RawFallback).fault(
                json!({"method": "PUT", "path": "/services/haproxy/transactions/", "status": 500, "times": 1}),
            )
        },
        Row {
            fails_first: true,
            reloads: Some(1),
            ..Row::new("the start answered past the endpoint timeout", ReturnText, FineGrained)
                .fault(json!({"method": "POST", "path": "/services/haproxy/transactions$", "delay_ms": late, "times": 1}))
        },
    ];
    let mut fallbacks = 0;
    let mut fine = 0;
    let mut reloads = 0;
    for row in rows {
        let started = std::time::Instant::now();
        let name = row.name;
        let change = row.change;
        let mode = row.mode;
        let (_, sync) = t.row(row).await;
        // Pod 1 syncs a changed text fine-grained; pod 0 as its row says.
        match mode {
            RawFallback => {
                fallbacks += 1;
                fine += 1;
            }
            FineGrained => fine += 2,
            _ => {}
        }
        if mode != RawFallback && change == ReturnText {
            assert!(
                !sync.fallback_used && sync.reload_triggered,
                "{name}: {sync:?}"
            );
        }
        if change == ReturnText {
            reloads += 2;
        }
        eprintln!("row {name}: {:?}", started.elapsed());
    }
    // The metrics count what happened: every reload, every fallback, the fine-grained syncs.
    let stats = &t.h.deployer.stats;
    assert_eq!(stats.mode(SyncMode::RawFallback) - fallback0, fallbacks);
    // (A retry re-syncs pod 1 too: a no-op, also counted fine-grained.)
    assert!(stats.mode(SyncMode::FineGrained) - fine0 >= fine);
    assert_eq!(stats.reloads.load(Ordering::Relaxed) - reloads0, reloads);

    // A commit 409 after the version moved (issue 29): the change is held while the test moves
    // the version; the transaction is deleted and the change planned again at the new version.
    let started = std::time::Instant::now();
    reset(&t.pods).await;
    let before = t.pods[0].reload_count().await;
    fault(
        &t.pods[0],
        json!({"method": "PUT", "path": RULE_CHANGE, "delay_ms": 3000, "times": 1}),
    )
    .await;
    let want = t.next(ReturnText);
    t.want = want;
    let r =
        t.h.feed_config(&want.config(), "409 after a version move")
            .await;
    let pod0 = t.pods[0].clone();
    let held: String = eventually(
        t.h.converge,
        "pod 0 lists the deployer's transaction",
        || {
            let pod0 = pod0.clone();
            async move {
                let open = open_transactions(&pod0).await;
                match open.first() {
                    Some(t) => Ok(t["id"].as_str().unwrap_or_default().to_owned()),
                    None => Err("none open".to_owned()),
                }
            }
        },
    )
    .await;
    pod0.faults()
        .call(reqwest::Method::POST, "bump-version", None)
        .await
        .unwrap();
    t.h.wait_applied(r, &t.eps).await;
    for pod in &t.pods {
        wait_answer(pod, &format!("step {}", want.step), |p| {
            http_get(p, "/", None)
        })
        .await;
    }
    let log = request_log(&t.pods[0]).await;
    let ours = |q: &haptic_tools::sandbox::control::RequestRecord| q.path.ends_with(&held);
    assert!(
        log.iter()
            .any(|q| ours(q) && q.method == "PUT" && q.status == 409),
        "the commit answered 409: {:?}",
        transaction_requests(&log)
    );
    assert!(
        log.iter()
            .any(|q| ours(q) && q.method == "DELETE" && q.status == 204),
        "the transaction the 409 left in progress was deleted: {:?}",
        transaction_requests(&log)
    );
    let sync = reports(&t.h, &t.pods[0].name, r)
        .into_iter()
        .find_map(Result::ok)
        .unwrap();
    assert_eq!(sync.sync_mode, Some(FineGrained), "{sync:?}");
    assert!(sync.version_conflict_retries >= 1, "{sync:?}");
    assert_eq!(t.pods[0].reload_count().await - before, 1);
    assert_no_transactions(&t.pods, "409 after a version move").await;
    eprintln!("row 409 after a version move: {:?}", started.elapsed());

    // The sync's report counts the transactions it deleted.
    let started = std::time::Instant::now();
    let id = start_transaction_by_hand(&t.pods[0]).await;
    let report = sync_directly(&t.pods[0], &t.eps[0], &t.want.config()).await;
    assert_eq!(report, Ok(1), "the report counts {id}");
    assert_no_transactions(&t.pods, "a direct sync").await;
    eprintln!("direct sync: {:?}", started.elapsed());

    // No admin stats socket: the configuration goes by one raw push, then a weight change of
    // both servers is one transaction and one reload per pod, reported and announced.
    let started = std::time::Instant::now();
    let mut without = t.want;
    without.admin = false;
    t.deploy(without, "no admin socket").await;
    notices.lock().unwrap().clear();
    let (r, _) = t
        .row(Row {
            reloads: Some(1),
            ..Row::new("no admin stats socket", BothWeights, NoRuntimeApi)
        })
        .await;
    for pod in &t.pods {
        let reqs = requests(pod).await;
        let commits = reqs
            .iter()
            .filter(|(m, p)| m == "PUT" && p.contains("/services/haproxy/transactions/"))
            .count();
        assert_eq!(
            commits,
            1,
            "{}: one transaction: {:?}",
            pod.name,
            writes(&reqs)
        );
        assert_eq!(raw_pushes(&reqs), 0, "{}", pod.name);
        let (_, sync) = syncs(&t.h, r)
            .into_iter()
            .find(|(p, _)| *p == pod.name)
            .unwrap();
        assert_eq!(sync.operation_counts.servers.modified, 2, "{}", pod.name);
        assert!(sync.reload_triggered, "{}", pod.name);
    }
    let heard: Vec<String> = notices
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, n)| matches!(n, DeployerNotice::NoRuntimeApi))
        .map(|(p, _)| p.clone())
        .collect();
    let mut names: Vec<String> = t.pods.iter().map(|p| p.name.clone()).collect();
    names.sort();
    let mut heard_sorted = heard.clone();
    heard_sorted.sort();
    assert_eq!(
        heard_sorted, names,
        "one NoRuntimeApi notice per pod: {heard:?}"
    );
    eprintln!("no admin socket: {:?}", started.elapsed());
    t.h.stop().await;
}

/// One `sync_endpoint` of `config` on `pod` with the first-sync cleanup: `Ok(transactions
/// deleted)` from its report, or the error.
async fn sync_directly(pod: &Pod, ep: &Endpoint, config: &str) -> Result<u32, String> {
    let client = pod.dataplane();
    let render = JournaledRender::of(&RenderContent::new(config.into(), Vec::new()));
    let outcome = sync_endpoint(
        &client,
        &render,
        PodSync {
            ledger: PodLedger::new(&ep.url, &ep.pod, None, None),
            clean_transactions: true,
        },
        &NoPodJournal,
        &Arc::new(tokio::sync::Semaphore::new(4)),
        &AlwaysValid,
        &SyncLimits::default(),
        &SyncPolicy::default(),
    )
    .await;
    outcome
        .result
        .map(|r| r.transactions_deleted)
        .map_err(|e| e.to_string())
}
