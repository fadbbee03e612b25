//! Configuration object endpoints and transactions (observed-v3.4.md; dataplaneapi
//! `handlers/configuration/*`, `handlers/dataplane/transactions`).
//!
//! One handler shape serves every kind in the table of [`kinds`]: sections (`backends`,
//! `frontends`, `defaults`, the singleton `global`) and their children (`servers`,
//! `server_templates`, `binds`, `acls`, `backend_switching_rules`, `http_request_rules`,
//! `http_response_rules`). A body is held to its spec model ([`body`]): unknown fields dropped,
//! 422 for a missing required field or a bad value, 501 for a spec field the stand-in cannot
//! apply. Paths the spec lists that the stand-in does not serve answer 501.
//!
//! - Outside a transaction (`?version=N`, 409 `version mismatch: ...` when it moved) a write
//!   rewrites `haproxy.cfg` in the API's layout ([`text`]), validated with `haproxy -c`, and the
//!   version moves by one; it answers 202 + Reload-ID (POST 201, PUT 200, DELETE 204 with
//!   `force_reload`, which reloads before answering).
//! - A `PUT` of an existing backend server whose changed fields are all runtime fields (weight,
//!   address, port, maintenance, agent-check, agent-addr, agent-send, health_check_port:
//!   dataplaneapi `runtimeSupportedServerFields`) is applied over the runtime API and answers
//!   200 without a reload; without an admin stats socket, or when a command fails, it reloads
//!   (202 + Reload-ID), as the real API does.
//! - Inside a transaction (`?transaction_id=T`) writes edit the transaction's copy and answer
//!   202 without a Reload-ID ([`txn`] for the commit).
//! - Reads answer from the API's in-memory configuration (after a failed reload, the failed one).

#![allow(clippy::result_large_err)]

mod body;
mod edit;
mod kinds;
mod params;
mod rules;
mod sections;
pub(crate) mod text;
mod txn;

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::Value;

pub use body::{SpecExtract, SpecModel, spec_extract, spec_models, spec_operation};
pub(crate) use edit::Parent;
pub(crate) use txn::Transactions;

use super::{PodCore, error, version_mismatch, with_reload_id};
use edit::{Edit, apply, child_of};
use kinds::{ChildKind, SectionKind, child_kind, section_kind};
use text::read_sections;

pub(super) fn routes() -> Router<Arc<PodCore>> {
    let base = "/v3/services/haproxy/configuration";
    Router::new()
        .merge(txn::routes())
        .route(
            &format!("{base}/{{coll}}"),
            get(read_collection)
                .post(write_collection)
                .put(write_collection),
        )
        .route(
            &format!("{base}/{{coll}}/{{name}}"),
            get(read_section).put(write_section).delete(write_section),
        )
        .route(
            &format!("{base}/{{coll}}/{{name}}/{{child}}"),
            get(read_children).post(write_children),
        )
        .route(
            &format!("{base}/{{coll}}/{{name}}/{{child}}/{{key}}"),
            get(read_child)
                .post(write_child)
                .put(write_child)
                .delete(write_child),
        )
}

type Q = Query<HashMap<String, String>>;

/// 501 for an operation of the spec the stand-in does not serve, else 404.
pub(crate) fn unserved(method: &Method, path: &str) -> Response {
    match spec_operation(method.as_str(), path) {
        Some(op) => error(
            501,
            format!("haptic-sandbox does not implement {op} (the real Data Plane API does)"),
        ),
        None => error(404, format!("no such path: {method} {path}")),
    }
}

fn section_path(coll: &str) -> String {
    format!("/v3/services/haproxy/configuration/{coll}")
}

fn resolve_section(method: &Method, coll: &str) -> Result<&'static SectionKind, Response> {
    section_kind(coll).ok_or_else(|| unserved(method, &section_path(coll)))
}

