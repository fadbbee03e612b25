//! One exchange (a request and the answer given, if any) held to one [`Contract`].

use axum::http::HeaderMap;
use serde_json::Value;

use super::allow::Allowance;
use super::answer;
use super::document::{Contract, token};
use super::schema::{Direction, REFUSED_PROPERTY};
use super::{Operation, Side, Violation};

/// A request as a pod received it (body buffered).
#[derive(Debug, Clone)]
pub struct SeenRequest {
    /// `GET`, `PUT`, ...
    pub method: String,
    /// The path, percent-encoded as sent.
    pub path: String,
    /// The raw query string (without `?`).
    pub query: String,
    /// The `Content-Type` header, if any.
    pub content_type: Option<String>,
    /// The body.
    pub body: axum::body::Bytes,
}

/// An answer as a pod gave it (body buffered).
#[derive(Debug, Clone)]
pub struct SeenAnswer {
    /// The HTTP status.
    pub status: u16,
    /// The headers.
    pub headers: HeaderMap,
    /// The body.
    pub body: axum::body::Bytes,
}

/// What one check found: violations and the allowances used.
#[derive(Debug, Default)]
pub(super) struct Findings {
    pub(super) violations: Vec<Violation>,
    pub(super) allowed: Vec<&'static Allowance>,
}

/// One exchange being checked: the document, the request, the answer's status, the operation
/// matched, and what was found so far.
pub(super) struct Ctx<'a> {
    pub(super) c: &'a Contract,
    pub(super) req: &'a SeenRequest,
    status: Option<u16>,
    op: Option<Operation>,
    pub(super) out: &'a mut Findings,
}

impl Ctx<'_> {
    /// Records a violation of this exchange.
    pub(super) fn violation(
        &mut self,
        side: Side,
        field: impl Into<String>,
        message: impl Into<String>,
    ) {
        self.out.violations.push(Violation {
            pod: String::new(),
            side,
            spec: self.c.version(),
            operation: self.op.clone(),
            request: request_line(self.req),
            status: self.status,
            field: field.into(),
            message: message.into(),
        });
    }

    /// Validates `instance` against the schema at `pointer`; violations at `field` + the
    /// instance's JSON pointer.
    pub(super) fn validate(
        &mut self,
        side: Side,
        pointer: &str,
        dir: Direction,
        field: &str,
        instance: &Value,
    ) {
        let compiled = self.c.validator(pointer, dir);
        let v = match &*compiled {
            Ok(v) => v,
            Err(e) => {
                self.violation(
                    Side::Validator,
                    field,
                    format!("the validator cannot use the spec here: {e}"),
                );
                return;
            }
        };
        let found: Vec<(String, String)> = v
            .iter_errors(instance)
            .flat_map(|e| describe(field, &e))
            .collect();
        for (at, message) in found {
            self.violation(side, at, message);
        }
    }
}

/// The fields and messages of one schema error: `additionalProperties` (one per property not
/// defined) and `required` name the property itself.
fn describe(field: &str, e: &jsonschema::ValidationError<'_>) -> Vec<(String, String)> {
    use jsonschema::error::ValidationErrorKind as K;
    let at = format!("{field}{}", e.instance_path().as_str());
    match e.kind() {
        K::AdditionalProperties { unexpected } => unexpected
            .iter()
            .map(|p| {
                (
                    format!("{at}/{}", token(p)),
                    "a property the spec's schema does not define (additionalProperties: false)"
                        .into(),
                )
            })
            .collect(),
        K::Required { property } => vec![(
            format!("{at}/{}", token(property.as_str().unwrap_or_default())),
            "a required property is missing".into(),
        )],
        K::Not { schema } if schema.get("description") == Some(&Value::from(REFUSED_PROPERTY)) => {
            vec![(
                at,
                "a readOnly property (the API ignores it in a request)".into(),
            )]
        }
        _ => vec![(at, e.to_string())],
    }
}

