//! Rollback (issue 28) in the scheduler's decision: what a request asks of the state
//! ([`resolve_rollback`]), what a checked request does ([`rollback`]: the hold, its end, a
//! refusal, and the retargeting of pending, running and resumed deployments), and the hold said
//! again for the condition ([`holding`]).

use std::collections::BTreeSet;
use std::time::Instant;

use haptic_journal::{
    Checksum, Correlation, Endpoint, EndpointUrl, RollbackChange, RollbackHold, RuntimeConfigRef,
};

use super::queue::queue;
use super::state::{Phase, SchedulerState};
use super::{Effect, reason};
use haptic_journal::DeploymentCause;

/// What a rollback request asks of the current state ([`resolve_rollback`], pure): the shell
/// checks a render before it becomes a [`RollbackVerdict`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RollbackAsk {
    /// Nothing: no hold to end, or the value the hold was asked with (a restart's watch).
    Unchanged,
    /// End the hold (the annotation was removed).
    Release,
    /// Hold `render` once it is found in the journal and passes `haproxy -c`.
    Check {
        /// The annotation's value.
        value: String,
        /// The render it names (`previous` resolved).
        render: Checksum,
    },
    /// Refuse at once (not a checksum, no earlier render).
    Refuse {
        /// The annotation's value.
        value: String,
        /// Why, naming the fix.
        reason: String,
    },
}

/// The annotation value that names the render validated before the newest.
pub const ROLLBACK_PREVIOUS: &str = "previous";

/// Resolves the annotation `value` of a rollback request against `state` (README, "Rollback"),
/// with `shown` the hold the HAProxyCfg's `RolledBack` condition showed when the value was read
/// (its value and render): `None` ends a hold (this replica's, or the one the condition shows,
/// which another replica or an earlier process decided); the value the current hold was asked
/// with changes nothing (so a restart, whose watch reads the annotation again, cannot move a
/// `previous` hold); the value the condition shows held continues that hold (the same render,
/// checked again: a new leader does not resolve `previous` against its own journal);
/// `previous` is the render validated before the newest, fixed here; anything else must be a
/// render checksum.
#[must_use]
pub fn resolve_rollback(
    state: &SchedulerState,
    value: Option<&str>,
    shown: Option<&(String, Checksum)>,
) -> RollbackAsk {
    let Some(value) = value.map(str::trim) else {
        return if state.rollback.is_some() || shown.is_some() {
            RollbackAsk::Release
        } else {
            RollbackAsk::Unchanged
        };
    };
    if state.rollback.as_ref().is_some_and(|h| h.value == value) {
        return RollbackAsk::Unchanged;
    }
    if let Some((shown_value, render)) = shown
        && shown_value == value
    {
        return RollbackAsk::Check {
            value: value.to_owned(),
            render: *render,
        };
    }
    let refuse = |reason: String| RollbackAsk::Refuse {
        value: value.to_owned(),
        reason,
    };
    if value == ROLLBACK_PREVIOUS {
        return match state.previous_validated {
            Some(render) => RollbackAsk::Check {
                value: value.to_owned(),
                render,
            },
            None => refuse(
                "no render was validated before the newest one in this replica's journal: name the render's checksum (`haptic-journalctl history FILE` or GET /debug/history lists the renders pods ran)".to_owned(),
            ),
        };
    }
    match Checksum::parse(value) {
        Ok(render) => RollbackAsk::Check {
            value: value.to_owned(),
            render,
        },
        Err(_) => refuse(format!(
            "`{value}` is neither a render checksum (sha256:<64 lowercase hex digits>) nor `{ROLLBACK_PREVIOUS}`"
        )),
    }
}

/// A rollback request after the shell's check: what [`decide`] applies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RollbackVerdict {
    /// Nothing changes.
    Unchanged,
    /// End the hold: the newest validated render is deployed again.
    Release {
        /// The render the condition showed held (the hold to end when this replica has none).
        shown: Option<Checksum>,
    },
    /// Hold the fleet on `render` (found in the journal, passed `haproxy -c`).
    Hold {
        /// The annotation's value.
        value: String,
        /// The render.
        render: Checksum,
    },
    /// Refused: the fleet unchanged.
    Refuse {
        /// The annotation's value.
        value: String,
        /// Why, naming the fix.
        reason: String,
    },
}

