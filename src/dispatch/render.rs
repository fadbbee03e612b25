//! The render store: a render read back from the journal's blobs by its checksum, the one
//! loader of the validator, the publisher, the scheduler and the deployer.
//!
//! ```text
//!  Checksum ─► Journal::get_render (the manifest) ─► get_blob(config), get_blob(each file)
//!            ─► JournaledRender { checksum, config_blob, config, files: [kind, path, blob, content] }
//! ```
//!
//! A render's blobs are held while a queue, a checkpoint or an in-flight deployment names it,
//! and collected after (J4, J6): a render trimmed after it was superseded, or a blob lost to a
//! damaged journal, is a [`RenderLoadError`] naming the render and the missing blob, never a
//! partial render.

use std::sync::Arc;

use haptic_journal::{Checksum, Journal, ReadError};

use crate::core::render::{CONFIG_FILE, JournaledFile, JournaledRender};

/// Why a render could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RenderLoadError {
    /// The journal holds no manifest under the checksum.
    #[error(
        "render {render} is not in the journal (never journaled, or trimmed after it was superseded)"
    )]
    NotJournaled {
        /// The render.
        render: Checksum,
    },
    /// A blob the manifest names is missing.
    #[error("render {render}: {path} (blob {blob}) is not in the journal")]
    MissingBlob {
        /// The render.
        render: Checksum,
        /// `haproxy.cfg` or the file's render-relative path.
        path: String,
        /// The missing blob's key.
        blob: Checksum,
    },
    /// The journal could not be read.
    #[error("cannot read render {render} from the journal")]
    Read {
        /// The render.
        render: Checksum,
        /// The journal's error (boxed: it is large).
        #[source]
        source: Box<ReadError>,
    },
    /// The blocking read panicked or was cancelled with its runtime.
    #[error("the journal read of render {render} did not finish")]
    Join {
        /// The render.
        render: Checksum,
        /// The task's error.
        #[source]
        source: tokio::task::JoinError,
    },
}

/// Loads render `render` from `journal`: its manifest, then the config and every file.
/// Blocking (redb reads): call it from a blocking thread, or use [`RenderStore::load`].
///
/// # Errors
/// [`RenderLoadError::NotJournaled`], [`RenderLoadError::MissingBlob`] (naming the file and
/// the blob), [`RenderLoadError::Read`].
pub fn load(journal: &Journal, render: Checksum) -> Result<JournaledRender, RenderLoadError> {
    let read = |source| RenderLoadError::Read {
        render,
        source: Box::new(source),
    };
    let manifest = journal
        .get_render(render)
        .map_err(read)?
        .ok_or(RenderLoadError::NotJournaled { render })?;
    let blob = |path: &str, blob: Checksum| -> Result<Vec<u8>, RenderLoadError> {
        journal
            .get_blob(blob)
            .map_err(read)?
            .ok_or_else(|| RenderLoadError::MissingBlob {
                render,
                path: path.to_owned(),
                blob,
            })
    };
    let config = blob(CONFIG_FILE, manifest.config)?;
    let mut files = Vec::with_capacity(manifest.files.len());
    for f in &manifest.files {
        files.push(JournaledFile {
            kind: f.kind,
            path: f.path.clone(),
            blob: f.blob,
            content: blob(&f.path, f.blob)?,
        });
    }
    Ok(JournaledRender {
        checksum: render,
        config_blob: manifest.config,
        config,
        files,
    })
}

/// Renders by checksum from one journal, each read on a blocking thread (never on an async
/// task, never under a lock). Cheap to clone.
#[derive(Clone, Debug)]
pub struct RenderStore {
    journal: Arc<Journal>,
}

impl RenderStore {
    /// The store of `journal`.
    #[must_use]
    pub fn new(journal: Arc<Journal>) -> Self {
        RenderStore { journal }
    }

