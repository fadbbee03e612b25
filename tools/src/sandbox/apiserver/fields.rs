//! `metadata.managedFields` and server-side apply (apiserver-emulation.md §10, ecosystem.md §B.4).
//!
//! Ownership is tracked per leaf path: maps are recursed, scalars are leaves, lists are leaves
//! (atomic) unless the CRD schema marks them `x-kubernetes-list-type: map`, whose items are then
//! addressed by their `x-kubernetes-list-map-keys` (`k:{"type":"Ready"}`) and merged by key on
//! apply, as upstream does for status conditions. Entries are keyed by (manager, operation
//! `Apply`|`Update`, subresource) and written as `FieldsV1`.

use serde_json::{Map, Value, json};
use std::collections::BTreeSet;

/// A field path, one map key per element; an element starting with [`ITEM`] addresses the item of
/// a keyed list (`ITEM` + the JSON object of its key fields).
pub type Path = Vec<String>;

/// Marker of a keyed-list item element inside a [`Path`] (cannot collide with a map key a
/// client would send; written as `k:` in `FieldsV1`).
const ITEM: &str = "\u{1}k:";

/// The `x-kubernetes-list-map-keys` of the list at `path`, when the schema makes it a map-list.
fn list_keys(schema: Option<&Value>, path: &[String]) -> Option<Vec<String>> {
    let mut node = schema?;
    for e in path {
        node = if e.starts_with(ITEM) {
            node.get("items")?
        } else {
            match node["properties"].get(e) {
                Some(n) => n,
                None => node.get("additionalProperties").filter(|a| a.is_object())?,
            }
        };
    }
    if node["x-kubernetes-list-type"] != "map" {
        return None;
    }
    let keys: Vec<String> = node["x-kubernetes-list-map-keys"]
        .as_array()?
        .iter()
        .filter_map(|k| k.as_str().map(str::to_owned))
        .collect();
    (!keys.is_empty()).then_some(keys)
}

/// The path element of a keyed-list item, if it carries every key.
fn item_id(item: &Value, keys: &[String]) -> Option<String> {
    let mut parts = Vec::new();
    for k in keys {
        let v = item.get(k)?;
        parts.push(format!("{}:{v}", Value::String(k.clone())));
    }
    Some(format!("{ITEM}{{{}}}", parts.join(",")))
}

/// The key fields named by an item element.
fn item_keys(id: &str) -> Option<Map<String, Value>> {
    match serde_json::from_str::<Value>(id.strip_prefix(ITEM)?) {
        Ok(Value::Object(m)) => Some(m),
        _ => None,
    }
}

fn item_matches(item: &Value, id: &str) -> bool {
    item_keys(id).is_some_and(|want| want.iter().all(|(k, v)| item.get(k) == Some(v)))
}

/// One `managedFields[]` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// Field manager name.
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: String,
    /// `""` (main resource) or `status`.
    pub subresource: String,
    /// apiVersion the entry was written through.
    pub api_version: String,
    /// RFC 3339 time of the last change of this entry's set.
    pub time: String,
    /// Owned leaves.
    pub fields: BTreeSet<Path>,
}

/// Leaves of an object that ownership covers: everything but identity metadata.
pub fn leaves(obj: &Value, schema: Option<&Value>) -> BTreeSet<Path> {
    let mut out = BTreeSet::new();
    if let Some(map) = obj.as_object() {
        for (k, v) in map {
            match k.as_str() {
                "apiVersion" | "kind" => {}
                "metadata" => {
                    for mk in ["labels", "annotations", "finalizers", "ownerReferences"] {
                        if let Some(mv) = v.get(mk) {
                            collect(mv, vec!["metadata".into(), mk.into()], &mut out, None);
                        }
                    }
                }
                _ => collect(v, vec![k.clone()], &mut out, schema),
            }
        }
    }
    out
}

fn collect(v: &Value, prefix: Path, out: &mut BTreeSet<Path>, schema: Option<&Value>) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, c) in m {
                let mut p = prefix.clone();
                p.push(k.clone());
                collect(c, p, out, schema);
            }
        }
        Value::Array(items) => {
            let keyed = list_keys(schema, &prefix).and_then(|keys| {
                items
                    .iter()
                    .map(|it| item_id(it, &keys))
                    .collect::<Option<Vec<String>>>()
            });
            match keyed {
                // A keyed list owns its items, not the list: an empty one sets nothing.
                Some(ids) => {
                    for (it, id) in items.iter().zip(ids) {
                        let mut p = prefix.clone();
                        p.push(id);
                        collect(it, p, out, schema);
                    }
                }
                None => {
                    out.insert(prefix);
                }
            }
        }
        // An empty map sets nothing; owning it would overlap every later field below it.
        Value::Null | Value::Object(_) => {}
        _ => {
            out.insert(prefix);
        }
    }
}