/// Applies a checked rollback request: a hold deploys its render to every pod not on it (not
/// quarantined for it), an end deploys the newest validated render, a refusal changes nothing;
/// each is journaled as `deployment.rollback` ([`Effect::Rollback`]).
pub(super) fn rollback(
    state: &mut SchedulerState,
    (correlation, runtime_config): (Correlation, RuntimeConfigRef),
    verdict: RollbackVerdict,
    now: Instant,
    fx: &mut Vec<Effect>,
) {
    let newest = state.last_validated.as_ref().map(|(r, _)| *r);
    let change = match verdict {
        RollbackVerdict::Unchanged => return,
        RollbackVerdict::Refuse { value, reason } => RollbackChange::Refused {
            value,
            reason,
            held: state.rollback.as_ref().map(|h| (h.value.clone(), h.render)),
        },
        RollbackVerdict::Release { shown } => {
            let Some(render) = state.rollback.take().map(|h| h.render).or(shown) else {
                return;
            };
            RollbackChange::Released { render, newest }
        }
        RollbackVerdict::Hold { value, render } => {
            state.rollback = Some(RollbackHold {
                value: value.clone(),
                render,
                correlation: correlation.clone(),
                since: state.wall(now),
            });
            RollbackChange::Held {
                value,
                render,
                newest,
            }
        }
    };
    let retarget = !matches!(change, RollbackChange::Refused { .. });
    fx.push(Effect::Rollback {
        correlation: correlation.clone(),
        runtime_config,
        change,
    });
    if retarget && let Some((render, _)) = state.target() {
        retarget_to(state, render, correlation, fx);
    }
}

/// The fleet's target became `render` (a hold began, moved or ended): fresh timeout retries and
/// give-ups, a quarantine kept for `render` only, and every pod that is not on it, or that a
/// deployment of another render (running, or journaled and not yet resumed) may still move off
/// it, gets it; a pending request of another render is replaced, or dropped when no pod needs
/// `render` (it would deploy a render that is no longer the target).
fn retarget_to(
    state: &mut SchedulerState,
    render: Checksum,
    correlation: Correlation,
    fx: &mut Vec<Effect>,
) {
    state.given_up.clear();
    state.timeout_retries = None;
    state.rejected.retain(|_, q| q.render == render);
    let mut moving: BTreeSet<EndpointUrl> = BTreeSet::new();
    if let Phase::Deploying { request, .. } = &state.phase
        && request.render != render
    {
        moving.extend(request.endpoints.iter().map(|e| e.url.clone()));
    }
    if let Some(r) = state.resume.as_ref().filter(|r| r.render != render) {
        moving.extend(r.endpoints.iter().map(|e| e.url.clone()));
    }
    let targets: Vec<Endpoint> = state
        .endpoints
        .iter()
        .filter(|e| state.applied.get(&e.url) != Some(&render) || moving.contains(&e.url))
        .filter(|e| !state.quarantined(&e.url, &render))
        .cloned()
        .collect();
    if !targets.is_empty() {
        let r = reason(DeploymentCause::Rollback);
        queue(state, render, targets, r, correlation, fx);
    } else if let Some(p) = state.pending.take_if(|p| p.render != render) {
        fx.push(Effect::DropPending(p));
    }
}

/// [`Effect::Rollback`] saying the current hold again ([`RollbackChange::Holding`]): the
/// condition is written anew (a new term; a newer render validated during the hold).
pub(super) fn holding(state: &SchedulerState, fx: &mut Vec<Effect>) {
    if let (Some(h), Some(rc)) = (&state.rollback, &state.runtime_config) {
        fx.push(Effect::Rollback {
            correlation: h.correlation.clone(),
            runtime_config: rc.clone(),
            change: RollbackChange::Holding {
                value: h.value.clone(),
                render: h.render,
                newest: state.last_validated.as_ref().map(|(r, _)| *r),
            },
        });
    }
}
