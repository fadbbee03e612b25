//! Structural-schema checks of custom resources against their CRD's openAPIV3Schema, on every write:
//! `type`, `required`, `minLength`/`maxLength`, `enum`, `minimum`/`maximum`, `minItems`/`maxItems`,
//! `pattern`, `nullable`; unknown fields are pruned (or refused under `fieldValidation=Strict`) unless
//! `x-kubernetes-preserve-unknown-fields` is set. Messages follow upstream's wording.

use super::status::Cause;
use serde_json::Value;

/// Outcome of validating one object.
#[derive(Debug, Default)]
pub struct Report {
    /// Violations (422 Invalid).
    pub causes: Vec<Cause>,
    /// Unknown fields found (pruned, or 400 under Strict).
    pub unknown: Vec<String>,
}

/// Validates `obj` against `schema`, pruning unknown fields from it.
pub fn validate(schema: &Value, obj: &mut Value) -> Report {
    let mut r = Report::default();
    // apiVersion, kind and metadata are the server's business, not the schema's.
    if let (Some(props), Some(map)) = (schema["properties"].as_object(), obj.as_object_mut()) {
        apply_defaults(schema, map);
        let keys: Vec<String> = map.keys().cloned().collect();
        for k in keys {
            if ["apiVersion", "kind", "metadata"].contains(&k.as_str()) {
                continue;
            }
            match props.get(&k) {
                Some(s) => {
                    if let Some(v) = map.get_mut(&k) {
                        walk(s, v, &k, &mut r);
                    }
                }
                None if schema["x-kubernetes-preserve-unknown-fields"] == true => {}
                None => {
                    map.remove(&k);
                    r.unknown.push(format!(".{k}"));
                }
            }
        }
        required(schema, map, "", &mut r);
    }
    r
}

/// Fills absent properties that have a `default` (structural-schema defaulting); the walk then
/// descends into the filled values, so nested defaults apply too.
fn apply_defaults(schema: &Value, map: &mut serde_json::Map<String, Value>) {
    for (k, ps) in schema["properties"].as_object().into_iter().flatten() {
        if let Some(d) = ps.get("default")
            && !map.contains_key(k)
        {
            map.insert(k.clone(), d.clone());
        }
    }
}