fn request_line(req: &SeenRequest) -> String {
    if req.query.is_empty() {
        format!("{} {}", req.method, req.path)
    } else {
        format!("{} {}?{}", req.method, req.path, req.query)
    }
}

/// The media type of a `Content-Type` value, lower-case, without parameters.
pub(super) fn media_type(ct: &str) -> String {
    ct.split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// The declared media type (a key of a `content` object) that `actual` falls under.
pub(super) fn declared<'a>(
    content: &'a serde_json::Map<String, Value>,
    actual: &str,
) -> Option<&'a str> {
    content.keys().map(String::as_str).find(|k| {
        let k = media_type(k);
        k == actual
            || k == "*/*"
            || k.strip_suffix("/*")
                .is_some_and(|major| actual.split('/').next() == Some(major))
    })
}

/// Checks `req` (and `answer`, when one was given) against `c`.
pub(super) fn check(c: &Contract, req: &SeenRequest, answer: Option<&SeenAnswer>) -> Findings {
    let mut out = Findings::default();
    let mut cx = Ctx {
        c,
        req,
        status: answer.map(|a| a.status),
        op: None,
        out: &mut out,
    };
    let Some(rel) = req
        .path
        .strip_prefix(c.base())
        .filter(|r| r.starts_with('/'))
    else {
        cx.violation(
            Side::Request,
            "/path",
            format!("outside the API's base path {}", c.base()),
        );
        return out;
    };
    let Some(matched) = c.match_path(rel) else {
        cx.violation(
            Side::Request,
            "/path",
            "no path of the spec matches (unknown path)",
        );
        return out;
    };
    let method = req.method.to_ascii_lowercase();
    let item_ptr = format!("/paths/{}", token(&matched.template));
    let empty = Value::Null;
    let item = c.path_item(&matched.template).unwrap_or(&empty);
    let Some(op) = item.get(&method) else {
        let mut has: Vec<String> = item
            .as_object()
            .map(|o| {
                o.keys()
                    .filter(|k| {
                        ["get", "put", "post", "delete", "patch", "head", "options"]
                            .contains(&k.as_str())
                    })
                    .map(|k| k.to_ascii_uppercase())
                    .collect()
            })
            .unwrap_or_default();
        has.sort();
        cx.op = Some(Operation {
            id: None,
            method: req.method.clone(),
            template: matched.template.clone(),
        });
        cx.violation(
            Side::Request,
            "/method",
            format!(
                "the spec has no {} for this path (it has {})",
                req.method,
                has.join(", ")
            ),
        );
        return out;
    };
    let op_ptr = format!("{item_ptr}/{method}");
    cx.op = Some(Operation {
        id: op
            .get("operationId")
            .and_then(Value::as_str)
            .map(str::to_owned),
        method: req.method.to_ascii_uppercase(),
        template: matched.template.clone(),
    });
    let params = parameters(c, &item_ptr, &op_ptr);
    let query = parse_query(&req.query);
    check_parameters(&mut cx, &params, &matched.params, &query);
    let before = cx.out.violations.len();
    check_request_body(&mut cx, op, &op_ptr);
    let body_valid = cx.out.violations.len() == before;
    if let Some(a) = answer {
        answer::check_answer(&mut cx, op, &op_ptr, &query, a);
        if body_valid {
            answer::check_refused_field(&mut cx, a);
        }
    }
    out
}

/// A parameter of an operation: where its object is (after `$ref`s) and its location and name.
struct Param {
    pointer: String,
    location: String,
    name: String,
    required: bool,
}

