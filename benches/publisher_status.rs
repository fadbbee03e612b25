//! Status coalescing benchmark: 1,000 pods x 10 `config.applied.to.pod` each, inside one 5 s
//! publish interval, against the Kubernetes API emulator. Prints status writes (PUT .../status
//! answered by the emulator) and the time from the first event to a converged status (every
//! pod listed with its newest round). Journal durability `None` here (the bench measures the
//! publisher, not fsync).
//!
//! Run: `cargo bench -p haptic --bench publisher_status [-- PODS ROUNDS INTERVAL_MS]`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use haptic::components::publisher::{ConfigPublisher, PublisherConfig};
use haptic::k8s::crd::HAProxyCfg;
use haptic_journal::{
    Batch, ConfigIdentity, Correlation, Durability, Event, GateVerdict, Identity, Journal,
    JournalOptions, PodRef, Queue, RuntimeConfigRef, SyncMetadata, Term,
};
use haptic_testkit::{Fleet, FleetConfig};
use kube::Api;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let pods = args.first().copied().unwrap_or(1000);
    let rounds = args.get(1).copied().unwrap_or(10);
    let interval = Duration::from_millis(args.get(2).copied().unwrap_or(5000));

    let fleet = Fleet::start(FleetConfig::api_only("default")).await;
    let client = fleet.client();
    let journal = Arc::new(
        Journal::open(
            &JournalOptions::new(fleet.dir().join("j.redb")).durability(Durability::None),
        )
        .unwrap(),
    );
    journal.set_term(Term(1), Identity::new("bench")).unwrap();
    let identity = ConfigIdentity {
        name: "edge".into(),
        namespace: "default".into(),
        source_uid: None,
        source_generation: None,
    };
    let mut cfg = PublisherConfig::new(identity, "default");
    cfg.publish_interval = interval;
    cfg.self_heal = false;
    let p = ConfigPublisher::new(Arc::clone(&journal), client.clone(), cfg);
    let term = p.start(Term(1));
    let rc = RuntimeConfigRef {
        namespace: "default".into(),
        name: "edge-haproxycfg".into(),
    };

    // One render, published.
    let mut b = Batch::new();
    let render = b
        .put_render(b"global\ndefaults\n  mode http\n".to_vec(), vec![])
        .checksum;
    let gate = Event::RenderGateCompleted {
        correlation: Correlation::new("g"),
        render,
        verdict: GateVerdict::Pass,
        messages: vec![],
        pinned_to: None,
    };
    b.event(gate.clone());
    let seq = journal.accept(b).unwrap().seqs()[0];
    p.on_event(seq, &gate).await.unwrap();
    let cfgs: Api<HAProxyCfg> = Api::namespaced(client.clone(), "default");
    while cfgs
        .get_opt("edge-haproxycfg")
        .await
        .unwrap()
        .is_none_or(|c| c.status.is_none_or(|s| s.metadata.is_none()))
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Let the publication's own throttle window pass so the status worker starts fresh.
    tokio::time::sleep(interval).await;
    fleet.clear_api_requests().unwrap();

    let start = Instant::now();
    let mut n = 0u64;
    for round in 1..=rounds {
        let mut b = Batch::new();
        let mut evs = Vec::new();
        for i in 0..pods {
            let ev = Event::ConfigAppliedToPod {
                correlation: Correlation::new(format!("a{round}-{i}")),
                runtime_config: rc.clone(),
                pod: PodRef {
                    namespace: "default".into(),
                    name: format!("haproxy-{i}").into(),
                },
                checksum: render,
                is_drift_check: false,
                sync: SyncMetadata {
                    sync_duration_ms: round,
                    ..SyncMetadata::default()
                },
            };
            b.event(ev.clone());
            evs.push(ev);
        }
        let seqs = journal.accept(b).unwrap().seqs();
        for (s, ev) in seqs.into_iter().zip(evs) {
            p.on_event(s, &ev).await.unwrap();
            n += 1;
        }
        journal
            .mark_dispatched(haptic_journal::Seq(journal.meta().unwrap().next_seq.0 - 1))
            .unwrap();
    }
    let fed = start.elapsed();
    let want = format!("{rounds}ms");
    loop {
        let done = journal.queue(Queue::StatusPending).unwrap().is_empty()
            && cfgs
                .get("edge-haproxycfg")
                .await
                .unwrap()
                .status
                .is_some_and(|s| {
                    s.deployed_to_pods.len() as u64 == pods
                        && s.deployed_to_pods
                            .iter()
                            .all(|e| e.sync_duration.as_deref() == Some(&want))
                });
        if done {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let converged = start.elapsed();
    let reqs = fleet.api_requests().unwrap();
    let status_writes = reqs
        .iter()
        .filter(|r| r.method == "PUT" && r.path.ends_with("/status"))
        .count();
    let failed = reqs.iter().filter(|r| r.status >= 400).count();
    term.stop().await;
    println!(
        "| pods | events | interval | events fed in | status writes | failed requests | converged after | retries |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    println!(
        "| {pods} | {n} | {:?} | {:.2?} | {status_writes} | {failed} | {:.2?} | {} |",
        interval,
        fed,
        converged,
        p.counters()
            .retries
            .load(std::sync::atomic::Ordering::Relaxed)
    );
}
