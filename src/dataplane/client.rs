//! The HTTP client proper: one shared connection pool, one [`DataplaneClient`] per endpoint.

use std::net::IpAddr;
use std::time::Duration;

use haptic_journal::{ConfigVersion, ReloadId};
use reqwest::header::HeaderMap;
use reqwest::{Method, RequestBuilder, Response, StatusCode, Url};
use serde::de::DeserializeOwned;

use super::error::DataplaneError;
use super::types::{
    BasicAuth, ClientSettings, Health, Info, PushApplied, PushOptions, PushOutcome,
    RawConfiguration, ReloadInfo,
};
use crate::core::ReloadStatus;

/// `Configuration-Version` response header (ecosystem.md A.1).
pub const CONFIGURATION_VERSION_HEADER: &str = "configuration-version";
/// `Configuration-Checksum` response header (md5 of the file, ecosystem.md A.2).
pub const CONFIGURATION_CHECKSUM_HEADER: &str = "configuration-checksum";
/// `Reload-ID` response header (sent as `Reload-Id`; names are case-insensitive, A.2).
pub const RELOAD_ID_HEADER: &str = "reload-id";

/// Longest error message kept from an answer body, in bytes.
const MAX_MESSAGE_BYTES: usize = 4096;

/// The shared HTTP client: one connection pool for every endpoint. Cheap to clone.
///
/// No automatic retries (reqwest has none; the components own retries), proxies disabled
/// (pods are reached directly by IP), connect and request timeouts from [`ClientSettings`].
#[derive(Debug, Clone)]
pub struct Dataplane {
    http: reqwest::Client,
}

impl Dataplane {
    /// Build the shared client.
    ///
    /// # Errors
    /// [`DataplaneError::Build`] (`Fatal`) when the settings cannot be applied.
    pub fn new(settings: &ClientSettings) -> Result<Self, DataplaneError> {
        let http = reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(settings.connect_timeout)
            .timeout(settings.request_timeout)
            .pool_idle_timeout(settings.pool_idle_timeout)
            .user_agent(settings.user_agent.as_str())
            .build()
            .map_err(DataplaneError::Build)?;
        Ok(Dataplane { http })
    }

    /// A client for one endpoint, sharing this pool.
    pub fn client(&self, endpoint: Endpoint) -> DataplaneClient {
        DataplaneClient {
            http: self.http.clone(),
            endpoint,
        }
    }
}

/// Address and credentials of one Dataplane API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    base_url: Url,
    credentials: Option<BasicAuth>,
}

impl Endpoint {
    /// An endpoint at `base_url` (e.g. `http://10.0.0.7:5555`; a path prefix is kept).
    pub fn new(base_url: Url, credentials: Option<BasicAuth>) -> Self {
        Endpoint {
            base_url,
            credentials,
        }
    }

    /// The endpoint of a pod: `http://<pod_ip>:<port>` (IPv6 in brackets).
    ///
    /// # Panics
    /// Never: an IP address and a port always form a valid URL.
    pub fn for_pod(pod_ip: IpAddr, port: u16, credentials: Option<BasicAuth>) -> Self {
        let host = match pod_ip {
            IpAddr::V4(ip) => ip.to_string(),
            IpAddr::V6(ip) => format!("[{ip}]"),
        };
        #[allow(clippy::expect_used)] // documented invariant above
        let base_url =
            Url::parse(&format!("http://{host}:{port}")).expect("ip:port is a valid http url");
        Endpoint {
            base_url,
            credentials,
        }
    }

    /// The base URL.
    pub fn url(&self) -> &Url {
        &self.base_url
    }
}

/// A Dataplane API v3 client for one endpoint (ecosystem.md A).
///
/// Every call is one HTTP request (or, for [`DataplaneClient::wait_for_reload`], a bounded
/// series of reads). Nothing is retried here. All calls are idempotent reads except the
/// pushes and storage writes, whose docs say what they change.
///
/// # Cancel safety
/// Every async method is cancel safe in the sense that dropping it drops the request; a write
/// may or may not have reached the Dataplane API, so a caller that cancels a write must
/// re-read before deciding (compare content, not only the version).
#[derive(Debug, Clone)]
pub struct DataplaneClient {
    pub(super) http: reqwest::Client,
    pub(super) endpoint: Endpoint,
}

