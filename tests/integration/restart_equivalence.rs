//! Restart equivalence (DESIGN.md J11): stop or kill anywhere, restart on the same journal file,
//! and every component's state and next effects equal those of a run that never stopped.
//!
//! ```text
//!  ops (renders passing/failing, pod sets, terminations, leadership, executor results with
//!       Dataplane failures, drift, time) ... step k: a graceful stop, or a kill after p commits
//!      |
//!  run A: real journal file --acceptor batch_of--> components fold in Seq order (the production
//!         decide functions, the scheduler's real Plan batches, checkpoints riding along)
//!         -- stops/dies --> reopen the file --> the production recovery (scheduler::recover,
//!         validator::recover) --> replay of every undispatched event (a follower: replayed
//!         leadership events are not leadership)
//!  run B: never restarts: it keeps A's in-memory state as of A's last completed component step
//!         (everything it had made durable), loses the Lease as the dying process does (J7) and
//!         goes on as a follower over a copy of A's journal file at the moment of death
//!  compare: scheduler and validator state, the journal's slots and endpoint_applied; then feed
//!           both the remaining ops and compare every effect and the state after each
//! ```
//!
//! Ids fresh per process are mapped out (deployment ids; the event ids inside correlations),
//! the per-term rate-limit end is excluded, timers share one clock.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use haptic::components::publisher::{self, decide as pdecide};
use haptic::components::scheduler::{
    self, Effect as SEffect, Input as SInput, PlanContext, SchedulerSettings, SchedulerState,
};
use haptic::components::validator::{self, ValidatorState};
use haptic::core::render::{RenderContent, RenderFile};
use haptic::dispatch::checkpoint::Checkpoints;
use haptic::dispatch::input::{Input, RenderSource};
use haptic::runtime::inputs::batch_of;
use haptic::validate::{Outcome, Validation};
use haptic_journal::*;
use proptest::prelude::*;

/// Pods of the simulated fleet (indices into [`endpoint`]).
const PODS: u8 = 4;

#[derive(Clone, Debug)]
enum Op {
    /// A render (`n` picks its content) whose `haproxy -c` verdict is `pass`.
    Render { n: u8, pass: bool },
    /// Pod discovery lists these pods (bit mask over [`PODS`]).
    Pods(u8),
    /// A pod is terminated.
    Terminate(u8),
    /// This replica acquires the Lease (a new term).
    Lead,
    /// It loses the Lease.
    Lose,
    /// The running deployment's executor reports: pods whose bit is set succeeded, the others
    /// failed (a Dataplane fault); `partial` leaves the deployment unfinished (no completion).
    Finish { ok: u8, partial: bool },
    /// A drift check is triggered.
    Drift,
    /// Time passes (ms).
    Advance(u16),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u8..4, prop::bool::weighted(0.75)).prop_map(|(n, pass)| Op::Render { n, pass }),
        2 => (0u8..16).prop_map(Op::Pods),
        1 => (0..PODS).prop_map(Op::Terminate),
        2 => Just(Op::Lead),
        1 => Just(Op::Lose),
        3 => (0u8..16, prop::bool::weighted(0.2)).prop_map(|(ok, partial)| Op::Finish { ok, partial }),
        1 => Just(Op::Drift),
        2 => (1u16..4000).prop_map(Op::Advance),
    ]
}

/// Where run A stops: before step `at`, gracefully, or killed after `commits` commits of it.
#[derive(Clone, Copy, Debug)]
enum Stop {
    Graceful { at: usize },
    Kill { at: usize, commits: u8 },
}

fn scenario(max_steps: usize) -> impl Strategy<Value = (Vec<Op>, Stop)> {
    prop::collection::vec(op(), 1..=max_steps).prop_flat_map(|ops| {
        let n = ops.len();
        let stop = prop_oneof![
            (0..n).prop_map(|at| Stop::Graceful { at }),
            (0..n, 0u8..8).prop_map(|(at, commits)| Stop::Kill { at, commits }),
        ];
        (Just(ops), stop)
    })
}

fn settings() -> SchedulerSettings {
    SchedulerSettings {
        min_deployment_interval: Duration::from_millis(500),
        deployment_timeout: Duration::from_secs(5),
        ..SchedulerSettings::default()
    }
}

