//! Crash between effect and ack (DESIGN.md J3) at `publisher::before_publish_ack`: a child
//! process (this test binary, re-invoked) publishes against the parent's API emulator and aborts
//! after every object is written but before the ack commits; a new publisher on the same journal
//! re-runs the item, which takes effect exactly once (one `config.published`, no object written
//! twice). Needs the `failpoints` feature.

#![cfg(feature = "failpoints")]

use std::os::unix::process::ExitStatusExt;
use std::process::Command;
use std::sync::atomic::Ordering;

use haptic_journal::{Event, GateVerdict, Identity, Queue, Seq, Term};

use std::path::PathBuf;

use super::*;

const CHILD_ENV: &str = "HAPTIC_PUBLISHER_CRASH_CHILD";
const KUBECONFIG_ENV: &str = "HAPTIC_PUBLISHER_CRASH_KUBECONFIG";
const POINT: &str = "publisher::before_publish_ack";

fn crash_journal_path(dir: &Path) -> PathBuf {
    dir.join("crash.redb")
}

/// Accepts `event` and delivers it, as the dispatcher would.
async fn deliver(journal: &Journal, p: &ConfigPublisher, batch: Batch) {
    let acc = journal.accept(batch).unwrap();
    let seq = acc.seqs()[0];
    let (_, ev) = journal.event(seq).unwrap().unwrap();
    p.on_event(seq, &ev).await.unwrap();
    journal.mark_dispatched(seq).unwrap();
}

/// Child mode: TemplateRendered + gate pass for the full render, then wait for the armed crash
/// point to abort the process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_crash_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let kubeconfig = PathBuf::from(std::env::var(KUBECONFIG_ENV).unwrap());
    let client = haptic::k8s::client::from_kubeconfig(&kubeconfig)
        .await
        .unwrap();
    let journal =
        Arc::new(Journal::open(&JournalOptions::new(crash_journal_path(Path::new(&dir)))).unwrap());
    journal
        .set_term(Term(1), Identity::new("replica-0"))
        .unwrap();
    let p = ConfigPublisher::new(Arc::clone(&journal), client, fast_config());
    let _term = p.start(Term(1));
    let r = full_render();
    let (b, render) = rendered(Correlation::new("c1"), &r);
    deliver(&journal, &p, b).await;
    let mut b = Batch::new();
    b.event(Event::RenderGateCompleted {
        correlation: Correlation::new("c2"),
        render,
        verdict: GateVerdict::Pass,
        messages: vec![],
        pinned_to: None,
    });
    deliver(&journal, &p, b).await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    panic!("the armed crash point did not fire");
}

fn write_verbs_on_objects(env: &Env) -> Vec<String> {
    env.server()
        .requests()
        .into_iter()
        .filter(|r| matches!(r.method.as_str(), "POST" | "PUT" | "PATCH" | "DELETE"))
        .filter(|r| !r.path.ends_with("/status"))
        .map(|r| format!("{} {} -> {}", r.method, r.path, r.status))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_before_publish_ack_reruns_the_item_and_it_takes_effect_once() {
    let mut env = Env::start().await;
    env.server().clear_requests();
    let out = tokio::task::spawn_blocking({
        let dir = env.fleet.dir().to_owned();
        let kubeconfig = env.fleet.kubeconfig().to_owned();
        move || {
            Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "publisher::crash::publish_crash_child",
                    "--nocapture",
                    "--test-threads",
                    "1",
                ])
                .env(CHILD_ENV, &dir)
                .env(KUBECONFIG_ENV, &kubeconfig)
                .env("CRASH_AT", POINT)
                .output()
                .unwrap()
        }
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.signal(),
        Some(6),
        "child must die by SIGABRT: {:?}\n{stderr}",
        out.status
    );
    assert!(
        stderr.contains(&format!("crash_point fired: {POINT}")),
        "{stderr}"
    );

    // The effect is in the cluster, the ack is not in the journal.
    let full = full_render();
    let files: Vec<(&str, &[u8])> = full
        .files
        .iter()
        .map(|(_, p, c)| (p.as_str(), c.as_slice()))
        .collect();
    let want = haptic_journal::render_checksum(&full.config, &files);
    let child_writes = write_verbs_on_objects(&env);
    assert!(!child_writes.is_empty());
    let before = env
        .cfg(MAIN)
        .await
        .expect("the child published the HAProxyCfg");
    assert_eq!(before.spec.checksum, want);

    // The parent takes the same journal with a new publisher (a new term, as after a restart).
    env.journal =
        Arc::new(Journal::open(&JournalOptions::new(crash_journal_path(env.fleet.dir()))).unwrap());
    assert_eq!(
        env.queue_len(Queue::Publish),
        1,
        "unacked item still queued"
    );
    assert_eq!(env.published_events(), 0);
    assert!(env.journal.published_checkpoints().unwrap().is_empty());
    env.journal
        .set_term(Term(2), Identity::new("replica-0"))
        .unwrap();
    env.server().clear_requests();
    let p = env.publisher(fast_config());
    let term = p.start(Term(2));
    env.wait_queue_empty(Queue::Publish, "re-run item acked")
        .await;
    term.stop().await;

    // Exactly once: one config.published for the checksum, no object created or replaced again.
    let published: Vec<_> = env
        .journal
        .events(Seq(0), usize::MAX)
        .unwrap()
        .into_iter()
        .filter_map(|(_, _, e)| match e {
            Event::ConfigPublished { render, .. } => Some(render),
            _ => None,
        })
        .collect();
    assert_eq!(published, vec![want]);
    assert_eq!(p.counters().config_published.load(Ordering::Relaxed), 1);
    let rerun_writes = write_verbs_on_objects(&env);
    assert!(
        rerun_writes.is_empty(),
        "objects written twice: {rerun_writes:?}"
    );
    let cp = env.journal.published_checkpoints().unwrap();
    assert_eq!(cp.len(), 1);
    assert_eq!(cp[0].render, want);
    let after = env.cfg(MAIN).await.unwrap();
    assert_eq!(after.spec, before.spec);
    let st = after.status.unwrap();
    assert!(st.metadata.is_some());
    let refs = st.auxiliary_files.unwrap();
    assert_eq!(refs.map_files.len(), 1);
    assert_eq!(refs.general_files.len(), 2);
    assert_eq!(refs.crt_list_files.len(), 1);
    assert_eq!(st.observed_generation, after.metadata.generation);
    env.assert_no_422();
}
