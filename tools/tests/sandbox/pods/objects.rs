//! The spec's objects (issue 24 item 3): every field the published spec defines for an object
//! the stand-in serves is accepted or refused 501 naming it, never a 400 "unknown field"; the
//! `global` and `defaults` sections are served; the upstream Go deployer's `capture_id` rule
//! goes through; paths the spec lists and the stand-in does not serve answer 501.

use std::collections::BTreeMap;

use haptic_tools::sandbox::pods::dataplane::{SpecModel, spec_extract};
use serde_json::{Map, Value, json};

use super::*;

/// The models and operations of `v32-spec.json`, derived again as `spec_models.json` holds
/// them (allOf and $ref resolved; field type letters; required; enums; rule types).
fn from_spec() -> (BTreeMap<String, SpecModel>, Vec<String>) {
    let spec: Value = serde_json::from_str(&read(&format!("{REFERENCE}/v32-spec.json"))).unwrap();
    let schemas = &spec["components"]["schemas"];
    fn walk(schemas: &Value, m: &Value, props: &mut Map<String, Value>, req: &mut Vec<String>) {
        if let Some(r) = m["$ref"].as_str() {
            let name = r.rsplit('/').next().unwrap();
            return walk(schemas, &schemas[name], props, req);
        }
        for a in m["allOf"].as_array().into_iter().flatten() {
            walk(schemas, a, props, req);
        }
        req.extend(
            m["required"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|r| r.as_str().unwrap().to_owned()),
        );
        for (k, v) in m["properties"].as_object().into_iter().flatten() {
            props.insert(k.clone(), v.clone());
        }
    }
    let served = spec_extract().models.keys().cloned().collect::<Vec<_>>();
    let mut models = BTreeMap::new();
    for name in served {
        let (mut props, mut required) = (Map::new(), Vec::new());
        walk(schemas, &schemas[&name], &mut props, &mut required);
        required.sort();
        required.dedup();
        let letter = |v: &Value| -> String {
            // A `$ref` has its target's type (`monitor_uri` is a string, `acl_list` an array).
            let v = match v["$ref"].as_str() {
                Some(r) => &schemas[r.rsplit('/').next().unwrap()],
                None => v,
            };
            if v.get("allOf").is_some() {
                return "o".into();
            }
            match v["type"].as_str() {
                Some("string") => "s",
                Some("integer" | "number") => "i",
                Some("boolean") => "b",
                Some("array") => "a",
                _ => "o",
            }
            .into()
        };
        let m = SpecModel {
            fields: props.iter().map(|(k, v)| (k.clone(), letter(v))).collect(),
            required,
            enums: props
                .iter()
                .filter_map(|(k, v)| Some((k.clone(), v["enum"].as_array()?.clone())))
                .collect(),
            types_of: props
                .iter()
                .filter_map(|(k, v)| {
                    let t = &v["x-dependency"]["type"]["value"];
                    let types = match t {
                        Value::String(s) => vec![s.clone()],
                        Value::Array(a) => a
                            .iter()
                            .filter_map(|x| x.as_str().map(str::to_owned))
                            .collect(),
                        _ => return None,
                    };
                    Some((k.clone(), types))
                })
                .collect(),
        };
        models.insert(name, m);
    }
    let mut ops = Vec::new();
    for (path, item) in spec["paths"].as_object().unwrap() {
        for m in ["get", "put", "post", "delete", "patch"] {
            if item.get(m).is_some() {
                ops.push(format!("{} {path}", m.to_uppercase()));
            }
        }
    }
    ops.sort();
    (models, ops)
}

/// `spec_models.json` is the published spec's (regenerate it from `v32-spec.json` when this
/// fails: the message names the model that differs).
#[test]
fn spec_models_are_the_published_ones() {
    let (models, ops) = from_spec();
    for (name, m) in &models {
        assert_eq!(
            &spec_extract().models[name],
            m,
            "model {name} differs from v32-spec.json"
        );
    }
    assert_eq!(spec_extract().operations, ops);
}

/// The spec's schemas (`components/schemas` of `v32-spec.json`).
fn spec_schemas() -> Value {
    let spec: Value = serde_json::from_str(&read(&format!("{REFERENCE}/v32-spec.json"))).unwrap();
    spec["components"]["schemas"].clone()
}

