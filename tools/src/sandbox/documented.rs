//! A Dataplane endpoint that gives the answers ecosystem.md A documents, verbatim and fixed
//! (version 7, reload IDs `2026-11-30-N`, 409 with `Configuration-Version`, 202 + `Reload-Id`,
//! multipart storage, 404/409 for named files), recording every request it was sent: for unit
//! tests of a Dataplane client's handling of each documented answer, where the sandbox pods'
//! real behaviour (versions that move, reloads that take time) would blur the case.
//!
//! Basic auth `admin:secret`. [`serve`] runs any router on a loopback port (for one-answer
//! fault servers).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Multipart, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;

/// The configuration version the endpoint reports.
pub const CURRENT_VERSION: i64 = 7;
/// The raw configuration it answers.
pub const RUNNING: &str = "# _version=7\n# _md5hash=abc\nglobal\n  daemon\n";

/// One request as the server saw it.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    /// HTTP method.
    pub method: String,
    /// `raw`, the storage kind, or `<kind>/<name>`.
    pub path: String,
    /// Query parameters.
    pub query: HashMap<String, String>,
    /// `Content-Type` sent.
    pub content_type: String,
    /// The body, as text.
    pub body: String,
    /// Multipart parts: (field name, file name, content).
    pub parts: Vec<(String, Option<String>, String)>,
}

/// Every request seen, in order.
pub type Log = Arc<Mutex<Vec<Seen>>>;

/// The Dataplane API's error body `{code, message}` with `status`.
pub fn error_body(status: StatusCode, message: &str) -> Response {
    (
        status,
        axum::Json(json!({"code": status.as_u16(), "message": message})),
    )
        .into_response()
}

/// Refuses requests without `admin:secret` (401).
pub async fn require_auth(req: Request, next: Next) -> Response {
    // admin:secret
    let ok = req.headers().get(header::AUTHORIZATION)
        == Some(&HeaderValue::from_static("Basic YWRtaW46c2VjcmV0"));
    if ok {
        next.run(req).await
    } else {
        error_body(StatusCode::UNAUTHORIZED, "unauthorized")
    }
}

/// Appends a request to the log.
#[allow(clippy::unwrap_used)]
pub fn record(log: &Log, seen: Seen) {
    log.lock().unwrap().push(seen);
}

fn content_type(headers: &HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned()
}

/// `POST .../configuration/raw`: 409 unless `version=7`, 400 for a body naming `bogus`, else
/// the documented answer for the flags.
pub async fn push_raw(
    State(log): State<Log>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: String,
) -> Response {
    record(
        &log,
        Seen {
            method: "POST".into(),
            path: "raw".into(),
            query: query.clone(),
            content_type: content_type(&headers),
            body: body.clone(),
            parts: vec![],
        },
    );
    let version = query.get("version").cloned().unwrap_or_default();
    if version != CURRENT_VERSION.to_string() {
        let msg = format!(
            "version in configuration file is {CURRENT_VERSION}, given version is {version}"
        );
        let mut resp = error_body(StatusCode::CONFLICT, &msg);
        resp.headers_mut()
            .insert("Configuration-Version", HeaderValue::from(CURRENT_VERSION));
        return resp;
    }
    if body.contains("bogus") {
        return error_body(
            StatusCode::BAD_REQUEST,
            "[ALERT] config : parsing [haproxy.cfg:2] : unknown keyword 'bogus'",
        );
    }
    let flag = |k: &str| query.get(k).map(String::as_str) == Some("true");
    let mut resp = if flag("only_validate") {
        StatusCode::ACCEPTED.into_response()
    } else if flag("skip_reload") || flag("force_reload") {
        (StatusCode::CREATED, body).into_response()
    } else {
        let mut r = (StatusCode::ACCEPTED, body).into_response();
        r.headers_mut()
            .insert("Reload-Id", HeaderValue::from_static("2026-11-30-1"));
        r
    };
    if !flag("only_validate") {
        resp.headers_mut().insert(
            "Configuration-Version",
            HeaderValue::from(CURRENT_VERSION + 1),
        );
        resp.headers_mut()
            .insert("Configuration-Checksum", HeaderValue::from_static("def"));
    }
    resp
}

/// `GET .../reloads/{id}`: `-1` succeeded, `-2` failed, `-3` in progress, others 404.
pub async fn reload(Path(id): Path<String>) -> Response {
    let (status, response) = match id.as_str() {
        "2026-11-30-1" => ("succeeded", ""),
        "2026-11-30-2" => ("failed", "[ALERT] cannot bind socket"),
        "2026-11-30-3" => ("in_progress", ""),
        _ => return error_body(StatusCode::NOT_FOUND, "reload not found"),
    };
    axum::Json(json!({"id": id, "status": status, "response": response, "reload_timestamp": 1_795_000_000}))
        .into_response()
}

