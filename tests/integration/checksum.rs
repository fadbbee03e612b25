//! The checksum contract haptic relies on (DESIGN.md section 1), checked against the journal's
//! functions: `Checksum::of` is plain sha256 of a file's content, `render_checksum` tells every
//! render apart and ignores the order in which files are listed.

use std::collections::HashMap;

use haptic_journal::{Checksum, render_checksum};
use proptest::prelude::*;

type OwnedRender = (Vec<u8>, Vec<(String, Vec<u8>)>);

fn render_strategy() -> impl Strategy<Value = OwnedRender> {
    (
        prop::collection::vec(prop::sample::select(b"abc\n".to_vec()), 0..6),
        prop::collection::btree_map("[/a-c]{0,4}", prop::collection::vec(0u8..3, 0..4), 0..4),
    )
        .prop_map(|(config, files)| (config, files.into_iter().collect()))
}

fn checksum_of(config: &[u8], files: &[(String, Vec<u8>)]) -> Checksum {
    let files: Vec<(&str, &[u8])> = files
        .iter()
        .map(|(p, c)| (p.as_str(), c.as_slice()))
        .collect();
    render_checksum(config, &files)
}

proptest! {
    /// Tiny alphabets make near-collisions (shifted boundaries, moved bytes) likely.
    #[test]
    fn different_renders_never_share_a_checksum(
        renders in prop::collection::hash_set(render_strategy(), 1..60),
    ) {
        let mut seen: HashMap<Checksum, OwnedRender> = HashMap::new();
        for render in renders {
            if let Some(other) = seen.insert(checksum_of(&render.0, &render.1), render.clone()) {
                prop_assert!(false, "{render:?} and {other:?} collide");
            }
        }
    }

    #[test]
    fn file_order_does_not_matter(render in render_strategy()) {
        let mut reversed = render.1.clone();
        reversed.reverse();
        prop_assert_eq!(checksum_of(&render.0, &render.1), checksum_of(&render.0, &reversed));
    }
}

#[test]
fn single_files_are_plain_sha256_in_the_text_format() {
    let c = Checksum::of(b"abc");
    assert_eq!(
        c.to_string(),
        "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    assert_eq!(Checksum::parse(&c.to_string()), Ok(c));
}

#[test]
fn field_boundaries_are_framed() {
    let one = render_checksum(b"cfg", &[("a", b"bc")]);
    let two = render_checksum(b"cfg", &[("ab", b"c")]);
    let three = render_checksum(b"cfga", &[]);
    let four = render_checksum(b"cfg", &[("a", b"b"), ("c", b"")]);
    assert_ne!(one, two);
    assert_ne!(one, three);
    assert_ne!(one, four);
    assert_ne!(
        render_checksum(b"cfg", &[]),
        render_checksum(b"cfg", &[("ca/ca.pem", b"pem")]),
        "CA files count"
    );
}
