//! Request options and answers of the Dataplane API client.

use std::fmt;
use std::time::Duration;

use haptic_journal::{AuxKind, ConfigVersion, ReloadId};
use serde::Deserialize;

use crate::core::ReloadStatus;

/// Settings of the shared HTTP client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientSettings {
    /// Time to establish a TCP connection. Default: 5 s.
    pub connect_timeout: Duration,
    /// Time for a whole request, answer body included. A raw push validates with
    /// `haproxy -c` before answering, so keep this above the validation time. Default: 30 s.
    pub request_timeout: Duration,
    /// How long an idle pooled connection is kept for reuse. Default: 90 s.
    pub pool_idle_timeout: Duration,
    /// The `User-Agent` of every request. Default: `haptic/<version>`; the runtime adds its
    /// Lease identity (`haptic/<version> (<identity>)`) so a pod's access log names the replica.
    pub user_agent: String,
}

impl Default for ClientSettings {
    fn default() -> Self {
        ClientSettings {
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(30),
            pool_idle_timeout: Duration::from_secs(90),
            user_agent: concat!("haptic/", env!("CARGO_PKG_VERSION")).to_owned(),
        }
    }
}

/// Basic-auth credentials of one endpoint. `Debug` hides the password.
#[derive(Clone, PartialEq, Eq)]
pub struct BasicAuth {
    /// User name.
    pub username: String,
    /// Password (never logged).
    pub password: String,
}

impl fmt::Debug for BasicAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BasicAuth")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// Query flags of `POST /v3/services/haproxy/configuration/raw` (ecosystem.md A.2).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PushOptions {
    /// Write the file, no reload (201).
    pub skip_reload: bool,
    /// Reload synchronously now (201; a failed reload answers 400).
    pub force_reload: bool,
    /// Only run `haproxy -c`; nothing is applied (202 without Reload-ID).
    pub only_validate: bool,
}

/// What a successful raw push did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushApplied {
    /// Committed; a reload is scheduled under `reload_id` (202 + `Reload-ID`).
    ReloadScheduled,
    /// Committed without a pending reload: `skip_reload` (not reloaded) or `force_reload`
    /// (already reloaded) (201/200).
    Written,
    /// `only_validate`: valid, nothing applied (202).
    ValidatedOnly,
}

/// Answer of a successful raw push.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushOutcome {
    /// What the push did.
    pub applied: PushApplied,
    /// The `Reload-ID` header of a 202; poll it with `reload_status`.
    pub reload_id: Option<ReloadId>,
    /// The `Configuration-Version` header after the push (N+1 after a commit at N).
    pub version_after: Option<ConfigVersion>,
    /// The `Configuration-Checksum` header (md5 of the file; only comparable with itself).
    pub configuration_checksum: Option<String>,
    /// The answer's `Date` header, unix seconds (the pod's clock): a reload proves this push
    /// loaded only when its `reload_timestamp` is not older.
    pub answered_at: Option<i64>,
}

/// The running configuration file as the Dataplane API reads it from disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawConfiguration {
    /// The file's text, including the API's `# _version=` header lines; compare with
    /// [`super::normalize_raw_config`].
    pub text: String,
    /// `Configuration-Version` header, else the file's `# _version=` line.
    pub version: ConfigVersion,
    /// The file's own `# _version=` line, when it has one. It differs from [`Self::version`]
    /// (the API's in-memory parser) after a failed reload: the API puts the last good file
    /// back on disk but keeps the failed configuration and its version in memory
    /// (`observed-v3.4.md`), so an object written through the API would then apply to a
    /// configuration the file does not show.
    pub file_version: Option<ConfigVersion>,
    /// `Configuration-Checksum` header (md5), when sent.
    pub configuration_checksum: Option<String>,
}

/// `GET /v3/services/haproxy/reloads/{id}` (ecosystem.md A.3).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ReloadInfo {
    /// The reload ID; absent while a reload is queued (the real API answers
    /// `{"status": "in_progress"}` without an id then, `observed-v3.4.md`; every field of the
    /// spec's `reload` model is optional).
    #[serde(default)]
    pub id: Option<ReloadId>,
    /// Its state.
    pub status: ReloadStatus,
    /// HAProxy's output, set on failures.
    #[serde(default)]
    pub response: Option<String>,
    /// Unix seconds of the reload, when done.
    #[serde(default)]
    pub reload_timestamp: Option<i64>,
}

/// `GET /v3/info` (ecosystem.md A.7).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Info {
    /// API build information.
    #[serde(default)]
    pub api: ApiInfo,
    /// Host facts (hostname, cpu, memory, uptime) as sent.
    #[serde(default)]
    pub system: serde_json::Value,
}

