//! The classification every boundary error maps onto: [`ErrorKind`] (how to react, in three
//! words) and [`ErrorClass`] (the one table of API error classes every worker uses).
//!
//! # The error-class table
//!
//! What a failed call to an API (the Kubernetes API server; the same HTTP statuses from a
//! Dataplane API read the same way) means, and what a worker does about it (DESIGN.md J3, J11:
//! work is never acked unfinished; only a classified permanent rejection, recorded and shown,
//! ends an item). [`ErrorClass::of_status`] maps an HTTP answer; timeouts and connection
//! failures are [`ErrorClass::Unreachable`]; the fencing refusals (a Lease no longer valid, an
//! object stamped by a newer term) are [`ErrorClass::Fenced`].
//!
//! | class | answers | action | shown |
//! |---|---|---|---|
//! | `Conflict` | 409 | re-read, then retry (backoff) | debug |
//! | `NotFound` | 404 naming an object | re-read (the object went away meanwhile), then retry | debug |
//! | `Throttled` | 429 | retry after `Retry-After` (at least), capped backoff | warn |
//! | `Unavailable` | 5xx (not too large) | retry, capped backoff, forever | warn |
//! | `Unreachable` | timeout, connection, TLS | retry, capped backoff, forever | warn |
//! | `Unauthorized` | 401 | retry, capped backoff, forever | warn naming the credentials; condition; metric |
//! | `Forbidden` | 403 | retry, capped backoff, forever | warn naming the RBAC rule; condition; metric |
//! | `MissingResourceType` | 404 "the server could not find the requested resource", or the plain "404 page not found" of a group not served | retry, capped backoff, forever | warn naming what to apply (the CRDs); metric |
//! | `OtherClientError` | any other 4xx (405, 410, 415, ...) | retry, capped backoff, forever | warn |
//! | `Rejected` | 400, 422 | **permanent**: record the reason, show it, ack | warn; condition; Kubernetes Event; metric |
//! | `TooLarge` | 413; a 5xx whose message says the request is too large (etcd's limit); a 422 whose message says a field is too long in bytes (a Secret's or ConfigMap's 1 MiB of data) | **permanent**: as `Rejected` (condition `SizeLimitExceeded`) | as `Rejected` |
//! | `Unbuildable` | no request: the content to send is not in the journal or not text | **permanent**: as `Rejected` | as `Rejected` |
//! | `Fenced` | no request: the Lease guard refused, or the object carries a newer term | stop this term's writes at once; never retried, never acked (the next term takes the item) | warn |
//!
//! Only `Rejected`, `TooLarge` and `Unbuildable` end an item ([`ErrorClass::is_permanent`]).

/// How a component reacts to a failed external call (STYLE.md 2.4).
///
/// Each boundary error type (`DataplaneError`, the Kubernetes errors) implements
/// `fn kind(&self) -> ErrorKind`; the pure `decide` functions consume only this value (or the
/// finer [`ErrorClass`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// Transient: connection failures, timeouts, 5xx, 429. Retry with bounded backoff.
    Retryable,
    /// Optimistic-concurrency conflict (stale configuration version, object already exists):
    /// re-read the current state, then retry.
    Conflict,
    /// Permanent for this input (400 rejected config, failed reload): do not retry the same
    /// request; record the error.
    Fatal,
}

impl ErrorKind {
    /// Bounded label for metrics: `retryable`, `conflict` or `fatal`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Retryable => "retryable",
            ErrorKind::Conflict => "conflict",
            ErrorKind::Fatal => "fatal",
        }
    }
}

/// The class of a failed API call (see the module's table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// 409: the object changed since it was read.
    Conflict,
    /// 404 for a named object: it went away (or is not there yet).
    NotFound,
    /// 429.
    Throttled,
    /// 5xx other than a size rejection.
    Unavailable,
    /// No answer: timeout, connection or TLS failure.
    Unreachable,
    /// 401: the credentials are not accepted.
    Unauthorized,
    /// 403: RBAC denies the call.
    Forbidden,
    /// 404 for the resource type itself (its CRD is not installed).
    MissingResourceType,
    /// Any other 4xx.
    OtherClientError,
    /// 400 or 422: the request itself is refused (schema, validation).
    Rejected,
    /// 413, a 5xx whose message says the request is too large (etcd's limit), or a 422
    /// saying a field is too long in bytes (a Secret's or ConfigMap's data over 1 MiB).
    TooLarge,
    /// The request could not be built (its content is missing or not text).
    Unbuildable,
    /// This replica may no longer write: the Lease guard refused, or the object is stamped by
    /// a newer term (DESIGN.md J7).
    Fenced,
}

