//! The render manifest: one complete HAProxy configuration plus its auxiliary files, stored by
//! reference (DESIGN.md section 1, J4).
//!
//! Contents never travel inside events or work items: the config body and every auxiliary file are
//! blobs keyed by the SHA-256 of their content, and the manifest itself is a blob keyed by the
//! render checksum ([`render_checksum`]).

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
    /// Render identity: [`render_checksum`] over the config and every file.
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
}

/// The canonical render checksum of DESIGN.md section 1.
///
/// SHA-256 over: the config as `u64` little-endian length + bytes, then every auxiliary file
/// sorted by path (CA files included) as `u64` LE path length + path bytes + `u64` LE content
/// length + content. The length prefixes make the encoding unambiguous. The controller, the
/// publisher (`spec.checksum`) and per-pod status all use this value.
#[must_use]
pub fn render_checksum(config: &[u8], files: &[(&str, &[u8])]) -> Checksum {
    use sha2::{Digest, Sha256};
    let mut sorted: Vec<&(&str, &[u8])> = files.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    let mut h = Sha256::new();
    h.update((config.len() as u64).to_le_bytes());
    h.update(config);
    for (path, content) in sorted {
        h.update((path.len() as u64).to_le_bytes());
        h.update(path.as_bytes());
        h.update((content.len() as u64).to_le_bytes());
        h.update(content);
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
}
