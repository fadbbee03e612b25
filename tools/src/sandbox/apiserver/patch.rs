//! Patch types (apiserver-emulation.md §11): RFC 7386 JSON merge patch, RFC 6902 JSON patch (with
//! `test`), and strategic merge patch for built-in kinds (maps merge; the keyed lists of core kinds
//! merge by their `patchMergeKey`; `$patch`, `$setElementOrder`, `$retainKeys` and
//! `$deleteFromPrimitiveList` directives are understood or dropped).

use super::status::{ApiError, ApiResult};
use serde_json::{Map, Value};

/// RFC 7386 merge: `null` deletes, arrays are replaced.
pub fn merge(target: &mut Value, patch: &Value) {
    json_patch::merge(target, patch);
}

/// RFC 6902 JSON patch. A `test` against `null` of a path that does not exist passes, as upstream
/// (kube's finalizer helper relies on it); a failed test or a bad path is 422 Invalid.
pub fn json_patch(target: &mut Value, patch: &Value) -> ApiResult<()> {
    let ops = patch
        .as_array()
        .ok_or_else(|| ApiError::bad_request("json patch must be a JSON array of operations"))?;
    let mut kept = Vec::new();
    for op in ops {
        let is_null_test = op["op"] == "test" && op.get("value").is_none_or(Value::is_null);
        if is_null_test {
            let path = op["path"].as_str().unwrap_or("");
            let found = target.pointer(path);
            if found.is_none_or(Value::is_null) {
                continue;
            }
        }
        kept.push(op.clone());
    }
    let parsed: json_patch::Patch = serde_json::from_value(Value::Array(kept))
        .map_err(|e| ApiError::bad_request(format!("unable to parse json patch: {e}")))?;
    json_patch::patch(target, &parsed).map_err(|e| {
        ApiError::new(
            422,
            "Invalid",
            format!("the server rejected our request due to an error in our request: {e}"),
        )
    })
}

/// The patchMergeKey of a built-in list field (by field name; the kinds we serve never use one
/// name with two meanings).
fn merge_key(field: &str) -> Option<&'static str> {
    Some(match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "imagePullSecrets"
        | "containerStatuses"
        | "initContainerStatuses" => "name",
        "ports" => "containerPort",
        "volumeMounts" => "mountPath",
        "conditions" => "type",
        "ownerReferences" => "uid",
        "hostAliases" => "ip",
        _ => return None,
    })
}

/// Primitive lists with `patchStrategy: merge` (union instead of replace).
fn merge_primitive(field: &str) -> bool {
    field == "finalizers"
}

/// Strategic merge patch of `patch` into `target`.
pub fn strategic(target: &mut Value, patch: &Value) {
    let Some(pmap) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if pmap.get("$patch").and_then(Value::as_str) == Some("replace") {
        let mut p = pmap.clone();
        p.remove("$patch");
        *target = Value::Object(strip_directives(p));
        return;
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let retain: Option<Vec<String>> = pmap.get("$retainKeys").and_then(Value::as_array).map(|a| {
        a.iter()
            .filter_map(|s| s.as_str().map(str::to_owned))
            .collect()
    });
    let Some(tmap) = target.as_object_mut() else {
        return;
    };
    if let Some(keep) = retain {
        tmap.retain(|k, _| keep.contains(k));
    }
    for (k, pv) in pmap {
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(list)), Some(del)) = (tmap.get_mut(field), pv.as_array()) {
                list.retain(|x| !del.contains(x));
            }
            continue;
        }
        if k.starts_with('$') {
            continue;
        }
        if pv.is_null() {
            tmap.remove(k);
            continue;
        }
        if pv.get("$patch").and_then(Value::as_str) == Some("delete") {
            tmap.remove(k);
            continue;
        }
        match pv {
            Value::Object(_) => strategic(tmap.entry(k.clone()).or_insert(Value::Null), pv),
            Value::Array(items) => {
                let cur = tmap.remove(k);
                tmap.insert(k.clone(), merge_list(k, cur, items));
            }
            _ => {
                tmap.insert(k.clone(), pv.clone());
            }
        }
    }
}

fn merge_list(field: &str, cur: Option<Value>, items: &[Value]) -> Value {
    let mut list = match cur {
        Some(Value::Array(a)) => a,
        _ => Vec::new(),
    };
    if merge_primitive(field) {
        for it in items {
            if !list.contains(it) {
                list.push(it.clone());
            }
        }
        return Value::Array(list);
    }
    let Some(key) = merge_key(field) else {
        let cleaned = items.iter().filter(|i| i.get("$patch").is_none()).cloned();
        return Value::Array(cleaned.map(strip_value).collect());
    };
    for it in items {
        let id = it.get(key).cloned();
        let pos = id
            .as_ref()
            .and_then(|id| list.iter().position(|e| e.get(key) == Some(id)));
        let directive = it.get("$patch").and_then(Value::as_str);
        match (pos, directive) {
            (Some(p), Some("delete")) => {
                list.remove(p);
            }
            (_, Some("delete")) => {}
            (Some(p), _) => strategic(&mut list[p], it),
            (None, _) => list.push(strip_value(it.clone())),
        }
    }
    Value::Array(list)
}

fn strip_value(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(strip_directives(m)),
        other => other,
    }
}

fn strip_directives(m: Map<String, Value>) -> Map<String, Value> {
    m.into_iter()
        .filter(|(k, _)| !k.starts_with('$'))
        .map(|(k, v)| (k, strip_value(v)))
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strategic_merges_keyed_lists_and_deletes_nulls() {
        let mut t = json!({"spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}],
            "renewTime": "t"}});
        strategic(
            &mut t,
            &json!({"spec": {"$setElementOrder/containers": [{"name": "a"}],
                "containers": [{"name": "a", "image": "z"}, {"name": "b", "$patch": "delete"}],
                "renewTime": null}}),
        );
        assert_eq!(
            t,
            json!({"spec": {"containers": [{"name": "a", "image": "z"}]}})
        );
    }

    #[test]
    fn json_patch_null_test_passes_on_missing_path() {
        let mut t = json!({"metadata": {}});
        let p = json!([{"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": ["f"]}]);
        json_patch(&mut t, &p).unwrap();
        assert_eq!(t["metadata"]["finalizers"], json!(["f"]));
        let bad = json!([{"op": "test", "path": "/metadata/finalizers", "value": ["g"]}]);
        assert_eq!(json_patch(&mut t, &bad).unwrap_err().code, 422);
    }
}
