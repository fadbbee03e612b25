//! Configuration version, raw configuration and reloads (ecosystem.md §A.1-§A.3).

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::{PodCore, error, md5_hex, qbool, with_version};

fn set_headers(r: &mut Response, version: u64, file: &[u8]) {
    if let Ok(v) = HeaderValue::from_str(&version.to_string()) {
        r.headers_mut().insert("configuration-version", v);
    }
    if let Ok(v) = HeaderValue::from_str(&md5_hex(file)) {
        r.headers_mut().insert("configuration-checksum", v);
    }
}

/// `GET /v3/services/haproxy/configuration/version` → bare JSON integer (§A.1).
pub(super) async fn get_version(State(core): State<Arc<PodCore>>) -> Response {
    axum::Json(core.version()).into_response()
}

/// `GET .../configuration/raw` → the file on disk as text/plain (v3.1+; §A.8), version and checksum
/// headers.
pub(super) async fn get_raw(State(core): State<Arc<PodCore>>) -> Response {
    let text = core.read_config();
    let mut r = (
        StatusCode::OK,
        [("content-type", "text/plain")],
        text.clone(),
    )
        .into_response();
    set_headers(&mut r, core.version(), text.as_bytes());
    r
}

/// `POST .../configuration/raw` (§A.2).
pub(super) async fn post_raw(
    State(core): State<Arc<PodCore>>,
    Query(q): Query<HashMap<String, String>>,
    body: String,
) -> Response {
    let skip_version = qbool(&q, "skip_version");
    let skip_reload = qbool(&q, "skip_reload");
    let force_reload = qbool(&q, "force_reload");
    let only_validate = qbool(&q, "only_validate");
    if let Some(t) = q.get("transaction_id") {
        return error(
            404,
            format!("transaction {t} not found (haptic-sandbox implements no transactions)"),
        );
    }
    if !body.is_empty() && !body.contains('\n') {
        return error(400, "invalid configuration: no newline character found");
    }
    let mut st = core.cfg.lock().await;
    let current = core.version();
    let conflict = |msg: String| {
        let file = core.read_config();
        let mut r = error(409, msg);
        set_headers(&mut r, current, file.as_bytes());
        r
    };
    if !skip_version {
        let Some(v) = q.get("version") else {
            return error(400, "version or transaction not specified");
        };
        let Ok(v) = v.parse::<u64>() else {
            return error(400, format!("invalid version: {v}"));
        };
        if v != current {
            return conflict(format!(
                "version in configuration file is {current}, given version is {v}"
            ));
        }
    }
    if let Err(msg) = core.validate(&body).await {
        return error(400, msg);
    }
    if only_validate {
        // raw.go answers 202 without a Reload-ID here (§A.2).
        let mut r = (
            StatusCode::ACCEPTED,
            [("content-type", "text/plain")],
            body.clone(),
        )
            .into_response();
        let file = core.read_config();
        set_headers(&mut r, current, file.as_bytes());
        return r;
    }
    let new_version = if skip_version {
        super::parse_version(&body).unwrap_or(current)
    } else {
        current + 1
    };
    let stored = with_version(&body, new_version);
    if let Err(e) = core.write_config(&stored) {
        return error(500, format!("writing configuration: {e}"));
    }
    core.version
        .store(new_version, std::sync::atomic::Ordering::SeqCst);
    let mut r = if skip_reload {
        (
            StatusCode::CREATED,
            [("content-type", "text/plain")],
            stored.clone(),
        )
            .into_response()
    } else if force_reload {
        match core.reload_locked(&mut st).await {
            Ok(()) => (
                StatusCode::CREATED,
                [("content-type", "text/plain")],
                stored.clone(),
            )
                .into_response(),
            Err(msg) => return error(400, msg),
        }
    } else {
        let id = core.schedule_reload();
        let mut r = (
            StatusCode::ACCEPTED,
            [("content-type", "text/plain")],
            stored.clone(),
        )
            .into_response();
        if let Ok(v) = HeaderValue::from_str(&id) {
            r.headers_mut().insert("reload-id", v);
        }
        r
    };
    set_headers(&mut r, new_version, core.read_config().as_bytes());
    r
}

/// `GET /v3/services/haproxy/reloads` (all reloads this endpoint knows; the real one keeps only
/// failed ones and the last success).
pub(super) async fn list_reloads(State(core): State<Arc<PodCore>>) -> Response {
    let ra = core.reloads.lock().unwrap_or_else(|p| p.into_inner());
    axum::Json(ra.records.values().cloned().collect::<Vec<_>>()).into_response()
}

/// `GET /v3/services/haproxy/reloads/{id}` → `{id,status,response,reload_timestamp}` or 404.
pub(super) async fn get_reload(
    State(core): State<Arc<PodCore>>,
    Path(id): Path<String>,
) -> Response {
    let ra = core.reloads.lock().unwrap_or_else(|p| p.into_inner());
    match ra.records.get(&id) {
        Some(r) => axum::Json(r.clone()).into_response(),
        None => error(404, format!("reload {id} not found")),
    }
}
