//! Names of the objects the publisher writes (DESIGN.md section 1).
//!
//! Every name is a valid DNS-1123 label (`[a-z0-9]([-a-z0-9]*[a-z0-9])?`), so it is also a
//! valid DNS-1123 subdomain and a valid label value. Limits: HAProxyCfg names (main and
//! `-invalid`) and label values at most 63 characters (a HAProxyCfg name is the value of the
//! `runtime-config` label), auxiliary object and Secret names at most 253.
//!
//! # Collision freedom
//! A name is kept verbatim only when it is already valid, fits, and does not itself end in
//! `-<10 hex>`. Otherwise it is sanitised (lower-cased, other characters become `-`, runs of
//! `-` collapse, ends trimmed), truncated, and given `-<10 hex>`: the first 10 hex digits of
//! the sha256 of the unsanitised input. Verbatim names never end in `-<10 hex>` and hashed
//! names always do, so two different inputs share a name only if their hashes collide in
//! 40 bits. Auxiliary names always carry the hash, taken over the HAProxyCfg name and the full
//! path, so files with the same base name in different directories, or of two configs in the
//! same namespace, get different names.

use haptic_journal::AuxKind;
use sha2::{Digest, Sha256};

/// Suffix of the main HAProxyCfg's name: `<config-name>-haproxycfg`.
pub const HAPROXYCFG_SUFFIX: &str = "-haproxycfg";
/// Suffix of the rejected-render HAProxyCfg: `<config-name>-haproxycfg-invalid`.
pub const INVALID_SUFFIX: &str = "-invalid";
/// Maximum length of an object name (DNS-1123 subdomain), in characters.
pub const MAX_NAME_LEN: usize = 253;
/// Maximum length of a label value and of a DNS-1123 label, in characters.
pub const MAX_LABEL_LEN: usize = 63;
/// Number of hex digits of the disambiguating hash.
pub const HASH_HEX_LEN: usize = 10;

/// Name prefix of the objects that publish files of `kind`, ending in `-`: HAProxyMapFile
/// (`haproxy-map-`), HAProxyGeneralFile (`haproxy-file-`), HAProxyCRTListFile
/// (`haproxy-crtlist-`), certificate Secret (`haproxy-cert-`), CA Secret (`haproxy-ca-`).
#[must_use]
pub fn aux_name_prefix(kind: AuxKind) -> &'static str {
    match kind {
        AuxKind::Map => "haproxy-map-",
        AuxKind::General => "haproxy-file-",
        AuxKind::CrtList => "haproxy-crtlist-",
        AuxKind::Ssl => "haproxy-cert-",
        AuxKind::Ca => "haproxy-ca-",
    }
}

/// Name of the main HAProxyCfg, `<config-name>-haproxycfg`, at most 55 characters, so that
/// it and its `-invalid` sibling are both valid label values (the `runtime-config` label).
pub fn haproxycfg_name(config_name: &str) -> String {
    let max = MAX_LABEL_LEN - INVALID_SUFFIX.len();
    build(
        "",
        config_name,
        HAPROXYCFG_SUFFIX,
        max,
        false,
        config_name.as_bytes(),
    )
}

/// Name of the HAProxyCfg that holds a rejected render: the main name plus `-invalid`, at
/// most 63 characters.
pub fn invalid_haproxycfg_name(config_name: &str) -> String {
    format!("{}{INVALID_SUFFIX}", haproxycfg_name(config_name))
}

/// A label value for `raw` (e.g. the config name in `haproxy-haptic.org/config`), at most 63
/// characters; verbatim when `raw` is already a DNS-1123 label.
pub fn label_value(raw: &str) -> String {
    build("", raw, "", MAX_LABEL_LEN, false, raw.as_bytes())
}

/// Name of the object (custom resource or Secret) that publishes the auxiliary file at `path`
/// (render-relative, as in [`haptic_journal::AuxFile::path`], e.g. `maps/hosts.map`) for the
/// HAProxyCfg `runtime_config`: `<kind prefix><sanitised file stem>-<10 hex>`, at most 253
/// characters.
pub fn aux_object_name(runtime_config: &str, kind: AuxKind, path: &str) -> String {
    let base = path.rsplit('/').next().unwrap_or(path);
    let stem = match base.rfind('.') {
        Some(dot) if dot > 0 => &base[..dot],
        _ => base,
    };
    let mut hash_input = Vec::with_capacity(runtime_config.len() + 1 + path.len());
    hash_input.extend_from_slice(runtime_config.as_bytes());
    hash_input.push(0);
    hash_input.extend_from_slice(path.as_bytes());
    build(
        aux_name_prefix(kind),
        stem,
        "",
        MAX_NAME_LEN,
        true,
        &hash_input,
    )
}

/// True when `s` is a DNS-1123 label: 1..=63 of `[a-z0-9-]`, alphanumeric at both ends.
pub fn is_dns1123_label(s: &str) -> bool {
    s.len() <= MAX_LABEL_LEN && is_label_chars(s)
}

/// True when `s` is a DNS-1123 subdomain: at most 253 characters, dot-separated labels.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= MAX_NAME_LEN && s.split('.').all(is_label_chars)
}

fn is_label_chars(s: &str) -> bool {
    let bytes = s.as_bytes();
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            alnum(first) && alnum(last) && bytes.iter().all(|b| alnum(b) || *b == b'-')
        }
        _ => false,
    }
}

