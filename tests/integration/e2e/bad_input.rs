//! Bad renders through the real binary (issue 13, "Bad input"): a certificate without its key, a
//! crt-list naming a certificate the render lacks, an empty render, a map whose name the
//! Dataplane API would store under another name. Each is refused with an error naming the input
//! (the `-invalid` HAProxyCfg's validation error, which the README points operators to), the
//! fleet keeps answering the last render that passed, and a good render after them converges:
//! nothing accepted before is lost.

use haptic::core::render::{RenderContent, RenderFile};
use haptic_testkit::render::{corpus, write_render};

use super::{INVALID, MAIN, Peers, answers, bounds, check_render, feed, object_until, opts, start};

on_peers!(
    Emulator,
    bad_renders_are_refused_naming_the_input_and_the_fleet_keeps_the_last_good_one =>
        bad_renders,
);

/// `render` with the file at `path` replaced by `content` (added when absent).
fn with_file(mut render: RenderContent, path: &str, content: &[u8]) -> RenderContent {
    match render.files.iter_mut().find(|f| f.path == path) {
        Some(f) => f.content = content.to_vec(),
        None => {
            let kind = render.files[0].kind;
            render.files.push(RenderFile {
                kind,
                path: path.into(),
                content: content.to_vec(),
            });
        }
    }
    RenderContent::new(render.config, render.files)
}

/// The PEM blocks of `pem` whose label is `label` (e.g. `CERTIFICATE`).
fn blocks(pem: &[u8], label: &str) -> Vec<u8> {
    let text = String::from_utf8_lossy(pem);
    let (begin, end) = (
        format!("-----BEGIN {label}-----"),
        format!("-----END {label}-----"),
    );
    let mut out = String::new();
    let mut rest = text.as_ref();
    while let Some(b) = rest.find(&begin) {
        let Some(e) = rest[b..].find(&end) else { break };
        out.push_str(&rest[b..b + e + end.len()]);
        out.push('\n');
        rest = &rest[b + e + end.len()..];
    }
    out.into_bytes()
}

/// The bad renders, each with a text its refusal must contain.
fn cases() -> Vec<(&'static str, RenderContent, &'static str)> {
    let tls = corpus("05-tls");
    let pem = &tls
        .files
        .iter()
        .find(|f| f.path == "ssl/site.pem")
        .expect("05-tls has ssl/site.pem")
        .content;
    let cert_only = blocks(pem, "CERTIFICATE");
    assert!(!cert_only.is_empty() && cert_only.len() < pem.len());
    let crtlist = corpus("06-crtlist");
    let list = crtlist
        .files
        .iter()
        .find(|f| f.path.starts_with("crt-lists/"))
        .expect("06-crtlist has a crt-list");
    let mut listed = list.content.clone();
    listed.extend_from_slice(b"/etc/haproxy/ssl/missing.pem missing.haptic.test\n");
    let list_path = list.path.clone();
    let maps = corpus("02-maps");
    let mut spaced = maps.clone();
    for f in &mut spaced.files {
        if f.path == "maps/hosts.map" {
            f.path = "maps/my hosts.map".into();
        }
    }
    spaced.config = String::from_utf8(spaced.config)
        .unwrap()
        .replace(
            "/etc/haproxy/maps/hosts.map",
            "\"/etc/haproxy/maps/my hosts.map\"",
        )
        .into_bytes();
    vec![
        (
            "a certificate without its key",
            with_file(tls, "ssl/site.pem", &cert_only),
            "site.pem",
        ),
        (
            "a crt-list naming a missing certificate",
            with_file(crtlist, &list_path, &listed),
            "missing.pem",
        ),
        (
            "an empty render",
            RenderContent::new(b"\n# nothing\n".to_vec(), Vec::new()),
            "empty render",
        ),
        (
            "a map name with a space",
            RenderContent::new(spaced.config, spaced.files),
            "my hosts.map",
        ),
    ]
}

/// `02-maps` passes; each bad render is then refused naming its input (in `-invalid`), pins
/// the fleet (`ConfigPinned=True`, the spec on `02-maps`) and every pod still answers `02-maps`;
/// `03-maps-changed` after them converges everywhere.
pub async fn bad_renders(peers: Peers) {
    let world = start(peers, 2).await;
    let render_dir = world.dir().join("render");
    feed(&render_dir, "02-maps");
    let ctl = world.controller(opts(&world, "solo", &render_dir));
    check_render(&world, "02-maps", "").await;
    let good = corpus("02-maps").checksum();
    for (what, render, names) in cases() {
        write_render(&render, &render_dir).unwrap();
        let want = render.checksum();
        let error = object_until(
            &world,
            INVALID,
            bounds().converge(),
            &format!("{INVALID} for {what}"),
            |c| {
                let e = c.status.as_ref().and_then(|s| s.validation_error.clone());
                // The spec moves first and the status follows: wait for this render's error.
                match e {
                    Some(e) if c.spec.checksum == want && e.contains(names) => Ok(e),
                    _ => Err(format!("{} {:?}", c.spec.checksum, c.status)),
                }
            },
        )
        .await;
        assert!(!error.is_empty(), "{what}");
        let main = world.hpcfg(MAIN).await.expect("the main HAProxyCfg");
        assert_eq!(main.spec.checksum, good, "{what}: the spec keeps 02-maps");
        answers(&world, "02-maps").await;
    }
    feed(&render_dir, "03-maps-changed");
    check_render(&world, "03-maps-changed", "02-maps").await;
    drop(ctl);
    world.shutdown().await;
}
