//! HAProxy Dataplane API v3 client (ecosystem.md A).
//!
//! ```text
//!  Dataplane (one reqwest pool, no proxy, timeouts)
//!     |-- client(Endpoint{http://<podIP>:<port>, basic auth}) --> DataplaneClient
//!            info / health                         GET /v3/info, /v3/health
//!            configuration_version / raw           GET /v3/services/haproxy/configuration/{version,raw}
//!            push_raw_configuration(text, N, opts) POST .../configuration/raw?version=N  -> 202 + Reload-ID
//!            reload_status / wait_for_reload       GET /v3/services/haproxy/reloads/{id}
//!            list/get/create/replace/delete        .../storage/{maps,ssl_certificates,general}, .../runtime/ssl_ca_files
//!            ssl_certificate_info / ca_file_info / ca_file_entry   metadata of certificates and CA files
//!            start/commit/delete_transaction       .../transactions[/{id}]; transactions() lists them
//!            runtime_map_entries / runtime_certificate / runtime_crt_list_entries
//!                                                  .../runtime/{maps,ssl_certs,ssl_crt_lists}: what HAProxy loaded
//!            configuration_object(method, path)    .../configuration/{backends,frontends}/...?version=N|transaction_id=T
//! ```
//!
//! The client does one request per call and never retries: the deployer's pure decision code
//! owns retries, backoff and fencing checks (DESIGN.md section 2). Every error maps to an
//! [`ErrorKind`](crate::core::ErrorKind) through [`DataplaneError::kind`].
//!
//! Content comparison: the deployer compares configurations structurally
//! (`components::deployer::structure`: after any write through the configuration endpoints the
//! API rewrites the file in its own layout); [`normalize_raw_config`] only strips the API's
//! `# _version=` / `# _md5hash=` header lines from a text. The configuration version alone does not prove content
//! (ecosystem.md A.3): compare content. Certificates and CA files, whose content the API does
//! not return, are compared by the metadata it does return ([`cert`]).

pub mod cert;
mod client;
mod config;
mod error;
mod normalize;
mod runtime;
mod storage;
mod types;

pub use crate::core::ReloadStatus;
pub use client::{
    CONFIGURATION_CHECKSUM_HEADER, CONFIGURATION_VERSION_HEADER, Dataplane, DataplaneClient,
    Endpoint, RELOAD_ID_HEADER,
};
pub use config::{ConfigWriteOutcome, Target, Transaction, TransactionId};
pub use error::DataplaneError;
pub use haptic_journal::{ConfigVersion, ReloadId};
pub use normalize::{normalize_raw_config, raw_configs_equal};
pub use types::{
    ApiInfo, BasicAuth, CaFileInfo, ClientSettings, CrtListEntry, HaproxyHealth, Health, Info,
    MapEntry, PushApplied, PushOptions, PushOutcome, RawConfiguration, ReloadInfo,
    SslCertificateInfo, StorageKind, StorageWriteOptions, StorageWriteOutcome, StoredFile,
    TransactionInfo,
};
