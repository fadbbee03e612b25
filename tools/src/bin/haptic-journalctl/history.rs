//! `history`: the per-pod deployment history this replica's journal holds (schema 4, table
//! `pod_history`): one pod's syncs (`--pod NS/NAME`), the syncs of one render (`--render R`:
//! which pods ran it, and when), or the fleet's timeline (neither), each optionally bounded by
//! `--since` / `--until` (RFC 3339, e.g. `2026-12-04T14:02:00Z`).
//!
//! Each replica journals only the syncs it made (DESIGN.md J9): where the leader terms of two
//! records in a row are not consecutive, the terms between are shown as a gap (led by another
//! replica, whose journal holds their syncs, or led without a sync), with the time between.
//! The query and the JSON lines are the journal's (`HistoryQuery`, `TimelineLine::to_json`),
//! the same the controller's `/debug/history` answers with.

use std::path::Path;

use haptic_journal::{HistoryQuery, Journal, SyncRecord, SyncResult, TimelineLine, timeline};

use crate::format::time;
use crate::open::read_fail;
use crate::{Fail, Out, Res};

/// What `history` lists (the flags' text).
pub(super) struct Query<'a> {
    pub(super) pod: Option<&'a str>,
    pub(super) render: Option<&'a str>,
    pub(super) since: Option<&'a str>,
    pub(super) until: Option<&'a str>,
}

/// Lists the records the query names, oldest first, with the term gaps between them.
pub(super) fn history(j: &Journal, path: &Path, q: &Query<'_>, out: &Out) -> Res<u8> {
    let query = HistoryQuery::parse(q.pod, q.render, q.since, q.until)
        .map_err(|m| Fail::Usage(format!("--{m}")))?;
    let records = j.history_query(&query).map_err(|e| read_fail(path, e))?;
    let mut rows = Vec::new();
    for line in timeline(&records) {
        if out.json {
            out.line(&line.to_json());
            continue;
        }
        rows.push(match line {
            TimelineLine::Record(r) => record_row(r),
            TimelineLine::Gap {
                first,
                last,
                after,
                before,
            } => vec![
                format!("gap: term {first}..{last}"),
                time(after),
                time(before),
                "-".into(),
                "-".into(),
                "-".into(),
                "another replica led: its /debug/history, or no sync".into(),
                String::new(),
            ],
        });
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

fn record_row(r: &SyncRecord) -> Vec<String> {
    let result = match &r.result {
        SyncResult::Applied => "applied".to_owned(),
        // The first line of a message: HAProxy's `[ALERT]` answers span lines (--json has all).
        SyncResult::Failed { message } => {
            format!("failed: {}", message.lines().next().unwrap_or_default())
        }
        SyncResult::Rejected { message } => {
            format!("rejected: {}", message.lines().next().unwrap_or_default())
        }
    };
    let render = r.render.to_string();
    vec![
        haptic_journal::pod_key(&r.pod),
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
            ToString::to_string,
        ),
        result,
        r.term.0.to_string(),
    ]
}
