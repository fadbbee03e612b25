//! The record envelope: the one place that knows how a table value is laid out (J5).
//!
//! ```text
//! offset  size  field
//!  0      1     format version (FORMAT_VERSION = 1)
//!  1      1     kind length K (1..=255)
//!  2      K     record kind, ASCII (`template.rendered`, `work.publish`, `blob.file`, ...)
//!  2+K    8     accepted-at, unix ms, u64 little-endian
//! 10+K    8     leadership term, u64 little-endian
//! 18+K    4     CRC32 (crc32fast, IEEE) over every other byte of the envelope, u32 LE
//! 22+K    4     payload length P, u32 little-endian
//! 26+K    P     payload: bincode 2 (serde), little-endian fixed-width integers;
//!               raw bytes for blobs
//! ```
//! The CRC covers the version, kind, accepted-at, term, length and payload (everything but the
//! CRC field itself), so a flipped bit anywhere in the value is reported.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::corrupt::CorruptReason;
use crate::ids::{Term, UnixMillis};

/// Envelope format version written by this code.
pub const FORMAT_VERSION: u8 = 1;

/// Name of the payload codec, stored in meta (`codec`).
pub const CODEC_NAME: &str = "bincode2-serde-le-fixint";

/// Byte offset of the kind inside an envelope.
const KIND_OFFSET: usize = 2;

/// The bincode configuration of every payload: little-endian, fixed-width integers, 256 MiB cap.
fn config() -> bincode::config::Configuration<
    bincode::config::LittleEndian,
    bincode::config::Fixint,
    bincode::config::Limit<{ 256 * 1024 * 1024 }>,
> {
    bincode::config::standard()
        .with_little_endian()
        .with_fixed_int_encoding()
        .with_limit::<{ 256 * 1024 * 1024 }>()
}

/// The decoded header of an envelope plus its undecoded payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawRecord<'a> {
    /// Format version byte.
    pub version: u8,
    /// Record kind.
    pub kind: &'a str,
    /// When the record was accepted (unix ms).
    pub accepted_at: UnixMillis,
    /// Leadership term current when it was written.
    pub term: Term,
    /// The stored CRC32 (already checked).
    pub crc: u32,
    /// The payload bytes.
    pub payload: &'a [u8],
}

/// Header fields of a stored record, as tools show them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordHeader {
    /// Record kind.
    pub kind: String,
    /// When it was accepted (unix ms).
    pub accepted_at: UnixMillis,
    /// Leadership term current when it was written.
    pub term: Term,
    /// Size of the whole envelope in bytes.
    pub size_bytes: u64,
}

impl RawRecord<'_> {
    /// The header as an owned value.
    #[must_use]
    pub fn header(&self) -> RecordHeader {
        RecordHeader {
            kind: self.kind.to_owned(),
            accepted_at: self.accepted_at,
            term: self.term,
            size_bytes: (26 + self.kind.len() + self.payload.len()) as u64,
        }
    }
}

/// Encodes a serde payload with the journal's codec ([`CODEC_NAME`]); [`seal`] wraps it in an
/// envelope. Public so that tools and benchmarks can write the exact bytes the journal writes.
///
/// # Panics
/// Never for the crate's record types (bincode only fails on unsupported serde features, which
/// they do not use, or beyond the 256 MiB limit, which redb's value limit precedes).
#[must_use]
pub fn encode_payload<T: Serialize>(value: &T) -> Vec<u8> {
    #[allow(clippy::expect_used)]
    bincode::serde::encode_to_vec(value, config()).expect("record types are bincode-encodable")
}

/// Decodes a serde payload.
///
/// # Errors
/// [`CorruptReason::Decode`] when the bytes are not a `T` (or have trailing bytes).
pub fn decode_payload<T: DeserializeOwned>(payload: &[u8]) -> Result<T, CorruptReason> {
    let (value, used) = bincode::serde::decode_from_slice(payload, config()).map_err(|e| {
        CorruptReason::Decode {
            message: e.to_string(),
        }
    })?;
    if used != payload.len() {
        return Err(CorruptReason::TrailingBytes {
            extra: (payload.len() - used) as u64,
        });
    }
    Ok(value)
}

