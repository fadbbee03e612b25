//! The config publisher against the sandbox's Kubernetes API emulator (kube client unmodified,
//! retry layer off), driven the way the dispatcher will: `journal.accept(...)` first, then
//! `on_event(seq, &event)`.

mod classes;
mod crash;
mod dispatch;
mod faults;
mod fence;
mod flows;
mod heal;
mod on_dispatcher;
mod outage;
mod pods;
mod restart;
mod status;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use haptic::components::publisher::{ConfigPublisher, PublisherConfig, TermHandle};
use haptic::k8s::crd::{self, HAProxyCfg, PodDeploymentStatus};
use haptic_journal::{
    AuxKind, Batch, Checksum, ConfigIdentity, Correlation, Event, GateVerdict, Identity, Journal,
    JournalOptions, PodRef, Queue, RuntimeConfigRef, Seq, SyncMetadata, Term,
};
pub use haptic_testkit::eventually;
use haptic_testkit::render::batch_files;
use haptic_testkit::{Fleet, FleetConfig};
use haptic_tools::sandbox::apiserver::ApiServer;
use kube::Api;

pub const NS: &str = "default";
pub const CONFIG: &str = "edge";
pub const MAIN: &str = "edge-haproxycfg";
pub const INVALID: &str = "edge-haproxycfg-invalid";

/// A render read from a directory of `tests/corpus/renders/` (or a single config file).
#[derive(Clone)]
pub struct RenderDir {
    pub config: Vec<u8>,
    pub files: Vec<(AuxKind, String, Vec<u8>)>,
}

pub fn corpus(name: &str) -> RenderDir {
    let r = haptic_testkit::render::corpus(name);
    RenderDir {
        files: batch_files(&r),
        config: r.config,
    }
}

/// A config-only render from `../shared/corpus/haproxy/<rel>`.
pub fn shared(rel: &str) -> RenderDir {
    let p = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/corpus/haproxy"
    ))
    .join(rel);
    RenderDir {
        config: std::fs::read(p).unwrap(),
        files: Vec::new(),
    }
}

/// Several corpus renders merged into one (maps + error files + crt-lists + CA + certificate).
pub fn full_render() -> RenderDir {
    let mut r = corpus("07-ca");
    for extra in ["02-maps", "04-errors", "06-crtlist", "05-tls"] {
        for f in corpus(extra).files {
            if !r.files.iter().any(|x| x.1 == f.1) {
                r.files.push(f);
            }
        }
    }
    r
}

pub struct Env {
    pub fleet: Fleet,
    pub client: kube::Client,
    pub journal: Arc<Journal>,
    pub seq_corr: u64,
}

/// A batch storing `r` with its `TemplateRendered` event (correlation `corr`); returns the
/// render checksum too.
pub fn rendered(corr: Correlation, r: &RenderDir) -> (Batch, Checksum) {
    let mut b = Batch::new();
    let render = b.put_render(r.config.clone(), r.files.clone()).checksum;
    b.event(Event::TemplateRendered {
        correlation: corr,
        render,
        config_bytes: r.config.len() as u64,
        auxiliary_file_count: r.files.len() as u32,
        duration_ms: 1,
        trigger_reason: "test".into(),
        coalescible: true,
    });
    (b, render)
}

/// A writer of another replica in `term` (no lease guard, default limits).
pub fn writer(env: &Env, term: Term) -> haptic::k8s::writer::Writer {
    haptic::k8s::writer::Writer::new(
        env.client.clone(),
        haptic::k8s::writer::WriterConfig {
            namespace: NS.into(),
            config_label: CONFIG.into(),
            owner: None,
            term,
            compression_threshold_bytes: 1 << 20,
            request_timeout: Duration::from_secs(5),
            lease: Arc::new(haptic::core::guard::AlwaysValid),
        },
    )
}

pub fn identity() -> ConfigIdentity {
    ConfigIdentity {
        name: CONFIG.into(),
        namespace: NS.into(),
        source_uid: None,
        source_generation: None,
    }
}

