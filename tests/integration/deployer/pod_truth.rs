//! A file written but not loaded (issue 24, "What must be shown"; issue 29): a render that
//! changes one file (a map, a certificate, an error page) and a server weight (the render has an
//! admin stats socket, so the weight alone would go at runtime), with one failure on one pod at
//! each step between the file write and the reload:
//!
//! | step | pod 0's faults |
//! |---|---|
//! | the reload fails | `{"reload": "fail"}` (HAProxy refuses the new worker) |
//! | the version read | 500 on the server change, then 500 on `GET .../configuration/version` (the fallback's read) |
//! | the transaction start | 500 on `POST .../transactions`, then 500 on the fallback's raw push |
//! | a timeout | the commit (the runtime server update for a certificate) answered past the endpoint timeout |
//!
//! After the retry, or after a failover to a fresh deployer with an empty journal (the first
//! one stopped right after the failure), that pod answers from the new file through real HTTP,
//! and the deployer reports the render applied on it only when HAProxy loaded it: when the
//! success is reported, HAProxy's runtime view already shows the new map or certificate. After
//! a failed reload the next sync pushes by `raw_resync` (the API kept the failed configuration
//! in memory). Certificates are applied at runtime by the API: written is loaded, no reload.
//! One fleet for the whole table.

use std::time::Duration;

use haptic_journal::{AuxKind, Endpoint, SyncMode};
use haptic_tools::sandbox::control::RequestRecord;
use serde_json::{Value, json};

use super::harness::*;
use super::truth_kit::*;

/// The deployer's endpoint timeout in this test (the timeout step answers 1 s past it).
const ENDPOINT_TIMEOUT: Duration = Duration::from_secs(10);

fn knobs() -> Knobs {
    Knobs {
        endpoint_timeout: ENDPOINT_TIMEOUT,
        ..Knobs::default()
    }
}

/// The render's configuration: a map lookup on `/`, the error page on `/down`, the
/// certificate on :443, and one server whose weight each row changes.
fn config(weight: u32) -> String {
    format!(
        "{HEAD}    errorfile 503 /etc/haproxy/general/503.http
frontend fe_http
    bind *:80
    bind *:443 ssl crt /etc/haproxy/ssl/site.pem
    http-request deny deny_status 503 if {{ path_beg /down }}
    http-request return status 200 content-type text/plain lf-string \"truth %[req.hdr(host),lower,map(/etc/haproxy/maps/hosts.map,no-route)]\"
backend be_app
    server web-1 127.0.0.1:9101 weight {weight}
"
    )
}