/// The value at a path.
pub fn get<'a>(obj: &'a Value, path: &Path) -> Option<&'a Value> {
    path.iter().try_fold(obj, |v, k| step(v, k))
}

fn step<'a>(v: &'a Value, k: &str) -> Option<&'a Value> {
    if k.starts_with(ITEM) {
        v.as_array()?.iter().find(|it| item_matches(it, k))
    } else {
        v.get(k)
    }
}

fn step_mut<'a>(v: &'a mut Value, k: &str) -> Option<&'a mut Value> {
    if k.starts_with(ITEM) {
        v.as_array_mut()?.iter_mut().find(|it| item_matches(it, k))
    } else {
        v.get_mut(k)
    }
}

/// Equal as the API server's decoder sees them: numbers by value, so `0` and `0.0` are one
/// value (kubectl sends YAML's `minimum: 0.0` as `0`; a client serializing an f64 sends `0.0`;
/// the real server decodes both into the same float64 and finds no conflict).
fn same_value(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            x == y || ((x.is_f64() || y.is_f64()) && x.as_f64() == y.as_f64())
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same_value(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| same_value(v, w)))
        }
        _ => a == b,
    }
}

fn overlaps(a: &Path, b: &Path) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// Removes a path and then the map parents it leaves empty (below the top level). Removing a
/// keyed-list item's key field, or its last non-key field, removes the item.
pub fn remove(obj: &mut Value, path: &Path) {
    if path.is_empty() {
        return;
    }
    let (parents, last) = path.split_at(path.len() - 1);
    let last = &last[0];
    if let Some(parent_id) = parents.last().filter(|p| p.starts_with(ITEM))
        && item_keys(parent_id).is_some_and(|k| k.contains_key(last))
    {
        remove(obj, &parents.to_vec());
        return;
    }
    let mut cur = &mut *obj;
    for k in parents {
        match step_mut(cur, k) {
            Some(next) => cur = next,
            None => return,
        }
    }
    if last.starts_with(ITEM) {
        if let Some(list) = cur.as_array_mut() {
            list.retain(|it| !item_matches(it, last));
        }
        return;
    }
    let emptied = match cur.as_object_mut() {
        Some(m) => {
            m.remove(last);
            match parents.last().and_then(|p| item_keys(p)) {
                Some(keys) => m.keys().all(|k| keys.contains_key(k)),
                None => m.is_empty(),
            }
        }
        None => false,
    };
    if emptied && parents.len() > 1 {
        remove(obj, &parents.to_vec());
    }
}

/// Reads `metadata.managedFields`.
pub fn read(obj: &Value) -> Vec<Entry> {
    let mut out = Vec::new();
    for e in obj["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let mut fields = BTreeSet::new();
        from_v1(&e["fieldsV1"], Vec::new(), &mut fields);
        out.push(Entry {
            manager: e["manager"].as_str().unwrap_or_default().to_owned(),
            operation: e["operation"].as_str().unwrap_or("Update").to_owned(),
            subresource: e["subresource"].as_str().unwrap_or_default().to_owned(),
            api_version: e["apiVersion"].as_str().unwrap_or_default().to_owned(),
            time: e["time"].as_str().unwrap_or_default().to_owned(),
            fields,
        });
    }
    out
}

fn from_v1(v: &Value, prefix: Path, out: &mut BTreeSet<Path>) {
    let Some(m) = v.as_object() else { return };
    if m.is_empty() && !prefix.is_empty() {
        out.insert(prefix);
        return;
    }
    for (k, c) in m {
        if k == "." {
            out.insert(prefix.clone());
        } else if let Some(name) = k.strip_prefix("f:") {
            let mut p = prefix.clone();
            p.push(name.to_owned());
            from_v1(c, p, out);
        } else if let Some(id) = k.strip_prefix("k:") {
            let mut p = prefix.clone();
            p.push(format!("{ITEM}{id}"));
            from_v1(c, p, out);
        } else if !prefix.is_empty() {
            // `k:`/`v:` list items: lists are atomic here, so the list is the leaf.
            out.insert(prefix.clone());
        }
    }
}

