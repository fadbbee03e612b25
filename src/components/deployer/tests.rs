//! Table-driven `decide` tests: a pod's report plus a render give the operations, in order.
//! Pods are described the way the Dataplane API reports them (content for maps and general
//! files, the `ssl_certificate` metadata for certificates, count and entries for CA files).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;

use haptic_journal::{AuxKind, Checksum, ConfigVersion, EndpointFiles, SyncMode};

use super::decide::{
    CaFileEntries, FileReason, LoadedView, Operation, ReloadReason, RunningPod, Stored, decide,
    read_plan, runtime_read_plan,
};
use super::ledger::PodLedger;
use crate::core::render::{JournaledFile, JournaledRender};
use crate::dataplane::{CrtListEntry, MapEntry, RawConfiguration, SslCertificateInfo, StorageKind};

mod fixtures {
    use super::*;
    use x509_parser::pem::Pem;

    pub const RENDERS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/corpus/renders");
    pub const FIXTURES: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/integration/deployer/fixtures"
    );

    pub fn file(kind: AuxKind, path: &str, content: &[u8]) -> JournaledFile {
        JournaledFile {
            kind,
            path: path.to_owned(),
            blob: Checksum::of(content),
            content: content.to_vec(),
        }
    }

    pub fn render(config: &str, files: Vec<JournaledFile>) -> JournaledRender {
        JournaledRender {
            checksum: Checksum::of(config.as_bytes()),
            config_blob: Checksum::of(config.as_bytes()),
            config: config.into(),
            files,
        }
    }

    /// A corpus render, read as the render directory lays it out.
    pub fn corpus(name: &str) -> JournaledRender {
        let dir = Path::new(RENDERS).join(name);
        let config = std::fs::read_to_string(dir.join("haproxy.cfg")).unwrap();
        let mut files = Vec::new();
        for (folder, kind) in [
            ("maps", AuxKind::Map),
            ("ssl", AuxKind::Ssl),
            ("ca", AuxKind::Ca),
            ("general", AuxKind::General),
            ("crt-lists", AuxKind::CrtList),
        ] {
            let Ok(rd) = std::fs::read_dir(dir.join(folder)) else {
                continue;
            };
            let mut paths: Vec<_> = rd.map(|e| e.unwrap().path()).collect();
            paths.sort();
            for p in paths {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                files.push(file(
                    kind,
                    &format!("{folder}/{name}"),
                    &std::fs::read(&p).unwrap(),
                ));
            }
        }
        render(&config, files)
    }

    pub fn corpus_names() -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(RENDERS)
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| e.path().join("haproxy.cfg").exists())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert!(names.len() >= 10, "corpus renders found: {names:?}");
        names
    }

    pub fn fixture(name: &str) -> Vec<u8> {
        std::fs::read(Path::new(FIXTURES).join(name)).unwrap()
    }

    /// The configuration as the API stores it: its own header lines first.
    pub fn stored_config(text: &str, version: i64) -> RawConfiguration {
        RawConfiguration {
            text: format!("# _version={version}\n{text}"),
            version: ConfigVersion(version),
            file_version: Some(ConfigVersion(version)),
            configuration_checksum: None,
        }
    }

    fn certificates(pem: &[u8]) -> Vec<Vec<u8>> {
        Pem::iter_from_buffer(pem)
            .map(Result::unwrap)
            .filter(|p| p.label == "CERTIFICATE")
            .map(|p| p.contents)
            .collect()
    }

    /// What `GET .../storage/ssl_certificates/{name}` answers for a single-certificate PEM
    /// (client-native: decimal serial, issuer common names joined in no fixed order, size).
    pub fn reported_certificate(pem: &[u8]) -> SslCertificateInfo {
        let ders = certificates(pem);
        let (_, c) = x509_parser::parse_x509_certificate(&ders[0]).unwrap();
        let cn = |n: &x509_parser::x509::X509Name<'_>| {
            n.iter_common_name()
                .next()
                .map(|a| a.as_str().unwrap().to_owned())
        };
        SslCertificateInfo {
            size: Some(pem.len() as i64),
            serial: Some(c.tbs_certificate.serial.to_string()),
            issuers: cn(c.issuer()),
            subject: cn(c.subject()),
            ..SslCertificateInfo::default()
        }
    }

    /// What `GET .../runtime/ssl_ca_files/{name}` and its entries answer (HAProxy: hex serial,
    /// one-line DN issuer, SHA-1 fingerprint without separators).
    pub fn reported_ca(pem: &[u8]) -> CaFileEntries {
        use sha1::Digest as _;
        let ders = certificates(pem);
        let entries = ders
            .iter()
            .map(|der| {
                let (_, c) = x509_parser::parse_x509_certificate(der).unwrap();
                let cn = c
                    .issuer()
                    .iter_common_name()
                    .next()
                    .map(|a| a.as_str().unwrap().to_owned())
                    .unwrap_or_default();
                SslCertificateInfo {
                    serial: Some(hex::encode_upper(c.raw_serial())),
                    issuers: Some(format!("/CN={cn}")),
                    sha1_finger_print: Some(hex::encode_upper(sha1::Sha1::digest(der))),
                    ..SslCertificateInfo::default()
                }
            })
            .collect::<Vec<_>>();
        CaFileEntries {
            count: Some(entries.len() as u32),
            entries,
        }
    }

    /// A pod that stores nothing and runs another configuration.
    pub fn empty_pod() -> RunningPod {
        RunningPod {
            config: stored_config("global\n    daemon\n", 1),
            files: BTreeMap::new(),
            loaded: BTreeMap::new(),
        }
    }

    /// What HAProxy's runtime reports for a loaded certificate (`show ssl cert`: hex serial,
    /// one-line DN issuer, SHA-1 fingerprint).
    pub fn loaded_certificate(pem: &[u8]) -> SslCertificateInfo {
        reported_ca(pem).entries.remove(0)
    }

    /// What HAProxy's runtime reports loaded for `f`, when it has a view of its kind.
    pub fn loaded_view(f: &JournaledFile) -> Option<LoadedView> {
        match (f.storage(), f.kind) {
            (StorageKind::Map, _) => Some(LoadedView::MapEntries(
                super::super::compare::map_entries(&f.content)
                    .into_iter()
                    .map(|(key, value)| MapEntry { key, value })
                    .collect(),
            )),
            (StorageKind::SslCertificate, _) => Some(LoadedView::Certificate(Box::new(
                loaded_certificate(&f.content),
            ))),
            (StorageKind::General, AuxKind::CrtList) => Some(LoadedView::CrtList(
                super::super::compare::crt_list_lines(&f.content)
                    .into_iter()
                    .map(|(file, sni_filter)| CrtListEntry {
                        file,
                        sni_filter,
                        ..CrtListEntry::default()
                    })
                    .collect(),
            )),
            _ => None,
        }
    }

    /// A pod that runs `render` exactly, as the API reports it.
    pub fn pod_running(render: &JournaledRender, version: i64) -> RunningPod {
        let mut files = BTreeMap::new();
        for f in &render.files {
            let stored = match f.storage() {
                StorageKind::Map | StorageKind::General => Stored::Content(f.content.clone()),
                StorageKind::SslCertificate => {
                    Stored::Certificate(Box::new(reported_certificate(&f.content)))
                }
                StorageKind::CaFile => Stored::CaFile(reported_ca(&f.content)),
            };
            files.insert((f.storage(), f.name().to_owned()), stored);
        }
        // HAProxy runs it: every runtime view shows the render's content.
        let loaded = render
            .files
            .iter()
            .filter_map(|f| Some(((f.storage(), f.name().to_owned()), loaded_view(f)?)))
            .collect();
        RunningPod {
            config: stored_config(&render.config_text(), version),
            files,
            loaded,
        }
    }

    /// The journal's record of a pod that loaded every file of `render`.
    pub fn record(render: &JournaledRender) -> EndpointFiles {
        let url = haptic_journal::EndpointUrl::new("http://127.0.0.1:5555");
        let pod = haptic_journal::PodRef {
            namespace: "ns".into(),
            name: "haproxy-0".into(),
        };
        let mut l = PodLedger::new(&url, &pod, None, None);
        for f in &render.files {
            l.proved_loaded(f);
        }
        l.files
    }
}

