//! The one checksum format of haptic: `sha256:<64 lower-case hex>` (DESIGN.md section 1).
//!
//! # Render encoding
//! [`Checksum::of_render`] hashes this byte string (all integers `u64` little-endian):
//!
//! ```text
//! b"haptic-render-v1\0"                       domain tag (17 bytes)
//! len(config)  config                         the HAProxy configuration text, UTF-8
//! count(files)                                number of auxiliary files
//! for each file, sorted by (path, content):
//!     len(path)     path                      absolute path on the pod, UTF-8
//!     len(content)  content                   uncompressed bytes
//! ```
//!
//! Every variable-length field is length-prefixed, so the encoding is injective: two renders
//! that differ in any byte, in the split between fields, or in the number of files encode
//! differently. All auxiliary files count (maps, certificates, CA files, crt-lists, general
//! files); their kind is implied by the path. Sorting makes the order in which a render source
//! lists its files irrelevant.
//!
//! Single files are checksummed by [`Checksum::of_bytes`]: sha256 of the uncompressed content,
//! no framing (the aux objects' `spec.checksum` and the journal's blob keys).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Prefix of every checksum string.
pub const CHECKSUM_PREFIX: &str = "sha256:";

const RENDER_DOMAIN_TAG: &[u8] = b"haptic-render-v1\0";

/// A content checksum, `sha256:<64 lower-case hex>` (71 characters).
///
/// Shape: always valid; construct with [`Checksum::of_render`], [`Checksum::of_bytes`] or
/// by parsing ([`FromStr`]). Serialises as the string.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Checksum(String);

/// One auxiliary file of a render, as the checksum sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuxFile<'a> {
    /// Absolute path on the pod, e.g. `/etc/haproxy/maps/hosts.map`.
    pub path: &'a str,
    /// Uncompressed content.
    pub content: &'a [u8],
}

/// A string that is not `sha256:<64 lower-case hex>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("checksum is not of the form sha256:<64 lower-case hex>")]
pub struct ChecksumParseError;

impl Checksum {
    /// Checksum of a whole render: its config plus every auxiliary file (module docs give the
    /// exact byte encoding). The order of `files` does not matter.
    pub fn of_render(config: &str, files: &[AuxFile<'_>]) -> Checksum {
        let mut sorted: Vec<&AuxFile<'_>> = files.iter().collect();
        sorted.sort_by(|a, b| a.path.cmp(b.path).then_with(|| a.content.cmp(b.content)));
        let mut hasher = Sha256::new();
        hasher.update(RENDER_DOMAIN_TAG);
        update_framed(&mut hasher, config.as_bytes());
        hasher.update(len_le(sorted.len()));
        for file in sorted {
            update_framed(&mut hasher, file.path.as_bytes());
            update_framed(&mut hasher, file.content);
        }
        Checksum::from_digest(&hasher.finalize())
    }

    /// Checksum of one file's uncompressed content: plain sha256, no framing.
    pub fn of_bytes(content: &[u8]) -> Checksum {
        Checksum::from_digest(&Sha256::digest(content))
    }

    /// The full string, `sha256:<hex>`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The 64 hex digits without the prefix.
    pub fn hex(&self) -> &str {
        &self.0[CHECKSUM_PREFIX.len()..]
    }

    fn from_digest(digest: &[u8]) -> Checksum {
        Checksum(format!("{CHECKSUM_PREFIX}{}", hex::encode(digest)))
    }
}

fn len_le(len: usize) -> [u8; 8] {
    // usize is at most 64 bits on every supported target.
    (len as u64).to_le_bytes()
}

fn update_framed(hasher: &mut Sha256, bytes: &[u8]) {
    hasher.update(len_le(bytes.len()));
    hasher.update(bytes);
}

impl fmt::Display for Checksum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for Checksum {
    type Err = ChecksumParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let hex = s.strip_prefix(CHECKSUM_PREFIX).ok_or(ChecksumParseError)?;
        let valid = hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if valid {
            Ok(Checksum(s.to_owned()))
        } else {
            Err(ChecksumParseError)
        }
    }
}

impl TryFrom<String> for Checksum {
    type Error = ChecksumParseError;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<Checksum> for String {
    fn from(c: Checksum) -> String {
        c.0
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;

    type OwnedRender = (String, Vec<(String, Vec<u8>)>);

    fn render_strategy() -> impl Strategy<Value = OwnedRender> {
        (
            "[a-c\n]{0,6}",
            prop::collection::btree_map("[/a-c]{0,4}", prop::collection::vec(0u8..3, 0..4), 0..4),
        )
            .prop_map(|(config, files)| (config, files.into_iter().collect()))
    }

    fn checksum_of(render: &OwnedRender) -> Checksum {
        let files: Vec<AuxFile<'_>> = render
            .1
            .iter()
            .map(|(p, c)| AuxFile {
                path: p,
                content: c,
            })
            .collect();
        Checksum::of_render(&render.0, &files)
    }

    proptest! {
        /// Tiny alphabets make near-collisions (shifted boundaries, moved bytes) likely.
        #[test]
        fn different_renders_never_share_a_checksum(
            renders in prop::collection::hash_set(render_strategy(), 1..60),
        ) {
            let mut seen: HashMap<Checksum, OwnedRender> = HashMap::new();
            for render in renders {
                if let Some(other) = seen.insert(checksum_of(&render), render.clone()) {
                    prop_assert!(false, "{render:?} and {other:?} collide");
                }
            }
        }
    }

    fn file<'a>(path: &'a str, content: &'a str) -> AuxFile<'a> {
        AuxFile {
            path,
            content: content.as_bytes(),
        }
    }

    #[test]
    fn format_is_prefix_and_64_hex() {
        let c = Checksum::of_render("global\n", &[]);
        assert_eq!(c.as_str().len(), 71);
        assert!(c.as_str().starts_with("sha256:"));
        assert_eq!(c.as_str().parse::<Checksum>(), Ok(c.clone()));
        assert_eq!(c.hex().len(), 64);
    }

    #[test]
    fn known_vector_for_single_file() {
        assert_eq!(
            Checksum::of_bytes(b"abc").as_str(),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn file_order_does_not_matter() {
        let a = [
            file("/etc/haproxy/maps/a.map", "x"),
            file("/etc/haproxy/ssl/ca.pem", "y"),
        ];
        let b = [a[1], a[0]];
        assert_eq!(
            Checksum::of_render("cfg", &a),
            Checksum::of_render("cfg", &b)
        );
    }

    #[test]
    fn field_boundaries_are_framed() {
        let one = Checksum::of_render("cfg", &[file("/a", "bc")]);
        let two = Checksum::of_render("cfg", &[file("/ab", "c")]);
        let three = Checksum::of_render("cfg/a", &[]);
        let four = Checksum::of_render("cfg", &[file("/a", "b"), file("/c", "")]);
        assert_ne!(one, two);
        assert_ne!(one, three);
        assert_ne!(one, four);
    }

    #[test]
    fn ca_files_count() {
        let without = Checksum::of_render("cfg", &[]);
        let with = Checksum::of_render("cfg", &[file("/etc/haproxy/ssl/ca.pem", "pem")]);
        assert_ne!(without, with);
    }

    #[test]
    fn rejects_malformed_strings() {
        for s in [
            "",
            "sha256:",
            "md5:00",
            "sha256:ABC",
            &format!("sha256:{}", "A".repeat(64)),
        ] {
            assert!(s.parse::<Checksum>().is_err(), "{s}");
        }
        assert!(serde_json::from_str::<Checksum>("\"sha256:00\"").is_err());
    }
}