fn resolve_child(
    method: &Method,
    coll: &str,
    name: &str,
    child: &str,
    key: Option<&str>,
) -> Result<(&'static ChildKind, Parent), Response> {
    let mut path = format!("{}/{name}/{child}", section_path(coll));
    if let Some(k) = key {
        path.push('/');
        path.push_str(k);
    }
    let section = resolve_section(method, coll).map_err(|_| unserved(method, &path))?;
    let kind = child_kind(section.keyword, child).ok_or_else(|| unserved(method, &path))?;
    Ok((
        kind,
        Parent {
            keyword: section.keyword,
            name: name.to_owned(),
        },
    ))
}

/// The text a read sees: the transaction's copy or the API's in-memory configuration.
async fn read_text(core: &PodCore, q: &HashMap<String, String>) -> Result<String, Response> {
    match q.get("transaction_id") {
        Some(t) => core
            .transactions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(t)
            .map(|x| x.text.clone())
            .ok_or_else(|| error(404, format!("transaction {t} does not exist"))),
        None => Ok(core.cfg.lock().await.memory.clone()),
    }
}

fn body_of(bytes: &[u8]) -> Result<Value, Response> {
    serde_json::from_slice(bytes).map_err(|e| error(400, format!("invalid JSON body: {e}")))
}

async fn read_collection(
    State(core): State<Arc<PodCore>>,
    Path(coll): Path<String>,
    method: Method,
    q: Q,
) -> Response {
    let kind = match resolve_section(&method, &coll) {
        Ok(k) => k,
        Err(r) => return r,
    };
    let text = match read_text(&core, &q).await {
        Ok(t) => t,
        Err(r) => return r,
    };
    let models = read_sections(&text)
        .into_iter()
        .filter(|s| s.kind == kind.keyword)
        .map(|s| sections::section_model(kind, &s));
    if kind.singleton {
        let one = models
            .into_iter()
            .next()
            .unwrap_or_else(|| Value::Object(Default::default()));
        return axum::Json(one).into_response();
    }
    axum::Json(models.collect::<Vec<_>>()).into_response()
}

async fn write_collection(
    State(core): State<Arc<PodCore>>,
    Path(coll): Path<String>,
    method: Method,
    q: Q,
    bytes: axum::body::Bytes,
) -> Response {
    let kind = match resolve_section(&method, &coll) {
        Ok(k) => k,
        Err(r) => return r,
    };
    let body = match body_of(&bytes) {
        Ok(b) => b,
        Err(r) => return r,
    };
    let edit = match (kind.singleton, &method) {
        (true, &Method::PUT) => Edit::ReplaceSection {
            kind,
            name: String::new(),
            body,
        },
        (false, &Method::POST) => Edit::CreateSection { kind, body },
        _ => return unserved(&method, &section_path(&coll)),
    };
    run(core, q.0, edit, method).await
}

async fn read_section(
    State(core): State<Arc<PodCore>>,
    Path((coll, name)): Path<(String, String)>,
    method: Method,
    q: Q,
) -> Response {
    let kind = match resolve_section(&method, &coll) {
        Ok(k) if !k.singleton => k,
        _ => return unserved(&method, &format!("{}/{name}", section_path(&coll))),
    };
    let text = match read_text(&core, &q).await {
        Ok(t) => t,
        Err(r) => return r,
    };
    match read_sections(&text)
        .into_iter()
        .find(|s| s.kind == kind.keyword && s.name == name)
    {
        Some(s) => axum::Json(sections::section_model(kind, &s)).into_response(),
        None => error(404, format!("{} {name} not found", kind.keyword)),
    }
}

async fn write_section(
    State(core): State<Arc<PodCore>>,
    Path((coll, name)): Path<(String, String)>,
    method: Method,
    q: Q,
    bytes: axum::body::Bytes,
) -> Response {
    let kind = match resolve_section(&method, &coll) {
        Ok(k) if !k.singleton => k,
        _ => return unserved(&method, &format!("{}/{name}", section_path(&coll))),
    };
    let edit = if method == Method::DELETE {
        Edit::DeleteSection { kind, name }
    } else {
        match body_of(&bytes) {
            Ok(body) => Edit::ReplaceSection { kind, name, body },
            Err(r) => return r,
        }
    };
    run(core, q.0, edit, method).await
}

