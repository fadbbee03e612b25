//! Per-pod deployment history (schema 4, issue 28): one record per sync of one pod, kept per pod
//! in append order and bounded by a retention rule.
//!
//! ```text
//!  Batch::append_history(record, retention)          (one Op, applied by the writer thread)
//!      pod_history[(pod key, seq)] = envelope(SyncRecord)     seq = that pod's newest + 1
//!      blob_refs[record.render].refs += 1                      (the render stays stored)
//!      trim that pod: oldest first beyond max_entries_per_pod, and every record that ended
//!      before record.ended_at - max_age; each trimmed record releases its render reference
//!  Batch::trim_history(retention, now)                (every pod; for pods that are gone)
//!  reads: Journal::pod_history(pod, from, to) / history_of_render(R) / history()
//! ```
//!
//! The table key is `(pod key "<namespace>/<name>", u64 sequence)`: one pod's records are one
//! contiguous key range, in append order. Sequences start at 1 per pod and are never reused
//! while the pod has a record (the newest record is never trimmed by an append).
//!
//! A record references its render manifest like `endpoint_applied` does (journal/DESIGN.md
//! invariant 4): a render any history record names keeps its blobs, and is collected only when
//! nothing (history included) names it.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::events::{OperationCounts, PodRef, SyncMode};
use crate::ids::{Checksum, DeploymentId, EndpointUrl, ReloadId, Term, UnixMillis};

/// How one sync ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SyncResult {
    /// The pod runs the render (a sync with nothing to change included).
    Applied,
    /// The sync failed and will be retried (transport errors, 5xx, a failed reload, a
    /// timeout); `message` is the error as the deployer reported it.
    Failed {
        /// The error.
        message: String,
    },
    /// The pod's Dataplane API rejected the render permanently (it is quarantined for the
    /// pod); `message` is the API's answer.
    Rejected {
        /// The rejection.
        message: String,
    },
}

impl SyncResult {
    /// The stable name tools print (`applied`, `failed`, `rejected`).
    #[must_use]
    pub fn as_str(&self) -> &'static str {
        match self {
            SyncResult::Applied => "applied",
            SyncResult::Failed { .. } => "failed",
            SyncResult::Rejected { .. } => "rejected",
        }
    }

    /// The error or rejection message; `None` when applied.
    #[must_use]
    pub fn message(&self) -> Option<&str> {
        match self {
            SyncResult::Applied => None,
            SyncResult::Failed { message } | SyncResult::Rejected { message } => Some(message),
        }
    }
}

/// One sync of one pod (table `pod_history`, key `(pod key, sequence)`).
///
/// Units: every time is wall-clock unix milliseconds of the replica that made the sync.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncRecord {
    /// The pod.
    pub pod: PodRef,
    /// The pod's Dataplane API endpoint the sync talked to.
    pub endpoint: EndpointUrl,
    /// The render the sync brought (or tried to bring) the pod to; a reference that keeps the
    /// render's blobs stored while the record exists.
    pub render: Checksum,
    /// When the sync started.
    pub started_at: UnixMillis,
    /// When it ended (its result was known); not before `started_at`.
    pub ended_at: UnixMillis,
    /// How the configuration was applied; `None` when the sync failed before it planned one.
    pub mode: Option<SyncMode>,
    /// Dataplane API operations by object kind.
    pub operations: OperationCounts,
    /// Whether HAProxy reloaded.
    pub reloaded: bool,
    /// The `Reload-ID` of the reload, when the API gave one.
    pub reload_id: Option<ReloadId>,
    /// How it ended.
    pub result: SyncResult,
    /// The leadership term the sync was made in.
    pub term: Term,
    /// The deployment the sync belonged to.
    pub deployment: DeploymentId,
}

impl SyncRecord {
    /// Record kind in the envelope.
    pub const RECORD_KIND: &'static str = "history.sync";

    /// The table key's first part: `"<namespace>/<name>"` of the pod.
    #[must_use]
    pub fn pod_key(&self) -> String {
        pod_key(&self.pod)
    }

    /// Whether the sync overlaps the time range `from..=to` (unix ms, both inclusive): it
    /// started at or before `to` and ended at or after `from`.
    #[must_use]
    pub fn overlaps(&self, from: UnixMillis, to: UnixMillis) -> bool {
        self.started_at <= to && self.ended_at >= from
    }
}

/// The `pod_history` key of a pod's records: `"<namespace>/<name>"` (neither part may hold a
/// `/` in Kubernetes, so the key is unambiguous).
#[must_use]
pub fn pod_key(pod: &PodRef) -> String {
    format!("{}/{}", pod.namespace, pod.name)
}

