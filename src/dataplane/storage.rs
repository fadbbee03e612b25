//! Storage calls: maps, SSL certificates, general files (crt-lists and error pages too) and
//! CA files (ecosystem.md A.5).

use reqwest::header::HeaderMap;
use reqwest::multipart::{Form, Part};
use reqwest::{Method, RequestBuilder, StatusCode};

use super::client::{DataplaneClient, drain, header_date, header_reload_id, header_version};
use super::error::DataplaneError;
use super::types::{
    CaFileInfo, SslCertificateInfo, StorageKind, StorageWriteOptions, StorageWriteOutcome,
    StoredFile,
};

/// Multipart field that carries the file (ecosystem.md A.5).
const FILE_UPLOAD_FIELD: &str = "file_upload";

impl DataplaneClient {
    /// `GET .../{kind}`: the stored files of one kind.
    ///
    /// # Errors
    /// Transport/Timeout/Server/TooManyRequests (`Retryable`), Unauthorized/InvalidResponse
    /// (`Fatal`).
    pub async fn list_storage(&self, kind: StorageKind) -> Result<Vec<StoredFile>, DataplaneError> {
        self.send_json(
            self.request(Method::GET, kind.segments()),
            "storage listing",
        )
        .await
    }

    /// `GET .../{kind}/{name}`: the stored file's raw bytes for maps and general files; for
    /// SSL certificates and CA files the API answers JSON metadata, returned as is.
    ///
    /// # Errors
    /// `NotFound` (`Fatal`) when no such file; others as [`DataplaneClient::list_storage`].
    pub async fn get_storage_file(
        &self,
        kind: StorageKind,
        name: &str,
    ) -> Result<Vec<u8>, DataplaneError> {
        let resp = self
            .send(self.named(Method::GET, kind, name, StorageWriteOptions::default()))
            .await?;
        let resp = self.expect_success(resp).await?;
        let bytes = resp.bytes().await.map_err(|e| self.transport(e))?;
        Ok(bytes.to_vec())
    }

    /// `GET .../storage/ssl_certificates/{name}`: the certificate's metadata, typed.
    ///
    /// # Errors
    /// `NotFound` (`Fatal`) when no such certificate; `InvalidResponse` (`Fatal`) when the body
    /// is not a JSON object; others as [`DataplaneClient::list_storage`].
    pub async fn ssl_certificate_info(
        &self,
        name: &str,
    ) -> Result<SslCertificateInfo, DataplaneError> {
        self.named_json(StorageKind::SslCertificate, name, "certificate metadata")
            .await
    }

    /// `GET .../runtime/ssl_ca_files/{name}`: the CA file's name and certificate count.
    ///
    /// # Errors
    /// `NotFound` (`Fatal`) when no such CA file; `InvalidResponse` (`Fatal`) when the body is
    /// not a JSON object; others as [`DataplaneClient::list_storage`].
    pub async fn ca_file_info(&self, name: &str) -> Result<CaFileInfo, DataplaneError> {
        self.named_json(StorageKind::CaFile, name, "ca file metadata")
            .await
    }

    /// `GET` of the object `name` of `kind`, its JSON body decoded (`what` names it in an
    /// `InvalidResponse`).
    async fn named_json<T: serde::de::DeserializeOwned>(
        &self,
        kind: StorageKind,
        name: &str,
        what: &'static str,
    ) -> Result<T, DataplaneError> {
        let req = self.named(Method::GET, kind, name, StorageWriteOptions::default());
        self.send_json(req, what).await
    }

    /// `GET .../runtime/ssl_ca_files/{name}/entries/{index}`: one certificate of a CA file
    /// (`index` from 1, as HAProxy numbers them).
    ///
    /// # Errors
    /// As [`DataplaneClient::ca_file_info`].
    pub async fn ca_file_entry(
        &self,
        name: &str,
        index: u32,
    ) -> Result<SslCertificateInfo, DataplaneError> {
        let index = index.to_string();
        let mut segments = StorageKind::CaFile.segments().to_vec();
        segments.extend([name, "entries", index.as_str()]);
        self.send_json(self.request(Method::GET, &segments), "ca file entry")
            .await
    }

