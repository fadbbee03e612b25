//! `show`: one event in full, with the work items and blobs that refer to it.

use std::path::Path;

use haptic_journal::{Journal, Queue, Seq};
use serde_json::json;

use crate::format::{time, to_json};
use crate::open::read_fail;
use crate::{Fail, Out, Res};

pub(super) fn show(j: &Journal, path: &Path, seq: u64, out: &Out) -> Res<u8> {
    let Some((h, e)) = j.event(Seq(seq)).map_err(|e| read_fail(path, e))? else {
        let s = j.stats().map_err(|e| read_fail(path, e))?;
        return Err(Fail::Usage(format!(
            "journal {} has no event at seq {seq} (kept: {}..{}; trimmed events are gone): pick \
             a seq from `haptic-journalctl dump {} events`",
            path.display(),
            s.first_seq.map_or("-".into(), |s| s.to_string()),
            s.last_seq.map_or("-".into(), |s| s.to_string()),
            path.display()
        )));
    };
    let mut derived = Vec::new();
    for q in Queue::ALL {
        for w in j.queue(*q).map_err(|e| read_fail(path, e))? {
            if w.record.origin == Some(Seq(seq)) {
                derived.push(json!({
                    "queue": q.as_str(), "key": w.key.to_string(), "id": w.record.id.0,
                    "attempt": w.record.attempt,
                }));
            }
        }
    }
    let mut blobs = Vec::new();
    for c in e.blob_refs() {
        let stored = j.blob_counts(c).map_err(|e| read_fail(path, e))?.is_some();
        blobs.push(json!({"blob": c.to_string(), "stored": stored}));
    }
    let meta = j.meta().map_err(|e| read_fail(path, e))?;
    let v = json!({
        "seq": seq, "kind": h.kind, "term": h.term.0, "accepted_at_ms": h.accepted_at.0,
        "size_bytes": h.size_bytes, "dispatched": seq <= meta.dispatched_through.0,
        "event": to_json(&e), "work_items": derived, "blobs": blobs,
    });
    if out.json {
        out.line(&v);
    } else {
        outln!("seq          {seq}");
        outln!("kind         {}", h.kind);
        outln!("term         {}", h.term);
        outln!("accepted at  {}", time(h.accepted_at));
        outln!("size         {} bytes", h.size_bytes);
        outln!(
            "dispatched   {}",
            if seq <= meta.dispatched_through.0 {
                "yes"
            } else {
                "no (replayed on restart)"
            }
        );
        outln!(
            "event        {}",
            serde_json::to_string_pretty(&v["event"])
                .unwrap_or_default()
                .replace('\n', "\n             ")
        );
        for d in &derived {
            outln!(
                "work item    {} {} (id w{}, attempt {})",
                d["queue"].as_str().unwrap_or(""),
                d["key"].as_str().unwrap_or(""),
                d["id"],
                d["attempt"]
            );
        }
        for b in &blobs {
            outln!(
                "blob         {}{}",
                b["blob"].as_str().unwrap_or(""),
                if b["stored"].as_bool() == Some(true) {
                    ""
                } else {
                    " (not stored)"
                }
            );
        }
    }
    Ok(0)
}
