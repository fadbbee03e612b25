//! `/_sandbox/` test hooks (no auth): faults, request log, drift and kill; and the fault and
//! request-log steps [`super::handle`] runs before and after the API itself.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use regex::Regex;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{Dropped, PodCore, RequestRecord, error, qbool, write_atomic};

/// The request log keeps the newest requests only (long benchmark runs).
pub const MAX_RECORDED_REQUESTS: usize = 100_000;

#[derive(Debug)]
pub(super) struct RequestFault {
    method: Regex,
    path: Regex,
    status: Option<u16>,
    times: u32,
    used: u32,
    retry_after_s: Option<u64>,
    delay_ms: u64,
    drop: bool,
    spec: FaultSpec,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReloadFaultKind {
    Slow,
    Fail,
}

#[derive(Debug)]
pub(super) struct ReloadFault {
    pub(super) kind: ReloadFaultKind,
    pub(super) times: u32,
    pub(super) used: u32,
    pub(super) delay_ms: u64,
    spec: FaultSpec,
}

/// The armed faults of one pod.
#[derive(Debug, Default)]
pub(super) struct Faults {
    requests: Vec<RequestFault>,
    pub(super) reloads: Vec<ReloadFault>,
}

impl Faults {
    /// Faults armed (request and reload).
    fn len(&self) -> usize {
        self.requests.len() + self.reloads.len()
    }

    /// As `GET /_sandbox/faults` lists them.
    fn listed(&self) -> serde_json::Value {
        let left = |times: u32, used: u32| (times > 0).then(|| times.saturating_sub(used));
        let mut out: Vec<serde_json::Value> = self
            .requests
            .iter()
            .map(|r| r.spec.listed(left(r.times, r.used)))
            .collect();
        out.extend(
            self.reloads
                .iter()
                .map(|r| r.spec.listed(left(r.times, r.used))),
        );
        serde_json::Value::Array(out)
    }
}

/// What the request log and the faults see of a request.
#[derive(Debug)]
pub(super) struct Seen {
    method: String,
    pub(super) path: String,
    pub(super) query: String,
    user_agent: String,
}

impl Seen {
    pub(super) fn of<B>(req: &axum::http::Request<B>) -> Seen {
        Seen {
            method: req.method().to_string(),
            path: req.uri().path().to_string(),
            query: req.uri().query().unwrap_or_default().to_string(),
            user_agent: req
                .headers()
                .get(axum::http::header::USER_AGENT)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string(),
        }
    }

    /// A `/_sandbox/` call (never faulted, never logged).
    pub(super) fn is_sandbox_hook(&self) -> bool {
        self.path.starts_with("/_sandbox/")
    }
}

impl PodCore {
    /// Logs a request and its status (0: dropped); `/_sandbox/` calls are not logged.
    pub(super) fn record(&self, seen: &Seen, status: u16) {
        if seen.is_sandbox_hook() {
            return;
        }
        let mut r = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        if r.len() >= MAX_RECORDED_REQUESTS {
            r.drain(..MAX_RECORDED_REQUESTS / 10);
        }
        r.push(RequestRecord {
            method: seen.method.clone(),
            path: seen.path.clone(),
            query: seen.query.clone(),
            status,
            at: jiff::Timestamp::now().to_string(),
            user_agent: seen.user_agent.clone(),
        });
    }

    /// The first armed request fault matching the request, applied: its delay, then its
    /// answer (or the dropped connection); `None` lets the request through.
    pub(super) async fn scripted_fault(&self, seen: &Seen) -> Option<Result<Response, Dropped>> {
        let (status, retry_after, delay_ms, drop) = {
            let mut f = self.faults.lock().unwrap_or_else(|p| p.into_inner());
            let i = f.requests.iter().position(|r| {
                (r.times == 0 || r.used < r.times)
                    && r.method.is_match(&seen.method)
                    && r.path.is_match(&seen.path)
            })?;
            let r = &mut f.requests[i];
            r.used += 1;
            let out = (r.status, r.retry_after_s, r.delay_ms, r.drop);
            if r.times != 0 && r.used >= r.times {
                f.requests.remove(i);
            }
            out
        };
        if delay_ms > 0 {
            tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        }
        if drop {
            self.record(seen, 0);
            return Some(Err(Dropped));
        }
        let status = status?;
        let mut r = error(
            status,
            format!(
                "haptic-sandbox scripted fault: {} {}",
                seen.method, seen.path
            ),
        );
        if let Some(s) = retry_after
            && let Ok(v) = HeaderValue::from_str(&s.to_string())
        {
            r.headers_mut().insert("retry-after", v);
        }
        self.record(seen, status);
        Some(Ok(r))
    }
}

/// A fault as posted (and listed by `GET /_sandbox/faults`, plus `remaining`). Unknown fields are
/// refused, like every invalid fault ([`crate::sandbox::control`]).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FaultSpec {
    #[serde(skip_serializing_if = "Option::is_none")]
    method: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<u16>,
    times: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_after_s: Option<u64>,
    delay_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    drop: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    reload: Option<String>,
}