fn required(schema: &Value, map: &serde_json::Map<String, Value>, path: &str, r: &mut Report) {
    for req in schema["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        if map.get(req).is_none_or(Value::is_null) {
            r.causes.push(Cause {
                reason: "FieldValueRequired".into(),
                message: "Required value".into(),
                field: join(path, req),
            });
        }
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn invalid(r: &mut Report, path: &str, v: &Value, detail: String) {
    r.causes.push(Cause {
        reason: "FieldValueInvalid".into(),
        message: format!("Invalid value: {}: {detail}", short(v)),
        field: path.to_owned(),
    });
}

fn short(v: &Value) -> String {
    match v {
        Value::Object(_) => "\"object\"".into(),
        Value::Array(_) => "\"array\"".into(),
        other => other.to_string(),
    }
}

fn walk(s: &Value, v: &mut Value, path: &str, r: &mut Report) {
    if v.is_null() {
        return;
    }
    if s["x-kubernetes-int-or-string"] == true {
        if !v.is_string() && type_name(v) != "integer" {
            invalid(
                r,
                path,
                v,
                format!(
                    "{path} in body must be of type int-or-string: {:?}",
                    type_name(v)
                ),
            );
        }
        return;
    }
    if let Some(t) = s["type"].as_str() {
        let actual = type_name(v);
        let ok = actual == t || (t == "number" && actual == "integer");
        if !ok {
            invalid(
                r,
                path,
                &Value::String(actual.into()),
                format!("{path} in body must be of type {t}: {:?}", actual),
            );
            return;
        }
    }
    if let Some(options) = s["enum"].as_array()
        && !options.contains(v)
    {
        let list: Vec<String> = options.iter().map(Value::to_string).collect();
        r.causes.push(Cause {
            reason: "FieldValueNotSupported".into(),
            message: format!(
                "Unsupported value: {}: supported values: {}",
                v,
                list.join(", ")
            ),
            field: path.to_owned(),
        });
    }
    match v {
        Value::String(text) => {
            let text = text.clone();
            let len = text.chars().count() as u64;
            if let Some(min) = s["minLength"].as_u64()
                && len < min
            {
                let detail = format!("{path} in body should be at least {min} chars long");
                invalid(r, path, &v.clone(), detail);
            }
            if let Some(max) = s["maxLength"].as_u64()
                && len > max
            {
                let detail = format!("{path} in body may not be longer than {max}");
                invalid(r, path, &v.clone(), detail);
            }
            if let Some(p) = s["pattern"].as_str()
                && let Ok(re) = regex::Regex::new(p)
                && !re.is_match(&text)
            {
                let detail = format!("{path} in body should match '{p}'");
                invalid(r, path, &v.clone(), detail);
            }
        }
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or(0.0);
            if let Some(min) = s["minimum"].as_f64()
                && x < min
            {
                invalid(
                    r,
                    path,
                    &v.clone(),
                    format!("{path} in body should be greater than or equal to {min}"),
                );
            }
            if let Some(max) = s["maximum"].as_f64()
                && x > max
            {
                invalid(
                    r,
                    path,
                    &v.clone(),
                    format!("{path} in body should be less than or equal to {max}"),
                );
            }
        }
        Value::Array(items) => {
            let n = items.len() as u64;
            if let Some(min) = s["minItems"].as_u64()
                && n < min
            {
                r.causes.push(Cause {
                    reason: "FieldValueInvalid".into(),
                    message: format!(
                        "Invalid value: {n}: {path} in body should have at least {min} items"
                    ),
                    field: path.to_owned(),
                });
            }
            if let Some(max) = s["maxItems"].as_u64()
                && n > max
            {
                r.causes.push(Cause {
                    reason: "TooMany".into(),
                    message: format!("Too many: {n}: must have at most {max} items"),
                    field: path.to_owned(),
                });
            }
            if s["items"].is_object() {
                for (i, it) in items.iter_mut().enumerate() {
                    walk(&s["items"], it, &format!("{path}[{i}]"), r);
                }
            }
        }
        Value::Object(map) => {
            apply_defaults(s, map);
            let preserve = s["x-kubernetes-preserve-unknown-fields"] == true;
            let props = s["properties"].as_object();
            let additional = &s["additionalProperties"];
            let keys: Vec<String> = map.keys().cloned().collect();
            for k in keys {
                let child_path = join(path, &k);
                let child_schema = props.and_then(|p| p.get(&k)).or(if additional.is_object() {
                    Some(additional)
                } else {
                    None
                });
                match child_schema {
                    Some(cs) => {
                        if let Some(cv) = map.get_mut(&k) {
                            walk(cs, cv, &child_path, r);
                        }
                    }
                    None if preserve || additional == &Value::Bool(true) => {}
                    None if props.is_none() && s["type"] != "object" => {}
                    None => {
                        map.remove(&k);
                        r.unknown.push(format!(".{child_path}"));
                    }
                }
            }
            required(s, map, path, r);
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reports_required_type_min_length_enum_and_prunes() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
            "required": ["name"], "properties": {"name": {"type": "string", "minLength": 1},
            "mode": {"type": "string", "enum": ["a", "b"]}, "n": {"type": "integer"}}}}});
        let mut obj = json!({"spec": {"mode": "c", "n": "x", "junk": 1}});
        let r = validate(&schema, &mut obj);
        let fields: Vec<&str> = r.causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(fields, vec!["spec.mode", "spec.n", "spec.name"]);
        assert_eq!(r.unknown, vec![".spec.junk".to_owned()]);
        assert_eq!(obj, json!({"spec": {"mode": "c", "n": "x"}}));
        let mut short = json!({"spec": {"name": ""}});
        let r = validate(&schema, &mut short);
        assert_eq!(
            r.causes[0].message,
            "Invalid value: \"\": spec.name in body should be at least 1 chars long"
        );
    }
}
