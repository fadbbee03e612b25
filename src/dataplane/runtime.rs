//! What HAProxy has loaded, through the runtime endpoints (HAProxy's runtime API behind them),
//! and the transactions a pod keeps: the reads the deployer uses to tell a file that is on disk
//! from one HAProxy runs, and to find transactions left open (issue 24).
//!
//! ```text
//!  runtime_map_entries(name)       GET .../runtime/maps/{name}/entries          show map
//!  runtime_certificate(name)       GET .../runtime/ssl_certs/{name}              show ssl cert
//!  runtime_crt_list_entries(name)  GET .../runtime/ssl_crt_lists/entries?name=   show ssl crt-list
//!  transactions()                  GET .../transactions                           in_progress, outdated, failed
//! ```

use reqwest::Method;

use super::client::DataplaneClient;
use super::error::DataplaneError;
use super::types::{CrtListEntry, MapEntry, SslCertificateInfo, TransactionInfo};

impl DataplaneClient {
    /// `GET .../runtime/maps/{name}/entries`: the map's entries as HAProxy has them loaded,
    /// in its order (`name`: the stored map's name).
    ///
    /// # Errors
    /// `NotFound` (`Fatal`) when HAProxy has no map of that name loaded; others as
    /// [`DataplaneClient::info`].
    pub async fn runtime_map_entries(&self, name: &str) -> Result<Vec<MapEntry>, DataplaneError> {
        let req = self.request(
            Method::GET,
            &["services", "haproxy", "runtime", "maps", name, "entries"],
        );
        self.send_json(req, "runtime map entries").await
    }

    /// `GET .../runtime/ssl_certs/{name}`: the certificate HAProxy has loaded under that name
    /// (runtime form: hex serial, one-line DN issuer and subject, fingerprints).
    ///
    /// # Errors
    /// `NotFound` (`Fatal`) when HAProxy has no such certificate loaded; others as
    /// [`DataplaneClient::info`].
    pub async fn runtime_certificate(
        &self,
        name: &str,
    ) -> Result<SslCertificateInfo, DataplaneError> {
        let req = self.request(
            Method::GET,
            &["services", "haproxy", "runtime", "ssl_certs", name],
        );
        self.send_json(req, "runtime certificate").await
    }

    /// `GET .../runtime/ssl_crt_lists/entries?name=...`: the lines of a crt-list as HAProxy has
    /// it loaded.
    ///
    /// # Errors
    /// `NotFound` (`Fatal`) when HAProxy has no crt-list of that name loaded; others as
    /// [`DataplaneClient::info`].
    pub async fn runtime_crt_list_entries(
        &self,
        name: &str,
    ) -> Result<Vec<CrtListEntry>, DataplaneError> {
        let req = self.request_with_query(
            Method::GET,
            &["services", "haproxy", "runtime", "ssl_crt_lists", "entries"],
            &[("name", name)],
        );
        self.send_json(req, "runtime crt-list entries").await
    }

    /// `GET .../transactions`: every transaction the API keeps (pending ones, and outdated or
    /// failed ones it has not deleted yet).
    ///
    /// # Errors
    /// As [`DataplaneClient::info`].
    pub async fn transactions(&self) -> Result<Vec<TransactionInfo>, DataplaneError> {
        let req = self.request(Method::GET, &["services", "haproxy", "transactions"]);
        self.send_json(req, "transactions").await
    }
}