pub fn runtime_config() -> RuntimeConfigRef {
    RuntimeConfigRef {
        namespace: NS.into(),
        name: MAIN.into(),
    }
}

/// Bound of every wait of these tests: fifteen publisher attempts, each a request timeout plus
/// the longest back-off of [`fast_config`].
pub fn bound() -> Duration {
    let c = fast_config();
    (c.request_timeout + c.retry.max_delay) * 9
}

pub fn fast_config() -> PublisherConfig {
    let mut c = PublisherConfig::new(identity(), NS);
    c.retry.initial = Duration::from_millis(50);
    c.retry.max_delay = Duration::from_millis(1500);
    c.request_timeout = Duration::from_secs(2);
    c
}

impl Env {
    pub async fn start() -> Env {
        let fleet = Fleet::start(FleetConfig::api_only(NS)).await;
        let client = fleet.client();
        let journal = Arc::new(
            Journal::open(
                &JournalOptions::new(fleet.dir().join("j.redb")).trim_every_commits(u32::MAX),
            )
            .unwrap(),
        );
        journal
            .set_term(Term(1), Identity::new("replica-0"))
            .unwrap();
        Env {
            fleet,
            client,
            journal,
            seq_corr: 0,
        }
    }

    /// The API emulator (these tests script its faults in-process).
    pub fn server(&self) -> &ApiServer {
        self.fleet
            .emulator()
            .expect("the publisher tests script the emulator")
    }

    /// A fresh env with a publisher of [`fast_config`] started in term 1.
    pub async fn with_publisher() -> (Env, ConfigPublisher, TermHandle) {
        Env::with_publisher_config(fast_config()).await
    }

    /// A fresh env with a publisher of `cfg` started in term 1.
    pub async fn with_publisher_config(cfg: PublisherConfig) -> (Env, ConfigPublisher, TermHandle) {
        let env = Env::start().await;
        let p = env.publisher(cfg);
        let term = p.start(Term(1));
        (env, p, term)
    }

    /// [`Env::with_publisher`] with `r` rendered and passed by the gate; returns its checksum.
    pub async fn with_render(r: &RenderDir) -> (Env, ConfigPublisher, TermHandle, Checksum) {
        let (mut env, p, term) = Env::with_publisher().await;
        let sum = env.render_and_pass(&p, r).await;
        (env, p, term, sum)
    }

    /// Waits until the main HAProxyCfg's status lists `pods` pods.
    pub async fn wait_pods_listed(&self, what: &str, pods: usize) {
        eventually(bound(), what, || async {
            let listed = self
                .cfg(MAIN)
                .await
                .and_then(|c| c.status)
                .map(|s| s.deployed_to_pods.len());
            (listed == Some(pods))
                .then_some(())
                .ok_or(format!("{MAIN} lists {listed:?} pods"))
        })
        .await;
    }

    /// Waits until the main HAProxyCfg's status lists a pod entry that `entry` accepts.
    pub async fn wait_pod_entry(&self, what: &str, entry: impl Fn(&PodDeploymentStatus) -> bool) {
        eventually(bound(), what, || async {
            self.cfg(MAIN)
                .await
                .and_then(|c| c.status)
                .is_some_and(|s| s.deployed_to_pods.iter().any(&entry))
        })
        .await;
    }

    /// Waits until the queue `q` is empty.
    pub async fn wait_queue_empty(&self, q: Queue, what: &str) {
        eventually(bound(), what, || async {
            let n = self.queue_len(q);
            (n == 0).then_some(()).ok_or(format!("{n} items in {q:?}"))
        })
        .await;
    }

    /// A fresh env with a publisher of [`fast_config`] throttled to one publication per
    /// `interval`, started in term 1.
    pub async fn with_throttle(interval: Duration) -> (Env, ConfigPublisher, TermHandle) {
        let mut cfg = fast_config();
        cfg.publish_interval = interval;
        Env::with_publisher_config(cfg).await
    }

