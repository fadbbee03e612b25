//! OpenAPI 3.0 schema objects turned into self-contained JSON Schema draft 4 documents, which the
//! `jsonschema` crate validates.
//!
//! An OpenAPI 3.0 schema object is draft 4 with a few differences (OpenAPI 3.0.3 §4.7.24), each
//! handled here:
//! - `$ref` to `#/components/...` (or deeper, `#/components/schemas/x/properties/y`): inlined (the
//!   Data Plane API documents have no reference cycles; a cycle is reported, not looped on).
//!   Keywords beside a `$ref` are ignored, as OpenAPI 3.0 says.
//! - `nullable: true` (and go-swagger's `x-nullable: true`): `type: T` becomes `type: [T, "null"]`
//!   and `null` joins an `enum`.
//! - `readOnly` properties: in a request they are not `required`, and sending one is refused (the
//!   spec: "SHOULD NOT be sent as part of the request"; the API ignores them, so a client that sends
//!   one believes in a write that does not happen). `writeOnly` likewise for responses.
//! - `allOf` of object schemas is merged into one object (properties, `required`,
//!   `additionalProperties: false` when any part says so). The documents close composed objects
//!   (`server`, `bind`: `additionalProperties: false` beside or inside an `allOf`); read as plain
//!   draft 4 that would refuse every property, read as go-swagger composes the model it means "the
//!   union of the parts' properties, nothing else".
//! - `format`: OpenAPI's own formats (`int64`, `binary`, ...) are unknown to draft 4 and ignored;
//!   `date-time` and `date` are checked.
//! - Extensions (`x-*`), `example`, `discriminator`, `xml`, `externalDocs`, `deprecated`: dropped.

use std::collections::HashMap;

use serde_json::{Map, Value};

/// Which side of an exchange a schema judges: the difference is `readOnly` / `writeOnly`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Direction {
    /// A body the client sends.
    Request,
    /// A body the API answers.
    Response,
}

/// Marks the schema that stands for a `readOnly` property in a request (or `writeOnly` in a
/// response): `not: {}` refuses any value; the description names why in the violation.
pub(super) const REFUSED_PROPERTY: &str =
    "haptic: a readOnly property sent in a request, or a writeOnly one answered";

/// Keywords OpenAPI 3.0 adds to draft 4 that carry no validation (or that this module applies
/// itself).
const DROPPED: &[&str] = &[
    "nullable",
    "x-nullable",
    "readOnly",
    "writeOnly",
    "example",
    "discriminator",
    "xml",
    "externalDocs",
    "deprecated",
];

/// Why a schema could not be converted.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum SchemaError {
    /// A `$ref` names nothing in the document.
    #[error("$ref {reference} names nothing in the document")]
    Dangling {
        /// The reference as written.
        reference: String,
    },
    /// A `$ref` points outside the document (only `#/...` references are followed).
    #[error("$ref {reference} points outside the document")]
    External {
        /// The reference as written.
        reference: String,
    },
    /// References form a cycle, which inlining cannot express.
    #[error("$ref {reference} refers to itself through {through:?}")]
    Cycle {
        /// The reference that closed the cycle.
        reference: String,
        /// The references being inlined at that point.
        through: Vec<String>,
    },
}

/// Converts schema objects of one OpenAPI document, remembering each inlined reference.
#[derive(Debug)]
pub(super) struct Converter<'a> {
    doc: &'a Value,
    memo: &'a mut HashMap<(String, Direction), Value>,
    /// References being inlined (cycle detection).
    stack: Vec<String>,
}

