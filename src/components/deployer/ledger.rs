//! The pod-truth record one sync keeps and journals (issue 24): per stored file what was
//! written and what HAProxy loaded ([`EndpointFiles`]), and the transaction it has open
//! ([`EndpointTransaction`]). Pure: the executor ([`super::sync`]) calls these as answers come
//! in and journals the result at the points its module doc names.
//!
//! Rules (journal/DESIGN.md, "Pod truth"):
//! - before a write of content `h`, the file's `written` becomes `h`; `loaded` keeps what
//!   HAProxy was known to run only when the content on disk was that (a map or general file
//!   whose bytes were read); otherwise it becomes unknown (`None`): a write that may have landed
//!   but was never loaded must never be taken for loaded;
//! - a runtime-applied write (a certificate or CA file answered without a `Reload-ID`) is loaded
//!   at once;
//! - a reload that succeeded after the writes loads every file written before it;
//! - a file found on disk with the render's content and proved loaded (the record, a runtime
//!   view) is recorded loaded, so later syncs need no runtime read;
//! - a file found on disk with the render's content but not proved loaded is recorded written
//!   with it (what HAProxy runs stays as known), so the reload that follows loads it;
//! - a deleted file is forgotten.

use haptic_journal::{
    Checksum, EndpointFiles, EndpointTransaction, EndpointUrl, FileStore, PodRef, StoredFileState,
    UnixMillis,
};

use super::decide::{Stored, file_store};
use crate::core::render::JournaledFile;
use crate::dataplane::StorageKind;

/// The record of one endpoint during a sync.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodLedger {
    /// Per stored file.
    pub files: EndpointFiles,
    /// The transaction of ours open on the endpoint, when one is.
    pub transaction: Option<EndpointTransaction>,
}

impl PodLedger {
    /// The ledger of `endpoint` (running `pod`), from the journal's records: a record written for
    /// another pod at the same URL is ignored (that pod's files are not this one's).
    #[must_use]
    pub fn new(
        endpoint: &EndpointUrl,
        pod: &PodRef,
        files: Option<EndpointFiles>,
        transaction: Option<EndpointTransaction>,
    ) -> PodLedger {
        let files = files
            .filter(|f| f.pod == *pod)
            .unwrap_or_else(|| EndpointFiles {
                endpoint: endpoint.clone(),
                pod: pod.clone(),
                files: Vec::new(),
                updated_at: UnixMillis(0),
            });
        PodLedger {
            files,
            transaction: transaction.filter(|t| t.pod == *pod),
        }
    }

    /// The file record, for [`super::decide::plan`].
    #[must_use]
    pub fn record(&self) -> Option<&EndpointFiles> {
        (!self.files.files.is_empty()).then_some(&self.files)
    }

    /// Before writing `file` over what the pod stores (`stored`, when read): `written` is the
    /// render's content, `loaded` what HAProxy is still known to run (module doc).
    pub fn before_write(&mut self, file: &JournaledFile, stored: Option<&Stored>) {
        let store = file_store(file.storage());
        let old = self.files.file(store, file.name()).cloned();
        let disk = match stored {
            Some(Stored::Content(bytes)) => Some(Checksum::of(bytes)),
            _ => None,
        };
        let loaded = match (old.as_ref().and_then(|o| o.loaded), disk) {
            (Some(loaded), Some(disk)) if loaded == disk => Some(loaded),
            _ => None,
        };
        self.set(file, loaded);
    }

    /// `file`'s entry: written with the render's content, HAProxy known to run `loaded`.
    fn set(&mut self, file: &JournaledFile, loaded: Option<Checksum>) {
        self.files.set(StoredFileState {
            store: file_store(file.storage()),
            name: file.name().to_owned(),
            written: file.blob,
            loaded,
        });
    }

    /// `file` was written and applied at runtime (no reload needed).
    pub fn applied_at_runtime(&mut self, file: &JournaledFile) {
        self.proved_loaded(file);
    }

