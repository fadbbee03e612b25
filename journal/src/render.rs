//! The render manifest: one complete HAProxy configuration plus its auxiliary files, stored by
//! reference (DESIGN.md section 1, J4).
//!
//! Contents never travel inside events or work items: the config body and every auxiliary file are
//! blobs keyed by the SHA-256 of their content, and the manifest itself is a blob keyed by the
//! render checksum ([`render_checksum`]). The render checksum is defined over those per-file
//! hashes, so each content is hashed once: its hash is both its blob key and its part of the
//! render's identity, and a manifest's key can be checked from the manifest alone.

use serde::{Deserialize, Serialize};

use crate::ids::Checksum;

/// Kind of an auxiliary file; decides the directory it is mapped to on the pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum AuxKind {
    /// `maps/` -> `/etc/haproxy/maps/`.
    Map,
    /// `ssl/` (certificate + key PEM) -> `/etc/haproxy/ssl/`. Secret material.
    Ssl,
    /// `ca/` (CA PEM) -> `/etc/haproxy/ssl/`.
    Ca,
    /// `general/` -> `/etc/haproxy/general/`.
    General,
    /// `crt-lists/` -> `/etc/haproxy/general/`.
    CrtList,
}

impl AuxKind {
    /// Stable lower-case name (`map`, `ssl`, `ca`, `general`, `crt-list`).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            AuxKind::Map => "map",
            AuxKind::Ssl => "ssl",
            AuxKind::Ca => "ca",
            AuxKind::General => "general",
            AuxKind::CrtList => "crt-list",
        }
    }

    /// Whether files of this kind hold private-key material (tools redact them by default).
    #[must_use]
    pub fn is_secret(self) -> bool {
        matches!(self, AuxKind::Ssl)
    }
}

/// One auxiliary file of a render.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuxFile {
    /// What kind of file this is.
    pub kind: AuxKind,
    /// Path relative to the render root, e.g. `maps/hosts.map`; unique within a render.
    pub path: String,
    /// Blob key: SHA-256 of the file content.
    pub blob: Checksum,
    /// Content length in bytes.
    pub size_bytes: u64,
}

/// A render manifest: the config blob plus auxiliary files, sorted by `path`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Render {
    /// Render identity: [`render_checksum`] over the config and every file (equivalently
    /// [`Self::computed_checksum`] over the blob keys below).
    pub checksum: Checksum,
    /// Blob key of `haproxy.cfg`.
    pub config: Checksum,
    /// Length of `haproxy.cfg` in bytes.
    pub config_size_bytes: u64,
    /// Auxiliary files, sorted by `path`.
    pub files: Vec<AuxFile>,
}

impl Render {
    /// Every blob this manifest references (config first, then files in path order).
    #[must_use]
    pub fn blob_refs(&self) -> Vec<Checksum> {
        let mut out = Vec::with_capacity(1 + self.files.len());
        out.push(self.config);
        out.extend(self.files.iter().map(|f| f.blob));
        out
    }

    /// The render checksum this manifest's blob keys and paths define
    /// ([`render_checksum_of_hashes`]); equals [`Self::checksum`] for every manifest the journal
    /// stores (`verify` checks it).
    #[must_use]
    pub fn computed_checksum(&self) -> Checksum {
        let files: Vec<(&str, Checksum)> = self
            .files
            .iter()
            .map(|f| (f.path.as_str(), f.blob))
            .collect();
        render_checksum_of_hashes(self.config, &files)
    }
}

/// The canonical render checksum of DESIGN.md section 1, from the contents.
///
/// Hashes each content once (SHA-256, its blob key) and combines the hashes with
/// [`render_checksum_of_hashes`]. `files`: (path relative to the render root, content), any
/// order; paths are unique within a render. The controller, the publisher (`spec.checksum`) and
/// per-pod status all use this value.
#[must_use]
pub fn render_checksum(config: &[u8], files: &[(&str, &[u8])]) -> Checksum {
    let hashed: Vec<(&str, Checksum)> = files
        .iter()
        .map(|(path, content)| (*path, Checksum::of(content)))
        .collect();
    render_checksum_of_hashes(Checksum::of(config), &hashed)
}

