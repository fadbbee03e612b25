//! One render in memory: `haproxy.cfg` plus its auxiliary files, by kind (DESIGN.md section 1,
//! "Render directory"). Pure: reading a render directory is `source::dir::read_render`, reading
//! a journaled one is the render store's (`dispatch::render`): I/O stays out of `core`.
//!
//! Two shapes of one render: [`RenderContent`], the bytes as a source read them (the checksum
//! and blob keys follow from them: [`RenderContent::manifest`]), and [`JournaledRender`], the
//! bytes as the journal holds them, each with the blob key it is stored under (what the
//! validator, the publisher, the Kubernetes writer and the deployer take).

use std::borrow::Cow;

use haptic_journal::{
    AuxFile, AuxKind, Checksum, Render, render_checksum, render_checksum_of_hashes,
};
use sha2::{Digest, Sha256};

/// The config file name at the root of a render.
pub const CONFIG_FILE: &str = "haproxy.cfg";

/// The render folders, their kinds and the pod directory each maps onto, in a fixed order.
///
/// Shape: `(folder, kind, directory on the pod)`; `ssl/` and `ca/` share `/etc/haproxy/ssl`,
/// `general/` and `crt-lists/` share `/etc/haproxy/general`.
pub const FOLDERS: &[(&str, AuxKind, &str)] = &[
    ("maps", AuxKind::Map, "/etc/haproxy/maps"),
    ("ssl", AuxKind::Ssl, "/etc/haproxy/ssl"),
    ("ca", AuxKind::Ca, "/etc/haproxy/ssl"),
    ("general", AuxKind::General, "/etc/haproxy/general"),
    ("crt-lists", AuxKind::CrtList, "/etc/haproxy/general"),
];

/// The kind of a render folder name (`maps` -> [`AuxKind::Map`], ...); `None` for other names.
#[must_use]
pub fn kind_of_folder(folder: &str) -> Option<AuxKind> {
    FOLDERS
        .iter()
        .find(|(f, _, _)| *f == folder)
        .map(|(_, k, _)| *k)
}

/// The render folder of a kind (`map` -> `maps`).
#[must_use]
pub fn folder_of_kind(kind: AuxKind) -> &'static str {
    folders_of(kind).map_or("general", |(f, _, _)| f)
}

/// The directory on the pod a kind maps onto (`/etc/haproxy/maps`, ...).
#[must_use]
pub fn pod_dir_of_kind(kind: AuxKind) -> &'static str {
    folders_of(kind).map_or("/etc/haproxy/general", |(_, _, d)| d)
}

/// The [`FOLDERS`] row of `kind`.
fn folders_of(kind: AuxKind) -> Option<&'static (&'static str, AuxKind, &'static str)> {
    FOLDERS.iter().find(|(_, k, _)| *k == kind)
}

/// One auxiliary file of a render, with its content.
#[derive(Clone, PartialEq, Eq)]
pub struct RenderFile {
    /// What kind of file this is (decides the pod directory).
    pub kind: AuxKind,
    /// Path relative to the render root, `<folder>/<name>` (e.g. `maps/hosts.map`).
    pub path: String,
    /// The bytes.
    pub content: Vec<u8>,
}

/// The file name of a render-relative path, without its folder (`maps/hosts.map` ->
/// `hosts.map`; the Dataplane storage name).
#[must_use]
pub fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// The path a file of `kind` at the render-relative `path` has on an HAProxy pod
/// (`maps/hosts.map` -> `/etc/haproxy/maps/hosts.map`).
#[must_use]
pub fn pod_path(kind: AuxKind, path: &str) -> String {
    format!("{}/{}", pod_dir_of_kind(kind), file_name(path))
}

