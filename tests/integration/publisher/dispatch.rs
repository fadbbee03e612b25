//! The publisher on the real event dispatcher: leadership from the event stream, events in
//! `Seq` order, its `config.published` delivered to other subscribers.

use haptic::dispatch::{Dispatcher, SubscribeOptions};
use haptic_journal::EventKind;

use super::on_dispatcher::OnDispatcher;
use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_on_the_dispatcher() {
    let mut env = Env::start().await;
    let p = env.publisher(fast_config());
    let mut d = Dispatcher::new(Arc::clone(&env.journal));
    let mut published =
        d.subscribe(SubscribeOptions::new("test").kinds(&[EventKind::ConfigPublished]));
    let run = OnDispatcher::start(&mut env, &p, d).await;
    run.lead(&mut env, 2).await;
    let render = run.render_and_pass(&mut env, &corpus("02-maps")).await;

    let got = published.recv().await.unwrap();
    let Event::ConfigPublished {
        render: r2,
        runtime_config: rc,
        ..
    } = &*got.event
    else {
        panic!("{:?}", got.event)
    };
    assert_eq!((*r2, rc.name.as_str()), (render, MAIN));
    drop(got);
    let cfg = env.cfg(MAIN).await.unwrap();
    assert_eq!(cfg.spec.checksum, render);
    assert_eq!(
        cfg.metadata.annotations.unwrap()[haptic::k8s::crd::labels::LEADER_TERM],
        "2"
    );
    run.stop().await;
    env.assert_no_422();
}

/// A render that passed the gate before this replica led (its events long trimmed) is still
/// placed after the published checkpoint: its deploy-driven publication moves the spec forward.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn render_passed_before_leadership_is_published_by_its_deployment() {
    let mut env = Env::start().await;
    // An earlier term published 02-maps (the checkpoint).
    let p1 = env.publisher(fast_config());
    let t1 = p1.start(Term(1));
    let old = env.render_and_pass(&p1, &corpus("02-maps")).await;
    eventually(bound(), "02 published, its verdict written", || async {
        env.spec_is(old).await
            && env.queue_len(Queue::Publish) == 0
            && env.queue_len(Queue::Verdict) == 0
    })
    .await;
    t1.stop().await;
    drop(p1);

    let p = env.publisher(fast_config());
    let d = Dispatcher::new(Arc::clone(&env.journal));
    let run = OnDispatcher::start(&mut env, &p, d).await;

    // Not the leader yet: a new render passes the gate.
    let render = run.render_and_pass(&mut env, &corpus("07-ca")).await;
    // The deployer holds the render (its slot); the render's events are trimmed.
    let manifest = env.journal.get_render(render).unwrap().unwrap();
    let mut b = Batch::new();
    b.hold_render(&manifest);
    run.h.accept(b).await.unwrap();
    eventually(bound(), "render events trimmed", || async {
        env.journal.trim().unwrap();
        !env.journal
            .events(Seq(0), usize::MAX)
            .unwrap()
            .iter()
            .any(|(_, _, e)| matches!(e, Event::TemplateRendered { render: x, .. } if *x == render))
    })
    .await;

    run.lead(&mut env, 2).await;
    run.h
        .publish(Event::DeployedConfigPublishRequest {
            correlation: env.corr(),
            deployment: haptic_journal::DeploymentId::new("d-became-leader"),
            render,
            runtime_config: runtime_config(),
        })
        .await
        .unwrap();
    env.wait_spec("the deployed render published", render).await;
    run.stop().await;
}