use fixtures::*;

fn site() -> Vec<u8> {
    std::fs::read(Path::new(RENDERS).join("05-tls/ssl/site.pem")).unwrap()
}

fn cert_pod(info: SslCertificateInfo) -> (RunningPod, JournaledRender) {
    let r = render(
        "frontend f\n    bind *:443 ssl crt /etc/haproxy/ssl/site.pem\n",
        vec![file(AuxKind::Ssl, "ssl/site.pem", &site())],
    );
    let mut pod = pod_running(&r, 4);
    pod.files.insert(
        (StorageKind::SslCertificate, "site.pem".into()),
        Stored::Certificate(Box::new(info)),
    );
    (pod, r)
}

fn replaced_because(ops: &[Operation]) -> Option<FileReason> {
    ops.iter().find_map(|op| match op {
        Operation::ReplaceFile { reason, .. } => Some(reason.clone()),
        _ => None,
    })
}

#[test]
fn a_pod_that_runs_the_render_gets_nothing_for_every_corpus_render() {
    for name in corpus_names() {
        let r = corpus(&name);
        let pod = pod_running(&r, 7);
        assert_eq!(
            decide(&pod, &r, Some(&record(&r))),
            vec![],
            "{name}: recorded loaded"
        );
        // No record (a new leader, a rebuilt journal): the runtime views prove maps,
        // certificates and crt-lists loaded; general files (error pages) have none, so they get
        // one reload on that first sync.
        let general: Vec<String> = r
            .files
            .iter()
            .filter(|f| f.kind == AuxKind::General)
            .map(|f| f.path.clone())
            .collect();
        let want = if general.is_empty() {
            vec![]
        } else {
            vec![Operation::Reload {
                version: ConfigVersion(7),
                reason: ReloadReason::StoredNotLoaded { paths: general },
                unless_reloaded: false,
            }]
        };
        assert_eq!(decide(&pod, &r, None), want, "{name}: no record");
    }
}

