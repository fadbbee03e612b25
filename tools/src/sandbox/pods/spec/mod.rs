//! The Data Plane API's published OpenAPI document as the contract of every exchange with a
//! sandbox pod (issue 24, "The spec as the contract").
//!
//! ```text
//!  client ──request──► pod endpoint (dataplane::handle) ──► stand-in handlers ──answer──► client
//!                           │ buffered request + answer (only when the check is on)
//!                           ▼
//!                      PodSpecLog::record ─► Contract (v32-spec.json, parsed once per process;
//!                           │                 the version a pod reports in /v3/info picks v30/v32/v33)
//!                           ▼                 check.rs: path → operation, method, parameters,
//!                      violations per pod      body schema; status, headers, body schema
//!                      GET/DELETE /_sandbox/spec-violations, Sandbox::spec_violations(),
//!                      a panic when an enforcing Sandbox ends with any (tests)
//! ```
//!
//! What is checked, per exchange:
//! - the request (the client's side, [`Side::Request`]): the path is below the API's base
//!   (`/v3`) and matches a path template; the method is an operation of it; every query parameter
//!   is one the operation declares, its value parses as the declared type and meets the schema;
//!   required ones are present; path parameters meet their schema; a body has a declared content
//!   type and meets that content's schema (JSON; text; a multipart form as the object of its
//!   part names); a required body is present;
//! - the answer (the stand-in's side, [`Side::Response`]): the status is listed by the operation
//!   (exactly, or by an `NXX` range); `default` covers only errors (4xx, 5xx) and then holds the
//!   body to the spec's error schema; `Reload-ID` and `Configuration-Version` are present where the
//!   spec declares them, and every declared header present meets its schema; the body has a
//!   declared content type and meets its schema, and there is none where the spec declares none.
//!
//! OpenAPI 3.0 schema objects are converted to JSON Schema draft 4 (`schema.rs`: `nullable`,
//! `readOnly`, `allOf` merging, `$ref` inlining) and validated by the `jsonschema` crate.
//! Where a real `dataplaneapi` answers otherwise than its spec, the difference is allowed by name
//! in [`allow`] and nowhere else.
//!
//! A violation names the operation (operationId, method, path template) and the field as a JSON
//! pointer into the exchange seen as one document: `/path`, `/method`,
//! `/parameters/{path,query}/<name>`, `/headers/<name>`, `/body/<pointer into the body>`,
//! `/status`. Requests under `/_sandbox/` are not checked.

pub mod allow;
mod answer;
mod check;
mod document;
mod schema;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

pub use check::{SeenAnswer, SeenRequest};
pub use document::{Contract, SPEC_DIR, SpecError, SpecVersion};
pub use schema::SchemaError;

/// Whether a sandbox holds its pods' exchanges to the spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum SpecCheck {
    /// No check (nothing buffered).
    Off,
    /// Check and record (log each violation, list them at `/_sandbox/spec-violations`).
    Record,
    /// Record, and make the sandbox's end (drop or shutdown) panic when any was recorded, unless
    /// already panicking: a test fails. The default.
    #[default]
    Enforce,
}

/// Whose side of the exchange broke the contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    /// The client's request (for tests of the controller: `src/dataplane/`).
    Request,
    /// The pod's answer (the sandbox's stand-in: `tools/src/sandbox/pods/dataplane/`).
    Response,
    /// The validator could not judge (a schema of the spec it cannot compile): never skipped.
    Validator,
}

impl std::fmt::Display for Side {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Side::Request => "request",
            Side::Response => "response",
            Side::Validator => "validator",
        })
    }
}

/// An operation of the spec.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Operation {
    /// `operationId` (a few operations have none).
    pub id: Option<String>,
    /// HTTP method, upper-case.
    pub method: String,
    /// The path template, below the base path (`/services/haproxy/configuration/global`).
    pub template: String,
}

impl std::fmt::Display for Operation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.id {
            Some(id) => write!(f, "{id} ({} {})", self.method, self.template),
            None => write!(f, "{} {}", self.method, self.template),
        }
    }
}