/// The properties of model `name` (`$ref` and `allOf` resolved), each with its schema.
fn spec_properties(schemas: &Value, name: &str) -> Map<String, Value> {
    fn walk(schemas: &Value, m: &Value, props: &mut Map<String, Value>) {
        if let Some(r) = m["$ref"].as_str() {
            return walk(schemas, &schemas[r.rsplit('/').next().unwrap()], props);
        }
        for a in m["allOf"].as_array().into_iter().flatten() {
            walk(schemas, a, props);
        }
        for (k, v) in m["properties"].as_object().into_iter().flatten() {
            props.insert(k.clone(), v.clone());
        }
    }
    let mut props = Map::new();
    walk(schemas, &schemas[name], &mut props);
    props
}

/// A value the spec's schema `s` takes, HAProxy may or may not: the first enum value; a
/// string matching the pattern; a number at its minimum (1 when it has none, within the
/// maximum); an object with its required properties (or, with none, its first writable one);
/// a map of one entry; an array of one item. The pod's validator holds each request of the
/// sweep to the spec, so a sample off the spec fails the test naming the field.
fn spec_sample(schemas: &Value, s: &Value) -> Value {
    if let Some(r) = s["$ref"].as_str() {
        return spec_sample(schemas, &schemas[r.rsplit('/').next().unwrap()]);
    }
    if let Some(parts) = s["allOf"].as_array() {
        let mut merged = Map::new();
        for p in parts {
            if let Value::Object(o) = spec_sample(schemas, p) {
                merged.extend(o);
            }
        }
        let mut own = s.clone();
        own.as_object_mut().unwrap().remove("allOf");
        if let Value::Object(o) = spec_sample(schemas, &own) {
            merged.extend(o);
        }
        return Value::Object(merged);
    }
    if let Some(e) = s["enum"]
        .as_array()
        .and_then(|e| e.iter().find(|v| !v.is_null()))
    {
        return e.clone();
    }
    match s["type"].as_str() {
        Some("string") => {
            let Some(pattern) = s["pattern"].as_str() else {
                return json!("x");
            };
            let re = regex::Regex::new(pattern).unwrap();
            ["x", "1", "a@b", "allow-dup-ip"]
                .into_iter()
                .find(|c| re.is_match(c))
                .map(|c| json!(c))
                .unwrap_or_else(|| panic!("no sample string matches {pattern:?}: add one"))
        }
        Some("integer" | "number") => {
            let mut n = s["minimum"].as_i64().unwrap_or(1);
            if let Some(max) = s["maximum"].as_i64() {
                n = n.min(max);
            }
            json!(n)
        }
        Some("boolean") => json!(true),
        Some("array") => json!([spec_sample(schemas, &s["items"])]),
        _ => {
            let props = s["properties"].as_object();
            let required: Vec<&str> = s["required"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            if let Some(props) = props {
                let writable = |(_, v): &(&String, &Value)| v["readOnly"] != true;
                let chosen: Vec<(&String, &Value)> = if required.is_empty() {
                    props.iter().filter(writable).take(1).collect()
                } else {
                    props
                        .iter()
                        .filter(|(k, _)| required.contains(&k.as_str()))
                        .collect()
                };
                return Value::Object(
                    chosen
                        .into_iter()
                        .map(|(k, v)| (k.clone(), spec_sample(schemas, v)))
                        .collect(),
                );
            }
            match &s["additionalProperties"] {
                entry @ Value::Object(_) => json!({"x": spec_sample(schemas, entry)}),
                _ => json!({}),
            }
        }
    }
}

/// Every spec field of every object served: taken (200-202) or refused 501 naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spec_fields_are_taken_or_refused_501_never_400() {
    let (sb, dp) = unvalidated_stand_in().await;
    let with_every_kind = format!(
        "{}    acl is_x path /x\n    use_backend be if is_x\n    http-response set-header X y\n\
         backend be\n    server s1 127.0.0.1:1\n    server-template tpl 2 127.0.0.1:1\n",
        render("01-basic", "haproxy.cfg")
    );
    assert_eq!(dp.push(&with_every_kind, "").await.status, 202);
    let models = &spec_extract().models;
    let schemas = spec_schemas();
    let cases: [(&str, &str, Value); 11] = [
        (
            "server",
            "configuration/backends/be/servers/s1",
            json!({"name": "s1", "address": "127.0.0.1"}),
        ),
        (
            "bind",
            "configuration/frontends/fe_http/binds/b",
            json!({"name": "b", "address": "*", "port": 81}),
        ),
        (
            "backend",
            "configuration/backends/be",
            json!({"name": "be"}),
        ),
        (
            "frontend",
            "configuration/frontends/fe_http",
            json!({"name": "fe_http"}),
        ),
        (
            "defaults",
            "configuration/defaults/unnamed_defaults_1",
            json!({"name": "unnamed_defaults_1"}),
        ),
        ("global", "configuration/global", json!({})),
        (
            "http_request_rule",
            "configuration/frontends/fe_http/http_request_rules/0",
            json!({"type": "set-header", "hdr_name": "X", "hdr_format": "y"}),
        ),
        (
            "http_response_rule",
            "configuration/frontends/fe_http/http_response_rules/0",
            json!({"type": "set-header", "hdr_name": "X", "hdr_format": "y"}),
        ),
        (
            "server_template",
            "configuration/backends/be/server_templates/tpl",
            json!({"prefix": "tpl", "num_or_range": "2", "fqdn": "127.0.0.1"}),
        ),
        (
            "acl",
            "configuration/frontends/fe_http/acls/0",
            json!({"acl_name": "is_x", "criterion": "path"}),
        ),
        (
            "backend_switching_rule",
            "configuration/frontends/fe_http/backend_switching_rules/0",
            json!({"name": "be"}),
        ),
    ];
    let (mut taken, mut refused) = (0, 0);
    for (model, path, base) in cases {
        let method = if model == "bind" { "POST" } else { "PUT" };
        let props = spec_properties(&schemas, model);
        for field in models[model].fields.keys() {
            if base.get(field).is_some() || field.ends_with("_list") {
                continue;
            }
            let mut body = base.clone();
            body[field] = if field == "runtime_apis" {
                json!([{"address": "/var/run/x.sock"}])
            } else {
                spec_sample(&schemas, &props[field])
            };
            if field == "cond" {
                body["cond_test"] = json!("TRUE");
            }
            let v = dp.version().await;
            let p = if method == "POST" {
                format!("{}?version={v}", path.rsplit_once('/').unwrap().0)
            } else {
                format!("{path}?version={v}")
            };
            let r = dp.call(method, &p, Body::Json(body)).await;
            match r.status {
                200..=202 => taken += 1,
                501 => {
                    assert!(r.message().contains(field), "{model}.{field}: {}", r.text);
                    refused += 1;
                }
                s => panic!("{model}.{field}: {s} {}", r.text),
            }
            if method == "POST" && r.status < 300 {
                dp.delete(&format!("{path}?version={}", dp.version().await))
                    .await;
            }
        }
    }
    println!("spec fields: {taken} taken, {refused} refused 501");
    assert!(
        taken > 150 && refused > 0,
        "taken {taken}, refused {refused}"
    );
    sb.shutdown().await;
}

