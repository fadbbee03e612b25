//! SIGKILL the single controller in the middle of the stream (during a deployment): after a
//! restart on the same journal it resumes and ends in the state an uninterrupted run ends in
//! (the one `stream::render_stream_reaches_every_pod_and_is_published` checks).

use std::collections::BTreeMap;
use std::time::Duration;

use haptic_journal::{Event, Journal, JournalOptions, Seq};

use super::stream::{published, published_within};
use super::{
    Opts, SLOW_DRIFT, World, checksum, fast, feed, rejected, restart_bound, stream, summary,
};

fn deployments_started(log: &str) -> usize {
    log.matches("deployment started").count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_stream_resumes_from_the_journal() {
    let world = World::start(3).await;
    let render_dir = world.dir.path().join("render");
    let mut opts = Opts::dir(&world, "solo", &render_dir);
    // Drift must not be what repairs the fleet after the restart.
    opts.extra.extend(SLOW_DRIFT.map(String::from));
    feed(&render_dir, "01-basic");
    let mut ctl = world.controller(opts.clone());
    let renders = stream();
    let kill_at = "06-crtlist";
    for render in &renders {
        let before = deployments_started(&ctl.log_text());
        feed(&render_dir, render);
        if render == kill_at {
            // Kill while the deployment of this render runs.
            world
                .until(
                    Duration::from_secs(30),
                    "the deployment of 06 to start",
                    || async { (deployments_started(&ctl.log_text()) > before).then_some(()) },
                )
                .await;
            ctl.kill();
            ctl = world.controller(opts.clone());
            // The resumed deployment reaches every pod and the status says so, within what the
            // configured intervals allow (no drift check can run in that time).
            let bound = restart_bound();
            published_within(&world, render, 3, bound)
                .await
                .unwrap_or_else(|seen| {
                    panic!(
                        "{render} not published on every pod within {bound:?} of the restart; \
                         last seen {seen}\n{}",
                        ctl.log_tail(40)
                    )
                });
        }
        if !rejected(render) {
            published(&world, render, 3).await;
        }
        world
            .pods_answer(render, Duration::from_secs(60))
            .await
            .unwrap_or_else(|e| panic!("{render}: {e}\n{}", ctl.log_tail(40)));
    }
    let last = renders.last().unwrap();
    let cfg = published(&world, last, 3).await;
    let (spec, conditions, pods) = summary(&cfg);
    assert_eq!(spec, checksum(last));
    assert_eq!(
        conditions,
        vec![
            "ConfigPinned=False".to_owned(),
            "ConfigValidated=True".to_owned(),
            "Published=True".to_owned()
        ]
    );
    assert!(pods.iter().all(|(_, c)| *c == checksum(last)), "{pods:?}");
    world
        .until(Duration::from_secs(30), "-invalid removed", || async {
            world
                .hpcfg("e2e-haproxycfg-invalid")
                .await
                .is_none()
                .then_some(())
        })
        .await;
    assert!(
        ctl.stop(Duration::from_secs(30))
            .is_some_and(|s| s.success())
    );
    // Nothing took effect twice: one ConfigPublished per checksum among the journaled events.
    let journal = Journal::open(&JournalOptions::new(&opts.journal)).unwrap();
    assert!(journal.verify().unwrap().problems.is_empty());
    let mut published_per_render: BTreeMap<String, usize> = BTreeMap::new();
    for (_, _, e) in journal.events(Seq(1), usize::MAX).unwrap() {
        if let Event::ConfigPublished {
            render,
            runtime_config,
            ..
        } = e
            && !runtime_config.name.as_str().ends_with("-invalid")
        {
            *published_per_render.entry(render.to_string()).or_default() += 1;
        }
    }
    assert!(
        published_per_render.values().all(|n| *n == 1),
        "one ConfigPublished per render: {published_per_render:?}"
    );
    world.cluster.shutdown().await;
}

/// An out-of-band config an operator (or a broken pod) put behind the Dataplane API's back.
const OUT_OF_BAND: &str = "global\n    stats socket /var/run/haproxy.sock mode 600 level admin\ndefaults\n    mode http\n    timeout connect 1s\n    timeout client 5s\n    timeout server 5s\nfrontend fe_http\n    bind *:80\n    http-request return status 200 content-type text/plain string \"out of band\"\n";

/// Deploys `render` with a first controller, stops it gracefully (SIGTERM) and starts a second
/// one on the same journal with the render unchanged: the source sends nothing new, so all the
/// second one knows of the render is what the journal restored.
async fn gracefully_restarted(
    world: &World,
    render: &str,
    pods: usize,
    extra: &[&str],
) -> (super::Controller, Opts) {
    let render_dir = world.dir.path().join("render");
    let mut opts = Opts::dir(world, "solo", &render_dir);
    opts.extra.extend(extra.iter().map(|s| (*s).to_owned()));
    feed(&render_dir, render);
    let mut ctl = world.controller(opts.clone());
    published(world, render, pods).await;
    let status = ctl.stop(Duration::from_secs(30));
    assert!(
        status.is_some_and(|s| s.success()),
        "graceful stop: {status:?}\n{}",
        ctl.log_tail(40)
    );
    let ctl = world.controller(opts.clone());
    (ctl, opts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_graceful_restart_with_an_unchanged_render_drift_is_still_repaired() {
    // Before: the scheduler's last validated render came back only from a pending or in-flight
    // slot, so after a clean stop the drift check had nothing to compare the pods with.
    let world = World::start(2).await;
    let drift = Duration::from_secs(6);
    let (ctl, _) =
        gracefully_restarted(&world, "02-maps", 2, &["--drift-prevention-interval", "6s"]).await;
    // Leading again (the old Lease was released on the clean stop).
    world
        .until(
            restart_bound(),
            "the restarted controller to lead",
            || async {
                (world.lease_holder("haptic-leader").await.as_deref() == Some("solo")).then_some(())
            },
        )
        .await;
    let pod = &world.pods()[0];
    let resp = super::http()
        .post(format!("{}/_sandbox/edit-config", pod.dataplane_url))
        .body(OUT_OF_BAND)
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "edit-config: {}", resp.status());
    // The next drift check (one interval) plus one deployment repairs it.
    let bound = drift + fast("--min-deployment-interval") + fast("--deployment-timeout");
    world
        .pods_answer("02-maps", bound)
        .await
        .unwrap_or_else(|e| panic!("not repaired within {bound:?}: {e}\n{}", ctl.log_tail(40)));
    world.cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_graceful_restart_a_new_pod_and_a_rejected_render_get_the_last_passed_one() {
    let world = World::start(3).await;
    // The third pod's Pod object appears only after the restart.
    let late = world.pods()[2].clone();
    world.cluster.kube.delete_pod(&late.name).await;
    let (ctl, _) = gracefully_restarted(&world, "05-tls", 2, &SLOW_DRIFT).await;
    world.cluster.kube.register_pod(&late).await.unwrap();
    // Discovery (the lease first), then one deployment after the rate limit: no drift check
    // can run in that time.
    let bound = restart_bound();
    published_within(&world, "05-tls", 3, bound)
        .await
        .unwrap_or_else(|seen| {
            panic!(
                "the pod added after the restart did not get 05 within {bound:?}; last seen \
                 {seen}\n{}",
                ctl.log_tail(40)
            )
        });
    world
        .pods_answer("05-tls", bound)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", ctl.log_tail(40)));
    // A rejected render falls back to the last passed one: a validation_fallback deployment.
    let render_dir = world.dir.path().join("render");
    feed(&render_dir, "08-invalid");
    world
        .until(
            bound + fast("--min-deployment-interval"),
            "a validation_fallback deployment of the last passed render",
            || async {
                ctl.log_text()
                    .lines()
                    .any(|l| l.contains("deployment started") && l.contains("validation_fallback"))
                    .then_some(())
            },
        )
        .await;
    // The fleet keeps the last passed render.
    world
        .pods_answer("05-tls", bound)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", ctl.log_tail(40)));
    world.cluster.shutdown().await;
}
