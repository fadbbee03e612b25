//! Per-pod deployment history (issue 28): every sync the deployer makes is one record in the
//! journal's `pod_history` (schema 4), in order, with its render, mode, reload and result; a
//! failed sync is recorded as failed, and its retry as the sync that applied the render; an
//! idle drift check (nothing to change) is not recorded; "which pods ran render R" answers from
//! the same table.

use std::time::Duration;

use haptic_journal::{Journal, JournalOptions, SyncMode, SyncResult, UnixMillis};
use serde_json::json;

use super::harness::*;

/// A render: fe_http to be_app with `web-1 <server>`, then `extra` sections.
fn render(server: &str, extra: &str) -> String {
    format!(
        "{HEAD}frontend fe_http\n    bind *:80\n    default_backend be_app\nbackend be_app\n    server web-1 {server}\n{extra}"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_sync_is_one_history_record_in_order_with_its_mode_reload_and_result() {
    let sb = sandbox(2).await;
    // Drift checks every second: an idle one (nothing to change) is not history.
    let drift = Duration::from_secs(1);
    let (h, eps) = Harness::on(&sb, Knobs::drift(drift)).await;
    h.lead(&eps).await;
    let steps = [
        render("127.0.0.1:9101 weight 10", ""),
        render("127.0.0.1:9101 weight 50", ""),
        render(
            "127.0.0.1:9101 weight 50",
            "backend be_new\n    server n1 127.0.0.1:9102\n",
        ),
    ];
    let mut renders = Vec::new();
    for (i, config) in steps.iter().enumerate() {
        let r = h.feed_config(config, &format!("step-{i}")).await;
        h.wait_applied(r, &endpoints(&sb)).await;
        renders.push(r);
    }
    // The first pod's next reload fails: its sync fails, the retry applies the render.
    let pods = sb.pods();
    fault(&pods[0], json!({"reload": "fail", "times": 1})).await;
    let last = h
        .feed_config(
            &render(
                "127.0.0.1:9101 weight 50",
                "backend be_new\n    server n1 127.0.0.1:9102\n    server n2 127.0.0.1:9103\n",
            ),
            "step-3",
        )
        .await;
    h.wait_applied(last, &endpoints(&sb)).await;
    renders.push(last);
    // Idle drift checks of every pod after the last deployment.
    let idle_checks = |h: &Harness| {
        h.events()
            .iter()
            .filter(|e| {
                matches!(e, haptic_journal::Event::ConfigAppliedToPod { is_drift_check: true, checksum, sync, .. }
                    if *checksum == last && sync.error.is_none() && !sync.reload_triggered)
            })
            .count()
    };
    wait_for(
        "two idle drift checks of each pod",
        4 * drift + Duration::from_secs(10),
        || {
            (idle_checks(&h) >= 4)
                .then_some(())
                .ok_or(format!("{} so far", idle_checks(&h)))
        },
    )
    .await;
    h.stop().await;

    let j = Journal::open(&JournalOptions::new(journal_path(&sb)).read_only(true)).unwrap();
    let term = j.term().unwrap();
    for (i, ep) in endpoints(&sb).iter().enumerate() {
        let records = j
            .pod_history(&ep.pod, UnixMillis(0), UnixMillis(u64::MAX))
            .unwrap();
        let summary: Vec<(usize, Option<SyncMode>, bool, bool)> = records
            .iter()
            .map(|r| {
                (
                    renders.iter().position(|c| *c == r.render).unwrap(),
                    r.mode,
                    r.reloaded,
                    matches!(r.result, SyncResult::Applied),
                )
            })
            .collect();
        let mut want = vec![
            (0, Some(SyncMode::RawInitial), true, true),
            (1, Some(SyncMode::Runtime), false, true),
            (2, Some(SyncMode::FineGrained), true, true),
        ];
        if i == 0 {
            // The failed sync records what it planned (one transaction) and no reload (it could
            // not confirm one); the retry finds the API's configuration and file apart and
            // pushes the whole render.
            want.push((3, Some(SyncMode::FineGrained), false, false));
            want.push((3, Some(SyncMode::RawResync), true, true));
        } else {
            want.push((3, Some(SyncMode::FineGrained), true, true));
        }
        assert_eq!(summary, want, "{}: {records:#?}", ep.pod.name);
        for r in &records {
            assert_eq!(r.endpoint, ep.url);
            assert_eq!(r.term, term, "one leader term");
            assert!(r.started_at <= r.ended_at, "{r:?}");
            assert!(!r.reloaded || r.reload_id.is_some(), "{r:?}");
        }
        assert!(
            records.windows(2).all(|w| w[0].ended_at <= w[1].started_at),
            "one pod's syncs do not overlap and come in order: {records:#?}"
        );
        if i == 0 {
            assert!(
                matches!(&records[3].result, SyncResult::Failed { message } if message.contains("reload")),
                "{:?}",
                records[3].result
            );
            assert!(
                records[3].operations.total_api_operations > 0,
                "the failed sync's planned operations: {:?}",
                records[3].operations
            );
        }
    }
    // Which pods ran render 2: both, once each.
    let ran: Vec<String> = j
        .history_of_render(renders[2])
        .unwrap()
        .into_iter()
        .map(|r| r.pod.name.to_string())
        .collect();
    let mut want: Vec<String> = sb.pods().iter().map(|p| p.name.clone()).collect();
    want.sort();
    let mut got = ran.clone();
    got.sort();
    assert_eq!(got, want, "{ran:?}");
    assert!(j.verify().unwrap().is_clean());
}