impl<'a> Converter<'a> {
    /// A converter over `doc`, sharing the memo of earlier conversions of the same document.
    pub(super) fn new(
        doc: &'a Value,
        memo: &'a mut HashMap<(String, Direction), Value>,
    ) -> Converter<'a> {
        Converter {
            doc,
            memo,
            stack: Vec::new(),
        }
    }

    /// The draft 4 form of the OpenAPI schema object `s` for `dir`.
    ///
    /// # Errors
    /// A dangling, external or cyclic `$ref`.
    pub(super) fn convert(&mut self, s: &Value, dir: Direction) -> Result<Value, SchemaError> {
        let Some(obj) = s.as_object() else {
            return Ok(s.clone());
        };
        if let Some(r) = obj.get("$ref").and_then(Value::as_str) {
            return self.inline(r, dir);
        }
        let mut out = Map::new();
        for (k, v) in obj {
            if k.starts_with("x-") || DROPPED.contains(&k.as_str()) {
                continue;
            }
            let converted = match k.as_str() {
                "properties" => self.properties(v, dir)?,
                "required" => required_for(obj, v, dir, self.doc),
                "items" | "not" => self.convert(v, dir)?,
                "additionalProperties" if v.is_object() => self.convert(v, dir)?,
                "allOf" | "anyOf" | "oneOf" => Value::Array(
                    v.as_array()
                        .map(|a| a.iter().map(|b| self.convert(b, dir)).collect())
                        .transpose()?
                        .unwrap_or_default(),
                ),
                _ => v.clone(),
            };
            out.insert(k.clone(), converted);
        }
        if is_true(obj.get("nullable")) || is_true(obj.get("x-nullable")) {
            make_nullable(&mut out);
        }
        if out.contains_key("allOf") {
            merge_all_of(&mut out);
        }
        Ok(Value::Object(out))
    }

    fn properties(&mut self, v: &Value, dir: Direction) -> Result<Value, SchemaError> {
        let Some(props) = v.as_object() else {
            return Ok(v.clone());
        };
        let mut out = Map::new();
        for (name, p) in props {
            let schema = if refused(resolve(self.doc, p), dir) {
                serde_json::json!({"not": {}, "description": REFUSED_PROPERTY})
            } else {
                self.convert(p, dir)?
            };
            out.insert(name.clone(), schema);
        }
        Ok(Value::Object(out))
    }

    fn inline(&mut self, reference: &str, dir: Direction) -> Result<Value, SchemaError> {
        let key = (reference.to_owned(), dir);
        if let Some(v) = self.memo.get(&key) {
            return Ok(v.clone());
        }
        if self.stack.iter().any(|r| r == reference) {
            return Err(SchemaError::Cycle {
                reference: reference.to_owned(),
                through: self.stack.clone(),
            });
        }
        let target = lookup(self.doc, reference)?;
        self.stack.push(reference.to_owned());
        let converted = self.convert(target, dir);
        self.stack.pop();
        let converted = converted?;
        self.memo.insert(key, converted.clone());
        Ok(converted)
    }
}

/// The value a local reference (`#/components/...`) names.
///
/// # Errors
/// [`SchemaError::External`] for a reference not starting with `#`, [`SchemaError::Dangling`]
/// when nothing is there.
pub(super) fn lookup<'d>(doc: &'d Value, reference: &str) -> Result<&'d Value, SchemaError> {
    let pointer = reference
        .strip_prefix('#')
        .ok_or_else(|| SchemaError::External {
            reference: reference.to_owned(),
        })?;
    doc.pointer(pointer).ok_or_else(|| SchemaError::Dangling {
        reference: reference.to_owned(),
    })
}

/// `v`, or what its `$ref` chain names (itself when a reference dangles: the conversion reports
/// that).
pub(super) fn resolve<'d>(doc: &'d Value, mut v: &'d Value) -> &'d Value {
    for _ in 0..32 {
        match v.get("$ref").and_then(Value::as_str) {
            Some(r) => match lookup(doc, r) {
                Ok(t) => v = t,
                Err(_) => return v,
            },
            None => return v,
        }
    }
    v
}

fn is_true(v: Option<&Value>) -> bool {
    v.and_then(Value::as_bool).unwrap_or(false)
}

/// Whether a property schema may not appear in `dir` (`readOnly` in a request, `writeOnly` in a
/// response).
fn refused(p: &Value, dir: Direction) -> bool {
    match dir {
        Direction::Request => is_true(p.get("readOnly")),
        Direction::Response => is_true(p.get("writeOnly")),
    }
}

/// `required` without the properties that may not appear in `dir`.
fn required_for(obj: &Map<String, Value>, required: &Value, dir: Direction, doc: &Value) -> Value {
    let props = obj.get("properties").and_then(Value::as_object);
    let Some(names) = required.as_array() else {
        return required.clone();
    };
    Value::Array(
        names
            .iter()
            .filter(|n| {
                let p = n
                    .as_str()
                    .and_then(|n| props.and_then(|ps| ps.get(n)))
                    .map(|p| resolve(doc, p));
                !p.is_some_and(|p| refused(p, dir))
            })
            .cloned()
            .collect(),
    )
}

fn make_nullable(out: &mut Map<String, Value>) {
    if let Some(Value::String(t)) = out.get("type").cloned() {
        out.insert(
            "type".into(),
            Value::Array(vec![Value::String(t), Value::String("null".into())]),
        );
    }
    if let Some(Value::Array(e)) = out.get_mut("enum")
        && !e.contains(&Value::Null)
    {
        e.push(Value::Null);
    }
}

/// Keywords an `allOf` part may carry to be merged into its parent.
const MERGEABLE: &[&str] = &[
    "type",
    "properties",
    "required",
    "additionalProperties",
    "title",
    "description",
    "default",
];

fn mergeable(part: &Value) -> bool {
    part.as_object().is_some_and(|o| {
        o.keys().all(|k| MERGEABLE.contains(&k.as_str()))
            && o.get("type").is_none_or(|t| t == "object")
            && o.get("additionalProperties").is_none_or(|a| a.is_boolean())
    })
}