    /// `file` is on disk with the render's content, not known loaded: `written` is the
    /// render's content, `loaded` stays what HAProxy was known to run (a later reload loads it).
    pub fn found_on_disk(&mut self, file: &JournaledFile) {
        let store = file_store(file.storage());
        let loaded = self.files.file(store, file.name()).and_then(|s| s.loaded);
        self.set(file, loaded);
    }

    /// `file` is on disk with the render's content and HAProxy runs it.
    pub fn proved_loaded(&mut self, file: &JournaledFile) {
        self.set(file, Some(file.blob));
    }

    /// A reload succeeded after every write so far: every recorded file is loaded as written.
    pub fn reloaded(&mut self) {
        for f in &mut self.files.files {
            f.loaded = Some(f.written);
        }
    }

    /// A stored file was deleted.
    pub fn deleted(&mut self, kind: StorageKind, name: &str) {
        self.files.remove(file_store(kind), name);
    }

    /// Whether every file of `files` is recorded loaded with its content.
    #[must_use]
    pub fn all_loaded<'a>(&self, files: impl IntoIterator<Item = &'a JournaledFile>) -> bool {
        files.into_iter().all(|f| {
            f.storage() == StorageKind::CaFile
                || self
                    .files
                    .file(file_store(f.storage()), f.name())
                    .is_some_and(|s| s.loaded_is(f.blob))
        })
    }

    /// Keeps only the files the render names (after a successful sync the others are gone or
    /// about to be deleted), stamped `now`.
    pub fn keep_only<'a>(
        &mut self,
        files: impl IntoIterator<Item = &'a JournaledFile>,
        now: UnixMillis,
    ) {
        let wanted: std::collections::BTreeSet<(FileStore, String)> = files
            .into_iter()
            .map(|f| (file_store(f.storage()), f.name().to_owned()))
            .collect();
        self.files
            .files
            .retain(|f| wanted.contains(&(f.store, f.name.clone())));
        self.files.updated_at = now;
    }
}

#[cfg(test)]
mod tests {
    use haptic_journal::{AuxKind, Namespace, ObjectName};

    use super::*;

    fn pod(name: &str) -> PodRef {
        PodRef {
            namespace: Namespace::new("ns"),
            name: ObjectName::new(name),
        }
    }

    fn map(content: &[u8]) -> JournaledFile {
        JournaledFile {
            kind: AuxKind::Map,
            path: "maps/hosts.map".into(),
            blob: Checksum::of(content),
            content: content.to_vec(),
        }
    }

    #[test]
    #[allow(clippy::unwrap_used)]
    fn a_write_keeps_loaded_only_when_disk_held_what_haproxy_ran() {
        let url = EndpointUrl::new("http://127.0.0.1:1");
        let mut l = PodLedger::new(&url, &pod("p"), None, None);
        let (a, b) = (map(b"a 1\n"), map(b"b 2\n"));
        l.proved_loaded(&a);
        // Disk held a (what HAProxy runs): writing b keeps loaded = a.
        l.before_write(&b, Some(&Stored::Content(b"a 1\n".to_vec())));
        let s = l.files.file(FileStore::Map, "hosts.map").unwrap();
        assert_eq!((s.written, s.loaded), (b.blob, Some(a.blob)));
        assert!(!l.all_loaded([&b]));
        // Disk held something else (an out-of-band edit, maybe reloaded): unknown.
        l.before_write(&a, Some(&Stored::Content(b"x 9\n".to_vec())));
        assert_eq!(
            l.files.file(FileStore::Map, "hosts.map").unwrap().loaded,
            None
        );
        l.reloaded();
        assert!(l.all_loaded([&a]));
    }

    #[test]
    fn a_record_of_another_pod_at_the_same_url_is_ignored() {
        let url = EndpointUrl::new("http://127.0.0.1:1");
        let mut l = PodLedger::new(&url, &pod("old"), None, None);
        l.proved_loaded(&map(b"a 1\n"));
        let again = PodLedger::new(&url, &pod("new"), Some(l.files.clone()), None);
        assert!(again.record().is_none());
    }
}
