//! Routing of the Kubernetes REST paths: discovery, OpenAPI, and the resource verbs (GET, LIST,
//! WATCH, POST, PUT, PATCH, DELETE, DELETE collection) onto the store.

use super::discovery;
use super::resources::ResourceType;
use super::select::Selector;
use super::shared::{Body, Shared, full, json_resp, lock};
use super::status::{ApiError, ApiResult};
use super::store::{self, WriteOpts};
use super::table;
use super::watch::{self, WatchParams};
use http_body_util::{BodyExt as _, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// Percent-decodes a query component (`+` is a space).
fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let hex = |c: u8| (c as char).to_digit(16);
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => match (hex(b[i + 1]), hex(b[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(u8::try_from(h * 16 + l).unwrap_or(b'?'));
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Lenient query parsing: empty pairs are skipped, the last value wins.
fn parse_query(q: &str) -> HashMap<String, String> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (decode(k), decode(v)),
            None => (decode(p), String::new()),
        })
        .collect()
}

fn parse_body(ct: &str, body: &[u8]) -> ApiResult<Value> {
    if ct.contains("protobuf") || ct.contains("cbor") {
        return Err(ApiError::unsupported_media(ct));
    }
    if body.is_empty() {
        return Ok(Value::Null);
    }
    if ct.contains("yaml") {
        return serde_norway::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")));
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding JSON: {e}")))
}

/// Where a REST path points.
struct Target {
    ns: Option<String>,
    plural: String,
    name: Option<String>,
    sub: Option<String>,
}

fn parse_rest(rest: &[&str]) -> Option<Target> {
    let s = |i: usize| rest.get(i).map(|x| (*x).to_owned());
    match rest {
        ["namespaces", _, p, ..] if !matches!(*p, "status" | "finalize") || rest.len() > 3 => {
            Some(Target {
                ns: s(1),
                plural: s(2)?,
                name: s(3),
                sub: s(4),
            })
        }
        [p] => Some(Target {
            ns: None,
            plural: (*p).to_owned(),
            name: None,
            sub: None,
        }),
        [p, n] => Some(Target {
            ns: None,
            plural: (*p).to_owned(),
            name: Some((*n).to_owned()),
            sub: None,
        }),
        [p, n, sub] => Some(Target {
            ns: None,
            plural: (*p).to_owned(),
            name: Some((*n).to_owned()),
            sub: Some((*sub).to_owned()),
        }),
        _ => None,
    }
}

pub(super) async fn route(
    sh: &Arc<Shared>,
    req: Request<Incoming>,
    method: &str,
    path: &str,
    query: &str,
) -> ApiResult<Response<Body>> {
    let header = |h: hyper::header::HeaderName| {
        req.headers()
            .get(h)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    let accept = header(hyper::header::ACCEPT);
    let ct = header(hyper::header::CONTENT_TYPE);
    let q = parse_query(query);
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let aggregated = accept.contains("as=APIGroupDiscoveryList");
    let types = lock(&sh.state).types.clone();
    let ok = |v: Value| Ok(json_resp(200, &v));
    match segs.as_slice() {
        ["version"] => return ok(discovery::version()),
        ["healthz" | "readyz" | "livez"] => return Ok(full(200, "text/plain", "ok")),
        ["api"] if aggregated => {
            return Ok(full(
                200,
                discovery::AGGREGATED_CT,
                discovery::api_aggregated(&types).to_string(),
            ));
        }
        ["api"] => return ok(discovery::api_legacy(&sh.addr.to_string())),
        ["apis"] if aggregated => {
            return Ok(full(
                200,
                discovery::AGGREGATED_CT,
                discovery::apis_aggregated(&types).to_string(),
            ));
        }
        ["apis"] => return ok(discovery::apis_legacy(&types)),
        ["apis", g] => {
            return Ok(
                discovery::group(&types, g).map_or_else(page_not_found, |v| json_resp(200, &v))
            );
        }
        ["openapi", "v3"] => return ok(discovery::openapi_root(&types)),
        ["openapi", "v3", "api", v] => {
            return discovery::openapi_gv(&types, "", v)
                .map(|d| json_resp(200, &d))
                .ok_or_else(|| ApiError::no_route(path));
        }
        ["openapi", "v3", "apis", g, v] => {
            return discovery::openapi_gv(&types, g, v)
                .map(|d| json_resp(200, &d))
                .ok_or_else(|| ApiError::no_route(path));
        }
        _ => {}
    }
    let (group, version, rest) = match segs.as_slice() {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Err(ApiError::no_route(path)),
    };
    if !types
        .iter()
        .any(|r| r.group == group && r.version == version)
    {
        // A group/version nothing serves (a CRD not installed): the real kube-apiserver's mux
        // answers a plain-text 404, not a Status (issue 27: the controller must class it as a
        // missing resource type from that answer too).
        return Ok(page_not_found());
    }
    if rest.is_empty() {
        return discovery::resource_list(&types, group, version)
            .map(|v| json_resp(200, &v))
            .ok_or_else(|| ApiError::no_route(path));
    }
    let t = parse_rest(rest).ok_or_else(|| ApiError::no_route(path))?;
    let rt = types
        .iter()
        .find(|r| r.group == group && r.version == version && r.plural == t.plural)
        .cloned()
        .ok_or_else(|| ApiError::no_route(path))?;
    let status_sub = match t.sub.as_deref() {
        None => false,
        Some("status") if rt.status_subresource => true,
        Some(_) => return Err(ApiError::no_route(path)),
    };
    if (!rt.namespaced && t.ns.is_some()) || (rt.namespaced && t.ns.is_none() && t.name.is_some()) {
        return Err(ApiError::no_route(path));
    }
    let ns = t.ns.clone().unwrap_or_default();
    let table = accept.contains("as=Table");
    let metadata_only = accept.contains("as=PartialObjectMetadata");
    let opts = WriteOpts {
        dry_run: q.get("dryRun").is_some_and(|d| d == "All"),
        field_manager: q.get("fieldManager").cloned(),
        strict: q.get("fieldValidation").is_some_and(|v| v == "Strict"),
        force: q.get("force").is_some_and(|v| v == "true"),
    };
    let needs_body = matches!(method, "POST" | "PUT" | "PATCH" | "DELETE");
    let body = if needs_body {
        match Limited::new(req.into_body(), store::MAX_REQUEST_BYTES)
            .collect()
            .await
        {
            Ok(b) => b.to_bytes(),
            Err(_) => {
                return Err(ApiError::new(
                    413,
                    "RequestEntityTooLarge",
                    format!(
                        "Request entity too large: limit is {}",
                        store::MAX_REQUEST_BYTES
                    ),
                ));
            }
        }
    } else {
        Bytes::new()
    };
    let selector = || {
        let (ls, fs) = (
            q.get("labelSelector").map(String::as_str),
            q.get("fieldSelector").map(String::as_str),
        );
        let sel = Selector::parse(ls, fs)?;
        sel.check_field_labels(group, version, &rt.plural, ls, fs)?;
        Ok::<_, ApiError>(sel)
    };
    match (method, t.name.as_deref()) {
        ("GET", None) if q.get("watch").is_some_and(|w| w == "true" || w == "1") => {
            let p = WatchParams {
                ns: t.ns.clone(),
                selector: selector()?,
                from_rv: q.get("resourceVersion").and_then(|r| r.parse().ok()),
                bookmarks: q.get("allowWatchBookmarks").is_some_and(|b| b == "true"),
                send_initial: q.get("sendInitialEvents").is_some_and(|b| b == "true"),
                timeout: q
                    .get("timeoutSeconds")
                    .and_then(|t| t.parse().ok())
                    .filter(|t| *t > 0)
                    .map(Duration::from_secs),
                table,
                metadata_only,
            };
            let end_after_replay = sh.take_watch_end(path);
            let body = watch::start(sh, rt, path, p, end_after_replay);
            let mut r = Response::new(body);
            r.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("application/json"),
            );
            Ok(r)
        }
        ("GET", None) => {
            let limit = q.get("limit").and_then(|l| l.parse().ok());
            let list = lock(&sh.state).list(
                &rt,
                t.ns.as_deref(),
                &selector()?,
                limit,
                q.get("continue").map(String::as_str),
            )?;
            if table {
                let items = list["items"].as_array().cloned().unwrap_or_default();
                let mut tab = table::table(
                    &rt,
                    &items,
                    list["metadata"]["resourceVersion"].as_str().unwrap_or(""),
                    true,
                );
                if let Some(c) = list["metadata"].get("continue") {
                    tab["metadata"]["continue"] = c.clone();
                }
                return ok(tab);
            }
            if metadata_only {
                let items: Vec<Value> = list["items"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(table::partial)
                    .collect();
                return ok(
                    serde_json::json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1",
                    "metadata": list["metadata"], "items": items}),
                );
            }
            ok(list)
        }
        ("GET", Some(name)) => {
            let st = lock(&sh.state);
            let obj = st.get(&rt, &ns, name)?;
            if table {
                return ok(table::table(&rt, &[obj], &st.rv.to_string(), true));
            }
            if metadata_only {
                return ok(table::partial(&obj));
            }
            ok(obj)
        }
        ("POST", None) => {
            if rt.namespaced && t.ns.is_none() {
                return Err(ApiError::no_route(path));
            }
            let v = parse_body(&ct, &body)?;
            let created = lock(&sh.state).create(&rt, &ns, v, &opts)?;
            Ok(json_resp(201, &created))
        }
        ("PUT", Some(name)) => {
            let v = parse_body(&ct, &body)?;
            if rt.custom && !status_sub_has_rv(&v) {
                let cause = super::status::Cause {
                    reason: "FieldValueInvalid".into(),
                    message: "Invalid value: 0x0: must be specified for an update".into(),
                    field: "metadata.resourceVersion".into(),
                };
                return Err(ApiError::invalid(&rt.group, &rt.kind, name, vec![cause]));
            }
            ok(lock(&sh.state).update(&rt, &ns, name, status_sub, v, &opts, false)?)
        }
        ("PATCH", Some(name)) => patch(sh, &rt, &ns, name, status_sub, &ct, &body, &opts),
        ("DELETE", Some(name)) => {
            let v = parse_body(delete_content_type(&ct), &body)?;
            ok(lock(&sh.state).delete(&rt, &ns, name, &v, opts.dry_run)?)
        }
        ("DELETE", None) => {
            let v = parse_body(delete_content_type(&ct), &body)?;
            ok(lock(&sh.state).delete_collection(
                &rt,
                t.ns.as_deref(),
                &selector()?,
                &v,
                opts.dry_run,
            )?)
        }
        _ => Err(ApiError::new(
            405,
            "MethodNotAllowed",
            format!(
                "the server does not allow this method on the requested resource ({method} {path})"
            ),
        )),
    }
}

fn status_sub_has_rv(v: &Value) -> bool {
    v["metadata"]["resourceVersion"]
        .as_str()
        .is_some_and(|s| !s.is_empty())
}

#[allow(clippy::too_many_arguments)]
fn patch(
    sh: &Shared,
    rt: &ResourceType,
    ns: &str,
    name: &str,
    status_sub: bool,
    ct: &str,
    body: &[u8],
    opts: &WriteOpts,
) -> ApiResult<Response<Body>> {
    let kind = ct.split(';').next().unwrap_or("").trim();
    if opts.force && kind != "application/apply-patch+yaml" {
        let mut e = ApiError::new(
            422,
            "Invalid",
            "PatchOptions.meta.k8s.io \"\" is invalid: force: Forbidden: may not be specified for non-apply patch",
        );
        e.details.kind = Some("PatchOptions".into());
        return Err(e);
    }
    let mut st = lock(&sh.state);
    if kind == "application/apply-patch+yaml" {
        let v = parse_body("application/yaml", body)?;
        let (obj, created) = st.apply(rt, ns, name, status_sub, v, opts)?;
        return Ok(json_resp(if created { 201 } else { 200 }, &obj));
    }
    let patch_doc = parse_body("application/json", body)?;
    let mut obj = st.get(rt, ns, name)?;
    match kind {
        "application/merge-patch+json" => super::patch::merge(&mut obj, &patch_doc),
        "application/strategic-merge-patch+json" if rt.strategic_merge() => {
            super::patch::strategic(&mut obj, &patch_doc)
        }
        "application/json-patch+json" => super::patch::json_patch(&mut obj, &patch_doc)?,
        other => return Err(ApiError::unsupported_media(other)),
    }
    Ok(json_resp(
        200,
        &st.update(rt, ns, name, status_sub, obj, opts, false)?,
    ))
}

/// A DELETE's body is read as JSON when it names no content type (kubectl sends none).
fn delete_content_type(ct: &str) -> &str {
    if ct.is_empty() {
        "application/json"
    } else {
        ct
    }
}

/// The real kube-apiserver's answer for a path its mux does not serve (a group or version no
/// API serves): `404 page not found`, plain text.
fn page_not_found() -> Response<Body> {
    full(404, "text/plain; charset=utf-8", "404 page not found\n")
}
