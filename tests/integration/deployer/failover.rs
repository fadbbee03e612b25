//! Failover and a rebuilt journal: a second deployer with an EMPTY journal deploys the render the
//! pods already run (certificates, a CA file, a map, a crt-list) and writes nothing and reloads
//! nothing, because every file is compared with what the pod reports, not with which journal
//! wrote it, and HAProxy's runtime views prove each loaded (issue 24). A general file (an error
//! page) has no runtime view: a deployer with no record of it reloads once, then never again. A
//! certificate re-issued under the same name (same size, new serial) is still uploaded, applied
//! at runtime with no reload (`observed-v3.4.md`), and served.
//!
//! Fixtures (`fixtures/`, self-signed test material, never real keys), made with the corpus key:
//! `site-reissued.pem`: `openssl req -new -x509 -key <key of 05-tls/ssl/site.pem>
//! -subj /CN=site.haptic.test -days 36500 -set_serial 0x5EC0DD…01` (same subject, issuer, key
//! and size as the corpus certificate); `alt.pem`: the same key, `/CN=alt.haptic.test`.

use std::path::Path;
use std::time::Duration;

use haptic_journal::{Checksum, Endpoint, Event, Queue};
use haptic_tools::sandbox::pods::PodInfo;

use super::harness::*;
use super::truth_kit::{
    REISSUED_SERIAL_HEX, SITE_SERIAL_HEX, api_get, every_kind_config, every_kind_files,
    reissued_pem, served_serial, site_pem,
};

/// Serial of `fixtures/site-reissued.pem` in decimal (`openssl x509 -serial`: 5EC0DD…01).
const REISSUED_SERIAL: &str = "540946127350749713935599286303148716407392305153";

/// Journals a render as validated (what a render source and the validator would journal).
async fn feed_render(h: &Harness, files: RenderFiles, tag: &str) -> Checksum {
    h.feed_files(&every_kind_config("failover", false), files, tag)
        .await
}

/// A deployer on the journal at `journal`, leading `term`, with `eps` discovered.
async fn leader_on(sb: &Fleet, journal: &Path, term: u64, eps: &[Endpoint]) -> Harness {
    let h = Harness::start(journal, sb, Knobs::default()).await;
    h.become_leader(term).await;
    h.discover(eps.to_vec()).await;
    h
}

/// Bounded wait until every endpoint's journaled state runs `render` and nothing is queued.
/// `bound` comes from the configured deployment timeout and stays below the drift interval, so
/// a drift check cannot be what makes it pass.
async fn wait_deployed(h: &Harness, render: Checksum, eps: &[Endpoint], bound: Duration) {
    wait_for("every pod runs the render", bound, || {
        let applied = h.journal.endpoints_applied().unwrap();
        let all = eps.iter().all(|e| {
            applied
                .iter()
                .any(|a| a.endpoint == e.url && a.render == render)
        });
        all && h.journal.queue(Queue::DeployInflight).unwrap().is_empty()
            && h.journal.queue(Queue::DeployPending).unwrap().is_empty()
    })
    .await;
    h.settle().await;
}

/// Succeeded reloads of one pod (the sandbox keeps every reload of the endpoint's life).
async fn reloads(pod: &Pod) -> usize {
    pod.reload_count().await
}

/// `GET .../storage/ssl_certificates/{name}` as the pod answers it.
async fn certificate_meta(pod: &Pod, name: &str) -> serde_json::Value {
    let (status, meta) = api_get(
        pod,
        &format!("services/haproxy/storage/ssl_certificates/{name}"),
    )
    .await;
    assert_eq!(status, 200, "{}: certificate {name}: {meta}", pod.name);
    meta
}

/// Waits (bounded) until the pod serves the certificate with `serial` for `sni`.
async fn wait_serial(pod: &PodInfo, sni: &str, serial: &str, bound: Duration) {
    let mut got = String::new();
    wait_for("the pod serves the certificate", bound, || {
        got = served_serial(pod, sni);
        got == serial
    })
    .await;
}

fn site_answer(p: &PodInfo) -> String {
    curl(
        p,
        "https",
        443,
        Some("shop.haptic.test"),
        Some("site.haptic.test"),
    )
}