/// The canonical render checksum from the per-file SHA-256 hashes (the blob keys).
///
/// SHA-256 over: the config's SHA-256 (32 bytes), then every auxiliary file sorted by path (CA
/// files included) as `u64` little-endian path length + path bytes + the file's SHA-256 (32
/// bytes). Hashes are fixed-size and paths are length-prefixed, so the encoding is unambiguous.
/// `files`: (path, SHA-256 of the content), any order.
#[must_use]
pub fn render_checksum_of_hashes(config: Checksum, files: &[(&str, Checksum)]) -> Checksum {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(config.as_bytes());
    let mut add = |path: &str, hash: &Checksum| {
        h.update((path.len() as u64).to_le_bytes());
        h.update(path.as_bytes());
        h.update(hash.as_bytes());
    };
    if files.is_sorted_by(|a, b| a.0 <= b.0) {
        for (path, hash) in files {
            add(path, hash);
        }
    } else {
        let mut sorted: Vec<&(&str, Checksum)> = files.iter().collect();
        sorted.sort_by(|a, b| a.0.cmp(b.0));
        for (path, hash) in sorted {
            add(path, hash);
        }
    }
    Checksum(h.finalize().into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_checksum_ignores_file_order_but_not_content() {
        let a = render_checksum(b"cfg", &[("maps/a.map", b"1"), ("ssl/b.pem", b"2")]);
        let b = render_checksum(b"cfg", &[("ssl/b.pem", b"2"), ("maps/a.map", b"1")]);
        let c = render_checksum(b"cfg", &[("ssl/b.pem", b"2"), ("maps/a.map", b"x")]);
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_ne!(
            render_checksum(b"ab", &[]),
            render_checksum(b"a", &[("b", b"")])
        );
    }

    /// Known answers (computed independently from the definition in `journal/DESIGN.md` with
    /// Python's hashlib): the definition is part of schema 1 (blob keys of manifests,
    /// `spec.checksum` of published HAProxyCfgs). Changing it changes every stored render key.
    #[test]
    fn render_checksum_known_answers() {
        // sha256(sha256("global\n")) for a config-only render.
        assert_eq!(
            render_checksum(b"global\n", &[]).to_string(),
            "sha256:823c61d1725825d96442addb22210bc71fd991c284c33eef8093e26da752c501"
        );
        assert_eq!(
            render_checksum(
                b"global\n",
                &[
                    ("maps/hosts.map", b"example.com be\n"),
                    ("ca/root.pem", b"pem")
                ]
            )
            .to_string(),
            "sha256:d2c9da28c6be8a9dfdf156d184d8d61fed5a04a62a2771fdb0e98c358d2a1aa4"
        );
    }

    /// The checksum is a function of the per-file hashes: computing it from the contents, from
    /// their hashes, or from a manifest gives the same value.
    #[test]
    fn checksum_from_contents_hashes_and_manifest_agree() {
        let files: [(&str, &[u8]); 2] = [("ssl/b.pem", b"2"), ("maps/a.map", b"1")];
        let hashed: Vec<(&str, Checksum)> =
            files.iter().map(|(p, c)| (*p, Checksum::of(c))).collect();
        let from_contents = render_checksum(b"cfg", &files);
        let from_hashes = render_checksum_of_hashes(Checksum::of(b"cfg"), &hashed);
        assert_eq!(from_contents, from_hashes);
        let mut aux: Vec<AuxFile> = hashed
            .iter()
            .map(|(p, h)| AuxFile {
                kind: AuxKind::General,
                path: (*p).to_owned(),
                blob: *h,
                size_bytes: 1,
            })
            .collect();
        aux.sort_by(|a, b| a.path.cmp(&b.path));
        let manifest = Render {
            checksum: from_contents,
            config: Checksum::of(b"cfg"),
            config_size_bytes: 3,
            files: aux,
        };
        assert_eq!(manifest.computed_checksum(), from_contents);
        // The config hash is not a render checksum of anything else (framing): a render whose
        // only content moved from the config into a file differs.
        assert_ne!(
            render_checksum(b"", &[("a", b"cfg")]),
            render_checksum(b"cfg", &[])
        );
    }
}