/// The message the API server gives a 404 for a resource type it does not serve, in a group
/// it serves.
const MISSING_TYPE_MESSAGE: &str = "the server could not find the requested resource";

/// The body of kube-apiserver's 404 for a path no handler serves: a group/version it does not
/// serve at all (no CRD of the group installed). Plain text, not a `Status` (kube's client
/// reports it as the message "404 page not found"); found against the real kube-apiserver,
/// where the emulator's JSON answer had hidden it (issue 27).
const NO_HANDLER_MESSAGE: &str = "404 page not found";

impl ErrorClass {
    /// The class of an HTTP answer `status` whose body message is `message` (matched without
    /// regard to case: "too large" for size rejections, the API server's "could not find the
    /// requested resource" for a type it does not serve, or its plain "404 page not found" for
    /// a group it does not serve).
    #[must_use]
    pub fn of_status(status: u16, message: &str) -> ErrorClass {
        let message = message.to_ascii_lowercase();
        match status {
            413 => ErrorClass::TooLarge,
            s if s >= 500 && message.contains("too large") => ErrorClass::TooLarge,
            // kube-apiserver's `field.TooLong` with a byte limit: "data: Too long: must have
            // at most 1048576 bytes" (newer releases: "may not be more than ... bytes").
            422 if message.contains("too long:") && message.contains(" bytes") => {
                ErrorClass::TooLarge
            }
            400 | 422 => ErrorClass::Rejected,
            401 => ErrorClass::Unauthorized,
            403 => ErrorClass::Forbidden,
            404 if message.contains(MISSING_TYPE_MESSAGE)
                || message.contains(NO_HANDLER_MESSAGE) =>
            {
                ErrorClass::MissingResourceType
            }
            404 => ErrorClass::NotFound,
            409 => ErrorClass::Conflict,
            429 => ErrorClass::Throttled,
            s if s >= 500 => ErrorClass::Unavailable,
            _ => ErrorClass::OtherClientError,
        }
    }

    /// Whether the class ends an item: recorded with its reason, shown, then acked.
    #[must_use]
    pub fn is_permanent(self) -> bool {
        matches!(
            self,
            ErrorClass::Rejected | ErrorClass::TooLarge | ErrorClass::Unbuildable
        )
    }

    /// Whether an operator must act before a retry can succeed (credentials, RBAC, CRDs): still
    /// retried, and shown (warn naming the fix, a condition where possible, a metric).
    #[must_use]
    pub fn needs_operator(self) -> bool {
        matches!(
            self,
            ErrorClass::Unauthorized | ErrorClass::Forbidden | ErrorClass::MissingResourceType
        )
    }

    /// The coarse reaction: `Conflict` for a re-read (409, a named 404), `Fatal` for the
    /// permanent classes and fencing, `Retryable` for the rest.
    #[must_use]
    pub fn kind(self) -> ErrorKind {
        match self {
            ErrorClass::Conflict | ErrorClass::NotFound => ErrorKind::Conflict,
            c if c.is_permanent() => ErrorKind::Fatal,
            ErrorClass::Fenced => ErrorKind::Fatal,
            _ => ErrorKind::Retryable,
        }
    }

    /// Bounded metric label (snake case of the class).
    #[must_use]
    pub fn metric_label(self) -> &'static str {
        match self {
            ErrorClass::Conflict => "conflict",
            ErrorClass::NotFound => "not_found",
            ErrorClass::Throttled => "throttled",
            ErrorClass::Unavailable => "unavailable",
            ErrorClass::Unreachable => "unreachable",
            ErrorClass::Unauthorized => "unauthorized",
            ErrorClass::Forbidden => "forbidden",
            ErrorClass::MissingResourceType => "missing_resource_type",
            ErrorClass::OtherClientError => "other_client_error",
            ErrorClass::Rejected => "rejected",
            ErrorClass::TooLarge => "too_large",
            ErrorClass::Unbuildable => "unbuildable",
            ErrorClass::Fenced => "fenced",
        }
    }
}