fn pod(i: u8) -> PodRef {
    PodRef {
        namespace: Namespace::new("haptic"),
        name: ObjectName::new(format!("haproxy-{i}")),
    }
}

fn endpoint(i: u8) -> Endpoint {
    Endpoint {
        url: EndpointUrl::new(format!("http://10.0.0.{}:5555", i + 10)),
        pod: pod(i),
        detected_version: None,
    }
}

fn corr(id: &str) -> Correlation {
    Correlation {
        event_id: EventId::new(id),
        correlation_id: Some(CorrelationId::new(id)),
        causation_id: None,
    }
}

fn render_content(n: u8) -> RenderContent {
    let config = format!(
        "global\n  maxconn {}\ndefaults\n  mode http\n",
        100 + u32::from(n)
    );
    let files = if n % 2 == 1 {
        vec![RenderFile {
            kind: AuxKind::Map,
            path: "maps/hosts.map".into(),
            content: format!("host{n}.test be{n}\n").into_bytes(),
        }]
    } else {
        Vec::new()
    };
    RenderContent::new(config.into_bytes(), files)
}

/// The simulated process died (its commit budget ran out).
#[derive(Debug)]
struct Died;

/// A process's memory: the components' states and their shells' bookkeeping.
#[derive(Clone)]
struct Mem {
    sched: SchedulerState,
    sched_cp: Checkpoints,
    pending_id: Option<WorkId>,
    inflight_id: Option<WorkId>,
    timer: Option<Instant>,
    val: ValidatorState,
    val_cp: Checkpoints,
    router: pdecide::RouterState,
    pub_cp: Checkpoints,
    /// Whether the publisher runs a term (a live `BecameLeader` it saw).
    pub_leading: bool,
    /// Last `Seq` each component processed.
    val_delivered: u64,
    sched_delivered: u64,
    pub_delivered: u64,
    /// Events up to this `Seq` were committed before this process started (replays).
    replay_through: u64,
    /// The executor's deployment and its in-flight slot id.
    running: Option<(DeployRequest, WorkId)>,
    /// Every effect the components emitted, normalized, in order.
    effects: Vec<String>,
}

/// One controller process over one journal file: the acceptor, a dispatcher delivering in
/// `Seq` order, and the validator and scheduler folding their deliveries exactly as their shells
/// do (checkpoints, plans, leftovers), with `haproxy -c` and the executor simulated.
struct Node {
    journal: Arc<Journal>,
    mem: Mem,
    /// `mem` as of the last completed component step: what the process had made durable.
    good: Mem,
    /// Commits left before the process dies (`None`: never).
    budget: Option<u8>,
}

fn open(path: &Path) -> Arc<Journal> {
    // No fsync: the kills here are in-process (the file is reopened by this process), so the
    // page cache holds every commit; lost writes on power loss are the journal tests' concern.
    Arc::new(
        Journal::open(
            &JournalOptions::new(path)
                .trim_every_commits(8)
                .durability(haptic_journal::Durability::None),
        )
        .expect("open"),
    )
}

impl Node {
    /// Starts a process on `path` (creating or reopening the journal) through the production
    /// recovery functions, then replays every undispatched event.
    fn start(path: &Path, now: Instant, process: u32) -> Node {
        let journal = open(path);
        let meta = journal.meta().unwrap();
        let rec = scheduler::recover(&journal).unwrap();
        let (val_cp, val) = validator::recover(&journal).unwrap();
        // The publisher's production restore: its checkpoint into a router for its identity.
        let (pub_cp, restored) = Checkpoints::restore(&journal, publisher::COMPONENT).unwrap();
        let router = match restored {
            Some(ComponentState::Publisher(cp)) => {
                pdecide::RouterState::restore(identity(), runtime_config(), cp)
            }
            _ => pdecide::RouterState::new(identity(), runtime_config()),
        };
        let mem = Mem {
            sched: SchedulerState::new(settings(), format!("p{process}")),
            sched_cp: rec.checkpoints,
            pending_id: rec.pending_id,
            inflight_id: rec.inflight_id,
            timer: None,
            val,
            val_cp,
            router,
            pub_cp,
            pub_leading: false,
            val_delivered: meta.dispatched_through.0,
            sched_delivered: meta.dispatched_through.0,
            pub_delivered: meta.dispatched_through.0,
            replay_through: meta.next_seq.0.saturating_sub(1),
            running: None,
            effects: Vec::new(),
        };
        let mut node = Node {
            journal,
            good: mem.clone(),
            mem,
            budget: None,
        };
        node.sched_step(rec.input, now).expect("no budget at start");
        node.good = node.mem.clone();
        node.pump(now).expect("no budget at start");
        node
    }

