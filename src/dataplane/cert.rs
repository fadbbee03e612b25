//! What the Dataplane API reports about a stored certificate, computed from a PEM the same way,
//! so a certificate in a render can be compared with one on a pod whose content the API does
//! not return (ecosystem.md A.5: `GET .../ssl_certificates/{name}` answers metadata).
//!
//! The rules follow client-native's `storage.ParseCertificatesInfo` (`storage/cert-info.go`),
//! which fills the `ssl_certificate` model of `GET .../storage/ssl_certificates/{name}`:
//! - every `CERTIFICATE` block of the file is parsed; `issuers` is the set of the issuer common
//!   names of all of them (sent joined by `", "`, in no fixed order);
//! - `serial` (decimal) and the fingerprints belong to the *leaf*: the only certificate, or the
//!   first one that is not a CA, has a name (common name, DNS or IP alternative name) and issued
//!   no other certificate of the file;
//! - fingerprints are hashes of the leaf's DER, written as upper-case hex; client-native
//!   separates bytes by `:`, HAProxy's runtime (`show ssl ca-file`) does not, so they are compared
//!   without separators.
//!
//! HAProxy's runtime reports CA-file entries (`GET .../runtime/ssl_ca_files/{name}/entries/{i}`)
//! with the serial in hex and the issuer as a one-line DN (`/C=FR/CN=Root`); [`serial_hex_eq`] and
//! [`dn_common_name`] read those forms.
//!
//! Pure: no I/O.

use std::collections::BTreeSet;

use sha1::Digest as _;
use x509_parser::extensions::GeneralName;
use x509_parser::pem::Pem;
use x509_parser::prelude::X509Certificate;

/// Why a PEM could not be summarised.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CertificateError {
    /// A PEM block is malformed (header, base64).
    #[error("malformed pem block")]
    Pem,
    /// A `CERTIFICATE` block is not a valid X.509 certificate.
    #[error("certificate {index} is not valid x.509")]
    X509 {
        /// Position of the block among the file's certificates, from 0.
        index: usize,
    },
}

/// One certificate of a PEM file, reduced to what the API reports about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificateFacts {
    /// Serial number in decimal (client-native: Go's `big.Int.String()`).
    pub serial_decimal: String,
    /// Serial number as upper-case hex of its magnitude, no leading zero bytes (HAProxy runtime).
    pub serial_hex: String,
    /// The issuer's common name (the last CN attribute, as Go's `pkix.Name` keeps it).
    pub issuer_cn: Option<String>,
    /// The subject's common name.
    pub subject_cn: Option<String>,
    /// SHA-256 of the DER.
    pub sha256: [u8; 32],
    /// SHA-1 of the DER.
    pub sha1: [u8; 20],
    /// `basicConstraints CA:true`.
    pub is_ca: bool,
    /// Has a common name, a DNS or an IP alternative name (client-native's leaf condition).
    pub has_name: bool,
    subject_raw: Vec<u8>,
    issuer_raw: Vec<u8>,
}

/// Every certificate of one PEM file, in file order, and which one is the leaf.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PemSummary {
    /// The `CERTIFICATE` blocks, in file order (keys and other blocks are skipped).
    pub certificates: Vec<CertificateFacts>,
    /// Index of the leaf in `certificates`, when there is one (module doc).
    pub leaf: Option<usize>,
}

impl PemSummary {
    /// The leaf certificate, when there is one.
    #[must_use]
    pub fn leaf(&self) -> Option<&CertificateFacts> {
        self.leaf.and_then(|i| self.certificates.get(i))
    }

    /// The issuer common names of all certificates (the API's `issuers`, as a set; empty names
    /// left out).
    #[must_use]
    pub fn issuers(&self) -> BTreeSet<String> {
        self.certificates
            .iter()
            .filter_map(|c| c.issuer_cn.clone())
            .flat_map(|cn| issuer_set(&cn))
            .collect()
    }
}

/// Summarises the certificates of a PEM file (module doc).
///
/// # Errors
/// [`CertificateError::Pem`] for a malformed block, [`CertificateError::X509`] for a certificate
/// block that does not parse.
pub fn summarize_pem(pem: &[u8]) -> Result<PemSummary, CertificateError> {
    let mut certificates = Vec::new();
    for block in Pem::iter_from_buffer(pem) {
        let block = block.map_err(|_| CertificateError::Pem)?;
        if block.label != "CERTIFICATE" {
            continue;
        }
        let index = certificates.len();
        let cert = block
            .parse_x509()
            .map_err(|_| CertificateError::X509 { index })?;
        certificates.push(facts(&cert, &block.contents));
    }
    let leaf = leaf_index(&certificates);
    Ok(PemSummary { certificates, leaf })
}

