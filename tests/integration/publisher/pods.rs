//! The known pod set survives restarts and leadership changes exactly (DESIGN.md J11, issue 11
//! part 3): a pod that goes away while this replica follows, or while the controller is down,
//! leaves the HAProxyCfg status once it leads again, with no seeding read to wait for; and a
//! replayed delivery the checkpoint already folded queues nothing twice.

use haptic_journal::Endpoint;

use super::on_dispatcher::OnDispatcher;
use super::*;

fn discovered(c: Correlation, pods: &[&str]) -> Event {
    Event::HAProxyPodsDiscovered {
        correlation: c,
        endpoints: pods
            .iter()
            .enumerate()
            .map(|(i, n)| Endpoint {
                url: format!("http://10.0.0.{}:5555", i + 1).into(),
                pod: pod_ref(n),
                detected_version: None,
            })
            .collect(),
        authoritative: true,
    }
}

fn applied(c: Correlation, pod: &str, checksum: Checksum) -> Event {
    Event::ConfigAppliedToPod {
        correlation: c,
        runtime_config: runtime_config(),
        pod: pod_ref(pod),
        checksum,
        is_drift_check: false,
        sync: SyncMetadata::default(),
    }
}

async fn status_pods(env: &Env) -> Vec<String> {
    env.cfg(MAIN)
        .await
        .and_then(|c| c.status)
        .map(|s| s.deployed_to_pods.into_iter().map(|e| e.pod_name).collect())
        .unwrap_or_default()
}

/// Leads `term` on `d` and waits until pod-b left the status (pod-a only); then stops `d` and
/// checks that the API server answered no 422.
async fn lead_until_pod_b_left(env: &mut Env, d: OnDispatcher, term: u64) {
    d.lead(env, term).await;
    let env: &Env = env;
    eventually(bound(), "pod-b left the status", || async {
        status_pods(env).await == ["pod-a"]
    })
    .await;
    d.stop().await;
    env.assert_no_422();
}

/// A first publisher publishes 01-basic, learns pods a and b from a discovery and writes their
/// status, then goes away (no drain, as a killed process).
async fn two_pods_published(env: &mut Env) -> Checksum {
    let p = env.publisher(fast_config());
    let term = p.start(Term(1));
    let c = env.corr();
    let (s, ev) = env.accept(None, |_| discovered(c, &["pod-a", "pod-b"]));
    env.deliver(&p, s, &ev).await;
    let sum = env.render_and_pass(&p, &corpus("01-basic")).await;
    env.applied(&p, "pod-a", sum, None).await;
    env.applied(&p, "pod-b", sum, None).await;
    eventually(bound(), "pods a and b in the status", || async {
        status_pods(env).await == ["pod-a", "pod-b"] && env.queue_len(Queue::StatusPending) == 0
    })
    .await;
    term.stop().await;
    sum
}

/// The controller was down while pod-b went away. The restarted process follows first; its
/// first discovery (before it leads, as discovery starts before the Lease is won) lists pod-a
/// only. Once it leads, pod-b leaves the status, without waiting for any seeding step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_removed_while_down_leaves_the_status_after_the_restart() {
    let mut env = Env::start().await;
    two_pods_published(&mut env).await;
    let p = env.publisher(fast_config());
    let d = OnDispatcher::on_journal(&mut env, &p).await;
    d.publish(discovered(env.corr(), &["pod-a"])).await;
    lead_until_pod_b_left(&mut env, d, 2).await;
}

/// pod-b terminates while this replica follows (its event is journaled, no work is queued).
/// At the next term pod-b leaves the status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_terminated_while_following_leaves_the_status_at_the_next_term() {
    let mut env = Env::start().await;
    let p = env.publisher(fast_config());
    let d = OnDispatcher::on_journal(&mut env, &p).await;
    d.lead(&mut env, 2).await;
    d.publish(discovered(env.corr(), &["pod-a", "pod-b"])).await;
    let sum = d.render_and_pass(&mut env, &corpus("01-basic")).await;
    d.publish(applied(env.corr(), "pod-a", sum)).await;
    d.publish(applied(env.corr(), "pod-b", sum)).await;
    eventually(bound(), "pods a and b in the status", || async {
        status_pods(&env).await == ["pod-a", "pod-b"]
    })
    .await;
    d.follow(&mut env).await;
    d.publish(Event::HAProxyPodTerminated {
        correlation: env.corr(),
        pod: pod_ref("pod-b"),
    })
    .await;
    lead_until_pod_b_left(&mut env, d, 3).await;
}

/// An event whose work was committed (with the checkpoint) but not marked dispatched when the
/// process died is replayed at the restart: the checkpoint already folded it, so its work is
/// not queued a second time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_event_the_checkpoint_folded_queues_nothing_twice() {
    let mut env = Env::start().await;
    {
        let p = env.publisher(fast_config());
        let render = env.render(&p, &corpus("02-maps")).await;
        let c = env.corr();
        let (s, ev) = env.accept(None, |_| Event::RenderGateCompleted {
            correlation: c,
            render,
            verdict: GateVerdict::Pass,
            messages: vec![],
            pinned_to: None,
        });
        // Handled (its work journaled) but never marked dispatched: the process dies here.
        p.on_event(s, &ev).await.unwrap();
    }
    assert_eq!(env.queue_len(Queue::Publish), 1);
    assert_eq!(env.queue_len(Queue::Verdict), 1);
    let undispatched = env.journal.meta().unwrap().next_seq;
    let p = env.publisher(fast_config());
    let d = OnDispatcher::on_journal(&mut env, &p).await;
    eventually(bound(), "the replay was handled", || async {
        env.journal.meta().unwrap().dispatched_through >= undispatched
    })
    .await;
    assert_eq!(env.queue_len(Queue::Publish), 1, "publication queued twice");
    assert_eq!(env.queue_len(Queue::Verdict), 1, "verdict queued twice");
    d.stop().await;
}
