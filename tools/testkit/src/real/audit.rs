//! The real API server's request log: its audit log (`--audit-log-path`, level Metadata,
//! written before the answer is sent: the log backend's default mode is `blocking`).
//!
//! ```text
//!  audit.log (JSON lines) ──read from the offset of the last clear──► one AuditEvent per
//!  auditID (a watch logs ResponseStarted, then ResponseComplete when it ends: the later stage
//!  wins) ──► RequestRecord { method (from the verb), path, query, status, at, user_agent }
//! ```
//!
//! What the emulator's log has and this one lacks: the request's HTTP method is derived from the
//! verb (`get`/`list`/`watch` GET, `create` POST, `update` PUT, `patch` PATCH, `delete`/
//! `deletecollection` DELETE), and requests the API server's own loopback client and health
//! probes make are left out by the policy. What it adds: the authenticated user and the
//! authorizer's decision and reason ([`AuditEvent`]).

use std::collections::HashMap;
use std::io::{Read as _, Seek as _};
use std::path::Path;

use haptic_tools::sandbox::control::RequestRecord;
use serde::Deserialize;

/// One request as the API server audited it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditEvent {
    /// The authorizer's verb: `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, ...
    pub verb: String,
    /// Path and query as sent.
    pub request_uri: String,
    /// The authenticated user, e.g. `system:serviceaccount:<ns>:haptic`.
    pub user: String,
    /// `User-Agent`.
    pub user_agent: String,
    /// The answer's HTTP status (0 when the stage logged none).
    pub code: u16,
    /// `objectRef.apiGroup` (`""` for the core group and non-resource URLs).
    pub group: String,
    /// `objectRef.resource` (`""` for a non-resource URL).
    pub resource: String,
    /// `objectRef.subresource`, e.g. `status`.
    pub subresource: String,
    /// `objectRef.namespace`.
    pub namespace: String,
    /// `annotations["authorization.k8s.io/decision"]`: `allow` or `forbid`.
    pub decision: String,
    /// `annotations["authorization.k8s.io/reason"]`, e.g. `RBAC: allowed by RoleBinding
    /// "haptic/ns" of Role "haptic" to ServiceAccount "haptic/ns"`.
    pub reason: String,
    /// When the request arrived (RFC 3339, microseconds).
    pub at: String,
}

impl AuditEvent {
    /// The request as the emulator's log records it.
    #[must_use]
    pub fn record(&self) -> RequestRecord {
        let (path, query) = self
            .request_uri
            .split_once('?')
            .unwrap_or((&self.request_uri, ""));
        let method = match self.verb.as_str() {
            "create" => "POST",
            "update" => "PUT",
            "patch" => "PATCH",
            "delete" | "deletecollection" => "DELETE",
            _ => "GET",
        };
        RequestRecord {
            method: method.to_owned(),
            path: path.to_owned(),
            query: query.to_owned(),
            status: self.code,
            at: self.at.clone(),
            user_agent: self.user_agent.clone(),
        }
    }