/// The operation's parameters: the path item's, overridden by the operation's (same name and
/// location), `$ref`s followed.
fn parameters(c: &Contract, item_ptr: &str, op_ptr: &str) -> Vec<Param> {
    let mut out: Vec<Param> = Vec::new();
    for list_ptr in [
        format!("{item_ptr}/parameters"),
        format!("{op_ptr}/parameters"),
    ] {
        let Some(list) = c.doc().pointer(&list_ptr).and_then(Value::as_array) else {
            continue;
        };
        for (i, p) in list.iter().enumerate() {
            let mut pointer = format!("{list_ptr}/{i}");
            let mut v = p;
            while let Some(r) = v.get("$ref").and_then(Value::as_str) {
                let Some(t) = r.strip_prefix('#').and_then(|ptr| c.doc().pointer(ptr)) else {
                    break;
                };
                pointer = r.trim_start_matches('#').to_owned();
                v = t;
            }
            let location = v.get("in").and_then(Value::as_str).unwrap_or("").to_owned();
            let name = v
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            let required = v.get("required").and_then(Value::as_bool).unwrap_or(false);
            out.retain(|q| !(q.location == location && q.name == name));
            out.push(Param {
                pointer,
                location,
                name,
                required,
            });
        }
    }
    out
}

fn parse_query(q: &str) -> Vec<(String, String)> {
    form_urlencoded::parse(q.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// A parameter's text as the JSON value its schema types it as (`None` when it does not parse).
pub(super) fn typed(c: &Contract, schema: &Value, text: &str) -> Option<Value> {
    let schema = c.resolve(schema);
    match schema.get("type").and_then(Value::as_str) {
        Some("integer") => text.parse::<i64>().ok().map(Value::from),
        Some("number") => text.parse::<f64>().ok().map(Value::from),
        Some("boolean") => match text {
            "true" => Some(Value::Bool(true)),
            "false" => Some(Value::Bool(false)),
            _ => None,
        },
        Some("array") => Some(Value::Array(
            text.split(',')
                .map(|t| {
                    schema
                        .get("items")
                        .and_then(|i| typed(c, i, t))
                        .unwrap_or_else(|| Value::from(t))
                })
                .collect(),
        )),
        _ => Some(Value::from(text)),
    }
}

fn check_parameters(
    cx: &mut Ctx<'_>,
    params: &[Param],
    path_values: &[(String, String)],
    query: &[(String, String)],
) {
    let check_one = |cx: &mut Ctx<'_>, p: &Param, text: &str, field: String| {
        let schema_ptr = format!("{}/schema", p.pointer);
        let Some(schema) = cx.c.doc().pointer(&schema_ptr) else {
            return;
        };
        let want =
            cx.c.resolve(schema)
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or("string")
                .to_owned();
        match typed(cx.c, schema, text) {
            Some(v) => cx.validate(Side::Request, &schema_ptr, Direction::Request, &field, &v),
            None => cx.violation(Side::Request, field, format!("{text:?} is not a {want}")),
        }
    };
    for (name, value) in path_values {
        match params
            .iter()
            .find(|p| p.location == "path" && &p.name == name)
        {
            Some(p) => check_one(cx, p, value, format!("/parameters/path/{}", token(name))),
            None => cx.violation(
                Side::Validator,
                format!("/parameters/path/{}", token(name)),
                "the spec's path template names a parameter it does not declare",
            ),
        }
    }
    let declared: Vec<&str> = params
        .iter()
        .filter(|p| p.location == "query")
        .map(|p| p.name.as_str())
        .collect();
    for (name, value) in query {
        let field = format!("/parameters/query/{}", token(name));
        match params
            .iter()
            .find(|p| p.location == "query" && &p.name == name)
        {
            Some(p) => check_one(cx, p, value, field),
            None => cx.violation(
                Side::Request,
                field,
                format!(
                    "unknown query parameter (the operation takes: {})",
                    if declared.is_empty() {
                        "none".to_owned()
                    } else {
                        declared.join(", ")
                    }
                ),
            ),
        }
    }
    for p in params
        .iter()
        .filter(|p| p.required && p.location == "query")
    {
        if !query.iter().any(|(n, _)| *n == p.name) {
            cx.violation(
                Side::Request,
                format!("/parameters/query/{}", token(&p.name)),
                "a required query parameter is missing",
            );
        }
    }
}

fn check_request_body(cx: &mut Ctx<'_>, op: &Value, op_ptr: &str) {
    let req = cx.req;
    let c = cx.c;
    let Some(rb) = op.get("requestBody") else {
        if !req.body.is_empty() {
            cx.violation(
                Side::Request,
                "/body",
                "a body, where the operation takes none",
            );
        }
        return;
    };
    let mut rb_ptr = format!("{op_ptr}/requestBody");
    if let Some(r) = rb.get("$ref").and_then(Value::as_str) {
        rb_ptr = r.trim_start_matches('#').to_owned();
    }
    let rb = c.resolve(rb);
    let required = rb.get("required").and_then(Value::as_bool).unwrap_or(false);
    if req.body.is_empty() {
        if required {
            cx.violation(Side::Request, "/body", "the required body is missing");
        }
        return;
    }
    let no_content = serde_json::Map::new();
    let content = rb
        .get("content")
        .and_then(Value::as_object)
        .unwrap_or(&no_content);
    let takes = || content.keys().cloned().collect::<Vec<_>>().join(", ");
    let Some(ct) = req.content_type.as_deref().map(media_type) else {
        cx.violation(
            Side::Request,
            "/headers/content-type",
            format!(
                "a body without Content-Type (the operation takes {})",
                takes()
            ),
        );
        return;
    };
    let Some(key) = declared(content, &ct) else {
        cx.violation(
            Side::Request,
            "/headers/content-type",
            format!(
                "{ct} is not a content type of this operation (it takes {})",
                takes()
            ),
        );
        return;
    };
    let schema_ptr = format!("{rb_ptr}/content/{}/schema", token(key));
    if let Some(instance) = body_instance(
        cx,
        Side::Request,
        &ct,
        req.content_type.as_deref(),
        &req.body,
    ) {
        cx.validate(
            Side::Request,
            &schema_ptr,
            Direction::Request,
            "/body",
            &instance,
        );
    }
}

/// The body as the JSON instance its schema judges: JSON parsed, text as a string, a multipart
/// form as an object of its part names (each part's text, or `""` for binary content); `None`
/// (after recording why) when it does not parse, or for opaque types.
pub(super) fn body_instance(
    cx: &mut Ctx<'_>,
    side: Side,
    media: &str,
    content_type: Option<&str>,
    body: &[u8],
) -> Option<Value> {
    if media == "application/json" || media.ends_with("+json") {
        return match serde_json::from_slice(body) {
            Ok(v) => Some(v),
            Err(e) => {
                cx.violation(side, "/body", format!("not JSON: {e}"));
                None
            }
        };
    }
    if media.starts_with("text/") {
        return match std::str::from_utf8(body) {
            Ok(s) => Some(Value::from(s)),
            Err(e) => {
                cx.violation(side, "/body", format!("not UTF-8 text: {e}"));
                None
            }
        };
    }
    if media == "multipart/form-data" {
        return match multipart_fields(content_type.unwrap_or_default(), body) {
            Ok(v) => Some(v),
            Err(e) => {
                cx.violation(side, "/body", format!("not a multipart form: {e}"));
                None
            }
        };
    }
    None
}

/// The part names of a multipart form, each with its text (or `""` when not UTF-8).
fn multipart_fields(content_type: &str, body: &[u8]) -> Result<Value, String> {
    let boundary = multer::parse_boundary(content_type).map_err(|e| e.to_string())?;
    let chunk = axum::body::Bytes::copy_from_slice(body);
    let stream = futures::stream::once(async move { Ok::<_, std::io::Error>(chunk) });
    let mut form = multer::Multipart::new(stream, boundary);
    // The stream is one in-memory chunk: every future here completes without waiting.
    futures::executor::block_on(async move {
        let mut out = serde_json::Map::new();
        while let Some(field) = form.next_field().await.map_err(|e| e.to_string())? {
            let name = field.name().unwrap_or_default().to_owned();
            let data = field.bytes().await.map_err(|e| e.to_string())?;
            let text = String::from_utf8(data.to_vec()).unwrap_or_default();
            out.insert(name, Value::from(text));
        }
        Ok(Value::Object(out))
    })
}
