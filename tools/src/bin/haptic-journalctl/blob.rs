//! `blob`: a blob's content (a render: its manifest), secrets redacted unless
//! `--reveal-secrets`.

use std::collections::BTreeSet;
use std::path::Path;

use haptic_journal::{BlobKind, Checksum, Journal};
use serde_json::json;

use crate::format::to_json;
use crate::open::read_fail;
use crate::{Fail, Out, Res};

pub(super) fn find_blob(j: &Journal, path: &Path, text: &str) -> Res<Checksum> {
    let hexpart = text.strip_prefix("sha256:").unwrap_or(text).to_lowercase();
    if hexpart.len() == 64 {
        return Checksum::parse(&format!("sha256:{hexpart}")).map_err(|e| {
            Fail::Usage(format!("{e}: give the blob as sha256:<64 hex> or a prefix"))
        });
    }
    if hexpart.len() < 6 || !hexpart.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Fail::Usage(format!(
            "invalid blob hash {text:?}: give sha256:<64 hex>, or a hex prefix of at least 6 \
             digits (see `haptic-journalctl dump {} blobs`)",
            path.display()
        )));
    }
    let all = j.blobs().map_err(|e| read_fail(path, e))?;
    let hits: Vec<Checksum> = all
        .iter()
        .map(|b| b.0)
        .filter(|c| hex::encode(c.as_bytes()).starts_with(&hexpart))
        .collect();
    match hits.as_slice() {
        [one] => Ok(*one),
        [] => Err(Fail::Usage(format!(
            "journal {} has no blob starting with {hexpart}: see `haptic-journalctl dump {} \
             blobs`",
            path.display(),
            path.display()
        ))),
        _ => Err(Fail::Usage(format!(
            "blob prefix {hexpart} is ambiguous ({} blobs): give more digits",
            hits.len()
        ))),
    }
}

/// Blobs listed as secret files (`ssl/`) in any render manifest.
pub(super) fn secret_blobs(j: &Journal, path: &Path) -> Res<BTreeSet<Checksum>> {
    let mut out = BTreeSet::new();
    for (h, kind, _, _) in j.blobs().map_err(|e| read_fail(path, e))? {
        if kind != BlobKind::Render {
            continue;
        }
        if let Some(r) = j.get_render(h).map_err(|e| read_fail(path, e))? {
            for f in r.files.iter().filter(|f| f.kind.is_secret()) {
                out.insert(f.blob);
            }
        }
    }
    Ok(out)
}

pub(super) const REDACTED: &str = "<redacted: private key material; --reveal-secrets to print it>";

/// Redacts PEM private keys everywhere; in a secret (`ssl/`) file keeps only certificate blocks.
/// Returns the text and whether anything was redacted.
pub(super) fn redact(text: &str, secret_file: bool) -> (String, bool) {
    let mut out = String::with_capacity(text.len());
    let mut redacted = false;
    let mut in_block: Option<bool> = None; // Some(keep)
    for line in text.split_inclusive('\n') {
        let t = line.trim();
        if let Some(label) = t
            .strip_prefix("-----BEGIN ")
            .and_then(|l| l.strip_suffix("-----"))
        {
            let keep = !label.contains("PRIVATE KEY") && (!secret_file || label.contains("CERT"));
            out.push_str(line);
            if !keep {
                out.push_str(REDACTED);
                out.push('\n');
                redacted = true;
            }
            in_block = Some(keep);
            continue;
        }
        if t.starts_with("-----END ") {
            out.push_str(line);
            in_block = None;
            continue;
        }
        match in_block {
            Some(true) => out.push_str(line),
            Some(false) => {}
            None if secret_file && !t.is_empty() => {
                if !out.ends_with(&format!("{REDACTED}\n")) {
                    out.push_str(REDACTED);
                    out.push('\n');
                }
                redacted = true;
            }
            None => out.push_str(line),
        }
    }
    (out, redacted)
}

pub(super) fn blob(j: &Journal, path: &Path, hash: &str, reveal: bool, out: &Out) -> Res<u8> {
    let h = find_blob(j, path, hash)?;
    let Some(content) = j.get_blob(h).map_err(|e| read_fail(path, e))? else {
        return Err(Fail::Usage(format!(
            "journal {} has no blob {h}: see `haptic-journalctl dump {} blobs`",
            path.display(),
            path.display()
        )));
    };
    let kind = j
        .blobs()
        .map_err(|e| read_fail(path, e))?
        .into_iter()
        .find(|b| b.0 == h)
        .map_or(BlobKind::File, |b| b.1);
    if kind == BlobKind::Render {
        let r = j
            .get_render(h)
            .map_err(|e| read_fail(path, e))?
            .ok_or_else(|| Fail::Usage(format!("blob {h} vanished")))?;
        if out.json {
            out.line(&json!({"blob": h.to_string(), "kind": "blob.render", "render": to_json(&r)}));
        } else {
            outln!("render   {}", r.checksum);
            outln!("config   {} ({} bytes)", r.config, r.config_size_bytes);
            out.table_of(&["PATH", "KIND", "BYTES", "BLOB"], &r.files, |f| {
                vec![
                    f.path.clone(),
                    f.kind.as_str().into(),
                    f.size_bytes.to_string(),
                    f.blob.to_string(),
                ]
            });
        }
        return Ok(0);
    }
    let secret = secret_blobs(j, path)?.contains(&h);
    let (text, redacted) = match std::str::from_utf8(&content) {
        Ok(t) if !reveal => redact(t, secret),
        Ok(t) => (t.to_owned(), false),
        Err(_) if secret && !reveal => (format!("{REDACTED}\n"), true),
        Err(_) => (String::new(), false),
    };
    let binary = (reveal || !secret) && std::str::from_utf8(&content).is_err();
    if out.json {
        let mut v = json!({
            "blob": h.to_string(), "kind": "blob.file", "size_bytes": content.len(),
            "secret": secret, "redacted": redacted,
        });
        if binary {
            v["content_hex"] = json!(hex::encode(&content));
        } else {
            v["content"] = json!(text);
        }
        out.line(&v);
    } else if binary {
        outln!("{}", hex::encode(&content));
    } else {
        outp!("{text}");
        if redacted {
            eprintln!(
                "haptic-journalctl: {h}: secret material redacted ({} bytes stored); add \
                 --reveal-secrets to print it",
                content.len()
            );
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use haptic_journal::Checksum;
    use serde_json::json;

    use super::redact;
    use crate::format::to_json;

    #[test]
    fn redaction_keeps_certificates_and_drops_keys() {
        let pem = "-----BEGIN CERTIFICATE-----\nCERTDATA\n-----END CERTIFICATE-----\n\
                   -----BEGIN RSA PRIVATE KEY-----\nKEYDATA\n-----END RSA PRIVATE KEY-----\n";
        for secret in [false, true] {
            let (t, r) = redact(pem, secret);
            assert!(r);
            assert!(t.contains("CERTDATA"));
            assert!(!t.contains("KEYDATA"));
            assert!(t.contains("-----END RSA PRIVATE KEY-----"));
        }
        let (t, r) = redact("password=hunter2\n", true);
        assert!(r && !t.contains("hunter2"));
        let (t, r) = redact("a b\n", false);
        assert!(!r && t == "a b\n");
    }

    #[test]
    fn checksum_arrays_become_text() {
        let c = Checksum::of(b"x");
        let v = to_json(&json!({"a": c}));
        assert_eq!(v["a"], json!(c.to_string()));
    }

    #[test]
    fn aux_kind_ssl_is_secret() {
        assert!(haptic_journal::AuxKind::Ssl.is_secret());
    }
}
