//! The event router: which journal work an accepted event becomes, and the state it folds (the
//! publisher's checkpoint, DESIGN.md J11).
//!
//! The router folds *every* event it is given, leader or not: identity, render order, the known
//! pod set and the gate's latch are facts of the journal, not of a term. Only when `queue` is
//! set (this replica leads, or the event is a replay of one accepted before a restart) does an
//! event become work. A pod that leaves while no work is queued is remembered in
//! [`RouterState::gone`]; its status removal is queued as soon as work is queued again (the next
//! term), so a pod that went away while this replica followed, or while the controller was
//! down, leaves the published status without any read of the cluster.

use std::collections::{BTreeMap, BTreeSet};

use haptic_journal::{
    Checksum, ConfigIdentity, DeployedPublishItem, Event, GateVerdict, InvalidPublishItem, PodRef,
    PodStatusChange, PodStatusItem, PublishItem, PublisherCheckpoint, RenderPlace,
    RuntimeConfigRef, Seq, UnixMillis, VerdictItem, WorkItem,
};

/// How many render events are remembered to look up a render's `Seq` and time.
pub const RENDERS_REMEMBERED: usize = 64;

/// How many pods that left while no work was queued are remembered (oldest forgotten first).
/// Each costs one status removal at the next term; past the bound a follower that saw more pod
/// churn than this leaves the oldest entries to the leader that removed them when they left.
pub const GONE_REMEMBERED: usize = 1024;

/// `render_seq` of a deploy-driven request whose render has no known place in render order
/// while a checkpoint holds another render: older than any published render (per-pod status
/// only, the spec is left as it is). See [`route`].
pub const UNPLACED_RENDER_SEQ: Seq = Seq(0);

/// The router's state, owned by the publisher's shell. Its durable part is the publisher's
/// checkpoint ([`RouterState::checkpoint`]); it is restored exactly at start
/// ([`RouterState::restore`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouterState {
    /// The identity the publisher was started with (used until a `config.validated`).
    started_with: ConfigIdentity,
    /// The identity publications belong to.
    pub identity: ConfigIdentity,
    /// Whether `identity` came from a `config.validated` (else it is `started_with`).
    validated: bool,
    /// The main HAProxyCfg.
    pub runtime_config: RuntimeConfigRef,
    /// Recent renders: checksum -> (`Seq` of `template.rendered`, when), at most
    /// [`RENDERS_REMEMBERED`].
    rendered: BTreeMap<Checksum, (Seq, UnixMillis)>,
    /// Pods known to exist (discovered or reported by a deployment), by name.
    pub known_pods: BTreeMap<String, PodRef>,
    /// Whether an authoritative discovery was folded (`known_pods` is the live set).
    pub discovered: bool,
    /// Pods that left while no work was queued, oldest first, names unique, at most
    /// [`GONE_REMEMBERED`]: their status removal is owed.
    pub gone: Vec<PodRef>,
    /// Mirror of the render gate's latch: pinned after a failed render until one passes.
    pub pinned: bool,
    /// The last event folded while queueing (a leader's live delivery or a replay): the work of
    /// every event up to it is in the queues.
    queued_through: Option<Seq>,
    /// Whether this replica led when it folded the last event: the live term for a live
    /// delivery, the log's leadership events for a replay. A replayed event becomes work
    /// exactly when it did (or would have) for the process that delivered it live, so a restart
    /// queues neither more nor less than a run that never stopped (DESIGN.md J11).
    pub leading: bool,
    /// The `haproxy-haptic.org/retry-rejected` annotation value of the last
    /// `deployment.retry.request` folded (see [`retry_requested`]).
    pub retry_rejected: Option<String>,
}

/// A render's place in render order found in the journal by the shell (the router did not
/// know it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// `seq` (its `template.rendered` event, or a durable stand-in) and when it was rendered.
    At {
        /// The place.
        seq: Seq,
        /// When it was rendered.
        at: UnixMillis,
    },
    /// No place found; `published` is the render of the published checkpoint, if any.
    Unknown {
        /// The published checkpoint's render.
        published: Option<Checksum>,
    },
}

