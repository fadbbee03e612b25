//! Object metadata validation every write goes through, as upstream's `ValidateObjectMeta`: the
//! name (RFC 1123 subdomain; label for namespaces), label keys and values (values at most 63
//! characters: a 64-character checksum in a label is refused by a real cluster too), and the
//! 256 KiB annotation budget.

use super::status::Cause;
use serde_json::Value;
use std::sync::LazyLock;

/// Total size of annotation keys and values (`TotalAnnotationSizeLimitB`).
const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;
/// A Secret's or ConfigMap's data (keys and values, decoded): upstream's `MaxSecretSize` and
/// `MaxConfigMapSize`, 1 MiB.
const MAX_DATA_BYTES: usize = 1024 * 1024;

/// The size check of a core Secret (`data`, base64 values, and `stringData`) or ConfigMap
/// (`data` and `binaryData`) as kube-apiserver's `ValidateSecret` / `ValidateConfigMap` make
/// it: keys and decoded values together at most 1 MiB, else a `Too long` cause on `data`.
pub fn data_size(plural: &str, obj: &Value) -> Option<Cause> {
    let base64_len = |v: &Value| {
        v.as_str()
            .map_or(0, |s| s.trim_end_matches('=').len() * 3 / 4)
    };
    let text_len = |v: &Value| v.as_str().map_or(0, str::len);
    let sum = |field: &str, len: &dyn Fn(&Value) -> usize| -> usize {
        obj[field]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| k.len() + len(v))
            .sum()
    };
    let total = match plural {
        "secrets" => sum("data", &base64_len) + sum("stringData", &text_len),
        "configmaps" => sum("data", &text_len) + sum("binaryData", &base64_len),
        _ => return None,
    };
    (total > MAX_DATA_BYTES).then(|| Cause {
        reason: "FieldValueTooLong".into(),
        message: format!("Too long: must have at most {MAX_DATA_BYTES} bytes"),
        field: "data".into(),
    })
}

static SUBDOMAIN: LazyLock<Option<regex::Regex>> = LazyLock::new(|| {
    regex::Regex::new(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$").ok()
});
static DNS_LABEL: LazyLock<Option<regex::Regex>> =
    LazyLock::new(|| regex::Regex::new(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$").ok());
static LABEL_VALUE: LazyLock<Option<regex::Regex>> =
    LazyLock::new(|| regex::Regex::new(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$").ok());

fn is_match(re: &LazyLock<Option<regex::Regex>>, s: &str) -> bool {
    re.as_ref().is_none_or(|r| r.is_match(s))
}

fn invalid(field: &str, value: &str, detail: &str) -> Cause {
    Cause {
        reason: "FieldValueInvalid".into(),
        message: format!("Invalid value: {value:?}: {detail}"),
        field: field.into(),
    }
}

const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

/// Checks name, labels and annotations; `dns_label` for kinds whose names are labels (namespaces).
pub fn validate(obj: &Value, dns_label: bool) -> Vec<Cause> {
    let mut causes = Vec::new();
    let meta = &obj["metadata"];
    if let Some(name) = meta["name"].as_str() {
        if dns_label {
            if name.len() > 63 || !is_match(&DNS_LABEL, name) {
                causes.push(invalid("metadata.name", name, LABEL_MSG));
            }
        } else if name.len() > 253 || !is_match(&SUBDOMAIN, name) {
            causes.push(invalid("metadata.name", name, SUBDOMAIN_MSG));
        }
    }
    for (k, v) in meta["labels"].as_object().into_iter().flatten() {
        let (prefix, key) = k.rsplit_once('/').map_or(("", k.as_str()), |(p, n)| (p, n));
        let key_ok = !key.is_empty()
            && key.len() <= 63
            && is_match(&LABEL_VALUE, key)
            && (prefix.is_empty() || (prefix.len() <= 253 && is_match(&SUBDOMAIN, prefix)));
        if !key_ok {
            causes.push(invalid("metadata.labels", k, "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character, at most 63 characters, with an optional DNS subdomain prefix and '/'"));
        }
        let value = v.as_str().unwrap_or_default();
        if value.len() > 63 {
            causes.push(invalid(
                "metadata.labels",
                value,
                "must be no more than 63 characters",
            ));
        } else if !is_match(&LABEL_VALUE, value) {
            causes.push(invalid("metadata.labels", value, VALUE_MSG));
        }
    }
    let annotations: usize = meta["annotations"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
        .sum();
    if annotations > MAX_ANNOTATIONS_BYTES {
        causes.push(Cause {
            reason: "FieldValueTooLong".into(),
            message: format!("Too long: must have at most {MAX_ANNOTATIONS_BYTES} bytes"),
            field: "metadata.annotations".into(),
        });
    }
    causes
}
