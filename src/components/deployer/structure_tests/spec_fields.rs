//! The server keywords are sent as fields of the spec's `server` model.

use std::collections::BTreeSet;

use super::super::structure::{SERVER_PARAMS, server_field};

/// The properties of a schema of the Data Plane API spec, `allOf` parts included.
fn props(spec: &serde_json::Value, name: &str) -> BTreeSet<String> {
    let schema = &spec["components"]["schemas"][name];
    let mut out: BTreeSet<String> = schema["properties"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    for part in schema["allOf"].as_array().into_iter().flatten() {
        if let Some(r) = part["$ref"].as_str() {
            out.extend(props(spec, r.rsplit('/').next().unwrap_or_default()));
        }
        if let Some(m) = part["properties"].as_object() {
            out.extend(m.keys().cloned());
        }
    }
    out
}

/// Every field a server keyword is sent as is a field of the spec's `server` model (the
/// real API drops an unknown field silently: `check_ssl` for `check-ssl` was never applied).
#[test]
#[allow(clippy::unwrap_used)]
fn server_fields_are_the_specs() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/reference/dataplaneapi/v32-spec.json"
    );
    let spec: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let server = props(&spec, "server");
    assert!(server.contains("weight"), "{server:?}");
    let mut unknown = Vec::new();
    for kw in SERVER_PARAMS {
        let Some(field) = server_field(kw) else {
            continue;
        };
        if !server.contains(field) {
            unknown.push(format!("{kw} -> {field}"));
        }
    }
    assert!(
        unknown.is_empty(),
        "not in the spec's server model: {unknown:?}"
    );
}
