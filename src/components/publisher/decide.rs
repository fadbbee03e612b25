//! The publisher's pure core: which journal work an accepted event becomes, the retry policy,
//! the throttle and the per-pod status merge. No I/O, no clock (time is passed in).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use haptic_journal::{
    Checksum, ConfigIdentity, DeployedPublishItem, Event, GateVerdict, InvalidPublishItem, PodRef,
    PodStatusChange, PodStatusItem, PublishItem, RuntimeConfigRef, Seq, UnixMillis, VerdictItem,
    WorkItem,
};

use crate::core::ErrorKind;
use crate::k8s::crd::{OperationSummary, PodDeploymentStatus};
use crate::k8s::writer::{PodStatusInput, k8s_time};

/// How many render events are remembered to look up a render's `Seq` and time.
const RENDERS_REMEMBERED: usize = 64;

/// In-memory state of the event adapter (rebuilt by replay; cleared by LostLeadership).
#[derive(Clone, Debug)]
pub struct RouterState {
    /// The identity publications belong to (seeded at construction, refreshed by
    /// ConfigValidated).
    pub identity: ConfigIdentity,
    seeded: ConfigIdentity,
    /// The main HAProxyCfg.
    pub runtime_config: RuntimeConfigRef,
    /// Recent renders: checksum -> (`Seq` of `template.rendered`, when).
    rendered: BTreeMap<Checksum, (Seq, UnixMillis)>,
    /// Pods seen (discovered or with status), by name.
    pub known_pods: BTreeMap<String, PodRef>,
    /// Mirror of the render gate's latch: pinned after a failed render until one passes.
    pub pinned: bool,
}

impl RouterState {
    /// Fresh state for `identity`, whose HAProxyCfg is `runtime_config`.
    #[must_use]
    pub fn new(identity: ConfigIdentity, runtime_config: RuntimeConfigRef) -> Self {
        RouterState {
            seeded: identity.clone(),
            identity,
            runtime_config,
            rendered: BTreeMap::new(),
            known_pods: BTreeMap::new(),
            pinned: false,
        }
    }

    fn render_info(&self, render: &Checksum, seq: Seq, at: UnixMillis) -> (Seq, UnixMillis) {
        self.rendered.get(render).copied().unwrap_or((seq, at))
    }

    /// Whether the render order of `render` is known in memory.
    #[must_use]
    pub fn knows(&self, render: &Checksum) -> bool {
        self.rendered.contains_key(render)
    }

    /// Records `render`'s place in render order: `seq` (its `template.rendered` event, or a
    /// durable stand-in the shell found in the journal) and when it was rendered. Used before
    /// routing an event whose render is not in memory (after a restart, a term change, or
    /// more than [`RENDERS_REMEMBERED`] renders later), so the order survives restarts.
    pub fn remember(&mut self, render: Checksum, seq: Seq, at: UnixMillis) {
        self.rendered.insert(render, (seq, at));
        self.forget_oldest();
    }

    fn forget_oldest(&mut self) {
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
}

/// `render_seq` of a deploy-driven request whose render has no known place in render order
/// while a checkpoint holds another render: older than any published render (per-pod status
/// only, the spec is left as it is). See [`route`].
pub const UNPLACED_RENDER_SEQ: Seq = Seq(0);

/// What the shell does for one event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Journal this work item (origin: the event).
    Enqueue(Box<WorkItem>),
    /// Forget in-memory caches (LostLeadership): last published checksum, expected objects.
    ClearCaches,
}

fn enqueue(item: WorkItem) -> Effect {
    Effect::Enqueue(Box::new(item))
}