/// `name()` and `pod_path()` of a file type with the fields `kind: AuxKind` and `path`
/// (render-relative): [`RenderFile`] and [`JournaledFile`].
macro_rules! file_paths {
    ($($file:ty),+) => { $(
        impl $file {
            /// The file name without its folder (`hosts.map`; the Dataplane storage name).
            #[must_use]
            pub fn name(&self) -> &str {
                file_name(&self.path)
            }

            /// The path the file has on an HAProxy pod (`/etc/haproxy/maps/hosts.map`).
            #[must_use]
            pub fn pod_path(&self) -> String {
                pod_path(self.kind, &self.path)
            }
        }
    )+ };
}
file_paths!(RenderFile, JournaledFile);

impl std::fmt::Debug for RenderFile {
    // Never print content: `ssl/` files hold private keys (STYLE.md 2.10).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RenderFile")
            .field("kind", &self.kind)
            .field("path", &self.path)
            .field("size_bytes", &self.content.len())
            .finish()
    }
}

/// A whole render: the config and every auxiliary file, files sorted by `path` (unique).
#[derive(Clone, PartialEq, Eq, Default)]
pub struct RenderContent {
    /// `haproxy.cfg`.
    pub config: Vec<u8>,
    /// Auxiliary files, sorted by `path`.
    pub files: Vec<RenderFile>,
}

impl std::fmt::Debug for RenderContent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RenderContent")
            .field("config_bytes", &self.config.len())
            .field("files", &self.files)
            .finish()
    }
}

impl RenderContent {
    /// A render from a config and files; sorts the files by path.
    #[must_use]
    pub fn new(config: Vec<u8>, mut files: Vec<RenderFile>) -> Self {
        files.sort_by(|a, b| a.path.cmp(&b.path));
        RenderContent { config, files }
    }

    /// The render checksum of DESIGN.md section 1 ([`render_checksum`]: over the SHA-256 of the
    /// config and of every file, so each content is hashed once).
    #[must_use]
    pub fn checksum(&self) -> Checksum {
        let files: Vec<(&str, &[u8])> = self
            .files
            .iter()
            .map(|f| (f.path.as_str(), f.content.as_slice()))
            .collect();
        render_checksum(&self.config, &files)
    }

    /// The journal manifest of this render (blob keys = SHA-256 of each content). Hashes each
    /// content once: the blob keys, and the checksum from them ([`render_checksum_of_hashes`]).
    #[must_use]
    pub fn manifest(&self) -> Render {
        let files: Vec<AuxFile> = self
            .files
            .iter()
            .map(|f| AuxFile {
                kind: f.kind,
                path: f.path.clone(),
                blob: sha256(&f.content),
                size_bytes: f.content.len() as u64,
            })
            .collect();
        let config = sha256(&self.config);
        let keys: Vec<(&str, Checksum)> = files.iter().map(|f| (f.path.as_str(), f.blob)).collect();
        Render {
            checksum: render_checksum_of_hashes(config, &keys),
            config,
            config_size_bytes: self.config.len() as u64,
            files,
        }
    }

    /// Number of auxiliary files, saturated to `u32`.
    #[must_use]
    pub fn file_count(&self) -> u32 {
        u32::try_from(self.files.len()).unwrap_or(u32::MAX)
    }
}

/// One auxiliary file of a [`JournaledRender`]: its bytes and the blob key they are stored
/// under.
#[derive(Clone, PartialEq, Eq)]
pub struct JournaledFile {
    /// What kind of file this is (decides the pod directory and the object kind).
    pub kind: AuxKind,
    /// Path relative to the render root, `<folder>/<name>` (e.g. `maps/hosts.map`).
    pub path: String,
    /// Blob key: the SHA-256 of `content`.
    pub blob: Checksum,
    /// The bytes.
    pub content: Vec<u8>,
}

impl JournaledFile {
    /// The content as text (invalid UTF-8 replaced: see [`JournaledRender::not_text`]).
    #[must_use]
    pub fn text(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(&self.content)
    }
}

