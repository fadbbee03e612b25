//! Table tests of the structural comparison and the mode decision over the shared corpus
//! (`../shared/corpus/haproxy/`) and renders of our own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use haptic_journal::{Checksum, ConfigVersion, SyncMode};
use serde_json::json;

use super::decide::{
    LoadedRender, Operation, RunningPod, SyncPolicy, count_changes, decide, mode_of, plan,
};
use super::structure::{
    ChildKey, ChildKind, ConfigChange, ConfigDiff, ObjectBody, Parent, ParentKind, diff, equal,
    parse, tokenize,
};
use crate::dataplane::RawConfiguration;

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/corpus/haproxy");

fn corpus_file(rel: &str) -> String {
    std::fs::read_to_string(Path::new(CORPUS).join(rel)).unwrap()
}

fn all_corpus_configs() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for dir in std::fs::read_dir(CORPUS).unwrap() {
        let dir = dir.unwrap().path();
        if !dir.is_dir() {
            continue;
        }
        for f in std::fs::read_dir(&dir).unwrap() {
            let f = f.unwrap().path();
            if f.extension().is_some_and(|e| e == "cfg") {
                out.push(f);
            }
        }
    }
    out.sort();
    assert!(out.len() >= 100, "corpus configs found: {}", out.len());
    out
}

fn render(config: &str) -> LoadedRender {
    LoadedRender {
        checksum: Checksum::of(config.as_bytes()),
        config_blob: Checksum::of(config.as_bytes()),
        config: config.to_owned(),
        files: vec![],
    }
}

fn pod(config: &str, version: i64) -> RunningPod {
    RunningPod {
        config: RawConfiguration {
            text: format!("# _version={version}\n{config}"),
            version: ConfigVersion(version),
            file_version: Some(ConfigVersion(version)),
            configuration_checksum: None,
        },
        files: BTreeMap::new(),
        loaded: BTreeMap::new(),
    }
}

/// The configuration rewritten the way the Dataplane API lays out a file after a write through
/// its configuration endpoints (config-parser's writer): two-space indentation, a blank line
/// before each section, sections grouped by kind and sorted by name, keywords grouped (here in
/// reverse family order), comments dropped, timeouts in seconds, server parameters in another
/// order, `defaults` named `unnamed_defaults_1` and proxies naming it with `from`.
fn api_layout(text: &str) -> String {
    let mut sections: Vec<(String, Vec<Vec<String>>)> = Vec::new();
    let mut defaults_seen = 0;
    let mut last_defaults = String::new();
    for raw in text.lines() {
        let words = tokenize(raw);
        if words.is_empty() {
            continue;
        }
        let kw = words[0].as_str();
        if super::structure::SECTION_KEYWORDS.contains(&kw) {
            let mut head = words.clone();
            if kw == "defaults" && head.len() == 1 {
                defaults_seen += 1;
                head.push(format!("unnamed_defaults_{defaults_seen}"));
            }
            if kw == "defaults" {
                last_defaults = head[1].clone();
            } else if ["frontend", "backend", "listen"].contains(&kw)
                && head.len() == 2
                && !last_defaults.is_empty()
            {
                head.push("from".into());
                head.push(last_defaults.clone());
            }
            sections.push((quote_all(&head), Vec::new()));
            continue;
        }
        let mut w = words.clone();
        if w[0] == "timeout"
            && w.len() == 3
            && let Some(ms) = super::structure::time_ms(&w[2])
            && ms % 1000 == 0
        {
            w[2] = format!("{}s", ms / 1000);
        }
        if (w[0] == "server" && w.len() > 3) || (w[0] == "server-template" && w.len() > 4) {
            let fixed = if w[0] == "server" { 3 } else { 4 };
            let mut params: Vec<Vec<String>> = Vec::new();
            let mut i = fixed;
            while i < w.len() {
                let takes = !["check", "backup", "disabled", "enabled", "ssl", "no-check"]
                    .contains(&w[i].as_str());
                if takes && i + 1 < w.len() {
                    params.push(vec![w[i].clone(), w[i + 1].clone()]);
                    i += 2;
                } else {
                    params.push(vec![w[i].clone()]);
                    i += 1;
                }
            }
            params.reverse();
            w.truncate(fixed);
            w.extend(params.into_iter().flatten());
        }
        if let Some(s) = sections.last_mut() {
            s.1.push(w);
        }
    }
    let order = |head: &str| {
        let kw = head.split(' ').next().unwrap_or_default();
        [
            "global",
            "defaults",
            "userlist",
            "peers",
            "mailers",
            "resolvers",
            "cache",
            "ring",
            "http-errors",
            "frontend",
            "backend",
            "listen",
            "program",
        ]
        .iter()
        .position(|k| *k == kw)
        .unwrap_or(99)
    };
    sections.sort_by(|a, b| (order(&a.0), &a.0).cmp(&(order(&b.0), &b.0)));
    let mut out = String::from("# _version=42\n# _md5hash=0123\n");
    for (head, lines) in sections {
        out.push('\n');
        out.push_str(&head);
        out.push('\n');
        // Group by keyword (stable within a keyword), keywords in reverse order of appearance.
        let mut groups: Vec<(String, Vec<Vec<String>>)> = Vec::new();
        for l in lines {
            let k = l[0].clone();
            match groups.iter_mut().find(|g| g.0 == k) {
                Some(g) => g.1.push(l),
                None => groups.push((k, vec![l])),
            }
        }
        groups.reverse();
        for (_, ls) in groups {
            for l in ls {
                out.push_str("  ");
                out.push_str(&quote_all(&l));
                out.push('\n');
            }
        }
    }
    out
}

