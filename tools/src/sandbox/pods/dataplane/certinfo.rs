//! Certificate metadata as the real Dataplane API reports it, computed from the stored PEM.
//!
//! - `GET /v3/services/haproxy/storage/ssl_certificates/{name}` (and the answers of its POST and
//!   PUT): dataplaneapi's handler fills the `ssl_certificate` model from client-native's
//!   `storage.ParseCertificatesInfo` (`storage/cert-info.go`): `file`, `description`
//!   (`managed SSL file`), `storage_name`, `size`, `not_before` (the latest of the file's
//!   certificates), `not_after` (the earliest), `issuers` (issuer common names of every
//!   certificate, `", "`-joined), `domains` (common names and DNS names of the non-CA
//!   certificates), `ip_addresses`, `subject` (the leaf's common name), `serial` (the leaf's, in
//!   decimal). Empty values are left out (go-swagger `omitempty`). The model's
//!   `sha256_finger_print` is not filled by released handlers (dataplaneapi pull request 396),
//!   so it is not sent here either.
//! - `GET /v3/services/haproxy/runtime/ssl_ca_files/{name}/entries/{index}` (index from 1):
//!   client-native's `parseCertEntry` of HAProxy's `show ssl ca-file <name>:<index>`:
//!   `storage_name`, `status` (`Used`), `serial` (upper-case hex), `not_before`, `not_after`,
//!   `algorithm` (`RSA2048`, `EC256`), `sha1_finger_print` (upper-case hex), `subject` and
//!   `issuers` (one-line DNs, `/C=FR/CN=Root`).
//!
//! The leaf is client-native's: the only certificate, else the first that is not a CA, has a
//! name and issued no other certificate of the file.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};
use sha1::Digest as _;
use x509_parser::extensions::GeneralName;
use x509_parser::objects::{oid_registry, oid2abbrev};
use x509_parser::pem::Pem;
use x509_parser::prelude::X509Certificate;
use x509_parser::public_key::PublicKey;
use x509_parser::x509::X509Name;

/// The DER of every `CERTIFICATE` block of a PEM file, in order (`None` when a block is
/// malformed).
fn certificate_ders(pem: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    for block in Pem::iter_from_buffer(pem) {
        let block = block.ok()?;
        if block.label == "CERTIFICATE" {
            out.push(block.contents);
        }
    }
    Some(out)
}

fn parse(der: &[u8]) -> Option<X509Certificate<'_>> {
    x509_parser::parse_x509_certificate(der)
        .ok()
        .map(|(_, c)| c)
}

fn common_name(name: &X509Name<'_>) -> String {
    name.iter_common_name()
        .filter_map(|a| a.as_str().ok())
        .last()
        .unwrap_or_default()
        .to_owned()
}

fn names(cert: &X509Certificate<'_>) -> (Vec<String>, Vec<String>) {
    let mut dns = Vec::new();
    let mut ips = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for n in &san.value.general_names {
            match n {
                GeneralName::DNSName(d) => dns.push((*d).to_owned()),
                GeneralName::IPAddress(b) => {
                    if let Ok(v4) = <[u8; 4]>::try_from(*b) {
                        ips.push(std::net::Ipv4Addr::from(v4).to_string());
                    } else if let Ok(v6) = <[u8; 16]>::try_from(*b) {
                        ips.push(std::net::Ipv6Addr::from(v6).to_string());
                    }
                }
                _ => {}
            }
        }
    }
    (dns, ips)
}

/// RFC 3339 with milliseconds, as go-openapi's `strfmt.DateTime` marshals.
fn date_time(unix_seconds: i64) -> Option<String> {
    let ts = jiff::Timestamp::from_second(unix_seconds).ok()?;
    Some(ts.strftime("%Y-%m-%dT%H:%M:%S.000Z").to_string())
}

fn leaf<'a>(certs: &'a [X509Certificate<'a>]) -> Option<&'a X509Certificate<'a>> {
    if certs.len() == 1 {
        return certs.first();
    }
    certs.iter().find(|c| {
        let (dns, ips) = names(c);
        let named = !common_name(c.subject()).is_empty() || !dns.is_empty() || !ips.is_empty();
        !c.is_ca()
            && named
            && !certs
                .iter()
                .any(|o| o.issuer().as_raw() == c.subject().as_raw())
    })
}