/// The key of a `pod_history` record in reports and errors: `"<namespace>/<name>#<seq>"`.
#[must_use]
pub fn record_key(pod_key: &str, seq: u64) -> crate::corrupt::RecordKey {
    crate::corrupt::RecordKey::Text(format!("{pod_key}#{seq}"))
}

/// How much history each pod keeps (issue 28). Applied to the pod a record is appended for,
/// by [`crate::Batch::append_history`], and to every pod by [`crate::Batch::trim_history`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HistoryRetention {
    /// The most records kept per pod; older ones are trimmed first. At least 1 (0 counts as
    /// 1: the record just appended is always kept).
    ///
    /// Default: 200.
    pub max_entries_per_pod: u32,
    /// Records that ended longer than this before the reference time (the appended record's
    /// `ended_at`, or `now` for [`crate::Batch::trim_history`]) are trimmed. Millisecond
    /// resolution.
    ///
    /// Default: 14 days.
    pub max_age: Duration,
}

impl Default for HistoryRetention {
    fn default() -> Self {
        HistoryRetention {
            max_entries_per_pod: 200,
            max_age: Duration::from_secs(14 * 24 * 60 * 60),
        }
    }
}

impl HistoryRetention {
    /// The oldest `ended_at` kept relative to `reference`: records that ended before it go.
    #[must_use]
    pub fn cutoff(&self, reference: UnixMillis) -> UnixMillis {
        let age_ms = u64::try_from(self.max_age.as_millis()).unwrap_or(u64::MAX);
        UnixMillis(reference.0.saturating_sub(age_ms))
    }

    /// [`Self::max_entries_per_pod`], at least 1.
    #[must_use]
    pub fn max_entries(&self) -> u64 {
        u64::from(self.max_entries_per_pod.max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{Namespace, ObjectName};

    #[test]
    fn cutoff_and_limits() {
        let r = HistoryRetention {
            max_entries_per_pod: 0,
            max_age: Duration::from_millis(100),
        };
        assert_eq!(r.max_entries(), 1);
        assert_eq!(r.cutoff(UnixMillis(1000)), UnixMillis(900));
        assert_eq!(r.cutoff(UnixMillis(50)), UnixMillis(0));
        let d = HistoryRetention::default();
        assert_eq!(d.max_entries(), 200);
        assert_eq!(d.cutoff(UnixMillis(14 * 86_400_000 + 5)), UnixMillis(5));
        let pod = PodRef {
            namespace: Namespace::new("ns"),
            name: ObjectName::new("p-0"),
        };
        assert_eq!(pod_key(&pod), "ns/p-0");
    }
}

/// An RFC 3339 time of unix ms (`2026-12-04T14:02:00.25Z`); the bare number with `ms` when out
/// of range.
#[must_use]
pub fn rfc3339(ms: UnixMillis) -> String {
    i64::try_from(ms.0)
        .ok()
        .and_then(|m| jiff::Timestamp::from_millisecond(m).ok())
        .map_or_else(|| format!("{}ms", ms.0), |t| t.to_string())
}

/// One line of a history listing: a record, or the leader terms between two records in a row
/// that this replica has no sync of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TimelineLine<'a> {
    /// A sync.
    Record(&'a SyncRecord),
    /// Terms `first..=last` with no record here: another replica led them (its journal holds
    /// their syncs, J9), or they had no sync. `after` / `before`: the end and the start of the
    /// records around the gap.
    Gap {
        /// First term of the gap.
        first: u64,
        /// Last term of the gap.
        last: u64,
        /// End of the record before.
        after: UnixMillis,
        /// Start of the record after.
        before: UnixMillis,
    },
}

/// `records` (oldest first) with a [`TimelineLine::Gap`] wherever the terms of two records in
/// a row skip (leader terms are the Lease's `leaseTransitions`, one per acquisition fleet-wide).
#[must_use]
pub fn timeline(records: &[SyncRecord]) -> Vec<TimelineLine<'_>> {
    let mut out = Vec::with_capacity(records.len());
    let mut previous: Option<&SyncRecord> = None;
    for r in records {
        if let Some(p) = previous
            && r.term.0 > p.term.0 + 1
        {
            out.push(TimelineLine::Gap {
                first: p.term.0 + 1,
                last: r.term.0 - 1,
                after: p.ended_at,
                before: r.started_at,
            });
        }
        previous = Some(r);
        out.push(TimelineLine::Record(r));
    }
    out
}

impl TimelineLine<'_> {
    /// The line as JSON, the shape `haptic-journalctl history --json` and the controller's
    /// `/debug/history` print, one object per line: a record's `pod`, `endpoint`, `render`,
    /// `started_at` / `ended_at` (RFC 3339), `mode`, `operations`, `reloaded`, `reload_id`,
    /// `result` (`applied` / `failed` / `rejected`), `message`, `term`, `deployment`; a gap's
    /// `{"gap": {"terms": [first, last], "after", "before", "why"}}`.
    #[must_use]
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            TimelineLine::Gap {
                first,
                last,
                after,
                before,
            } => serde_json::json!({"gap": {
                "terms": [first, last],
                "after": rfc3339(*after),
                "before": rfc3339(*before),
                "why": "no sync of this replica in these leader terms: another replica led them and its own journal holds their syncs (ask it: GET /debug/history on its metrics port, or haptic-journalctl history on its volume), or they had no sync",
            }}),
            TimelineLine::Record(r) => {
                let (result, message) = match &r.result {
                    SyncResult::Applied => ("applied", None),
                    SyncResult::Failed { message } => ("failed", Some(message)),
                    SyncResult::Rejected { message } => ("rejected", Some(message)),
                };
                serde_json::json!({
                    "pod": pod_key(&r.pod),
                    "endpoint": r.endpoint.to_string(),
                    "render": r.render.to_string(),
                    "started_at": rfc3339(r.started_at),
                    "ended_at": rfc3339(r.ended_at),
                    "mode": r.mode.map(|m| m.to_string()),
                    "operations": serde_json::to_value(r.operations).unwrap_or(serde_json::Value::Null),
                    "reloaded": r.reloaded,
                    "reload_id": r.reload_id.as_ref().map(ToString::to_string),
                    "result": result,
                    "message": message,
                    "term": r.term.0,
                    "deployment": r.deployment.to_string(),
                })
            }
        }
    }
}