/// Routes one accepted event (`seq`, accepted at `at`) to journal work.
///
/// A render's place in render order (`render_seq`) is the `Seq` of its `template.rendered`
/// event as remembered in `state`; the shell fills `state` from the journal first when it is
/// not in memory ([`RouterState::remember`]). A render still unknown gets the event's own
/// `seq` (a gate verdict or failure follows its render closely), except a deploy-driven
/// request, which the shell places itself (never newer than the published checkpoint).
pub fn route(state: &mut RouterState, seq: Seq, at: UnixMillis, event: &Event) -> Vec<Effect> {
    match event {
        Event::ConfigValidated { identity, .. } => {
            state.identity = identity.clone();
            Vec::new()
        }
        Event::TemplateRendered { render, .. } => {
            state.remember(*render, seq, at);
            Vec::new()
        }
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
            let mut out = vec![enqueue(WorkItem::Verdict(VerdictItem {
                identity: state.identity.clone(),
                render: *render,
                render_seq,
                passed,
                pinned: !passed,
                messages: messages.clone(),
                correlation: correlation.clone(),
            }))];
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
            out
        }
        Event::ValidationFailed {
            correlation,
            render,
            errors,
            ..
        } => {
            let render_seq = render.map_or(seq, |r| state.render_info(&r, seq, at).0);
            vec![enqueue(WorkItem::Invalid(InvalidPublishItem {
                identity: state.identity.clone(),
                render: *render,
                render_seq,
                errors: errors.clone(),
                correlation: correlation.clone(),
            }))]
        }
        Event::DeployedConfigPublishRequest {
            correlation,
            deployment,
            render,
            runtime_config,
        } => {
            let (render_seq, _) = state.render_info(render, seq, at);
            vec![enqueue(WorkItem::PublishDeployed(DeployedPublishItem {
                runtime_config: runtime_config.clone(),
                render: *render,
                render_seq,
                deployment: deployment.clone(),
                deployed_at: at,
                correlation: correlation.clone(),
            }))]
        }
        Event::ConfigAppliedToPod {
            runtime_config,
            pod,
            checksum,
            is_drift_check,
            sync,
            ..
        } => {
            state
                .known_pods
                .insert(pod.name.as_str().to_owned(), pod.clone());
            vec![enqueue(WorkItem::Status(PodStatusItem {
                runtime_config: runtime_config.clone(),
                pod: pod.clone(),
                change: PodStatusChange::Applied {
                    checksum: *checksum,
                    is_drift_check: *is_drift_check,
                    sync: sync.clone(),
                    observed_at: at,
                },
            }))]
        }
        Event::HAProxyPodTerminated { pod, .. } => {
            state.known_pods.remove(pod.name.as_str());
            vec![removed(state, pod.clone())]
        }
        Event::HAProxyPodsDiscovered {
            endpoints,
            authoritative,
            ..
        } => {
            if endpoints.is_empty() && !authoritative {
                return Vec::new();
            }
            let live: BTreeSet<&str> = endpoints.iter().map(|e| e.pod.name.as_str()).collect();
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
            gone.into_iter().map(|p| removed(state, p)).collect()
        }
        Event::LostLeadership { .. } => {
            state.identity = state.seeded.clone();
            state.rendered.clear();
            vec![Effect::ClearCaches]
        }
        _ => Vec::new(),
    }
}

fn removed(state: &RouterState, pod: PodRef) -> Effect {
    enqueue(WorkItem::Status(PodStatusItem {
        runtime_config: state.runtime_config.clone(),
        pod,
        change: PodStatusChange::Removed,
    }))
}

/// Retry policy of every worker: bounded exponential backoff.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// First delay. Default: 200 ms.
    pub initial: Duration,
    /// Upper bound of one delay. Default: 30 s.
    pub max_delay: Duration,
    /// Attempts before a transiently failing item is released (logged, condition kept).
    /// Default: 20.
    pub max_attempts: u32,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            initial: Duration::from_millis(200),
            max_delay: Duration::from_secs(30),
            max_attempts: 20,
        }
    }
}

/// What to do after a failed attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retry {
    /// Try again after this delay.
    After(Duration),
    /// Release the item: permanent, or out of attempts.
    GiveUp,
}

