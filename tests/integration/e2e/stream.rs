//! The whole render stream through the directory source to 3 pods, with the published objects.

use haptic::k8s::crd::HAProxyMapFile;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::ListParams;

use super::{LEASE, Peers, check_render, feed, invalid_removed, solo, stop_cleanly, stream};

on_peers!(Emulator, render_stream_reaches_every_pod_and_is_published => render_stream);

/// The stream through the directory source to 3 pods; the objects published on the way; the
/// Lease released on SIGTERM; the journal verifies.
pub async fn render_stream(peers: Peers) {
    let (world, render_dir, mut ctl) = solo(peers, 3).await;
    let mut last_passed = String::new();
    for render in stream() {
        feed(&render_dir, &render);
        last_passed = check_render(&world, &render, &last_passed).await;
        // Auxiliary objects appear with the renders that carry them.
        match render.as_str() {
            "02-maps" => {
                let maps = Api::<HAProxyMapFile>::namespaced(world.client(), world.namespace())
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
                let secrets = Api::<Secret>::namespaced(world.client(), world.namespace())
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
    invalid_removed(&world).await;
    stop_cleanly(&mut ctl);
    assert!(
        world.lease_holder(LEASE).await.is_none(),
        "the Lease is released on SIGTERM"
    );
    let journal =
        haptic_journal::Journal::open(&haptic_journal::JournalOptions::new(&ctl.opts.journal))
            .unwrap();
    let report = journal.verify().unwrap();
    assert!(report.problems.is_empty(), "{report:?}");
    world.shutdown().await;
}