/// What a history listing asks for: one pod's records, or one render's, or every record, each
/// bounded by a time range (records that overlap `from..=to`). Parsed from the same text by
/// `haptic-journalctl history` and the controller's `/debug/history`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistoryQuery {
    /// One pod (`NAMESPACE/NAME`).
    pub pod: Option<PodRef>,
    /// One render.
    pub render: Option<Checksum>,
    /// Records that ended at or after this (unix ms).
    pub from: UnixMillis,
    /// Records that started at or before this (unix ms).
    pub to: UnixMillis,
}

impl HistoryQuery {
    /// Parses `pod` (`NAMESPACE/NAME`), `render` (`sha256:<hex>`), `since` and `until` (RFC
    /// 3339); absent ones do not bound.
    ///
    /// # Errors
    /// A message naming the bad value and the expected form.
    pub fn parse(
        pod: Option<&str>,
        render: Option<&str>,
        since: Option<&str>,
        until: Option<&str>,
    ) -> Result<Self, String> {
        let time = |name: &str,
                    text: Option<&str>,
                    default: UnixMillis|
         -> Result<UnixMillis, String> {
            let Some(text) = text else {
                return Ok(default);
            };
            let t: jiff::Timestamp = text.parse().map_err(|e| {
                format!("{name} {text}: {e}: give an RFC 3339 time such as 2026-12-04T14:02:00Z")
            })?;
            Ok(UnixMillis(u64::try_from(t.as_millisecond()).unwrap_or(0)))
        };
        let pod = pod
            .map(|text| {
                text.split_once('/')
                    .filter(|(ns, name)| !ns.is_empty() && !name.is_empty() && !name.contains('/'))
                    .map(|(ns, name)| PodRef {
                        namespace: ns.into(),
                        name: name.into(),
                    })
                    .ok_or_else(|| format!("pod {text}: give the pod as NAMESPACE/NAME"))
            })
            .transpose()?;
        let render = render
            .map(|text| {
                Checksum::parse(text).map_err(|e| {
                    format!("render {text}: {e}: give the render checksum, sha256:<64 hex digits>")
                })
            })
            .transpose()?;
        let (from, to) = (
            time("since", since, UnixMillis(0))?,
            time("until", until, UnixMillis(u64::MAX))?,
        );
        if from > to {
            return Err(format!(
                "since {} is after until {}: give since <= until",
                since.unwrap_or_default(),
                until.unwrap_or_default()
            ));
        }
        Ok(HistoryQuery {
            pod,
            render,
            from,
            to,
        })
    }

    /// Whether `r` is one the query asks for.
    #[must_use]
    pub fn matches(&self, r: &SyncRecord) -> bool {
        self.pod.as_ref().is_none_or(|p| *p == r.pod)
            && self.render.is_none_or(|c| c == r.render)
            && r.started_at <= self.to
            && r.ended_at >= self.from
    }
}