fn put(map: &mut Map<String, Value>, key: &str, value: String) {
    if !value.is_empty() {
        map.insert(key.to_owned(), Value::String(value));
    }
}

/// The `ssl_certificate` answer of `GET .../storage/ssl_certificates/{name}` for a stored file
/// (module doc). `file` is the path on the pod.
pub(super) fn storage_certificate(name: &str, file: &str, pem: &[u8]) -> Value {
    let mut out = Map::new();
    out.insert("file".into(), json!(file));
    out.insert("description".into(), json!("managed SSL file"));
    out.insert("storage_name".into(), json!(name));
    out.insert("size".into(), json!(pem.len()));
    let ders = certificate_ders(pem).unwrap_or_default();
    let certs: Vec<X509Certificate<'_>> = ders.iter().filter_map(|d| parse(d)).collect();
    let mut issuers = BTreeSet::new();
    let mut domains = BTreeSet::new();
    let mut ips = BTreeSet::new();
    let mut not_after: Option<i64> = None;
    let mut not_before: Option<i64> = None;
    for c in &certs {
        let validity = c.validity();
        let (na, nb) = (
            validity.not_after.timestamp(),
            validity.not_before.timestamp(),
        );
        not_after = Some(not_after.map_or(na, |x| x.min(na)));
        not_before = Some(not_before.map_or(nb, |x| x.max(nb)));
        issuers.insert(common_name(c.issuer()));
        if !c.is_ca() {
            let cn = common_name(c.subject());
            if !cn.is_empty() {
                domains.insert(cn);
            }
            let (dns, addrs) = names(c);
            domains.extend(dns);
            ips.extend(addrs);
        }
    }
    if let Some(t) = not_after.and_then(date_time) {
        out.insert("not_after".into(), json!(t));
    }
    if let Some(t) = not_before.and_then(date_time) {
        out.insert("not_before".into(), json!(t));
    }
    let join = |s: &BTreeSet<String>| s.iter().cloned().collect::<Vec<_>>().join(", ");
    put(&mut out, "issuers", join(&issuers));
    put(&mut out, "domains", join(&domains));
    put(&mut out, "ip_addresses", join(&ips));
    if let Some(l) = leaf(&certs) {
        put(&mut out, "subject", common_name(l.subject()));
        put(&mut out, "serial", l.tbs_certificate.serial.to_string());
    }
    Value::Object(out)
}

/// How many certificates a CA file holds (`show ssl ca-file`).
pub(super) fn ca_count(pem: &[u8]) -> usize {
    certificate_ders(pem).map_or(0, |d| d.len())
}

/// One-line DN as OpenSSL's `X509_NAME_oneline` writes it (`/C=FR/O=Acme/CN=Root`).
fn oneline(name: &X509Name<'_>) -> String {
    let mut out = String::new();
    for attr in name.iter_attributes() {
        let key = oid2abbrev(attr.attr_type(), oid_registry())
            .map(str::to_owned)
            .unwrap_or_else(|_| attr.attr_type().to_id_string());
        let value = attr.as_str().unwrap_or_default();
        out.push('/');
        out.push_str(&key);
        out.push('=');
        out.push_str(value);
    }
    out
}

fn algorithm(cert: &X509Certificate<'_>) -> String {
    match cert.public_key().parsed() {
        Ok(PublicKey::RSA(k)) => format!("RSA{}", k.key_size()),
        Ok(PublicKey::EC(k)) => format!("EC{}", k.key_size()),
        Ok(PublicKey::DSA(y)) => format!("DSA{}", y.len() * 8),
        _ => "unknown".to_owned(),
    }
}

