//! Newtypes for every identifier, version, checksum and timestamp the journal stores.
//!
//! None of them is a bare `String` or integer in the API (STYLE.md 2.5). Integers are written
//! little-endian wherever they appear in keys or envelopes.

use std::fmt;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Position of an accepted event in the events log.
///
/// Shape: gap-free, starting at 1, assigned by the journal in commit order; never reused, even
/// after the event is trimmed (the next value lives in meta). Events are dispatched in `Seq` order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Seq(pub u64);

impl Seq {
    /// The first sequence number the journal hands out.
    pub const FIRST: Seq = Seq(1);

    /// The sequence number right after this one.
    #[must_use]
    pub fn next(self) -> Seq {
        Seq(self.0 + 1)
    }
}

impl fmt::Display for Seq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Version of one work item: the value a worker takes with the item and hands back to ack it.
///
/// Shape: one counter for all queues, starting at 1, strictly increasing, never reused. Every
/// enqueue (including a replace-latest of a status or slot item) gets a fresh `WorkId`, so a
/// compare-and-delete ack on an older id leaves a newer value alone (DESIGN.md J3). Reschedule and
/// park keep the item's id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct WorkId(pub u64);

impl fmt::Display for WorkId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "w{}", self.0)
    }
}

/// Leadership term number, taken from the Lease (DESIGN.md J7). Term 0 means "never led".
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Term(pub u64);

impl fmt::Display for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Wall-clock time in milliseconds since the Unix epoch (UTC).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct UnixMillis(pub u64);

impl UnixMillis {
    /// The current system time. Before 1970 (a broken clock) this is 0.
    #[must_use]
    pub fn now() -> UnixMillis {
        let ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        UnixMillis(u64::try_from(ms).unwrap_or(u64::MAX))
    }

    /// Milliseconds from `self` to `later`, 0 when `later` is earlier.
    #[must_use]
    pub fn until_ms(self, later: UnixMillis) -> u64 {
        later.0.saturating_sub(self.0)
    }
}

impl fmt::Display for UnixMillis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms", self.0)
    }
}

/// A SHA-256 digest, printed and parsed as `sha256:<64 lower-case hex>` (DESIGN.md section 1).
///
/// Used for the identity of a whole render (see [`crate::render_checksum`]) and for the key of
/// every blob (single files: the digest of their content).
///
/// Serde: the text form in human-readable formats (JSON), the 32 raw bytes otherwise (the
/// journal's bincode payloads).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Checksum(pub [u8; 32]);

/// The binary serde form of [`Checksum`] (what derive would produce; schema 1 bytes).
#[derive(Serialize, Deserialize)]
#[serde(rename = "Checksum")]
struct ChecksumBytes([u8; 32]);

impl Serialize for Checksum {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() {
            serializer.collect_str(self)
        } else {
            ChecksumBytes(self.0).serialize(serializer)
        }
    }
}

impl<'de> Deserialize<'de> for Checksum {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        if deserializer.is_human_readable() {
            let text = String::deserialize(deserializer)?;
            Checksum::parse(&text).map_err(serde::de::Error::custom)
        } else {
            ChecksumBytes::deserialize(deserializer).map(|b| Checksum(b.0))
        }
    }
}

/// Error parsing a [`Checksum`] from text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid checksum {text:?}: expected sha256:<64 lower-case hex>")]
pub struct ParseChecksumError {
    /// The rejected input.
    pub text: String,
}

impl Checksum {
    /// The digest of `bytes`.
    #[must_use]
    pub fn of(bytes: &[u8]) -> Checksum {
        Checksum(Sha256::digest(bytes).into())
    }

    /// Parses `sha256:<64 lower-case hex>`.
    ///
    /// # Errors
    /// [`ParseChecksumError`] when the prefix, the length or a digit is wrong.
    pub fn parse(text: &str) -> Result<Checksum, ParseChecksumError> {
        let err = || ParseChecksumError {
            text: text.to_owned(),
        };
        let hex_part = text.strip_prefix("sha256:").ok_or_else(err)?;
        if hex_part.len() != 64 || hex_part.bytes().any(|b| b.is_ascii_uppercase()) {
            return Err(err());
        }
        let mut out = [0u8; 32];
        hex::decode_to_slice(hex_part, &mut out).map_err(|_| err())?;
        Ok(Checksum(out))
    }

    /// The raw 32 bytes (the blob table key).
    #[must_use]
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Builds a checksum from a blob table key; `None` unless it is exactly 32 bytes.
    #[must_use]
    pub fn from_key(key: &[u8]) -> Option<Checksum> {
        <[u8; 32]>::try_from(key).ok().map(Checksum)
    }
}

impl fmt::Display for Checksum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", hex::encode(self.0))
    }
}

impl fmt::Debug for Checksum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// The blob keys one event or work item references: at most two, held inline (no allocation).
///
/// Shape: an iterator over [`Checksum`]s in the record's field order; [`Self::as_slice`] views
/// them without consuming.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlobRefs {
    refs: [Checksum; 2],
    len: u8,
    next: u8,
}