fn facts(cert: &X509Certificate<'_>, der: &[u8]) -> CertificateFacts {
    let last_cn = |name: &x509_parser::x509::X509Name<'_>| {
        name.iter_common_name()
            .filter_map(|a| a.as_str().ok())
            .last()
            .map(str::to_owned)
            .filter(|s| !s.is_empty())
    };
    let subject_cn = last_cn(cert.subject());
    let alt_names = cert
        .subject_alternative_name()
        .ok()
        .flatten()
        .is_some_and(|san| {
            san.value
                .general_names
                .iter()
                .any(|n| matches!(n, GeneralName::DNSName(_) | GeneralName::IPAddress(_)))
        });
    let magnitude: Vec<u8> = cert
        .raw_serial()
        .iter()
        .copied()
        .skip_while(|b| *b == 0)
        .collect();
    let serial_hex = if magnitude.is_empty() {
        "0".to_owned()
    } else {
        hex::encode_upper(&magnitude)
    };
    CertificateFacts {
        serial_decimal: cert.tbs_certificate.serial.to_string(),
        serial_hex,
        issuer_cn: last_cn(cert.issuer()),
        has_name: subject_cn.is_some() || alt_names,
        subject_cn,
        sha256: sha2::Sha256::digest(der).into(),
        sha1: sha1::Sha1::digest(der).into(),
        is_ca: cert.is_ca(),
        subject_raw: cert.subject().as_raw().to_vec(),
        issuer_raw: cert.issuer().as_raw().to_vec(),
    }
}

/// client-native `findLeafCertificate`: the only certificate, else the first that is not a CA,
/// has a name, and is nobody's issuer.
fn leaf_index(certs: &[CertificateFacts]) -> Option<usize> {
    match certs.len() {
        0 => None,
        1 => Some(0),
        _ => certs.iter().position(|c| {
            !c.is_ca && c.has_name && !certs.iter().any(|o| o.issuer_raw == c.subject_raw)
        }),
    }
}

