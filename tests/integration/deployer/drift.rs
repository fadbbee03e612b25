//! Drift: idle drift intervals write nothing; out-of-band edits are repaired on that pod only.

use std::time::Duration;

use haptic_journal::Event;

use super::harness::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployer_drift_checks_write_nothing_when_idle_and_repair_only_the_edited_pod() {
    let (sb, h, eps) = Harness::with_fleet(3, Knobs::drift(Duration::from_millis(700))).await;
    let pods = sb.pods();
    h.lead(&eps).await;
    let r = h.feed("02-maps", true).await;
    h.wait_applied(r, &eps).await;
    h.wait_drift_rounds(1).await;
    for pod in &pods {
        clear_requests(pod).await;
    }
    // Several idle drift intervals: every pod is read, nothing is written, nothing reloads.
    h.wait_drift_rounds(3).await;
    for pod in &pods {
        let reqs = requests(pod).await;
        assert!(
            reqs.iter().any(|(_, p)| p.ends_with("/configuration/raw")),
            "drift read the config of {}",
            pod.name
        );
        assert_eq!(writes(&reqs), vec![], "idle drift wrote to {}", pod.name);
    }
    let drift_applied = h.events().iter().any(|e| matches!(e, Event::ConfigAppliedToPod { is_drift_check: true, sync, .. } if !sync.reload_triggered));
    assert!(drift_applied, "drift checks report per pod");

    // Out-of-band config edits, without and with a version bump: repaired on that pod only.
    for (i, bump) in [(0usize, false), (1usize, true)] {
        for pod in &pods {
            clear_requests(pod).await;
        }
        let edited = "global\n    stats socket /var/run/haproxy.sock mode 600 level admin\ndefaults\n    mode http\n    timeout connect 1s\n    timeout client 5s\n    timeout server 5s\nfrontend fe_http\n    bind *:80\n    http-request return status 200 content-type text/plain string \"out of band\"\n";
        pods[i].faults().edit_config(edited, bump).await.unwrap();
        wait_answer(&pods[i], "out of band", shop).await;
        wait_answer(&pods[i], "render 02-maps shop-v1", shop).await;
        h.wait_drift_rounds(1).await;
        for (k, pod) in pods.iter().enumerate() {
            // A repair is one raw push or, since issue 14, one transaction (the edit changes
            // a modelled http-request rule).
            let pushes = config_writes(&requests(pod).await);
            if k == i {
                assert_eq!(pushes, 1, "repaired {} once", pod.name);
            } else {
                assert_eq!(pushes, 0, "{} untouched", pod.name);
            }
        }
    }
    // An out-of-band map edit on pod 2: the map is replaced there only.
    for pod in &pods {
        clear_requests(pod).await;
    }
    h.tamper_map(&pods[2], 3).await;
    h.wait_drift_rounds(1).await;
    for (k, pod) in pods.iter().enumerate() {
        let w = writes(&requests(pod).await);
        if k == 2 {
            assert!(
                w.iter()
                    .any(|(m, p)| m == "PUT" && p.contains("/storage/maps/")),
                "map replaced: {w:?}"
            );
            assert_eq!(raw_pushes(&requests(pod).await), 0, "config untouched");
        } else {
            assert_eq!(w, vec![], "{} untouched", pod.name);
        }
    }
    h.stop().await;
}