impl FaultSpec {
    /// The fault as listed, with how many applications remain (`null` = every time).
    pub(super) fn listed(&self, remaining: Option<u32>) -> serde_json::Value {
        let mut v = serde_json::to_value(self).unwrap_or_default();
        if let Some(m) = v.as_object_mut() {
            m.insert("remaining".into(), json!(remaining));
        }
        v
    }
}

/// `POST /_sandbox/faults`: a request fault (regexes unanchored on method and path without query;
/// `times` 0/absent = always; first match applies) or a reload fault (`{"reload":"slow"|"fail"}`).
/// The body is JSON whatever its content type (`curl -d`); invalid faults answer 400 naming the
/// field.
pub(super) async fn add_fault(
    State(core): State<Arc<PodCore>>,
    body: axum::body::Bytes,
) -> Response {
    let spec: FaultSpec = match crate::sandbox::control::parse_json(&body) {
        Ok(s) => s,
        Err(e) => return error(400, format!("invalid fault: {e}")),
    };
    let mut f = core.faults.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(kind) = &spec.reload {
        let kind = match kind.as_str() {
            "slow" => ReloadFaultKind::Slow,
            "fail" => ReloadFaultKind::Fail,
            other => {
                return error(
                    400,
                    format!("invalid fault: reload: must be slow or fail, not {other}"),
                );
            }
        };
        let extra = [
            ("method", spec.method.is_some()),
            ("path", spec.path.is_some()),
            ("status", spec.status.is_some()),
            ("retry_after_s", spec.retry_after_s.is_some()),
            ("drop", spec.drop),
        ];
        if let Some((field, _)) = extra.iter().find(|(_, given)| *given) {
            return error(
                400,
                format!(
                    "invalid fault: {field}: a reload fault takes only reload, times and delay_ms"
                ),
            );
        }
        if kind == ReloadFaultKind::Slow && spec.delay_ms.unwrap_or(0) == 0 {
            return error(
                400,
                "invalid fault: delay_ms: a slow reload fault needs delay_ms > 0",
            );
        }
        f.reloads.push(ReloadFault {
            kind,
            times: spec.times.unwrap_or(0),
            used: 0,
            delay_ms: spec.delay_ms.unwrap_or(0),
            spec: spec.clone(),
        });
        let n = f.len();
        return (
            StatusCode::CREATED,
            axum::Json(json!({"ok": true, "faults": n})),
        )
            .into_response();
    }
    if let Err(e) = crate::sandbox::control::check_request_fault(
        spec.status,
        spec.retry_after_s,
        spec.delay_ms,
        spec.drop,
        false,
    ) {
        return error(400, format!("invalid fault: {e}"));
    }
    let re = |field: &str, s: &Option<String>| {
        Regex::new(s.as_deref().unwrap_or("")).map_err(|e| format!("invalid fault: {field}: {e}"))
    };
    let (method, path) = match (re("method", &spec.method), re("path", &spec.path)) {
        (Ok(m), Ok(p)) => (m, p),
        (Err(e), _) | (_, Err(e)) => return error(400, e),
    };
    f.requests.push(RequestFault {
        method,
        path,
        status: spec.status,
        times: spec.times.unwrap_or(0),
        used: 0,
        retry_after_s: spec.retry_after_s,
        delay_ms: spec.delay_ms.unwrap_or(0),
        drop: spec.drop,
        spec: spec.clone(),
    });
    let n = f.len();
    (
        StatusCode::CREATED,
        axum::Json(json!({"ok": true, "faults": n})),
    )
        .into_response()
}

/// `GET /_sandbox/faults`: the armed faults (request faults first, then reload faults), as posted
/// plus `remaining`; used-up faults are gone.
pub(super) async fn list_faults(State(core): State<Arc<PodCore>>) -> Response {
    let f = core.faults.lock().unwrap_or_else(|p| p.into_inner());
    axum::Json(f.listed()).into_response()
}