    /// Run B at A's death: A's durable memory over a copy of A's journal file, the Lease lost.
    fn continue_from(dead: Node, path_a: &Path, path_b: &Path, now: Instant) -> Node {
        let Node { journal, good, .. } = dead;
        drop(journal);
        std::fs::copy(path_a, path_b).unwrap();
        let journal = open(path_b);
        let meta = journal.meta().unwrap();
        let mut node = Node {
            journal,
            good: good.clone(),
            mem: good,
            budget: None,
        };
        node.mem.replay_through = meta.next_seq.0.saturating_sub(1);
        node.mem.effects.clear();
        node.sched_step(SInput::LostLeadership, now).unwrap();
        node.mem.timer = None;
        // The dying process's publisher term ends with it.
        node.mem.pub_leading = false;
        node.pump(now).unwrap();
        node
    }

    fn commit(&mut self, batch: Batch) -> Result<Accepted, Died> {
        if let Some(b) = &mut self.budget {
            if *b == 0 {
                return Err(Died);
            }
            *b -= 1;
        }
        Ok(self.journal.accept(batch).expect("accept"))
    }

    /// The acceptor: one external input, one batch (`runtime::inputs::batch_of`).
    fn accept_input(&mut self, input: Input) -> Result<(), Died> {
        self.commit(batch_of(&input)).map(|_| ())
    }

    /// Delivers every committed, undelivered event to each component, then marks what all of
    /// them processed dispatched (as the dispatcher does after each chunk).
    fn pump(&mut self, now: Instant) -> Result<(), Died> {
        let val_kinds = validator::subscribe_options().kinds;
        let sched_kinds = scheduler::subscribe_options().kinds;
        let pub_kinds = publisher::subscribe_options().kinds;
        loop {
            let from = self
                .mem
                .val_delivered
                .min(self.mem.sched_delivered)
                .min(self.mem.pub_delivered)
                + 1;
            let chunk = self.journal.events(Seq(from), 64).unwrap();
            if chunk.is_empty() {
                return Ok(());
            }
            for (seq, header, event) in chunk {
                let replayed = seq.0 <= self.mem.replay_through;
                if seq.0 > self.mem.val_delivered {
                    if val_kinds.contains(&event.kind()) && !self.mem.val_cp.folded(seq) {
                        self.mem.val_cp.saw(seq);
                        self.validator_delivery(&event)?;
                    }
                    self.mem.val_delivered = seq.0;
                    self.good = self.mem.clone();
                }
                if seq.0 > self.mem.sched_delivered {
                    if sched_kinds.contains(&event.kind()) && !self.mem.sched_cp.folded(seq) {
                        self.mem.sched_cp.saw(seq);
                        if let Some(input) = scheduler::to_input(&event, replayed, &self.mem.sched)
                        {
                            self.sched_step(input, now)?;
                        }
                    }
                    self.mem.sched_delivered = seq.0;
                    self.good = self.mem.clone();
                }
                if seq.0 > self.mem.pub_delivered {
                    if pub_kinds.contains(&event.kind()) && !self.mem.pub_cp.folded(seq) {
                        self.publisher_delivery(seq, header.accepted_at, &event, replayed)?;
                    }
                    self.mem.pub_delivered = seq.0;
                    self.good = self.mem.clone();
                }
            }
            if let Some(b) = &mut self.budget {
                if *b == 0 {
                    return Err(Died);
                }
                *b -= 1;
            }
            let through = self
                .mem
                .val_delivered
                .min(self.mem.sched_delivered)
                .min(self.mem.pub_delivered);
            self.journal.mark_dispatched(Seq(through)).unwrap();
        }
    }