    /// Loads render `render` ([`load`] on a blocking thread).
    ///
    /// # Errors
    /// As [`load`]; [`RenderLoadError::Join`] when the blocking read did not finish.
    ///
    /// # Cancel safety
    /// Cancel safe: the read finishes in its blocking task and its result is dropped.
    pub async fn load(&self, render: Checksum) -> Result<JournaledRender, RenderLoadError> {
        let journal = self.journal.clone();
        tokio::task::spawn_blocking(move || load(&journal, render))
            .await
            .map_err(|source| RenderLoadError::Join { render, source })?
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use haptic_journal::{AuxKind, Batch, JournalOptions};

    use super::*;
    use crate::core::render::{RenderContent, RenderFile, sha256};

    fn journal(dir: &tempfile::TempDir) -> Arc<Journal> {
        Arc::new(Journal::open(&JournalOptions::new(dir.path().join("j.redb"))).unwrap())
    }

    fn content() -> RenderContent {
        let file = |kind, path: &str, content: &[u8]| RenderFile {
            kind,
            path: path.into(),
            content: content.to_vec(),
        };
        RenderContent::new(
            b"global\n".to_vec(),
            vec![
                file(AuxKind::Map, "maps/hosts.map", b"a 1\n"),
                file(
                    AuxKind::Ssl,
                    "ssl/site.pem",
                    b"-----BEGIN CERTIFICATE-----\n",
                ),
            ],
        )
    }

    /// What a source journals reads back whole: the checksum, every blob key, every content,
    /// and the manifest the journal keys it by.
    #[tokio::test]
    async fn a_journaled_render_reads_back_with_its_keys() {
        let dir = tempfile::tempdir().unwrap();
        let j = journal(&dir);
        let content = content();
        let manifest = content.manifest();
        let event = crate::dispatch::input::template_rendered(
            &content,
            &manifest,
            std::time::Duration::ZERO,
            "test",
        );
        j.accept(crate::dispatch::input::render_batch(
            event, &content, &manifest,
        ))
        .unwrap();
        let back = RenderStore::new(j.clone())
            .load(manifest.checksum)
            .await
            .unwrap();
        assert_eq!(back, JournaledRender::of(&content));
        assert_eq!(back.manifest(), manifest);
        assert_eq!(back.not_text(), None);
        assert_eq!(back.into_content(), content);
    }

    /// A render the journal does not hold, and one whose file blob is gone, are errors that
    /// name the render and the missing file and blob (the loader before the store answered
    /// `None` for both, naming nothing).
    #[tokio::test]
    async fn a_missing_render_or_blob_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let j = journal(&dir);
        let store = RenderStore::new(j.clone());
        let absent = sha256(b"never journaled");
        let e = store.load(absent).await.unwrap_err();
        assert!(
            matches!(e, RenderLoadError::NotJournaled { render } if render == absent),
            "{e:?}"
        );
        assert!(e.to_string().contains(&absent.to_string()), "{e}");

        // A journaled render whose map blob is gone (the journal never drops one a manifest
        // names: only damage does), taken out of the file under the journal.
        let content = content();
        let render = content.manifest();
        let mut b = Batch::new();
        let files = content
            .files
            .iter()
            .map(|f| (f.kind, f.path.clone(), f.content.clone()))
            .collect();
        assert_eq!(b.put_render(content.config.clone(), files), render);
        b.hold_render(&render);
        j.accept(b).unwrap();
        drop((store, j));
        let lost = render.files[0].blob;
        let path = dir.path().join("j.redb");
        {
            let db = haptic_journal::open_raw(&JournalOptions::new(&path)).unwrap();
            let txn = db.begin_write().unwrap();
            txn.open_table(haptic_journal::tables::BLOBS)
                .unwrap()
                .remove(lost.as_bytes().as_slice())
                .unwrap();
            txn.commit().unwrap();
        }
        let j = Arc::new(Journal::open(&JournalOptions::new(&path).verify_on_open(false)).unwrap());
        let store = RenderStore::new(j);
        let e = store.load(render.checksum).await.unwrap_err();
        assert!(
            matches!(&e, RenderLoadError::MissingBlob { path, blob, .. }
                if path == "maps/hosts.map" && *blob == lost),
            "{e:?}"
        );
        let text = e.to_string();
        for want in [
            render.checksum.to_string(),
            "maps/hosts.map".to_owned(),
            lost.to_string(),
        ] {
            assert!(text.contains(&want), "{text} names {want}");
        }
    }

    /// Content that is not UTF-8 is found (the publisher refuses it: objects hold text).
    #[test]
    fn not_text_names_the_first_binary_blob() {
        let mut content = content();
        content.files[1].content = vec![0xff, 0xfe];
        let r = JournaledRender::of(&content);
        assert_eq!(r.not_text(), Some(sha256(&[0xff, 0xfe])));
    }
}
