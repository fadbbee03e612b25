//! `pending`: what a restart would replay, per queue.

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
        // Exactly one line per queue, in Queue::ALL order (the documented format).
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
        return Ok(0);
    }
    let rows: Vec<Vec<String>> = p
        .queues
        .iter()
        .map(|q| {
            vec![
                q.queue.as_str().to_owned(),
                q.count.to_string(),
                age(q.oldest_age_secs(now)),
            ]
        })
        .collect();
    out.table(&["QUEUE", "COUNT", "OLDEST_AGE"], &rows);
    outln!();
    outln!(
        "events to dispatch again: {} (seq {}..={}), term {}",
        p.undispatched_events,
        p.dispatched_through.0 + 1,
        p.last_seq,
        p.term
    );
    Ok(0)
}
