//! The publisher on the real event dispatcher: leadership from the event stream, events in
//! `Seq` order, its `config.published` delivered to other subscribers.

use haptic::components::publisher::subscribe_options;
use haptic::dispatch::{Dispatcher, SubscribeOptions};
use haptic_journal::{Batch, EventKind, GateVerdict, Identity, Term};
use tokio_util::sync::CancellationToken;

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_on_the_dispatcher() {
    let mut env = Env::start().await;
    let p = env.publisher(fast_config());
    let mut d = Dispatcher::new(Arc::clone(&env.journal));
    let sub = d.subscribe(subscribe_options());
    let mut published =
        d.subscribe(SubscribeOptions::new("test").kinds(&[EventKind::ConfigPublished]));
    let mut probe =
        d.subscribe(SubscribeOptions::new("probe").kinds(&[EventKind::DriftPreventionTriggered]));
    let h = d.handle();
    p.attach(h.clone());
    let cancel = CancellationToken::new();
    let dt = tokio::spawn(d.run(cancel.clone()));
    let pc = p.clone();
    let c2 = cancel.clone();
    let pt = tokio::spawn(async move { pc.run(sub, c2).await });

    // Wait until the dispatcher runs: a BecameLeader committed before its start would count as
    // replayed, and replayed leadership events change nothing.
    h.publish(Event::DriftPreventionTriggered {
        correlation: env.corr(),
        time_since_last_deployment_ms: 0,
    })
    .await
    .unwrap();
    probe.recv().await.unwrap().done();

    let mut b = Batch::new();
    b.set_term(Term(2), Identity::new("replica-0"));
    b.event(Event::BecameLeader {
        correlation: env.corr(),
        identity: Identity::new("replica-0"),
        term: Term(2),
    });
    h.accept(b).await.unwrap();

    let r = corpus("02-maps");
    let mut b = Batch::new();
    let render = b.put_render(r.config.clone(), r.files.clone()).checksum;
    b.event(Event::TemplateRendered {
        correlation: env.corr(),
        render,
        config_bytes: r.config.len() as u64,
        auxiliary_file_count: 1,
        duration_ms: 1,
        trigger_reason: "test".into(),
        coalescible: true,
    });
    h.accept(b).await.unwrap();
    h.publish(Event::RenderGateCompleted {
        correlation: env.corr(),
        render,
        verdict: GateVerdict::Pass,
        messages: vec![],
        pinned_to: None,
    })
    .await
    .unwrap();

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
    cancel.cancel();
    pt.await.unwrap().unwrap();
    dt.await.unwrap().unwrap();
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
        env.cfg(MAIN).await.is_some_and(|c| c.spec.checksum == old)
            && env.queue_len(Queue::Publish) == 0
            && env.queue_len(Queue::Verdict) == 0
    })
    .await;
    t1.stop().await;
    drop(p1);

    let p = env.publisher(fast_config());
    let mut d = Dispatcher::new(Arc::clone(&env.journal));
    let sub = d.subscribe(subscribe_options());
    let mut probe =
        d.subscribe(SubscribeOptions::new("probe").kinds(&[EventKind::DriftPreventionTriggered]));
    let h = d.handle();
    p.attach(h.clone());
    let cancel = CancellationToken::new();
    let dt = tokio::spawn(d.run(cancel.clone()));
    let pc = p.clone();
    let c2 = cancel.clone();
    let pt = tokio::spawn(async move { pc.run(sub, c2).await });
    h.publish(Event::DriftPreventionTriggered {
        correlation: env.corr(),
        time_since_last_deployment_ms: 0,
    })
    .await
    .unwrap();
    probe.recv().await.unwrap().done();

    // Not the leader yet: a new render passes the gate.
    let r = corpus("07-ca");
    let mut b = Batch::new();
    let render = b.put_render(r.config.clone(), r.files.clone()).checksum;
    b.event(Event::TemplateRendered {
        correlation: env.corr(),
        render,
        config_bytes: r.config.len() as u64,
        auxiliary_file_count: r.files.len() as u32,
        duration_ms: 1,
        trigger_reason: "test".into(),
        coalescible: true,
    });
    h.accept(b).await.unwrap();
    h.publish(Event::RenderGateCompleted {
        correlation: env.corr(),
        render,
        verdict: GateVerdict::Pass,
        messages: vec![],
        pinned_to: None,
    })
    .await
    .unwrap();
    // The deployer holds the render (its slot); the render's events are trimmed.
    let manifest = env.journal.get_render(render).unwrap().unwrap();
    let mut b = Batch::new();
    b.hold_render(&manifest);
    h.accept(b).await.unwrap();
    eventually(bound(), "render events trimmed", || async {
        env.journal.trim().unwrap();
        !env.journal
            .events(Seq(0), usize::MAX)
            .unwrap()
            .iter()
            .any(|(_, _, e)| matches!(e, Event::TemplateRendered { render: x, .. } if *x == render))
    })
    .await;

    let mut b = Batch::new();
    b.set_term(Term(2), Identity::new("replica-0"));
    b.event(Event::BecameLeader {
        correlation: env.corr(),
        identity: Identity::new("replica-0"),
        term: Term(2),
    });
    h.accept(b).await.unwrap();
    h.publish(Event::DeployedConfigPublishRequest {
        correlation: env.corr(),
        deployment: haptic_journal::DeploymentId::new("d-became-leader"),
        render,
        runtime_config: runtime_config(),
    })
    .await
    .unwrap();
    eventually(bound(), "the deployed render published", || async {
        env.cfg(MAIN)
            .await
            .is_some_and(|c| c.spec.checksum == render)
    })
    .await;
    cancel.cancel();
    pt.await.unwrap().unwrap();
    dt.await.unwrap().unwrap();
}