    /// The validator shell: `haproxy -c` is simulated by the verdict the test encoded in the
    /// render's trigger reason.
    fn validator_delivery(&mut self, event: &Event) -> Result<(), Died> {
        let input = match event {
            Event::RenderGateCompleted {
                render,
                verdict: GateVerdict::Pass,
                ..
            } => validator::Input::GatePassed(*render),
            Event::TemplateRendered {
                correlation,
                render,
                trigger_reason,
                ..
            } => {
                let outcome = if trigger_reason == "pass" {
                    Outcome::Pass {
                        warnings: Vec::new(),
                    }
                } else {
                    Outcome::Fail {
                        errors: vec!["[ALERT] rejected by the test".into()],
                    }
                };
                validator::Input::Validated {
                    correlation: correlation.clone(),
                    render: *render,
                    trigger: trigger_reason.clone(),
                    validation: Validation {
                        outcome,
                        duration: Duration::from_millis(3),
                    },
                }
            }
            _ => return Ok(()),
        };
        let gate = matches!(input, validator::Input::GatePassed(_));
        let events = validator::decide(&mut self.mem.val, input);
        if gate {
            self.mem.val_cp.note(self.mem.val.checkpoint());
        } else {
            self.mem.val_cp.touch(self.mem.val.checkpoint());
        }
        for e in &events {
            self.mem
                .effects
                .push(format!("validator {}", norm_event(e)));
        }
        let mut b = Batch::new();
        self.mem.val_cp.attach(&mut b);
        for e in events {
            b.event(e);
        }
        if !b.is_empty() {
            self.commit(b)?;
        }
        Ok(())
    }

    /// The publisher's `run` + `deliver`: a live `BecameLeader` starts a term (which folds
    /// `TermStarted`), work is queued by a leader or for a replay, the router's checkpoint rides
    /// with the work (or goes alone).
    fn publisher_delivery(
        &mut self,
        seq: Seq,
        at: UnixMillis,
        event: &Event,
        replayed: bool,
    ) -> Result<(), Died> {
        match event {
            Event::BecameLeader { .. } if !replayed => {
                self.mem.pub_leading = true;
                let effects = pdecide::route(&mut self.mem.router, pdecide::Input::TermStarted);
                self.publisher_effects(effects, Origin::None)?;
            }
            Event::LostLeadership { .. } if !replayed => self.mem.pub_leading = false,
            _ => {}
        }
        self.mem.pub_cp.saw(seq);
        let effects = pdecide::route(
            &mut self.mem.router,
            pdecide::Input::Event {
                seq,
                at,
                event,
                leading: self.mem.pub_leading,
                replayed,
                place: None,
            },
        );
        self.publisher_effects(effects, Origin::Seq(seq))
    }

    fn publisher_effects(
        &mut self,
        effects: Vec<pdecide::Effect>,
        origin: Origin,
    ) -> Result<(), Died> {
        self.mem
            .pub_cp
            .note(ComponentState::Publisher(self.mem.router.checkpoint()));
        let mut b = Batch::new();
        for e in effects {
            match e {
                pdecide::Effect::Enqueue(item) => {
                    self.mem
                        .effects
                        .push(format!("publisher enqueue {}", norm_json(&*item)));
                    b.enqueue(*item, origin);
                }
                pdecide::Effect::ClearCaches => self.mem.effects.push("publisher clear".into()),
            }
        }
        if b.is_empty() {
            if let Some(l) = self.mem.pub_cp.leftover() {
                self.commit(l)?;
            }
        } else {
            self.mem.pub_cp.attach(&mut b);
            self.commit(b)?;
        }
        Ok(())
    }