async fn read_children(
    State(core): State<Arc<PodCore>>,
    Path((coll, name, child)): Path<(String, String, String)>,
    method: Method,
    q: Q,
) -> Response {
    let (kind, parent) = match resolve_child(&method, &coll, &name, &child, None) {
        Ok(x) => x,
        Err(r) => return r,
    };
    let text = match read_text(&core, &q).await {
        Ok(t) => t,
        Err(r) => return r,
    };
    let Some(s) = read_sections(&text)
        .into_iter()
        .find(|s| s.kind == parent.keyword && s.name == parent.name)
    else {
        return error(404, format!("{} {} not found", parent.keyword, parent.name));
    };
    let models: Vec<Value> = s
        .lines
        .iter()
        .filter(|l| l[0] == kind.keyword)
        .map(|l| kind.model_of(l))
        .collect();
    axum::Json(models).into_response()
}

async fn write_children(
    State(core): State<Arc<PodCore>>,
    Path((coll, name, child)): Path<(String, String, String)>,
    method: Method,
    q: Q,
    bytes: axum::body::Bytes,
) -> Response {
    let (kind, parent) = match resolve_child(&method, &coll, &name, &child, None) {
        Ok(x) => x,
        Err(r) => return r,
    };
    if kind.by_index {
        // The spec creates rules at an index only (`POST .../<rules>/{index}`).
        let path = format!("{}/{name}/{child}", section_path(&coll));
        return unserved(&method, &path);
    }
    let body = match body_of(&bytes) {
        Ok(b) => b,
        Err(r) => return r,
    };
    let edit = Edit::CreateChild {
        kind,
        parent,
        index: None,
        body,
    };
    run(core, q.0, edit, method).await
}

async fn read_child(
    State(core): State<Arc<PodCore>>,
    Path((coll, name, child, key)): Path<(String, String, String, String)>,
    method: Method,
    q: Q,
) -> Response {
    let (kind, parent) = match resolve_child(&method, &coll, &name, &child, Some(&key)) {
        Ok(x) => x,
        Err(r) => return r,
    };
    let text = match read_text(&core, &q).await {
        Ok(t) => t,
        Err(r) => return r,
    };
    match child_of(&text, kind, &parent, &key) {
        Some(l) => axum::Json(kind.model_of(&l)).into_response(),
        None => error(404, format!("{} {key} not found", kind.keyword)),
    }
}

async fn write_child(
    State(core): State<Arc<PodCore>>,
    Path((coll, name, child, key)): Path<(String, String, String, String)>,
    method: Method,
    q: Q,
    bytes: axum::body::Bytes,
) -> Response {
    let (kind, parent) = match resolve_child(&method, &coll, &name, &child, Some(&key)) {
        Ok(x) => x,
        Err(r) => return r,
    };
    let edit = match method {
        Method::DELETE => Edit::DeleteChild { kind, parent, key },
        Method::POST if !kind.by_index => {
            let path = format!("{}/{name}/{child}/{key}", section_path(&coll));
            return unserved(&method, &path);
        }
        Method::POST => {
            let Ok(index) = key.parse::<usize>() else {
                return error(400, format!("index must be a number, not {key}"));
            };
            match body_of(&bytes) {
                Ok(body) => Edit::CreateChild {
                    kind,
                    parent,
                    index: Some(index),
                    body,
                },
                Err(r) => return r,
            }
        }
        _ => match body_of(&bytes) {
            Ok(body) => Edit::ReplaceChild {
                kind,
                parent,
                key,
                body,
            },
            Err(r) => return r,
        },
    };
    run(core, q.0, edit, method).await
}

