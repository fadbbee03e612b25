//! A request body held to the published model (`v32-spec.json`), as the real API holds it:
//!
//! - a field the spec does not define is dropped silently (observed-v3.4.md: "any object PUT with
//!   an unknown JSON field: the field is dropped silently");
//! - a required field missing, a value of the wrong JSON type or outside its enum answers 422
//!   (the real API's "422 without a name");
//! - a spec field the stand-in cannot apply answers 501 naming it ([`Body::finish`]): never a
//!   400 "unknown field" for a field the spec defines.
//!
//! The models come from `spec_models.json`: the spec's schemas the stand-in serves with `allOf`
//! and `$ref` resolved (field → `s` string, `i` integer, `b` boolean, `a` array, `o` object;
//! `required`; `enums`; `types_of`: the rule types a field applies to, from `x-dependency`).
//! plus every operation of the spec (`METHOD /path`), so a path the spec lists and the stand-in
//! does not serve answers 501, not 404. The sandbox test `spec_models_are_the_published_ones`
//! derives the file from the spec again.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use serde::Deserialize;
use serde_json::{Map, Value};

/// One model of `spec_models.json`.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct SpecModel {
    /// Field → JSON type letter.
    pub fields: BTreeMap<String, String>,
    /// Required fields.
    pub required: Vec<String>,
    /// Field → allowed values.
    pub enums: BTreeMap<String, Vec<Value>>,
    /// Field → the rule `type`s it applies to.
    pub types_of: BTreeMap<String, Vec<String>>,
}

/// `spec_models.json`: the models the stand-in serves and every operation of the spec.
#[derive(Debug, Deserialize)]
pub struct SpecExtract {
    /// Models by schema name.
    pub models: BTreeMap<String, SpecModel>,
    /// `METHOD /path/{param}` of every operation, sorted (paths without the `/v3` prefix).
    pub operations: Vec<String>,
}

/// What `spec_models.json` holds.
pub fn spec_extract() -> &'static SpecExtract {
    static EXTRACT: OnceLock<SpecExtract> = OnceLock::new();
    EXTRACT.get_or_init(|| {
        serde_json::from_str(include_str!("spec_models.json"))
            .unwrap_or_else(|e| panic!("spec_models.json is not the expected JSON: {e}"))
    })
}

/// The models the stand-in serves, by schema name.
pub fn spec_models() -> &'static BTreeMap<String, SpecModel> {
    &spec_extract().models
}

/// The spec's operation matching `method` and `path` (`/v3/...`), as `METHOD /template`.
pub fn spec_operation(method: &str, path: &str) -> Option<&'static str> {
    let path = path.strip_prefix("/v3").unwrap_or(path);
    let segs: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    spec_extract()
        .operations
        .iter()
        .map(String::as_str)
        .find(|op| {
            let Some((m, template)) = op.split_once(' ') else {
                return false;
            };
            let t: Vec<&str> = template.split('/').collect();
            m == method
                && t.len() == segs.len()
                && t.iter()
                    .zip(&segs)
                    .all(|(t, s)| (t.starts_with('{') && !s.is_empty()) || t == s)
        })
}

fn model(name: &str) -> &'static SpecModel {
    spec_models()
        .get(name)
        .unwrap_or_else(|| panic!("spec_models.json has no model {name}"))
}

/// Why a body is refused: an HTTP status and the message.
pub(crate) type Refusal = (u16, String);

/// `501`: a spec field the stand-in does not apply.
pub(crate) fn not_implemented(what: impl std::fmt::Display) -> Refusal {
    (
        501,
        format!("haptic-sandbox does not implement {what} (the real Data Plane API does)"),
    )
}

/// Empty values count as absent (null, false, "", [], {}).
fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null | Value::Bool(false) => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

fn type_ok(letter: &str, v: &Value) -> bool {
    match letter {
        "s" => v.is_string(),
        "i" => v.is_i64() || v.is_u64(),
        "b" => v.is_boolean(),
        "a" => v.is_array(),
        _ => v.is_object(),
    }
}

/// A body being applied: its spec fields, and which of them were used.
#[derive(Debug)]
pub(crate) struct Body {
    model_name: &'static str,
    map: Map<String, Value>,
    used: RefCell<BTreeSet<String>>,
}