    /// The scheduler shell's `step`: decide, note, plan, one batch, then act.
    fn sched_step(&mut self, input: SInput, now: Instant) -> Result<(), Died> {
        let m = &mut self.mem;
        let effects = scheduler::decide(&mut m.sched, input, now);
        for e in &effects {
            m.effects.push(format!("scheduler {}", norm_effect(e)));
        }
        m.sched_cp
            .note(ComponentState::Scheduler(m.sched.checkpoint()));
        let mut plan = scheduler::plan(
            effects,
            &PlanContext {
                pending_id: m.pending_id,
                inflight_id: m.inflight_id,
                draining: false,
                term: m.sched.leader.unwrap_or_default(),
                max_timeout_retries: m.sched.settings.max_timeout_retries,
                now: UnixMillis(1_700_000_000_000),
            },
        );
        if plan.stop_executor {
            m.running = None;
        }
        if !plan.batch.is_empty() {
            m.sched_cp
                .touch(ComponentState::Scheduler(m.sched.checkpoint()));
        }
        m.sched_cp.attach(&mut plan.batch);
        if !plan.batch.is_empty() {
            let accepted = self.commit(std::mem::take(&mut plan.batch))?;
            let m = &mut self.mem;
            plan.update_slot_ids(accepted.work_ids(), &mut m.inflight_id, &mut m.pending_id);
        }
        let m = &mut self.mem;
        if let Some(request) = plan.spawn
            && let Some(id) = m.inflight_id
        {
            m.running = Some((request, id));
        }
        if let Some(at) = plan.timer {
            m.timer = Some(m.timer.map_or(at, |t| t.min(at)));
        }
        if let Some(b) = m.sched_cp.leftover() {
            self.commit(b)?;
        }
        Ok(())
    }

    /// One external op, to quiescence.
    fn apply(&mut self, op: &Op, step: usize, now: Instant, term: &mut u64) -> Result<(), Died> {
        match op {
            Op::Render { n, pass } => {
                let content = render_content(*n);
                let event = Event::TemplateRendered {
                    correlation: corr(&format!("render-{step}")),
                    render: content.checksum(),
                    config_bytes: content.config.len() as u64,
                    auxiliary_file_count: content.file_count(),
                    duration_ms: 1,
                    trigger_reason: if *pass { "pass" } else { "fail" }.into(),
                    coalescible: true,
                };
                let manifest = Arc::new(content.manifest());
                self.accept_input(Input::Rendered {
                    event,
                    content: Arc::new(content),
                    manifest,
                    source: RenderSource::Dir,
                    reply: None,
                })?;
            }
            Op::Pods(mask) => {
                let endpoints = (0..PODS).filter(|i| mask & (1 << i) != 0).map(endpoint);
                self.accept_input(Input::Event(Event::HAProxyPodsDiscovered {
                    correlation: corr(&format!("pods-{step}")),
                    endpoints: endpoints.collect(),
                    authoritative: true,
                }))?;
            }
            Op::Terminate(i) => {
                self.accept_input(Input::Event(Event::HAProxyPodTerminated {
                    correlation: corr(&format!("term-{step}")),
                    pod: pod(*i),
                }))?;
            }
            Op::Lead => {
                *term += 1;
                let mut b = batch_of(&Input::Event(Event::BecameLeader {
                    correlation: corr(&format!("lead-{step}")),
                    identity: Identity::new("eq-0"),
                    term: Term(*term),
                }));
                // A term the journal already passed (the other run's journal took it) is
                // refused: take the next one, as the Lease client does (J7).
                let current = self.journal.term().unwrap().0;
                if *term <= current {
                    *term = current + 1;
                    b = batch_of(&Input::Event(Event::BecameLeader {
                        correlation: corr(&format!("lead-{step}")),
                        identity: Identity::new("eq-0"),
                        term: Term(*term),
                    }));
                }
                self.commit(b)?;
            }
            Op::Lose => {
                self.accept_input(Input::Event(Event::LostLeadership {
                    correlation: corr(&format!("lose-{step}")),
                    identity: Identity::new("eq-0"),
                    reason: "test".into(),
                }))?;
            }
            Op::Finish { ok, partial } => {
                if let Some((request, inflight)) = self.mem.running.clone() {
                    self.executor_report(&request, inflight, *ok, *partial)?;
                    if !partial {
                        self.mem.running = None;
                        self.good.running = None;
                    }
                }
            }
            Op::Drift => {
                self.accept_input(Input::Event(Event::DriftPreventionTriggered {
                    correlation: corr(&format!("drift-{step}")),
                    time_since_last_deployment_ms: 1,
                }))?;
            }
            Op::Advance(_) => {
                if self.mem.timer.is_some_and(|t| t <= now) {
                    self.mem.timer = None;
                    self.sched_step(SInput::Tick, now)?;
                    self.good = self.mem.clone();
                }
            }
        }
        self.pump(now)
    }