/// What a write is conditional on.
enum Target {
    /// `?version=N`.
    Version(u64),
    /// `?transaction_id=T`.
    Transaction(String),
}

fn target(q: &HashMap<String, String>) -> Result<Target, Response> {
    match (q.get("transaction_id"), q.get("version")) {
        (Some(t), _) => Ok(Target::Transaction(t.clone())),
        (None, Some(v)) => v
            .parse::<u64>()
            .map(Target::Version)
            .map_err(|_| error(400, format!("invalid version: {v}"))),
        (None, None) => Err(error(400, "version or transaction not specified")),
    }
}

/// The status of a write done without a reload pending.
fn done_status(method: &Method) -> StatusCode {
    match *method {
        Method::POST => StatusCode::CREATED,
        Method::DELETE => StatusCode::NO_CONTENT,
        _ => StatusCode::OK,
    }
}

fn answer(status: StatusCode, echo: Value) -> Response {
    if echo.is_null() {
        status.into_response()
    } else {
        (status, axum::Json(echo)).into_response()
    }
}

/// Runs one edit: in a transaction (202), or now at `version` (module doc).
async fn run(
    core: Arc<PodCore>,
    q: HashMap<String, String>,
    edit: Edit,
    method: Method,
) -> Response {
    if super::qbool(&q, "full_section") {
        return error(
            501,
            "haptic-sandbox does not implement full_section (the real Data Plane API does)",
        );
    }
    let version = match target(&q) {
        Ok(Target::Transaction(id)) => return run_in_transaction(&core, &id, &edit),
        Ok(Target::Version(v)) => v,
        Err(r) => return r,
    };
    let mut st = core.cfg.lock().await;
    let current = core.version();
    if version != current {
        return error(409, version_mismatch(current, version));
    }
    let before = st.memory.clone();
    let (text, echo) = match apply(&before, &edit) {
        Ok(x) => x,
        Err((s, m)) => return error(s, m),
    };
    if let Err(m) = core.validate(&text).await {
        return error(400, m);
    }
    let commands = runtime_change(&before, &edit);
    if let Err(e) = core.store_config(&mut st, &text, current + 1) {
        return error(500, format!("writing configuration: {e}"));
    }
    if let Some(cmds) = commands
        && core.runtime_server_update(&text, &cmds).await.is_ok()
    {
        return answer(StatusCode::OK, echo);
    }
    if super::qbool(&q, "force_reload") {
        return match core.reload_locked(&mut st).await {
            Ok(()) => answer(done_status(&method), echo),
            Err(m) => error(400, m),
        };
    }
    drop(st);
    let id = core.schedule_reload();
    with_reload_id(answer(StatusCode::ACCEPTED, echo), &id)
}

fn run_in_transaction(core: &PodCore, id: &str, edit: &Edit) -> Response {
    let mut txns = core.transactions.lock().unwrap_or_else(|p| p.into_inner());
    let Some(txn) = txns.get_mut(id) else {
        return error(404, format!("transaction {id} does not exist"));
    };
    if txn.status != "in_progress" {
        return error(406, format!("transaction {id} is {}", txn.status));
    }
    match apply(&txn.text, edit) {
        Ok((text, echo)) => {
            txn.text = text;
            answer(StatusCode::ACCEPTED, echo)
        }
        Err((s, m)) => error(s, m),
    }
}

/// The runtime commands of a server `PUT` whose changed fields are all runtime fields.
fn runtime_change(before: &str, edit: &Edit) -> Option<Vec<String>> {
    let Edit::ReplaceChild {
        kind,
        parent,
        key,
        body,
    } = edit
    else {
        return None;
    };
    if kind.keyword != "server" {
        return None;
    }
    let old = (kind.to_model)(&child_of(before, kind, parent, key)?, true)?;
    let b = body::Body::new(kind.model, body).ok()?;
    let new = (kind.to_model)(&(kind.to_line)(&b).ok()?, true)?;
    super::runtime::server_commands(&parent.name, &old, &new)
}