    /// `resource` or `resource/subresource`.
    #[must_use]
    pub fn resource_path(&self) -> String {
        if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Line {
    #[serde(rename = "auditID")]
    audit_id: String,
    #[serde(default)]
    verb: String,
    #[serde(rename = "requestURI", default)]
    request_uri: String,
    #[serde(default)]
    user: User,
    #[serde(default)]
    user_agent: String,
    #[serde(default)]
    object_ref: ObjectRef,
    #[serde(default)]
    response_status: Option<ResponseStatus>,
    #[serde(default)]
    annotations: HashMap<String, String>,
    #[serde(default)]
    request_received_timestamp: String,
}

#[derive(Deserialize, Default)]
struct User {
    #[serde(default)]
    username: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct ObjectRef {
    #[serde(default)]
    api_group: String,
    #[serde(default)]
    resource: String,
    #[serde(default)]
    subresource: String,
    #[serde(default)]
    namespace: String,
}

#[derive(Deserialize)]
struct ResponseStatus {
    #[serde(default)]
    code: u16,
}

/// The audited requests in `log` from byte `offset` on, oldest first, one per request.
///
/// # Errors
/// When the file cannot be read, or a complete line does not parse (named by its number).
pub fn read(log: &Path, offset: u64) -> anyhow::Result<Vec<AuditEvent>> {
    let mut file = match std::fs::File::open(log) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    file.seek(std::io::SeekFrom::Start(offset))?;
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    let mut out: Vec<AuditEvent> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    // A line still being written has no newline yet: only complete lines count.
    let complete = text.rfind('\n').map_or("", |i| &text[..i]);
    for (n, line) in complete.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let l: Line = serde_json::from_str(line).map_err(|e| {
            anyhow::anyhow!("{} line {} (from byte {offset}): {e}", log.display(), n + 1)
        })?;
        let event = AuditEvent {
            verb: l.verb,
            request_uri: l.request_uri,
            user: l.user.username,
            user_agent: l.user_agent,
            code: l.response_status.map_or(0, |s| s.code),
            group: l.object_ref.api_group,
            resource: l.object_ref.resource,
            subresource: l.object_ref.subresource,
            namespace: l.object_ref.namespace,
            decision: l
                .annotations
                .get("authorization.k8s.io/decision")
                .cloned()
                .unwrap_or_default(),
            reason: l
                .annotations
                .get("authorization.k8s.io/reason")
                .cloned()
                .unwrap_or_default(),
            at: l.request_received_timestamp,
        };
        match index.get(&l.audit_id) {
            Some(&i) => {
                // A later stage of the same request: keep its code, and the earlier fields it
                // may not repeat.
                let e = &mut out[i];
                if event.code != 0 {
                    e.code = event.code;
                }
                if e.decision.is_empty() {
                    e.decision = event.decision;
                    e.reason = event.reason;
                }
            }
            None => {
                index.insert(l.audit_id, out.len());
                out.push(event);
            }
        }
    }
    Ok(out)
}

/// The offset just past the last complete line of `log` (what a clear remembers; 0 when it does
/// not exist yet).
#[must_use]
pub fn end(log: &Path) -> u64 {
    let text = std::fs::read(log).unwrap_or_default();
    text.iter()
        .rposition(|b| *b == b'\n')
        .map_or(0, |i| i as u64 + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINES: &str = r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a1","stage":"ResponseStarted","requestURI":"/api/v1/namespaces/n/pods?labelSelector=app%3Dx\u0026watch=true","verb":"watch","user":{"username":"system:serviceaccount:n:haptic"},"userAgent":"haptic/0 (solo)","objectRef":{"resource":"pods","namespace":"n","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":200},"requestReceivedTimestamp":"2026-12-01T10:00:00.000001Z","annotations":{"authorization.k8s.io/decision":"allow","authorization.k8s.io/reason":"RBAC: allowed by RoleBinding \"haptic/n\" of Role \"haptic\" to ServiceAccount \"haptic/n\""}}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a2","stage":"ResponseComplete","requestURI":"/apis/haproxy-haptic.org/v1alpha1/namespaces/n/haproxycfgs/c/status","verb":"update","user":{"username":"system:serviceaccount:n:haptic"},"userAgent":"haptic/0 (solo)","objectRef":{"resource":"haproxycfgs","namespace":"n","name":"c","apiGroup":"haproxy-haptic.org","apiVersion":"v1alpha1","subresource":"status"},"responseStatus":{"metadata":{},"status":"Failure","reason":"Forbidden","code":403},"requestReceivedTimestamp":"2026-12-01T10:00:01.000001Z","annotations":{"authorization.k8s.io/decision":"forbid","authorization.k8s.io/reason":""}}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a1","stage":"ResponseComplete","requestURI":"/api/v1/namespaces/n/pods?labelSelector=app%3Dx\u0026watch=true","verb":"watch","user":{"username":"system:serviceaccount:n:haptic"},"userAgent":"haptic/0 (solo)","objectRef":{"resource":"pods","namespace":"n","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":200},"requestReceivedTimestamp":"2026-12-01T10:00:00.000001Z"}
{"kind":"Event","auditID":"a3","#;

    #[test]
    fn one_event_per_request_mapped_to_the_emulators_record() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("audit.log");
        std::fs::write(&log, LINES).unwrap();
        let events = read(&log, 0).unwrap();
        assert_eq!(events.len(), 2, "{events:?}");
        let watch = &events[0];
        assert_eq!(watch.decision, "allow");
        assert!(watch.reason.contains("RoleBinding \"haptic/n\""));
        let r = watch.record();
        assert_eq!(
            (r.method.as_str(), r.path.as_str(), r.status),
            ("GET", "/api/v1/namespaces/n/pods", 200)
        );
        assert_eq!(r.query, "labelSelector=app%3Dx&watch=true");
        assert_eq!(r.user_agent, "haptic/0 (solo)");
        let status = &events[1];
        assert_eq!(status.resource_path(), "haproxycfgs/status");
        assert_eq!(status.group, "haproxy-haptic.org");
        assert_eq!((status.record().method.as_str(), status.code), ("PUT", 403));
        assert_eq!(status.decision, "forbid");
        // From an offset: only what came after.
        let second = LINES.find("\n{").unwrap() as u64 + 1;
        assert_eq!(read(&log, second).unwrap().len(), 2);
        assert!(read(&dir.path().join("absent"), 0).unwrap().is_empty());
    }
}