    /// What the deployer journals for a run: per endpoint its applied state and result, then
    /// the completion and the ack of the in-flight slot (J3).
    fn executor_report(
        &mut self,
        request: &DeployRequest,
        inflight: WorkId,
        ok: u8,
        partial: bool,
    ) -> Result<(), Died> {
        let mut succeeded = 0;
        for (i, e) in request.endpoints.iter().enumerate() {
            let mut b = Batch::new();
            let failed = ok & (1 << i) == 0;
            b.event(Event::ConfigAppliedToPod {
                correlation: request.correlation.clone(),
                runtime_config: request.runtime_config.clone(),
                pod: e.pod.clone(),
                checksum: request.render,
                is_drift_check: false,
                sync: SyncMetadata {
                    reload_triggered: !failed,
                    error: failed.then(|| "503 from the Dataplane API".to_owned()),
                    ..SyncMetadata::default()
                },
            });
            if ok & (1 << i) != 0 {
                succeeded += 1;
                b.push(Op2::endpoint_applied(e, request.render));
                b.event(Event::InstanceDeployed {
                    correlation: request.correlation.clone(),
                    deployment: request.deployment.clone(),
                    endpoint: e.clone(),
                    duration_ms: 1,
                    reload_required: true,
                });
            } else {
                b.event(Event::InstanceDeploymentFailed {
                    correlation: request.correlation.clone(),
                    deployment: request.deployment.clone(),
                    endpoint: e.clone(),
                    error: "503 from the Dataplane API".into(),
                    retryable: true,
                });
            }
            self.commit(b)?;
            if partial {
                return Ok(());
            }
        }
        let total = u32::try_from(request.endpoints.len()).unwrap_or(0);
        let mut b = Batch::new();
        b.event(Event::DeploymentCompleted {
            correlation: request.correlation.clone(),
            deployment: request.deployment.clone(),
            total,
            succeeded,
            failed: total - succeeded,
            duration_ms: 1,
            reloads_triggered: succeeded,
            total_api_operations: 0,
            operation_breakdown: Default::default(),
        });
        if succeeded > 0 {
            b.event(Event::DeployedConfigPublishRequest {
                correlation: request.correlation.clone(),
                deployment: request.deployment.clone(),
                render: request.render,
                runtime_config: request.runtime_config.clone(),
            });
        }
        b.ack(Queue::DeployInflight, WorkKey::Slot, inflight);
        self.commit(b).map(|_| ())
    }

    /// The durable state a restart must reproduce, with fresh ids mapped out.
    fn durable(&self) -> String {
        let pending: Vec<String> = self
            .journal
            .queue(Queue::DeployPending)
            .unwrap()
            .into_iter()
            .map(|e| match e.record.item {
                WorkItem::DeployPending(r) => norm_request(&r),
                other => format!("{other:?}"),
            })
            .collect();
        let inflight: Vec<String> = self
            .journal
            .queue(Queue::DeployInflight)
            .unwrap()
            .into_iter()
            .map(|e| match e.record.item {
                WorkItem::DeployInflight(f) => norm_request(&f.request),
                other => format!("{other:?}"),
            })
            .collect();
        let applied: Vec<(String, Checksum)> = self
            .journal
            .endpoints_applied()
            .unwrap()
            .into_iter()
            .map(|a| (a.endpoint.to_string(), a.render))
            .collect();
        let mut publisher_queues = Vec::new();
        for q in [
            Queue::Publish,
            Queue::PublishDeployed,
            Queue::Invalid,
            Queue::Verdict,
            Queue::StatusPending,
        ] {
            for e in self.journal.queue(q).unwrap() {
                publisher_queues.push(format!("{q}: {}", norm_json(&e.record.item)));
            }
        }
        let router = self.mem.router.checkpoint();
        format!(
            "scheduler {}\nvalidator {:?}\npublisher {}\npublisher queues {publisher_queues:#?}\n\
             pending {pending:?}\ninflight {inflight:?}\napplied {applied:?}",
            norm_scheduler(&self.mem.sched),
            self.mem.val,
            norm_json(&router),
        )
    }
}

/// `EndpointApplied` as the deployer writes it.
struct Op2;
impl Op2 {
    fn endpoint_applied(e: &Endpoint, render: Checksum) -> haptic_journal::Op {
        haptic_journal::Op::PutEndpointApplied(EndpointApplied {
            endpoint: e.url.clone(),
            pod: e.pod.clone(),
            render,
            config_version: None,
            reload_id: None,
            applied_at: UnixMillis(1_700_000_000_000),
        })
    }
}

