//! Configuration object endpoints and transactions (ecosystem.md A.4; dataplaneapi
//! `handlers/configuration/*`, `handlers/dataplane/transactions`).
//!
//! ```text
//!  start_transaction(N)        POST   .../transactions?version=N        201 {id, _version}
//!  configuration_object(...)   POST|PUT|DELETE .../configuration/<path>?version=N | ?transaction_id=T
//!                                 outside a transaction: 200 (applied at runtime), 201/204,
//!                                 or 202 + Reload-ID; inside one: 202 (applied at commit)
//!  commit_transaction(T)       PUT    .../transactions/T                 202 + Reload-ID (200: none)
//!  delete_transaction(T)       DELETE .../transactions/T                 204
//! ```

use haptic_journal::{ConfigVersion, ReloadId};
use reqwest::{Method, StatusCode};

use super::client::{DataplaneClient, drain, header_date, header_reload_id, header_version};
use super::error::DataplaneError;

/// A transaction id (`id` of `POST .../transactions`); the journal's type (it records the
/// transactions this replica opens, issue 24).
pub use haptic_journal::TransactionId;

/// An open transaction.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct Transaction {
    /// Its id.
    pub id: TransactionId,
    /// The configuration version it was started at.
    #[serde(rename = "_version", default)]
    pub version: Option<i64>,
}

/// What a configuration call is conditional on: the configuration version (applied now) or a
/// transaction (applied at its commit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target<'a> {
    /// `?version=N`: applied at once; 409 when the version moved.
    Version(ConfigVersion),
    /// `?transaction_id=T`.
    Transaction(&'a TransactionId),
}

/// The answer of a configuration write or a commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigWriteOutcome {
    /// HTTP status (200 applied without a reload, 201/204 done, 202 reload scheduled or
    /// queued in the transaction).
    pub status: u16,
    /// `Reload-ID` of a 202 outside a transaction (or of a commit).
    pub reload_id: Option<ReloadId>,
    /// `Configuration-Version` after the call.
    pub version_after: Option<ConfigVersion>,
    /// The answer's `Date` header, unix seconds (the pod's clock).
    pub answered_at: Option<i64>,
}

impl DataplaneClient {
    /// `POST /v3/services/haproxy/transactions?version=N`: opens a transaction at `version`.
    ///
    /// # Errors
    /// `Conflict` (`Conflict`) on 409/406 (the version moved); `TooManyRequests` on 429 (too
    /// many open transactions); others as [`DataplaneClient::info`].
    pub async fn start_transaction(
        &self,
        version: ConfigVersion,
    ) -> Result<Transaction, DataplaneError> {
        let v = version.0.to_string();
        let req = self.request_with_query(
            Method::POST,
            &["services", "haproxy", "transactions"],
            &[("version", v.as_str())],
        );
        let resp = self.send(req).await?;
        let resp = self.conflict_or(resp, version).await?;
        let resp = self.expect_success(resp).await?;
        self.json(resp, "transaction").await
    }

    /// `PUT /v3/services/haproxy/transactions/{id}`: commits; the API reloads once (202 +
    /// `Reload-ID`).
    ///
    /// # Errors
    /// `Conflict` on 409 (the version moved) or 406 (the transaction is outdated or failed);
    /// `Rejected` (400) when `haproxy -c` refuses the result; `NotFound` for an unknown id;
    /// others as [`DataplaneClient::info`].
    pub async fn commit_transaction(
        &self,
        id: &TransactionId,
        version: ConfigVersion,
    ) -> Result<ConfigWriteOutcome, DataplaneError> {
        let req = self.request(
            Method::PUT,
            &["services", "haproxy", "transactions", id.as_str()],
        );
        let resp = self.send(req).await?;
        let resp = self.conflict_or(resp, version).await?;
        self.write_outcome(resp).await
    }

    /// `DELETE /v3/services/haproxy/transactions/{id}`: aborts (no orphaned transaction,
    /// dataplaneapi#339). A transaction already gone (404) is not an error.
    ///
    /// # Errors
    /// Transport/Timeout/Server (`Retryable`), Unauthorized (`Fatal`).
    pub async fn delete_transaction(&self, id: &TransactionId) -> Result<(), DataplaneError> {
        let req = self.request(
            Method::DELETE,
            &["services", "haproxy", "transactions", id.as_str()],
        );
        let resp = self.send(req).await?;
        if resp.status() == StatusCode::NOT_FOUND {
            drain(resp).await;
            return Ok(());
        }
        let resp = self.expect_success(resp).await?;
        drain(resp).await;
        Ok(())
    }

    /// A write to `/v3/services/haproxy/configuration/<path>` (`POST` create, `PUT` replace,
    /// `DELETE`), with a JSON `body` for creates and replaces, conditional on `target`.
    ///
    /// # Errors
    /// - `Conflict` (`Conflict`): with [`Target::Version`], a 409 on a replace or a delete, or
    ///   one on a create naming the version (`version in configuration file is N, ...`);
    /// - `AlreadyExists` (`Conflict`): 409 on a create of an object that exists;
    /// - `NotFound` (`Fatal`): no such object or parent;
    /// - `Rejected` (`Fatal`): 400/422, the body or the resulting configuration was refused;
    /// - others as [`DataplaneClient::info`].
    pub async fn configuration_object(
        &self,
        method: Method,
        path: &[&str],
        target: Target<'_>,
        body: Option<&serde_json::Value>,
    ) -> Result<ConfigWriteOutcome, DataplaneError> {
        // Only a create can find its object existing; a 409 on a replace or a delete is the
        // version (whatever its message says).
        let creates = method == Method::POST;
        let mut segments = vec!["services", "haproxy", "configuration"];
        segments.extend_from_slice(path);
        let v;
        let query = match target {
            Target::Version(version) => {
                v = version.0.to_string();
                ("version", v.as_str())
            }
            Target::Transaction(id) => ("transaction_id", id.as_str()),
        };
        let mut req = self.request_with_query(method, &segments, &[query]);
        if let Some(b) = body {
            req = req
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(b.to_string());
        }
        let resp = self.send(req).await?;
        if resp.status() == StatusCode::CONFLICT {
            let actual = header_version(resp.headers());
            let message = self.error_message(resp).await;
            return Err(match target {
                Target::Version(expected) if !creates || message.contains("version") => {
                    DataplaneError::Conflict { expected, actual }
                }
                _ => DataplaneError::AlreadyExists {
                    name: path.last().copied().unwrap_or_default().to_owned(),
                },
            });
        }
        self.write_outcome(resp).await
    }

    /// 409/406 as `Conflict` (with the version the answer reports), else the answer.
    async fn conflict_or(
        &self,
        resp: reqwest::Response,
        expected: ConfigVersion,
    ) -> Result<reqwest::Response, DataplaneError> {
        if matches!(
            resp.status(),
            StatusCode::CONFLICT | StatusCode::NOT_ACCEPTABLE
        ) {
            let actual = header_version(resp.headers());
            drain(resp).await;
            return Err(DataplaneError::Conflict { expected, actual });
        }
        Ok(resp)
    }

    async fn write_outcome(
        &self,
        resp: reqwest::Response,
    ) -> Result<ConfigWriteOutcome, DataplaneError> {
        let resp = self.expect_success(resp).await?;
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        drain(resp).await;
        Ok(ConfigWriteOutcome {
            status,
            reload_id: header_reload_id(&headers),
            version_after: header_version(&headers),
            answered_at: header_date(&headers),
        })
    }
}
