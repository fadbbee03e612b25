//! Errors of the Kubernetes writer and their classification (STYLE.md 2.4, DESIGN.md section 3).

use std::time::Duration;

use haptic_journal::Term;

use crate::core::ErrorKind;

/// A failed write (or read) of the Kubernetes writer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WriteError {
    /// The API server answered with an error `Status`.
    #[error("api server answered {status} {reason} for {object}: {message}")]
    Api {
        /// `kind/name` of the object.
        object: String,
        /// HTTP status code.
        status: u16,
        /// Upstream reason (`Conflict`, `Invalid`, `TooManyRequests`, ...); may be empty.
        reason: String,
        /// Upstream message.
        message: String,
        /// `Retry-After` (from `details.retryAfterSeconds`), when the server gave one.
        retry_after: Option<Duration>,
    },
    /// No answer within the request timeout.
    #[error("request for {object} timed out after {after:?}")]
    Timeout {
        /// `kind/name` of the object.
        object: String,
        /// The timeout.
        after: Duration,
    },
    /// Connection, TLS or decoding failure below the API.
    #[error("transport failure for {object}")]
    Transport {
        /// `kind/name` of the object.
        object: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
    /// The object is stamped with a newer leadership term than ours: a successor leads
    /// (DESIGN.md J7). Never overwritten.
    #[error("{object} is stamped with term {theirs}, newer than ours ({ours})")]
    StaleTerm {
        /// `kind/name` of the object.
        object: String,
        /// Our term.
        ours: Term,
        /// The term on the object.
        theirs: Term,
    },
    /// The Lease check before a write refused (DESIGN.md J7): this replica may no longer be
    /// the leader. Nothing was sent; the caller stops acting for this term at once (no retry,
    /// nothing acked), its work stays queued for the next term.
    #[error("lease no longer valid for term {term}; write of {object} not sent")]
    Deposed {
        /// `kind/name` of the object.
        object: String,
        /// The writer's term.
        term: Term,
    },
    /// The render to publish could not be read from the journal or is not text.
    #[error("render content unavailable: {reason}")]
    Content {
        /// What is wrong.
        reason: String,
    },
}

impl WriteError {
    /// Maps a kube error for `object`.
    pub(crate) fn from_kube(object: &str, e: kube::Error) -> WriteError {
        match e {
            kube::Error::Api(s) => {
                let retry_after = s
                    .details
                    .as_ref()
                    .map(|d| d.retry_after_seconds)
                    .filter(|s| *s > 0)
                    .map(|s| Duration::from_secs(u64::from(s)));
                WriteError::Api {
                    object: object.to_owned(),
                    status: s.code,
                    reason: s.reason.clone(),
                    message: s.message.clone(),
                    retry_after,
                }
            }
            other => WriteError::Transport {
                object: object.to_owned(),
                source: other,
            },
        }
    }

    /// HTTP status of an API error.
    #[must_use]
    pub fn status(&self) -> Option<u16> {
        match self {
            WriteError::Api { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// True when the object is over the API server's size limit: a 413, or a 500 whose message
    /// says the request is too large (etcd's `request is too large`). Permanent.
    #[must_use]
    pub fn is_too_large(&self) -> bool {
        match self {
            WriteError::Api {
                status, message, ..
            } => {
                *status == 413
                    || (*status >= 500 && message.to_ascii_lowercase().contains("too large"))
            }
            _ => false,
        }
    }

    /// True for a 404.
    #[must_use]
    pub fn is_not_found(&self) -> bool {
        self.status() == Some(404)
    }

    /// How to react: 409 re-read (`Conflict`); 429, 5xx, timeouts and transport failures
    /// retry with backoff (`Retryable`); 400/403/404/422, too large and a stale term are
    /// permanent (`Fatal`). [`WriteError::Deposed`] is `Fatal` (never retried), but the caller
    /// must check [`WriteError::is_deposed`] first: it stops the term, it does not release work.
    #[must_use]
    pub fn kind(&self) -> ErrorKind {
        if self.is_too_large() {
            return ErrorKind::Fatal;
        }
        match self {
            WriteError::Api { status: 409, .. } => ErrorKind::Conflict,
            WriteError::Api { status, .. } if *status == 429 || *status >= 500 => {
                ErrorKind::Retryable
            }
            WriteError::Api { .. }
            | WriteError::StaleTerm { .. }
            | WriteError::Deposed { .. }
            | WriteError::Content { .. } => ErrorKind::Fatal,
            WriteError::Timeout { .. } | WriteError::Transport { .. } => ErrorKind::Retryable,
        }
    }

    /// True when leadership of this writer's term is lost ([`WriteError::Deposed`]): stop
    /// acting at once, neither retry nor release the work.
    #[must_use]
    pub fn is_deposed(&self) -> bool {
        matches!(self, WriteError::Deposed { .. })
    }

    /// The server's `Retry-After`, when given.
    #[must_use]
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            WriteError::Api { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// Bounded metric label.
    #[must_use]
    pub fn metric_label(&self) -> &'static str {
        if self.is_too_large() {
            return "too_large";
        }
        match self {
            WriteError::Api { status: 409, .. } => "conflict",
            WriteError::Api { status: 429, .. } => "throttled",
            WriteError::Api { status, .. } if *status >= 500 => "server_error",
            WriteError::Api { .. } => "rejected",
            WriteError::Timeout { .. } => "timeout",
            WriteError::Transport { .. } => "transport",
            WriteError::StaleTerm { .. } => "stale_term",
            WriteError::Deposed { .. } => "deposed",
            WriteError::Content { .. } => "content",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(status: u16, message: &str) -> WriteError {
        WriteError::Api {
            object: "x/y".into(),
            status,
            reason: String::new(),
            message: message.into(),
            retry_after: None,
        }
    }

    #[test]
    fn classification() {
        assert_eq!(api(409, "").kind(), ErrorKind::Conflict);
        assert_eq!(api(429, "").kind(), ErrorKind::Retryable);
        assert_eq!(api(500, "boom").kind(), ErrorKind::Retryable);
        assert_eq!(api(503, "").kind(), ErrorKind::Retryable);
        for s in [400, 403, 404, 422, 413] {
            assert_eq!(api(s, "").kind(), ErrorKind::Fatal, "{s}");
        }
        let etcd = api(500, "etcdserver: request is too large");
        assert!(etcd.is_too_large());
        assert_eq!(etcd.kind(), ErrorKind::Fatal);
        assert_eq!(etcd.metric_label(), "too_large");
        let deposed = WriteError::Deposed {
            object: "x/y".into(),
            term: Term(3),
        };
        assert!(deposed.is_deposed());
        assert_eq!(deposed.kind(), ErrorKind::Fatal);
        assert!(deposed.retry_after().is_none());
        assert!(!api(500, "").is_deposed());
    }
}