/// `GET`/`PUT .../configuration/global` and `.../configuration/defaults[/{name}]` in the API's
/// layout (the upstream Go deployer's `PUT global` answered 405 before).
#[tokio::test]
async fn spec_global_and_defaults_sections_are_served() {
    let (l, dp) = real_pod().await;
    let global = dp.get("configuration/global").await;
    assert_eq!(global.status, 200);
    assert_eq!(
        global.json()["runtime_apis"],
        json!([{"address": "/var/run/haproxy.sock", "mode": "600", "level": "admin"}])
    );
    let mut g = global.json();
    g["performance_options"] = json!({"maxconn": 4000});
    let r = dp
        .at_version("PUT", "configuration/global", Body::Json(g))
        .await;
    dp.assert_reloaded(&r).await;
    let raw = dp.raw().await;
    assert!(raw.contains("\nglobal\n  maxconn 4000\n"), "{raw}");
    assert!(
        raw.contains("  log stdout format raw local0\n"),
        "lines it does not model are kept: {raw}"
    );
    let defaults = dp.get("configuration/defaults").await.json();
    assert_eq!(defaults[0]["name"], "unnamed_defaults_1");
    assert_eq!(defaults[0]["connect_timeout"], 1000);
    let body = json!({"name": "tuned", "mode": "http", "client_timeout": 7000, "server_timeout": 7000,
                      "connect_timeout": 2000, "dontlognull": "enabled"});
    let r = dp
        .at_version("POST", "configuration/defaults", Body::Json(body))
        .await;
    dp.assert_reloaded(&r).await;
    let tuned = dp.get("configuration/defaults/tuned").await.json();
    assert_eq!(
        (
            tuned["client_timeout"].as_u64(),
            tuned["dontlognull"].as_str()
        ),
        (Some(7000), Some("enabled"))
    );
    let r = dp
        .at_version(
            "DELETE",
            "configuration/defaults/tuned?force_reload=true",
            Body::None,
        )
        .await;
    assert_eq!(r.status, 204, "{}", r.text);
    assert_eq!(curl(&l.pod, "http", 80, None, "/"), "render 01-basic");
}

