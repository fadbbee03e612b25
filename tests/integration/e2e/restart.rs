//! SIGKILL the single controller in the middle of the stream (during a deployment): after a
//! restart on the same journal it resumes and ends in the state an uninterrupted run ends in
//! (the one `stream::render_stream_reaches_every_pod_and_is_published` checks).

use std::collections::BTreeMap;

use haptic_journal::{Event, Journal, JournalOptions, Seq};

use super::{
    Published, answers, bounds, checksum, feed, invalid_removed, opts, published, rejected, start,
    stop_cleanly, stream,
};

fn deployments_started(log: &str) -> usize {
    log.matches("deployment started").count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_stream_resumes_from_the_journal() {
    let world = start(3).await;
    let render_dir = world.dir().join("render");
    let opts = opts(&world, "solo", &render_dir);
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
            "ConfigValidated=True".to_owned()
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