/// One fact the router folds.
#[derive(Clone, Copy, Debug)]
pub enum Input<'a> {
    /// An accepted event not yet folded, at `seq`, accepted at `at`.
    Event {
        /// Its position in the log.
        seq: Seq,
        /// When it was accepted.
        at: UnixMillis,
        /// The event.
        event: &'a Event,
        /// Whether a term of this replica runs now (the shell's live leadership).
        leading: bool,
        /// Whether it was committed before this process started (a replay): it becomes work
        /// exactly when it did for the process that first saw it, as the log's leadership
        /// events and the checkpoint say ([`RouterState::leading`]), not by the live term.
        replayed: bool,
        /// Where its render stands when the router did not know (looked up by the shell).
        place: Option<Place>,
    },
    /// A term of this replica began: queue what is owed.
    TermStarted,
    /// The pods the published HAProxyCfg status lists (read at term start only on a journal
    /// that had no checkpoint): folded whatever the order with the first discovery.
    StatusListed {
        /// The listed pods.
        pods: &'a [PodRef],
    },
}

/// What the shell does for one input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Journal this work item (origin: the event, if any), in the batch that carries the
    /// router's checkpoint.
    Enqueue(Box<WorkItem>),
    /// Forget the per-term caches (LostLeadership): what the heal watch expects.
    ClearCaches,
}

impl RouterState {
    /// Fresh state for `identity`, whose HAProxyCfg is `runtime_config`.
    #[must_use]
    pub fn new(identity: ConfigIdentity, runtime_config: RuntimeConfigRef) -> Self {
        RouterState {
            started_with: identity.clone(),
            identity,
            validated: false,
            runtime_config,
            rendered: BTreeMap::new(),
            known_pods: BTreeMap::new(),
            discovered: false,
            gone: Vec::new(),
            pinned: false,
            queued_through: None,
            leading: false,
            retry_rejected: None,
        }
    }

    /// The state a checkpoint describes (the inverse of [`RouterState::checkpoint`]).
    #[must_use]
    pub fn restore(
        identity: ConfigIdentity,
        runtime_config: RuntimeConfigRef,
        cp: PublisherCheckpoint,
    ) -> Self {
        let mut s = RouterState::new(identity, runtime_config);
        if let Some(i) = cp.identity {
            s.identity = i;
            s.validated = true;
        }
        s.rendered = cp
            .rendered
            .into_iter()
            .map(|p| (p.render, (p.seq, p.at)))
            .collect();
        s.known_pods = cp
            .known_pods
            .into_iter()
            .map(|p| (p.name.as_str().to_owned(), p))
            .collect();
        s.discovered = cp.discovered;
        s.gone = cp.gone;
        s.pinned = cp.pinned;
        s.queued_through = cp.queued_through;
        s.leading = cp.leading;
        s.retry_rejected = cp.retry_rejected;
        s
    }

    /// The durable state: the publisher's checkpoint.
    #[must_use]
    pub fn checkpoint(&self) -> PublisherCheckpoint {
        let mut rendered: Vec<RenderPlace> = self
            .rendered
            .iter()
            .map(|(c, (s, at))| RenderPlace {
                render: *c,
                seq: *s,
                at: *at,
            })
            .collect();
        rendered.sort_by_key(|p| (p.seq, p.render));
        PublisherCheckpoint {
            identity: self.validated.then(|| self.identity.clone()),
            rendered,
            known_pods: self.known_pods.values().cloned().collect(),
            discovered: self.discovered,
            gone: self.gone.clone(),
            pinned: self.pinned,
            queued_through: self.queued_through,
            leading: self.leading,
            retry_rejected: self.retry_rejected.clone(),
        }
    }

    fn render_info(&self, render: &Checksum, seq: Seq, at: UnixMillis) -> (Seq, UnixMillis) {
        self.rendered.get(render).copied().unwrap_or((seq, at))
    }