/// `POST .../storage/{kind}`: 409 for a file named `exists*`; certificates answer 202 +
/// `Reload-Id`.
pub async fn storage_create(
    State(log): State<Log>,
    Path(kind): Path<String>,
    mut multipart: Multipart,
) -> Response {
    let mut parts = Vec::new();
    while let Ok(Some(field)) = multipart.next_field().await {
        let name = field.name().unwrap_or_default().to_owned();
        let file_name = field.file_name().map(str::to_owned);
        let text = field.text().await.unwrap_or_default();
        parts.push((name, file_name, text));
    }
    let file_name = parts.iter().find_map(|p| p.1.clone()).unwrap_or_default();
    record(
        &log,
        Seen {
            method: "POST".into(),
            path: kind.clone(),
            parts,
            ..Seen::default()
        },
    );
    if file_name.starts_with("exists") {
        return error_body(StatusCode::CONFLICT, "file already exists");
    }
    let body = axum::Json(
        json!({"storage_name": file_name, "file": format!("/etc/haproxy/{kind}/{file_name}")}),
    );
    if kind == "ssl_certificates" {
        let mut r = (StatusCode::ACCEPTED, body).into_response();
        r.headers_mut()
            .insert("Reload-Id", HeaderValue::from_static("2026-11-30-4"));
        r
    } else {
        (StatusCode::CREATED, body).into_response()
    }
}

/// `GET .../storage/{kind}`: one `hosts.map`.
pub async fn storage_list(Path(kind): Path<String>) -> Response {
    axum::Json(json!([{"storage_name": "hosts.map", "file": format!("/etc/haproxy/{kind}/hosts.map"), "size": 4}]))
        .into_response()
}

/// `GET .../storage/{kind}/{name}`: 404 for `missing.map`, certificate details for
/// `ssl_certificates`, else the bytes `a b`.
pub async fn storage_get(Path((kind, name)): Path<(String, String)>) -> Response {
    if name == "missing.map" {
        return error_body(StatusCode::NOT_FOUND, "file not found");
    }
    if kind == "ssl_certificates" {
        return axum::Json(json!({
            "storage_name": name,
            "file": format!("/etc/haproxy/ssl/{name}"),
            "serial": "01",
            "sha256_finger_print": "AB12",
            "domains": "site.haptic.test",
        }))
        .into_response();
    }
    (
        [(header::CONTENT_TYPE, "application/octet-stream")],
        "a b\n",
    )
        .into_response()
}

/// `PUT .../storage/{kind}/{name}`: 202 + `Reload-Id`.
pub async fn storage_put(
    State(log): State<Log>,
    Path((kind, name)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    record(
        &log,
        Seen {
            method: "PUT".into(),
            path: format!("{kind}/{name}"),
            query,
            content_type: content_type(&headers),
            body: String::from_utf8_lossy(&body).into_owned(),
            parts: vec![],
        },
    );
    let mut r = StatusCode::ACCEPTED.into_response();
    r.headers_mut()
        .insert("Reload-Id", HeaderValue::from_static("2026-11-30-5"));
    r
}

/// `DELETE .../storage/{kind}/{name}`: 409 for `used.map`, else 204.
pub async fn storage_delete(Path((_kind, name)): Path<(String, String)>) -> Response {
    if name == "used.map" {
        return error_body(
            StatusCode::CONFLICT,
            "rejecting attempt to delete file used.map referenced in haproxy conf",
        );
    }
    StatusCode::NO_CONTENT.into_response()
}

/// Serves `router` on a free loopback port until the runtime ends.
///
/// # Panics
/// When no loopback port can be bound.
#[allow(clippy::unwrap_used)]
pub async fn serve(router: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    addr
}

/// Starts the endpoint; returns its address and its request log.
pub async fn documented_server() -> (SocketAddr, Log) {
    let log: Log = Arc::default();
    let router = Router::new()
        .route(
            "/v3/info",
            get(|| async { axum::Json(json!({"api": {"version": "v3.2.1 test", "build_date": "2026-01-01T00:00:00Z"}, "system": {"hostname": "pod-a"}})) }),
        )
        .route("/v3/health", get(|| async { axum::Json(json!({"haproxy": "up"})) }))
        .route(
            "/v3/services/haproxy/configuration/version",
            get(|| async { ([(header::CONTENT_TYPE, "application/json")], "7\n") }),
        )
        .route(
            "/v3/services/haproxy/configuration/raw",
            get(|| async {
                (
                    [("Configuration-Version", "7"), ("Configuration-Checksum", "abc")],
                    RUNNING,
                )
            })
            .post(push_raw),
        )
        .route("/v3/services/haproxy/reloads/{id}", get(reload))
        .route("/v3/services/haproxy/storage/{kind}", get(storage_list).post(storage_create))
        .route(
            "/v3/services/haproxy/storage/{kind}/{name}",
            get(storage_get).put(storage_put).delete(storage_delete),
        )
        .route("/v3/services/haproxy/runtime/{kind}", get(storage_list).post(storage_create))
        .route(
            "/v3/services/haproxy/runtime/{kind}/{name}",
            get(storage_get).put(storage_put).delete(storage_delete),
        )
        .layer(middleware::from_fn(require_auth))
        .with_state(log.clone());
    (serve(router).await, log)
}
