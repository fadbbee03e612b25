//! Errors of the Kubernetes writer and their classification (STYLE.md 2.4, DESIGN.md section 3).

use std::time::Duration;

use haptic_journal::Term;

use crate::core::ErrorKind;
use crate::core::error::ErrorClass;

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
    /// No answer within the request timeout (`--kube-request-timeout`).
    #[error("request for {object} timed out after {after:?} (--kube-request-timeout)")]
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
            kube::Error::Service(e) if e.is::<crate::k8s::client::RequestTimedOut>() => {
                let after = e
                    .downcast_ref::<crate::k8s::client::RequestTimedOut>()
                    .map_or(Duration::ZERO, |t| t.after);
                WriteError::Timeout {
                    object: object.to_owned(),
                    after,
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

    /// True when the object is over the API server's size limit: a 413, or a 5xx whose message
    /// says the request is too large (etcd's `request is too large`). Permanent.
    #[must_use]
    pub fn is_too_large(&self) -> bool {
        self.class() == ErrorClass::TooLarge
    }

    /// True for a 404 naming an object (not a missing resource type).
    #[must_use]
    pub fn is_not_found(&self) -> bool {
        self.class() == ErrorClass::NotFound
    }

    /// The error's class in the one table every worker uses ([`crate::core::error`]): an API
    /// answer by [`ErrorClass::of_status`]; a timeout or transport failure is `Unreachable`;
    /// [`WriteError::Deposed`] and [`WriteError::StaleTerm`] are `Fenced` (stop the term, never
    /// retry, never ack); [`WriteError::Content`] is `Unbuildable` (permanent).
    #[must_use]
    pub fn class(&self) -> ErrorClass {
        match self {
            WriteError::Api {
                status, message, ..
            } => ErrorClass::of_status(*status, message),
            WriteError::Timeout { .. } | WriteError::Transport { .. } => ErrorClass::Unreachable,
            WriteError::StaleTerm { .. } | WriteError::Deposed { .. } => ErrorClass::Fenced,
            WriteError::Content { .. } => ErrorClass::Unbuildable,
        }
    }

    /// How to react, coarsely ([`ErrorClass::kind`]): 409 and a 404 naming an object re-read
    /// (`Conflict`); 400, 413, 422, a too-large 5xx, fencing and unbuildable content are `Fatal`
    /// (fencing stops the term: check [`WriteError::class`] first); everything else, 401, 403
    /// and a missing resource type included, retries with backoff (`Retryable`).
    #[must_use]
    pub fn kind(&self) -> ErrorKind {
        self.class().kind()
    }

    /// What an operator must do when the class [`needs_operator`](ErrorClass::needs_operator):
    /// the RBAC rule to grant (403), the credentials to check (401), the CRDs to apply (a
    /// missing resource type). `None` for other classes.
    #[must_use]
    pub fn operator_hint(&self) -> Option<String> {
        let object = match self {
            WriteError::Api { object, .. } => object.as_str(),
            _ => return None,
        };
        let kind = object.split('/').next().unwrap_or(object);
        let (group, resource) = match kind {
            "HAProxyCfg" => ("haproxy-haptic.org", "haproxycfgs"),
            "HAProxyMapFile" => ("haproxy-haptic.org", "haproxymapfiles"),
            "HAProxyGeneralFile" => ("haproxy-haptic.org", "haproxygeneralfiles"),
            "HAProxyCRTListFile" => ("haproxy-haptic.org", "haproxycrtlistfiles"),
            "Secret" => ("\"\" (core)", "secrets"),
            other => ("?", other),
        };
        match self.class() {
            ErrorClass::Forbidden => Some(format!(
                "grant the service account get, list, watch, create, update, delete on \
                 {group} {resource} and update on {resource}/status (deploy/role.yaml)"
            )),
            ErrorClass::Unauthorized => Some(
                "the API server does not accept the controller's credentials: check the \
                 service account token or the kubeconfig"
                    .to_owned(),
            ),
            ErrorClass::TooLarge => Some(
                "the render passed validation and the pods run it; only this object is not \
                 published: make the file smaller or split it into several files (content \
                 over --compression-threshold is already stored zstd-compressed when that is \
                 shorter; the API server takes 3 MiB per request, etcd 1.5 MiB per object by \
                 default, a Secret 1 MiB of data)"
                    .to_owned(),
            ),
            ErrorClass::MissingResourceType => Some(format!(
                "the API server does not serve {group} {resource}: apply the CRDs \
                 (`haptic crds | kubectl apply -f -`, or deploy/crds/)"
            )),
            _ => None,
        }
    }

    /// The error with the render input an object holds named in it (`haproxy.cfg`,
    /// `maps/hosts.map`), when the object is too large: the operator fixes the input, not the
    /// object.
    #[must_use]
    pub fn with_input(self, input: &str) -> WriteError {
        match self {
            WriteError::Api {
                object,
                status,
                reason,
                message,
                retry_after,
            } if ErrorClass::of_status(status, &message) == ErrorClass::TooLarge => {
                WriteError::Api {
                    object: format!("{object} (the render's {input})"),
                    status,
                    reason,
                    message,
                    retry_after,
                }
            }
            other => other,
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

    /// Bounded metric label: the class's ([`ErrorClass::metric_label`]).
    #[must_use]
    pub fn metric_label(&self) -> &'static str {
        self.class().metric_label()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn api(status: u16, message: &str) -> WriteError {
        WriteError::Api {
            object: "HAProxyCfg/y".into(),
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
        for s in [400, 422, 413] {
            assert_eq!(api(s, "").kind(), ErrorKind::Fatal, "{s}");
            assert!(api(s, "").class().is_permanent(), "{s}");
        }
        // Issue 11: 403 and a missing resource type are retried (and shown), never dropped; a
        // 404 naming an object is re-read.
        assert_eq!(api(403, "").kind(), ErrorKind::Retryable);
        assert!(
            api(403, "")
                .operator_hint()
                .unwrap()
                .contains("haproxycfgs")
        );
        let missing = api(404, "the server could not find the requested resource");
        assert_eq!(missing.class(), ErrorClass::MissingResourceType);
        assert!(missing.operator_hint().unwrap().contains("apply the CRDs"));
        assert_eq!(api(404, "x not found").kind(), ErrorKind::Conflict);
        assert!(api(404, "x not found").is_not_found());
        assert!(api(500, "").operator_hint().is_none());
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
        assert_eq!(deposed.class(), ErrorClass::Fenced);
        assert!(deposed.retry_after().is_none());
        assert!(!api(500, "").is_deposed());
    }
}