/// Builds an envelope around an already-encoded payload.
///
/// # Panics
/// If `kind` is empty or longer than 255 bytes, or the payload exceeds 4 GiB (programming errors:
/// kinds are the crate's constants, payloads are capped far lower by redb).
#[must_use]
pub fn seal(kind: &str, accepted_at: UnixMillis, term: Term, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(26 + kind.len() + payload.len());
    seal_into(&mut out, kind, accepted_at, term, |out| {
        out.extend_from_slice(payload);
    });
    out
}

/// Encodes `value` and seals it.
#[cfg(test)]
pub(crate) fn seal_value<T: Serialize>(
    kind: &str,
    accepted_at: UnixMillis,
    term: Term,
    value: &T,
) -> Vec<u8> {
    let mut out = Vec::new();
    seal_value_into(&mut out, kind, accepted_at, term, value);
    out
}

/// Encodes `value` and seals it into `out` (cleared first), in one pass: the payload is encoded
/// straight after the header, then the length and the CRC are filled in. The writer thread
/// reuses one buffer for every record it writes, so sealing allocates nothing once the buffer has
/// grown to the largest record.
///
/// # Panics
/// As [`seal`] and [`encode_payload`].
pub(crate) fn seal_value_into<T: Serialize>(
    out: &mut Vec<u8>,
    kind: &str,
    accepted_at: UnixMillis,
    term: Term,
    value: &T,
) {
    seal_into(out, kind, accepted_at, term, |out| {
        #[allow(clippy::expect_used)]
        bincode::serde::encode_into_writer(value, VecAppend(out), config())
            .expect("record types are bincode-encodable");
    });
}

/// A bincode writer appending to a `Vec`.
struct VecAppend<'a>(&'a mut Vec<u8>);

impl bincode::enc::write::Writer for VecAppend<'_> {
    fn write(&mut self, bytes: &[u8]) -> Result<(), bincode::error::EncodeError> {
        self.0.extend_from_slice(bytes);
        Ok(())
    }
}

/// Writes the header into `out` (cleared first), lets `payload` append the payload, then fills in
/// the payload length and the CRC.
fn seal_into(
    out: &mut Vec<u8>,
    kind: &str,
    accepted_at: UnixMillis,
    term: Term,
    payload: impl FnOnce(&mut Vec<u8>),
) {
    assert!(
        !kind.is_empty() && kind.len() <= 255,
        "record kind length out of range"
    );
    out.clear();
    out.push(FORMAT_VERSION);
    out.push(kind.len() as u8);
    out.extend_from_slice(kind.as_bytes());
    out.extend_from_slice(&accepted_at.0.to_le_bytes());
    out.extend_from_slice(&term.0.to_le_bytes());
    out.extend_from_slice(&[0u8; 8]);
    let header_len = out.len();
    payload(out);
    #[allow(clippy::expect_used)]
    let payload_len = u32::try_from(out.len() - header_len).expect("payload under 4 GiB");
    let crc_at = KIND_OFFSET + kind.len() + 16;
    out[crc_at + 4..crc_at + 8].copy_from_slice(&payload_len.to_le_bytes());
    let crc = crc_of(out, crc_at);
    out[crc_at..crc_at + 4].copy_from_slice(&crc.to_le_bytes());
}

fn crc_of(bytes: &[u8], crc_at: usize) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&bytes[..crc_at]);
    h.update(&bytes[crc_at + 4..]);
    h.finalize()
}

