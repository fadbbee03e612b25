//! The bearer token of the ingest endpoint, read from a Secret.

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use tokio_util::sync::CancellationToken;

/// The key of the token in its Secret.
pub const TOKEN_KEY: &str = "token";

/// Errors of reading the ingest token.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IngestError {
    /// The Secret does not exist.
    #[error("ingest token Secret {namespace}/{secret} not found")]
    SecretNotFound {
        /// Namespace.
        namespace: String,
        /// Secret name.
        secret: String,
    },
    /// The Secret could not be read (RBAC, transport).
    #[error("reading ingest token Secret {namespace}/{secret} failed")]
    SecretRead {
        /// Namespace.
        namespace: String,
        /// Secret name.
        secret: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The Secret has no such key.
    #[error("ingest token Secret {namespace}/{secret} has no key `{key}`")]
    TokenMissing {
        /// Namespace.
        namespace: String,
        /// Secret name.
        secret: String,
        /// The key looked for ([`TOKEN_KEY`]).
        key: &'static str,
    },
    /// The value is unusable.
    #[error("ingest token Secret {namespace}/{secret} key `{key}` is {reason}")]
    TokenInvalid {
        /// Namespace.
        namespace: String,
        /// Secret name.
        secret: String,
        /// The key ([`TOKEN_KEY`]).
        key: &'static str,
        /// `empty` or `not UTF-8`.
        reason: &'static str,
    },
}

impl IngestError {
    /// Whether the read may succeed by itself if repeated: a 429, a 5xx or a transport failure
    /// (API-server pressure, a restart). An absent Secret, RBAC (403), a missing key or an
    /// unusable value need an operator.
    #[must_use]
    pub fn is_transient(&self) -> bool {
        match self {
            IngestError::SecretRead { source, .. } => match source {
                kube::Error::Api(s) => s.code == 429 || s.code >= 500,
                _ => true,
            },
            _ => false,
        }
    }

    /// Bounded metric label.
    #[must_use]
    pub fn metric_label(&self) -> &'static str {
        match self {
            IngestError::SecretNotFound { .. } => "secret_not_found",
            IngestError::SecretRead { .. } => "secret_read",
            IngestError::TokenMissing { .. } => "token_missing",
            IngestError::TokenInvalid { .. } => "token_invalid",
        }
    }
}

/// Reads the bearer token from key [`TOKEN_KEY`] of a Secret (`data`, else `stringData`),
/// trimmed of surrounding whitespace (files made with `--from-file` end in a newline).
///
/// # Errors
/// [`IngestError`] naming the Secret (and the key): absent Secret, read failure, missing key,
/// empty or non-UTF-8 value.
///
/// # Cancel safety
/// Cancel safe (one GET).
pub async fn read_token(
    client: kube::Client,
    namespace: &str,
    secret: &str,
) -> Result<String, IngestError> {
    let api: Api<Secret> = Api::namespaced(client, namespace);
    let found = api
        .get_opt(secret)
        .await
        .map_err(|source| IngestError::SecretRead {
            namespace: namespace.to_owned(),
            secret: secret.to_owned(),
            source,
        })?;
    let Some(found) = found else {
        return Err(IngestError::SecretNotFound {
            namespace: namespace.to_owned(),
            secret: secret.to_owned(),
        });
    };
    let invalid = |reason| IngestError::TokenInvalid {
        namespace: namespace.to_owned(),
        secret: secret.to_owned(),
        key: TOKEN_KEY,
        reason,
    };
    let value = if let Some(bytes) = found.data.as_ref().and_then(|d| d.get(TOKEN_KEY)) {
        String::from_utf8(bytes.0.clone()).map_err(|_| invalid("not UTF-8"))?
    } else if let Some(s) = found.string_data.as_ref().and_then(|d| d.get(TOKEN_KEY)) {
        s.clone()
    } else {
        return Err(IngestError::TokenMissing {
            namespace: namespace.to_owned(),
            secret: secret.to_owned(),
            key: TOKEN_KEY,
        });
    };
    let token = value.trim();
    if token.is_empty() {
        return Err(invalid("empty"));
    }
    Ok(token.to_owned())
}

/// [`read_token`], repeated while it fails transiently ([`IngestError::is_transient`]: 429,
/// 5xx, transport) after delays doubling from `initial` up to `max`, each failure logged with
/// the next delay; any other failure is returned at once. `Ok(None)` when `cancel` fires first.
/// At start-up the caller is not ready meanwhile: one 429 must not exit the process (a crash
/// loop under API pressure).
///
/// # Errors
/// The first non-transient [`IngestError`].
///
/// # Cancel safety
/// Cancel safe (GETs and sleeps).
pub async fn read_token_retrying(
    client: kube::Client,
    namespace: &str,
    secret: &str,
    initial: Duration,
    max: Duration,
    cancel: &CancellationToken,
) -> Result<Option<String>, IngestError> {
    let mut delay = initial;
    loop {
        match read_token(client.clone(), namespace, secret).await {
            Ok(t) => return Ok(Some(t)),
            Err(e) if e.is_transient() => {
                tracing::warn!(
                    error = %e,
                    cause = %std::error::Error::source(&e).map_or_else(String::new, ToString::to_string),
                    retry_in_ms = delay.as_millis() as u64,
                    "ingest token Secret not readable yet; retrying (not ready until it is read)"
                );
            }
            Err(e) => return Err(e),
        }
        tokio::select! {
            () = cancel.cancelled() => return Ok(None),
            () = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(max);
    }
}
