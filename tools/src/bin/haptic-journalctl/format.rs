//! Formatting shared by the subcommands: times, ages, JSON of records, record keys, table names.

use haptic_journal::{Queue, RecordKey, UnixMillis, tables};
use serde_json::{Value, json};

pub(super) fn time(ms: UnixMillis) -> String {
    haptic_journal::rfc3339(ms)
}

pub(super) fn age(secs: Option<u64>) -> String {
    match secs {
        None => "-".into(),
        Some(s) if s < 120 => format!("{s}s"),
        Some(s) if s < 7200 => format!("{}m{}s", s / 60, s % 60),
        Some(s) if s < 172_800 => format!("{}h{}m", s / 3600, (s % 3600) / 60),
        Some(s) => format!("{}d{}h", s / 86_400, (s % 86_400) / 3600),
    }
}

pub(super) fn to_json<T: serde::Serialize>(v: &T) -> Value {
    // `Checksum` serializes as "sha256:<hex>" in JSON (human-readable serializers).
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// `v` without its `correlation` fields (ids that crowd one-line summaries; `show` prints them).
pub(super) fn without_correlation(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| k.as_str() != "correlation")
                .map(|(k, v)| (k.clone(), without_correlation(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(without_correlation).collect()),
        other => other.clone(),
    }
}

pub(super) fn short(v: &Value, max: usize) -> String {
    let s = without_correlation(v).to_string();
    if s.chars().count() <= max {
        s
    } else {
        let mut t: String = s.chars().take(max.saturating_sub(3)).collect();
        t.push_str("...");
        t
    }
}

pub(super) fn key_json(k: &RecordKey) -> Value {
    match k {
        RecordKey::Seq(s) => json!(s),
        RecordKey::WorkId(w) => json!(w),
        RecordKey::Text(t) => json!(t),
        RecordKey::Blob(c) => json!(c.to_string()),
        RecordKey::BadBlobKey(b) => json!(format!("0x{}", hex::encode(b))),
        RecordKey::Slot => json!("slot"),
        RecordKey::Unknown => Value::Null,
    }
}

pub(super) fn key_text(k: &RecordKey) -> String {
    match k {
        RecordKey::Text(t) => t.clone(),
        other => other.to_string(),
    }
}

/// Accepts queue names (`publish`) for their tables (`publish_validated`).
pub(super) fn table_name(name: &str) -> Option<&'static str> {
    if let Some(t) = tables::ALL_TABLES.iter().find(|t| **t == name) {
        return Some(t);
    }
    Queue::parse(name).map(Queue::table_name)
}
