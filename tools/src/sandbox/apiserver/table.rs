//! `meta.k8s.io/v1` `Table` answers for `kubectl get` (apiserver-emulation.md §4): a CRD's printer
//! columns (JSONPath subset) for custom resources, the usual columns for built-in kinds.

use super::resources::{PrinterColumn, ResourceType};
use serde_json::{Value, json};

fn col(name: &str, type_: &str, json_path: &str, priority: i64) -> PrinterColumn {
    PrinterColumn {
        name: name.into(),
        type_: type_.into(),
        json_path: json_path.into(),
        description: String::new(),
        priority,
    }
}

/// The columns of a kind, `Name` first.
fn columns(rt: &ResourceType) -> Vec<PrinterColumn> {
    let age = col("Age", "date", ".metadata.creationTimestamp", 0);
    let mut cols = vec![col("Name", "string", ".metadata.name", 0)];
    match (rt.custom, rt.plural.as_str()) {
        (true, _) if rt.printer_columns.is_empty() => cols.push(age),
        (true, _) => cols.extend(rt.printer_columns.iter().cloned()),
        (false, "pods") => cols.extend([
            col("Ready", "string", "#ready", 0),
            col("Status", "string", ".status.phase", 0),
            col("Restarts", "integer", "#restarts", 0),
            age,
            col("IP", "string", ".status.podIP", 1),
            col("Node", "string", ".spec.nodeName", 1),
        ]),
        (false, "configmaps") => cols.extend([col("Data", "integer", "#data", 0), age]),
        (false, "secrets") => cols.extend([
            col("Type", "string", ".type", 0),
            col("Data", "integer", "#data", 0),
            age,
        ]),
        (false, "leases") => cols.extend([col("Holder", "string", ".spec.holderIdentity", 0), age]),
        (false, "namespaces") => cols.extend([col("Status", "string", ".status.phase", 0), age]),
        (false, "customresourcedefinitions") => cols.push(col(
            "Created At",
            "string",
            ".metadata.creationTimestamp",
            0,
        )),
        (false, "events") => cols.extend([
            col("Reason", "string", ".reason", 0),
            col("Object", "string", "#involved", 0),
            col("Message", "string", ".message", 0),
            age,
        ]),
        _ => cols.push(age),
    }
    cols
}

/// Evaluates the JSONPath subset: `.a.b`, `.a[0]`, `.a[*]`, `.a[?(@.k=="v")].b`.
pub fn json_path(obj: &Value, path: &str) -> Vec<Value> {
    let mut cur = vec![obj.clone()];
    let path = path
        .trim()
        .trim_start_matches('{')
        .trim_end_matches('}')
        .trim_start_matches('$');
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            let key = &r[..end];
            cur = cur.iter().filter_map(|v| v.get(key).cloned()).collect();
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let Some(end) = r.find(']') else {
                return Vec::new();
            };
            let sel = &r[..end];
            rest = &r[end + 1..];
            let items: Vec<Value> = cur
                .iter()
                .filter_map(|v| v.as_array().cloned())
                .flatten()
                .collect();
            if sel == "*" {
                cur = items;
            } else if let Ok(i) = sel.parse::<usize>() {
                cur = cur.iter().filter_map(|v| v.get(i).cloned()).collect();
            } else if let Some(f) = sel.strip_prefix("?(@.").and_then(|f| f.strip_suffix(')')) {
                let (k, want) = f.split_once("==").unwrap_or((f, ""));
                let want = want.trim().trim_matches(['"', '\'']);
                cur = items
                    .into_iter()
                    .filter(|it| match it.get(k.trim()) {
                        Some(Value::String(s)) => s == want,
                        Some(other) => {
                            other.as_i64().is_some_and(|n| want.parse() == Ok(n))
                                || other.as_bool().is_some_and(|b| want.parse() == Ok(b))
                        }
                        None => false,
                    })
                    .collect();
            } else {
                return Vec::new();
            }
        } else {
            return Vec::new();
        }
    }
    cur
}