    /// `r` rendered and passed by the gate, then waits until the main HAProxyCfg holds it.
    pub async fn pass_and_wait(
        &mut self,
        p: &ConfigPublisher,
        r: &RenderDir,
        what: &str,
    ) -> Checksum {
        let sum = self.render_and_pass(p, r).await;
        self.wait_spec(what, sum).await;
        sum
    }

    /// [`Env::with_render`], then waits until the main HAProxyCfg holds it (`what`).
    pub async fn with_published(
        r: &RenderDir,
        what: &str,
    ) -> (Env, ConfigPublisher, TermHandle, Checksum) {
        let (env, p, term, sum) = Env::with_render(r).await;
        env.wait_spec(what, sum).await;
        (env, p, term, sum)
    }

    /// Stops `term`, then checks that no write was refused as invalid (422).
    pub async fn finish(&self, term: TermHandle) {
        term.stop().await;
        self.assert_no_422();
    }

    /// The journal moves to `term` and `p` starts it.
    pub fn next_term(&self, p: &ConfigPublisher, term: u64) -> TermHandle {
        self.journal
            .set_term(Term(term), Identity::new("replica-0"))
            .unwrap();
        p.start(Term(term))
    }

    /// Waits until the main HAProxyCfg's spec is `render`.
    pub async fn wait_spec(&self, what: &str, render: Checksum) {
        eventually(bound(), what, || async {
            match self.cfg(MAIN).await {
                Some(c) if c.spec.checksum == render => Ok(()),
                other => Err(format!("{MAIN} spec: {:?}", other.map(|c| c.spec.checksum))),
            }
        })
        .await;
    }

    pub fn reopen_journal(&mut self) {
        let path = self.fleet.dir().join("j.redb");
        // The old Arc must be the last one.
        let old = std::mem::replace(
            &mut self.journal,
            Arc::new(
                Journal::open(&JournalOptions::new(self.fleet.dir().join("scratch.redb"))).unwrap(),
            ),
        );
        drop(Arc::try_unwrap(old).expect("journal still shared"));
        self.journal = Arc::new(
            Journal::open(&JournalOptions::new(path).trim_every_commits(u32::MAX)).unwrap(),
        );
    }

    pub fn publisher(&self, cfg: PublisherConfig) -> ConfigPublisher {
        ConfigPublisher::new(Arc::clone(&self.journal), self.client.clone(), cfg)
    }

    pub fn corr(&mut self) -> Correlation {
        self.seq_corr += 1;
        Correlation::new(format!("e{}", self.seq_corr))
    }

    /// Accepts an event (with the render stored when given), as the dispatcher would.
    pub fn accept(
        &self,
        render: Option<&RenderDir>,
        event: impl FnOnce(Option<Checksum>) -> Event,
    ) -> (Seq, Event) {
        let mut b = Batch::new();
        let checksum = render.map(|r| b.put_render(r.config.clone(), r.files.clone()).checksum);
        let ev = event(checksum);
        b.event(ev.clone());
        let acc = self.journal.accept(b).unwrap();
        (acc.seqs()[0], ev)
    }

    /// Accept + deliver + mark dispatched.
    pub async fn deliver(&self, p: &ConfigPublisher, seq: Seq, ev: &Event) {
        p.on_event(seq, ev).await.unwrap();
        self.journal.mark_dispatched(seq).unwrap();
    }

    /// TemplateRendered, then RenderGateCompleted(pass): returns the render checksum.
    pub async fn render_and_pass(&mut self, p: &ConfigPublisher, r: &RenderDir) -> Checksum {
        let render = self.render(p, r).await;
        self.gate(p, render, GateVerdict::Pass, vec![]).await;
        render
    }

    /// TemplateRendered only.
    pub async fn render(&mut self, p: &ConfigPublisher, r: &RenderDir) -> Checksum {
        let c1 = self.corr();
        let (s, ev) = self.accept(Some(r), |c| Event::TemplateRendered {
            correlation: c1,
            render: c.unwrap(),
            config_bytes: r.config.len() as u64,
            auxiliary_file_count: r.files.len() as u32,
            duration_ms: 1,
            trigger_reason: "test".into(),
            coalescible: true,
        });
        self.deliver(p, s, &ev).await;
        let Event::TemplateRendered { render, .. } = ev else {
            unreachable!()
        };
        render
    }