fn to_v1(fields: &BTreeSet<Path>) -> Value {
    let mut root = Map::new();
    for p in fields {
        let mut cur = &mut root;
        for k in p {
            let name = match k.strip_prefix(ITEM) {
                Some(id) => format!("k:{id}"),
                None => format!("f:{k}"),
            };
            let entry = cur.entry(name).or_insert_with(|| json!({}));
            let Some(next) = entry.as_object_mut() else {
                break;
            };
            cur = next;
        }
    }
    Value::Object(root)
}

/// Writes `metadata.managedFields` (removed when empty).
pub fn write(obj: &mut Value, entries: &[Entry]) {
    let list: Vec<Value> = entries
        .iter()
        .filter(|e| !e.fields.is_empty())
        .map(|e| {
            let mut v = json!({
                "manager": e.manager,
                "operation": e.operation,
                "apiVersion": e.api_version,
                "time": e.time,
                "fieldsType": "FieldsV1",
                "fieldsV1": to_v1(&e.fields),
            });
            if !e.subresource.is_empty() {
                v["subresource"] = json!(e.subresource);
            }
            v
        })
        .collect();
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        if list.is_empty() {
            meta.remove("managedFields");
        } else {
            meta.insert("managedFields".into(), Value::Array(list));
        }
    }
}

/// Who writes, for managedFields.
#[derive(Debug, Clone)]
pub struct Writer<'a> {
    /// Field manager.
    pub manager: &'a str,
    /// `""` or `status`.
    pub subresource: &'a str,
    /// apiVersion of the request.
    pub api_version: &'a str,
    /// Current time, RFC 3339.
    pub now: &'a str,
    /// The CRD's openAPIV3Schema (keyed lists); `None` for built-in kinds.
    pub schema: Option<&'a Value>,
}

impl Writer<'_> {
    /// The writer's first entry: `operation` (`Apply` or `Update`) of `fields`, now.
    fn entry(&self, operation: &str, fields: BTreeSet<Path>) -> Entry {
        Entry {
            manager: self.manager.to_owned(),
            operation: operation.into(),
            subresource: self.subresource.to_owned(),
            api_version: self.api_version.to_owned(),
            time: self.now.to_owned(),
            fields,
        }
    }
}

/// Records a non-apply write: the writer takes the leaves it changed, removed leaves lose all owners.
pub fn record_update(old: Option<&Value>, new: &mut Value, w: &Writer<'_>) {
    let mut entries = old.map(read).unwrap_or_default();
    let old_leaves = old.map(|o| leaves(o, w.schema)).unwrap_or_default();
    let new_leaves = leaves(new, w.schema);
    let changed: BTreeSet<Path> = new_leaves
        .iter()
        .filter(|p| old.and_then(|o| get(o, p)) != get(new, p))
        .cloned()
        .collect();
    let removed: Vec<&Path> = old_leaves
        .iter()
        .filter(|p| !new_leaves.contains(*p))
        .collect();
    for e in &mut entries {
        let before = e.fields.len();
        e.fields.retain(|f| {
            !removed.iter().any(|r| overlaps(f, r)) && !changed.iter().any(|c| overlaps(f, c))
        });
        if e.fields.len() != before {
            e.time = w.now.to_owned();
        }
    }
    if !changed.is_empty() {
        let pos = entries.iter().position(|e| {
            e.manager == w.manager && e.operation == "Update" && e.subresource == w.subresource
        });
        match pos {
            Some(i) => {
                entries[i].fields.extend(changed);
                entries[i].time = w.now.to_owned();
                entries[i].api_version = w.api_version.to_owned();
            }
            None => entries.push(w.entry("Update", changed)),
        }
    }
    entries.retain(|e| !e.fields.is_empty());
    write(new, &entries);
}

/// One SSA conflict: another manager owns a leaf the apply sets to a different value.
#[derive(Debug, Clone, PartialEq)]
pub struct Conflict {
    /// The other manager.
    pub manager: String,
    /// The path, upstream style (`.spec.holderIdentity`).
    pub field: String,
}

