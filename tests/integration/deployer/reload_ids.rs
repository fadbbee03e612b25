//! Reload ids and certificates as the real Data Plane API answers them (issue 24's real-API
//! findings, issue 29; `observed-v3.4.md`), on one fleet:
//!
//! - a queued reload answers `in_progress` without an `id`: a success once it completes (a slow
//!   reload: the pod serves the render, no failure is reported, the reload is counted);
//! - a reload id the API does not know (404) and an older `succeeded` (an id older than the last
//!   success answers `succeeded` without a reload time) are not taken as the write's reload: the
//!   sync reads the pod again (HAProxy's runtime view of the map) and converges with no reload
//!   more;
//! - `@system-ca`, which the API lists among the CA files, is never deleted;
//! - a certificate update is applied at runtime (no reload) and counts as loaded: drift checks
//!   afterwards reload nothing;
//! - a certificate that is not a PEM (500 "failed to parse certificate") ends as a clear error,
//!   not retryable, rejected, and quarantined: one upload per pod over several drift rounds.

use std::sync::atomic::Ordering;
use std::time::Duration;

use haptic_journal::{AuxKind, Checksum, Endpoint, SyncMode};
use serde_json::json;

use super::harness::*;
use super::truth_kit::*;

fn config() -> String {
    format!(
        "{HEAD}frontend fe_http
    bind *:80
    bind *:443 ssl crt /etc/haproxy/ssl/site.pem
    http-request return status 200 content-type text/plain lf-string \"ids %[req.hdr(host),lower,map(/etc/haproxy/maps/hosts.map,no-route)]\"
"
    )
}

fn map(n: u32) -> String {
    format!("shop.haptic.test shop-{n}\n")
}

fn files(map_n: u32, cert: Vec<u8>) -> RenderFiles {
    vec![
        (
            AuxKind::Map,
            "maps/hosts.map".into(),
            map(map_n).into_bytes(),
        ),
        (AuxKind::Ssl, "ssl/site.pem".into(), cert),
    ]
}

/// No pod was asked to delete `@system-ca` (HAProxy's own bundle, listed among the CA files);
/// the pods do list it.
async fn assert_system_ca_kept(pods: &[Pod], what: &str) {
    for p in pods {
        let log = request_log(p).await;
        assert!(
            !log.iter()
                .any(|q| q.method == "DELETE" && q.path.contains("@system-ca")),
            "{what}: {} was asked to delete @system-ca",
            p.name
        );
        let (_, listed) = api_get(p, "services/haproxy/runtime/ssl_ca_files").await;
        assert!(
            listed.to_string().contains("@system-ca"),
            "{what}: {} lists {listed}",
            p.name
        );
    }
}

struct Fixture {
    sb: Fleet,
    pods: Vec<Pod>,
    eps: Vec<Endpoint>,
    map_n: u32,
}

impl Fixture {
    /// Feeds the next map (files only: the map's write reloads and its `Reload-ID` is polled)
    /// with pod 0's `fault` armed; waits until every pod serves it; returns the render and the
    /// reload counts before.
    async fn next_map(
        &mut self,
        h: &Harness,
        what: &str,
        faults: &[serde_json::Value],
    ) -> (Checksum, Vec<usize>) {
        reset(&self.pods).await;
        let before = reload_counts(&self.pods).await;
        for f in faults {
            fault(&self.pods[0], f.clone()).await;
        }
        self.map_n += 1;
        let r = h
            .feed_files(&config(), files(self.map_n, site_pem()), what)
            .await;
        (r, before)
    }

    /// [`Fixture::next_map`], [`Fixture::wait_served`], then [`Fixture::pod0_report`].
    async fn step(
        &mut self,
        h: &Harness,
        what: &str,
        faults: &[serde_json::Value],
    ) -> (haptic_journal::SyncMetadata, Vec<usize>) {
        let (r, before) = self.next_map(h, what, faults).await;
        self.wait_served(h, r).await;
        self.pod0_report(h, r, &before, what).await
    }

    async fn wait_served(&self, h: &Harness, r: Checksum) {
        h.wait_applied(r, &self.eps).await;
        for pod in &self.pods {
            wait_answer(pod, &format!("ids shop-{}", self.map_n), |p| {
                http_get(p, "/", Some("shop.haptic.test"))
            })
            .await;
        }
    }