impl Body {
    /// Holds `value` to `model_name`: 422 for a missing required field, a wrong type or a
    /// value outside the enum; fields the spec does not define are dropped.
    pub(crate) fn new(model_name: &'static str, value: &Value) -> Result<Body, Refusal> {
        let m = model(model_name);
        let Some(obj) = value.as_object() else {
            return Err((422, format!("{model_name}: the body must be a JSON object")));
        };
        let mut map = Map::new();
        for (k, v) in obj {
            let Some(letter) = m.fields.get(k) else {
                continue; // not a spec field: dropped, as the real API does
            };
            if v.is_null() {
                continue;
            }
            if !type_ok(letter, v) {
                return Err((
                    422,
                    format!("{k} in body must be of type {}", type_name(letter)),
                ));
            }
            if let Some(allowed) = m.enums.get(k)
                && !allowed.contains(v)
            {
                return Err((
                    422,
                    format!(
                        "{k} in body should be one of {}",
                        Value::from(allowed.clone())
                    ),
                ));
            }
            map.insert(k.clone(), v.clone());
        }
        if let Some(missing) = m
            .required
            .iter()
            .find(|r| map.get(*r).is_none_or(|v| v.as_str() == Some("")))
        {
            return Err((422, format!("{missing} in body is required")));
        }
        Ok(Body {
            model_name,
            map,
            used: RefCell::new(BTreeSet::new()),
        })
    }

    /// The body as the API keeps it (spec fields only): what a write answers.
    pub(crate) fn echo(&self) -> Value {
        Value::Object(self.map.clone())
    }

    /// The raw value of `field`, marked used; `None` when absent or empty.
    pub(crate) fn value(&self, field: &str) -> Option<&Value> {
        self.used.borrow_mut().insert(field.to_owned());
        self.map.get(field).filter(|v| !is_empty(v))
    }

    /// A string field (marked used).
    pub(crate) fn str(&self, field: &str) -> Option<&str> {
        self.value(field).and_then(Value::as_str)
    }

    /// A required string field (422 when absent).
    pub(crate) fn req_str(&self, field: &str) -> Result<&str, Refusal> {
        self.str(field)
            .ok_or_else(|| (422, format!("{field} in body is required")))
    }

    /// An integer field (marked used).
    pub(crate) fn int(&self, field: &str) -> Option<i64> {
        self.value(field).and_then(Value::as_i64)
    }

    /// A boolean field (marked used; absent = false).
    pub(crate) fn flag(&self, field: &str) -> bool {
        self.value(field).and_then(Value::as_bool) == Some(true)
    }

    /// Marks `field` used without applying it (a field the real API also ignores here).
    pub(crate) fn ignore(&self, field: &str) {
        self.used.borrow_mut().insert(field.to_owned());
    }

    /// The rule types `field` applies to, when the spec ties it to some (`x-dependency`).
    pub(crate) fn types_of(&self, field: &str) -> Option<&'static [String]> {
        model(self.model_name)
            .types_of
            .get(field)
            .map(Vec::as_slice)
    }

    /// Fields given (non-empty) and not used.
    pub(crate) fn unused(&self) -> Vec<String> {
        let used = self.used.borrow();
        self.map
            .iter()
            .filter(|(k, v)| !used.contains(*k) && !is_empty(v))
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// 501 naming the first spec field given and not applied.
    pub(crate) fn finish(&self) -> Result<(), Refusal> {
        match self.unused().first() {
            Some(f) => Err(not_implemented(format!(
                "the {} field {f}",
                self.model_name
            ))),
            None => Ok(()),
        }
    }
}

fn type_name(letter: &str) -> &'static str {
    match letter {
        "s" => "string",
        "i" => "integer",
        "b" => "boolean",
        "a" => "array",
        _ => "object",
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unknown_fields_dropped_spec_fields_checked() {
        let b = Body::new(
            "server",
            &json!({"name": "s", "address": "a", "bogus": 1, "weight": 5}),
        )
        .unwrap();
        assert_eq!(b.echo(), json!({"name": "s", "address": "a", "weight": 5}));
        assert_eq!(
            Body::new("server", &json!({"address": "a"})).unwrap_err().0,
            422
        );
        assert_eq!(
            Body::new(
                "server",
                &json!({"name": "s", "address": "a", "weight": "5"})
            )
            .unwrap_err()
            .0,
            422
        );
        assert_eq!(
            Body::new(
                "server",
                &json!({"name": "s", "address": "a", "check": "on"})
            )
            .unwrap_err()
            .0,
            422
        );
        let b = Body::new("server", &json!({"name": "s", "address": "a", "weight": 5})).unwrap();
        b.req_str("name").unwrap();
        b.req_str("address").unwrap();
        let (status, msg) = b.finish().unwrap_err();
        assert_eq!(status, 501);
        assert!(msg.contains("weight"), "{msg}");
    }
}
