//! The whole render stream through the directory source to 3 pods, with the published objects.

use std::time::Duration;

use haptic::k8s::crd::{HAProxyCfg, HAProxyMapFile};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::ListParams;

use super::{Opts, World, checksum, feed, rejected, stream, summary};

const MAIN: &str = "e2e-haproxycfg";
const INVALID: &str = "e2e-haproxycfg-invalid";

/// Waits until the main HAProxyCfg holds `render` in its spec with every pod on it.
/// Waits (at most `bound`) until the main HAProxyCfg holds `render` on `pods` pods; `Err` with
/// the last state seen.
pub async fn published_within(
    world: &World,
    render: &str,
    pods: usize,
    bound: Duration,
) -> Result<HAProxyCfg, String> {
    let want = checksum(render);
    let deadline = std::time::Instant::now() + bound;
    let mut seen = "no HAProxyCfg".to_owned();
    loop {
        if let Some(cfg) = world.hpcfg(MAIN).await {
            let (spec, _, on) = summary(&cfg);
            if spec == want && on.len() == pods && on.iter().all(|(_, c)| *c == want) {
                return Ok(cfg);
            }
            seen = format!("spec {spec}, pods {on:?}");
        }
        if std::time::Instant::now() >= deadline {
            return Err(seen);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub async fn published(world: &World, render: &str, pods: usize) -> HAProxyCfg {
    let want = checksum(render);
    world
        .until(
            Duration::from_secs(60),
            &format!("HAProxyCfg on {render}"),
            || async {
                let cfg = world.hpcfg(MAIN).await?;
                let (spec, _, on) = summary(&cfg);
                (spec == want && on.len() == pods && on.iter().all(|(_, c)| *c == want))
                    .then_some(cfg)
            },
        )
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn render_stream_reaches_every_pod_and_is_published() {
    let world = World::start(3).await;
    let render_dir = world.dir.path().join("render");
    let opts = Opts::dir(&world, "solo", &render_dir);
    feed(&render_dir, "01-basic");
    let mut ctl = world.controller(opts);
    let mut last_passed = String::new();
    for render in stream() {
        feed(&render_dir, &render);
        if rejected(&render) {
            let want = checksum(&render);
            let invalid = world
                .until(
                    Duration::from_secs(60),
                    &format!("{INVALID} for {render}"),
                    || async {
                        world.hpcfg(INVALID).await.filter(|c| {
                            c.spec.checksum.to_string() == want
                                && c.status
                                    .as_ref()
                                    .is_some_and(|s| s.validation_error.is_some())
                        })
                    },
                )
                .await;
            let error = invalid
                .status
                .and_then(|s| s.validation_error)
                .unwrap_or_default();
            assert!(
                !error.is_empty(),
                "{render}: -invalid carries the validation error"
            );
            let main = world
                .until(Duration::from_secs(30), "ConfigPinned=True", || async {
                    let c = world.hpcfg(MAIN).await?;
                    summary(&c)
                        .1
                        .contains(&"ConfigPinned=True".to_owned())
                        .then_some(c)
                })
                .await;
            let (spec, conditions, _) = summary(&main);
            assert_eq!(
                spec,
                checksum(&last_passed),
                "{render}: the spec keeps the last passed render"
            );
            assert!(
                conditions.contains(&"ConfigValidated=False".to_owned()),
                "{conditions:?}"
            );
        } else {
            let cfg = published(&world, &render, 3).await;
            let (_, conditions, _) = summary(&cfg);
            assert!(
                conditions.contains(&"ConfigValidated=True".to_owned()),
                "{render}: {conditions:?}"
            );
            assert!(
                conditions.contains(&"ConfigPinned=False".to_owned()),
                "{render}: {conditions:?}"
            );
            last_passed = render.clone();
        }
        world
            .pods_answer(&render, Duration::from_secs(60))
            .await
            .unwrap_or_else(|e| panic!("{render}: {e}\n{}", ctl.log_tail(40)));
        // Auxiliary objects appear with the renders that carry them.
        match render.as_str() {
            "02-maps" => {
                let maps = Api::<HAProxyMapFile>::namespaced(world.client.clone(), world.ns())
                    .list(&ListParams::default())
                    .await
                    .unwrap();
                assert!(
                    maps.items
                        .iter()
                        .any(|m| m.spec.path.ends_with("/hosts.map")),
                    "an HAProxyMapFile for maps/hosts.map"
                );
            }
            "05-tls" => {
                let secrets = Api::<Secret>::namespaced(world.client.clone(), world.ns())
                    .list(&ListParams::default().labels("haproxy-haptic.org/runtime-config"))
                    .await
                    .unwrap();
                assert!(
                    !secrets.items.is_empty(),
                    "the certificate is published as a Secret"
                );
            }
            _ => {}
        }
    }
    // The last render passed: the -invalid object is gone.
    world
        .until(Duration::from_secs(30), "-invalid removed", || async {
            world.hpcfg(INVALID).await.is_none().then_some(())
        })
        .await;
    let status = ctl.stop(Duration::from_secs(30)).expect("stops on SIGTERM");
    assert!(status.success(), "exit {status:?}\n{}", ctl.log_tail(40));
    assert!(
        world.lease_holder("haptic-leader").await.is_none(),
        "the Lease is released on SIGTERM"
    );
    let journal =
        haptic_journal::Journal::open(&haptic_journal::JournalOptions::new(&ctl.opts.journal))
            .unwrap();
    let report = journal.verify().unwrap();
    assert!(report.problems.is_empty(), "{report:?}");
    world.cluster.shutdown().await;
}