fn error_page(n: u32) -> Vec<u8> {
    format!(
        "HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\npage {n}\n"
    )
    .into_bytes()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum File {
    Map,
    Cert,
    ErrorPage,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    ReloadFails,
    VersionRead,
    TransactionStart,
    Timeout,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum After {
    Retry,
    Failover,
}

/// Pod 0's faults for `step` on a render changing `file`.
fn faults(file: File, step: Step) -> Vec<Value> {
    let late = ENDPOINT_TIMEOUT.as_millis() as u64 + 1000;
    match step {
        Step::ReloadFails => vec![json!({"reload": "fail", "times": 1})],
        Step::VersionRead => vec![
            json!({"method": "PUT", "path": "/servers/web-1$", "status": 500, "times": 1}),
            json!({"method": "GET", "path": "/configuration/version$", "status": 500, "times": 1}),
        ],
        Step::TransactionStart => vec![
            json!({"method": "POST", "path": "/services/haproxy/transactions$", "status": 500, "times": 1}),
            json!({"method": "POST", "path": "/configuration/raw$", "status": 500, "times": 1}),
        ],
        // A certificate is applied at runtime with its write and the weight then goes by a
        // runtime server update; the map and the error page go with the weight in one
        // transaction, loaded at its commit.
        Step::Timeout if file == File::Cert => {
            vec![json!({"method": "PUT", "path": "/servers/web-1$", "delay_ms": late, "times": 1})]
        }
        Step::Timeout => vec![
            json!({"method": "PUT", "path": "/services/haproxy/transactions/", "delay_ms": late, "times": 1}),
        ],
    }
}

/// What the fleet should run: the render number of each file.
#[derive(Clone, Copy, Debug)]
struct Want {
    weight: u32,
    map: u32,
    page: u32,
    reissued: bool,
}

impl Want {
    fn config(&self) -> String {
        config(self.weight)
    }

    fn files(&self) -> RenderFiles {
        vec![
            (
                AuxKind::Map,
                "maps/hosts.map".into(),
                format!("shop.haptic.test shop-{}\n", self.map).into_bytes(),
            ),
            (
                AuxKind::Ssl,
                "ssl/site.pem".into(),
                if self.reissued {
                    reissued_pem()
                } else {
                    site_pem()
                },
            ),
            (
                AuxKind::General,
                "general/503.http".into(),
                error_page(self.page),
            ),
        ]
    }

    fn serial(&self) -> &'static str {
        if self.reissued {
            REISSUED_SERIAL_HEX
        } else {
            SITE_SERIAL_HEX
        }
    }

    /// The next render: the weight and `file` change.
    fn next(&self, file: File) -> Want {
        let mut w = *self;
        w.weight += 1;
        match file {
            File::Map => w.map += 1,
            File::ErrorPage => w.page += 1,
            File::Cert => w.reissued = !w.reissued,
        }
        w
    }
}

/// Waits until `pod` serves every file of `want` through real HTTP (bound: the deployment
/// timeout, [`wait_answer`]: a new worker may take a moment to take the traffic).
async fn wait_serves(pod: &Pod, want: &Want) {
    wait_answer(pod, &format!("truth shop-{}", want.map), |p| {
        http_get(p, "/", Some("shop.haptic.test"))
    })
    .await;
    wait_answer(pod, &format!("page {}", want.page), |p| {
        http_get(p, "/down", None)
    })
    .await;
    wait_answer(pod, want.serial(), |p| served_serial(p, "site.haptic.test")).await;
}

/// Asserts what HAProxy on `pod` reports loaded for `file` (runtime views; an error page has
/// none): `want`'s content.
async fn assert_loaded(pod: &Pod, file: File, want: &Want, what: &str) {
    match file {
        File::Map => {
            let entries = loaded_map(pod, "hosts.map").await;
            assert_eq!(
                entries,
                vec![("shop.haptic.test".to_owned(), format!("shop-{}", want.map))],
                "{what}: HAProxy's map on {}",
                pod.name
            );
        }
        File::Cert => assert_eq!(
            loaded_serial(pod, "site.pem").await,
            want.serial(),
            "{what}: HAProxy's certificate on {}",
            pod.name
        ),
        File::ErrorPage => {}
    }
}

/// The stored content of `file` on the pod differs from what HAProxy loaded: the new one on
/// disk, the old one served (the state a failure between the write and the reload leaves).
async fn assert_written_not_loaded(pod: &Pod, file: File, old: &Want, new: &Want, what: &str) {
    match file {
        File::Map => {
            let disk = api_text(pod, "services/haproxy/storage/maps/hosts.map").await;
            assert_eq!(
                disk,
                format!("shop.haptic.test shop-{}\n", new.map),
                "{what}"
            );
            assert_loaded(pod, file, old, what).await;
            assert_eq!(
                http_get(pod, "/", Some("shop.haptic.test")),
                format!("truth shop-{}", old.map),
                "{what}: served"
            );
        }
        File::ErrorPage => {
            let disk = api_text(pod, "services/haproxy/storage/general/503.http").await;
            assert!(
                disk.contains(&format!("page {}", new.page)),
                "{what}: {disk}"
            );
            assert_eq!(
                http_get(pod, "/down", None),
                format!("page {}", old.page),
                "{what}: served"
            );
        }
        // Applied at runtime with its write: loaded.
        File::Cert => assert_loaded(pod, file, new, what).await,
    }
}

struct Table {
    sb: Fleet,
    pods: Vec<Pod>,
    eps: Vec<Endpoint>,
    h: Harness,
    term: u64,
    want: Want,
}

impl Table {
    async fn row(&mut self, file: File, step: Step, after: After) {
        let what = format!("{file:?} / {step:?} / {after:?}");
        let old = self.want;
        let new = old.next(file);
        self.want = new;
        reset(&self.pods).await;
        let before = reload_counts(&self.pods).await;
        for f in faults(file, step) {
            fault(&self.pods[0], f).await;
        }
        let (p0, p1) = (self.pods[0].name.clone(), self.pods[1].name.clone());
        let r = self.h.feed_files(&new.config(), new.files(), &what).await;
        let error = wait_failed(&self.h, &p0, r).await;
        match step {
            Step::ReloadFails => assert!(error.contains("reload"), "{what}: {error}"),
            Step::Timeout => assert!(error.contains("timed out"), "{what}: {error}"),
            Step::VersionRead | Step::TransactionStart => {}
        }
        if after == After::Failover {
            // The leader stops right after the failure (its retry waits a backoff of 1 s); a
            // fresh deployer with an empty journal takes over.
            let dir = self.sb.dir().join(format!("failover-{}.redb", self.term));
            let h2 = Harness::start(&dir, &self.sb, knobs()).await;
            std::mem::replace(&mut self.h, h2).stop().await;
            assert_written_not_loaded(&self.pods[0], file, &old, &new, &what).await;
            if step == Step::ReloadFails {
                // The API kept the failed configuration in memory: its version is ahead of
                // the file's (observed-v3.4.md).
                let raw = api_text(&self.pods[0], "services/haproxy/configuration/raw").await;
                let version = config_version(&self.pods[0]).await;
                assert!(
                    !raw.contains(&format!("_version={version}\n")),
                    "{what}: the file is at the API's version {version}:\n{raw}"
                );
            }
            clear_requests(&self.pods[0]).await;
            self.term += 1;
            self.h.become_leader(self.term).await;
            self.h.discover(self.eps.clone()).await;
            let again = self.h.feed_files(&new.config(), new.files(), &what).await;
            assert_eq!(again, r, "{what}: the same render");
        }
        let sync = wait_succeeded(&self.h, &p0, r).await;
        // Reported applied: HAProxy runs the new file already.
        assert_loaded(&self.pods[0], file, &new, &what).await;
        let reports0 = reports(&self.h, &p0, r);
        if after == After::Retry {
            let first_ok = reports0.iter().position(Result::is_ok).unwrap();
            let first_err = reports0.iter().position(Result::is_err).unwrap();
            assert!(first_err < first_ok, "{what}: {reports0:?}");
        }
        if step == Step::ReloadFails {
            assert_eq!(
                sync.sync_mode,
                Some(SyncMode::RawResync),
                "{what}: {sync:?}"
            );
        }
        if after == After::Failover {
            let view = match file {
                File::Map => Some("/runtime/maps/hosts.map/entries"),
                File::Cert => Some("/runtime/ssl_certs/site.pem"),
                File::ErrorPage => None,
            };
            if let Some(view) = view {
                let reqs = requests(&self.pods[0]).await;
                assert!(
                    reqs.iter().any(|(m, p)| m == "GET" && p.ends_with(view)),
                    "{what}: with no record, what HAProxy loaded was read ({view}): {reqs:?}"
                );
            }
        }
        self.h.wait_applied(r, &self.eps).await;
        assert!(
            reports(&self.h, &p1, r).iter().all(Result::is_ok),
            "{what}: pod 1 never failed"
        );
        for pod in &self.pods {
            wait_serves(pod, &new).await;
        }
        let after_counts = reload_counts(&self.pods).await;
        let delta: Vec<usize> = after_counts
            .iter()
            .zip(&before)
            .map(|(a, b)| a - b)
            .collect();
        let writes = |log: Vec<RequestRecord>| -> Vec<String> {
            log.into_iter()
                .filter(|r| r.method != "GET")
                .map(|r| format!("{} {} {} {}", r.method, r.path, r.query, r.status))
                .collect()
        };
        let logs = (
            writes(request_log(&self.pods[0]).await),
            writes(request_log(&self.pods[1]).await),
            self.h.journal.endpoints_files().unwrap(),
        );
        match (after, file) {
            // A certificate and the weight are applied at runtime.
            (After::Retry, File::Cert) => {
                assert_eq!(delta, vec![0, 0], "{what}: reloads; writes {logs:#?}");
            }
            (After::Retry, _) => assert_eq!(delta, vec![1, 1], "{what}: reloads; writes {logs:#?}"),
            // The fresh deployer cannot see whether HAProxy loaded the error page (no runtime
            // view): one more reload on each pod on its first sync.
            (After::Failover, _) => assert!(
                delta[0] >= 1 && delta.iter().all(|d| *d <= 2),
                "{what}: reloads {delta:?}"
            ),
        }
        assert_no_transactions(&self.pods, &what).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployer_reports_a_file_applied_only_once_haproxy_loaded_it_after_any_failure() {
    let sb = sandbox(2).await;
    let pods = sb.pods();
    let eps = endpoints(&sb);
    let h = Harness::start(&journal_path(&sb), &sb, knobs()).await;
    h.lead(&eps).await;
    let want = Want {
        weight: 1,
        map: 0,
        page: 0,
        reissued: false,
    };
    let r = h.feed_files(&want.config(), want.files(), "base").await;
    h.wait_applied(r, &eps).await;
    for pod in &pods {
        wait_serves(pod, &want).await;
    }
    let mut t = Table {
        sb,
        pods,
        eps,
        h,
        term: 1,
        want,
    };
    use {After::*, File::*, Step::*};
    let rows = [
        (Map, ReloadFails, Retry),
        (Map, VersionRead, Retry),
        (Map, TransactionStart, Retry),
        (Map, Timeout, Retry),
        (ErrorPage, ReloadFails, Retry),
        (ErrorPage, VersionRead, Retry),
        (ErrorPage, TransactionStart, Retry),
        (ErrorPage, Timeout, Retry),
        (Cert, VersionRead, Retry),
        (Cert, Timeout, Retry),
        (Map, ReloadFails, Failover),
        (Map, VersionRead, Failover),
        (Map, TransactionStart, Failover),
        (Map, Timeout, Failover),
        (ErrorPage, ReloadFails, Failover),
        (Cert, VersionRead, Failover),
    ];
    for (file, step, after) in rows {
        let started = std::time::Instant::now();
        t.row(file, step, after).await;
        eprintln!("row {file:?}/{step:?}/{after:?}: {:?}", started.elapsed());
    }
    t.h.stop().await;
}
