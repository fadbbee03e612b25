//! `pending`: what a restart would replay, per queue, and the Dataplane transactions left open
//! on pods.

use std::path::Path;

use haptic_journal::{Journal, UnixMillis};
use serde_json::Value;

use crate::format::age;
use crate::open::read_fail;
use crate::{Out, Res};

pub(super) fn pending(j: &Journal, path: &Path, out: &Out) -> Res<u8> {
    let p = j.pending().map_err(|e| read_fail(path, e))?;
    let now = UnixMillis::now();
    if out.json {
        // Exactly one line per queue, in Queue::ALL order (the documented format), then one line
        // per open Dataplane transaction, by endpoint URL.
        for q in &p.queues {
            let age = q
                .oldest_age_secs(now)
                .map_or_else(|| "null".to_owned(), |s| s.to_string());
            outln!(
                "{{\"queue\": {}, \"count\": {}, \"oldest_age_s\": {}}}",
                Value::String(q.queue.as_str().to_owned()),
                q.count,
                age
            );
        }
        for t in &p.open_transactions {
            outln!(
                "{{\"transaction\": {}, \"endpoint\": {}, \"pod\": {}, \"state\": \"{}\", \
                 \"version\": {}, \"age_s\": {}}}",
                Value::String(t.id.as_str().to_owned()),
                Value::String(t.endpoint.as_str().to_owned()),
                Value::String(format!("{}/{}", t.pod.namespace, t.pod.name)),
                t.state.as_str(),
                t.version.0,
                t.started_at.until_ms(now) / 1000
            );
        }
        return Ok(0);
    }
    out.table_of(&["QUEUE", "COUNT", "OLDEST_AGE"], &p.queues, |q| {
        vec![
            q.queue.as_str().to_owned(),
            q.count.to_string(),
            age(q.oldest_age_secs(now)),
        ]
    });
    outln!();
    if !p.open_transactions.is_empty() {
        let header = ["ENDPOINT", "POD", "TRANSACTION", "STATE", "VERSION", "AGE"];
        out.table_of(&header, &p.open_transactions, |t| {
            vec![
                t.endpoint.as_str().to_owned(),
                format!("{}/{}", t.pod.namespace, t.pod.name),
                t.id.as_str().to_owned(),
                t.state.as_str().to_owned(),
                t.version.0.to_string(),
                age(Some(t.started_at.until_ms(now) / 1000)),
            ]
        });
        outln!();
    }
    outln!(
        "open Dataplane transactions: {} (opened on pods by this replica, not seen to end)",
        p.open_transactions.len()
    );
    outln!(
        "events to dispatch again: {} (seq {}..={}), term {}",
        p.undispatched_events,
        p.dispatched_through.0 + 1,
        p.last_seq,
        p.term
    );
    Ok(0)
}
