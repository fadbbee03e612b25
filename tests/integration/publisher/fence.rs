//! Lease fencing of the publisher's Kubernetes writes (DESIGN.md J7, issue 5): once the guard
//! refuses, no write verb reaches the API server, the queued work stays in the journal, and the
//! next term with a valid guard publishes it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use haptic::k8s::writer::LeaseGuard;
use haptic_journal::{Identity, Queue, Term};

use super::*;

/// A guard the test revokes and restores.
#[derive(Debug)]
struct Switch(AtomicBool);

impl LeaseGuard for Switch {
    fn is_valid(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

fn write_verbs(env: &Env) -> Vec<String> {
    env.server
        .requests()
        .into_iter()
        .filter(|r| matches!(r.method.as_str(), "POST" | "PUT" | "PATCH" | "DELETE"))
        .map(|r| format!("{} {} -> {}", r.method, r.path, r.status))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoked_lease_stops_every_write_and_the_next_term_publishes_the_queued_item() {
    let mut env = Env::start().await;
    let guard = Arc::new(Switch(AtomicBool::new(true)));
    let mut cfg = fast_config();
    cfg.lease = guard.clone();
    let p = env.publisher(cfg);
    let term = p.start(Term(1));
    let first = env
        .render_and_pass(&p, &shared("basic/two-servers.cfg"))
        .await;
    eventually("first render published", || async {
        env.cfg(MAIN)
            .await
            .is_some_and(|c| c.spec.checksum == first)
    })
    .await;
    eventually("first render acked", || async {
        env.queue_len(Queue::Publish) == 0
    })
    .await;

    // Deposed mid-stream: the next render (with auxiliary objects and Secrets) must not go out.
    guard.0.store(false, Ordering::SeqCst);
    env.server.clear_requests();
    let second = env.render_and_pass(&p, &full_render()).await;
    // The worker reads the HAProxyCfg, then the guard refuses the replace.
    eventually("publication attempted", || async {
        env.server
            .requests()
            .iter()
            .any(|r| r.method == "GET" && r.path.ends_with(&format!("haproxycfgs/{MAIN}")))
    })
    .await;
    // Longer than several retry delays of fast_config (50 ms initial): no retry loop either.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let writes = write_verbs(&env);
    assert!(writes.is_empty(), "writes after revocation: {writes:?}");
    assert_eq!(p.counters().retries.load(Ordering::Relaxed), 0);
    assert_eq!(p.counters().given_up.load(Ordering::Relaxed), 0);
    assert_eq!(env.queue_len(Queue::Publish), 1, "item must stay queued");
    assert_eq!(env.cfg(MAIN).await.unwrap().spec.checksum, first);
    assert_eq!(env.published_events(), 1);
    term.stop().await;
    assert!(write_verbs(&env).is_empty());

    // A new term with a valid guard publishes the queued item.
    env.journal
        .set_term(Term(2), Identity::new("replica-0"))
        .unwrap();
    guard.0.store(true, Ordering::SeqCst);
    let term = p.start(Term(2));
    eventually("queued render published by the next term", || async {
        env.cfg(MAIN)
            .await
            .is_some_and(|c| c.spec.checksum == second)
    })
    .await;
    eventually("queued item acked", || async {
        env.queue_len(Queue::Publish) == 0
    })
    .await;
    term.stop().await;
    assert!(!write_verbs(&env).is_empty());
    assert_eq!(env.published_events(), 2);
    env.assert_no_422();
}
