//! Bad renders through the real binary (issue 13, "Bad input"): a certificate without its key, a
//! crt-list naming a certificate the render lacks, an empty render, a map whose name the
//! Dataplane API would store under another name. Each is refused with an error naming the input
//! (the `-invalid` HAProxyCfg's validation error, which the README points operators to), the
//! fleet keeps answering the last render that passed, and a good render after them converges:
//! nothing accepted before is lost.

use haptic::core::render::{RenderContent, RenderFile};
use haptic_testkit::render::{corpus, write_render};

use super::{INVALID, MAIN, Peers, answers, bounds, check_render, feed, main_until, object_until};

on_peers!(
    Emulator,
    bad_renders_are_refused_naming_the_input_and_the_fleet_keeps_the_last_good_one =>
        bad_renders,
    a_5mb_render_and_a_3mib_map_reach_the_pods_and_say_why_they_are_not_published =>
        oversized_renders,
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
    let (world, render_dir, o) = super::fed(peers, 2, "02-maps", "solo").await;
    let ctl = world.controller(o);
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

/// Text of `len` bytes that zstd cannot shrink by much (80-column lines of xorshift base64
/// after `prefix` on each line), so an object holding it stays over the API server's limits
/// compressed.
fn incompressible(seed: u64, len: usize, prefix: &str) -> Vec<u8> {
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = seed;
    let mut out = Vec::with_capacity(len + 128);
    let mut line = 0u64;
    while out.len() < len {
        out.extend_from_slice(format!("{prefix}{line} ").as_bytes());
        for _ in 0..64 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            out.push(alphabet[usize::try_from(s % 64).unwrap()]);
        }
        out.push(b'\n');
        line += 1;
    }
    out
}

/// What every pod must answer for the oversized render `name` (its config returns
/// `render <name> <map lookup of the host>`).
fn oversized_check(
    name: &str,
    host: &str,
    value: &str,
) -> haptic_tools::sandbox::pods::demo::Check {
    haptic_tools::sandbox::pods::demo::Check {
        what: format!("{name}: Host {host}"),
        tls: false,
        host: Some(host.into()),
        path: "/".into(),
        expect: format!("render {name} {value}"),
        last_line: false,
    }
}

/// `02-maps` with its response naming `name` and looking the host up in `map` (a pod path).
fn oversized_config(name: &str, map: &str, tail: &[u8]) -> Vec<u8> {
    let base = String::from_utf8(corpus("02-maps").config).unwrap();
    let mut config = base
        .replace("render 02-maps", &format!("render {name}"))
        .replace("/etc/haproxy/maps/hosts.map", map)
        .into_bytes();
    config.extend_from_slice(tail);
    config
}