/// Human age as kubectl prints it (`45s`, `3m12s`, `5h`, `2d`).
pub fn age(created: &str) -> String {
    let Ok(t) = created.parse::<jiff::Timestamp>() else {
        return "<unknown>".into();
    };
    let secs = (jiff::Timestamp::now().as_second() - t.as_second()).max(0);
    let (m, h, d) = (secs / 60, secs / 3600, secs / 86400);
    if secs < 120 {
        format!("{secs}s")
    } else if m < 10 {
        two_units(m, 'm', secs % 60, 's')
    } else if h < 3 {
        format!("{m}m")
    } else if h < 8 {
        two_units(h, 'h', m % 60, 'm')
    } else if h < 48 {
        format!("{h}h")
    } else {
        format!("{d}d")
    }
}

/// `3m12s`, or `3m` when the smaller unit is 0.
fn two_units(big: i64, big_unit: char, small: i64, small_unit: char) -> String {
    if small == 0 {
        format!("{big}{big_unit}")
    } else {
        format!("{big}{big_unit}{small}{small_unit}")
    }
}

fn cell(obj: &Value, c: &PrinterColumn) -> Value {
    match c.json_path.as_str() {
        "#ready" => {
            let st = obj["status"]["containerStatuses"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let total = obj["spec"]["containers"].as_array().map_or(0, Vec::len);
            let ready = st.iter().filter(|s| s["ready"] == true).count();
            return json!(format!("{ready}/{total}"));
        }
        "#restarts" => {
            let st = obj["status"]["containerStatuses"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            return json!(
                st.iter()
                    .map(|s| s["restartCount"].as_i64().unwrap_or(0))
                    .sum::<i64>()
            );
        }
        "#data" => {
            let n = obj["data"].as_object().map_or(0, |m| m.len())
                + obj["binaryData"].as_object().map_or(0, |m| m.len());
            return json!(n);
        }
        "#involved" => {
            let io = &obj["involvedObject"];
            let io = if io.is_object() {
                io
            } else {
                &obj["regarding"]
            };
            return json!(format!(
                "{}/{}",
                io["kind"].as_str().unwrap_or("").to_lowercase(),
                io["name"].as_str().unwrap_or("")
            ));
        }
        _ => {}
    }
    let vals = json_path(obj, &c.json_path);
    let Some(first) = vals.first() else {
        return Value::Null;
    };
    if c.type_ == "date" {
        return json!(
            first
                .as_str()
                .map(age)
                .unwrap_or_else(|| "<unknown>".into())
        );
    }
    let joined = |vs: &[Value]| {
        vs.iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| v.to_string())
            })
            .collect::<Vec<_>>()
            .join(",")
    };
    match first {
        Value::Object(_) | Value::Array(_) => json!(first.to_string()),
        _ if vals.len() > 1 => json!(joined(&vals)),
        other => other.clone(),
    }
}

/// A Table of objects; `with_columns` false leaves `columnDefinitions` empty (later watch events).
pub fn table(rt: &ResourceType, objs: &[Value], rv: &str, with_columns: bool) -> Value {
    let cols = columns(rt);
    let defs: Vec<Value> = if with_columns {
        cols.iter()
            .map(|c| {
                let format = if c.name == "Name" { "name" } else { "" };
                let type_ = if c.type_ == "date" { "string" } else { c.type_.as_str() };
                json!({"name": c.name, "type": type_, "format": format, "description": c.description, "priority": c.priority})
            })
            .collect()
    } else {
        Vec::new()
    };
    let rows: Vec<Value> = objs
        .iter()
        .map(|o| {
            let cells: Vec<Value> = cols.iter().map(|c| cell(o, c)).collect();
            json!({"cells": cells, "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o["metadata"]}})
        })
        .collect();
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": rv},
        "columnDefinitions": defs, "rows": rows})
}

/// The `meta.k8s.io/v1` `PartialObjectMetadata` of an object (kube's `*_metadata` calls and
/// metadata watchers ask for it with `Accept: ...;as=PartialObjectMetadata[List]`).
pub fn partial(obj: &Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_path_subset() {
        let o = json!({"status": {"conditions": [{"type": "A", "status": "False"}, {"type": "Ready", "status": "True"}]},
            "spec": {"l": [1, 2]}});
        assert_eq!(
            json_path(&o, ".status.conditions[?(@.type==\"Ready\")].status"),
            vec![json!("True")]
        );
        assert_eq!(json_path(&o, ".spec.l[1]"), vec![json!(2)]);
        assert_eq!(json_path(&o, ".spec.missing"), Vec::<Value>::new());
    }
}