/// A record as JSON without what is fresh per process or per clock: deployment ids, the event
/// ids inside correlations, timestamps.
fn norm_json<T: serde::Serialize + ?Sized>(v: &T) -> String {
    fn strip(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(m) => {
                for k in [
                    "deployment",
                    "event_id",
                    "causation_id",
                    "rendered_at",
                    "validated_at",
                    "deployed_at",
                    "observed_at",
                    "at",
                ] {
                    m.remove(k);
                }
                for x in m.values_mut() {
                    strip(x);
                }
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut j = serde_json::to_value(v).unwrap();
    strip(&mut j);
    j.to_string()
}

fn norm_corr(c: &Correlation) -> String {
    c.correlation_id
        .as_ref()
        .map_or_else(|| "-".to_owned(), ToString::to_string)
}

fn norm_request(r: &DeployRequest) -> String {
    let eps: Vec<&str> = r.endpoints.iter().map(|e| e.url.as_str()).collect();
    format!(
        "{} -> {eps:?} ({}, {}, {})",
        r.render,
        r.reason,
        r.runtime_config.name,
        norm_corr(&r.correlation)
    )
}

fn norm_effect(e: &SEffect) -> String {
    match e {
        SEffect::PersistPending(r) => format!("persist {}", norm_request(r)),
        SEffect::Start {
            request,
            from_pending,
        } => format!("start {} pending={from_pending}", norm_request(request)),
        SEffect::DropPending(r) => format!("drop-pending {}", norm_request(r)),
        SEffect::Resume(r) => format!("resume {}", norm_request(r)),
        SEffect::Cancel { correlation, .. } => format!("cancel {}", norm_corr(correlation)),
        SEffect::StopExecutor => "stop".into(),
        SEffect::GiveUp { request, endpoints } => {
            format!("give-up {} {}", norm_request(request), endpoints.len())
        }
        SEffect::ArmTimer(_) => "timer".into(),
        SEffect::Quarantined {
            request,
            endpoint,
            attempts,
            ..
        } => format!(
            "quarantined {} {} attempt {attempts}",
            norm_request(request),
            endpoint.pod.name
        ),
        SEffect::Rollback { change, .. } => format!("rollback {change:?}"),
    }
}

fn norm_event(e: &Event) -> String {
    match e {
        Event::ValidationCompleted { render, .. } => format!("completed {render}"),
        Event::ValidationFailed { render, .. } => format!("failed {render:?}"),
        Event::RenderGateCompleted {
            render, verdict, ..
        } => format!("gate {render} {verdict:?}"),
        other => other.kind().as_str().to_owned(),
    }
}

/// The scheduler's state without per-process ids and per-term timers.
fn norm_scheduler(s: &SchedulerState) -> String {
    let phase = match &s.phase {
        scheduler::Phase::Idle => "idle".to_owned(),
        scheduler::Phase::Deploying { request, .. } => {
            format!("deploying {}", norm_request(request))
        }
    };
    format!(
        "last_validated={:?} endpoints={:?} runtime_config={:?} phase={phase} pending={:?} \
         resume={:?} applied={:?} backoff={:?} given_up={:?} timeout_retries={:?} leader={:?} \
         previous={:?} rollback={:?}",
        s.last_validated.as_ref().map(|(r, c)| (r, norm_corr(c))),
        s.endpoints
            .iter()
            .map(|e| e.url.as_str())
            .collect::<Vec<_>>(),
        s.runtime_config,
        s.pending.as_ref().map(norm_request),
        s.resume.as_ref().map(norm_request),
        s.applied,
        s.backoff.keys().collect::<Vec<_>>(),
        s.given_up,
        s.timeout_retries,
        s.leader,
        s.previous_validated,
        s.rollback.as_ref().map(|h| (&h.value, h.render)),
    )
}

fn identity() -> ConfigIdentity {
    ConfigIdentity {
        name: ObjectName::new("eq"),
        namespace: Namespace::new("haptic"),
        source_uid: None,
        source_generation: None,
    }
}

fn runtime_config() -> RuntimeConfigRef {
    RuntimeConfigRef {
        namespace: Namespace::new("haptic"),
        name: ObjectName::new("eq-haproxycfg"),
    }
}

/// The first input every run gets: the config identity, so the HAProxyCfg name is known.
fn identity_input() -> Input {
    Input::Event(Event::ConfigValidated {
        correlation: corr("config"),
        identity: identity(),
    })
}

fn run_case(ops: &[Op], stop: Stop) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let (path_a, path_b) = (dir.path().join("a.redb"), dir.path().join("b.redb"));
    let t0 = Instant::now();
    let mut now = t0;
    let mut term = 0u64;
    let mut a = Node::start(&path_a, now, 1);
    a.accept_input(identity_input()).unwrap();
    a.pump(now).unwrap();
    let at = match stop {
        Stop::Graceful { at } | Stop::Kill { at, .. } => at,
    };
    let mut b: Option<Node> = None;
    for (step, op) in ops.iter().enumerate() {
        if let Op::Advance(ms) = op {
            now += Duration::from_millis(u64::from(*ms));
        }
        let Some(bn) = b.as_mut() else {
            if step < at {
                a.apply(op, step, now, &mut term).unwrap();
                continue;
            }
            // A stops at step `at`: gracefully after it, or killed after `commits` commits.
            match stop {
                Stop::Graceful { .. } => a.apply(op, step, now, &mut term).unwrap(),
                Stop::Kill { commits, .. } => {
                    a.budget = Some(commits);
                    let _ = a.apply(op, step, now, &mut term);
                }
            }
            let mut cont = Node::continue_from(a, &path_a, &path_b, now);
            a = Node::start(&path_a, now, 2);
            prop_assert_eq!(
                a.durable(),
                cont.durable(),
                "after the restart at step {} ({:?}) of {:?}",
                step,
                stop,
                ops
            );
            a.mem.effects.clear();
            cont.mem.effects.clear();
            b = Some(cont);
            continue;
        };
        // After the restart: the same ops, the same effects.
        let mut term_b = term;
        a.apply(op, step, now, &mut term).unwrap();
        bn.apply(op, step, now, &mut term_b).unwrap();
        prop_assert_eq!(
            &a.mem.effects,
            &bn.mem.effects,
            "effects of step {} ({:?}) after the restart at {:?} of {:?}",
            step,
            op,
            stop,
            ops
        );
        prop_assert_eq!(a.durable(), bn.durable(), "state after step {}", step);
    }
    prop_assert!(a.journal.verify().unwrap().is_clean());
    Ok(())
}

/// 256 cases in the normal run; `HAPTIC_SOAK=1` runs 4096; `PROPTEST_CASES` overrides both.
fn cases() -> u32 {
    if let Some(n) = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return n;
    }
    if std::env::var_os("HAPTIC_SOAK").is_some() {
        4096
    } else {
        256
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        max_shrink_iters: 2000,
        ..ProptestConfig::default()
    })]

    #[test]
    fn a_restart_anywhere_continues_exactly((ops, stop) in scenario(40)) {
        run_case(&ops, stop)?;
    }
}