/// ConfigAppliedToPod events of `render` without an error, by pod name.
fn applied_to(h: &Harness, render: Checksum) -> Vec<(String, haptic_journal::SyncMetadata)> {
    h.events()
        .into_iter()
        .filter_map(|e| match e {
            Event::ConfigAppliedToPod {
                pod,
                checksum,
                sync,
                ..
            } if checksum == render && sync.error.is_none() => {
                Some((pod.name.as_str().to_owned(), sync))
            }
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployer_with_an_empty_journal_leaves_pods_that_run_the_render_alone() {
    let sb = sandbox(2).await;
    let dir = tempfile::tempdir().unwrap();
    let eps = endpoints(&sb);
    let pods = sb.pods();
    let knobs = Knobs::default();
    let bound = knobs.timeout * 2;
    assert!(
        bound < knobs.drift,
        "a drift check must not be what converges"
    );

    // The first leader deploys the render.
    let h = leader_on(&sb, &dir.path().join("first.redb"), 1, &eps).await;
    let r = feed_render(&h, every_kind_files(site_pem(), false), "a").await;
    wait_deployed(&h, r, &eps, bound).await;
    for pod in &pods {
        wait_answer(pod, "failover sni=site.haptic.test shop-v1", site_answer).await;
        wait_answer(pod, "failover sni=alt.haptic.test no-route", |p| {
            curl(p, "https", 443, None, Some("alt.haptic.test"))
        })
        .await;
        wait_serial(pod, "site.haptic.test", SITE_SERIAL_HEX, bound).await;
    }
    h.stop().await;

    // A second deployer with an empty journal (a failover, a rebuilt journal) deploys it again.
    let before = mark(&pods).await;
    let h = Harness::start(&dir.path().join("second.redb"), &sb, Knobs::default()).await;
    assert!(
        h.journal.endpoints_applied().unwrap().is_empty(),
        "empty journal"
    );
    h.become_leader(2).await;
    h.discover(eps.clone()).await;
    let r2 = feed_render(&h, every_kind_files(site_pem(), false), "a-again").await;
    assert_eq!(r2, r, "the same render");
    wait_deployed(&h, r, &eps, bound).await;
    for (pod, before) in pods.iter().zip(&before) {
        let reqs = requests(pod).await;
        assert_eq!(
            writes(&reqs),
            vec![],
            "{}: no upload, no push, no delete on a pod that runs the render",
            pod.name
        );
        assert!(
            reqs.iter()
                .any(|(m, p)| m == "GET" && p.ends_with("/storage/ssl_certificates/site.pem")),
            "{}: the certificate was compared by its metadata",
            pod.name
        );
        for view in [
            "/runtime/maps/hosts.map/entries",
            "/runtime/ssl_certs/site.pem",
            "/runtime/ssl_crt_lists/entries",
        ] {
            assert!(
                reqs.iter().any(|(m, p)| m == "GET" && p.ends_with(view)),
                "{}: with no record, what HAProxy loaded was read ({view}): {reqs:?}",
                pod.name
            );
        }
        assert_eq!(reloads(pod).await, *before, "{}: no reload", pod.name);
    }
    // Every pod is still reported (a no-op included).
    let applied = applied_to(&h, r);
    for pod in &pods {
        let sync = applied
            .iter()
            .find(|(name, _)| *name == pod.name)
            .map(|(_, s)| s.clone())
            .unwrap_or_else(|| panic!("{}: ConfigAppliedToPod reported: {applied:?}", pod.name));
        assert!(!sync.reload_triggered, "{}", pod.name);
        assert_eq!(sync.operation_counts.ssl_certs.modified, 0, "{}", pod.name);
    }

    // An error page: the deployer uploads it with the configuration that names it; a third
    // deployer with an empty journal cannot see whether HAProxy loaded it (no runtime view of
    // general files): one reload, a push of the same configuration, and nothing after that.
    let with_page = every_kind_config("failover", true);
    let r_page = h
        .feed_files(&with_page, every_kind_files(site_pem(), true), "error-page")
        .await;
    wait_deployed(&h, r_page, &eps, bound).await;
    h.stop().await;
    let h3 = leader_on(&sb, &dir.path().join("third.redb"), 3, &eps).await;
    let before = mark(&pods).await;
    let again = h3
        .feed_files(
            &with_page,
            every_kind_files(site_pem(), true),
            "error-page-again",
        )
        .await;
    assert_eq!(again, r_page);
    wait_deployed(&h3, r_page, &eps, bound).await;
    for (pod, before) in pods.iter().zip(&before) {
        assert_eq!(
            writes(&requests(pod).await),
            vec![(
                "POST".to_owned(),
                "/v3/services/haproxy/configuration/raw".to_owned()
            )],
            "{}: one push of the same configuration loads the error page",
            pod.name
        );
        assert_eq!(reloads(pod).await, before + 1, "{}: one reload", pod.name);
    }
    h3.stop().await;
    // Recorded loaded: a later deployment by that journal does not reload for it again.
    let h = leader_on(&sb, &dir.path().join("third.redb"), 4, &eps).await;

    // A certificate re-issued under the same name and with the same size: uploaded, applied at
    // runtime (the Data Plane API takes a certificate PUT without a reload), served.
    let reissued = reissued_pem();
    assert_eq!(reissued.len(), site_pem().len());
    let before = mark(&pods).await;
    let r3 = h
        .feed_files(&with_page, every_kind_files(reissued, true), "reissued")
        .await;
    wait_deployed(&h, r3, &eps, bound).await;
    for (pod, before) in pods.iter().zip(&before) {
        let written: Vec<String> = writes(&requests(pod).await)
            .into_iter()
            .map(|(m, p)| format!("{m} {p}"))
            .collect();
        assert_eq!(
            written,
            vec!["PUT /v3/services/haproxy/storage/ssl_certificates/site.pem".to_owned()],
            "{}: only the re-issued certificate (applied at runtime; the configuration and \
             the error page, recorded loaded, unchanged)",
            pod.name
        );
        assert_eq!(reloads(pod).await, *before, "{}: no reload", pod.name);
        assert_eq!(
            certificate_meta(pod, "site.pem").await["serial"],
            REISSUED_SERIAL,
            "{}",
            pod.name
        );
        wait_serial(pod, "site.haptic.test", REISSUED_SERIAL_HEX, bound).await;
        wait_answer(pod, "failover sni=site.haptic.test shop-v1", site_answer).await;
    }
    h.stop().await;
}