/// The upstream Go deployer's `PUT .../http_request_rules/0` with `capture_id` (400 "unknown
/// field" before): taken, and the field of another rule type ignored. Its body also carries
/// `index`, which no v3 spec defines (the index is in the path): off the spec on purpose, and
/// dropped as the real API drops unknown fields.
#[tokio::test]
async fn spec_go_deployer_rule_with_capture_id_is_taken() {
    let (l, dp) = real_pod().await;
    let rule = json!({"type": "return", "return_status_code": 200, "return_content_type": "text/plain",
                      "return_content_format": "string", "return_content": "\"go deployer\"",
                      "capture_id": 0, "capture_len": 0, "index": 0});
    let v = dp.version().await;
    let r = dp
        .call_off_spec(
            "PUT",
            &format!("configuration/frontends/fe_http/http_request_rules/0?version={v}"),
            Body::Json(rule),
            &[("replaceHTTPRequestRuleFrontend", "/body/index")],
        )
        .await;
    dp.assert_reloaded(&r).await;
    assert_eq!(curl(&l.pod, "http", 80, None, "/"), "go deployer");
    let capture = json!({"type": "capture", "capture_sample": "req.hdr(host)", "capture_len": 32});
    let r = dp
        .at_version(
            "POST",
            "configuration/frontends/fe_http/http_request_rules/0",
            Body::Json(capture),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.text);
    assert!(
        dp.raw()
            .await
            .contains("  http-request capture req.hdr(host) len 32\n")
    );
}

/// A path the spec lists and the stand-in does not serve: 501 naming the operation; a path
/// the spec does not list: 404.
#[tokio::test]
async fn spec_operations_not_served_are_501_unknown_paths_404() {
    let (_l, dp) = stand_in_pod().await;
    let r = dp
        .get("configuration/frontends/fe_http/tcp_request_rules")
        .await;
    assert_eq!(r.status, 501, "{}", r.text);
    assert!(
        r.message().contains(
            "GET /services/haproxy/configuration/frontends/{parent_name}/tcp_request_rules"
        ),
        "{}",
        r.text
    );
    assert_eq!(dp.get("configuration/global/log_targets").await.status, 501);
    assert_eq!(dp.get("configuration/resolvers").await.status, 501);
    let r = dp
        .call_off_spec(
            "GET",
            "configuration/no_such_things",
            Body::None,
            &[(NO_OPERATION, "/path")],
        )
        .await;
    assert_eq!(r.status, 404, "{}", r.text);
}

/// The operations the README's table names are the spec's.
#[test]
fn readme_table_names_spec_operations() {
    let readme = read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/src/sandbox/pods/README.md"
    ));
    let ops = &spec_extract().operations;
    let mut named = 0;
    for line in readme.lines().filter(|l| l.starts_with("| `")) {
        let op = line.trim_start_matches("| `").split('`').next().unwrap();
        if op.starts_with(['G', 'P', 'D']) && op.contains(" /") {
            assert!(
                ops.iter().any(|o| o == op),
                "README names {op}, which v32-spec.json does not list"
            );
            named += 1;
        }
    }
    assert!(named >= 30, "only {named} operations in the README's table");
}
