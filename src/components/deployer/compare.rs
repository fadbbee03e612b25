//! How the deployer tells what a pod holds from what it should hold, one file at a time: on
//! disk (what the storage endpoints report) and loaded (what HAProxy runs, as the runtime
//! endpoints report it). Pure: no I/O.
//!
//! On disk ([`compare`]): maps and general files by content; certificates by the metadata the
//! storage API returns (serial + issuers, else the SHA-256 fingerprint; a reported size and
//! fingerprint must agree); CA files by their runtime entries, matched in any order.
//!
//! Loaded ([`loaded_matches`]), for a file whose content on disk is the render's:
//! - a map by its entries as HAProxy parsed the file (`show map`): key and value per line, in
//!   file order, read from the render's bytes the way HAProxy reads a map file
//!   ([`map_entries`]);
//! - a certificate by what `show ssl cert` reports (runtime form: hex serial, one-line DN
//!   issuer, fingerprints), as CA-file entries are compared;
//! - a crt-list by its lines (`show ssl crt-list`): the certificate each names and its SNI
//!   filters, in order;
//! - a CA file is read through the runtime in the first place: on disk equal is loaded.
//!
//! General files (error pages) have no runtime view. A view that cannot be matched exactly
//! answers "not loaded": the cost of a wrong "not loaded" is one reload, of a wrong "loaded" a
//! pod serving old content while its status says synced (issue 24).

use super::decide::{CaFileEntries, FileReason, LoadedView, Stored};
use crate::dataplane::cert::{self, PemSummary};
use crate::dataplane::{CrtListEntry, MapEntry, SslCertificateInfo, StorageKind};

/// The entries of a map file as HAProxy reads it (`pat_ref_read_from_file_smp`): leading
/// white space skipped; empty lines and lines starting with `#` skipped; the key runs to the
/// first white space; the value starts after the white space that follows and runs to the end
/// of the line, trailing spaces and tabs removed.
///
/// Shape: (key, value) in file order, duplicates kept.
#[must_use]
pub fn map_entries(content: &[u8]) -> Vec<(String, String)> {
    let text = String::from_utf8_lossy(content);
    let mut out = Vec::new();
    for line in text.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        let rest = line.trim_start_matches(|c: char| c.is_ascii_whitespace());
        if rest.is_empty() || rest.starts_with('#') {
            continue;
        }
        let key_end = rest
            .find(|c: char| c.is_ascii_whitespace())
            .unwrap_or(rest.len());
        let (key, after) = rest.split_at(key_end);
        let value = after
            .trim_start_matches(|c: char| c.is_ascii_whitespace())
            .trim_end_matches([' ', '\t', '\r']);
        out.push((key.to_owned(), value.to_owned()));
    }
    out
}

/// The lines of a crt-list file: (certificate path, SNI filters), comments and empty lines
/// skipped; the bracketed SSL options are not compared (their spelling is HAProxy's).
#[must_use]
pub fn crt_list_lines(content: &[u8]) -> Vec<(String, Vec<String>)> {
    let text = String::from_utf8_lossy(content);
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut words = line.split_whitespace();
        let Some(file) = words.next() else { continue };
        let rest: Vec<&str> = words.collect();
        let mut filters = Vec::new();
        let mut in_options = false;
        for w in rest {
            if in_options {
                if w.ends_with(']') {
                    in_options = false;
                }
                continue;
            }
            if let Some(stripped) = w.strip_prefix('[') {
                in_options = !stripped.ends_with(']');
                continue;
            }
            filters.push(w.to_owned());
        }
        out.push((file.to_owned(), filters));
    }
    out
}

/// Whether what HAProxy reports loaded for a file of `kind` is the render's `content`.
#[must_use]
pub fn loaded_matches(
    kind: StorageKind,
    is_crt_list: bool,
    view: &LoadedView,
    content: &[u8],
) -> bool {
    match (kind, view) {
        (StorageKind::Map, LoadedView::MapEntries(entries)) => {
            let want = map_entries(content);
            want.len() == entries.len()
                && want
                    .iter()
                    .zip(entries)
                    .all(|((k, v), e): (&(String, String), &MapEntry)| *k == e.key && *v == e.value)
        }
        (StorageKind::SslCertificate, LoadedView::Certificate(info)) => {
            let Ok(summary) = cert::summarize_pem(content) else {
                return false;
            };
            summary
                .leaf()
                .is_some_and(|leaf| ca_entry_matches(info, leaf).is_ok())
        }
        (StorageKind::General, LoadedView::CrtList(entries)) if is_crt_list => {
            let want = crt_list_lines(content);
            want.len() == entries.len()
                && want.iter().zip(entries).all(
                    |((file, filters), e): (&(String, Vec<String>), &CrtListEntry)| {
                        same_file(file, &e.file) && *filters == e.sni_filter
                    },
                )
        }
        _ => false,
    }
}

/// Two names of one certificate file: equal, or one is the other's base name.
fn same_file(a: &str, b: &str) -> bool {
    let base = |s: &str| s.rsplit('/').next().unwrap_or(s).to_owned();
    a == b || base(a) == base(b)
}

