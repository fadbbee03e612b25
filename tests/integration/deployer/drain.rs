//! A drain whose bound passes cancels the deployment but keeps it journaled (J2, J9): a new
//! scheduler shell on the same journal resumes it on `BecameLeader`.

use std::time::Duration;

use haptic_journal::{Event, Queue};

use super::harness::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployer_drain_cancel_keeps_the_deployment_for_the_next_leader() {
    // Slow reloads keep the deployment in flight longer than the drain bound.
    let (sb, h, eps, r) = Harness::in_flight(2, 4000).await;
    let pods = sb.pods();
    h.scheduler.drain(Duration::from_millis(50)).await;
    h.settle().await;
    assert!(
        h.events().iter().any(
            |e| matches!(e, Event::DeploymentCancelRequest { reason, .. } if reason == "drain")
        ),
        "the drain cancelled the deployment"
    );
    assert!(
        !h.events()
            .iter()
            .any(|e| matches!(e, Event::DeploymentCompleted { .. })),
        "the deployment did not finish within the bound"
    );
    let inflight = h.journal.queue(Queue::DeployInflight).unwrap().len();
    let pending = h.journal.queue(Queue::DeployPending).unwrap().len();
    assert_eq!(
        inflight + pending,
        1,
        "the cancelled deployment stays journaled (inflight {inflight}, pending {pending})"
    );
    h.stop().await;
    for pod in &pods {
        clear_faults(pod).await;
    }

    // The next leader on this journal deploys the render.
    let h = Harness::start(&journal_path(&sb), &sb, Knobs::default()).await;
    h.become_leader(2).await;
    h.wait_applied(r, &eps).await;
    for pod in &pods {
        wait_answer(pod, "render 02-maps shop-v1", shop).await;
    }
    h.stop().await;
}