    /// Whether the render order of `render` is known.
    #[must_use]
    pub fn knows(&self, render: &Checksum) -> bool {
        self.rendered.contains_key(render)
    }

    /// Records `render`'s place in render order (bounded: the oldest is forgotten first).
    fn remember(&mut self, render: Checksum, seq: Seq, at: UnixMillis) {
        self.rendered.insert(render, (seq, at));
        if self.rendered.len() > RENDERS_REMEMBERED
            && let Some(oldest) = self
                .rendered
                .iter()
                .min_by_key(|(_, (s, _))| *s)
                .map(|(c, _)| *c)
        {
            self.rendered.remove(&oldest);
        }
    }

    fn owe_removal(&mut self, pod: PodRef) {
        self.gone.retain(|p| p.name != pod.name);
        self.gone.push(pod);
        if self.gone.len() > GONE_REMEMBERED {
            self.gone.remove(0);
        }
    }

    fn exists_again(&mut self, name: &str) {
        self.gone.retain(|p| p.name.as_str() != name);
    }

    fn removed(&self, pod: PodRef) -> Effect {
        enqueue(WorkItem::Status(PodStatusItem {
            runtime_config: self.runtime_config.clone(),
            pod,
            change: PodStatusChange::Removed,
        }))
    }

    /// A pod left: its removal is queued now, or owed until work is queued again.
    fn left(&mut self, pod: PodRef, queue: bool, out: &mut Vec<Effect>) {
        if queue {
            self.exists_again(pod.name.as_str());
            out.push(self.removed(pod));
        } else {
            self.owe_removal(pod);
        }
    }

    fn flush_gone(&mut self, out: &mut Vec<Effect>) {
        for pod in std::mem::take(&mut self.gone) {
            out.push(self.removed(pod));
        }
    }
}

/// Whether the annotation `haproxy-haptic.org/retry-rejected` with value `seen` on the main
/// HAProxyCfg is a new retry request: set, and not the value of the last request folded.
#[must_use]
pub fn retry_requested(state: &RouterState, seen: Option<&str>) -> bool {
    seen.is_some_and(|v| state.retry_rejected.as_deref() != Some(v))
}

fn enqueue(item: WorkItem) -> Effect {
    Effect::Enqueue(Box::new(item))
}

/// The render an event asks the router to place, if any (the shell looks its place up in the
/// journal when [`RouterState::knows`] says no).
#[must_use]
pub fn render_of(event: &Event) -> Option<Checksum> {
    match event {
        Event::RenderGateCompleted { render, .. }
        | Event::DeployedConfigPublishRequest { render, .. } => Some(*render),
        Event::ValidationFailed { render, .. } => *render,
        _ => None,
    }
}

