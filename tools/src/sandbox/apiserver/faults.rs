//! The fault script and the request log behind `/_sandbox/faults` and `/_sandbox/requests`.

use serde::{Deserialize, Serialize};

/// One scripted fault, as POSTed to `/_sandbox/faults`.
///
/// Regexes are unanchored and match the method and the path without the query; a request matches
/// when its method matches `method`, its path matches `path` and, when `path_not` is given, its
/// path does not match `path_not` (e.g. every request but the Lease's: `"path_not": "/leases/"`).
/// Faults are tried in the order they were added; the first match applies. `delay_ms` delays, then the fault either
/// answers `status` (a Kubernetes `Status` body, with `Retry-After` when `retry_after_s` is set),
/// closes the connection without an answer (`drop`), or forwards the request; with
/// `drop_after_apply` it forwards the request and then closes the connection without sending
/// the answer: a write lands and its client never learns that it did (an answer lost after the
/// API server committed, which a client sees as a failed or timed-out request).
/// `end_watch` ends the matching watch streams that are open when the fault is added (up to
/// `times` of them); with `times` left over, it also ends that many matching watches opened later,
/// right after their replayed events. An `end_watch` fault is kept for ordinary requests only when
/// it also has a `status`, `drop` or `delay_ms`.
///
/// Unknown fields, a status outside `100..=599` and contradictions (`drop` with `status`,
/// `retry_after_s` without `status`, `drop_after_apply` with `drop` or `status`, a fault that
/// would do nothing) are refused
/// ([`crate::sandbox::control`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Fault {
    /// Regex on the HTTP method; empty matches all.
    pub method: String,
    /// Regex on the path; empty matches all.
    pub path: String,
    /// Regex the path must *not* match; absent or empty excludes nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path_not: Option<String>,
    /// Status code to answer.
    pub status: Option<u16>,
    /// How many requests the fault applies to; absent or 0 = every time.
    pub times: Option<u32>,
    /// `Retry-After` header value, seconds.
    pub retry_after_s: Option<u64>,
    /// Delay before answering or forwarding, milliseconds.
    pub delay_ms: Option<u64>,
    /// Close the connection without an answer.
    pub drop: bool,
    /// Forward the request, then close the connection without its answer.
    pub drop_after_apply: bool,
    /// End matching open watch streams.
    pub end_watch: bool,
}

impl Fault {
    /// Answer `status` to the first `times` requests whose method and path match the regexes
    /// `method` and `path` (`times` 0: every one).
    #[must_use]
    pub fn answer(method: &str, path: &str, status: u16, times: u32) -> Fault {
        Fault {
            method: method.into(),
            path: path.into(),
            status: Some(status),
            times: Some(times),
            ..Fault::default()
        }
    }
}

/// A fault with its compiled regexes and remaining count.
#[derive(Debug, Clone)]
pub struct ArmedFault {
    /// The fault as posted.
    pub spec: Fault,
    method: regex::Regex,
    path: regex::Regex,
    path_not: Option<regex::Regex>,
    /// Remaining applications; `None` = unlimited.
    pub remaining: Option<u32>,
}

impl ArmedFault {
    /// Compiles a fault's regexes.
    ///
    /// # Errors
    /// The message (naming the field) when a pattern does not compile or the fault is invalid.
    pub fn new(spec: Fault) -> Result<Self, String> {
        if spec.drop_after_apply && (spec.drop || spec.status.is_some()) {
            return Err(
                "drop_after_apply: the request is forwarded and its answer dropped; \
                        give it without drop and status"
                    .into(),
            );
        }
        crate::sandbox::control::check_request_fault(
            spec.status,
            spec.retry_after_s,
            spec.delay_ms,
            spec.drop || spec.drop_after_apply,
            spec.end_watch,
        )?;
        let method = regex::Regex::new(&spec.method).map_err(|e| format!("method: {e}"))?;
        let path = regex::Regex::new(&spec.path).map_err(|e| format!("path: {e}"))?;
        let path_not = match spec.path_not.as_deref() {
            None | Some("") => None,
            Some(p) => Some(regex::Regex::new(p).map_err(|e| format!("path_not: {e}"))?),
        };
        let remaining = spec.times.filter(|t| *t > 0);
        Ok(Self {
            spec,
            method,
            path,
            path_not,
            remaining,
        })
    }