fn apply_merge(target: &mut Value, src: &Value, path: &mut Path, schema: Option<&Value>) {
    if let (Some(t), Some(s)) = (target.as_array_mut(), src.as_array())
        && let Some(keys) = list_keys(schema, path)
    {
        // Keyed lists merge item by item; items the applier stopped sending are removed by the
        // ownership step, not here.
        for item in s {
            let Some(id) = item_id(item, &keys) else {
                t.push(item.clone());
                continue;
            };
            path.push(id.clone());
            match t.iter_mut().find(|it| item_matches(it, &id)) {
                Some(cur) => apply_merge(cur, item, path, schema),
                None => t.push(item.clone()),
            }
            path.pop();
        }
        return;
    }
    let (Some(t), Some(s)) = (target.as_object_mut(), src.as_object()) else {
        *target = src.clone();
        return;
    };
    for (k, v) in s {
        if v.is_null() {
            continue;
        }
        match t.get_mut(k) {
            Some(cur) if (cur.is_object() && v.is_object()) || (cur.is_array() && v.is_array()) => {
                path.push(k.clone());
                apply_merge(cur, v, path, schema);
                path.pop();
            }
            _ => {
                t.insert(k.clone(), v.clone());
            }
        }
    }
}

/// A path as upstream prints it: `.status.conditions[type="Ready"].status`.
fn render(p: &Path) -> String {
    let mut out = String::new();
    for e in p {
        match item_keys(e) {
            Some(keys) => {
                let parts: Vec<String> = keys.iter().map(|(k, v)| format!("{k}={v}")).collect();
                out.push_str(&format!("[{}]", parts.join(",")));
            }
            None => {
                out.push('.');
                out.push_str(e);
            }
        }
    }
    out
}

/// Server-side apply of `applied` onto `live` (an object skeleton when creating). Returns the new
/// object with its managedFields, or the conflicts when `force` is false.
pub fn apply(
    live: &Value,
    applied: &Value,
    w: &Writer<'_>,
    force: bool,
) -> Result<Value, Vec<Conflict>> {
    let mut entries = read(live);
    let set = leaves(applied, w.schema);
    let mut conflicts = Vec::new();
    for p in &set {
        let value = get(applied, p);
        // An empty map sets nothing, so it cannot take anything away from another manager.
        if get(live, p)
            .zip(value)
            .is_some_and(|(l, v)| same_value(l, v))
            || value.is_some_and(|v| v.as_object().is_some_and(Map::is_empty))
        {
            continue;
        }
        for e in &entries {
            if e.manager == w.manager && e.operation == "Apply" {
                continue;
            }
            if e.subresource != w.subresource {
                continue;
            }
            if e.fields.iter().any(|f| overlaps(f, p)) {
                let field = render(p);
                let c = Conflict {
                    manager: e.manager.clone(),
                    field,
                };
                if !conflicts.contains(&c) {
                    conflicts.push(c);
                }
            }
        }
    }
    if !conflicts.is_empty() && !force {
        return Err(conflicts);
    }
    let mut new = live.clone();
    let mine = entries.iter().position(|e| {
        e.manager == w.manager && e.operation == "Apply" && e.subresource == w.subresource
    });
    if let Some(i) = mine {
        let dropped: Vec<Path> = entries[i].fields.difference(&set).cloned().collect();
        for p in dropped {
            let owned_elsewhere = entries
                .iter()
                .enumerate()
                .any(|(j, e)| j != i && e.fields.iter().any(|f| overlaps(f, &p)));
            if !owned_elsewhere {
                remove(&mut new, &p);
            }
        }
    }
    apply_merge(&mut new, applied, &mut Vec::new(), w.schema);
    if force {
        for e in &mut entries {
            if e.manager == w.manager && e.operation == "Apply" {
                continue;
            }
            let before = e.fields.len();
            e.fields.retain(|f| {
                !set.iter()
                    .any(|p| overlaps(f, p) && get(live, p) != get(applied, p))
            });
            if e.fields.len() != before {
                e.time = w.now.to_owned();
            }
        }
    }
    match mine {
        Some(i) => {
            if entries[i].fields != set {
                entries[i].time = w.now.to_owned();
            }
            entries[i].fields = set;
            entries[i].api_version = w.api_version.to_owned();
        }
        None => entries.push(w.entry("Apply", set)),
    }
    entries.retain(|e| !e.fields.is_empty());
    write(&mut new, &entries);
    Ok(new)
}

#[cfg(test)]
mod tests;