/// The `ssl_certificate` answer of `GET .../runtime/ssl_ca_files/{name}/entries/{index}`
/// (`index` from 1), or `None` when the file holds no such certificate.
pub(super) fn ca_entry(name: &str, pem: &[u8], index: usize) -> Option<Value> {
    let ders = certificate_ders(pem)?;
    let der = ders.get(index.checked_sub(1)?)?;
    let cert = parse(der)?;
    let mut out = Map::new();
    out.insert("storage_name".into(), json!(name));
    out.insert("status".into(), json!("Used"));
    show_ssl_fields(&mut out, &cert, der, false);
    Some(Value::Object(out))
}

/// What HAProxy's `show ssl cert` / `show ssl ca-file` print of one certificate: serial
/// (upper-case hex), dates, subject alternative names (`with_sans`), algorithm, SHA-1
/// fingerprint of the DER, subject and issuer as one-line DNs.
fn show_ssl_fields(
    out: &mut Map<String, Value>,
    cert: &X509Certificate<'_>,
    der: &[u8],
    with_sans: bool,
) {
    let magnitude: Vec<u8> = cert
        .raw_serial()
        .iter()
        .copied()
        .skip_while(|b| *b == 0)
        .collect();
    put(out, "serial", hex::encode_upper(magnitude));
    let validity = cert.validity();
    if let Some(t) = date_time(validity.not_before.timestamp()) {
        out.insert("not_before".into(), json!(t));
    }
    if let Some(t) = date_time(validity.not_after.timestamp()) {
        out.insert("not_after".into(), json!(t));
    }
    if with_sans {
        let (dns, ips) = names(cert);
        let sans: Vec<String> = dns
            .iter()
            .map(|d| format!("DNS:{d}"))
            .chain(ips.iter().map(|i| format!("IP Address:{i}")))
            .collect();
        put(out, "subject_alternative_names", sans.join(", "));
    }
    put(out, "algorithm", algorithm(cert));
    put(
        out,
        "sha1_finger_print",
        hex::encode_upper(sha1::Sha1::digest(der)),
    );
    put(out, "subject", oneline(cert.subject()));
    put(out, "issuers", oneline(cert.issuer()));
}

/// HAProxy's date in `show ssl cert` (`Nov  6 05:49:15 2126 GMT`) as go-openapi writes a
/// date-time.
pub(super) fn haproxy_date(text: &str) -> Option<String> {
    let t = jiff::civil::DateTime::strptime("%b %e %H:%M:%S %Y GMT", text.trim())
        .or_else(|_| jiff::civil::DateTime::strptime("%b %d %H:%M:%S %Y GMT", text.trim()))
        .ok()?;
    let ts = t.to_zoned(jiff::tz::TimeZone::UTC).ok()?.timestamp();
    date_time(ts.as_second())
}

/// The `ssl_certificate` answer of `GET .../runtime/ssl_certs/{name}` for a loaded PEM, the
/// fields HAProxy's `show ssl cert <file>` prints (`Status`, `Serial`, `notBefore`, `notAfter`,
/// `Subject Alternative Name`, `Algorithm`, `SHA1 FingerPrint`, `Subject`, `Issuer`, `Chain
/// Subject`, `Chain Issuer`) under the model's names. HAProxy 2.6 prints no SHA-256
/// fingerprint, so `sha256_finger_print` is left out here too.
pub(super) fn runtime_certificate(file: &str, pem: &[u8], used: bool) -> Value {
    let mut out = Map::new();
    let base = file.rsplit('/').next().unwrap_or(file);
    out.insert("storage_name".into(), json!(base));
    out.insert("file".into(), json!(file));
    out.insert("status".into(), json!(if used { "Used" } else { "Unused" }));
    let ders = certificate_ders(pem).unwrap_or_default();
    let certs: Vec<X509Certificate<'_>> = ders.iter().filter_map(|d| parse(d)).collect();
    // HAProxy's leaf is the first certificate of the file; the rest is the chain.
    let (Some(leaf), Some(der)) = (certs.first(), ders.first()) else {
        return Value::Object(out);
    };
    show_ssl_fields(&mut out, leaf, der, true);
    if let Some(chain) = certs.get(1) {
        put(&mut out, "chain_subject", oneline(chain.subject()));
        put(&mut out, "chain_issuer", oneline(chain.issuer()));
    }
    Value::Object(out)
}