    /// Whether the fault matches a request.
    pub fn matches(&self, method: &str, path: &str) -> bool {
        self.remaining != Some(0)
            && self.method.is_match(method)
            && self.path.is_match(path)
            && !self.path_not.as_ref().is_some_and(|n| n.is_match(path))
    }

    /// Uses one application.
    pub fn consume(&mut self) {
        if let Some(r) = self.remaining.as_mut() {
            *r = r.saturating_sub(1);
        }
    }

    /// Whether the fault's `times` are used up (it is then dropped from the script).
    pub fn spent(&self) -> bool {
        self.remaining == Some(0)
    }

    /// The fault as `GET /_sandbox/faults` lists it: as posted, plus `remaining`.
    pub fn listed(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(&self.spec).unwrap_or_default();
        if let Some(m) = v.as_object_mut() {
            m.insert("remaining".into(), serde_json::json!(self.remaining));
        }
        v
    }

    /// Whether the fault acts on ordinary requests (not only on watch streams).
    pub fn acts_on_requests(&self) -> bool {
        self.spec.status.is_some()
            || self.spec.drop
            || self.spec.drop_after_apply
            || self.spec.delay_ms.is_some_and(|d| d > 0)
            || !self.spec.end_watch
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn fault(path: &str, path_not: Option<&str>) -> Result<ArmedFault, String> {
        ArmedFault::new(Fault {
            path: path.into(),
            path_not: path_not.map(str::to_owned),
            status: Some(503),
            ..Fault::default()
        })
    }

    #[test]
    fn path_not_excludes_the_paths_it_matches() {
        let lease = "/apis/coordination.k8s.io/v1/namespaces/ns/leases/haptic-leader";
        let cfg = "/apis/haproxy-haptic.org/v1alpha1/namespaces/ns/haproxycfgs/edge";
        let cases = [
            ("", None, lease, true),
            ("", None, cfg, true),
            ("", Some("/leases/"), lease, false),
            ("", Some("/leases/"), cfg, true),
            ("", Some(""), lease, true),
            ("haproxycfgs", Some("/status$"), cfg, true),
            (
                "haproxycfgs",
                Some("/status$"),
                &format!("{cfg}/status"),
                false,
            ),
        ];
        for (path, not, request, want) in cases {
            let f = fault(path, not).unwrap();
            assert_eq!(
                f.matches("PUT", request),
                want,
                "{path:?} {not:?} {request}"
            );
        }
    }

    #[test]
    fn a_bad_path_not_is_refused_naming_the_field() {
        let e = fault("", Some("(")).unwrap_err();
        assert!(e.starts_with("path_not:"), "{e}");
        // Unknown fields are still refused (the field is spelled as documented).
        let e = crate::sandbox::control::parse_json::<Fault>(br#"{"pathnot":"x","status":503}"#)
            .unwrap_err();
        assert!(e.contains("pathnot"), "{e}");
        let ok = crate::sandbox::control::parse_json::<Fault>(
            br#"{"path_not":"/leases/","status":503}"#,
        )
        .unwrap();
        assert_eq!(ok.path_not.as_deref(), Some("/leases/"));
    }

    #[test]
    fn drop_after_apply_acts_alone_and_is_refused_with_drop_or_status() {
        let f = ArmedFault::new(Fault {
            method: "PUT".into(),
            drop_after_apply: true,
            ..Fault::default()
        })
        .unwrap();
        assert!(f.acts_on_requests());
        for (drop, status) in [(true, None), (false, Some(500))] {
            let e = ArmedFault::new(Fault {
                drop_after_apply: true,
                drop,
                status,
                ..Fault::default()
            })
            .unwrap_err();
            assert!(e.starts_with("drop_after_apply:"), "{e}");
        }
    }
}