/// The decision after failed attempt number `attempt` (1-based) with error class `kind`; a
/// server's `Retry-After` is honoured (at least that long, capped at `max_delay`).
#[must_use]
pub fn on_failure(
    policy: &RetryPolicy,
    kind: ErrorKind,
    attempt: u32,
    retry_after: Option<Duration>,
) -> Retry {
    if kind == ErrorKind::Fatal || attempt >= policy.max_attempts {
        return Retry::GiveUp;
    }
    let exp = attempt.saturating_sub(1).min(20);
    let delay = policy
        .initial
        .saturating_mul(1u32 << exp)
        .min(policy.max_delay);
    let delay = retry_after.map_or(delay, |r| r.min(policy.max_delay).max(delay));
    Retry::After(delay)
}

/// Leading-edge refractory throttle: `None` = go now; `Some(wait)` = the interval since the
/// last write has not passed. `interval` zero disables it.
#[must_use]
pub fn throttle_wait(interval: Duration, last: Option<Instant>, now: Instant) -> Option<Duration> {
    let last = last?;
    if interval.is_zero() {
        return None;
    }
    let end = last + interval;
    (end > now).then(|| end - now)
}

/// Builds a pod's new `deployedToPods[]` entry from the old one and an applied deployment
/// (upstream-behaviour.md 10.4, without zero timestamps: `deployedAt` only on success, or the
/// old one kept).
#[must_use]
pub fn merge_pod_entry(
    old: Option<&PodDeploymentStatus>,
    input: &PodStatusInput,
) -> PodDeploymentStatus {
    let PodStatusChange::Applied {
        checksum,
        sync,
        observed_at,
        ..
    } = &input.change
    else {
        return old.cloned().unwrap_or_default();
    };
    let ok = sync.error.is_none();
    let c = &sync.operation_counts;
    let summary = (c.total_api_operations > 0).then(|| OperationSummary {
        total_api_operations: i64::from(c.total_api_operations),
        backends_added: i64::from(c.backends.added),
        backends_removed: i64::from(c.backends.removed),
        backends_modified: i64::from(c.backends.modified),
        servers_added: i64::from(c.servers.added),
        servers_removed: i64::from(c.servers.removed),
        servers_modified: i64::from(c.servers.modified),
        frontends_added: i64::from(c.frontends.added),
        frontends_removed: i64::from(c.frontends.removed),
        frontends_modified: i64::from(c.frontends.modified),
    });
    let old_errors = old.and_then(|o| o.consecutive_errors).unwrap_or(0);
    PodDeploymentStatus {
        pod_name: input.pod.clone(),
        namespace: Some(input.namespace.clone()),
        checksum: Some(*checksum),
        deployed_at: if ok {
            Some(k8s_time(*observed_at))
        } else {
            old.and_then(|o| o.deployed_at.clone())
        },
        last_reload_at: if sync.reload_triggered {
            Some(k8s_time(*observed_at))
        } else {
            old.and_then(|o| o.last_reload_at.clone())
        },
        last_reload_id: if sync.reload_triggered {
            sync.reload_id.clone()
        } else {
            old.and_then(|o| o.last_reload_id.clone())
        },
        sync_duration: Some(format!("{}ms", sync.sync_duration_ms)),
        version_conflict_retries: Some(i64::from(sync.version_conflict_retries)),
        fallback_used: Some(sync.fallback_used),
        sync_mode: sync
            .sync_mode
            .map(|m| m.as_str().to_owned())
            .or_else(|| old.and_then(|o| o.sync_mode.clone())),
        last_operation_summary: summary
            .or_else(|| old.and_then(|o| o.last_operation_summary.clone())),
        last_error: sync.error.clone(),
        consecutive_errors: Some(if ok { 0 } else { old_errors + 1 }),
        last_error_at: (!ok).then(|| k8s_time(*observed_at)),
    }
}