impl DataplaneClient {
    /// The endpoint this client talks to.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// `GET /v3/info`: API version and host facts (ecosystem.md A.7).
    ///
    /// # Errors
    /// Transport/Timeout/Server/TooManyRequests (`Retryable`), Unauthorized/NotFound/
    /// InvalidResponse (`Fatal`).
    pub async fn info(&self) -> Result<Info, DataplaneError> {
        self.send_json(self.request(Method::GET, &["info"]), "info body")
            .await
    }

    /// `GET /v3/services/haproxy/runtime/info`: the HAProxy version the pod runs, as
    /// `show info` reports it (`3.0.11-1`, `2.6.12-1+deb12u4`); ecosystem.md A.7. The v3 API
    /// answers one `process_info` object (`{"info": {"version": ...}, "runtimeAPI": ...}`), v2
    /// an array of them: both are read. `None` when the answer has no version.
    ///
    /// # Errors
    /// As [`DataplaneClient::info`].
    pub async fn haproxy_version(&self) -> Result<Option<String>, DataplaneError> {
        let body: serde_json::Value = self
            .send_json(
                self.request(Method::GET, &["services", "haproxy", "runtime", "info"]),
                "runtime info body",
            )
            .await?;
        let first = match &body {
            serde_json::Value::Array(items) => items.first().cloned().unwrap_or_default(),
            other => other.clone(),
        };
        Ok(first["info"]["version"]
            .as_str()
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_owned))
    }

    /// `GET /v3/health`: `{"haproxy": "up|down|unknown"}` (ecosystem.md A.7).
    ///
    /// # Errors
    /// As [`DataplaneClient::info`].
    pub async fn health(&self) -> Result<Health, DataplaneError> {
        self.send_json(self.request(Method::GET, &["health"]), "health body")
            .await
    }

    /// `GET /v3/services/haproxy/configuration/version`: the version of the in-memory parser
    /// (a bare JSON integer, ecosystem.md A.1).
    ///
    /// # Errors
    /// As [`DataplaneClient::info`]; InvalidResponse when the body is not an integer.
    pub async fn configuration_version(&self) -> Result<ConfigVersion, DataplaneError> {
        let req = self.request(
            Method::GET,
            &["services", "haproxy", "configuration", "version"],
        );
        let resp = self.expect_success(self.send(req).await?).await?;
        let text = self.text(resp).await?;
        text.trim()
            .parse::<i64>()
            .map(ConfigVersion)
            .map_err(|_| self.invalid("configuration version"))
    }

    /// `GET /v3/services/haproxy/configuration/raw`: the file on disk and its version
    /// (ecosystem.md A.1, A.8: `text/plain` since v3.1, `{"data": ...}` JSON on v3.0).
    ///
    /// # Errors
    /// As [`DataplaneClient::info`]; InvalidResponse when no version is in the headers or
    /// the text.
    pub async fn raw_configuration(&self) -> Result<RawConfiguration, DataplaneError> {
        let req = self.request(
            Method::GET,
            &["services", "haproxy", "configuration", "raw"],
        );
        let resp = self.expect_success(self.send(req).await?).await?;
        let headers = resp.headers().clone();
        let is_json = headers
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/json"));
        let body = self.text(resp).await?;
        #[derive(serde::Deserialize)]
        struct V30Body {
            data: String,
        }
        // v3.0 wraps the text in JSON; a plain body labelled as JSON is taken as text.
        let text = match is_json.then(|| serde_json::from_str::<V30Body>(&body)) {
            Some(Ok(v30)) => v30.data,
            _ => body,
        };
        let version = header_version(&headers)
            .or_else(|| version_in_text(&text))
            .ok_or_else(|| self.invalid("configuration version"))?;
        let file_version = version_in_text(&text);
        Ok(RawConfiguration {
            text,
            version,
            file_version,
            configuration_checksum: header_string(&headers, CONFIGURATION_CHECKSUM_HEADER),
        })
    }

    /// `POST /v3/services/haproxy/configuration/raw?version=N`: replace the whole
    /// configuration, conditional on `version` (ecosystem.md A.2).
    ///
    /// The body is sent as `text/plain` exactly as given; it must contain a newline. The API
    /// validates with `haproxy -c` before replacing the file. Not idempotent in the version:
    /// a repeated push after success gets a 409, so re-read and compare content first.
    ///
    /// # Errors
    /// - `Conflict` (`Conflict`): 409, the file is no longer at `version`; `actual` is the
    ///   current version when the answer carries it.
    /// - `Rejected` (`Fatal`): 400, e.g. `haproxy -c` failed (message = `[ALERT]` lines) or a
    ///   `force_reload` reload failed.
    /// - Transport/Timeout/Server/TooManyRequests (`Retryable`), Unauthorized (`Fatal`).
    pub async fn push_raw_configuration(
        &self,
        text: &str,
        version: ConfigVersion,
        opts: PushOptions,
    ) -> Result<PushOutcome, DataplaneError> {
        let version_arg = version.0.to_string();
        let mut query = vec![("version", version_arg.as_str())];
        for (flag, on) in [
            ("skip_reload", opts.skip_reload),
            ("force_reload", opts.force_reload),
            ("only_validate", opts.only_validate),
        ] {
            if on {
                query.push((flag, "true"));
            }
        }
        let req = self
            .request_with_query(
                Method::POST,
                &["services", "haproxy", "configuration", "raw"],
                &query,
            )
            .header(reqwest::header::CONTENT_TYPE, "text/plain")
            .body(text.to_owned());
        let resp = self.send(req).await?;
        if resp.status() == StatusCode::CONFLICT {
            let actual = header_version(resp.headers());
            let message = self.error_message(resp).await;
            return Err(DataplaneError::Conflict {
                expected: version,
                actual: actual.or_else(|| version_in_conflict_message(&message)),
            });
        }
        let resp = self.expect_success(resp).await?;
        let headers = resp.headers().clone();
        // The answer echoes the stored file; read it so the connection can be reused.
        drain(resp).await;
        let headers = &headers;
        let reload_id = header_reload_id(headers);
        let applied = if opts.only_validate {
            PushApplied::ValidatedOnly
        } else if reload_id.is_some() {
            PushApplied::ReloadScheduled
        } else {
            PushApplied::Written
        };
        Ok(PushOutcome {
            applied,
            reload_id,
            version_after: header_version(headers),
            configuration_checksum: header_string(headers, CONFIGURATION_CHECKSUM_HEADER),
            answered_at: header_date(headers),
        })
    }

    /// `GET /v3/services/haproxy/reloads/{id}` (ecosystem.md A.3).
    ///
    /// # Errors
    /// `NotFound` (`Fatal`) for an unknown ID; after a Dataplane API restart that means
    /// "unknown", never success: re-verify by content. Others as [`DataplaneClient::info`].
    pub async fn reload_status(&self, id: &ReloadId) -> Result<ReloadInfo, DataplaneError> {
        let req = self.request(
            Method::GET,
            &["services", "haproxy", "reloads", id.as_str()],
        );
        self.send_json(req, "reload body").await
    }

    /// `GET /v3/services/haproxy/reloads` (ecosystem.md A.3): the reloads the agent still
    /// keeps, in its order (the real agent keeps failed ones and the last success; the sandbox
    /// keeps every reload of the endpoint's life).
    ///
    /// # Errors
    /// As [`DataplaneClient::info`].
    pub async fn reloads(&self) -> Result<Vec<ReloadInfo>, DataplaneError> {
        let req = self.request(Method::GET, &["services", "haproxy", "reloads"]);
        self.send_json(req, "reloads body").await
    }

    /// Poll [`DataplaneClient::reload_status`] every `interval` until the reload succeeded,
    /// failed, or `timeout` passed (ecosystem.md A.3 polling recipe). Bounded; errors of a
    /// poll are returned at once, not retried.
    ///
    /// # Errors
    /// `ReloadFailed` (`Fatal`, the pod runs last-known-good), `ReloadTimeout` (`Retryable`),
    /// or the error of a poll.
    pub async fn wait_for_reload(
        &self,
        id: &ReloadId,
        interval: Duration,
        timeout: Duration,
    ) -> Result<ReloadInfo, DataplaneError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let info = self.reload_status(id).await?;
            match info.status {
                ReloadStatus::Succeeded => return Ok(info),
                ReloadStatus::Failed => {
                    return Err(DataplaneError::ReloadFailed {
                        reload_id: id.clone(),
                        response: info.response.unwrap_or_default(),
                    });
                }
                ReloadStatus::InProgress => {}
            }
            if tokio::time::Instant::now() + interval > deadline {
                return Err(DataplaneError::ReloadTimeout {
                    reload_id: id.clone(),
                });
            }
            tokio::time::sleep(interval).await;
        }
    }

    // ---- plumbing shared with storage.rs ----

    /// A request to `/v3/<segments...>` with this endpoint's credentials.
    pub(super) fn request(&self, method: Method, segments: &[&str]) -> RequestBuilder {
        self.request_with_query(method, segments, &[])
    }

    /// As [`DataplaneClient::request`], with query parameters (reqwest 0.13 has no `query`
    /// without its `query` feature, so they go into the URL here).
    pub(super) fn request_with_query(
        &self,
        method: Method,
        segments: &[&str],
        query: &[(&str, &str)],
    ) -> RequestBuilder {
        let mut url = self.endpoint.base_url.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().push("v3").extend(segments);
        }
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query);
        }
        let req = self.http.request(method, url);
        match &self.endpoint.credentials {
            Some(auth) => req.basic_auth(&auth.username, Some(&auth.password)),
            None => req,
        }
    }

    pub(super) async fn send(&self, req: RequestBuilder) -> Result<Response, DataplaneError> {
        let request = req.build().map_err(|e| self.transport(e))?;
        let method = request.method().clone();
        let path = request.url().path().to_owned();
        match self.http.execute(request).await {
            Ok(resp) => {
                tracing::debug!(%method, %path, status = resp.status().as_u16(), "dataplane answered");
                Ok(resp)
            }
            Err(e) => {
                let error = self.transport(e);
                tracing::debug!(%method, %path, error = %error, "dataplane request failed");
                Err(error)
            }
        }
    }

    pub(super) fn transport(&self, e: reqwest::Error) -> DataplaneError {
        if e.is_timeout() {
            DataplaneError::Timeout {
                endpoint: self.endpoint.base_url.clone(),
            }
        } else {
            DataplaneError::Transport {
                endpoint: self.endpoint.base_url.clone(),
                source: e,
            }
        }
    }

    pub(super) fn invalid(&self, what: &'static str) -> DataplaneError {
        DataplaneError::InvalidResponse {
            endpoint: self.endpoint.base_url.clone(),
            what,
        }
    }

    pub(super) async fn text(&self, resp: Response) -> Result<String, DataplaneError> {
        resp.text().await.map_err(|e| self.transport(e))
    }

    /// Sends `req` and decodes a 2xx answer's JSON body (`what` names it in an
    /// `InvalidResponse`); any other status maps as [`DataplaneClient::expect_success`] does.
    pub(super) async fn send_json<T: DeserializeOwned>(
        &self,
        req: RequestBuilder,
        what: &'static str,
    ) -> Result<T, DataplaneError> {
        let resp = self.expect_success(self.send(req).await?).await?;
        self.json(resp, what).await
    }

    pub(super) async fn json<T: DeserializeOwned>(
        &self,
        resp: Response,
        what: &'static str,
    ) -> Result<T, DataplaneError> {
        let bytes = resp.bytes().await.map_err(|e| self.transport(e))?;
        serde_json::from_slice(&bytes).map_err(|_| self.invalid(what))
    }

    /// Pass 2xx answers through; map every other status to its error (the generic table of
    /// [`DataplaneError`]; call sites handle their own 409s first).
    pub(super) async fn expect_success(&self, resp: Response) -> Result<Response, DataplaneError> {
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let path = resp.url().path().to_owned();
        let retry_after = resp
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let code = status.as_u16();
        // Read the body in every case: it carries the message, and reading it lets the pool
        // reuse the connection.
        let message = self.error_message(resp).await;
        Err(match code {
            401 | 403 => DataplaneError::Unauthorized { status: code },
            404 => DataplaneError::NotFound { path },
            429 => DataplaneError::TooManyRequests { retry_after },
            400 | 406 | 413 | 422 => DataplaneError::Rejected {
                status: code,
                message,
            },
            500..=599 => DataplaneError::Server {
                status: code,
                message,
            },
            _ => DataplaneError::UnexpectedStatus {
                status: code,
                message,
            },
        })
    }

    /// The `message` of a `{"code", "message"}` error body, else the body text, truncated.
    pub(super) async fn error_message(&self, resp: Response) -> String {
        let body = resp.text().await.unwrap_or_default();
        #[derive(serde::Deserialize)]
        struct ErrorBody {
            message: String,
        }
        let mut message = match serde_json::from_str::<ErrorBody>(&body) {
            Ok(b) => b.message,
            Err(_) => body.trim().to_owned(),
        };
        if message.len() > MAX_MESSAGE_BYTES {
            let mut cut = MAX_MESSAGE_BYTES;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
        }
        message
    }
}