impl BlobRefs {
    /// No reference.
    #[must_use]
    pub const fn none() -> BlobRefs {
        BlobRefs {
            refs: [Checksum([0; 32]); 2],
            len: 0,
            next: 0,
        }
    }

    /// One reference.
    #[must_use]
    pub const fn one(a: Checksum) -> BlobRefs {
        BlobRefs {
            refs: [a, Checksum([0; 32])],
            len: 1,
            next: 0,
        }
    }

    /// `a`, then `b` when present.
    #[must_use]
    pub fn with(a: Checksum, b: Option<Checksum>) -> BlobRefs {
        match b {
            Some(b) => BlobRefs {
                refs: [a, b],
                len: 2,
                next: 0,
            },
            None => BlobRefs::one(a),
        }
    }

    /// One reference when present.
    #[must_use]
    pub fn maybe(a: Option<Checksum>) -> BlobRefs {
        a.map_or(BlobRefs::none(), BlobRefs::one)
    }

    /// The references not yet iterated, in order.
    #[must_use]
    pub fn as_slice(&self) -> &[Checksum] {
        &self.refs[usize::from(self.next)..usize::from(self.len)]
    }
}

impl Iterator for BlobRefs {
    type Item = Checksum;

    fn next(&mut self) -> Option<Checksum> {
        if self.next < self.len {
            self.next += 1;
            Some(self.refs[usize::from(self.next - 1)])
        } else {
            None
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = usize::from(self.len - self.next);
        (n, Some(n))
    }
}

impl ExactSizeIterator for BlobRefs {}

macro_rules! string_newtype {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        pub struct $name(pub String);

        impl $name {
            /// Wraps a value.
            pub fn new(value: impl Into<String>) -> Self {
                Self(value.into())
            }

            /// The value as text.
            #[must_use]
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<&str> for $name {
            fn from(value: &str) -> Self {
                Self(value.to_owned())
            }
        }

        impl From<String> for $name {
            fn from(value: String) -> Self {
                Self(value)
            }
        }
    };
}

string_newtype!(
    /// A unique event id (HAPTIC: a UUID per event).
    EventId
);
string_newtype!(
    /// A correlation id: the event id of the event that started a reconciliation chain.
    CorrelationId
);
string_newtype!(
    /// The id of one deployment, chosen by the scheduler; `DeploymentCompleted` carries it so
    /// stale completions can be ignored.
    DeploymentId
);
string_newtype!(
    /// A Kubernetes namespace.
    Namespace
);
string_newtype!(
    /// A Kubernetes object name (pod, HAProxyCfg, ConfigMap, ...).
    ObjectName
);
string_newtype!(
    /// A Kubernetes object uid.
    ObjectUid
);
string_newtype!(
    /// The base URL of a pod's Dataplane API endpoint, e.g. `http://10.0.0.7:5555`.
    EndpointUrl
);
string_newtype!(
    /// The Dataplane API `Reload-ID` header value.
    ReloadId
);
string_newtype!(
    /// A Dataplane API configuration transaction id (`id` of `POST .../transactions`).
    TransactionId
);
string_newtype!(
    /// The identity of a controller replica (the pod name, or `standalone`).
    Identity
);
string_newtype!(
    /// A Kubernetes `resourceVersion`.
    ResourceVersion
);
string_newtype!(
    /// An HAProxy version as the Dataplane API reports it, e.g. `3.2.4`.
    HaproxyVersion
);

/// The Dataplane API configuration `version` (the `version` query parameter and
/// `Configuration-Version` header).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ConfigVersion(pub i64);

impl fmt::Display for ConfigVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A Kubernetes object generation (`metadata.generation`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Generation(pub i64);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_round_trips_through_text() {
        let c = Checksum::of(b"hello");
        let text = c.to_string();
        assert!(text.starts_with("sha256:"));
        assert_eq!(text.len(), 7 + 64);
        assert_eq!(Checksum::parse(&text), Ok(c));
        assert!(Checksum::parse("sha256:xyz").is_err());
        assert!(Checksum::parse(&text.to_uppercase()).is_err());
        assert!(Checksum::parse(&text[7..]).is_err());
    }

    #[test]
    fn blob_refs_iterate_inline_in_order() {
        let (a, b) = (Checksum::of(b"a"), Checksum::of(b"b"));
        assert_eq!(BlobRefs::none().count(), 0);
        assert_eq!(BlobRefs::one(a).collect::<Vec<_>>(), vec![a]);
        assert_eq!(BlobRefs::with(a, Some(b)).collect::<Vec<_>>(), vec![a, b]);
        assert_eq!(BlobRefs::with(a, None).len(), 1);
        assert_eq!(BlobRefs::maybe(None).as_slice(), &[] as &[Checksum]);
        let mut it = BlobRefs::with(a, Some(b));
        it.next();
        assert_eq!(it.as_slice(), &[b]);
    }
}