#[test]
fn an_empty_pod_gets_every_file_then_one_push_for_every_corpus_render() {
    for name in corpus_names() {
        let r = corpus(&name);
        let ops = decide(&empty_pod(), &r, None);
        let uploads = ops
            .iter()
            .filter(|o| {
                matches!(
                    o,
                    Operation::UploadFile {
                        reason: FileReason::Missing,
                        ..
                    }
                )
            })
            .count();
        assert_eq!(uploads, r.files.len(), "{name}: {ops:?}");
        assert_eq!(
            ops.last(),
            Some(&Operation::PushRawConfig {
                version: ConfigVersion(1),
                mode: SyncMode::RawInitial,
            }),
            "{name}: files first, one push last (a fresh pod): {ops:?}"
        );
        assert_eq!(ops.iter().filter(|o| o.reloads()).count(), 1, "{name}");
    }
}

#[test]
fn corpus_stream_each_step_writes_only_what_changed_and_reloads_once() {
    let names = corpus_names();
    for pair in names.windows(2) {
        let (from, to) = (corpus(&pair[0]), corpus(&pair[1]));
        let pod = pod_running(&from, 3);
        let ops = decide(&pod, &to, Some(&record(&from)));
        let reloads = ops.iter().filter(|o| o.reloads()).count();
        assert!(reloads <= 1, "{} -> {}: {ops:?}", pair[0], pair[1]);
        let config_at = ops.iter().position(|o| {
            matches!(
                o,
                Operation::PushRawConfig { .. }
                    | Operation::Reload { .. }
                    | Operation::Transaction { .. }
                    | Operation::UpdateServer { .. }
            )
        });
        let last_write = ops.iter().rposition(|o| {
            matches!(
                o,
                Operation::UploadFile { .. } | Operation::ReplaceFile { .. }
            )
        });
        for (i, op) in ops.iter().enumerate() {
            match op {
                Operation::UploadFile { path, .. } | Operation::ReplaceFile { path, .. } => {
                    assert!(config_at.is_none_or(|p| i < p), "files before the push");
                    let old = from.files.iter().find(|f| f.path == *path);
                    let new = to.files.iter().find(|f| f.path == *path).unwrap();
                    assert!(
                        old.is_none_or(|o| o.content != new.content),
                        "{} -> {}: {path} unchanged but written",
                        pair[0],
                        pair[1]
                    );
                }
                Operation::DeleteFile { name, .. } => {
                    assert!(config_at.is_none_or(|p| i > p), "deletes last");
                    assert!(last_write.is_none_or(|w| i > w), "deletes last");
                    assert!(!to.files.iter().any(|f| f.name() == name));
                }
                _ => {}
            }
        }
        if reloads == 0 {
            assert!(
                last_write.is_none() && config_at.is_none(),
                "{} -> {}: something written without a reload: {ops:?}",
                pair[0],
                pair[1]
            );
        }
        // Every file the new render adds or changes is written.
        for f in &to.files {
            let same = from
                .files
                .iter()
                .any(|o| o.path == f.path && o.content == f.content);
            let written = ops.iter().any(|o| {
                matches!(o, Operation::UploadFile { path, .. } | Operation::ReplaceFile { path, .. } if *path == f.path)
            });
            assert_eq!(written, !same, "{} -> {}: {}", pair[0], pair[1], f.path);
        }
    }
}

