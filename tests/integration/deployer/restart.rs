//! Restart mid-deployment: drop the shell, reopen the journal, resume; no duplicate push.

use std::time::Duration;

use haptic_journal::{Event, Queue};

use super::harness::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployer_restart_mid_deployment_resumes_and_pushes_each_pod_once() {
    // Slow reloads keep the deployment in flight long enough to stop it in the middle.
    let (sb, h, eps, r) = Harness::in_flight(3, 3000).await;
    let pods = sb.pods();
    // Wait until every pod got its push (the reloads are still running).
    eventually(
        Knobs::default().timeout,
        "every pod to get its push",
        || async {
            let mut pushes = Vec::new();
            for pod in &pods {
                pushes.push(raw_pushes(&requests(pod).await));
            }
            pushes
                .iter()
                .all(|n| *n == 1)
                .then_some(())
                .ok_or(format!("raw pushes per pod: {pushes:?}"))
        },
    )
    .await;
    assert_eq!(
        h.journal.queue(Queue::DeployInflight).unwrap().len(),
        1,
        "in flight"
    );
    h.stop().await; // drops the shell mid-deployment; the journal closes with it
    tokio::time::sleep(Duration::from_millis(200)).await;

    let h = Harness::start(&journal_path(&sb), &sb, Knobs::default()).await;
    assert_eq!(
        h.journal.queue(Queue::DeployInflight).unwrap().len(),
        1,
        "in-flight slot survived"
    );
    h.become_leader(2).await;
    h.wait_applied(r, &eps).await;
    // The observer sees the completion after its commit; wait for it, then count.
    wait_for("completion dispatched", Duration::from_secs(10), || {
        h.events()
            .iter()
            .any(|e| matches!(e, Event::DeploymentCompleted { .. }))
    })
    .await;
    let completed: Vec<_> = h
        .events()
        .into_iter()
        .filter(|e| matches!(e, Event::DeploymentCompleted { succeeded: 3, .. }))
        .collect();
    assert_eq!(
        completed.len(),
        1,
        "the resumed deployment completed once: {:#?}",
        h.events().iter().map(|e| e.kind()).collect::<Vec<_>>()
    );
    each_pushed_once_answering(
        &pods,
        "received the config once",
        "render 02-maps shop-v1",
        shop,
    )
    .await;
    h.stop().await;
}