impl std::fmt::Debug for JournaledFile {
    // Never print content (as RenderFile's): `ssl/` files hold private keys.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "JournaledFile {{ kind: {:?}, path: {:?}, blob: {}, size_bytes: {} }}",
            self.kind,
            self.path,
            self.blob,
            self.content.len()
        )
    }
}

/// A render as the journal holds it, read back by the render store (`dispatch::render`): its
/// checksum, and the config and every auxiliary file with the blob key each is stored under.
///
/// Shape: `files` in the manifest's order (sorted by `path`, unique).
#[derive(Clone, PartialEq, Eq)]
pub struct JournaledRender {
    /// The render checksum (DESIGN.md section 1; `spec.checksum`).
    pub checksum: Checksum,
    /// Blob key of `haproxy.cfg` (the SHA-256 of `config`).
    pub config_blob: Checksum,
    /// `haproxy.cfg`.
    pub config: Vec<u8>,
    /// Auxiliary files, sorted by path.
    pub files: Vec<JournaledFile>,
}

impl std::fmt::Debug for JournaledRender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JournaledRender")
            .field("checksum", &self.checksum)
            .field("config_bytes", &self.config.len())
            .field("files", &self.files)
            .finish()
    }
}

impl JournaledRender {
    /// `content` as the journal stores it: the checksum and blob keys of
    /// [`RenderContent::manifest`], files sorted by path.
    #[must_use]
    pub fn of(content: &RenderContent) -> Self {
        let mut files: Vec<&RenderFile> = content.files.iter().collect();
        files.sort_by(|a, b| a.path.cmp(&b.path));
        let files: Vec<JournaledFile> = files
            .into_iter()
            .map(|f| JournaledFile {
                kind: f.kind,
                path: f.path.clone(),
                blob: sha256(&f.content),
                content: f.content.clone(),
            })
            .collect();
        let config_blob = sha256(&content.config);
        let keys: Vec<(&str, Checksum)> = files.iter().map(|f| (f.path.as_str(), f.blob)).collect();
        JournaledRender {
            checksum: render_checksum_of_hashes(config_blob, &keys),
            config_blob,
            config: content.config.clone(),
            files,
        }
    }

    /// `haproxy.cfg` as text (invalid UTF-8 replaced: see [`JournaledRender::not_text`]).
    #[must_use]
    pub fn config_text(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(&self.config)
    }

    /// The blob key of the first content that is not UTF-8 (the config first, then the files
    /// in order); `None` when every content is text, as Kubernetes objects need.
    #[must_use]
    pub fn not_text(&self) -> Option<Checksum> {
        std::iter::once((self.config_blob, self.config.as_slice()))
            .chain(self.files.iter().map(|f| (f.blob, f.content.as_slice())))
            .find(|(_, bytes)| std::str::from_utf8(bytes).is_err())
            .map(|(blob, _)| blob)
    }

    /// The journal manifest of this render (the record the journal keys by `checksum`).
    #[must_use]
    pub fn manifest(&self) -> Render {
        Render {
            checksum: self.checksum,
            config: self.config_blob,
            config_size_bytes: self.config.len() as u64,
            files: self
                .files
                .iter()
                .map(|f| AuxFile {
                    kind: f.kind,
                    path: f.path.clone(),
                    blob: f.blob,
                    size_bytes: f.content.len() as u64,
                })
                .collect(),
        }
    }

    /// The render's bytes, as a source reads them (what `haproxy -c` validates).
    #[must_use]
    pub fn into_content(self) -> RenderContent {
        let files = self
            .files
            .into_iter()
            .map(|f| RenderFile {
                kind: f.kind,
                path: f.path,
                content: f.content,
            })
            .collect();
        RenderContent::new(self.config, files)
    }
}

/// SHA-256 of one blob (the journal's blob key of a single file).
#[must_use]
pub fn sha256(bytes: &[u8]) -> Checksum {
    Checksum(Sha256::digest(bytes).into())
}