#[test]
fn order_certificates_ca_general_maps_then_push_then_deletes() {
    let r = render(
        "cfg\n",
        vec![
            file(AuxKind::Map, "maps/a.map", b"a 1\n"),
            file(AuxKind::CrtList, "crt-lists/l.crtlist", b"x\n"),
            file(AuxKind::Ca, "ca/ca.pem", b"ca"),
            file(AuxKind::Ssl, "ssl/s.pem", b"s"),
        ],
    );
    let mut pod = empty_pod();
    pod.files
        .insert((StorageKind::Map, "old.map".into()), Stored::Listed);
    let kinds: Vec<(StorageKind, &str)> = decide(&pod, &r, None)
        .iter()
        .map(|o| match o {
            Operation::UploadFile { kind, .. } => (*kind, "upload"),
            Operation::DeleteFile { kind, .. } => (*kind, "delete"),
            Operation::PushRawConfig { .. } => (StorageKind::Map, "push"),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(
        kinds,
        vec![
            (StorageKind::SslCertificate, "upload"),
            (StorageKind::CaFile, "upload"),
            (StorageKind::General, "upload"),
            (StorageKind::Map, "upload"),
            (StorageKind::Map, "push"),
            (StorageKind::Map, "delete"),
        ]
    );
}

#[test]
fn maps_and_general_files_are_compared_by_content() {
    let r = corpus("03-maps-changed");
    let mut pod = pod_running(&r, 5);
    pod.files.insert(
        (StorageKind::Map, "hosts.map".into()),
        Stored::Content(b"shop.haptic.test shop-v1\n".to_vec()),
    );
    assert_eq!(
        decide(&pod, &r, None),
        vec![Operation::ReplaceFile {
            kind: StorageKind::Map,
            name: "hosts.map".into(),
            path: "maps/hosts.map".into(),
            reason: FileReason::ContentDiffers,
            skip_reload: false,
        }],
        "configuration equal: the one write reloads, no push"
    );
}

#[test]
fn files_only_the_last_write_reloads_and_a_push_covers_the_rest() {
    // A certificate and a crt-list change: the certificate is applied at runtime (written
    // without skip_reload, no reload for it), the crt-list's write reloads; nothing else.
    let old = corpus("06-crtlist");
    let mut new = old.clone();
    for f in &mut new.files {
        let content = [f.content.clone(), b"\n".to_vec()].concat();
        *f = file(f.kind, &f.path, &content);
    }
    let ops = decide(&pod_running(&old, 8), &new, Some(&record(&old)));
    let skips: Vec<(StorageKind, bool)> = ops
        .iter()
        .filter_map(|o| match o {
            Operation::ReplaceFile {
                kind, skip_reload, ..
            } => Some((*kind, *skip_reload)),
            _ => None,
        })
        .collect();
    assert_eq!(
        skips,
        vec![
            (StorageKind::SslCertificate, false),
            (StorageKind::General, false)
        ],
        "certificate at runtime, then the crt-list reloads: {ops:?}"
    );
    assert_eq!(ops.len(), 2, "no push: {ops:?}");
    assert_eq!(ops.iter().filter(|o| o.reloads()).count(), 1);
    // Two error pages: the first skips the reload, the last reloads, and a push follows
    // only when the last write did not reload.
    let old = corpus("04-errors");
    let mut new = old.clone();
    for f in &mut new.files {
        let content = [f.content.clone(), b"\n".to_vec()].concat();
        *f = file(f.kind, &f.path, &content);
    }
    let ops = decide(&pod_running(&old, 8), &new, Some(&record(&old)));
    let skips: Vec<bool> = ops
        .iter()
        .filter_map(|o| match o {
            Operation::ReplaceFile { skip_reload, .. } => Some(*skip_reload),
            _ => None,
        })
        .collect();
    assert_eq!(skips, vec![true, false], "{ops:?}");
    assert_eq!(
        ops.last(),
        Some(&Operation::Reload {
            version: ConfigVersion(8),
            reason: ReloadReason::FilesWritten,
            unless_reloaded: true,
        }),
        "pushed only when the last write did not reload"
    );
    assert_eq!(ops.iter().filter(|o| o.reloads()).count(), 1);
}

/// Compared by structure, not by version or text: the API's header lines and comments never
/// count (issue 14; a comment edited out of band used to cause a push), a changed directive
/// does.
#[test]
fn configuration_is_compared_by_content_not_version() {
    let r = corpus("01-basic");
    let mut pod = pod_running(&r, 9);
    assert_eq!(decide(&pod, &r, None), vec![], "header lines ignored");
    pod.config.text.push_str("    # edited out of band\n");
    assert_eq!(decide(&pod, &r, None), vec![], "a comment is no change");
    pod.config.text = pod
        .config
        .text
        .replace("timeout client 5s", "timeout client 9s");
    assert_eq!(
        decide(&pod, &r, None),
        vec![Operation::PushRawConfig {
            version: ConfigVersion(9),
            mode: SyncMode::RawUnmodelled,
        }],
        "a changed directive in defaults (not modelled) is pushed whole"
    );
}

/// Certificate table: what the pod reports about `site.pem` against the render's PEM.
#[test]
fn certificates_compare_serial_and_issuers_then_fingerprint() {
    let pem = site();
    let same = reported_certificate(&pem);
    let reissued = reported_certificate(&fixture("site-reissued.pem"));
    assert_eq!(same.size, reissued.size, "the re-issue has the same size");
    let fp = "B0:9C:6B:DD:24:CA:D3:A8:ED:0A:15:68:9F:A4:54:5C:A4:2B:E8:E4:EF:58:C5:11:B6:82:C7:45:AB:49:87:D2";
    let cases: Vec<(&str, SslCertificateInfo, Option<FileReason>)> = vec![
        ("same serial and issuer", same.clone(), None),
        (
            "issuers in another order, with an empty name",
            SslCertificateInfo {
                issuers: Some(format!(", {}", same.issuers.clone().unwrap())),
                ..same.clone()
            },
            None,
        ),
        (
            "re-issued: same name and size, new serial",
            reissued.clone(),
            Some(FileReason::SerialDiffers),
        ),
        (
            "another issuer",
            SslCertificateInfo {
                issuers: Some("Other CA".into()),
                ..same.clone()
            },
            Some(FileReason::IssuersDiffer),
        ),
        (
            "another size",
            SslCertificateInfo {
                size: Some(10),
                ..same.clone()
            },
            Some(FileReason::SizeDiffers {
                stored: 10,
                wanted: pem.len(),
            }),
        ),
        (
            "no serial: the fingerprint decides (equal)",
            SslCertificateInfo {
                serial: None,
                sha256_finger_print: Some(fp.into()),
                ..same.clone()
            },
            None,
        ),
        (
            "no serial: the fingerprint decides (other)",
            SslCertificateInfo {
                serial: None,
                sha256_finger_print: Some(fp.replace("B0:9C", "B0:9D")),
                ..same.clone()
            },
            Some(FileReason::FingerprintDiffers),
        ),
        (
            "serial equal but a reported fingerprint differs",
            SslCertificateInfo {
                sha256_finger_print: Some(fp.replace("B0:9C", "B0:9D")),
                ..same.clone()
            },
            Some(FileReason::FingerprintDiffers),
        ),
        (
            "nothing to compare by",
            SslCertificateInfo {
                size: same.size,
                ..SslCertificateInfo::default()
            },
            Some(FileReason::NoIdentity),
        ),
        (
            "an empty serial counts as none",
            SslCertificateInfo {
                serial: Some(String::new()),
                ..same.clone()
            },
            Some(FileReason::NoIdentity),
        ),
    ];
    for (what, info, want) in cases {
        let (pod, r) = cert_pod(info);
        let ops = decide(&pod, &r, None);
        assert_eq!(replaced_because(&ops), want, "{what}: {ops:?}");
        match want {
            None => assert_eq!(ops, vec![], "{what}"),
            // A certificate is applied at runtime: one write, no reload for it.
            Some(_) => assert!(
                matches!(
                    ops.as_slice(),
                    [Operation::ReplaceFile {
                        skip_reload: false,
                        ..
                    }]
                ) && !ops[0].reloads(),
                "{what}: one write applied at runtime: {ops:?}"
            ),
        }
    }
}

#[test]
fn a_render_pem_that_does_not_parse_is_written() {
    let r = render(
        "cfg\n",
        vec![file(
            AuxKind::Ssl,
            "ssl/x.pem",
            b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        )],
    );
    let mut pod = pod_running(&corpus("01-basic"), 2);
    pod.config = fixtures::stored_config("cfg\n", 2);
    pod.files.insert(
        (StorageKind::SslCertificate, "x.pem".into()),
        Stored::Certificate(Box::new(reported_certificate(&site()))),
    );
    assert_eq!(
        replaced_because(&decide(&pod, &r, None)),
        Some(FileReason::Unparsable)
    );
}

#[test]
fn ca_files_compare_count_and_entries_in_any_order() {
    let ca = std::fs::read(Path::new(RENDERS).join("07-ca/ca/clients-ca.pem")).unwrap();
    let bundle = [ca.clone(), site()].concat();
    let r = render("cfg\n", vec![file(AuxKind::Ca, "ca/bundle.pem", &bundle)]);
    let reported = reported_ca(&bundle);
    let mut reversed = reported.clone();
    reversed.entries.reverse();
    let mut other_serial = reported.clone();
    other_serial.entries[1].serial = Some("1002".into());
    other_serial.entries[1].sha1_finger_print = None;
    let mut other_fp = reported.clone();
    other_fp.entries[0].sha1_finger_print = Some("00".repeat(20));
    let mut no_identity = reported.clone();
    no_identity.entries[0] = SslCertificateInfo::default();
    let cases: Vec<(&str, CaFileEntries, Option<FileReason>)> = vec![
        ("same entries", reported.clone(), None),
        ("same entries, another order", reversed, None),
        (
            "one certificate fewer",
            CaFileEntries {
                count: Some(1),
                entries: reported.entries[..1].to_vec(),
            },
            Some(FileReason::CaEntriesDiffer),
        ),
        (
            "another serial",
            other_serial,
            Some(FileReason::CaEntriesDiffer),
        ),
        (
            "another fingerprint",
            other_fp,
            Some(FileReason::CaEntriesDiffer),
        ),
        (
            "an entry without identity",
            no_identity,
            Some(FileReason::CaEntriesDiffer),
        ),
        (
            "count not reported",
            CaFileEntries {
                count: None,
                entries: vec![],
            },
            Some(FileReason::CaEntriesDiffer),
        ),
    ];
    for (what, entries, want) in cases {
        let mut pod = empty_pod();
        pod.config = fixtures::stored_config("cfg\n", 3);
        pod.files.insert(
            (StorageKind::CaFile, "bundle.pem".into()),
            Stored::CaFile(entries),
        );
        assert_eq!(replaced_because(&decide(&pod, &r, None)), want, "{what}");
    }
    // A single-certificate CA file says which identifier differed.
    let r = render("cfg\n", vec![file(AuxKind::Ca, "ca/ca.pem", &ca)]);
    let mut entries = reported_ca(&ca);
    entries.entries[0].issuers = Some("/O=Acme/CN=Someone Else".into());
    let mut pod = empty_pod();
    pod.config = fixtures::stored_config("cfg\n", 3);
    pod.files.insert(
        (StorageKind::CaFile, "ca.pem".into()),
        Stored::CaFile(entries),
    );
    assert_eq!(
        replaced_because(&decide(&pod, &r, None)),
        Some(FileReason::IssuersDiffer)
    );
}

/// Issue 24: a file on disk is not a file HAProxy runs. The record decides first, then what
/// HAProxy's runtime reports, else (general files) one reload.
#[test]
fn stored_but_not_loaded_files_get_one_reload() {
    let old = corpus("02-maps");
    let mut new = old.clone();
    new.files[0] = file(
        AuxKind::Map,
        "maps/hosts.map",
        b"shop.haptic.test shop-v9\n",
    );
    let reload = vec![Operation::Reload {
        version: ConfigVersion(6),
        reason: ReloadReason::StoredNotLoaded {
            paths: vec!["maps/hosts.map".into()],
        },
        unless_reloaded: false,
    }];
    // On disk the new map; HAProxy's runtime shows the old one (a skip_reload write whose
    // reload failed).
    let mut pod = pod_running(&new, 6);
    pod.loaded = pod_running(&old, 6).loaded;
    // The record says written new, loaded old: reload, whatever the runtime says.
    let url = haptic_journal::EndpointUrl::new("http://127.0.0.1:5555");
    let pod_ref = haptic_journal::PodRef {
        namespace: "ns".into(),
        name: "haproxy-0".into(),
    };
    let mut ledger = PodLedger::new(&url, &pod_ref, Some(record(&old)), None);
    ledger.before_write(
        &new.files[0],
        Some(&Stored::Content(old.files[0].content.clone())),
    );
    assert_eq!(decide(&pod, &new, ledger.record()), reload);
    // No record (a new leader): the runtime view shows the old entries: reload.
    assert_eq!(decide(&pod, &new, None), reload);
    // No record, and the runtime view shows the new entries: loaded, nothing to do.
    assert_eq!(decide(&pod_running(&new, 6), &new, None), vec![]);
    // Nothing loaded under that name (404): reload.
    let mut absent = pod_running(&new, 6);
    absent
        .loaded
        .insert((StorageKind::Map, "hosts.map".into()), LoadedView::Absent);
    assert_eq!(decide(&absent, &new, None), reload);
    // The record proves it loaded: no runtime read needed, nothing to do.
    ledger.reloaded();
    assert!(runtime_read_plan(&pod, &new, ledger.record()).is_empty());
    assert_eq!(decide(&pod, &new, ledger.record()), vec![]);
    // Without the record, the sync reads the map's runtime view.
    assert_eq!(
        runtime_read_plan(&pod, &new, None)
            .into_iter()
            .map(|(k, _)| k)
            .collect::<Vec<_>>(),
        vec![(StorageKind::Map, "hosts.map".to_owned())]
    );
}

/// A map change plus a server weight change: the file is written with skip_reload and the
/// weight goes by the transaction (one reload), not at runtime (which would never load the
/// map); on the retry after a failed reload, the file on disk is not loaded, so again.
#[test]
fn a_file_not_loaded_makes_a_runtime_change_a_transaction() {
    let base = "global\n    stats socket /var/run/haproxy.sock mode 600 level admin\nbackend be\n    server s1 127.0.0.1:8080 weight 10\n";
    let map_old = file(AuxKind::Map, "maps/hosts.map", b"a 1\n");
    let map_new = file(AuxKind::Map, "maps/hosts.map", b"a 2\n");
    let old = render(base, vec![map_old.clone()]);
    let new = render(
        &base.replace("weight 10", "weight 20"),
        vec![map_new.clone()],
    );
    let pod = pod_running(&old, 4);
    let ops = decide(&pod, &new, Some(&record(&old)));
    assert!(
        matches!(
            ops.as_slice(),
            [
                Operation::ReplaceFile {
                    skip_reload: true,
                    ..
                },
                Operation::Transaction {
                    mode: SyncMode::FineGrained,
                    ..
                }
            ]
        ),
        "{ops:?}"
    );
    // Only the weight differs: at runtime, no reload.
    let ops = decide(
        &pod_running(&old, 4),
        &render(&new.config_text(), vec![map_old]),
        Some(&record(&old)),
    );
    assert!(
        matches!(ops.as_slice(), [Operation::UpdateServer { .. }]),
        "{ops:?}"
    );
    // After a failed reload: the map on disk is the new one, HAProxy runs the old one and the
    // configuration file is back to the old weight: one transaction again.
    let mut retry = pod_running(&new, 6);
    retry.config = fixtures::stored_config(&old.config_text(), 6);
    retry.loaded = pod_running(&old, 6).loaded;
    let ops = decide(&retry, &new, None);
    assert!(
        matches!(
            ops.as_slice(),
            [Operation::Transaction {
                mode: SyncMode::FineGrained,
                ..
            }]
        ),
        "{ops:?}"
    );
}

/// The API keeps a failed configuration in memory while the file is the last good one: a raw
/// push of the render, even when the file already equals it.
#[test]
fn a_pod_whose_api_holds_another_configuration_gets_a_raw_push() {
    let r = corpus("01-basic");
    let mut pod = pod_running(&r, 9);
    pod.config.version = ConfigVersion(10);
    assert_eq!(
        decide(&pod, &r, None),
        vec![Operation::PushRawConfig {
            version: ConfigVersion(10),
            mode: SyncMode::RawResync,
        }]
    );
}

/// Without an admin stats socket a server change reloads: one transaction for all of them,
/// in mode `no_runtime_api`.
#[test]
fn without_an_admin_socket_server_changes_go_by_one_transaction() {
    let with = "global\n    stats socket /var/run/haproxy.sock mode 600 level admin\nbackend be\n    server s1 127.0.0.1:8080 weight 10\n    server s2 127.0.0.1:8081 weight 10\n";
    let without = with.replace("level admin", "level user");
    for (config, runtime) in [(with.to_owned(), true), (without, false)] {
        let old = render(&config, vec![]);
        let new = render(&config.replace("weight 10", "weight 30"), vec![]);
        let ops = decide(&pod_running(&old, 3), &new, None);
        if runtime {
            assert_eq!(ops.len(), 2, "{ops:?}");
            assert!(
                ops.iter()
                    .all(|o| matches!(o, Operation::UpdateServer { .. }))
            );
        } else {
            assert!(
                matches!(ops.as_slice(), [Operation::Transaction { mode: SyncMode::NoRuntimeApi, changes, .. }] if changes.len() == 2),
                "{ops:?}"
            );
            assert_eq!(super::decide::mode_of(&ops), SyncMode::NoRuntimeApi);
        }
    }
    assert!(!super::decide::has_admin_socket(
        "frontend f\n    stats socket /x level admin\n"
    ));
}

#[test]
fn haproxys_own_names_are_never_deleted() {
    let r = corpus("07-ca");
    let mut pod = pod_running(&r, 2);
    pod.files
        .insert((StorageKind::CaFile, "@system-ca".into()), Stored::Listed);
    pod.files.insert(
        (StorageKind::SslCertificate, "@system-ca".into()),
        Stored::Listed,
    );
    assert_eq!(decide(&pod, &r, Some(&record(&r))), vec![]);
}

#[test]
fn map_files_are_read_as_haproxy_reads_them() {
    assert_eq!(
        super::compare::map_entries(b"# comment\n\n  a.example  backend 1 \t\r\nb\tx\nb y\nonly\n"),
        vec![
            ("a.example".to_owned(), "backend 1".to_owned()),
            ("b".to_owned(), "x".to_owned()),
            ("b".to_owned(), "y".to_owned()),
            ("only".to_owned(), String::new()),
        ]
    );
}

#[test]
fn stale_files_are_deleted_last_once_per_ssl_directory_name() {
    let r = corpus("07-ca");
    let mut pod = pod_running(&r, 2);
    // The certificate listing names every file of the SSL directory, the CA listing the CA
    // files: the render's CA file shows in both, an old CA file too, an old certificate once.
    for (kind, name) in [
        (StorageKind::SslCertificate, "clients-ca.pem"),
        (StorageKind::SslCertificate, "old-ca.pem"),
        (StorageKind::CaFile, "old-ca.pem"),
        (StorageKind::SslCertificate, "old.pem"),
        (StorageKind::General, "old.http"),
    ] {
        pod.files.insert((kind, name.into()), Stored::Listed);
    }
    assert_eq!(
        decide(&pod, &r, None),
        vec![
            Operation::DeleteFile {
                kind: StorageKind::SslCertificate,
                name: "old.pem".into()
            },
            Operation::DeleteFile {
                kind: StorageKind::CaFile,
                name: "old-ca.pem".into()
            },
            Operation::DeleteFile {
                kind: StorageKind::General,
                name: "old.http".into()
            },
        ]
    );
}

#[test]
fn read_plan_reads_the_render_files_the_listings_name() {
    let r = corpus("07-ca");
    let mut listed = BTreeMap::new();
    listed.insert(
        StorageKind::SslCertificate,
        [
            "site.pem".to_owned(),
            "clients-ca.pem".to_owned(),
            "x.pem".to_owned(),
        ]
        .into(),
    );
    listed.insert(StorageKind::CaFile, ["clients-ca.pem".to_owned()].into());
    listed.insert(StorageKind::Map, ["hosts.map".to_owned()].into());
    assert_eq!(
        read_plan(&listed, &r),
        vec![
            (StorageKind::SslCertificate, "site.pem".to_owned()),
            (StorageKind::CaFile, "clients-ca.pem".to_owned()),
        ]
    );
}

/// What `haptic plan` says a list of operations reloads: one for a push, a transaction, a
/// write that reloads, or a trailing reload the write before it did not make; none for runtime
/// server updates, deletes, creates and runtime-applied certificates alone.
#[test]
fn expected_reloads_counts_what_the_pod_will_reload() {
    use super::decide::expected_reloads;
    use super::structure::ObjectBody;
    let write = |kind, skip_reload, replace: bool| {
        let (name, path, reason) = ("f".to_owned(), "general/f".to_owned(), FileReason::Missing);
        if replace {
            Operation::ReplaceFile {
                kind,
                name,
                path,
                reason,
                skip_reload,
            }
        } else {
            Operation::UploadFile {
                kind,
                name,
                path,
                reason,
                skip_reload,
            }
        }
    };
    let trailing = Operation::Reload {
        version: ConfigVersion(3),
        reason: ReloadReason::FilesWritten,
        unless_reloaded: true,
    };
    let server = Operation::UpdateServer {
        backend: "be".into(),
        name: "s1".into(),
        body: ObjectBody(serde_json::json!({"name": "s1"})),
        changed_fields: vec!["weight".into()],
    };
    let delete = Operation::DeleteFile {
        kind: StorageKind::Map,
        name: "old.map".into(),
    };
    let transaction = Operation::Transaction {
        version: ConfigVersion(3),
        changes: vec![],
        mode: SyncMode::FineGrained,
    };
    let push = Operation::PushRawConfig {
        version: ConfigVersion(3),
        mode: SyncMode::RawThreshold,
    };
    let cases: Vec<(&str, Vec<Operation>, u32)> = vec![
        ("nothing", vec![], 0),
        (
            "runtime server updates",
            vec![server.clone(), server.clone()],
            0,
        ),
        ("a delete", vec![delete.clone()], 0),
        (
            "a transaction",
            vec![transaction.clone(), delete.clone()],
            1,
        ),
        (
            "files then a push",
            vec![write(StorageKind::Map, true, true), push.clone()],
            1,
        ),
        (
            "a replaced general file reloads, the trailing reload is skipped",
            vec![
                write(StorageKind::General, true, true),
                write(StorageKind::General, false, true),
                trailing.clone(),
            ],
            1,
        ),
        (
            "an upload never reloads: the trailing reload does",
            vec![write(StorageKind::Map, false, false), trailing.clone()],
            1,
        ),
        (
            "a certificate is applied at runtime: the trailing reload does",
            vec![
                write(StorageKind::SslCertificate, false, true),
                trailing.clone(),
            ],
            1,
        ),
        (
            "an unconditional reload",
            vec![Operation::Reload {
                version: ConfigVersion(3),
                reason: ReloadReason::StoredNotLoaded {
                    paths: vec!["general/f".into()],
                },
                unless_reloaded: false,
            }],
            1,
        ),
    ];
    for (name, ops, want) in cases {
        assert_eq!(expected_reloads(&ops), want, "{name}: {ops:?}");
    }
    // What plan returns for the corpus stream reloads at most once, and only when it writes.
    let names = corpus_names();
    for pair in names.windows(2) {
        let (from, to) = (corpus(&pair[0]), corpus(&pair[1]));
        let ops = decide(&pod_running(&from, 3), &to, Some(&record(&from)));
        let n = expected_reloads(&ops);
        assert!(n <= 1, "{} -> {}: {n} reloads: {ops:?}", pair[0], pair[1]);
        let writes = ops.iter().any(|o| {
            !matches!(
                o,
                Operation::DeleteFile { .. } | Operation::UpdateServer { .. }
            )
        });
        assert_eq!(n == 1, writes, "{} -> {}: {ops:?}", pair[0], pair[1]);
    }
}