fn quote_all(words: &[String]) -> String {
    words
        .iter()
        .map(|w| {
            if w.is_empty() || w.contains([' ', '\t', '#', '"', '\\']) {
                format!("\"{}\"", w.replace('\\', "\\\\").replace('"', "\\\""))
            } else {
                w.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn tokenizer_resolves_quotes_escapes_and_comments() {
    assert_eq!(
        tokenize(r#"  http-request return status 200 content-type "text/plain" string "a b" # x"#),
        vec![
            "http-request",
            "return",
            "status",
            "200",
            "content-type",
            "text/plain",
            "string",
            "a b"
        ]
    );
    assert_eq!(
        tokenize(r"acl x path_beg /a\ b"),
        vec!["acl", "x", "path_beg", "/a b"]
    );
    assert_eq!(tokenize("# _version=3"), Vec::<String>::new());
    assert_eq!(tokenize("log 'a#b'"), vec!["log", "a#b"]);
}

/// Every corpus configuration equals itself rewritten in the Dataplane API's layout, and with
/// comments and blank lines added: a drift check after a fine-grained write finds nothing.
#[test]
fn every_corpus_config_equals_its_api_layout_and_its_commented_copy() {
    for path in all_corpus_configs() {
        let text = std::fs::read_to_string(&path).unwrap();
        let name = path.display();
        let a = parse(&text);
        let b = parse(&api_layout(&text));
        assert!(
            equal(&a, &b),
            "{name}: API layout counts as a change:\n{}",
            api_layout(&text)
        );
        assert_eq!(diff(&a, &b), ConfigDiff::Changes(vec![]), "{name}");
        let commented: String = text
            .lines()
            .flat_map(|l| {
                [
                    format!("{l}   # note"),
                    String::new(),
                    "# block comment".into(),
                ]
            })
            .collect::<Vec<_>>()
            .join("\n");
        assert!(
            equal(&a, &parse(&commented)),
            "{name}: comments count as a change"
        );
        let ops = decide(&pod(&api_layout(&text), 7), &render(&text), None);
        assert_eq!(
            ops,
            vec![],
            "{name}: no operation for a pod in the API's layout"
        );
    }
}

/// Pairs of distinct corpus files never compare equal (the comparison is not blind).
#[test]
fn different_corpus_configs_are_different() {
    let paths = all_corpus_configs();
    let texts: Vec<(String, String)> = paths
        .iter()
        .map(|p| (p.display().to_string(), std::fs::read_to_string(p).unwrap()))
        .collect();
    for (i, (na, ta)) in texts.iter().enumerate() {
        for (nb, tb) in &texts[i + 1..] {
            let same_words = |t: &str| {
                t.lines()
                    .map(tokenize)
                    .filter(|w| !w.is_empty())
                    .collect::<Vec<_>>()
            };
            if same_words(ta) == same_words(tb) {
                continue; // the corpus holds a few byte-different copies of one config
            }
            assert!(
                !equal(&parse(ta), &parse(tb)),
                "{na} and {nb} compare equal"
            );
        }
    }
}

fn server_update(backend: &str, name: &str, fields: &[&str]) -> (String, String, Vec<String>) {
    (
        backend.to_owned(),
        name.to_owned(),
        fields.iter().map(|f| (*f).to_owned()).collect(),
    )
}

fn updates(ops: &[Operation]) -> Vec<(String, String, Vec<String>)> {
    ops.iter()
        .filter_map(|o| match o {
            Operation::UpdateServer {
                backend,
                name,
                changed_fields,
                ..
            } => Some((backend.clone(), name.clone(), changed_fields.clone())),
            _ => None,
        })
        .collect()
}

/// Corpus server changes: which go at runtime (the real API's rule), which by a transaction,
/// which by a raw push.
#[test]
fn corpus_server_changes_pick_runtime_transaction_or_raw() {
    let runtime = |from: &str, to: &str, want: Vec<(String, String, Vec<String>)>| {
        let ops = decide(&pod(&corpus_file(from), 5), &render(&corpus_file(to)), None);
        assert_eq!(mode_of(&ops), SyncMode::Runtime, "{from} -> {to}: {ops:?}");
        assert_eq!(updates(&ops), want, "{from} -> {to}");
        assert!(ops.iter().all(|o| !o.reloads()), "{from} -> {to}");
    };
    runtime(
        "servers/weight-100.cfg",
        "servers/weight-200.cfg",
        vec![server_update("web", "srv1", &["weight"])],
    );
    runtime(
        "servers/address-changed.cfg",
        "servers/port-changed.cfg",
        vec![server_update("test-backend", "srv1", &["address", "port"])],
    );
    runtime(
        "servers/disabled-dummy.cfg",
        "servers/enabled-dummy.cfg",
        vec![server_update("web", "srv1", &["maintenance"])],
    );
    runtime(
        "servers/enabled-dummy.cfg",
        "servers/disabled-dummy.cfg",
        vec![server_update("web", "srv1", &["maintenance"])],
    );
    // A free slot filled: address, port and state at runtime.
    runtime(
        "servers/disabled-dummy.cfg",
        "servers/enabled-real.cfg",
        vec![server_update(
            "web",
            "srv1",
            &["address", "maintenance", "port"],
        )],
    );

    let transaction = |from: &str, to: &str| -> Vec<ConfigChange> {
        let ops = decide(&pod(&corpus_file(from), 5), &render(&corpus_file(to)), None);
        assert_eq!(
            mode_of(&ops),
            SyncMode::FineGrained,
            "{from} -> {to}: {ops:?}"
        );
        assert_eq!(
            ops.iter().filter(|o| o.reloads()).count(),
            1,
            "{from} -> {to}"
        );
        match &ops[..] {
            [Operation::Transaction { version, changes, .. }] => {
                assert_eq!(*version, ConfigVersion(5));
                changes.clone()
            }
            other => panic!("{from} -> {to}: one transaction, got {other:?}"),
        }
    };
    let web = Parent {
        kind: ParentKind::Backend,
        name: "web".into(),
    };
    let changes = transaction(
        "servers/weight-100.cfg",
        "servers/weight-100-plus-second.cfg",
    );
    assert_eq!(
        changes,
        vec![ConfigChange::CreateChild {
            parent: web.clone(),
            kind: ChildKind::Server,
            key: ChildKey::Name("srv2".into()),
            body: ObjectBody(
                json!({"name": "srv2", "address": "192.168.1.11", "port": 8080, "check": "enabled"})
            ),
        }]
    );
    // A server delete reloads on the real API: it goes by transaction.
    let changes = transaction(
        "servers/weight-100-plus-second.cfg",
        "servers/weight-100.cfg",
    );
    assert!(matches!(
        &changes[..],
        [ConfigChange::DeleteChild {
            kind: ChildKind::Server,
            ..
        }]
    ));
    // check intervals are not runtime fields.
    let changes = transaction(
        "server-templates/backend-base.cfg",
        "servers/with-check-inter.cfg",
    );
    assert!(
        matches!(&changes[..], [ConfigChange::ReplaceChild { changed_fields, .. }] if changed_fields == &["fall", "inter", "rise"]),
        "{changes:?}"
    );
    // backup is not a runtime field either.
    transaction("servers/with-maxconn.cfg", "servers/with-backup.cfg");
    // Server templates: every change reloads on the real API (no runtime fields).
    let changes = transaction(
        "server-templates/backend-base.cfg",
        "server-templates/backend-with-template.cfg",
    );
    assert_eq!(
        changes,
        vec![ConfigChange::CreateChild {
            parent: web.clone(),
            kind: ChildKind::ServerTemplate,
            key: ChildKey::Name("web-".into()),
            body: ObjectBody(
                json!({"prefix": "web-", "num_or_range": "3", "fqdn": "192.168.1.10", "port": 8080, "check": "enabled"})
            ),
        }]
    );
    let changes = transaction(
        "server-templates/backend-with-template.cfg",
        "server-templates/template-num-changed.cfg",
    );
    assert!(
        matches!(&changes[..], [ConfigChange::ReplaceChild { kind: ChildKind::ServerTemplate, changed_fields, .. }] if changed_fields == &["num_or_range"])
    );

    // `default-server` is not modelled: a change next to it goes whole, never by a guess.
    let ops = decide(
        &pod(&corpus_file("servers/enabled-real.cfg"), 5),
        &render(&corpus_file("servers/disabled-real.cfg")),
        None,
    );
    assert_eq!(
        ops,
        vec![Operation::PushRawConfig {
            version: ConfigVersion(5),
            mode: SyncMode::RawUnmodelled
        }]
    );
    // A section the model does not cover (the userlist disappears): raw.
    let ops = decide(
        &pod(&corpus_file("servers/weight-100.cfg"), 5),
        &render(&corpus_file("servers/with-maxconn.cfg")),
        None,
    );
    assert_eq!(mode_of(&ops), SyncMode::RawUnmodelled);
}

/// A fresh pod (version 1) gets a raw push whatever the change.
#[test]
fn a_fresh_pod_gets_a_raw_push() {
    let ops = decide(
        &pod(&corpus_file("servers/weight-100.cfg"), 1),
        &render(&corpus_file("servers/weight-200.cfg")),
        None,
    );
    assert_eq!(
        ops,
        vec![Operation::PushRawConfig {
            version: ConfigVersion(1),
            mode: SyncMode::RawInitial
        }]
    );
}

fn slots(n: usize, enabled: &[usize], base_port: u16) -> String {
    let mut s = String::from(
        "global\n    stats socket /var/run/haproxy.sock mode 600 level admin\ndefaults\n    mode http\n    timeout connect 1s\n    timeout client 5s\n    timeout server 5s\nbackend be_app\n    balance roundrobin\n",
    );
    for i in 1..=n {
        if enabled.contains(&i) {
            s.push_str(&format!(
                "    server web-{i} 127.0.0.1:{} weight {}\n",
                base_port + i as u16,
                10 + i
            ));
        } else {
            s.push_str(&format!("    server web-{i} 127.0.0.1:1 disabled\n"));
        }
    }
    s
}

/// 20 server changes: above a threshold of 5 one raw push; with no threshold, 20 runtime
/// updates; the default threshold (100) keeps them runtime.
#[test]
fn raw_push_threshold_counts_the_changes() {
    let from = slots(20, &[], 9000);
    let to = slots(20, &(1..=20).collect::<Vec<_>>(), 9000);
    let p = pod(&from, 4);
    let r = render(&to);
    let ops = plan(
        &p,
        &r,
        None,
        &SyncPolicy {
            raw_push_threshold: 5,
        },
    );
    assert_eq!(
        ops,
        vec![Operation::PushRawConfig {
            version: ConfigVersion(4),
            mode: SyncMode::RawThreshold
        }]
    );
    let ops = plan(
        &p,
        &r,
        None,
        &SyncPolicy {
            raw_push_threshold: 0,
        },
    );
    assert_eq!(updates(&ops).len(), 20);
    assert_eq!(mode_of(&ops), SyncMode::Runtime);
    let ops = plan(
        &p,
        &r,
        None,
        &SyncPolicy {
            raw_push_threshold: 20,
        },
    );
    assert_eq!(mode_of(&ops), SyncMode::Runtime, "20 is not above 20");
    assert_eq!(mode_of(&decide(&p, &r, None)), SyncMode::Runtime);
}

/// Files and servers change together: one transaction after the files (one reload loads both),
/// never runtime updates next to a file write.
#[test]
fn files_and_servers_together_go_in_one_transaction() {
    let from = slots(3, &[1], 9000);
    let to = slots(3, &[1, 2], 9000);
    let mut r = render(&to);
    r.files.push(super::decide::LoadedFile {
        kind: haptic_journal::AuxKind::Map,
        path: "maps/hosts.map".into(),
        blob: Checksum::of(b"a b\n"),
        content: b"a b\n".to_vec(),
    });
    let ops = decide(&pod(&from, 3), &r, None);
    assert!(
        matches!(
            ops[0],
            Operation::UploadFile {
                skip_reload: true,
                ..
            }
        ),
        "{ops:?}"
    );
    assert!(matches!(ops[1], Operation::Transaction { .. }), "{ops:?}");
    assert_eq!(ops.len(), 2);
    assert_eq!(ops.iter().filter(|o| o.reloads()).count(), 1);
}

const FRONT: &str = "global\n    stats socket /var/run/haproxy.sock mode 600 level admin\ndefaults\n    mode http\n    timeout connect 1s\n    timeout client 5s\n    timeout server 5s\nfrontend fe_http\n    bind *:80\n    acl is_api path_beg /api\n    http-request set-header X-Render one\n    use_backend be_api if is_api\n    default_backend be_app\nbackend be_app\n    server app 127.0.0.1:9001\nbackend be_api\n    server api 127.0.0.1:9002\n";

/// A frontend rule changes and a backend is added: one transaction, the section created before
/// its children, deletes first, updates last.
#[test]
fn frontend_rules_and_new_backends_go_in_one_ordered_transaction() {
    let to = FRONT
        .replace("set-header X-Render one", "set-header X-Render two")
        .replace(
            "    use_backend be_api if is_api\n",
            "    use_backend be_api if is_api\n    use_backend be_new if { path_beg /new }\n",
        )
        .replace("acl is_api path_beg /api\n", "")
        .replace(
            "use_backend be_api if is_api",
            "use_backend be_api if { path_beg /api }",
        )
        + "backend be_new\n    balance roundrobin\n    timeout server 2s\n    server new1 127.0.0.1:9003 check\n    server new2 127.0.0.1:9004 check weight 5\n";
    let ops = decide(&pod(FRONT, 6), &render(&to), None);
    let [Operation::Transaction { version, changes, .. }] = &ops[..] else {
        panic!("one transaction: {ops:?}");
    };
    assert_eq!(*version, ConfigVersion(6));
    let fe = Parent {
        kind: ParentKind::Frontend,
        name: "fe_http".into(),
    };
    let be_new = Parent {
        kind: ParentKind::Backend,
        name: "be_new".into(),
    };
    let described: Vec<String> = changes.iter().map(ConfigChange::describe).collect();
    assert_eq!(
        described,
        vec![
            "acls fe_http/0",
            "backend be_new",
            "servers be_new/new1",
            "servers be_new/new2",
            "backend_switching_rules fe_http/1",
            "http_request_rules fe_http/0",
            "backend_switching_rules fe_http/0",
        ],
        "{changes:#?}"
    );
    assert_eq!(
        changes[0],
        ConfigChange::DeleteChild {
            parent: fe.clone(),
            kind: ChildKind::Acl,
            key: ChildKey::Index(0)
        }
    );
    assert_eq!(
        changes[1],
        ConfigChange::CreateSection {
            kind: ParentKind::Backend,
            name: "be_new".into(),
            body: ObjectBody(
                json!({"name": "be_new", "balance": {"algorithm": "roundrobin"}, "server_timeout": 2000})
            ),
        }
    );
    assert!(
        matches!(&changes[3], ConfigChange::CreateChild { parent, body, .. } if *parent == be_new && body.0["weight"] == 5)
    );
    assert_eq!(
        changes[4],
        ConfigChange::CreateChild {
            parent: fe.clone(),
            kind: ChildKind::BackendSwitchingRule,
            key: ChildKey::Index(1),
            body: ObjectBody(
                json!({"name": "be_new", "cond": "if", "cond_test": "{ path_beg /new }"})
            ),
        }
    );
    assert!(
        matches!(&changes[5], ConfigChange::ReplaceChild { body, .. } if body.0 == json!({"type": "set-header", "hdr_name": "X-Render", "hdr_format": "two"}))
    );
    let mut counts = haptic_journal::OperationCounts::default();
    count_changes(changes, &mut counts);
    assert_eq!(
        (
            counts.backends.added,
            counts.servers.added,
            counts.frontends.modified
        ),
        (1, 2, 1)
    );

    // Deleting it again: its children go with it (one delete), the rules by index.
    let back = decide(&pod(&to, 7), &render(FRONT), None);
    let [Operation::Transaction { changes, .. }] = &back[..] else {
        panic!("{back:?}")
    };
    assert_eq!(
        changes
            .iter()
            .map(ConfigChange::describe)
            .collect::<Vec<_>>(),
        vec![
            "backend_switching_rules fe_http/1",
            "backend be_new",
            "acls fe_http/0",
            "http_request_rules fe_http/0",
            "backend_switching_rules fe_http/0",
        ]
    );
}

/// Frontend attributes and binds are modelled; an unmodelled line in a frontend that must be
/// replaced is not guessed.
#[test]
fn frontend_attributes_binds_and_unmodelled_lines() {
    let to = FRONT.replace(
        "    bind *:80\n",
        "    bind *:80\n    bind *:8080 name alt\n    maxconn 500\n",
    );
    let ops = decide(&pod(FRONT, 2), &render(&to), None);
    let [Operation::Transaction { changes, .. }] = &ops[..] else {
        panic!("{ops:?}")
    };
    assert_eq!(
        changes
            .iter()
            .map(ConfigChange::describe)
            .collect::<Vec<_>>(),
        vec!["binds fe_http/alt", "frontend fe_http"]
    );
    let to = FRONT.replace("    bind *:80\n", "    bind *:80\n    log global\n");
    assert_eq!(
        mode_of(&decide(&pod(FRONT, 2), &render(&to), None)),
        SyncMode::RawUnmodelled
    );
    let to = FRONT.replace("set-header X-Render one", "set-header X-Render \"one two\"");
    let ops = decide(&pod(FRONT, 2), &render(&to), None);
    assert_eq!(
        mode_of(&ops),
        SyncMode::FineGrained,
        "a quoted value is a model string"
    );
    let to = FRONT.replace(
        "use_backend be_api if is_api",
        "use_backend be_api if { hdr(x) \"a b\" }",
    );
    assert_eq!(
        mode_of(&decide(&pod(FRONT, 2), &render(&to), None)),
        SyncMode::RawUnmodelled
    );
}