/// `Ok` when the stored file holds `content`; otherwise why not.
pub fn compare(kind: StorageKind, stored: &Stored, content: &[u8]) -> Result<(), FileReason> {
    match (kind, stored) {
        (StorageKind::Map | StorageKind::General, Stored::Content(bytes)) => {
            if bytes.as_slice() == content {
                Ok(())
            } else {
                Err(FileReason::ContentDiffers)
            }
        }
        (StorageKind::SslCertificate, Stored::Certificate(info)) => {
            let info: &SslCertificateInfo = info;
            let summary = cert::summarize_pem(content).map_err(|_| FileReason::Unparsable)?;
            certificate_matches(info, &summary, content.len())
        }
        (StorageKind::CaFile, Stored::CaFile(entries)) => {
            let summary = cert::summarize_pem(content).map_err(|_| FileReason::Unparsable)?;
            ca_file_matches(entries, &summary)
        }
        _ => Err(FileReason::Unread),
    }
}

fn reported(field: Option<&String>) -> Option<&str> {
    field.map(|s| s.trim()).filter(|s| !s.is_empty())
}

/// A stored certificate against the render's PEM: serial + issuers, falling back to the SHA-256
/// fingerprint; a reported size and a reported fingerprint must agree as well.
fn certificate_matches(
    info: &SslCertificateInfo,
    summary: &PemSummary,
    size: usize,
) -> Result<(), FileReason> {
    if let Some(stored) = info.size
        && usize::try_from(stored).ok() != Some(size)
    {
        return Err(FileReason::SizeDiffers {
            stored,
            wanted: size,
        });
    }
    let leaf = summary.leaf();
    let mut identified = false;
    if let Some(serial) = reported(info.serial.as_ref()) {
        let Some(leaf) = leaf else {
            return Err(FileReason::SerialDiffers);
        };
        if serial != leaf.serial_decimal {
            return Err(FileReason::SerialDiffers);
        }
        let issuers = info.issuers.as_deref().map(cert::issuer_set);
        if issuers.unwrap_or_default() != summary.issuers() {
            return Err(FileReason::IssuersDiffer);
        }
        identified = true;
    }
    fingerprints_identify(
        [(
            info.sha256_finger_print.as_ref(),
            leaf.map(|l| &l.sha256[..]),
        )],
        identified,
    )
}

/// The fingerprints a pod reports, each beside the digest it must equal (`None`: the render
/// has no certificate to compare it with), after `identified` (an identity matched already):
/// `FingerprintDiffers` at the first reported one that differs; `NoIdentity` when neither an
/// earlier identity nor a fingerprint identified the file.
fn fingerprints_identify<'a>(
    reported_digests: impl IntoIterator<Item = (Option<&'a String>, Option<&'a [u8]>)>,
    mut identified: bool,
) -> Result<(), FileReason> {
    for (fp, digest) in reported_digests {
        if let Some(fp) = reported(fp) {
            if !digest.is_some_and(|d| cert::fingerprint_eq(fp, d)) {
                return Err(FileReason::FingerprintDiffers);
            }
            identified = true;
        }
    }
    if identified {
        Ok(())
    } else {
        Err(FileReason::NoIdentity)
    }
}

/// A CA file's entries against the render's PEM: the count, then every entry matched to a
/// distinct certificate of the file (HAProxy may number them in another order).
fn ca_file_matches(stored: &CaFileEntries, summary: &PemSummary) -> Result<(), FileReason> {
    let n = summary.certificates.len();
    if stored.count != u32::try_from(n).ok() || stored.entries.len() != n {
        return Err(FileReason::CaEntriesDiffer);
    }
    let mut unused: Vec<&cert::CertificateFacts> = summary.certificates.iter().collect();
    for entry in &stored.entries {
        let mut last = FileReason::CaEntriesDiffer;
        let found = unused
            .iter()
            .position(|c| match ca_entry_matches(entry, c) {
                Ok(()) => true,
                Err(reason) => {
                    last = reason;
                    false
                }
            });
        match found {
            Some(i) => {
                unused.swap_remove(i);
            }
            None if n == 1 => return Err(last),
            None => return Err(FileReason::CaEntriesDiffer),
        }
    }
    Ok(())
}

/// One CA-file entry (runtime form: hex serial, one-line DN issuer) against one certificate.
pub(super) fn ca_entry_matches(
    entry: &SslCertificateInfo,
    facts: &cert::CertificateFacts,
) -> Result<(), FileReason> {
    let mut identified = false;
    if let Some(serial) = reported(entry.serial.as_ref()) {
        if !cert::serial_hex_eq(serial, &facts.serial_hex) {
            return Err(FileReason::SerialDiffers);
        }
        let issuer = reported(entry.issuers.as_ref()).and_then(cert::dn_common_name);
        if issuer != facts.issuer_cn {
            return Err(FileReason::IssuersDiffer);
        }
        identified = true;
    }
    fingerprints_identify(
        [
            (entry.sha1_finger_print.as_ref(), Some(&facts.sha1[..])),
            (entry.sha256_finger_print.as_ref(), Some(&facts.sha256[..])),
        ],
        identified,
    )
}