fn ends_with_hash(s: &str) -> bool {
    let n = s.len();
    n > HASH_HEX_LEN
        && s.as_bytes()[n - HASH_HEX_LEN - 1] == b'-'
        && s[n - HASH_HEX_LEN..]
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn sanitise(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    for c in raw.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    while out.ends_with('-') {
        out.pop();
    }
    out
}

/// `prefix + middle + suffix`, verbatim when allowed, else with `-<hash>` before the suffix.
fn build(
    prefix: &str,
    middle: &str,
    suffix: &str,
    max_len: usize,
    always_hash: bool,
    hash_input: &[u8],
) -> String {
    let verbatim = format!("{prefix}{middle}{suffix}");
    if !always_hash
        && is_label_chars(middle)
        && !ends_with_hash(middle)
        && verbatim.len() <= max_len
        && is_label_chars(&verbatim)
    {
        return verbatim;
    }
    let hash = &hex::encode(Sha256::digest(hash_input))[..HASH_HEX_LEN];
    let mut clean = sanitise(middle);
    let room = max_len.saturating_sub(prefix.len() + 1 + HASH_HEX_LEN + suffix.len());
    // `clean` is ASCII, so byte truncation is char truncation.
    clean.truncate(room);
    while clean.ends_with('-') {
        clean.pop();
    }
    if clean.is_empty() {
        format!("{prefix}{hash}{suffix}")
    } else {
        format!("{prefix}{clean}-{hash}{suffix}")
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;

    #[test]
    fn simple_names_are_verbatim() {
        assert_eq!(haproxycfg_name("web"), "web-haproxycfg");
        assert_eq!(invalid_haproxycfg_name("web"), "web-haproxycfg-invalid");
        assert_eq!(label_value("web"), "web");
    }

    #[test]
    fn unsafe_config_names_get_a_hash() {
        let n = haproxycfg_name("My_Config");
        assert!(
            n.starts_with("my-config-") && n.ends_with(HAPROXYCFG_SUFFIX),
            "{n}"
        );
        assert!(is_dns1123_label(&n));
        let long = haproxycfg_name(&"a".repeat(80));
        assert_eq!(long.len(), MAX_LABEL_LEN - INVALID_SUFFIX.len());
        assert!(is_dns1123_label(&long));
        assert_eq!(
            invalid_haproxycfg_name(&"a".repeat(80)).len(),
            MAX_LABEL_LEN
        );
    }

    #[test]
    fn hash_shaped_names_are_not_verbatim() {
        // "x-0123456789" could otherwise equal the hashed form of another name.
        assert_ne!(label_value("x-0123456789"), "x-0123456789");
    }

    #[test]
    fn aux_names_keep_the_stem_and_differ_by_directory() {
        let a = aux_object_name("web-haproxycfg", AuxKind::Map, "maps/hosts.map");
        let b = aux_object_name("web-haproxycfg", AuxKind::Map, "maps/old/hosts.map");
        let c = aux_object_name("api-haproxycfg", AuxKind::Map, "maps/hosts.map");
        assert!(a.starts_with("haproxy-map-hosts-"), "{a}");
        assert_ne!(a, b);
        assert_ne!(a, c);
        let cert = aux_object_name("web-haproxycfg", AuxKind::Ssl, "ssl/ex.com.pem");
        assert!(cert.starts_with("haproxy-cert-ex-com-"), "{cert}");
        let ca = aux_object_name("web-haproxycfg", AuxKind::Ca, "ca/ex.com.pem");
        assert!(ca.starts_with("haproxy-ca-ex-com-"), "{ca}");
    }

    #[test]
    fn validity_checks() {
        assert!(is_dns1123_label("a-1"));
        assert!(!is_dns1123_label("-a"));
        assert!(!is_dns1123_label("A"));
        assert!(!is_dns1123_label(""));
        assert!(is_dns1123_subdomain("a.b-c"));
        assert!(!is_dns1123_subdomain("a..b"));
    }

    proptest! {
        #[test]
        fn config_names_are_valid_and_injective(names in prop::collection::hash_set(".{0,90}", 1..40)) {
            let mut seen = HashMap::new();
            for raw in &names {
                for name in [haproxycfg_name(raw), label_value(raw)] {
                    prop_assert!(is_dns1123_label(&name), "{name:?} from {raw:?}");
                }
                prop_assert!(is_dns1123_label(&invalid_haproxycfg_name(raw)));
                if let Some(other) = seen.insert(haproxycfg_name(raw), raw.clone()) {
                    prop_assert!(false, "{raw:?} and {other:?} share a name");
                }
            }
        }

        #[test]
        fn aux_names_are_valid_and_injective(
            paths in prop::collection::hash_set("(/[a-zA-Z0-9._ -]{0,12}){1,4}|.{0,300}", 1..40),
            kind in prop::sample::select(vec![
                AuxKind::Map, AuxKind::Ssl, AuxKind::Ca, AuxKind::General, AuxKind::CrtList,
            ]),
        ) {
            let mut seen = HashMap::new();
            for path in &paths {
                let name = aux_object_name("web-haproxycfg", kind, path);
                prop_assert!(is_dns1123_subdomain(&name), "{name:?} from {path:?}");
                prop_assert!(name.len() <= MAX_NAME_LEN);
                if let Some(other) = seen.insert(name, path.clone()) {
                    prop_assert!(false, "{path:?} and {other:?} share a name");
                }
            }
        }
    }
}