    /// `POST .../{kind}` multipart (`file_upload`, file name = `name`; general files also get
    /// an `id` field): store a new file. Maps get `.map` appended by the API when missing; the
    /// stored name is in the outcome. 201/200, or 202 + `Reload-ID` when it needs a reload.
    ///
    /// # Errors
    /// `AlreadyExists` (`Conflict`) on 409: replace it instead. `Rejected` (`Fatal`) on 400
    /// (e.g. a certificate PEM without its key). Others as [`DataplaneClient::list_storage`].
    pub async fn create_storage_file(
        &self,
        kind: StorageKind,
        name: &str,
        content: &[u8],
        opts: StorageWriteOptions,
    ) -> Result<StorageWriteOutcome, DataplaneError> {
        let mut form = file_upload(name, content);
        if kind == StorageKind::General {
            form = form.text("id", name.to_owned());
        }
        let req = self
            .request_with_query(
                Method::POST,
                kind.segments(),
                &flags(kind, Method::POST, opts),
            )
            .multipart(form);
        let resp = self.send(req).await?;
        if resp.status() == StatusCode::CONFLICT {
            return Err(DataplaneError::AlreadyExists {
                name: name.to_owned(),
            });
        }
        let resp = self.expect_success(resp).await?;
        let mut outcome = write_outcome(resp.headers());
        let bytes = resp.bytes().await.map_err(|e| self.transport(e))?;
        outcome.storage_name = serde_json::from_slice::<StoredFile>(&bytes)
            .ok()
            .and_then(|f| f.storage_name);
        Ok(outcome)
    }

    /// `PUT .../{kind}/{name}`: replace a stored file's content (text/plain for maps and
    /// certificates, multipart `file_upload` for general and CA files). 200/204, or 202 +
    /// `Reload-ID`.
    ///
    /// # Errors
    /// `NotFound` (`Fatal`) when no such file: create it instead. Others as
    /// [`DataplaneClient::create_storage_file`].
    pub async fn replace_storage_file(
        &self,
        kind: StorageKind,
        name: &str,
        content: &[u8],
        opts: StorageWriteOptions,
    ) -> Result<StorageWriteOutcome, DataplaneError> {
        let req = self.named(Method::PUT, kind, name, opts);
        let req = if kind.replace_is_multipart() {
            req.multipart(file_upload(name, content))
        } else {
            req.header(reqwest::header::CONTENT_TYPE, "text/plain")
                .body(content.to_vec())
        };
        let resp = self.expect_success(self.send(req).await?).await?;
        let outcome = write_outcome(resp.headers());
        drain(resp).await;
        Ok(outcome)
    }

    /// `DELETE .../{kind}/{name}`: remove a stored file. 204/200, or 202 + `Reload-ID`.
    ///
    /// # Errors
    /// `InUse` (`Fatal`) on 409: the running configuration still references the file.
    /// `NotFound` (`Fatal`) when already gone. Others as [`DataplaneClient::list_storage`].
    pub async fn delete_storage_file(
        &self,
        kind: StorageKind,
        name: &str,
        opts: StorageWriteOptions,
    ) -> Result<StorageWriteOutcome, DataplaneError> {
        let resp = self
            .send(self.named(Method::DELETE, kind, name, opts))
            .await?;
        if resp.status() == StatusCode::CONFLICT {
            let message = self.error_message(resp).await;
            return Err(DataplaneError::InUse {
                name: name.to_owned(),
                message,
            });
        }
        let resp = self.expect_success(resp).await?;
        let outcome = write_outcome(resp.headers());
        drain(resp).await;
        Ok(outcome)
    }

    fn named(
        &self,
        method: Method,
        kind: StorageKind,
        name: &str,
        opts: StorageWriteOptions,
    ) -> RequestBuilder {
        let mut segments = kind.segments().to_vec();
        segments.push(name);
        let query = flags(kind, method.clone(), opts);
        self.request_with_query(method, &segments, &query)
    }
}

/// A multipart form with the file as `file_upload`, named `name`.
fn file_upload(name: &str, content: &[u8]) -> Form {
    Form::new().part(
        FILE_UPLOAD_FIELD,
        Part::bytes(content.to_vec()).file_name(name.to_owned()),
    )
}

/// The outcome a write's answer headers give (`Reload-ID`, `Configuration-Version`); the
/// storage name is only in a create's body.
fn write_outcome(headers: &HeaderMap) -> StorageWriteOutcome {
    StorageWriteOutcome {
        storage_name: None,
        reload_id: header_reload_id(headers),
        version_after: header_version(headers),
        answered_at: header_date(headers),
    }
}

/// The reload flags of a storage call, where the published spec declares them (v3.0 to v3.3):
/// `skip_reload` and `force_reload` on every write of a certificate, on the replace (`PUT`) of a
/// map or general file, never on a CA file (runtime endpoints) nor on the create or delete of a
/// map or general file (which never reload). A flag the operation does not declare is not sent
/// (the API would ignore it; the spec check of the tests refuses it).
fn flags(
    kind: StorageKind,
    method: Method,
    opts: StorageWriteOptions,
) -> Vec<(&'static str, &'static str)> {
    let declared = match kind {
        StorageKind::SslCertificate => method != Method::GET,
        StorageKind::Map | StorageKind::General => method == Method::PUT,
        StorageKind::CaFile => false,
    };
    if !declared {
        return Vec::new();
    }
    let mut query = Vec::new();
    if opts.skip_reload {
        query.push(("skip_reload", "true"));
    }
    if opts.force_reload {
        query.push(("force_reload", "true"));
    }
    query
}
