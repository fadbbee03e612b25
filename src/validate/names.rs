//! File names the Dataplane API stores unchanged (DESIGN.md section 1, "Render directory").

use std::collections::BTreeMap;

use haptic_journal::AuxKind;

use crate::core::render::{RenderContent, folder_of_kind, pod_dir_of_kind};

/// Every reason a render's file names are unusable, one message per file naming it; empty when
/// all names are fine.
///
/// Rules: a file sits directly in the folder of its kind (`maps/hosts.map`); its name is
/// non-empty, does not start with `.`, and uses only ASCII letters, digits, `.`, `_`, `-`;
/// a certificate or CA file (`ssl/`, `ca/`) has no dot in its base name (the Dataplane API
/// stores `example.com.pem` as `example_com.pem`, so the config's reference would dangle); two
/// files that land in one pod directory (`ssl/` + `ca/`, `general/` + `crt-lists/`) have
/// different names.
#[must_use]
pub fn check_names(render: &RenderContent) -> Vec<String> {
    let mut errors = Vec::new();
    let mut on_pod: BTreeMap<String, &str> = BTreeMap::new();
    for f in &render.files {
        let folder = folder_of_kind(f.kind);
        let Some(name) = f
            .path
            .strip_prefix(folder)
            .and_then(|r| r.strip_prefix('/'))
        else {
            errors.push(format!(
                "file {}: a {} file must sit directly in {folder}/",
                f.path,
                f.kind.as_str()
            ));
            continue;
        };
        if name.is_empty()
            || name.starts_with('.')
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        {
            errors.push(format!(
                "file {}: the name must use only letters, digits, '.', '_' and '-' and not \
                 start with '.' (the Dataplane API would store it under another name)",
                f.path
            ));
            continue;
        }
        if matches!(f.kind, AuxKind::Ssl | AuxKind::Ca) {
            let stem = name.rsplit_once('.').map_or(name, |(s, _)| s);
            if stem.contains('.') {
                errors.push(format!(
                    "file {}: the Dataplane API would store this certificate as {} (dots in the \
                     base name become '_'), so references to {} would not resolve; rename it",
                    f.path,
                    sanitized(name),
                    f.pod_path()
                ));
                continue;
            }
        }
        let pod_path = format!("{}/{name}", pod_dir_of_kind(f.kind));
        if let Some(other) = on_pod.insert(pod_path.clone(), &f.path) {
            errors.push(format!(
                "file {}: lands at {pod_path} like {other}; rename one of them",
                f.path
            ));
        }
    }
    errors
}

/// The Dataplane API's storage name of a certificate: dots in the base name become `_`.
fn sanitized(name: &str) -> String {
    match name.rsplit_once('.') {
        Some((stem, ext)) => format!("{}.{ext}", stem.replace('.', "_")),
        None => name.replace('.', "_"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::render::RenderFile;

    fn render(files: &[(AuxKind, &str)]) -> RenderContent {
        RenderContent::new(
            b"global\n".to_vec(),
            files
                .iter()
                .map(|(kind, path)| RenderFile {
                    kind: *kind,
                    path: (*path).to_owned(),
                    content: Vec::new(),
                })
                .collect(),
        )
    }

    #[test]
    fn good_names_pass() {
        let r = render(&[
            (AuxKind::Map, "maps/hosts.map"),
            (AuxKind::Ssl, "ssl/site.pem"),
            (AuxKind::Ca, "ca/clients-ca.pem"),
            (AuxKind::CrtList, "crt-lists/sites.crtlist"),
            (AuxKind::General, "general/403.http"),
        ]);
        assert!(check_names(&r).is_empty());
    }

    #[test]
    fn dotted_certificate_is_named() {
        let e = check_names(&render(&[(AuxKind::Ssl, "ssl/example.com.pem")]));
        assert_eq!(e.len(), 1);
        assert!(e[0].starts_with("file ssl/example.com.pem:"), "{e:?}");
        assert!(e[0].contains("example_com.pem"), "{e:?}");
    }

    #[test]
    fn collisions_and_bad_names() {
        let e = check_names(&render(&[
            (AuxKind::Ssl, "ssl/a.pem"),
            (AuxKind::Ca, "ca/a.pem"),
            (AuxKind::Map, "maps/sub/x.map"),
            (AuxKind::General, "general/.hidden"),
        ]));
        assert_eq!(e.len(), 3, "{e:?}");
    }
}