/// Folds one input into `state` and returns the work it becomes.
///
/// A render's place in render order (`render_seq`) is the `Seq` of its `template.rendered`
/// event as remembered in `state`, or the [`Place`] the shell found in the journal. A render
/// still unknown gets the event's own `seq` (a gate verdict or failure follows its render
/// closely), except a deploy-driven request of unknown place ([`Place::Unknown`]) while another
/// render is published, which gets [`UNPLACED_RENDER_SEQ`] (never newer than the published
/// checkpoint: status only).
pub fn route(state: &mut RouterState, input: Input<'_>) -> Vec<Effect> {
    let mut out = Vec::new();
    match input {
        Input::Event {
            seq,
            at,
            event,
            leading,
            replayed,
            place,
        } => {
            // A live delivery follows the live term (a new process starts as a follower: the
            // first live event records that); a replay follows the log.
            if replayed {
                match event {
                    Event::BecameLeader { .. } => state.leading = true,
                    Event::LostLeadership { .. } => state.leading = false,
                    _ => {}
                }
            } else {
                state.leading = leading;
            }
            let queue = state.leading;
            if let (Some(Place::At { seq: s, at: a }), Some(r)) = (place, render_of(event)) {
                state.remember(r, s, a);
            }
            // A deploy-driven request for a render of unknown order, while another render is
            // published, updates per-pod status only (never moves the spec back).
            let unplaced = matches!(
                (place, render_of(event)),
                (Some(Place::Unknown { published: Some(p) }), Some(r)) if p != r
            ) && matches!(event, Event::DeployedConfigPublishRequest { .. });
            fold_event(state, seq, at, event, queue, unplaced, &mut out);
            if queue {
                state.flush_gone(&mut out);
                // Folded while queueing: the work of every event up to here is in the queues,
                // whether this one queued any (a term start may have flushed what it owed
                // before it; a restarted router restored after that flush queues nothing
                // again, a router that kept its memory re-flushes the same items).
                state.queued_through = Some(seq);
            } else {
                out.retain(|e| !matches!(e, Effect::Enqueue(_)));
            }
        }
        // Pods discovered while this replica followed get no pending entry here: `status-pending`
        // keeps one item per pod, so a `Discovered` queued now would replace a deployment report
        // still queued for the pod (the crash matrix's `status::after_park` found it). The new
        // leader's first deployment reports every pod.
        Input::TermStarted => {
            state.flush_gone(&mut out);
            // Pods discovered while this replica followed got no pending entry (issue 27): a
            // new term queues one for every discovered pod. The journal never lets it replace
            // a report queued or parked for the pod, and a pod with an entry keeps it, so this
            // adds entries for the pods that have none and changes nothing else.
            if state.discovered {
                for p in state.known_pods.values() {
                    out.push(enqueue(WorkItem::Status(PodStatusItem {
                        runtime_config: state.runtime_config.clone(),
                        pod: p.clone(),
                        change: PodStatusChange::Discovered,
                    })));
                }
            }
        }
        Input::StatusListed { pods } => {
            for p in pods {
                let name = p.name.as_str();
                if state.known_pods.contains_key(name)
                    || state.gone.iter().any(|g| g.name == p.name)
                {
                    continue;
                }
                if state.discovered {
                    // A discovery already said which pods exist: this one is gone.
                    out.push(state.removed(p.clone()));
                } else {
                    // The first discovery decides (it removes it when it lists it no more).
                    state.known_pods.insert(name.to_owned(), p.clone());
                }
            }
        }
    }
    out
}

