//! `dump`: the records of one table, filtered by `--since`, `--kind`, `--limit`.

use std::path::Path;

use haptic_journal::{BlobKind, Journal, Queue, RecordKey, Seq, decode, tables};
use serde_json::{Value, json};

use crate::format::{key_json, key_text, short, table_name, time, to_json};
use crate::open::read_fail;
use crate::{Fail, Out, Res};

pub(super) fn meta_value(key: &str, v: &[u8]) -> Value {
    match (key, v.len()) {
        (tables::META_SCHEMA_VERSION, 4) => {
            json!(u32::from_le_bytes([v[0], v[1], v[2], v[3]]))
        }
        (_, 8) if key != tables::META_CODEC && key != tables::META_IDENTITY => {
            let mut b = [0u8; 8];
            b.copy_from_slice(v);
            json!(u64::from_le_bytes(b))
        }
        _ => match std::str::from_utf8(v) {
            Ok(s) => json!(s),
            Err(_) => json!(format!("0x{}", hex::encode(v))),
        },
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) fn dump(
    j: &Journal,
    path: &Path,
    table: &str,
    since: Option<u64>,
    kind: Option<&str>,
    limit: Option<usize>,
    out: &Out,
) -> Res<u8> {
    let limit = limit.unwrap_or(usize::MAX);
    if table == "blob_refs" {
        check_dump_filters("blob_refs", since, kind)?;
        return dump_blob_refs(j, path, limit, out);
    }
    let Some(name) = table_name(table) else {
        return Err(Fail::Usage(format!(
            "unknown table {table:?}: use one of {} or a queue name ({})",
            tables::ALL_TABLES.join(", "),
            Queue::ALL
                .iter()
                .map(|q| q.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    };
    check_dump_filters(name, since, kind)?;
    let from = (name == "events").then(|| Seq(since.unwrap_or(0)));
    let filtering = kind.is_some() || (since.is_some() && name != "events");
    let rows = j
        .raw_table(name, from, if filtering { usize::MAX } else { limit })
        .map_err(|e| read_fail(path, e))?;
    let mut corrupt = 0u64;
    let mut table_rows = Vec::new();
    let mut shown = 0usize;
    for (key, bytes) in rows {
        if shown >= limit {
            break;
        }
        if let (Some(s), RecordKey::WorkId(w)) = (since, &key)
            && *w < s
        {
            continue;
        }
        if name == "meta" {
            let k = key_text(&key);
            let v = meta_value(&k, &bytes);
            if out.json {
                out.line(&json!({"table": name, "key": k, "value": v}));
            } else {
                table_rows.push(vec![k, v.to_string()]);
            }
            shown += 1;
            continue;
        }
        match decode::any(name, &bytes) {
            Ok((h, d)) => {
                if let Some(k) = kind
                    && !(h.kind == k || h.kind.starts_with(k))
                {
                    continue;
                }
                let record = decoded_json(&d);
                if out.json {
                    out.line(&json!({
                        "table": name, "key": key_json(&key), "kind": h.kind,
                        "term": h.term.0, "accepted_at_ms": h.accepted_at.0,
                        "size_bytes": h.size_bytes, "record": record,
                    }));
                } else {
                    table_rows.push(vec![
                        key_text(&key),
                        h.kind.clone(),
                        h.term.to_string(),
                        time(h.accepted_at),
                        h.size_bytes.to_string(),
                        short(&record, 100),
                    ]);
                }
            }
            Err(reason) => {
                corrupt += 1;
                let offset = reason.offset();
                if out.json {
                    out.line(&json!({
                        "table": name, "key": key_json(&key), "corrupt": reason.to_string(),
                        "offset": offset,
                    }));
                } else {
                    table_rows.push(vec![
                        key_text(&key),
                        "CORRUPT".into(),
                        "-".into(),
                        "-".into(),
                        bytes.len().to_string(),
                        format!(
                            "{reason}{}",
                            offset.map_or(String::new(), |o| format!(" (byte offset {o})"))
                        ),
                    ]);
                }
            }
        }
        shown += 1;
    }
    if !out.json {
        if name == "meta" {
            out.table(&["KEY", "VALUE"], &table_rows);
        } else {
            out.table(
                &["KEY", "KIND", "TERM", "ACCEPTED_AT", "BYTES", "RECORD"],
                &table_rows,
            );
        }
    }
    if corrupt > 0 {
        return Err(Fail::Corrupt(format!(
            "journal {}: {corrupt} corrupt record(s) in table {name}; run `haptic-journalctl \
             verify {}`",
            path.display(),
            path.display()
        )));
    }
    Ok(0)
}

/// The record kinds table `name` holds (empty: the table has no record kinds).
pub(super) fn known_kinds(name: &str) -> Vec<String> {
    match name {
        "events" => haptic_journal::EventKind::ALL
            .iter()
            .map(|k| k.as_str().to_owned())
            .collect(),
        "blobs" => vec![
            BlobKind::File.record_kind().to_owned(),
            BlobKind::Render.record_kind().to_owned(),
        ],
        "endpoint_applied" => vec![haptic_journal::EndpointApplied::RECORD_KIND.to_owned()],
        "endpoint_files" => vec![haptic_journal::EndpointFiles::RECORD_KIND.to_owned()],
        "endpoint_transaction" => {
            vec![haptic_journal::EndpointTransaction::RECORD_KIND.to_owned()]
        }
        "published_checkpoint" => {
            vec![haptic_journal::PublishedCheckpoint::RECORD_KIND.to_owned()]
        }
        "component_state" => {
            vec![haptic_journal::ComponentCheckpoint::RECORD_KIND.to_owned()]
        }
        "pod_history" => vec![haptic_journal::SyncRecord::RECORD_KIND.to_owned()],
        t => Queue::ALL
            .iter()
            .filter(|q| q.table_name() == t)
            .map(|q| match q {
                Queue::StatusPending | Queue::StatusParked => "work.status".to_owned(),
                q => format!("work.{}", q.as_str()),
            })
            .collect(),
    }
}

/// `--since` applies to tables keyed by a number (events by Seq, FIFO queues by WorkId);
/// `--kind` to tables of enveloped records, and must name (a prefix of) a kind the table holds.
pub(super) fn check_dump_filters(name: &str, since: Option<u64>, kind: Option<&str>) -> Res {
    let fifo = Queue::ALL
        .iter()
        .any(|q| q.table_name() == name && q.shape() == haptic_journal::QueueShape::Fifo);
    if since.is_some() && name != "events" && !fifo {
        return Err(Fail::Usage(format!(
            "--since does not apply to table {name}: it filters events (by seq) and the FIFO \
             queues publish, publish-deployed, invalid, verdict (by work id)"
        )));
    }
    let Some(k) = kind else {
        return Ok(());
    };
    let known = known_kinds(name);
    if known.is_empty() {
        return Err(Fail::Usage(format!(
            "--kind does not apply to table {name}: its values are not typed records"
        )));
    }
    if k.is_empty() || !known.iter().any(|c| c.starts_with(k)) {
        return Err(Fail::Usage(format!(
            "unknown record kind {k:?} for table {name}: use one of {} (or a prefix such as \
             {:?})",
            known.join(", "),
            known[0]
                .split('.')
                .next()
                .map_or(String::new(), |p| format!("{p}."))
        )));
    }
    Ok(())
}

pub(super) fn decoded_json(d: &decode::Decoded) -> Value {
    match d {
        decode::Decoded::Event(e) => to_json(e),
        decode::Decoded::Work(w) => to_json(w),
        decode::Decoded::Blob {
            kind,
            size_bytes,
            render,
        } => json!({
            "kind": kind.record_kind(), "size_bytes": size_bytes,
            "render": render.as_ref().map(to_json),
        }),
        decode::Decoded::EndpointApplied(e) => to_json(e),
        decode::Decoded::EndpointFiles(e) => to_json(e),
        decode::Decoded::EndpointTransaction(t) => to_json(t),
        decode::Decoded::PublishedCheckpoint(p) => to_json(p),
        decode::Decoded::ComponentCheckpoint(c) => to_json(c),
        decode::Decoded::SyncRecord(r) => to_json(r),
        _ => Value::Null,
    }
}

pub(super) fn dump_blob_refs(j: &Journal, path: &Path, limit: usize, out: &Out) -> Res<u8> {
    let blobs = j.blobs().map_err(|e| read_fail(path, e))?;
    let mut rows = Vec::new();
    for (h, kind, size, c) in blobs.into_iter().take(limit) {
        if out.json {
            out.line(&json!({
                "table": "blob_refs", "key": h.to_string(), "kind": kind.record_kind(),
                "size_bytes": size, "refs": c.refs, "holds": c.holds,
            }));
        } else {
            rows.push(vec![
                h.to_string(),
                kind.record_kind().into(),
                size.to_string(),
                c.refs.to_string(),
                c.holds.to_string(),
            ]);
        }
    }
    if !out.json {
        out.table(&["BLOB", "KIND", "BYTES", "REFS", "HOLDS"], &rows);
    }
    Ok(0)
}
