//! Basic auth (401 with `Www-Authenticate: Basic realm="API"`, observed-v3.4.md), `GET /v3/info`,
//! `GET /v3/health` and `GET /v3/services/haproxy/runtime/info`.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use base64::Engine as _;
use serde_json::json;

use super::{PodCore, error};

pub(super) fn routes() -> Router<Arc<PodCore>> {
    Router::new()
        .route("/v3/info", get(info))
        .route("/v3/health", get(health))
        .route("/v3/services/haproxy/runtime/info", get(runtime_info))
}

/// Refuses a request without this pod's credentials.
pub(super) async fn auth(State(core): State<Arc<PodCore>>, req: Request, next: Next) -> Response {
    let expected = {
        let (user, pass) = &*core
            .credentials
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"))
        )
    };
    let ok = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == expected);
    if !ok {
        let mut r = error(401, "authentication failed");
        r.headers_mut().insert(
            "www-authenticate",
            HeaderValue::from_static("Basic realm=\"API\""),
        );
        return r;
    }
    next.run(req).await
}

impl PodCore {
    /// The HAProxy version as `show info` reports it (`2.6.12-1+deb12u4`): the first line of
    /// `haproxy -v` of the pod's binary, read once; empty when it cannot be run.
    pub async fn haproxy_version(&self) -> String {
        self.haproxy_version
            .get_or_init(|| async {
                let out = tokio::process::Command::new(&self.settings.haproxy_bin)
                    .arg("-v")
                    .output()
                    .await;
                out.ok()
                    .and_then(|o| {
                        String::from_utf8_lossy(&o.stdout)
                            .lines()
                            .next()
                            .and_then(|l| l.strip_prefix("HAProxy version "))
                            .and_then(|r| r.split_whitespace().next())
                            .map(str::to_owned)
                    })
                    .unwrap_or_default()
            })
            .await
            .clone()
    }
}

async fn info(State(core): State<Arc<PodCore>>) -> Response {
    axum::Json(json!({
        "api": {"version": "v3.2.6 haptic-sandbox", "build_date": "2026-11-30T00:00:00.000Z"},
        "system": {
            "hostname": core.name,
            "os_string": "Linux (haptic-sandbox pod)",
            "time": jiff::Timestamp::now().as_second(),
            "uptime": core.started.elapsed().as_secs(),
        }
    }))
    .into_response()
}

/// The v3 `process_info` model (HAProxy's `show info` subset: `version`, `pid`, `uptime`)
/// with the runtime socket it was read from.
async fn runtime_info(State(core): State<Arc<PodCore>>) -> Response {
    let version = core.haproxy_version().await;
    let pid = core.master.lock().await.as_ref().map(|m| m.pid);
    axum::Json(json!({
        "runtimeAPI": "/var/run/haproxy/master.sock",
        "info": {
            "version": version,
            "pid": pid,
            "uptime": core.started.elapsed().as_secs(),
        }
    }))
    .into_response()
}

async fn health(State(core): State<Arc<PodCore>>) -> Response {
    // ecosystem.md §A.7: always 200.
    let up = core.stand_in
        || core
            .master
            .lock()
            .await
            .as_ref()
            .is_some_and(|m| super::super::netns::pid_alive(m.pid));
    axum::Json(json!({"haproxy": if up { "up" } else { "down" }})).into_response()
}
