//! The spec never moves backwards across a restart (DESIGN.md section 1): a deploy-driven
//! publication of an older render that arrives after a restart (a fresh publisher, its
//! in-memory render order gone) updates per-pod status only.

use haptic::components::publisher::ConfigPublisher;
use haptic_journal::{DeploymentId, Event, Identity, Queue, Term};

use super::*;

/// Renders 05 and 06 published validation-driven by a first publisher; returns (05, 06).
async fn publish_05_then_06(env: &mut Env, p: &ConfigPublisher) -> (Checksum, Checksum) {
    let r05 = env.render_and_pass(p, &corpus("05-tls")).await;
    env.wait_spec("05 published", r05).await;
    let r06 = env.render_and_pass(p, &corpus("06-crtlist")).await;
    eventually(bound(), "06 published", || async {
        env.spec_is(r06).await && env.queue_len(Queue::Publish) == 0
    })
    .await;
    (r05, r06)
}

async fn deploy_request(env: &mut Env, p: &ConfigPublisher, render: Checksum, id: &str) {
    let c = env.corr();
    let (s, ev) = env.accept(None, |_| Event::DeployedConfigPublishRequest {
        correlation: c,
        deployment: DeploymentId::new(id),
        render,
        runtime_config: runtime_config(),
    });
    env.deliver(p, s, &ev).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn older_deploy_driven_render_after_a_restart_never_moves_the_spec_back() {
    restart_then_older_deploy_request(false).await;
}

/// The same with the render events trimmed from the log before the restart (only the
/// checkpoint is left to place renders).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn older_deploy_driven_render_after_a_restart_with_trimmed_events_stays_status_only() {
    restart_then_older_deploy_request(true).await;
}

async fn restart_then_older_deploy_request(trim: bool) {
    let mut env = Env::start().await;
    let p1 = env.publisher(fast_config());
    let t1 = p1.start(Term(1));
    let (r05, r06) = publish_05_then_06(&mut env, &p1).await;
    // "kill -9": the publisher goes away without a drain; a new one starts on the same journal
    // in a new term, with nothing in memory.
    t1.cancel.cancel();
    t1.stop().await;
    drop(p1);
    if trim {
        // The 05 deployment still holds its render (as the deployer's in-flight slot would).
        let manifest = env.journal.get_render(r05).unwrap().unwrap();
        let mut b = Batch::new();
        b.hold_render(&manifest);
        env.journal.accept(b).unwrap();
        env.journal.trim().unwrap();
        let left = env.journal.events(Seq(0), usize::MAX).unwrap();
        assert!(
            !left.iter().any(
                |(_, _, e)| matches!(e, Event::TemplateRendered { render, .. } if *render == r05)
            ),
            "05's render event was not trimmed"
        );
    }
    env.journal
        .set_term(Term(2), Identity::new("replica-0"))
        .unwrap();
    let p2 = env.publisher(fast_config());
    let _t2 = p2.start(Term(2));
    // The 05 deployment's request reaches the new publisher (replayed or resumed), and pods
    // report what they run (06).
    deploy_request(&mut env, &p2, r05, "d05").await;
    env.applied(&p2, "pod-a", r06, None).await;
    eventually(
        bound(),
        "the 05 request handled and pod-a's status written",
        || async {
            env.queue_len(Queue::PublishDeployed) == 0
                && env.queue_len(Queue::StatusPending) == 0
                && env.cfg(MAIN).await.is_some_and(|c| {
                    c.status
                        .as_ref()
                        .is_some_and(|s| s.deployed_to_pods.iter().any(|e| e.pod_name == "pod-a"))
                })
        },
    )
    .await;
    let cfg = env.cfg(MAIN).await.unwrap();
    assert_eq!(cfg.spec.checksum, r06, "the spec moved back to 05");
    let cp = env.journal.published_checkpoints().unwrap();
    let main = cp.iter().find(|c| c.name.as_str() == MAIN).unwrap();
    assert_eq!(main.render, r06, "the checkpoint moved back to 05");
    // Counted by the new publisher itself: trimming may drop old `config.published` events from
    // the journal at any moment, so a count of the journal's events is not a stable baseline.
    assert_eq!(
        p2.counters()
            .config_published
            .load(std::sync::atomic::Ordering::Relaxed),
        0,
        "05 was published again"
    );
    // A later deploy-driven request for 06 itself is a repeat, and a new render still advances.
    deploy_request(&mut env, &p2, r06, "d06").await;
    let r07 = env.render_and_pass(&p2, &corpus("07-ca")).await;
    env.wait_spec("07 published after the restart", r07).await;
}