/// `DELETE /_sandbox/faults`.
pub(super) async fn clear_faults(State(core): State<Arc<PodCore>>) -> Response {
    let mut f = core.faults.lock().unwrap_or_else(|p| p.into_inner());
    f.requests.clear();
    f.reloads.clear();
    axum::Json(json!({"ok": true})).into_response()
}

/// `GET /_sandbox/requests`.
pub(super) async fn get_requests(State(core): State<Arc<PodCore>>) -> Response {
    let r = core.requests.lock().unwrap_or_else(|p| p.into_inner());
    axum::Json(r.clone()).into_response()
}

/// `DELETE /_sandbox/requests`.
pub(super) async fn clear_requests(State(core): State<Arc<PodCore>>) -> Response {
    core.requests
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clear();
    axum::Json(json!({"ok": true})).into_response()
}

/// `POST /_sandbox/bump-version`: the version moves, the content does not (another client's no-op
/// commit).
pub(super) async fn bump_version(State(core): State<Arc<PodCore>>) -> Response {
    let mut st = core.cfg.lock().await;
    let v = core.version() + 1;
    let body = st.memory.clone();
    if let Err(e) = core.store_config(&mut st, &body, v) {
        return error(500, e.to_string());
    }
    axum::Json(json!({"version": v})).into_response()
}

/// `POST /_sandbox/credentials` `{"username": U, "password": P}`: the pod accepts these
/// basic-auth credentials from the next request on (and no longer the old ones), as a Dataplane
/// sidecar restarted with a rotated password would.
pub(super) async fn set_credentials(
    State(core): State<Arc<PodCore>>,
    body: axum::body::Bytes,
) -> Response {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Creds {
        username: String,
        password: String,
    }
    match serde_json::from_slice::<Creds>(&body) {
        Ok(c) if !c.username.is_empty() => {
            core.set_credentials(&c.username, &c.password);
            axum::Json(json!({"ok": true})).into_response()
        }
        Ok(_) => error(400, "username must not be empty"),
        Err(e) => error(400, format!("body: {e}")),
    }
}

/// `POST /_sandbox/edit-config[?bump_version=true]`: replaces the file behind the API's back and
/// reloads HAProxy; with `bump_version` the version also moves (the real API's inotify watcher;
/// ecosystem.md §A.3), otherwise only the content changes.
pub(super) async fn edit_config(
    State(core): State<Arc<PodCore>>,
    Query(q): Query<HashMap<String, String>>,
    body: String,
) -> Response {
    if core.settings.loopback
        && let Err(msg) = crate::sandbox::pods::safety::check_outbound(&body)
    {
        return error(400, msg);
    }
    let mut st = core.cfg.lock().await;
    let v = if qbool(&q, "bump_version") {
        core.version() + 1
    } else {
        core.version()
    };
    if let Err(e) = core.store_config(&mut st, &body, v) {
        return error(500, e.to_string());
    }
    let res = core.reload_locked(&mut st).await;
    axum::Json(json!({
        "version": v,
        "reload": if res.is_ok() { "succeeded" } else { "failed" },
        "response": res.err().unwrap_or_default(),
    }))
    .into_response()
}

/// `POST /_sandbox/edit-file?path=/etc/haproxy/...`: drift in an auxiliary file (no reload).
pub(super) async fn edit_file(
    State(core): State<Arc<PodCore>>,
    Query(q): Query<HashMap<String, String>>,
    body: axum::body::Bytes,
) -> Response {
    let Some(pod_path) = q.get("path") else {
        return error(400, "path query parameter required");
    };
    let Some(host) = core
        .fs
        .host_path(pod_path)
        .filter(|_| pod_path.starts_with("/etc/haproxy/"))
    else {
        return error(400, format!("{pod_path} is not under /etc/haproxy/"));
    };
    if let Some(parent) = host.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    match write_atomic(&host, &body) {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => error(500, e.to_string()),
    }
}

/// `POST /_sandbox/kill`: the pod disappears (processes killed, endpoint closed, Pod object
/// deleted by the hook); answered before it happens.
pub(super) async fn kill(State(core): State<Arc<PodCore>>) -> Response {
    let c = core.clone();
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        c.kill().await;
    });
    axum::Json(json!({"killed": core.name})).into_response()
}
