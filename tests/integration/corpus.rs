//! The pure helpers over the real render corpus (`tests/corpus/renders/`): checksums tell every
//! render apart, object names are valid and distinct, the large map compresses and round-trips.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use haptic::core::compression::{compress_if_needed, decompress};
use haptic::core::naming::{self, AuxKind};
use haptic::core::{AuxFile, Checksum};

/// Render folder → (path on the pod, kind), as the corpus README maps them.
const FOLDERS: &[(&str, &str, AuxKind)] = &[
    ("maps", "/etc/haproxy/maps/", AuxKind::Map),
    ("ssl", "/etc/haproxy/ssl/", AuxKind::SslCertificate),
    ("ca", "/etc/haproxy/ssl/", AuxKind::CaFile),
    ("general", "/etc/haproxy/general/", AuxKind::General),
    ("crt-lists", "/etc/haproxy/general/", AuxKind::CrtList),
];

struct Render {
    config: String,
    /// Pod path → (kind, content).
    files: BTreeMap<String, (AuxKind, Vec<u8>)>,
}

fn load(dir: &Path) -> Render {
    let config = fs::read_to_string(dir.join("haproxy.cfg")).unwrap();
    let mut files = BTreeMap::new();
    for (folder, pod_dir, kind) in FOLDERS {
        let Ok(entries) = fs::read_dir(dir.join(folder)) else {
            continue;
        };
        for entry in entries {
            let entry = entry.unwrap();
            let name = entry.file_name().into_string().unwrap();
            files.insert(
                format!("{pod_dir}{name}"),
                (*kind, fs::read(entry.path()).unwrap()),
            );
        }
    }
    Render { config, files }
}

fn renders() -> BTreeMap<String, Render> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/renders");
    let mut out = BTreeMap::new();
    for entry in fs::read_dir(root).unwrap() {
        let path = entry.unwrap().path();
        if path.join("haproxy.cfg").exists() {
            out.insert(
                path.file_name().unwrap().to_string_lossy().into_owned(),
                load(&path),
            );
        }
    }
    out
}

#[test]
fn every_render_has_its_own_checksum_and_valid_names() {
    let renders = renders();
    assert!(renders.len() >= 10, "corpus not found");
    let mut checksums = BTreeMap::new();
    for (name, render) in &renders {
        let files: Vec<AuxFile<'_>> = render
            .files
            .iter()
            .map(|(p, (_, c))| AuxFile {
                path: p,
                content: c,
            })
            .collect();
        let sum = Checksum::of_render(&render.config, &files);
        if let Some(other) = checksums.insert(sum.clone(), name.clone()) {
            panic!("{name} and {other} share {sum}");
        }
        let cfg = naming::haproxycfg_name(name);
        assert!(naming::is_dns1123_label(&cfg), "{cfg}");
        let mut names = BTreeMap::new();
        for (path, (kind, _)) in &render.files {
            let object = naming::aux_object_name(&cfg, *kind, path);
            assert!(naming::is_dns1123_subdomain(&object), "{object}");
            assert!(
                names.insert(object, path).is_none(),
                "{name}: two files share a name"
            );
        }
    }
    // The CA file counts: 07-ca differs from the same render without it.
    let ca = &renders["07-ca"];
    let without_ca: Vec<AuxFile<'_>> = ca
        .files
        .iter()
        .filter(|(_, (k, _))| *k != AuxKind::CaFile)
        .map(|(p, (_, c))| AuxFile {
            path: p,
            content: c,
        })
        .collect();
    assert!(without_ca.len() < ca.files.len());
    assert!(!checksums.contains_key(&Checksum::of_render(&ca.config, &without_ca)));
}

#[test]
fn the_large_map_compresses_only_above_the_threshold() {
    let renders = renders();
    let (_, map) = &renders["10-large-map"].files["/etc/haproxy/maps/hosts.map"];
    let text = String::from_utf8(map.clone()).unwrap();
    let default = compress_if_needed(&text, 1024 * 1024);
    assert!(
        !default.compressed,
        "the ~600 KB map is below the 1 MiB default"
    );
    let small = compress_if_needed(&text, 64 * 1024);
    assert!(small.compressed && small.content.len() < text.len() / 4);
    assert_eq!(decompress(&small).unwrap(), text);
}
