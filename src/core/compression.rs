//! Compression of published file content: zstd, then standard base64 (upstream-behaviour.md
//! 10.6, with "0 = never" honoured).
//!
//! Content is compressed only when it is longer than the threshold *and* the encoded form is
//! strictly shorter than the original. Checksums are always computed over the uncompressed
//! content (`haptic_journal::Checksum::of` / `haptic_journal::render_checksum`), never over what
//! is stored.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

/// Default compression threshold: 1 MiB (HAPTIC's `compressionThreshold`).
pub const DEFAULT_COMPRESSION_THRESHOLD_BYTES: u64 = 1024 * 1024;

/// zstd level used for published content (zstd's default, close to Go's `SpeedDefault`).
const ZSTD_LEVEL: i32 = 3;

/// Content as it is stored in a custom resource or Secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredContent {
    /// The string to store: the original text, or base64 of its zstd frame.
    pub content: String,
    /// True when `content` is zstd + base64 (the CRD's `compressed` field).
    pub compressed: bool,
}

/// Errors decoding stored content.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DecompressError {
    /// The stored string is not valid standard base64.
    #[error("compressed content is not valid base64")]
    Base64(#[source] base64::DecodeError),
    /// The decoded bytes are not a valid zstd frame.
    #[error("compressed content is not a valid zstd frame")]
    Zstd(#[source] std::io::Error),
    /// The decompressed bytes are not UTF-8.
    #[error("decompressed content is not utf-8")]
    Utf8(#[source] std::string::FromUtf8Error),
}

/// Compress `content` when it is longer than `threshold_bytes` (0 = never compress) and the
/// result is strictly shorter; otherwise return it unchanged. A zstd failure falls back to the
/// plain content.
pub fn compress_if_needed(content: &str, threshold_bytes: u64) -> StoredContent {
    let plain = || StoredContent {
        content: content.to_owned(),
        compressed: false,
    };
    if threshold_bytes == 0 || content.len() as u64 <= threshold_bytes {
        return plain();
    }
    let Ok(frame) = zstd::bulk::compress(content.as_bytes(), ZSTD_LEVEL) else {
        return plain();
    };
    let encoded = STANDARD.encode(frame);
    if encoded.len() < content.len() {
        StoredContent {
            content: encoded,
            compressed: true,
        }
    } else {
        plain()
    }
}

/// Recover the original text from stored content.
///
/// # Errors
/// [`DecompressError`] when `compressed` is true and the content is not base64, not a zstd
/// frame, or not UTF-8 once decompressed.
pub fn decompress(stored: &StoredContent) -> Result<String, DecompressError> {
    if !stored.compressed {
        return Ok(stored.content.clone());
    }
    let frame = STANDARD
        .decode(stored.content.as_bytes())
        .map_err(DecompressError::Base64)?;
    let bytes = zstd::stream::decode_all(frame.as_slice()).map_err(DecompressError::Zstd)?;
    String::from_utf8(bytes).map_err(DecompressError::Utf8)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn round_trip_and_never_longer(text in "(backend [a-d]{1,3}\n|\\PC){0,400}", threshold in 0u64..64) {
            let stored = compress_if_needed(&text, threshold);
            prop_assert!(stored.content.len() <= text.len());
            prop_assert_eq!(decompress(&stored).ok(), Some(text));
        }
    }

    #[test]
    fn small_content_stays_plain() {
        let s = compress_if_needed("global\n", DEFAULT_COMPRESSION_THRESHOLD_BYTES);
        assert!(!s.compressed);
        assert_eq!(s.content, "global\n");
    }

    #[test]
    fn zero_threshold_never_compresses() {
        let big = "backend b\n".repeat(200_000);
        assert!(!compress_if_needed(&big, 0).compressed);
    }

    #[test]
    fn large_content_round_trips() {
        let big = "backend b\n    server s 10.0.0.1:80\n".repeat(50_000);
        let stored = compress_if_needed(&big, DEFAULT_COMPRESSION_THRESHOLD_BYTES);
        assert!(stored.compressed);
        assert!(stored.content.len() < big.len());
        assert_eq!(decompress(&stored).ok().as_deref(), Some(big.as_str()));
    }

    #[test]
    fn incompressible_content_stays_plain() {
        // base64 of pseudo-random bytes does not shrink by zstd + base64 (4/3 expansion).
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let noise: String = (0..4096)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                char::from(b'!' + (x % 90) as u8)
            })
            .collect();
        let stored = compress_if_needed(&noise, 16);
        assert!(!stored.compressed);
        assert_eq!(stored.content, noise);
    }

    #[test]
    fn corrupt_content_is_an_error() {
        let stored = StoredContent {
            content: "not base64!".into(),
            compressed: true,
        };
        assert!(matches!(
            decompress(&stored),
            Err(DecompressError::Base64(_))
        ));
    }
}
