//! The classification every boundary error maps onto.

/// How a component reacts to a failed external call (STYLE.md 2.4).
///
/// Each boundary error type (`DataplaneError`, the Kubernetes errors) implements
/// `fn kind(&self) -> ErrorKind`; the pure `decide` functions consume only this value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// Transient: connection failures, timeouts, 5xx, 429. Retry with bounded backoff.
    Retryable,
    /// Optimistic-concurrency conflict (stale configuration version, object already exists):
    /// re-read the current state, then retry.
    Conflict,
    /// Permanent for this input (400 rejected config, 401/403, 404, failed reload): do not
    /// retry the same request; record the error.
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

/// `e` with every cause after it, joined by `: ` (what `{:#}` prints for an `anyhow::Error`), for
/// journal records and one-line error output.
#[must_use]
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        text.push_str(": ");
        text.push_str(&s.to_string());
        src = s.source();
    }
    text
}
