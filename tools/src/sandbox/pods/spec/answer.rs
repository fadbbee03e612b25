//! The answer's side of an exchange: status, headers and body against the operation's
//! responses, and refusals of fields the spec defines.

use serde_json::Value;

use super::Side;
use super::allow;
use super::check::{Ctx, SeenAnswer, body_instance, declared, media_type, typed};
use super::document::token;
use super::schema::Direction;

/// Response headers whose presence is checked where the spec declares them (the spec marks no
/// header `required`; these two a real API sends every time it declares them:
/// observed-v3.4.md). Others declared (`Configuration-Checksum`, `Cluster-Version`) are checked
/// against their schema when present.
const PRESENT_WHEN_DECLARED: &[&str] = &["Reload-ID", "Configuration-Version"];

/// A 4xx answer that calls a field of a spec-valid request body unknown: the spec defines it, and
/// a real API does not refuse even unknown fields (it drops them silently: observed-v3.4.md, "any
/// object PUT with an unknown JSON field"). A field the stand-in cannot apply is a refusal naming
/// it, not "unknown".
pub(super) fn check_refused_field(cx: &mut Ctx<'_>, a: &SeenAnswer) {
    if !(400..500).contains(&a.status) {
        return;
    }
    let Ok(body) = serde_json::from_slice::<Value>(&cx.req.body) else {
        return;
    };
    let message = serde_json::from_slice::<Value>(&a.body)
        .ok()
        .and_then(|v| v.get("message").and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_else(|| String::from_utf8_lossy(&a.body).into_owned());
    let Some(name) = unknown_field_named(&message) else {
        return;
    };
    if let Some(at) = find_key(&body, name, "/body") {
        cx.violation(
            Side::Response,
            at,
            format!(
                "the answer refuses a field the spec defines ({message:?}); the real API \
                 takes it (and drops even unknown fields silently)"
            ),
        );
    }
}

/// The field an "unknown field" message names: `x: unknown field` (the stand-in's form),
/// ``unknown field `x` `` (serde's), `unknown field "x"`.
fn unknown_field_named(message: &str) -> Option<&str> {
    let is_name = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    if let Some(i) = message.find(": unknown field") {
        let start = message[..i]
            .rfind(|c: char| !is_name(c))
            .map_or(0, |j| j + 1);
        return Some(&message[start..i]).filter(|n| !n.is_empty());
    }
    let rest = message.split_once("unknown field")?.1;
    let rest = rest.trim_start().trim_start_matches(['`', '"', '\'']);
    let end = rest.find(|c: char| !is_name(c)).unwrap_or(rest.len());
    Some(&rest[..end]).filter(|n| !n.is_empty())
}

/// The JSON pointer (below `at`) of the first key `name` in `v`, depth first.
fn find_key(v: &Value, name: &str, at: &str) -> Option<String> {
    match v {
        Value::Object(m) => {
            if m.contains_key(name) {
                return Some(format!("{at}/{}", token(name)));
            }
            m.iter()
                .find_map(|(k, c)| find_key(c, name, &format!("{at}/{}", token(k))))
        }
        Value::Array(a) => a
            .iter()
            .enumerate()
            .find_map(|(i, c)| find_key(c, name, &format!("{at}/{i}"))),
        _ => None,
    }
}

pub(super) fn check_answer(
    cx: &mut Ctx<'_>,
    op: &Value,
    op_ptr: &str,
    query: &[(String, String)],
    a: &SeenAnswer,
) {
    let c = cx.c;
    let no_responses = serde_json::Map::new();
    let responses = op
        .get("responses")
        .and_then(Value::as_object)
        .unwrap_or(&no_responses);
    let status = a.status.to_string();
    let range = format!("{}XX", a.status / 100);
    let listed = |k: &str| responses.contains_key(k);
    let key = if listed(&status) {
        status.clone()
    } else if listed(&range) {
        range
    } else if listed("default") && a.status >= 400 {
        "default".to_owned()
    } else {
        let mut keys: Vec<&str> = responses.keys().map(String::as_str).collect();
        keys.sort_unstable();
        let why = if listed("default") {
            "; `default` covers errors (4xx, 5xx) only"
        } else {
            ""
        };
        cx.violation(
            Side::Response,
            "/status",
            format!(
                "status {} is not listed (listed: {}){why}",
                a.status,
                keys.join(", ")
            ),
        );
        return;
    };
    let mut resp_ptr = format!("{op_ptr}/responses/{}", token(&key));
    let raw = &responses[&key];
    if let Some(r) = raw.get("$ref").and_then(Value::as_str) {
        resp_ptr = r.trim_start_matches('#').to_owned();
    }
    let resp = c.resolve(raw);
    check_headers(cx, op_ptr, resp, &resp_ptr, query, a);
    let before = cx.out.violations.len();
    check_answer_body(cx, resp, &resp_ptr, &key, a);
    if key == "default" && cx.out.violations.len() > before {
        // Not listed, and not the error `default` stands for: one violation, of the status.
        let problems: Vec<String> = cx
            .out
            .violations
            .drain(before..)
            .map(|v| format!("{} {}", v.field, v.message))
            .collect();
        let mut keys: Vec<&str> = responses.keys().map(String::as_str).collect();
        keys.sort_unstable();
        cx.violation(
            Side::Response,
            "/status",
            format!(
                "status {} is not listed (listed: {}), and `default` covers only an error with \
                 the spec's error body: {}",
                a.status,
                keys.join(", "),
                problems.join("; ")
            ),
        );
    }
}

/// The answer's body against the response object `resp` (at `resp_ptr`) chosen by `key`.
fn check_answer_body(cx: &mut Ctx<'_>, resp: &Value, resp_ptr: &str, key: &str, a: &SeenAnswer) {
    let no_content = serde_json::Map::new();
    let content = resp
        .get("content")
        .and_then(Value::as_object)
        .unwrap_or(&no_content);
    if content.is_empty() {
        if !a.body.is_empty() {
            cx.violation(
                Side::Response,
                "/body",
                format!("a body, where the spec declares none for {key}"),
            );
        }
        return;
    }
    let ct_header = a
        .headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let media = ct_header.as_deref().map(media_type).unwrap_or_default();
    let Some(decl) = declared(content, &media) else {
        if a.status >= 400 && media == "application/json" {
            // allow::JSON_ERRORS: the error body, held to the spec's own `error` schema.
            let before = cx.out.violations.len();
            if let Some(instance) = body_instance(cx, Side::Response, &media, None, &a.body) {
                cx.validate(
                    Side::Response,
                    "/components/schemas/error",
                    Direction::Response,
                    "/body",
                    &instance,
                );
            }
            if cx.out.violations.len() == before {
                cx.out.allowed.push(&allow::JSON_ERRORS);
            }
            return;
        }
        cx.violation(
            Side::Response,
            "/headers/content-type",
            format!(
                "{} is not a content type the spec declares for {key} ({})",
                if media.is_empty() {
                    "no Content-Type"
                } else {
                    &media
                },
                content.keys().cloned().collect::<Vec<_>>().join(", ")
            ),
        );
        return;
    };
    let schema_ptr = format!("{resp_ptr}/content/{}/schema", token(decl));
    if cx.c.doc().pointer(&schema_ptr).is_none() {
        return;
    }
    if let Some(instance) = body_instance(cx, Side::Response, &media, ct_header.as_deref(), &a.body)
    {
        cx.validate(
            Side::Response,
            &schema_ptr,
            Direction::Response,
            "/body",
            &instance,
        );
    }
}

fn check_headers(
    cx: &mut Ctx<'_>,
    op_ptr: &str,
    resp: &Value,
    resp_ptr: &str,
    query: &[(String, String)],
    a: &SeenAnswer,
) {
    let Some(headers) = resp.get("headers").and_then(Value::as_object) else {
        return;
    };
    let in_transaction = query.iter().any(|(k, _)| k == "transaction_id");
    let only_validate = op_ptr.ends_with("~1configuration~1raw/post")
        && query
            .iter()
            .any(|(k, v)| k == "only_validate" && v == "true");
    for (name, decl) in headers {
        let field = format!("/headers/{}", token(name));
        match a.headers.get(name.as_str()).map(|v| v.to_str()) {
            None => {
                if !PRESENT_WHEN_DECLARED
                    .iter()
                    .any(|h| h.eq_ignore_ascii_case(name))
                {
                    continue;
                }
                if name.eq_ignore_ascii_case("Reload-ID") && a.status == 202 && in_transaction {
                    cx.out.allowed.push(&allow::NO_RELOAD_ID_IN_TRANSACTION);
                    continue;
                }
                if name.eq_ignore_ascii_case("Reload-ID") && a.status == 202 && only_validate {
                    cx.out.allowed.push(&allow::ONLY_VALIDATE_202);
                    continue;
                }
                cx.violation(
                    Side::Response,
                    field,
                    format!(
                        "the {name} header the spec declares for {} is missing",
                        a.status
                    ),
                );
            }
            Some(Err(_)) => cx.violation(Side::Response, field, "not a visible-ASCII header value"),
            Some(Ok(text)) => {
                let decl = cx.c.resolve(decl);
                let Some(schema) = decl.get("schema") else {
                    continue;
                };
                let schema_ptr = format!("{resp_ptr}/headers/{}/schema", token(name));
                if cx.c.doc().pointer(&schema_ptr).is_none() {
                    continue;
                }
                match typed(cx.c, schema, text) {
                    Some(v) => {
                        cx.validate(Side::Response, &schema_ptr, Direction::Response, &field, &v)
                    }
                    None => cx.violation(
                        Side::Response,
                        field,
                        format!("{text:?} does not parse as its schema's type"),
                    ),
                }
            }
        }
    }
}
