//! Errors of the Dataplane API client.

use std::time::Duration;

use haptic_journal::{ConfigVersion, ReloadId};
use reqwest::Url;

use crate::core::ErrorKind;

/// An error from one Dataplane API call.
///
/// Classification ([`DataplaneError::kind`]): connection failures, timeouts, 5xx and 429 are
/// `Retryable`; a stale configuration version (409 on a push) and an existing storage file
/// (409 on create) are `Conflict`; 400 (config rejected), 401/403, 404, failed reloads and
/// unexpected answers are `Fatal` (upstream-behaviour.md 13.2, issue 4).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DataplaneError {
    /// The HTTP client could not be built (bad settings).
    #[error("cannot build the dataplane http client")]
    Build(#[source] reqwest::Error),
    /// Connection refused/reset, DNS, or a broken response stream.
    #[error("dataplane request to {endpoint} failed")]
    Transport {
        /// Base URL of the endpoint.
        endpoint: Url,
        /// The client's error.
        #[source]
        source: reqwest::Error,
    },
    /// No complete answer within the connect or request timeout.
    #[error("dataplane request to {endpoint} timed out")]
    Timeout {
        /// Base URL of the endpoint.
        endpoint: Url,
    },
    /// 409 on a raw push: the configuration is no longer at `expected`
    /// (ecosystem.md A.1/A.2). `actual` comes from the `Configuration-Version` header, else
    /// from the message (`version in configuration file is N, given version is M`).
    #[error(
        "configuration version conflict: pushed at version {expected}, pod is at {}",
        or_unknown(actual)
    )]
    Conflict {
        /// The version the push was conditional on.
        expected: ConfigVersion,
        /// The pod's current version, when the answer says it.
        actual: Option<ConfigVersion>,
    },
    /// 400, 406, 413 or 422: the request or the configuration was rejected; for a raw push,
    /// `message` holds HAProxy's `[ALERT]` lines.
    #[error("dataplane rejected the request with status {status}: {message}")]
    Rejected {
        /// HTTP status.
        status: u16,
        /// The `message` of the error body, or the body text.
        message: String,
    },
    /// 401 or 403: wrong or missing credentials.
    #[error("dataplane refused the credentials with status {status}")]
    Unauthorized {
        /// HTTP status.
        status: u16,
    },
    /// 404: the path (storage file, reload ID, ...) does not exist.
    #[error("dataplane has no {path}")]
    NotFound {
        /// Request path.
        path: String,
    },
    /// 409 on a storage create: a file of that name exists (replace it instead).
    #[error("storage file {name} already exists")]
    AlreadyExists {
        /// Storage name sent.
        name: String,
    },
    /// 409 on a storage delete: the running configuration references the file.
    #[error("storage file {name} is referenced by the running configuration: {message}")]
    InUse {
        /// Storage name sent.
        name: String,
        /// The `message` of the error body.
        message: String,
    },
    /// 429: too many requests (e.g. open transactions); retry after `retry_after` when given.
    #[error("dataplane answered too many requests (retry after {})", or_unknown(&retry_after.map(|d| format!("{}s", d.as_secs()))))]
    TooManyRequests {
        /// The `Retry-After` header in seconds, when present.
        retry_after: Option<Duration>,
    },
    /// 5xx.
    #[error("dataplane server error {status}: {message}")]
    Server {
        /// HTTP status.
        status: u16,
        /// The `message` of the error body, or the body text.
        message: String,
    },
    /// The reload failed; the pod runs its last-known-good configuration (ecosystem.md A.3).
    #[error("reload {reload_id} failed: {response}")]
    ReloadFailed {
        /// The failed reload.
        reload_id: ReloadId,
        /// HAProxy's output (`response` field).
        response: String,
    },
    /// The reload was still in progress when the wait ended.
    #[error("reload {reload_id} still in progress after the wait")]
    ReloadTimeout {
        /// The pending reload.
        reload_id: ReloadId,
    },
    /// A status the documented API does not give for this call.
    #[error("unexpected dataplane status {status}: {message}")]
    UnexpectedStatus {
        /// HTTP status.
        status: u16,
        /// The body text (truncated).
        message: String,
    },
    /// A 2xx answer whose body or headers could not be understood.
    #[error("invalid dataplane response from {endpoint}: bad {what}")]
    InvalidResponse {
        /// Base URL of the endpoint.
        endpoint: Url,
        /// What could not be parsed, e.g. `configuration version`.
        what: &'static str,
    },
}

impl DataplaneError {
    /// How the caller should react (see the type's docs).
    pub fn kind(&self) -> ErrorKind {
        match self {
            DataplaneError::Transport { .. }
            | DataplaneError::Timeout { .. }
            | DataplaneError::TooManyRequests { .. }
            | DataplaneError::Server { .. }
            | DataplaneError::ReloadTimeout { .. } => ErrorKind::Retryable,
            DataplaneError::Conflict { .. } | DataplaneError::AlreadyExists { .. } => {
                ErrorKind::Conflict
            }
            DataplaneError::Build(_)
            | DataplaneError::Rejected { .. }
            | DataplaneError::Unauthorized { .. }
            | DataplaneError::NotFound { .. }
            | DataplaneError::InUse { .. }
            | DataplaneError::ReloadFailed { .. }
            | DataplaneError::UnexpectedStatus { .. }
            | DataplaneError::InvalidResponse { .. } => ErrorKind::Fatal,
        }
    }

    /// Bounded metric label (`error` label value).
    pub fn metric_label(&self) -> &'static str {
        match self {
            DataplaneError::Build(_) => "build",
            DataplaneError::Transport { .. } => "transport",
            DataplaneError::Timeout { .. } => "timeout",
            DataplaneError::Conflict { .. } => "version_conflict",
            DataplaneError::Rejected { .. } => "rejected",
            DataplaneError::Unauthorized { .. } => "unauthorized",
            DataplaneError::NotFound { .. } => "not_found",
            DataplaneError::AlreadyExists { .. } => "already_exists",
            DataplaneError::InUse { .. } => "in_use",
            DataplaneError::TooManyRequests { .. } => "too_many_requests",
            DataplaneError::Server { .. } => "server",
            DataplaneError::ReloadFailed { .. } => "reload_failed",
            DataplaneError::ReloadTimeout { .. } => "reload_timeout",
            DataplaneError::UnexpectedStatus { .. } => "unexpected_status",
            DataplaneError::InvalidResponse { .. } => "invalid_response",
        }
    }

    /// The `Retry-After` delay of a 429, if any.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            DataplaneError::TooManyRequests { retry_after } => *retry_after,
            _ => None,
        }
    }
}

fn or_unknown<T: std::fmt::Display>(value: &Option<T>) -> String {
    value
        .as_ref()
        .map_or_else(|| "unknown".to_owned(), ToString::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_lower_case_and_readable() {
        let conflict = DataplaneError::Conflict {
            expected: ConfigVersion(5),
            actual: Some(ConfigVersion(7)),
        };
        assert_eq!(
            conflict.to_string(),
            "configuration version conflict: pushed at version 5, pod is at 7"
        );
        let busy = DataplaneError::TooManyRequests { retry_after: None };
        assert_eq!(
            busy.to_string(),
            "dataplane answered too many requests (retry after unknown)"
        );
        let busy = DataplaneError::TooManyRequests {
            retry_after: Some(Duration::from_secs(3)),
        };
        assert_eq!(
            busy.to_string(),
            "dataplane answered too many requests (retry after 3s)"
        );
    }
}