/// Read and drop an answer body whose content is not needed: a body left unread makes the
/// pool close the connection instead of reusing it. A read error changes nothing (the status
/// already told the outcome), so it is ignored.
pub(super) async fn drain(resp: Response) {
    let _ = resp.bytes().await;
}

pub(super) fn header_string(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

pub(super) fn header_reload_id(headers: &HeaderMap) -> Option<ReloadId> {
    header_string(headers, RELOAD_ID_HEADER).map(ReloadId)
}

pub(super) fn header_version(headers: &HeaderMap) -> Option<ConfigVersion> {
    header_string(headers, CONFIGURATION_VERSION_HEADER)
        .and_then(|v| v.parse::<i64>().ok())
        .map(ConfigVersion)
}

/// The `Date` header as unix seconds (HTTP-date, RFC 9110 5.6.7).
pub(super) fn header_date(headers: &HeaderMap) -> Option<i64> {
    let text = header_string(headers, "date")?;
    let at = httpdate::parse_http_date(&text).ok()?;
    let secs = at.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs();
    i64::try_from(secs).ok()
}

/// The `# _version=N` line of a configuration file (ecosystem.md A.1).
fn version_in_text(text: &str) -> Option<ConfigVersion> {
    text.lines()
        .take_while(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
        .find_map(|l| l.trim().strip_prefix("# _version="))
        .and_then(|v| v.trim().parse::<i64>().ok())
        .map(ConfigVersion)
}

/// `version in configuration file is 10, given version is 8` → 10 (ecosystem.md A.1).
fn version_in_conflict_message(message: &str) -> Option<ConfigVersion> {
    let rest = &message[message.find("file is ")? + "file is ".len()..];
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse::<i64>().ok().map(ConfigVersion)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_versions_from_text_and_messages() {
        assert_eq!(
            version_in_text("# _version=12\n# _md5hash=x\nglobal\n"),
            Some(ConfigVersion(12))
        );
        assert_eq!(version_in_text("global\n# _version=12\n"), None);
        assert_eq!(
            version_in_conflict_message("version in configuration file is 10, given version is 8"),
            Some(ConfigVersion(10))
        );
        assert_eq!(version_in_conflict_message("conflict"), None);
    }

    #[test]
    fn pod_endpoints() {
        let v4 = Endpoint::for_pod(
            "10.0.0.7".parse().unwrap_or(IpAddr::from([0, 0, 0, 0])),
            5555,
            None,
        );
        assert_eq!(v4.url().as_str(), "http://10.0.0.7:5555/");
        let v6 = Endpoint::for_pod(
            "fd00::1".parse().unwrap_or(IpAddr::from([0, 0, 0, 0])),
            5555,
            None,
        );
        assert_eq!(v6.url().as_str(), "http://[fd00::1]:5555/");
    }
}