    pub async fn gate(
        &mut self,
        p: &ConfigPublisher,
        render: Checksum,
        verdict: GateVerdict,
        messages: Vec<String>,
    ) {
        let c = self.corr();
        let (s, ev) = self.accept(None, |_| Event::RenderGateCompleted {
            correlation: c,
            render,
            verdict,
            messages,
            pinned_to: None,
        });
        self.deliver(p, s, &ev).await;
    }

    /// A sync of `checksum` on `pod` that reloaded HAProxy (failed with `error`, if given).
    pub async fn applied(
        &mut self,
        p: &ConfigPublisher,
        pod: &str,
        checksum: Checksum,
        error: Option<&str>,
    ) {
        self.synced(p, pod, checksum, error, true).await;
    }

    /// A sync of `checksum` on `pod` that changed nothing (an idle drift check's report).
    pub async fn applied_idle(&mut self, p: &ConfigPublisher, pod: &str, checksum: Checksum) {
        self.synced(p, pod, checksum, None, false).await;
    }

    async fn synced(
        &mut self,
        p: &ConfigPublisher,
        pod: &str,
        checksum: Checksum,
        error: Option<&str>,
        reload_triggered: bool,
    ) {
        let c = self.corr();
        let (s, ev) = self.accept(None, |_| Event::ConfigAppliedToPod {
            correlation: c,
            runtime_config: runtime_config(),
            pod: pod_ref(pod),
            checksum,
            is_drift_check: !reload_triggered,
            sync: SyncMetadata {
                reload_triggered,
                sync_duration_ms: 12,
                error: error.map(str::to_owned),
                ..SyncMetadata::default()
            },
        });
        self.deliver(p, s, &ev).await;
    }

    pub fn cfgs(&self) -> Api<HAProxyCfg> {
        Api::namespaced(self.client.clone(), NS)
    }

    pub async fn cfg(&self, name: &str) -> Option<HAProxyCfg> {
        self.cfgs().get_opt(name).await.unwrap()
    }

    /// Whether the main HAProxyCfg exists with the spec `render`.
    pub async fn spec_is(&self, render: Checksum) -> bool {
        self.cfg(MAIN)
            .await
            .is_some_and(|c| c.spec.checksum == render)
    }

    /// Count of `config.published` events in the journal log.
    pub fn published_events(&self) -> usize {
        self.journal
            .events(Seq(0), usize::MAX)
            .unwrap()
            .into_iter()
            .filter(|(_, _, e)| matches!(e, Event::ConfigPublished { .. }))
            .count()
    }

    pub fn queue_len(&self, q: Queue) -> usize {
        self.journal.queue(q).unwrap().len()
    }

    /// No write of ours was ever rejected as invalid by the schema.
    pub fn assert_no_422(&self) {
        let bad: Vec<_> = self
            .server()
            .requests()
            .into_iter()
            .filter(|r| r.status == 422)
            .collect();
        assert!(bad.is_empty(), "422 answers: {bad:?}");
    }

    pub fn kubectl(&self, args: &[&str]) -> std::process::Output {
        std::process::Command::new(haptic_tools::peers::kubectl())
            .env("KUBECONFIG", self.fleet.kubeconfig())
            .env_remove("HTTP_PROXY")
            .env_remove("http_proxy")
            .env("NO_PROXY", "127.0.0.1")
            .args(args)
            .output()
            .unwrap()
    }
}

/// Waits until the publisher counter `read` returns reaches `at_least`.
pub async fn wait_count(what: &str, at_least: u64, read: impl Fn() -> u64) {
    eventually(bound(), what, || {
        let n = read();
        std::future::ready((n >= at_least).then_some(()).ok_or(format!("{n} so far")))
    })
    .await;
}

pub fn pod_ref(name: &str) -> PodRef {
    PodRef {
        namespace: NS.into(),
        name: name.into(),
    }
}
