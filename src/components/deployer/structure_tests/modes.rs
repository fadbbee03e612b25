//! The sync mode the structural diff leads to: runtime server updates, one transaction, or a
//! raw push (corpus renders and renders of our own).

use haptic_journal::{Checksum, ConfigVersion, SyncMode};
use serde_json::json;

use super::super::decide::{Operation, SyncPolicy, count_changes, decide, mode_of, plan};
use super::super::structure::{ChildKey, ChildKind, ConfigChange, ObjectBody, Parent, ParentKind};
use super::{corpus_file, pod, render};

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
            [
                Operation::Transaction {
                    version, changes, ..
                },
            ] => {
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
    r.files.push(crate::core::render::JournaledFile {
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

pub(super) const FRONT: &str = "global\n    stats socket /var/run/haproxy.sock mode 600 level admin\ndefaults\n    mode http\n    timeout connect 1s\n    timeout client 5s\n    timeout server 5s\nfrontend fe_http\n    bind *:80\n    acl is_api path_beg /api\n    http-request set-header X-Render one\n    use_backend be_api if is_api\n    default_backend be_app\nbackend be_app\n    server app 127.0.0.1:9001\nbackend be_api\n    server api 127.0.0.1:9002\n";

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
    let [
        Operation::Transaction {
            version, changes, ..
        },
    ] = &ops[..]
    else {
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
    // A condition on the pod's environment (quoted words are modelled: `quoting.rs`).
    let to = FRONT.replace(
        "use_backend be_api if is_api",
        "use_backend be_api if { hdr(x) \"${X}\" }",
    );
    assert_eq!(
        mode_of(&decide(&pod(FRONT, 2), &render(&to), None)),
        SyncMode::RawUnmodelled
    );
}