/// `e` with every cause after it, joined by `: ` (what `{:#}` prints for an `anyhow::Error`), for
/// journal records, logs, HTTP answers and one-line error output. A cause whose text the line
/// already holds (a message that shows its source as `{0}`) is not repeated.
#[must_use]
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        let cause = s.to_string();
        if !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
        src = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table() {
        use ErrorClass as C;
        let missing = "the server could not find the requested resource (get haproxycfgs.x)";
        // (status, message, class, permanent, needs operator, kind)
        let rows = [
            (409, "", C::Conflict, false, false, ErrorKind::Conflict),
            (
                404,
                "haproxycfgs \"x\" not found",
                C::NotFound,
                false,
                false,
                ErrorKind::Conflict,
            ),
            (429, "", C::Throttled, false, false, ErrorKind::Retryable),
            (
                500,
                "boom",
                C::Unavailable,
                false,
                false,
                ErrorKind::Retryable,
            ),
            (503, "", C::Unavailable, false, false, ErrorKind::Retryable),
            (401, "", C::Unauthorized, false, true, ErrorKind::Retryable),
            (
                403,
                "forbidden",
                C::Forbidden,
                false,
                true,
                ErrorKind::Retryable,
            ),
            (
                404,
                missing,
                C::MissingResourceType,
                false,
                true,
                ErrorKind::Retryable,
            ),
            // kube-apiserver with no CRD of the group installed (plain text, as kube reports it).
            (
                404,
                "404 page not found",
                C::MissingResourceType,
                false,
                true,
                ErrorKind::Retryable,
            ),
            (
                405,
                "",
                C::OtherClientError,
                false,
                false,
                ErrorKind::Retryable,
            ),
            (
                410,
                "",
                C::OtherClientError,
                false,
                false,
                ErrorKind::Retryable,
            ),
            (400, "", C::Rejected, true, false, ErrorKind::Fatal),
            (422, "invalid", C::Rejected, true, false, ErrorKind::Fatal),
            (413, "", C::TooLarge, true, false, ErrorKind::Fatal),
            (
                500,
                "etcdserver: request is too large",
                C::TooLarge,
                true,
                false,
                ErrorKind::Fatal,
            ),
            (
                422,
                "Secret \"x\" is invalid: data: Too long: must have at most 1048576 bytes",
                C::TooLarge,
                true,
                false,
                ErrorKind::Fatal,
            ),
            (
                422,
                "data: Too long: may not be more than 1048576 bytes",
                C::TooLarge,
                true,
                false,
                ErrorKind::Fatal,
            ),
            (
                422,
                "metadata.name: Too long: must be no more than 63 characters",
                C::Rejected,
                true,
                false,
                ErrorKind::Fatal,
            ),
            (
                503,
                "Request Too Large",
                C::TooLarge,
                true,
                false,
                ErrorKind::Fatal,
            ),
        ];
        for (status, message, class, permanent, operator, kind) in rows {
            let c = ErrorClass::of_status(status, message);
            assert_eq!(c, class, "{status} {message:?}");
            assert_eq!(c.is_permanent(), permanent, "{status}");
            assert_eq!(c.needs_operator(), operator, "{status}");
            assert_eq!(c.kind(), kind, "{status}");
        }
        let c = C::Unreachable;
        assert!(!c.is_permanent() && !c.needs_operator());
        assert_eq!(c.kind(), ErrorKind::Retryable);
        assert!(C::Unbuildable.is_permanent());
        assert!(!C::Fenced.is_permanent() && C::Fenced.kind() == ErrorKind::Fatal);
        // Only three classes end an item.
        let all = [
            C::Conflict,
            C::NotFound,
            C::Throttled,
            C::Unavailable,
            C::Unreachable,
            C::Unauthorized,
            C::Forbidden,
            C::MissingResourceType,
            C::OtherClientError,
            C::Rejected,
            C::TooLarge,
            C::Unbuildable,
            C::Fenced,
        ];
        let permanent: Vec<_> = all.iter().filter(|c| c.is_permanent()).collect();
        assert_eq!(permanent, [&C::Rejected, &C::TooLarge, &C::Unbuildable]);
        let labels: std::collections::BTreeSet<_> = all.iter().map(|c| c.metric_label()).collect();
        assert_eq!(labels.len(), all.len());
    }

    /// An error whose message already shows its cause (`{0}` in the message, or a wrapper that
    /// repeats it) is printed with that text once; every other cause follows with `: `.
    #[test]
    fn chain_prints_every_cause_once() {
        #[derive(Debug)]
        struct E(&'static str, Option<Box<E>>);
        impl std::fmt::Display for E {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.0)
            }
        }
        impl std::error::Error for E {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                self.1.as_deref().map(|e| e as _)
            }
        }
        let io = E("connection refused", None);
        let repeats = E(
            "journal commit failed: connection refused",
            Some(Box::new(io)),
        );
        let outer = E("ingest render not journaled", Some(Box::new(repeats)));
        assert_eq!(
            chain(&outer),
            "ingest render not journaled: journal commit failed: connection refused"
        );
        assert_eq!(chain(&E("alone", None)), "alone");
    }
}