/// The `api` object of `/v3/info`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct ApiInfo {
    /// Dataplane API version, e.g. `v3.2.1 1a2b3c`; use for capability detection.
    #[serde(default)]
    pub version: Option<String>,
    /// Build date.
    #[serde(default)]
    pub build_date: Option<String>,
}

/// `GET /v3/health`: `haproxy` is `up`, `down` or `unknown` (always `unknown` unless the API
/// has a `--status-cmd`; not a liveness signal, ecosystem.md A.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct Health {
    /// HAProxy's state as the API sees it.
    #[serde(default = "HaproxyHealth::unknown")]
    pub haproxy: HaproxyHealth,
}

/// HAProxy's state in `/v3/health`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HaproxyHealth {
    /// Running.
    Up,
    /// Not running.
    Down,
    /// Not known (or any other value).
    #[serde(other)]
    Unknown,
}

impl HaproxyHealth {
    fn unknown() -> Self {
        HaproxyHealth::Unknown
    }
}

/// Where a file is stored on the pod (ecosystem.md A.5). Ordered as a sync writes them
/// (certificates, then CA files, then general files and maps, as upstream does).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StorageKind {
    /// `/v3/services/haproxy/storage/ssl_certificates` (`/etc/haproxy/ssl`); PEM with cert
    /// and key; PUT is text/plain; GET of one returns JSON metadata, not the PEM.
    SslCertificate,
    /// `/v3/services/haproxy/runtime/ssl_ca_files`; POST and PUT multipart `file_upload`; GET
    /// of one returns the entry count, `.../{name}/entries/{i}` each certificate's metadata
    /// (not in ecosystem.md A.5: from the v3 specification and dataplaneapi's
    /// `e2e/tests/runtime_ssl_ca_files`).
    CaFile,
    /// `/v3/services/haproxy/storage/general` (`/etc/haproxy/general`); also crt-lists and
    /// error pages; PUT is multipart (v3.1+).
    General,
    /// `/v3/services/haproxy/storage/maps` (`/etc/haproxy/maps`); PUT is text/plain.
    Map,
}

impl StorageKind {
    /// Path segments under `/v3/`.
    pub(crate) fn segments(self) -> &'static [&'static str] {
        match self {
            StorageKind::Map => &["services", "haproxy", "storage", "maps"],
            StorageKind::SslCertificate => &["services", "haproxy", "storage", "ssl_certificates"],
            StorageKind::General => &["services", "haproxy", "storage", "general"],
            StorageKind::CaFile => &["services", "haproxy", "runtime", "ssl_ca_files"],
        }
    }

    /// True when `PUT .../{name}` takes a multipart `file_upload` rather than text/plain.
    pub(crate) fn replace_is_multipart(self) -> bool {
        matches!(self, StorageKind::General | StorageKind::CaFile)
    }
}

impl From<AuxKind> for StorageKind {
    /// Where each kind of auxiliary file is stored: crt-lists are general files (HAPTIC does
    /// the same; `/storage/ssl_crt_lists` exists only on v3.2+).
    fn from(kind: AuxKind) -> Self {
        match kind {
            AuxKind::Map => StorageKind::Map,
            AuxKind::Ssl => StorageKind::SslCertificate,
            AuxKind::Ca => StorageKind::CaFile,
            AuxKind::General | AuxKind::CrtList => StorageKind::General,
        }
    }
}

impl crate::core::render::JournaledFile {
    /// The Dataplane storage this render file goes to ([`StorageKind::from`] its kind).
    #[must_use]
    pub fn storage(&self) -> StorageKind {
        StorageKind::from(self.kind)
    }
}

/// Query flags of storage writes (ecosystem.md A.5). Sent only where the spec declares them
/// (a certificate's writes, the replace of a map or general file); elsewhere the write never
/// reloads anyway.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StorageWriteOptions {
    /// Write without a reload.
    pub skip_reload: bool,
    /// Reload synchronously.
    pub force_reload: bool,
}

/// One entry of a storage listing (fields as sent; unknown fields ignored).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct StoredFile {
    /// Name under which the API stores the file (may differ from the name sent: sanitised,
    /// `.map` appended to maps).
    #[serde(default)]
    pub storage_name: Option<String>,
    /// Absolute path on the pod.
    #[serde(default)]
    pub file: Option<String>,
    /// Free-form description.
    #[serde(default)]
    pub description: Option<String>,
    /// Size in bytes, when sent (released APIs leave it out of listings: read one file's
    /// metadata instead).
    #[serde(default)]
    pub size: Option<i64>,
}