#[allow(clippy::too_many_lines)]
fn fold_event(
    state: &mut RouterState,
    seq: Seq,
    at: UnixMillis,
    event: &Event,
    queue: bool,
    unplaced: bool,
    out: &mut Vec<Effect>,
) {
    match event {
        Event::ConfigValidated { identity, .. } => {
            state.identity = identity.clone();
            state.validated = true;
        }
        Event::TemplateRendered { render, .. } => state.remember(*render, seq, at),
        Event::RenderGateCompleted {
            correlation,
            render,
            verdict,
            messages,
            ..
        } => {
            let passed = *verdict == GateVerdict::Pass;
            state.pinned = !passed;
            let (render_seq, rendered_at) = state.render_info(render, seq, at);
            out.push(enqueue(WorkItem::Verdict(VerdictItem {
                identity: state.identity.clone(),
                render: *render,
                render_seq,
                passed,
                pinned: !passed,
                messages: messages.clone(),
                correlation: correlation.clone(),
            })));
            if passed {
                out.push(enqueue(WorkItem::Publish(PublishItem {
                    identity: state.identity.clone(),
                    render: *render,
                    render_seq,
                    rendered_at,
                    validated_at: at,
                    correlation: correlation.clone(),
                })));
            }
        }
        Event::ValidationFailed {
            correlation,
            render,
            errors,
            ..
        } => {
            let render_seq = render.map_or(seq, |r| state.render_info(&r, seq, at).0);
            out.push(enqueue(WorkItem::Invalid(InvalidPublishItem {
                identity: state.identity.clone(),
                render: *render,
                render_seq,
                errors: errors.clone(),
                correlation: correlation.clone(),
            })));
        }
        Event::DeployedConfigPublishRequest {
            correlation,
            deployment,
            render,
            runtime_config,
        } => {
            let render_seq = if unplaced {
                UNPLACED_RENDER_SEQ
            } else {
                state.render_info(render, seq, at).0
            };
            out.push(enqueue(WorkItem::PublishDeployed(DeployedPublishItem {
                runtime_config: runtime_config.clone(),
                render: *render,
                render_seq,
                deployment: deployment.clone(),
                deployed_at: at,
                correlation: correlation.clone(),
            })));
        }
        Event::ConfigAppliedToPod {
            runtime_config,
            pod,
            checksum,
            is_drift_check,
            sync,
            ..
        } => {
            // The outcome of a deployment to a pod that discovery has since reported gone (it
            // left while the deployment ran, or while the controller was down and the
            // recovered deployment still targeted it) is no status: the pod has none any
            // more. Folding it would bring the pod back and overwrite its queued removal.
            if state.discovered && !state.known_pods.contains_key(pod.name.as_str()) {
                return;
            }
            state
                .known_pods
                .insert(pod.name.as_str().to_owned(), pod.clone());
            state.exists_again(pod.name.as_str());
            out.push(enqueue(WorkItem::Status(PodStatusItem {
                runtime_config: runtime_config.clone(),
                pod: pod.clone(),
                change: PodStatusChange::Applied {
                    checksum: *checksum,
                    is_drift_check: *is_drift_check,
                    sync: sync.clone(),
                    observed_at: at,
                },
            })));
        }
        Event::DeploymentQuarantined {
            runtime_config,
            pod,
            render,
            message,
            attempts,
            next_retry_at,
            ..
        } => {
            // The retry schedule of a pod's quarantine (issue 27): its own status item (key
            // `<pod key>#quarantine`), so it never replaces the pod's deployment report.
            if state.discovered && !state.known_pods.contains_key(pod.name.as_str()) {
                return;
            }
            out.push(enqueue(WorkItem::Status(PodStatusItem {
                runtime_config: runtime_config.clone(),
                pod: pod.clone(),
                change: PodStatusChange::Quarantined {
                    checksum: *render,
                    message: message.clone(),
                    attempts: *attempts,
                    next_retry_at: *next_retry_at,
                },
            })));
        }
        Event::HAProxyPodTerminated { pod, .. } => {
            state.known_pods.remove(pod.name.as_str());
            state.left(pod.clone(), queue, out);
        }
        Event::HAProxyPodsDiscovered {
            endpoints,
            authoritative,
            ..
        } => {
            if endpoints.is_empty() && !authoritative {
                return;
            }
            let live: BTreeSet<&str> = endpoints.iter().map(|e| e.pod.name.as_str()).collect();
            // Pods new to this router get a pending entry (issue 27: `Synced` counts a
            // discovered pod until its first sync is reported; one with an entry keeps it).
            for e in endpoints {
                if !state.known_pods.contains_key(e.pod.name.as_str()) {
                    out.push(enqueue(WorkItem::Status(PodStatusItem {
                        runtime_config: state.runtime_config.clone(),
                        pod: e.pod.clone(),
                        change: PodStatusChange::Discovered,
                    })));
                }
            }
            let gone: Vec<PodRef> = state
                .known_pods
                .iter()
                .filter(|(name, _)| !live.contains(name.as_str()))
                .map(|(_, p)| p.clone())
                .collect();
            state.known_pods = endpoints
                .iter()
                .map(|e| (e.pod.name.as_str().to_owned(), e.pod.clone()))
                .collect();
            for name in &live {
                state.exists_again(name);
            }
            state.discovered = true;
            for p in gone {
                state.left(p, queue, out);
            }
        }
        Event::LostLeadership { .. } => out.push(Effect::ClearCaches),
        Event::DeploymentRetryRequest { value, .. } => {
            state.retry_rejected = Some(value.clone());
        }
        _ => {}
    }
}
