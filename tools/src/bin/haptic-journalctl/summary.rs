//! `summary`: schema, term, counts and byte sizes per table, oldest pending item.

use std::path::Path;

use haptic_journal::{Journal, UnixMillis};
use serde_json::json;

use crate::format::{age, time};
use crate::open::read_fail;
use crate::{Out, Res};

pub(super) fn summary(j: &Journal, path: &Path, out: &Out) -> Res<u8> {
    let meta = j.meta().map_err(|e| read_fail(path, e))?;
    let stats = j.stats().map_err(|e| read_fail(path, e))?;
    let now = UnixMillis::now();
    let oldest = stats
        .queues
        .iter()
        .filter_map(|q| q.oldest_enqueued_at.map(|t| (t, q.queue)))
        .min();
    let undispatched = meta
        .next_seq
        .0
        .saturating_sub(1)
        .saturating_sub(meta.dispatched_through.0);
    if out.json {
        out.line(&json!({
            "file": path.display().to_string(),
            "file_bytes": stats.file_bytes,
            "schema_version": meta.schema_version,
            "codec": meta.codec,
            "term": meta.term.0,
            "identity": meta.identity.as_ref().map(|i| i.as_str()),
            "created_at_ms": meta.created_at.0,
            "next_seq": meta.next_seq.0,
            "first_seq": stats.first_seq.map(|s| s.0),
            "last_seq": stats.last_seq.map(|s| s.0),
            "dispatched_through": meta.dispatched_through.0,
            "undispatched_events": undispatched,
            "next_work_id": meta.next_work_id.0,
            "live_bytes": stats.live_bytes(),
            "tables": stats.tables.iter().map(|t| json!({
                "table": t.name, "entries": t.entries, "live_bytes": t.live_bytes,
                "stored_bytes": t.stored_bytes,
            })).collect::<Vec<_>>(),
            "oldest_pending": oldest.map(|(t, q)| json!({
                "queue": q.as_str(), "age_s": t.until_ms(now) / 1000,
            })),
        }));
        return Ok(0);
    }
    outln!(
        "file            {} ({} bytes)",
        path.display(),
        stats.file_bytes.unwrap_or(0)
    );
    outln!(
        "schema          {} (codec {}), supported by this build: {}",
        meta.schema_version,
        meta.codec,
        haptic_journal::SCHEMA_VERSION
    );
    outln!("created         {}", time(meta.created_at));
    outln!(
        "term            {} (identity {})",
        meta.term,
        meta.identity.as_ref().map_or("-", |i| i.as_str())
    );
    outln!(
        "events          kept {}..{}, next seq {}, dispatched through {}, {} undispatched",
        stats.first_seq.map_or("-".into(), |s| s.to_string()),
        stats.last_seq.map_or("-".into(), |s| s.to_string()),
        meta.next_seq,
        meta.dispatched_through,
        undispatched
    );
    outln!(
        "oldest pending  {}",
        oldest.map_or("none".into(), |(t, q)| format!(
            "{} item, {} old",
            q,
            age(Some(t.until_ms(now) / 1000))
        ))
    );
    outln!();
    let rows = table_rows(&stats.tables, false);
    out.table(&["TABLE", "ENTRIES", "LIVE_BYTES", "STORED_BYTES"], &rows);
    Ok(0)
}

/// One row per table: name, entries, live bytes, stored bytes, and the page slack when `slack`.
pub(super) fn table_rows(tables: &[haptic_journal::TableStat], slack: bool) -> Vec<Vec<String>> {
    tables
        .iter()
        .map(|t| {
            let mut row = vec![t.name.to_string()];
            row.extend([t.entries, t.live_bytes, t.stored_bytes].map(|n| n.to_string()));
            if slack {
                row.push(t.fragmented_bytes.to_string());
            }
            row
        })
        .collect()
}