#[test]
fn a_graceful_restart_keeps_the_last_validated_render() {
    // The scheduler's last validated render used to be recovered only from a pending or
    // in-flight slot: after a graceful stop with the render deployed, it was gone.
    let ops = [
        Op::Pods(0b11),
        Op::Lead,
        Op::Render { n: 1, pass: true },
        Op::Finish {
            ok: 0b11,
            partial: false,
        },
        Op::Advance(100),
        Op::Lead,
        Op::Drift,
    ];
    run_case(&ops, Stop::Graceful { at: 4 }).unwrap();
}

#[test]
fn the_equivalence_check_sees_a_lost_state() {
    // The checker itself: a restarted scheduler that lost its last validated render differs.
    let dir = tempfile::tempdir().unwrap();
    let now = Instant::now();
    let mut a = Node::start(&dir.path().join("a.redb"), now, 1);
    let mut term = 0;
    a.accept_input(identity_input()).unwrap();
    a.pump(now).unwrap();
    for (i, op) in [Op::Pods(0b1), Op::Render { n: 0, pass: true }]
        .iter()
        .enumerate()
    {
        a.apply(op, i, now, &mut term).unwrap();
    }
    let before = a.durable();
    a.mem.sched.last_validated = None;
    assert_ne!(before, a.durable());
}
