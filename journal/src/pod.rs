//! What this replica knows a pod's Dataplane endpoint holds besides its configuration file
//! (schema 2; DESIGN.md J11, issue 24): per stored file, the content it last wrote there and the
//! content HAProxy loaded; and the configuration transaction it has open there.
//!
//! ```text
//!  table endpoint_files         endpoint URL -> EndpointFiles { pod, files: [StoredFileState] }
//!      written = sha256 of the content on disk after our last write (or found there)
//!      loaded  = sha256 of the content HAProxy runs (a reload after the write succeeded, a
//!                runtime update answered it applied, or a runtime view proved it); None = not
//!                known to be loaded
//!  table endpoint_transaction   endpoint URL -> EndpointTransaction { pod, id, version, state }
//!      put before the first write into the transaction, updated before the commit, removed
//!      in the batch that records the commit's or the abort's answer
//! ```
//!
//! Both are keyed by the endpoint URL, like `endpoint_applied`, and carry the pod, so a record
//! left for a URL a different pod now answers on is ignored by its reader. Neither references a
//! blob: the hashes are compared, never loaded.

use serde::{Deserialize, Serialize};

use crate::events::PodRef;
use crate::ids::{Checksum, ConfigVersion, EndpointUrl, TransactionId, UnixMillis};

/// A Dataplane API storage area (each its own name space on the pod).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum FileStore {
    /// `storage/ssl_certificates` (certificate + key PEM).
    SslCertificate,
    /// `runtime/ssl_ca_files`.
    CaFile,
    /// `storage/general` (general files, crt-lists, error pages).
    General,
    /// `storage/maps`.
    Map,
}

impl FileStore {
    /// The stable name tools print (`ssl_certificates`, `ssl_ca_files`, `general`, `maps`).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            FileStore::SslCertificate => "ssl_certificates",
            FileStore::CaFile => "ssl_ca_files",
            FileStore::General => "general",
            FileStore::Map => "maps",
        }
    }
}

/// One stored file as this replica knows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredFileState {
    /// The storage area.
    pub store: FileStore,
    /// The stored name (the base name the API stores it under).
    pub name: String,
    /// SHA-256 of the content on disk after the last write of ours, or found there.
    pub written: Checksum,
    /// SHA-256 of the content HAProxy loaded, when known; `None` when a write of ours may not
    /// have been loaded and nothing proved what HAProxy runs.
    pub loaded: Option<Checksum>,
}

impl StoredFileState {
    /// Whether HAProxy is known to run exactly `content` (its SHA-256) for this file.
    #[must_use]
    pub fn loaded_is(&self, content: Checksum) -> bool {
        self.loaded == Some(content)
    }
}

/// The stored files of one endpoint (table `endpoint_files`, keyed by URL).
///
/// Shape: `files` sorted by (store, name), no duplicates.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointFiles {
    /// The endpoint.
    pub endpoint: EndpointUrl,
    /// The pod behind it when the record was written.
    pub pod: PodRef,
    /// Per stored file (sorted by store and name).
    pub files: Vec<StoredFileState>,
    /// When it was written.
    pub updated_at: UnixMillis,
}

impl EndpointFiles {
    /// Record kind in the envelope.
    pub const RECORD_KIND: &'static str = "state.endpoint-files";

    /// The state of one stored file, if recorded.
    #[must_use]
    pub fn file(&self, store: FileStore, name: &str) -> Option<&StoredFileState> {
        self.files
            .binary_search_by(|f| (f.store, f.name.as_str()).cmp(&(store, name)))
            .ok()
            .map(|i| &self.files[i])
    }

    /// Puts one file's state (keeps `files` sorted).
    pub fn set(&mut self, state: StoredFileState) {
        match self
            .files
            .binary_search_by(|f| (f.store, f.name.as_str()).cmp(&(state.store, &state.name)))
        {
            Ok(i) => self.files[i] = state,
            Err(i) => self.files.insert(i, state),
        }
    }

    /// Forgets one file (deleted from the pod).
    pub fn remove(&mut self, store: FileStore, name: &str) {
        self.files.retain(|f| !(f.store == store && f.name == name));
    }
}

/// Where an open transaction of ours stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TransactionState {
    /// Started; changes are being written into it.
    Open,
    /// The commit was sent; its answer is not journaled yet.
    Committing,
    /// Its outcome is unknown (a commit or abort without an answer, a timeout, a cancelled
    /// sync): the next sync of the endpoint lists the pod's transactions and deletes them.
    Unknown,
}

impl TransactionState {
    /// The stable name tools print (`open`, `committing`, `unknown`).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            TransactionState::Open => "open",
            TransactionState::Committing => "committing",
            TransactionState::Unknown => "unknown",
        }
    }
}

/// A configuration transaction this replica opened on an endpoint and has not seen end (table
/// `endpoint_transaction`, keyed by URL). At most one per endpoint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointTransaction {
    /// The endpoint.
    pub endpoint: EndpointUrl,
    /// The pod behind it.
    pub pod: PodRef,
    /// The id the API assigned.
    pub id: TransactionId,
    /// The configuration version it was started at.
    pub version: ConfigVersion,
    /// Where it stands.
    pub state: TransactionState,
    /// When it was started.
    pub started_at: UnixMillis,
}

impl EndpointTransaction {
    /// Record kind in the envelope.
    pub const RECORD_KIND: &'static str = "state.endpoint-transaction";
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{Namespace, ObjectName};

    fn state(store: FileStore, name: &str, b: u8) -> StoredFileState {
        StoredFileState {
            store,
            name: name.to_owned(),
            written: Checksum([b; 32]),
            loaded: None,
        }
    }

    #[test]
    fn set_keeps_files_sorted_and_replaces() {
        let mut e = EndpointFiles {
            endpoint: EndpointUrl::new("http://127.0.0.1:1"),
            pod: PodRef {
                namespace: Namespace::new("ns"),
                name: ObjectName::new("p"),
            },
            files: Vec::new(),
            updated_at: UnixMillis(0),
        };
        e.set(state(FileStore::Map, "b.map", 1));
        e.set(state(FileStore::SslCertificate, "z.pem", 2));
        e.set(state(FileStore::Map, "a.map", 3));
        e.set(state(FileStore::Map, "b.map", 4));
        let names: Vec<(FileStore, &str, u8)> = e
            .files
            .iter()
            .map(|f| (f.store, f.name.as_str(), f.written.0[0]))
            .collect();
        assert_eq!(
            names,
            vec![
                (FileStore::SslCertificate, "z.pem", 2),
                (FileStore::Map, "a.map", 3),
                (FileStore::Map, "b.map", 4)
            ]
        );
        assert_eq!(
            e.file(FileStore::Map, "b.map").map(|f| f.written.0[0]),
            Some(4)
        );
        assert!(e.file(FileStore::General, "b.map").is_none());
        e.remove(FileStore::Map, "a.map");
        assert_eq!(e.files.len(), 2);
    }
}
