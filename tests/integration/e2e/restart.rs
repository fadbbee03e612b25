//! SIGKILL the single controller in the middle of the stream (during a deployment): after a
//! restart on the same journal it resumes and ends in the state an uninterrupted run ends in
//! (the one `stream::render_stream_reaches_every_pod_and_is_published` checks).

use std::collections::BTreeMap;

use haptic_journal::{Event, Journal, JournalOptions, Seq};

use super::{
    Fleet, MAIN, Peers, Published, answers, bounds, checksum, feed, invalid_removed, opts,
    published, rejected, start, stop_cleanly, stream,
};

on_peers!(
    Emulator,
    sigkill_mid_stream_resumes_from_the_journal => sigkill_mid_stream,
    after_a_graceful_restart_with_an_unchanged_render_drift_is_still_repaired =>
        graceful_restart_drift,
    after_a_graceful_restart_a_new_pod_and_a_rejected_render_get_the_last_passed_one =>
        graceful_restart_new_pod,
);

/// A drift interval no restart test can wait for (drift must not rescue a restart bug).
const SLOW_DRIFT: [&str; 2] = ["--drift-prevention-interval", "10m"];

/// Waits (at most `bound`) until the main HAProxyCfg holds `render` on `pods` pods.
async fn published_within(world: &Fleet, render: &str, pods: usize, bound: std::time::Duration) {
    let want = checksum(render);
    world
        .eventually(
            bound,
            &format!("{MAIN} on {render} with {pods} pods"),
            || async {
                let cfg = world.hpcfg(MAIN).await.ok_or(format!("no {MAIN}"))?;
                let p = Published::of(&cfg);
                p.on(&want, pods).then_some(()).ok_or(format!("{p:?}"))
            },
        )
        .await;
}

fn deployments_started(log: &str) -> usize {
    log.matches("deployment started").count()
}

/// SIGKILL during the deployment of 06; the restarted controller resumes from its journal and
/// ends where an uninterrupted run ends, with one ConfigPublished per render.
pub async fn sigkill_mid_stream(peers: Peers) {
    let world = start(peers, 3).await;
    let render_dir = world.dir().join("render");
    let mut opts = opts(&world, "solo", &render_dir);
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
            ctl.eventually(
                bounds().follow_up(),
                "the deployment of 06 to start",
                || async {
                    let n = deployments_started(&ctl.log_text());
                    (n > before)
                        .then_some(())
                        .ok_or(format!("{n} deployments started"))
                },
            )
            .await;
            ctl.kill();
            ctl = world.controller(opts.clone());
            // The resumed deployment reaches every pod and the status says so, within what the
            // configured intervals allow: the dead leader's Lease runs out, the restarted one
            // takes over and runs one deployment. No drift check can run in that time.
            published_within(&world, render, 3, bounds().takeover()).await;
        }
        if !rejected(render) {
            published(&world, render, 3).await;
        }
        answers(&world, render).await;
    }
    let last = renders.last().unwrap();
    let cfg = published(&world, last, 3).await;
    let Published {
        spec,
        conditions,
        pods,
    } = Published::of(&cfg);
    assert_eq!(spec, checksum(last));
    assert_eq!(
        conditions,
        vec![
            "ConfigPinned=False".to_owned(),
            "ConfigValidated=True".to_owned(),
            "Published=True".to_owned(),
            // Issue 15: a completed publication says the render is within the size limit.
            "SizeLimitExceeded=False".to_owned(),
            // Issue 15: every pod runs the last render.
            "Synced=True".to_owned(),
            // Issue 16's version check: the sandbox pods run the validator's HAProxy.
            "ValidatorVersionMismatch=False".to_owned()
        ]
    );
    assert!(
        pods.iter().all(|(_, c)| *c == checksum(last).to_string()),
        "{pods:?}"
    );
    invalid_removed(&world).await;
    stop_cleanly(&mut ctl);
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
    world.shutdown().await;
}