/// One break of the contract.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// The pod that saw it.
    pub pod: String,
    /// Whose side.
    pub side: Side,
    /// The document judged by.
    pub spec: SpecVersion,
    /// The operation, when the path and method matched one.
    pub operation: Option<Operation>,
    /// `METHOD /path?query` as sent.
    pub request: String,
    /// The answer's status (none when the connection was dropped by a scripted fault).
    pub status: Option<u16>,
    /// JSON pointer into the exchange (module doc): `/parameters/query/version`, `/body/weight`.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let op = self
            .operation
            .as_ref()
            .map_or_else(|| "no operation".to_owned(), ToString::to_string);
        write!(
            f,
            "{} {}: {op}, field {}: {}",
            self.pod, self.side, self.field, self.message
        )?;
        match self.status {
            Some(s) => write!(f, " [{} -> {s}; {}]", self.request, self.spec),
            None => write!(f, " [{}, unanswered; {}]", self.request, self.spec),
        }
    }
}

/// The violations grouped (same pod-independent side, operation, field and message), each with
/// its count and first occurrence, requests first: the text a failing test prints.
#[must_use]
pub fn report(violations: &[Violation]) -> String {
    /// What makes two violations the same: side, operation, field, message.
    type Kind = (Side, Option<Operation>, String, String);
    let mut groups: BTreeMap<Kind, (usize, &Violation)> = BTreeMap::new();
    for v in violations {
        groups
            .entry((
                v.side,
                v.operation.clone(),
                v.field.clone(),
                v.message.clone(),
            ))
            .and_modify(|(n, _)| *n += 1)
            .or_insert((1, v));
    }
    let mut out = format!(
        "{} violation(s) of the Data Plane API spec, {} distinct:\n",
        violations.len(),
        groups.len()
    );
    for (n, v) in groups.values() {
        out.push_str(&format!("  {n}x {v}\n"));
    }
    out
}

/// Most violations a pod keeps (the rest are counted as dropped).
pub const MAX_VIOLATIONS: usize = 10_000;

#[derive(Debug)]
struct LogState {
    version: SpecVersion,
    violations: Vec<Violation>,
    allowed: BTreeMap<&'static str, u64>,
    dropped: u64,
}

/// One pod's check: the spec version it reports, its violations and the allowances used.
#[derive(Debug)]
pub struct PodSpecLog {
    pod: String,
    mode: SpecCheck,
    state: Mutex<LogState>,
}

impl PodSpecLog {
    /// The log of pod `pod`, checking against `v32-spec.json` until the pod reports another
    /// version in `GET /v3/info`.
    #[must_use]
    pub fn new(pod: &str, mode: SpecCheck) -> PodSpecLog {
        PodSpecLog {
            pod: pod.to_owned(),
            mode,
            state: Mutex::new(LogState {
                version: SpecVersion::V32,
                violations: Vec::new(),
                allowed: BTreeMap::new(),
                dropped: 0,
            }),
        }
    }

    /// Whether exchanges are checked.
    #[must_use]
    pub fn enabled(&self) -> bool {
        self.mode != SpecCheck::Off
    }