    /// Pod 0's only report of `r` (no failure first) and the reloads since `before`.
    async fn pod0_report(
        &self,
        h: &Harness,
        r: Checksum,
        before: &[usize],
        what: &str,
    ) -> (haptic_journal::SyncMetadata, Vec<usize>) {
        let all = reports(h, &self.pods[0].name, r);
        assert!(
            !all.is_empty() && all.iter().all(Result::is_ok),
            "{what}: pod 0 reported no failure: {all:?}"
        );
        assert!(failures(h, &self.pods[0].name).is_empty(), "{what}");
        let after = reload_counts(&self.pods).await;
        let delta = after.iter().zip(before).map(|(a, b)| a - b).collect();
        (all[0].clone().unwrap(), delta)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployer_takes_only_its_own_reload_and_applies_certificates_at_runtime() {
    let sb = sandbox(2).await;
    let pods = sb.pods();
    let eps = endpoints(&sb);
    let h = Harness::start(&journal_path(&sb), &sb, Knobs::default()).await;
    h.lead(&eps).await;
    let mut fx = Fixture {
        sb,
        pods,
        eps,
        map_n: 0,
    };
    let r = h.feed_files(&config(), files(0, site_pem()), "base").await;
    fx.wait_served(&h, r).await;
    assert_system_ca_kept(&fx.pods, "base").await;
    let stats = &h.deployer.stats;
    assert_eq!(
        stats.mode(SyncMode::RawInitial),
        2,
        "two raw pushes counted"
    );

    // A queued reload answers in progress without an id, for as long as the reload is slow.
    let started = std::time::Instant::now();
    let what = "slow reload";
    let reloads0 = stats.reloads.load(Ordering::Relaxed);
    let (sync, delta) = fx
        .step(
            &h,
            what,
            &[json!({"reload": "slow", "times": 1, "delay_ms": 2000})],
        )
        .await;
    assert!(
        sync.reload_triggered && sync.reload_id.is_some(),
        "{what}: {sync:?}"
    );
    assert_eq!(delta, vec![1, 1], "{what}: reloads");
    let id = sync.reload_id.unwrap();
    let polls = request_log(&fx.pods[0])
        .await
        .into_iter()
        .filter(|q| q.method == "GET" && q.path.ends_with(&format!("/reloads/{id}")))
        .count();
    assert!(polls >= 2, "{what}: polled while queued ({polls} polls)");
    assert_eq!(
        stats.reloads.load(Ordering::Relaxed) - reloads0,
        2,
        "{what}: counted"
    );
    assert_system_ca_kept(&fx.pods, what).await;
    eprintln!("{what}: {:?}", started.elapsed());

    // The reload id unknown to the API (404): read the pod again; HAProxy loaded the map.
    let started = std::time::Instant::now();
    let what = "reload id 404";
    let (sync, delta) = fx
        .step(
            &h,
            what,
            &[json!({"method": "GET", "path": "/services/haproxy/reloads/", "status": 404, "times": 1})],
        )
        .await;
    assert_eq!(
        sync.version_conflict_retries, 1,
        "{what}: planned again: {sync:?}"
    );
    assert_eq!(delta, vec![1, 1], "{what}: no reload more");
    let log = request_log(&fx.pods[0]).await;
    let unknown = log
        .iter()
        .position(|q| q.path.contains("/reloads/") && q.status == 404)
        .expect("the 404 was answered");
    assert!(
        log[unknown..]
            .iter()
            .any(|q| q.method == "GET" && q.path.ends_with("/runtime/maps/hosts.map/entries")),
        "{what}: what HAProxy loaded was read after the 404"
    );
    assert_system_ca_kept(&fx.pods, what).await;
    eprintln!("{what}: {:?}", started.elapsed());

    // An older `succeeded`: the write's poll is held while another reload completes, so the
    // API answers the write's id as an old one (`succeeded`, no reload time).
    let started = std::time::Instant::now();
    let what = "older succeeded";
    let (r, before) = fx
        .next_map(
            &h,
            what,
            &[json!({"method": "GET", "path": "/services/haproxy/reloads/", "delay_ms": 6000, "times": 1})],
        )
        .await;
    let pod0 = fx.pods[0].clone();
    let b0 = before[0];
    eventually(h.converge, "the write's reload done", || {
        let pod0 = pod0.clone();
        async move {
            let n = pod0.reload_count().await;
            (n > b0).then_some(()).ok_or(format!("{} reloads", n - b0))
        }
    })
    .await;
    // Another reload by hand: the same map again, reloading.
    let resp = haptic_testkit::http()
        .put(format!(
            "{}/v3/services/haproxy/storage/maps/hosts.map",
            pod0.dataplane_url
        ))
        .basic_auth(&pod0.username, Some(&pod0.password))
        .header("content-type", "text/plain")
        .body(map(fx.map_n))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 202, "{what}: a reload by hand");
    eventually(h.converge, "the reload by hand done", || {
        let pod0 = pod0.clone();
        async move {
            let n = pod0.reload_count().await;
            (n > b0 + 1)
                .then_some(())
                .ok_or(format!("{} reloads", n - b0))
        }
    })
    .await;
    fx.wait_served(&h, r).await;
    let (sync, delta) = fx.pod0_report(&h, r, &before, what).await;
    assert_eq!(
        sync.version_conflict_retries, 1,
        "{what}: planned again: {sync:?}"
    );
    assert_eq!(
        delta,
        vec![2, 1],
        "{what}: the write's and the hand's reloads, none more"
    );
    let log = request_log(&fx.pods[0]).await;
    let poll = log
        .iter()
        .position(|q| q.method == "GET" && q.path.contains("/reloads/"))
        .expect("a poll");
    assert!(
        log[poll + 1..]
            .iter()
            .any(|q| q.method == "GET" && q.path.ends_with("/configuration/raw")),
        "{what}: the pod was read again after the old answer"
    );
    assert_system_ca_kept(&fx.pods, what).await;
    eprintln!("{what}: {:?}", started.elapsed());
    h.stop().await;

    // A fresh deployer with drift checks every 700 ms (which leave a quarantined pod alone).
    let started = std::time::Instant::now();
    let h = Harness::start(
        &fx.sb.dir().join("drift.redb"),
        &fx.sb,
        Knobs::drift(Duration::from_millis(700)),
    )
    .await;
    h.become_leader(2).await;
    h.discover(fx.eps.clone()).await;
    let r = h
        .feed_files(&config(), files(fx.map_n, site_pem()), "again")
        .await;
    h.wait_applied(r, &fx.eps).await;

    // A certificate update: applied at runtime, loaded, served; drift rounds reload nothing.
    let what = "certificate update";
    reset(&fx.pods).await;
    let before = reload_counts(&fx.pods).await;
    let r = h
        .feed_files(&config(), files(fx.map_n, reissued_pem()), what)
        .await;
    h.wait_applied(r, &fx.eps).await;
    for pod in &fx.pods {
        assert_eq!(
            loaded_serial(pod, "site.pem").await,
            REISSUED_SERIAL_HEX,
            "{what}: {}",
            pod.name
        );
        wait_answer(pod, REISSUED_SERIAL_HEX, |p| {
            served_serial(p, "site.haptic.test")
        })
        .await;
    }
    h.wait_drift_rounds(3).await;
    assert_eq!(reload_counts(&fx.pods).await, before, "{what}: no reload");
    for pod in &fx.pods {
        let w = writes(&requests(pod).await);
        assert_eq!(
            w,
            vec![(
                "PUT".to_owned(),
                "/v3/services/haproxy/storage/ssl_certificates/site.pem".to_owned()
            )],
            "{what}: {}: one write",
            pod.name
        );
    }
    for (pod, sync) in syncs(&h, r) {
        assert!(!sync.reload_triggered, "{what}: {pod}: {sync:?}");
    }

    // A certificate that is not a PEM: 500 "failed to parse certificate", permanent.
    let what = "not a PEM";
    reset(&fx.pods).await;
    let r = h
        .feed_files(
            &config(),
            files(fx.map_n, b"not a certificate\n".to_vec()),
            what,
        )
        .await;
    for pod in &fx.pods {
        wait_failed(&h, &pod.name, r).await;
    }
    h.wait_drift_triggers(3).await;
    for pod in &fx.pods {
        let all = reports(&h, &pod.name, r);
        assert_eq!(all.len(), 1, "{what}: {}: reported once: {all:?}", pod.name);
        let err = all[0].clone().unwrap_err();
        assert!(
            err.contains("ssl/site.pem") && err.contains("failed to parse certificate"),
            "{what}: {}: a clear error: {err}",
            pod.name
        );
        let rejected = h.events().into_iter().any(|e| {
            matches!(e, haptic_journal::Event::ConfigAppliedToPod { pod: p, checksum, sync, .. }
                if checksum == r && p.name.as_str() == pod.name && sync.rejected)
        });
        assert!(rejected, "{what}: {}: rejected", pod.name);
        let failed = failures(&h, &pod.name);
        assert_eq!(failed.len(), 1, "{what}: {}: {failed:?}", pod.name);
        assert!(!failed[0].1, "{what}: {}: not retryable", pod.name);
        let puts = request_log(pod)
            .await
            .into_iter()
            .filter(|q| q.method != "GET" && q.path.contains("/ssl_certificates/"))
            .count();
        assert_eq!(
            puts, 1,
            "{what}: {}: uploaded once, then quarantined",
            pod.name
        );
        // The pod keeps what it ran.
        assert_eq!(served_serial(pod, "site.haptic.test"), REISSUED_SERIAL_HEX);
    }
    assert_system_ca_kept(&fx.pods, what).await;
    eprintln!("certificates: {:?}", started.elapsed());
    h.stop().await;
}
