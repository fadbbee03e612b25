//! The CRDs missing at start (issue 13, "Faults without a crash"): the fleet is still deployed
//! (deployment needs no custom resource), the log names what to apply, `/readyz` is not ready
//! naming the missing resource types, and once the CRDs are applied the HAProxyCfg is published
//! with every pod on it, without a restart.

use super::telemetry::get;
use super::{MAIN, Peers, answers, bounds, kubectl_ok, published, solo_without_crds};

on_peers!(
    Emulator,
    crds_missing_at_start_are_named_then_published_once_applied => crds_missing,
);

const CRDS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/crds");

pub async fn crds_missing(peers: Peers) {
    let (world, ctl) = solo_without_crds(peers, 2, "02-maps").await;
    answers(&world, "02-maps").await;
    ctl.eventually(
        bounds().follow_up(),
        "a warning naming the CRDs to apply",
        || async {
            let log = ctl.log_text();
            log.contains("apply the CRDs")
                .then_some(())
                .ok_or("no warning yet".to_owned())
        },
    )
    .await;
    let metrics = ctl.metrics_addr().await;
    let (status, body) = get(metrics, "/readyz").await;
    assert_eq!(status, 503, "not ready while the CRDs are missing: {body}");
    assert!(
        body.contains("haproxycfgs") || body.contains("CRD"),
        "/readyz names what is missing: {body}"
    );
    assert!(world.hpcfg(MAIN).await.is_none());
    kubectl_ok(&world, &["apply", "-f", CRDS]);
    published(&world, "02-maps", 2).await;
    ctl.eventually(bounds().follow_up(), "/readyz ready", || async {
        let (status, body) = get(metrics, "/readyz").await;
        (status == 200)
            .then_some(())
            .ok_or(format!("{status}: {body}"))
    })
    .await;
    drop(ctl);
    world.shutdown().await;
}