/// An out-of-band config an operator (or a broken pod) put behind the Dataplane API's back.
const OUT_OF_BAND: &str = "global\n    stats socket /var/run/haproxy.sock mode 600 level admin\ndefaults\n    mode http\n    timeout connect 1s\n    timeout client 5s\n    timeout server 5s\nfrontend fe_http\n    bind *:80\n    http-request return status 200 content-type text/plain string \"out of band\"\n";

/// Deploys `render` with a first controller, stops it gracefully (SIGTERM) and starts a second
/// one on the same journal with the render unchanged: the source sends nothing new, so all the
/// second one knows of the render is what the journal restored.
async fn gracefully_restarted(
    world: &Fleet,
    render: &str,
    pods: usize,
    extra: &[&str],
) -> super::Controller {
    let render_dir = world.dir().join("render");
    let mut opts = opts(world, "solo", &render_dir);
    opts.extra.extend(extra.iter().map(|s| (*s).to_owned()));
    feed(&render_dir, render);
    let mut ctl = world.controller(opts.clone());
    published(world, render, pods).await;
    stop_cleanly(&mut ctl);
    world.controller(opts)
}

/// After a graceful restart with an unchanged render, an out-of-band edit is still repaired by
/// the drift check (the deployer's drift repair, driven by the binary).
pub async fn graceful_restart_drift(peers: Peers) {
    // Before: the scheduler's last validated render came back only from a pending or in-flight
    // slot, so after a clean stop the drift check had nothing to compare the pods with.
    let world = start(peers, 2).await;
    let drift = std::time::Duration::from_secs(6);
    let ctl =
        gracefully_restarted(&world, "02-maps", 2, &["--drift-prevention-interval", "6s"]).await;
    ctl.eventually(
        bounds().takeover(),
        "the restarted controller to lead",
        || async {
            let holder = world.lease_holder(super::LEASE).await;
            (holder.as_deref() == Some("solo"))
                .then_some(())
                .ok_or(format!("holder {holder:?}"))
        },
    )
    .await;
    world.pods()[0]
        .faults()
        .edit_config(OUT_OF_BAND, false)
        .await
        .unwrap();
    // The next drift check (one interval) plus one deployment repairs it.
    let bound = drift + bounds().deployment();
    ctl.eventually(bound, "the drift check to repair the edited pod", || {
        world.pods_answer("02-maps")
    })
    .await;
    world.shutdown().await;
}

/// After a graceful restart, a pod registered late gets the last passed render, and a rejected
/// render makes a validation_fallback deployment of it.
pub async fn graceful_restart_new_pod(peers: Peers) {
    let world = start(peers, 3).await;
    // The third pod's Pod object appears only after the restart.
    let late = world.pods()[2].name.clone();
    world.unregister_pod(&late).await.unwrap();
    let ctl = gracefully_restarted(&world, "05-tls", 2, &SLOW_DRIFT).await;
    world.register_pod(&late).await.unwrap();
    // The Lease, discovery, then one deployment after the rate limit: no drift check can run in
    // that time.
    let bound = bounds().takeover();
    published_within(&world, "05-tls", 3, bound).await;
    ctl.eventually(bound, "every pod to answer 05", || {
        world.pods_answer("05-tls")
    })
    .await;
    // A rejected render falls back to the last passed one: a validation_fallback deployment.
    feed(&world.dir().join("render"), "08-invalid");
    ctl.eventually(
        bounds().follow_up(),
        "a validation_fallback deployment of the last passed render",
        || async {
            ctl.log_text()
                .lines()
                .any(|l| l.contains("deployment started") && l.contains("validation_fallback"))
        },
    )
    .await;
    // The fleet keeps the last passed render.
    ctl.eventually(bound, "every pod to still answer 05", || {
        world.pods_answer("05-tls")
    })
    .await;
    world.shutdown().await;
}