/// Merges the object parts of `out.allOf` into `out` (see the module doc); parts that are not
/// plain objects stay in `allOf`.
fn merge_all_of(out: &mut Map<String, Value>) {
    let Some(Value::Array(parts)) = out.remove("allOf") else {
        return;
    };
    let mut props = match out.remove("properties") {
        Some(Value::Object(p)) => p,
        _ => Map::new(),
    };
    let mut required: Vec<Value> = match out.remove("required") {
        Some(Value::Array(r)) => r,
        _ => Vec::new(),
    };
    let mut closed = out.get("additionalProperties") == Some(&Value::Bool(false));
    let mut rest = Vec::new();
    let mut any_merged = false;
    for part in parts {
        if !mergeable(&part) {
            rest.push(part);
            continue;
        }
        any_merged = true;
        let Value::Object(mut p) = part else {
            continue;
        };
        if let Some(Value::Object(ps)) = p.remove("properties") {
            for (name, schema) in ps {
                match props.remove(&name) {
                    Some(prev) if prev != schema => {
                        props.insert(name, serde_json::json!({"allOf": [prev, schema]}));
                    }
                    _ => {
                        props.insert(name, schema);
                    }
                }
            }
        }
        if let Some(Value::Array(r)) = p.remove("required") {
            for n in r {
                if !required.contains(&n) {
                    required.push(n);
                }
            }
        }
        closed |= p.get("additionalProperties") == Some(&Value::Bool(false));
    }
    if any_merged {
        out.entry("type").or_insert_with(|| "object".into());
    }
    if !props.is_empty() {
        out.insert("properties".into(), Value::Object(props));
    }
    if !required.is_empty() {
        out.insert("required".into(), Value::Array(required));
    }
    if closed {
        out.insert("additionalProperties".into(), Value::Bool(false));
    }
    if !rest.is_empty() {
        out.insert("allOf".into(), Value::Array(rest));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn convert(doc: &Value, s: &Value, dir: Direction) -> Value {
        let mut memo = HashMap::new();
        Converter::new(doc, &mut memo).convert(s, dir).unwrap()
    }

    #[test]
    fn nullable_adds_null_to_type_and_enum() {
        let doc = json!({});
        let s = json!({"type": "string", "enum": ["a"], "nullable": true, "x-go-name": "A"});
        assert_eq!(
            convert(&doc, &s, Direction::Request),
            json!({"type": ["string", "null"], "enum": ["a", null]})
        );
        let s = json!({"type": "integer", "x-nullable": true});
        assert_eq!(
            convert(&doc, &s, Direction::Request),
            json!({"type": ["integer", "null"]})
        );
    }

    #[test]
    fn all_of_with_closed_parent_merges_the_parts() {
        let doc = json!({"components": {"schemas": {
            "params": {"type": "object", "additionalProperties": false,
                       "properties": {"weight": {"type": "integer"}}},
        }}});
        let s = json!({"additionalProperties": false, "allOf": [
            {"$ref": "#/components/schemas/params"},
            {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}},
        ]});
        assert_eq!(
            convert(&doc, &s, Direction::Request),
            json!({"type": "object", "additionalProperties": false, "required": ["name"],
                   "properties": {"weight": {"type": "integer"}, "name": {"type": "string"}}})
        );
    }

    #[test]
    fn read_only_is_required_only_in_responses_and_refused_in_requests() {
        let doc = json!({});
        let s = json!({"type": "object", "required": ["id", "weight"], "properties": {
            "id": {"type": "integer", "readOnly": true}, "weight": {"type": "integer"}}});
        let req = convert(&doc, &s, Direction::Request);
        assert_eq!(req["required"], json!(["weight"]));
        assert_eq!(req["properties"]["id"]["not"], json!({}));
        let resp = convert(&doc, &s, Direction::Response);
        assert_eq!(resp["required"], json!(["id", "weight"]));
        assert_eq!(resp["properties"]["id"], json!({"type": "integer"}));
    }

    #[test]
    fn deep_references_are_followed_and_bad_ones_named() {
        let doc = json!({"components": {"schemas": {
            "a": {"properties": {"id": {"type": "string", "pattern": "^x"}}},
            "loop": {"properties": {"next": {"$ref": "#/components/schemas/loop"}}},
        }}});
        let s = json!({"$ref": "#/components/schemas/a/properties/id"});
        assert_eq!(
            convert(&doc, &s, Direction::Response),
            json!({"type": "string", "pattern": "^x"})
        );
        let mut memo = HashMap::new();
        let mut c = Converter::new(&doc, &mut memo);
        let err = c
            .convert(
                &json!({"$ref": "#/components/schemas/nope"}),
                Direction::Request,
            )
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "$ref #/components/schemas/nope names nothing in the document"
        );
        let err = c
            .convert(
                &json!({"$ref": "#/components/schemas/loop"}),
                Direction::Request,
            )
            .unwrap_err();
        assert!(matches!(err, SchemaError::Cycle { .. }), "{err}");
    }
}
