//! The error classes at work (issue 11; `haptic::core::error`): a 403 is retried and shown until
//! RBAC allows the write, never dropped; a 422 is a permanent rejection, recorded and shown
//! (`Published=False`, a `PublicationRejected` Event, the `given_up` counter), then acked.

use std::sync::atomic::Ordering;

use haptic::k8s::crd::{conditions, reasons};
use haptic_tools::sandbox::apiserver::Fault;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use kube::Api;

use super::*;

/// (status, reason) of the `Published` condition of the main HAProxyCfg.
async fn published(env: &Env) -> Option<(String, String)> {
    let c = env.cfg(MAIN).await?;
    c.status?
        .conditions
        .into_iter()
        .find(|c| c.type_ == conditions::PUBLISHED)
        .map(|c| (c.status, c.reason))
}

fn refuse_spec_updates(status: u16) -> Fault {
    Fault {
        method: "PUT".into(),
        path: format!("haproxycfgs/{MAIN}$"),
        status: Some(status),
        ..Fault::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forbidden_is_retried_and_shown_until_granted() {
    let (mut env, p, term, first) = Env::with_render(&corpus("02-maps")).await;
    eventually(bound(), "first published", || async {
        env.spec_is(first).await
            && published(&env).await == Some(("True".into(), reasons::PUBLICATION_SUCCEEDED.into()))
    })
    .await;
    // RBAC denies updates of the HAProxyCfg (its status subresource is still allowed).
    env.server().add_fault(refuse_spec_updates(403)).unwrap();
    let second = env.render_and_pass(&p, &corpus("03-maps-changed")).await;
    eventually(bound(), "the refusal is shown", || async {
        p.counters().blocked.load(Ordering::Relaxed) >= 2
            && published(&env).await == Some(("False".into(), reasons::FORBIDDEN.into()))
    })
    .await;
    assert_eq!(
        env.queue_len(Queue::Publish),
        1,
        "the publication was dropped"
    );
    // Granted: the queued publication completes, with no new input.
    env.server().clear_faults();
    eventually(bound(), "published once granted", || async {
        env.spec_is(second).await
            && env.queue_len(Queue::Publish) == 0
            && published(&env).await == Some(("True".into(), reasons::PUBLICATION_SUCCEEDED.into()))
    })
    .await;
    assert_eq!(p.counters().given_up.load(Ordering::Relaxed), 0);
    assert_eq!(env.published_events(), 2);
    term.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unprocessable_is_rejected_recorded_shown_and_acked() {
    let (mut env, p, term, first) = Env::with_render(&corpus("02-maps")).await;
    eventually(bound(), "first published", || async {
        env.spec_is(first).await && env.queue_len(Queue::Publish) == 0
    })
    .await;
    env.server().add_fault(refuse_spec_updates(422)).unwrap();
    env.render_and_pass(&p, &corpus("03-maps-changed")).await;
    eventually(bound(), "rejected, recorded and acked", || async {
        p.counters().given_up.load(Ordering::Relaxed) == 1
            && env.queue_len(Queue::Publish) == 0
            && published(&env).await == Some(("False".into(), reasons::PUBLICATION_REJECTED.into()))
    })
    .await;
    let events: Api<K8sEvent> = Api::namespaced(env.client.clone(), NS);
    eventually(
        bound(),
        "a PublicationRejected Event on the HAProxyCfg",
        || async {
            events
                .list(&Default::default())
                .await
                .unwrap()
                .items
                .iter()
                .any(|e| {
                    e.reason.as_deref() == Some("PublicationRejected")
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(MAIN)
                        && e.note.as_deref().is_some_and(|n| n.contains("422"))
                })
        },
    )
    .await;
    assert_eq!(
        p.counters().retries.load(Ordering::Relaxed),
        0,
        "a 422 is not retried"
    );
    env.server().clear_faults();
    // The spec keeps the last complete publication; the rejection stays shown.
    eventually(bound(), "spec on the first render", || async {
        env.spec_is(first).await
    })
    .await;
    assert_eq!(env.published_events(), 1);
    term.stop().await;
}