/// The API's `issuers` string (`"R12, ISRG Root X1"`, any order) as a set; empty names dropped.
#[must_use]
pub fn issuer_set(issuers: &str) -> BTreeSet<String> {
    issuers
        .split(", ")
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// True when a reported fingerprint (`AB:CD:..` or `ABCD..`, any case) is `digest`.
#[must_use]
pub fn fingerprint_eq(reported: &str, digest: &[u8]) -> bool {
    let reported: String = reported
        .chars()
        .filter(|c| !matches!(c, ':' | ' '))
        .collect();
    reported.eq_ignore_ascii_case(&hex::encode(digest))
}

/// True when a reported hex serial (`1002`, `0A:1B`, any case, leading zeros allowed) is the
/// magnitude `serial_hex` of [`CertificateFacts`].
#[must_use]
pub fn serial_hex_eq(reported: &str, serial_hex: &str) -> bool {
    fn normal(hex: &str) -> String {
        let digits: String = hex
            .chars()
            .filter(|c| !matches!(c, ':' | ' '))
            .map(|c| c.to_ascii_uppercase())
            .collect();
        let trimmed = digits.trim_start_matches('0');
        if trimmed.is_empty() { "0" } else { trimmed }.to_owned()
    }
    normal(reported) == normal(serial_hex)
}

/// The common name of a one-line DN as HAProxy prints it (`/C=FR/O=Acme/CN=Root CA`), the last
/// one when several; `None` when the DN names none.
#[must_use]
pub fn dn_common_name(dn: &str) -> Option<String> {
    dn.rsplit('/')
        .find_map(|part| part.trim().strip_prefix("CN="))
        .map(str::to_owned)
        .filter(|s| !s.is_empty())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const SITE: &str = include_str!("../../tests/corpus/renders/05-tls/ssl/site.pem");
    const CA: &str = include_str!("../../tests/corpus/renders/07-ca/ca/clients-ca.pem");

    #[test]
    fn summarises_a_certificate_with_its_key() {
        let s = summarize_pem(SITE.as_bytes()).unwrap();
        assert_eq!(s.certificates.len(), 1, "the key block is skipped");
        let leaf = s.leaf().unwrap();
        assert!(!leaf.serial_decimal.is_empty());
        assert!(leaf.serial_decimal.chars().all(|c| c.is_ascii_digit()));
        assert!(!s.issuers().is_empty());
        assert!(leaf.subject_cn.is_some());
    }

    /// The corpus certificate as `openssl x509 -serial -issuer -fingerprint` prints it.
    #[test]
    fn agrees_with_openssl_on_the_corpus_certificates() {
        let s = summarize_pem(SITE.as_bytes()).unwrap();
        let leaf = s.leaf().unwrap();
        // serial=6D480BD9A95DF8A7594DDA5A5D4AB7DAEDF11939
        assert_eq!(
            leaf.serial_decimal,
            "623886679975639042405780590102433805754648566073"
        );
        assert_eq!(leaf.serial_hex, "6D480BD9A95DF8A7594DDA5A5D4AB7DAEDF11939");
        assert!(fingerprint_eq(
            "B0:9C:6B:DD:24:CA:D3:A8:ED:0A:15:68:9F:A4:54:5C:A4:2B:E8:E4:EF:58:C5:11:B6:82:C7:45:AB:49:87:D2",
            &leaf.sha256
        ));
        assert!(fingerprint_eq(
            "E4:20:AA:3F:FD:93:82:34:04:62:29:51:C2:29:57:4D:C5:E8:27:D1",
            &leaf.sha1
        ));
        assert_eq!(s.issuers(), issuer_set("site.haptic.test"));
        assert_eq!(leaf.subject_cn.as_deref(), Some("site.haptic.test"));
        let ca = summarize_pem(CA.as_bytes()).unwrap();
        assert_eq!(ca.certificates.len(), 1);
        assert_eq!(
            ca.certificates[0].serial_hex,
            "49B82019AA272FCD22D641602DADC739163D9F14"
        );
        assert_eq!(
            ca.certificates[0].issuer_cn.as_deref(),
            Some("Haptic Test CA")
        );
        assert!(ca.certificates[0].is_ca);
    }

    #[test]
    fn a_ca_file_has_its_certificates_in_order() {
        let s = summarize_pem(CA.as_bytes()).unwrap();
        assert!(!s.certificates.is_empty());
        assert!(s.certificates.iter().all(|c| !c.serial_hex.is_empty()));
    }

    #[test]
    fn leaf_is_the_certificate_nobody_was_issued_by() {
        let s = summarize_pem(SITE.as_bytes()).unwrap();
        let mut leaf = s.certificates[0].clone();
        leaf.is_ca = false;
        let mut ca = leaf.clone();
        ca.is_ca = true;
        ca.subject_raw = leaf.issuer_raw.clone();
        leaf.subject_raw = b"leaf".to_vec();
        assert_eq!(leaf_index(&[ca.clone(), leaf.clone()]), Some(1));
        assert_eq!(leaf_index(&[ca.clone(), ca]), None, "only CAs: no leaf");
        assert_eq!(leaf_index(&[]), None);
    }

    #[test]
    fn malformed_input() {
        assert_eq!(
            summarize_pem(b"-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n"),
            Err(CertificateError::Pem)
        );
        assert_eq!(
            summarize_pem(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"),
            Err(CertificateError::X509 { index: 0 })
        );
        assert_eq!(summarize_pem(b"no pem here").unwrap().certificates.len(), 0);
    }

    #[test]
    fn reported_forms() {
        assert_eq!(
            issuer_set("R12, ISRG Root X1"),
            issuer_set("ISRG Root X1, R12")
        );
        assert_eq!(issuer_set(", R3").len(), 1);
        assert!(fingerprint_eq("AB:cd:01", &[0xab, 0xcd, 0x01]));
        assert!(fingerprint_eq("ABCD01", &[0xab, 0xcd, 0x01]));
        assert!(!fingerprint_eq("ABCD02", &[0xab, 0xcd, 0x01]));
        assert!(serial_hex_eq("1002", "1002"));
        assert!(serial_hex_eq("00:10:02", "1002"));
        assert!(serial_hex_eq("0a", "A"));
        assert!(!serial_hex_eq("1003", "1002"));
        assert_eq!(
            dn_common_name("/C=FR/O=Acme/CN=Interm2."),
            Some("Interm2.".to_owned())
        );
        assert_eq!(dn_common_name("/O=Acme"), None);
    }
}
