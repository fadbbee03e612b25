//! Configuration version and raw configuration (observed-v3.4.md, ecosystem.md §A.1-§A.2):
//!
//! ```text
//!  GET  configuration/version        200, a bare number (the in-memory version)
//!  GET  configuration/raw            200 text/plain, the file on disk (`# _md5hash=`, `# _version=N`),
//!                                    Configuration-Checksum
//!  POST configuration/raw?version=N  202 + Reload-ID, version N+1 (an identical text too);
//!                                    201 without Reload-ID with skip_reload or force_reload;
//!                                    202 without Reload-ID and nothing written with only_validate;
//!                                    409 `version mismatch: ...`; 400 `validation error: ...`,
//!                                    without a version, for an empty body; 415 for JSON
//! ```

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::{
    PodCore, error, md5_hex, qbool, reloads, strip_meta, version_mismatch, with_reload_id,
    with_version,
};

pub(super) fn routes() -> Router<Arc<PodCore>> {
    Router::new()
        .route(
            "/v3/services/haproxy/configuration/version",
            get(get_version),
        )
        .route(
            "/v3/services/haproxy/configuration/raw",
            get(get_raw).post(post_raw),
        )
        .route("/v3/services/haproxy/reloads", get(reloads::list_reloads))
        .route(
            "/v3/services/haproxy/reloads/{id}",
            get(reloads::get_reload),
        )
}

fn text_answer(status: StatusCode, text: String, version: u64) -> Response {
    let checksum = md5_hex(strip_meta(&text).as_bytes());
    let mut r = (status, [("content-type", "text/plain")], text).into_response();
    if let Ok(v) = HeaderValue::from_str(&version.to_string()) {
        r.headers_mut().insert("configuration-version", v);
    }
    if let Ok(v) = HeaderValue::from_str(&checksum) {
        r.headers_mut().insert("configuration-checksum", v);
    }
    r
}

/// `GET .../configuration/version`: the in-memory version as a bare JSON integer.
async fn get_version(State(core): State<Arc<PodCore>>) -> Response {
    axum::Json(core.version()).into_response()
}

/// `GET .../configuration/raw`: the file on disk.
async fn get_raw(State(core): State<Arc<PodCore>>) -> Response {
    text_answer(StatusCode::OK, core.read_config(), core.version())
}

/// `POST .../configuration/raw` (module doc).
async fn post_raw(
    State(core): State<Arc<PodCore>>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: String,
) -> Response {
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if content_type.starts_with("application/json") || content_type.starts_with("multipart/") {
        return error(
            415,
            format!("unsupported media type {content_type}: the configuration is text/plain"),
        );
    }
    if q.contains_key("transaction_id") {
        return error(
            501,
            "haptic-sandbox does not implement a raw configuration inside a transaction (the real Data Plane API does)",
        );
    }
    let skip_version = qbool(&q, "skip_version");
    if body.trim().is_empty() {
        return error(400, "invalid configuration: empty body");
    }
    if !body.contains('\n') {
        return error(400, "invalid configuration: no newline character found");
    }
    let mut st = core.cfg.lock().await;
    let current = core.version();
    if !skip_version {
        let Some(v) = q.get("version") else {
            return error(400, "version or transaction not specified");
        };
        let Ok(v) = v.parse::<u64>() else {
            return error(400, format!("invalid version: {v}"));
        };
        if v != current {
            let mut r = error(409, version_mismatch(current, v));
            let checksum = md5_hex(strip_meta(&core.read_config()).as_bytes());
            if let Ok(h) = HeaderValue::from_str(&checksum) {
                r.headers_mut().insert("configuration-checksum", h);
            }
            return r;
        }
    }
    if let Err(msg) = core.validate(&body).await {
        return error(400, msg);
    }
    if qbool(&q, "only_validate") {
        return text_answer(StatusCode::ACCEPTED, body, current);
    }
    let new_version = if skip_version {
        super::parse_version(&body).unwrap_or(current)
    } else {
        current + 1
    };
    if let Err(e) = core.store_config(&mut st, &body, new_version) {
        return error(500, format!("writing configuration: {e}"));
    }
    let stored = with_version(&body, new_version);
    if qbool(&q, "skip_reload") {
        return text_answer(StatusCode::CREATED, stored, new_version);
    }
    if qbool(&q, "force_reload") {
        return match core.reload_locked(&mut st).await {
            Ok(()) => text_answer(StatusCode::CREATED, stored, new_version),
            Err(msg) => error(400, msg),
        };
    }
    drop(st);
    let id = core.schedule_reload();
    with_reload_id(text_answer(StatusCode::ACCEPTED, stored, new_version), &id)
}
