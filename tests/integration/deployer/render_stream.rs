//! The render corpus as a stream to 3 real HAProxy pods: each render's documented answer comes
//! back from every pod; 08/09 (rejected) keep the fleet on 07; 10 releases it.

use haptic::dataplane::{ClientSettings, Dataplane, Endpoint as DpEndpoint, StorageKind};
use haptic_journal::Event;

use super::harness::*;

type Probe = fn(&haptic_tools::sandbox::pods::PodInfo) -> String;

fn probes() -> Vec<(&'static str, &'static str, Probe)> {
    vec![
        ("01-basic", "render 01-basic", |p| {
            curl(p, "http", 80, None, None)
        }),
        ("02-maps", "render 02-maps shop-v1", shop),
        ("03-maps-changed", "render 03-maps-changed shop-v2", shop),
        ("04-errors", "render 04-errors", |p| {
            curl(p, "http", 80, None, None)
        }),
        ("05-tls", "render 05-tls ssl=1", |p| {
            curl(p, "https", 443, None, None)
        }),
        (
            "06-crtlist",
            "render 06-crtlist sni=site.haptic.test",
            |p| curl(p, "https", 443, None, Some("site.haptic.test")),
        ),
        ("07-ca", "render 07-ca client-cert=0", |p| {
            curl(p, "https", 443, None, None)
        }),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployer_render_stream_reaches_every_pod_and_rejected_renders_keep_the_fleet_pinned() {
    let (sb, h, eps) = Harness::with_fleet(3, Knobs::default()).await;
    h.lead(&eps).await;
    let pods = sb.pods();
    let dp = Dataplane::new(&ClientSettings::default()).unwrap();
    for (name, want, probe) in probes() {
        let render = h.feed(name, true).await;
        h.wait_applied(render, &eps).await;
        for pod in &pods {
            wait_answer(pod, want, probe).await;
        }
        if name == "04-errors" {
            // The maps of 02/03 are no longer referenced: deleted once 04 was live.
            for pod in &pods {
                let c = dp.client(DpEndpoint::new(
                    pod.dataplane_url.parse().unwrap(),
                    Some(sb.pods()[0].credentials()),
                ));
                assert!(c.list_storage(StorageKind::Map).await.unwrap().is_empty());
            }
        }
    }
    // 08 and 09 are rejected: the fallback redeploys 07, which every pod already runs: no push.
    for pod in &pods {
        clear_requests(pod).await;
    }
    let completed_before = count_completed(&h);
    h.feed("08-invalid", false).await;
    h.feed("09-missing-map", false).await;
    wait_for(
        "fallback deployments complete",
        std::time::Duration::from_secs(30),
        || {
            count_completed(&h) > completed_before
                && h.journal
                    .queue(haptic_journal::Queue::DeployInflight)
                    .unwrap()
                    .is_empty()
                && h.journal
                    .queue(haptic_journal::Queue::DeployPending)
                    .unwrap()
                    .is_empty()
        },
    )
    .await;
    let fallback = h.events().iter().any(|e| {
        matches!(e, Event::DeploymentScheduled { reason, .. } if reason.as_str() == "validation_fallback")
    });
    assert!(fallback, "validation_fallback scheduled");
    for pod in &pods {
        wait_answer(pod, "render 07-ca client-cert=0", |p| {
            curl(p, "https", 443, None, None)
        })
        .await;
        let reqs = requests(pod).await;
        assert_eq!(
            writes(&reqs),
            vec![],
            "pinned fleet: nothing written to {}",
            pod.name
        );
    }
    // 10 releases the pin.
    let render = h.feed("10-large-map", true).await;
    h.wait_applied(render, &eps).await;
    for pod in &pods {
        wait_answer(pod, "render 10-large-map backend-", |p| {
            curl(p, "http", 80, Some("host00042.haptic.test"), None)
        })
        .await;
    }
    // Per-pod outcomes were published for the publisher, and deploy-driven publication requests.
    let ev = h.events();
    assert!(ev.iter().any(
        |e| matches!(e, Event::DeployedConfigPublishRequest { render: r, .. } if *r == render)
    ));
    let applied = ev
        .iter()
        .filter(|e| matches!(e, Event::ConfigAppliedToPod { checksum, sync, .. } if *checksum == render && sync.error.is_none()))
        .count();
    assert_eq!(applied, 3);
    // A graceful leader stop with nothing in flight returns at once.
    h.scheduler.drain(std::time::Duration::from_secs(5)).await;
    h.stop().await;
}

fn count_completed(h: &Harness) -> usize {
    h.events()
        .iter()
        .filter(|e| matches!(e, Event::DeploymentCompleted { .. }))
        .count()
}
