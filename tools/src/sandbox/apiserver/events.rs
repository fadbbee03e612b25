//! Core `v1` Events and `events.k8s.io/v1` Events are two views of the same objects, as in a
//! cluster: storage holds the `events.k8s.io/v1` shape, and the core API converts on the way in
//! and out, so `kubectl get events` and `kubectl describe` show what kube's `Recorder` wrote.

use super::resources::ResourceType;
use serde_json::{Map, Value};

/// Whether the type is the core `v1` Event view.
pub fn is_core(rt: &ResourceType) -> bool {
    rt.group.is_empty() && rt.plural == "events"
}

/// Field renames between the shapes: (core name, events.k8s.io name).
const RENAMES: [(&str, &str); 7] = [
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("reportingComponent", "reportingController"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
];

fn rename(obj: &Value, core_to_new: bool) -> Value {
    let Some(m) = obj.as_object() else {
        return obj.clone();
    };
    let mut out = Map::new();
    for (k, v) in m {
        let renamed = RENAMES.iter().find_map(|(core, new)| {
            let (from, to) = if core_to_new {
                (core, new)
            } else {
                (new, core)
            };
            (k == from).then_some(*to)
        });
        out.insert(renamed.unwrap_or(k).to_owned(), v.clone());
    }
    Value::Object(out)
}

/// A core `v1` Event body in the stored `events.k8s.io/v1` shape.
pub fn to_storage(core: &Value) -> Value {
    rename(core, true)
}

/// A stored event in the core `v1` shape (fields only the new API has are kept, as the real
/// conversion keeps `series`, `action`, `eventTime`, `reportingInstance`).
pub fn to_core(stored: &Value) -> Value {
    let mut v = rename(stored, false);
    if v.get("involvedObject").is_none() {
        v["involvedObject"] = Value::Object(Map::new());
    }
    if v.get("source").is_none()
        && let Some(c) = stored.get("reportingController")
    {
        v["source"] = serde_json::json!({"component": c});
    }
    if v.get("count").is_none()
        && let Some(n) = stored["series"].get("count")
    {
        v["count"] = n.clone();
    }
    v
}