/// A 3 MiB map (in a render of 3 MiB) and a 5 MB `haproxy.cfg` (5 MB of comments), each past
/// the API server's request limit even compressed. Each passes validation and reaches every
/// pod through the Dataplane API (raw push, storage upload), which answers from it; its
/// publication is refused (the map: etcd's 500; the config: a 413 before upload): the
/// HAProxyCfg says `SizeLimitExceeded=True` and `Published=False` naming the render, the
/// object, the render's file and the fix, the spec stays on the last render whose publication
/// passed (02-maps), and each pod's status entry names the oversized render it runs; then
/// `03-maps-changed` is published whole and the condition turns `False`.
pub async fn oversized_renders(peers: Peers) {
    use haptic::k8s::crd::conditions;
    let (world, render_dir, o) = super::fed(peers, 2, "02-maps", "solo").await;
    let mut ctl = world.controller(o.clone());
    check_render(&world, "02-maps", "").await;
    let good = corpus("02-maps").checksum();

    let mut map = b"big.haptic.test found-in-the-3mib-map\n".to_vec();
    map.extend(incompressible(0x9e37_79b9_7f4a_7c15, 3 << 20, "h"));
    let huge_map = RenderContent::new(
        oversized_config("huge-map", "/etc/haproxy/maps/huge.map", b""),
        vec![RenderFile {
            kind: haptic_journal::AuxKind::Map,
            path: "maps/huge.map".into(),
            content: map,
        }],
    );
    let mut comments = incompressible(0x2545_f491_4f6c_dd1d, 5_000_000, "# filler ");
    comments.splice(0..0, b"\n".iter().copied());
    let huge_cfg = RenderContent::new(
        oversized_config("huge-config", "/etc/haproxy/maps/hosts.map", &comments),
        corpus("02-maps").files,
    );
    let cases = [
        (
            "a 3 MiB map",
            huge_map,
            "maps/huge.map",
            oversized_check("huge-map", "big.haptic.test", "found-in-the-3mib-map"),
        ),
        (
            "a 5 MB haproxy.cfg",
            huge_cfg,
            "haproxy.cfg",
            oversized_check("huge-config", "nope.haptic.test", "no-route"),
        ),
    ];
    for (what, render, input, check) in cases {
        let started = std::time::Instant::now();
        write_render(&render, &render_dir).unwrap();
        let want = render.checksum();
        // Every pod runs it (a render that passed validation is deployed).
        world
            .eventually(
                bounds().converge(),
                &format!("{what}: every pod answers it"),
                || async {
                    for p in world.pods() {
                        let body = haptic_tools::sandbox::pods::demo::run_check(&p, &check).await;
                        if !haptic_tools::sandbox::pods::demo::matches(&check, &body) {
                            return Err(format!("{}: {body:?}", p.name));
                        }
                    }
                    Ok(())
                },
            )
            .await;
        // The HAProxyCfg says why it is not published, naming the input and the fix.
        let message = main_until(
            &world,
            bounds().follow_up(),
            &format!("{what}: SizeLimitExceeded=True naming {input}"),
            |c| {
                let st = c.status.as_ref().ok_or("no status")?;
                let too_large = st.conditions.iter().find(|x| {
                    x.type_ == conditions::SIZE_LIMIT_EXCEEDED
                        && x.status == "True"
                        && x.message.contains(input)
                });
                let not_published = st
                    .conditions
                    .iter()
                    .any(|x| x.type_ == conditions::PUBLISHED && x.status == "False");
                match too_large {
                    Some(x) if not_published && c.spec.checksum == good => Ok(x.message.clone()),
                    _ => Err(format!("{} {:?}", c.spec.checksum, st.conditions)),
                }
            },
        )
        .await;
        assert!(
            message.contains("split it") && message.contains("the pods run it"),
            "{what}: the fix is named: {message}"
        );
        // Each pod's status entry names what it runs: the oversized render (the spec never
        // gets it; the condition names it, so its statuses are not parked for it).
        main_until(
            &world,
            bounds().follow_up(),
            &format!("{what}: every pod's status on it"),
            |c| {
                let on = c
                    .status
                    .iter()
                    .flat_map(|s| s.deployed_to_pods.iter())
                    .filter(|p| p.checksum == Some(want))
                    .count();
                (on == 2).then_some(()).ok_or(format!("{:?}", c.status))
            },
        )
        .await;
        // `Synced` says why the pods are not on the spec (issue 27: it said `PodsPending`,
        // which never converges): False/RenderTooLarge naming the render.
        main_until(
            &world,
            bounds().follow_up(),
            &format!("{what}: Synced=False/RenderTooLarge"),
            |c| {
                let synced = c
                    .status
                    .iter()
                    .flat_map(|s| s.conditions.iter())
                    .find(|x| x.type_ == conditions::SYNCED)
                    .ok_or("no Synced")?;
                (synced.status == "False"
                    && synced.reason == haptic::k8s::crd::reasons::RENDER_TOO_LARGE
                    && synced.message.contains(&want.to_string()))
                .then_some(())
                .ok_or(format!("{synced:?}"))
            },
        )
        .await;
        eprintln!("{what}: shown after {:?}", started.elapsed());
    }
    // A render that fits after them is published whole, and the condition clears.
    feed(&render_dir, "03-maps-changed");
    check_render(&world, "03-maps-changed", "02-maps").await;
    let c = world.hpcfg(MAIN).await.unwrap();
    assert!(
        c.status.as_ref().is_some_and(|s| s
            .conditions
            .iter()
            .any(|x| x.type_ == conditions::SIZE_LIMIT_EXCEEDED && x.status == "False")),
        "{:?}",
        c.status
    );
    super::stop_cleanly(&mut ctl);
    if let Err(e) = crate::crash_matrix::journal_after_stop(&o.journal) {
        panic!("{e}\n{}", ctl.log_tail(30));
    }
    world.shutdown().await;
}