/// Checks and splits an envelope. Does not decode the payload.
///
/// # Errors
/// A [`CorruptReason`] for a short value, an unknown version, a non-ASCII kind, a length that
/// disagrees with the value, or a CRC mismatch; [`CorruptReason::offset`] gives the byte offset.
pub fn open(bytes: &[u8]) -> Result<RawRecord<'_>, CorruptReason> {
    let short = |needed: usize| CorruptReason::Truncated {
        len: bytes.len() as u64,
        needed: needed as u64,
    };
    if bytes.len() < 2 {
        return Err(short(2));
    }
    let version = bytes[0];
    if version != FORMAT_VERSION {
        return Err(CorruptReason::UnknownFormatVersion { found: version });
    }
    let kind_len = bytes[1] as usize;
    let header_len = 26 + kind_len;
    if bytes.len() < header_len {
        return Err(short(header_len));
    }
    let kind = std::str::from_utf8(&bytes[KIND_OFFSET..KIND_OFFSET + kind_len])
        .ok()
        .filter(|k| !k.is_empty() && k.bytes().all(|b| b.is_ascii_graphic()))
        .ok_or(CorruptReason::BadKind)?;
    let at = KIND_OFFSET + kind_len;
    let u64_at = |i: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&bytes[i..i + 8]);
        u64::from_le_bytes(b)
    };
    let u32_at = |i: usize| {
        let mut b = [0u8; 4];
        b.copy_from_slice(&bytes[i..i + 4]);
        u32::from_le_bytes(b)
    };
    let accepted_at = UnixMillis(u64_at(at));
    let term = Term(u64_at(at + 8));
    let crc_at = at + 16;
    let crc = u32_at(crc_at);
    let payload_len = u32_at(crc_at + 4) as usize;
    if bytes.len() != header_len + payload_len {
        return Err(CorruptReason::LengthMismatch {
            declared: payload_len as u64,
            actual: (bytes.len() - header_len) as u64,
            offset: (crc_at + 4) as u64,
        });
    }
    let computed = crc_of(bytes, crc_at);
    if computed != crc {
        return Err(CorruptReason::CrcMismatch {
            stored: crc,
            computed,
            offset: crc_at as u64,
        });
    }
    Ok(RawRecord {
        version,
        kind,
        accepted_at,
        term,
        crc,
        payload: &bytes[header_len..],
    })
}

/// Checks an envelope and decodes its payload as `T`, after checking the kind with `kind_ok`.
///
/// # Errors
/// As [`open`], plus [`CorruptReason::UnexpectedKind`] and [`CorruptReason::Decode`].
pub fn open_as<T: DeserializeOwned>(
    bytes: &[u8],
    kind_ok: impl Fn(&str) -> bool,
) -> Result<(RecordHeader, T), CorruptReason> {
    let raw = open(bytes)?;
    if !kind_ok(raw.kind) {
        return Err(CorruptReason::UnexpectedKind {
            found: raw.kind.to_owned(),
        });
    }
    let value = decode_payload(raw.payload)?;
    Ok((raw.header(), value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::Checksum;

    #[test]
    fn seal_open_round_trip_and_every_flip_is_caught() {
        let sealed = seal_value(
            "test.kind",
            UnixMillis(42),
            Term(7),
            &(1u32, "x".to_string()),
        );
        let raw = open(&sealed).expect("valid");
        assert_eq!(raw.kind, "test.kind");
        assert_eq!(raw.term, Term(7));
        assert_eq!(raw.accepted_at, UnixMillis(42));
        let v: (u32, String) = decode_payload(raw.payload).expect("decodes");
        assert_eq!(v, (1, "x".to_string()));
        for i in 0..sealed.len() {
            let mut bad = sealed.clone();
            bad[i] ^= 0x10;
            assert!(open(&bad).is_err(), "flip at {i} not detected");
        }
    }

    /// The in-place encoder writes exactly the bytes of "encode the payload, then seal it",
    /// including when the reused buffer held a longer record before.
    #[test]
    fn sealing_in_place_equals_encode_then_seal() {
        let value = (7u64, "payload".to_string(), Some(3u32));
        let two_step = seal("test.kind", UnixMillis(5), Term(2), &encode_payload(&value));
        let mut buf = vec![0xAA; 300];
        seal_value_into(&mut buf, "test.kind", UnixMillis(5), Term(2), &value);
        assert_eq!(buf, two_step);
        assert_eq!(
            seal_value("test.kind", UnixMillis(5), Term(2), &value),
            two_step
        );
        let raw = open(&buf).expect("valid");
        assert_eq!(
            decode_payload::<(u64, String, Option<u32>)>(raw.payload).unwrap(),
            value
        );
    }

    #[test]
    fn integers_are_little_endian_fixed_width() {
        assert_eq!(encode_payload(&0x0102_0304u32), vec![4, 3, 2, 1]);
        assert_eq!(encode_payload(&1u64).len(), 8);
    }

    #[test]
    fn checksum_serde_is_text_in_json_and_bytes_in_bincode() {
        let c = Checksum::of(b"x");
        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(json, format!("\"{c}\""));
        assert_eq!(serde_json::from_str::<Checksum>(&json).unwrap(), c);
        let bytes = encode_payload(&c);
        assert_eq!(bytes, c.0.to_vec(), "schema 1 payload bytes unchanged");
        assert_eq!(decode_payload::<Checksum>(&bytes).unwrap(), c);
    }
}
