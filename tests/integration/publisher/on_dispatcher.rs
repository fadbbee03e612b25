//! The publisher on the real event dispatcher, as the dispatch and pod-set tests drive it:
//! leadership from the event stream, renders rendered and passed through it.

use haptic::components::publisher::{ConfigPublisher, subscribe_options};
use haptic::dispatch::{DispatchHandle, Dispatcher, SubscribeOptions};
use haptic_journal::{Batch, Checksum, Event, EventKind, GateVerdict, Identity, Term};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{Env, RenderDir, rendered};

/// The publisher `p` running on the dispatcher `d` over `env`'s journal.
pub(super) struct OnDispatcher {
    /// The dispatcher's handle (the tests publish through it).
    pub(super) h: DispatchHandle,
    cancel: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl OnDispatcher {
    /// Subscribes `p`, starts both, and waits until the dispatcher runs: a BecameLeader
    /// committed before its start would count as replayed, and replayed leadership events
    /// change nothing.
    /// [`OnDispatcher::start`] on a new dispatcher over `env`'s journal.
    pub(super) async fn on_journal(env: &mut Env, p: &ConfigPublisher) -> OnDispatcher {
        let d = Dispatcher::new(std::sync::Arc::clone(&env.journal));
        OnDispatcher::start(env, p, d).await
    }

    pub(super) async fn start(
        env: &mut Env,
        p: &ConfigPublisher,
        mut d: Dispatcher,
    ) -> OnDispatcher {
        let sub = d.subscribe(subscribe_options());
        let mut probe = d.subscribe(
            SubscribeOptions::new("probe").kinds(&[EventKind::DriftPreventionTriggered]),
        );
        let h = d.handle();
        p.attach(h.clone());
        let cancel = CancellationToken::new();
        let c = cancel.clone();
        let dt = tokio::spawn(async move { d.run(c).await.unwrap() });
        let (pc, c) = (p.clone(), cancel.clone());
        let pt = tokio::spawn(async move { pc.run(sub, c).await.unwrap() });
        h.publish(Event::DriftPreventionTriggered {
            correlation: env.corr(),
            time_since_last_deployment_ms: 0,
        })
        .await
        .unwrap();
        probe.recv().await.unwrap().done();
        OnDispatcher {
            h,
            cancel,
            tasks: vec![pt, dt],
        }
    }

    /// `BecameLeader` for `term` with the journal's term set, in one batch.
    pub(super) async fn lead(&self, env: &mut Env, term: u64) {
        let b = Batch::became_leader(env.corr(), Identity::new("replica-0"), Term(term));
        self.h.accept(b).await.unwrap();
    }

    /// `LostLeadership`: this replica follows.
    pub(super) async fn follow(&self, env: &mut Env) {
        self.publish(Event::LostLeadership {
            correlation: env.corr(),
            identity: Identity::new("replica-0"),
            reason: "lease_lost".into(),
        })
        .await;
    }

    /// Publishes `event` through the dispatcher (committed when this returns).
    pub(super) async fn publish(&self, event: Event) {
        self.h.publish(event).await.unwrap();
    }

    /// `r` rendered, then passed by the gate.
    pub(super) async fn render_and_pass(&self, env: &mut Env, r: &RenderDir) -> Checksum {
        let (b, render) = rendered(env.corr(), r);
        self.h.accept(b).await.unwrap();
        self.publish(Event::RenderGateCompleted {
            correlation: env.corr(),
            render,
            verdict: GateVerdict::Pass,
            messages: vec![],
            pinned_to: None,
        })
        .await;
        render
    }

    pub(super) async fn stop(self) {
        self.cancel.cancel();
        for t in self.tasks {
            t.await.unwrap();
        }
    }
}