    /// The mode.
    #[must_use]
    pub fn mode(&self) -> SpecCheck {
        self.mode
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LogState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Checks one exchange (`answer` is `None` when the connection was dropped unanswered) and
    /// records what it breaks.
    pub fn record(&self, req: &SeenRequest, answer: Option<&SeenAnswer>) {
        let mut extra = Vec::new();
        let version = {
            let mut st = self.lock();
            if let Some(reported) = reported_version(req, answer) {
                match SpecVersion::for_api_version(&reported) {
                    Some(v) => st.version = v,
                    None => extra.push(format!(
                        "the pod reports API version {reported:?}, for which no spec is published \
                         (v3.0 and later are)"
                    )),
                }
            }
            st.version
        };
        // A violation the contract's check did not name an operation for.
        let unnamed = |side: Side, field: &str, message: String| Violation {
            pod: String::new(),
            side,
            spec: version,
            operation: None,
            request: format!("{} {}", req.method, req.path),
            status: answer.map(|a| a.status),
            field: field.to_owned(),
            message,
        };
        let (mut violations, allowed) = match Contract::load(version) {
            Ok(c) => {
                let f = check::check(&c, req, answer);
                (f.violations, f.allowed)
            }
            Err(e) => (
                vec![unnamed(Side::Validator, "", e.to_string())],
                Vec::new(),
            ),
        };
        for message in extra {
            violations.push(unnamed(Side::Response, "/body/api/version", message));
        }
        let mut st = self.lock();
        for a in allowed {
            *st.allowed.entry(a.id).or_default() += 1;
        }
        for mut v in violations {
            v.pod.clone_from(&self.pod);
            tracing::warn!(pod = %self.pod, "Data Plane API spec violation: {v}");
            if st.violations.len() < MAX_VIOLATIONS {
                st.violations.push(v);
            } else {
                st.dropped += 1;
            }
        }
    }

    /// The violations recorded so far.
    #[must_use]
    pub fn violations(&self) -> Vec<Violation> {
        self.lock().violations.clone()
    }

    /// The violations recorded so far, forgotten here (a test that planted them takes them).
    pub fn take(&self) -> Vec<Violation> {
        let mut st = self.lock();
        st.dropped = 0;
        std::mem::take(&mut st.violations)
    }

    /// As `GET /_sandbox/spec-violations` answers: mode, spec, violations, allowances used.
    #[must_use]
    pub fn listed(&self) -> serde_json::Value {
        let st = self.lock();
        let allowed: Vec<serde_json::Value> = allow::ALL
            .iter()
            .map(|a| {
                serde_json::json!({
                    "id": a.id, "what": a.what, "reason": a.reason,
                    "count": st.allowed.get(a.id).copied().unwrap_or(0),
                })
            })
            .collect();
        serde_json::json!({
            "mode": self.mode,
            "spec": st.version,
            "violations": st.violations,
            "dropped": st.dropped,
            "allowed": allowed,
        })
    }
}

/// The `api.version` a `GET /v3/info` answer reports.
fn reported_version(req: &SeenRequest, answer: Option<&SeenAnswer>) -> Option<String> {
    let a = answer.filter(|a| a.status == 200)?;
    if req.method != "GET" || req.path.trim_end_matches('/') != "/v3/info" {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&a.body).ok()?;
    v.pointer("/api/version")?.as_str().map(str::to_owned)
}

/// Buffers a request's body: the request to pass on, and what the check sees.
///
/// # Errors
/// The body could not be read (the client went away).
///
/// # Cancel safety
/// Not cancel safe: the body read so far is lost.
pub async fn capture_request(req: Request) -> Result<(Request, SeenRequest), axum::Error> {
    let (parts, body) = req.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX).await?;
    let seen = SeenRequest {
        method: parts.method.to_string(),
        path: parts.uri.path().to_owned(),
        query: parts.uri.query().unwrap_or_default().to_owned(),
        content_type: parts
            .headers
            .get(axum::http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
        body: bytes.clone(),
    };
    Ok((Request::from_parts(parts, Body::from(bytes)), seen))
}

/// Buffers an answer's body: the answer to send, and what the check sees (`None` when the body
/// could not be read; the answer then carries an empty body).
///
/// # Cancel safety
/// Not cancel safe: the body read so far is lost.
pub async fn capture_answer(resp: Response) -> (Response, Option<SeenAnswer>) {
    let (parts, body) = resp.into_parts();
    match axum::body::to_bytes(body, usize::MAX).await {
        Ok(bytes) => {
            let seen = SeenAnswer {
                status: parts.status.as_u16(),
                headers: parts.headers.clone(),
                body: bytes.clone(),
            };
            (Response::from_parts(parts, Body::from(bytes)), Some(seen))
        }
        Err(_) => (Response::from_parts(parts, Body::empty()), None),
    }
}

/// `GET /_sandbox/spec-violations` of a pod.
pub(crate) async fn list(State(core): State<Arc<super::dataplane::PodCore>>) -> Response {
    axum::Json(core.spec.listed()).into_response()
}

/// `DELETE /_sandbox/spec-violations` of a pod: forgets them and answers what it forgot
/// (`{"ok": true, "cleared": N, "violations": [...]}`), so that a test sending an exchange off
/// the spec on purpose takes exactly what the validator saw.
pub(crate) async fn clear(State(core): State<Arc<super::dataplane::PodCore>>) -> Response {
    let taken = core.spec.take();
    axum::Json(serde_json::json!({"ok": true, "cleared": taken.len(), "violations": taken}))
        .into_response()
}

#[cfg(test)]
mod tests;
