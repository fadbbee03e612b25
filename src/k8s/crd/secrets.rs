//! Conventions of the Secrets that carry SSL certificates and CA files
//! (upstream-behaviour.md 11.3).

/// Label `haproxy-haptic.org/type` on such Secrets.
pub const TYPE_LABEL: &str = "haproxy-haptic.org/type";
/// Value of [`TYPE_LABEL`] for a certificate + key.
pub const TYPE_SSL_CERTIFICATE: &str = "ssl-certificate";
/// Value of [`TYPE_LABEL`] for a CA file.
pub const TYPE_CA_FILE: &str = "ssl-ca-file";
/// Annotation: `"true"` when the `certificate` data is zstd + base64.
pub const COMPRESSED_ANNOTATION: &str = "haproxy-haptic.org/compressed";
/// Annotation: `sha256:<hex>` of the uncompressed content.
pub const CHECKSUM_ANNOTATION: &str = "haproxy-haptic.org/checksum";
/// Data key of the PEM content (possibly compressed).
pub const CERTIFICATE_KEY: &str = "certificate";
/// Data key of the path on the pod.
pub const PATH_KEY: &str = "path";
/// Secret type.
pub const SECRET_TYPE: &str = "Opaque";