/// The `ssl_certificate` model (client-native `specification/models/storage/ssl_certificate.yaml`):
/// the metadata `GET /v3/services/haproxy/storage/ssl_certificates/{name}` answers for a stored
/// certificate (the API does not return the PEM), and the shape of one CA-file entry
/// (`GET .../runtime/ssl_ca_files/{name}/entries/{index}`). Every field is optional (empty ones
/// are left out by the API); unknown ones are kept in `other`.
///
/// What released APIs fill (dataplaneapi v3.2 to v3.4, `GetOneStorageSSLCertificate`):
/// `file`, `description`, `storage_name`, `size`, `not_before`, `not_after`, `issuers`,
/// `domains`, `ip_addresses`, `subject`, `serial`. `sha256_finger_print` is in the model but
/// not filled by those handlers (dataplaneapi pull request 396 adds it). A CA-file entry comes
/// from HAProxy's `show ssl ca-file <name>:<index>`: `serial` in hex, `issuers` and `subject`
/// as one-line DNs, `sha1_finger_print`, `algorithm`, `status`. Compared through
/// [`super::cert`].
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct SslCertificateInfo {
    /// Name under which the API stores the file.
    #[serde(default)]
    pub storage_name: Option<String>,
    /// Absolute path on the pod.
    #[serde(default)]
    pub file: Option<String>,
    /// File size in bytes (storage only).
    #[serde(default)]
    pub size: Option<i64>,
    /// Serial number of the leaf: decimal from storage, hex from the runtime.
    #[serde(default)]
    pub serial: Option<String>,
    /// Storage: the issuer common names of every certificate in the file, joined by `", "` in
    /// no fixed order. Runtime: the issuer's one-line DN.
    #[serde(default)]
    pub issuers: Option<String>,
    /// Storage: the leaf's common name. Runtime: its one-line DN.
    #[serde(default)]
    pub subject: Option<String>,
    /// SHA-256 fingerprint of the leaf (`AB:CD:...`), when the API fills it.
    #[serde(default)]
    pub sha256_finger_print: Option<String>,
    /// SHA-1 fingerprint, when the API fills it (runtime entries).
    #[serde(default)]
    pub sha1_finger_print: Option<String>,
    /// Start of validity (RFC 3339), as sent.
    #[serde(default)]
    pub not_before: Option<String>,
    /// Expiry (RFC 3339; the earliest of the file's certificates), as sent.
    #[serde(default)]
    pub not_after: Option<String>,
    /// Every other field as sent.
    #[serde(flatten)]
    pub other: serde_json::Map<String, serde_json::Value>,
}

/// The `ssl_ca_file` model: `GET /v3/services/haproxy/runtime/ssl_ca_files/{name}` (HAProxy's
/// `show ssl ca-file`: the name and how many certificates it holds, e.g. `3 certificate(s)`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct CaFileInfo {
    /// Name of the CA file.
    #[serde(default)]
    pub storage_name: Option<String>,
    /// Path, when sent.
    #[serde(default)]
    pub file: Option<String>,
    /// The certificate count as sent (`3 certificate(s)`).
    #[serde(default)]
    pub count: Option<String>,
}

impl CaFileInfo {
    /// The number in `count`, when it has one.
    #[must_use]
    pub fn certificate_count(&self) -> Option<u32> {
        let count = self.count.as_deref()?.trim();
        let digits: String = count.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    }
}

/// Answer of a successful storage create, replace or delete.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StorageWriteOutcome {
    /// Storage name from the answer body (create only).
    pub storage_name: Option<String>,
    /// `Reload-ID` of a 202: the change takes effect with that reload.
    pub reload_id: Option<ReloadId>,
    /// `Configuration-Version` header after the call.
    pub version_after: Option<ConfigVersion>,
    /// The answer's `Date` header, unix seconds (the pod's clock).
    pub answered_at: Option<i64>,
}

/// One entry of a map as HAProxy has it loaded (`map_entry`, `GET
/// .../runtime/maps/{name}/entries`: HAProxy's `show map`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct MapEntry {
    /// The key.
    #[serde(default)]
    pub key: String,
    /// The value.
    #[serde(default)]
    pub value: String,
}

/// One line of a crt-list as HAProxy has it loaded (`ssl_crt_list_entry`, `GET
/// .../runtime/ssl_crt_lists/entries?name=...`: HAProxy's `show ssl crt-list -n`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct CrtListEntry {
    /// The certificate file the line names.
    #[serde(default)]
    pub file: String,
    /// The SSL options between brackets, without them (`alpn h2 ...`).
    #[serde(default)]
    pub ssl_bind_config: Option<String>,
    /// The SNI filters after the options.
    #[serde(default)]
    pub sni_filter: Vec<String>,
    /// The line's number in the file.
    #[serde(default)]
    pub line_number: Option<i64>,
}

/// A configuration transaction as `GET .../transactions` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct TransactionInfo {
    /// Its id.
    pub id: super::TransactionId,
    /// The configuration version it was started at.
    #[serde(rename = "_version", default)]
    pub version: Option<i64>,
    /// `in_progress`, `outdated`, `failed` or `success` (as sent).
    #[serde(default)]
    pub status: Option<String>,
}
