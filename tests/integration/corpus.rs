//! The pure helpers over the real render corpus (`tests/corpus/renders/`): checksums tell every
//! render apart, object names are valid and distinct, the large map compresses and round-trips.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use haptic::core::compression::{compress_if_needed, decompress};
use haptic::core::naming;
use haptic::dataplane::StorageKind;
use haptic_journal::{AuxKind, Checksum, render_checksum};

/// Render folder → (kind, Dataplane storage), as the corpus README maps them.
const FOLDERS: &[(&str, AuxKind, StorageKind)] = &[
    ("maps", AuxKind::Map, StorageKind::Map),
    ("ssl", AuxKind::Ssl, StorageKind::SslCertificate),
    ("ca", AuxKind::Ca, StorageKind::CaFile),
    ("general", AuxKind::General, StorageKind::General),
    ("crt-lists", AuxKind::CrtList, StorageKind::General),
];

struct Render {
    config: String,
    /// Render-relative path (`maps/hosts.map`) → (kind, content).
    files: BTreeMap<String, (AuxKind, Vec<u8>)>,
}

impl Render {
    /// The render checksum over the files `keep` selects.
    fn checksum_of(&self, keep: impl Fn(AuxKind) -> bool) -> Checksum {
        let files: Vec<(&str, &[u8])> = self
            .files
            .iter()
            .filter(|(_, (kind, _))| keep(*kind))
            .map(|(path, (_, content))| (path.as_str(), content.as_slice()))
            .collect();
        render_checksum(self.config.as_bytes(), &files)
    }
}

fn load(dir: &Path) -> Render {
    let config = fs::read_to_string(dir.join("haproxy.cfg")).unwrap();
    let mut files = BTreeMap::new();
    for (folder, kind, _) in FOLDERS {
        let Ok(entries) = fs::read_dir(dir.join(folder)) else {
            continue;
        };
        for entry in entries {
            let entry = entry.unwrap();
            let name = entry.file_name().into_string().unwrap();
            files.insert(
                format!("{folder}/{name}"),
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
        let sum = render.checksum_of(|_| true);
        if let Some(other) = checksums.insert(sum, name.clone()) {
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
    assert!(ca.files.values().any(|(kind, _)| *kind == AuxKind::Ca));
    let without_ca = ca.checksum_of(|kind| kind != AuxKind::Ca);
    assert!(!checksums.contains_key(&without_ca));
}

#[test]
fn every_folder_maps_to_its_storage() {
    for (folder, kind, storage) in FOLDERS {
        assert_eq!(StorageKind::from(*kind), *storage, "{folder}");
    }
}

#[test]
fn the_large_map_compresses_only_above_the_threshold() {
    let renders = renders();
    let (_, map) = &renders["10-large-map"].files["maps/hosts.map"];
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
