//! `history`: the per-pod deployment history this replica's journal holds (schema 4, table
//! `pod_history`): one pod's syncs (`--pod NS/NAME`), the syncs of one render (`--render R`:
//! which pods ran it, and when), or the fleet's timeline (neither), each optionally bounded by
//! `--since` / `--until` (RFC 3339, e.g. `2026-12-04T14:02:00Z`).
//!
//! Each replica journals only the syncs it made (DESIGN.md J9): where the leader terms of two
//! records in a row are not consecutive, the terms between are shown as a gap (led by another
//! replica, whose journal holds their syncs, or led without a sync), with the time between.

use std::path::Path;

use haptic_journal::{Checksum, Journal, PodRef, SyncRecord, SyncResult, UnixMillis};
use serde_json::{Value, json};

use crate::format::time;
use crate::open::read_fail;
use crate::{Fail, Out, Res};

/// What `history` lists.
pub(super) struct Query<'a> {
    pub(super) pod: Option<&'a str>,
    pub(super) render: Option<&'a str>,
    pub(super) since: Option<&'a str>,
    pub(super) until: Option<&'a str>,
}

fn instant(flag: &str, text: Option<&str>, default: UnixMillis) -> Res<UnixMillis> {
    let Some(text) = text else {
        return Ok(default);
    };
    let t: jiff::Timestamp = text.parse().map_err(|e| {
        Fail::Usage(format!(
            "{flag} {text}: {e}: give an RFC 3339 time such as 2026-12-04T14:02:00Z"
        ))
    })?;
    Ok(UnixMillis(u64::try_from(t.as_millisecond()).unwrap_or(0)))
}

fn pod_ref(text: &str) -> Res<PodRef> {
    let (ns, name) = text
        .split_once('/')
        .ok_or_else(|| Fail::Usage(format!("--pod {text}: give the pod as NAMESPACE/NAME")))?;
    Ok(PodRef {
        namespace: ns.into(),
        name: name.into(),
    })
}

fn checksum(text: &str) -> Res<Checksum> {
    let hex = text.strip_prefix("sha256:").unwrap_or(text);
    let mut out = [0u8; 32];
    if hex.len() != 64 {
        return Err(Fail::Usage(format!(
            "--render {text}: give the render checksum, sha256:<64 hex digits>"
        )));
    }
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| {
            Fail::Usage(format!(
                "--render {text}: give the render checksum, sha256:<64 hex digits>"
            ))
        })?;
    }
    Ok(Checksum(out))
}

/// Lists the records the query names, oldest first, with the term gaps between them.
pub(super) fn history(j: &Journal, path: &Path, q: &Query<'_>, out: &Out) -> Res<u8> {
    let from = instant("--since", q.since, UnixMillis(0))?;
    let to = instant("--until", q.until, UnixMillis(u64::MAX))?;
    let in_range = |r: &SyncRecord| r.started_at <= to && r.ended_at >= from;
    let records: Vec<SyncRecord> = match (q.pod, q.render) {
        (Some(pod), render) => {
            let render = render.map(checksum).transpose()?;
            j.pod_history(&pod_ref(pod)?, from, to)
                .map_err(|e| read_fail(path, e))?
                .into_iter()
                .filter(|r| render.is_none_or(|c| r.render == c))
                .collect()
        }
        (None, Some(render)) => j
            .history_of_render(checksum(render)?)
            .map_err(|e| read_fail(path, e))?
            .into_iter()
            .filter(in_range)
            .collect(),
        (None, None) => j
            .history()
            .map_err(|e| read_fail(path, e))?
            .into_iter()
            .filter(in_range)
            .collect(),
    };
    let mut rows = Vec::new();
    let mut previous: Option<&SyncRecord> = None;
    for r in &records {
        if let Some(p) = previous
            && r.term.0 > p.term.0 + 1
        {
            let (first, last) = (p.term.0 + 1, r.term.0 - 1);
            if out.json {
                out.line(&json!({"gap": {
                    "terms": [first, last],
                    "after": time(p.ended_at),
                    "before": time(r.started_at),
                    "why": "no sync of this replica in these leader terms: another replica led them (its journal holds their syncs), or they had no sync",
                }}));
            } else {
                rows.push(vec![
                    format!("gap: term {first}..{last}"),
                    time(p.ended_at),
                    time(r.started_at),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "another replica's journal, or no sync".into(),
                    String::new(),
                ]);
            }
        }
        previous = Some(r);
        if out.json {
            out.line(&record_json(r));
        } else {
            rows.push(record_row(r));
        }
    }
    if !out.json {
        out.table(
            &[
                "POD", "STARTED", "ENDED", "RENDER", "MODE", "RELOAD", "RESULT", "TERM",
            ],
            &rows,
        );
    }
    Ok(0)
}

fn result_text(r: &SyncResult) -> (&'static str, Option<&str>) {
    match r {
        SyncResult::Applied => ("applied", None),
        SyncResult::Failed { message } => ("failed", Some(message)),
        SyncResult::Rejected { message } => ("rejected", Some(message)),
    }
}

fn record_row(r: &SyncRecord) -> Vec<String> {
    let (result, message) = result_text(&r.result);
    let render = r.render.to_string();
    vec![
        format!("{}/{}", r.pod.namespace, r.pod.name),
        time(r.started_at),
        time(r.ended_at),
        render.get(..19).unwrap_or(&render).to_owned(),
        r.mode.map_or_else(|| "-".to_owned(), |m| m.to_string()),
        r.reload_id.as_ref().map_or_else(
            || {
                if r.reloaded {
                    "yes".into()
                } else {
                    "no".into()
                }
            },
            |id| id.to_string(),
        ),
        message.map_or_else(|| result.to_owned(), |m| format!("{result}: {m}")),
        r.term.0.to_string(),
    ]
}

fn record_json(r: &SyncRecord) -> Value {
    let (result, message) = result_text(&r.result);
    json!({
        "pod": format!("{}/{}", r.pod.namespace, r.pod.name),
        "endpoint": r.endpoint.to_string(),
        "render": r.render.to_string(),
        "started_at": time(r.started_at),
        "ended_at": time(r.ended_at),
        "mode": r.mode.map(|m| m.to_string()),
        "operations": crate::format::to_json(&r.operations),
        "reloaded": r.reloaded,
        "reload_id": r.reload_id.as_ref().map(ToString::to_string),
        "result": result,
        "message": message,
        "term": r.term.0,
        "deployment": r.deployment.to_string(),
    })
}
