//! `haptic-journalctl` tests (one binary): the built tool against copies of the committed
//! fixtures (`migrations/fixtures/v4.redb`, this build's schema; `v1.redb`, to migrate), a
//! corrupted copy, a missing file, a newer schema, and a journal held by another process in each
//! concurrency mode.
//!
//! The holder process is this test binary re-executed with `HAPTIC_JOURNALCTL_HOLDER=<mode>:<file>`
//! running only `holder`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use haptic_journal::redb;
use haptic_journal::{Concurrency, Journal, JournalOptions};

const BIN: &str = env!("CARGO_BIN_EXE_haptic-journalctl");
const HOLDER_ENV: &str = "HAPTIC_JOURNALCTL_HOLDER";
const KEY_LINE: &str = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQDfakefixture";
/// The fixture's open transactions (`migrations/tests/migrations/fixture_pod.rs`): endpoint, pod,
/// state, version.
const TRANSACTIONS: [(&str, &str, &str, i64); 3] = [
    ("http://10.0.0.7:5555", "haptic/haproxy-0", "open", 12),
    ("http://10.0.0.8:5555", "haptic/haproxy-1", "committing", 13),
    ("http://10.0.0.9:5555", "haptic/haproxy-2", "unknown", 7),
];
const QUEUES: [&str; 9] = [
    "publish",
    "publish-deployed",
    "invalid",
    "verdict",
    "status-pending",
    "status-parked",
    "deploy-pending",
    "deploy-inflight",
    "drain-checkpoint",
];

struct Run {
    code: i32,
    out: String,
    err: String,
}

fn run(args: &[&str]) -> Run {
    let o = Command::new(BIN)
        .args(args)
        .env_remove("HAPTIC_JOURNALCTL_CONCURRENCY")
        .output()
        .unwrap();
    Run {
        code: o.status.code().unwrap_or(-1),
        out: String::from_utf8_lossy(&o.stdout).into_owned(),
        err: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

/// [`run`] that must exit 0 (panics with its stderr when not).
fn ok(args: &[&str]) -> Run {
    let r = run(args);
    assert_eq!(r.code, 0, "{}", r.err);
    r
}

/// The newest committed fixture (this build's schema).
fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../migrations/fixtures/v4.redb")
}

/// The schema-1 fixture (refused until migrated).
fn fixture_v1() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../migrations/fixtures/v1.redb")
}

fn copy() -> (tempfile::TempDir, PathBuf, String) {
    copy_of(&fixture())
}

fn copy_of(fixture: &Path) -> (tempfile::TempDir, PathBuf, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.redb");
    std::fs::copy(fixture, &path).unwrap();
    let s = path.display().to_string();
    (dir, path, s)
}

fn json_lines(s: &str) -> Vec<serde_json::Value> {
    s.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l}: {e}")))
        .collect()
}

#[test]
fn summary_works_on_the_committed_fixture() {
    let r = ok(&["summary", fixture().to_str().unwrap()]);
    assert!(r.out.contains("schema          4"), "{}", r.out);
    assert!(r.out.contains("term            3 (identity haptic-0)"));
    assert!(r.out.contains("oldest pending  "));
    for t in haptic_journal::tables::ALL_TABLES {
        assert!(r.out.lines().any(|l| l.starts_with(t)), "table {t} missing");
    }
    let r = ok(&["--json", "summary", fixture().to_str().unwrap()]);
    let v = &json_lines(&r.out)[0];
    assert_eq!(v["schema_version"], 4);
    assert_eq!(v["term"], 3);
    assert_eq!(v["last_seq"], 22);
    assert_eq!(
        v["tables"].as_array().unwrap().len(),
        haptic_journal::tables::ALL_TABLES.len()
    );
    assert!(v["oldest_pending"]["age_s"].is_u64());
}

/// `{"queue": NAME, "count": N, "oldest_age_s": S}`, exactly one line per queue; then
/// `{"transaction": ID, "endpoint": URL, "pod": "NS/NAME", "state": S, "version": V, "age_s": A}`,
/// one line per open Dataplane transaction, by endpoint URL.
#[test]
fn pending_json_has_the_exact_line_format() {
    let (_d, _p, f) = copy();
    let r = ok(&["pending", "--json", &f]);
    let lines: Vec<&str> = r.out.lines().collect();
    assert_eq!(lines.len(), QUEUES.len() + TRANSACTIONS.len(), "{}", r.out);
    for (line, q) in lines.iter().zip(QUEUES) {
        let count = if q == "verdict" { 2 } else { 1 };
        let prefix = format!("{{\"queue\": \"{q}\", \"count\": {count}, \"oldest_age_s\": ");
        let rest = line
            .strip_prefix(&prefix)
            .unwrap_or_else(|| panic!("{line:?} does not start with {prefix:?}"));
        let age = rest.strip_suffix('}').unwrap();
        assert!(
            !age.is_empty() && age.bytes().all(|b| b.is_ascii_digit()),
            "{line}"
        );
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v.as_object().unwrap().len(), 3);
    }
    for (line, (url, pod, state, version)) in lines[QUEUES.len()..].iter().zip(TRANSACTIONS) {
        assert!(line.starts_with("{\"transaction\": \""), "{line}");
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v.as_object().unwrap().len(), 6, "{line}");
        assert!(!v["transaction"].as_str().unwrap().is_empty());
        assert_eq!(v["endpoint"], url, "{line}");
        assert_eq!(v["pod"], pod, "{line}");
        assert_eq!(v["state"], state, "{line}");
        assert_eq!(v["version"], version, "{line}");
        assert!(v["age_s"].is_u64(), "{line}");
        assert!(
            line.ends_with(&format!(
                "\"state\": \"{state}\", \"version\": {version}, \"age_s\": {}}}",
                v["age_s"]
            )),
            "{line}"
        );
    }
    // Empty queues: null ages; no transaction.
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.redb");
    drop(Journal::open(&JournalOptions::new(&empty)).unwrap());
    let r = ok(&["pending", "--json", empty.to_str().unwrap()]);
    let lines: Vec<&str> = r.out.lines().collect();
    assert_eq!(lines.len(), 9);
    for (line, q) in lines.iter().zip(QUEUES) {
        assert_eq!(
            *line,
            format!("{{\"queue\": \"{q}\", \"count\": 0, \"oldest_age_s\": null}}")
        );
    }
    // Table output names every queue and the events to replay.
    let r = ok(&["pending", &f]);
    for q in QUEUES {
        assert!(r.out.contains(q));
    }
    assert!(r.out.contains("events to dispatch again: 17 (seq 6..=22)"));
    assert!(
        r.out.contains("open Dataplane transactions: 3"),
        "{}",
        r.out
    );
    for (url, pod, state, version) in TRANSACTIONS {
        assert!(
            r.out.lines().any(|l| l.starts_with(url)
                && l.contains(pod)
                && l.contains(&format!(" {state} "))
                && l.contains(&format!(" {version} "))),
            "{url}: {}",
            r.out
        );
    }
    let r = run(&["pending", empty.to_str().unwrap()]);
    assert!(
        r.out.contains("open Dataplane transactions: 0"),
        "{}",
        r.out
    );
    assert!(!r.out.contains("TRANSACTION"), "{}", r.out);
}

#[test]
fn dump_filters_by_since_kind_and_limit() {
    let (_d, _p, f) = copy();
    let r = ok(&["dump", &f, "events", "--limit", "3"]);
    assert_eq!(r.out.lines().count(), 4, "{}", r.out);
    let r = run(&["--json", "dump", &f, "events", "--since", "20"]);
    let v = json_lines(&r.out);
    assert_eq!(
        v.iter()
            .map(|x| x["key"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        vec![20, 21, 22]
    );
    let r = run(&["dump", &f, "events", "--kind", "deployment.", "--json"]);
    let v = json_lines(&r.out);
    assert_eq!(
        v.len(),
        5,
        "four deployment events and deployment.retry.request"
    );
    assert!(
        v.iter()
            .all(|x| x["kind"].as_str().unwrap().starts_with("deployment."))
    );
    assert!(
        v[0]["record"]["DeploymentScheduled"]["render"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    let r = run(&[
        "dump",
        &f,
        "events",
        "--kind",
        "leader.became",
        "--limit",
        "1",
        "--json",
    ]);
    assert_eq!(json_lines(&r.out)[0]["key"], 1);
    // Queue names work as table names; every table dumps.
    let r = run(&["dump", &f, "status-parked", "--json"]);
    let v = json_lines(&r.out);
    assert_eq!(v.len(), 1);
    assert_eq!(v[0]["table"], "status_parked");
    assert_eq!(v[0]["key"], "haptic/demo-haproxycfg/haproxy-1");
    for t in haptic_journal::tables::ALL_TABLES {
        let r = run(&["dump", &f, t]);
        assert_eq!(r.code, 0, "{t}: {}", r.err);
        assert!(r.out.lines().count() >= 2, "{t}: {}", r.out);
    }
    let r = run(&["dump", &f, "meta", "--json"]);
    assert!(
        json_lines(&r.out)
            .iter()
            .any(|v| v["key"] == "schema_version" && v["value"] == 4)
    );
    let r = run(&["dump", &f, "no-such-table"]);
    assert_eq!(r.code, 2);
    assert!(r.err.contains("unknown table"));
}

#[test]
fn show_prints_one_event_with_its_work_items() {
    let (_d, _p, f) = copy();
    let r = ok(&["--json", "show", &f, "3"]);
    let v = &json_lines(&r.out)[0];
    assert_eq!(v["kind"], "validation.completed");
    assert_eq!(v["dispatched"], true);
    let queues: Vec<&str> = v["work_items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["queue"].as_str().unwrap())
        .collect();
    assert_eq!(queues, vec!["publish", "verdict"]);
    let r = ok(&["show", &f, "21"]);
    assert!(r.out.contains("leader.lost") && r.out.contains("replayed on restart"));
    let r = run(&["show", &f, "999"]);
    assert_eq!(r.code, 2);
    assert!(r.err.contains("no event at seq 999"));
}

fn ssl_blob(f: &str) -> String {
    let r = run(&["--json", "dump", f, "blobs"]);
    for v in json_lines(&r.out) {
        if let Some(files) = v["record"]["render"]["files"].as_array() {
            for file in files {
                if file["kind"] == "Ssl" {
                    return file["blob"].as_str().unwrap().to_owned();
                }
            }
        }
    }
    panic!("no ssl blob in the fixture: {}", r.out)
}

#[test]
fn blob_redacts_private_keys_unless_revealed() {
    let (_d, _p, f) = copy();
    let h = ssl_blob(&f);
    let r = ok(&["blob", &f, &h]);
    assert!(r.out.contains("-----BEGIN CERTIFICATE-----"));
    assert!(r.out.contains("-----BEGIN PRIVATE KEY-----"));
    assert!(!r.out.contains(KEY_LINE), "private key leaked: {}", r.out);
    assert!(!r.out.contains("AnotherSecretLine"));
    assert!(r.out.contains("redacted"));
    assert!(r.err.contains("--reveal-secrets"));
    let r = run(&["--json", "blob", &f, &h]);
    let v = &json_lines(&r.out)[0];
    assert_eq!(v["secret"], true);
    assert_eq!(v["redacted"], true);
    assert!(!r.out.contains(KEY_LINE));
    let r = ok(&["blob", &f, &h, "--reveal-secrets"]);
    assert!(r.out.contains(KEY_LINE));
    // A short prefix works; a render prints its manifest.
    let prefix = &h["sha256:".len().."sha256:".len() + 8];
    assert_eq!(run(&["blob", &f, prefix]).code, 0);
    let r = run(&["--json", "dump", &f, "events", "--limit", "2"]);
    let render = json_lines(&r.out)[1]["record"]["TemplateRendered"]["render"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = ok(&["blob", &f, &render]);
    assert!(r.out.contains("ssl/example.com.pem"));
    assert_eq!(run(&["blob", &f, "zz"]).code, 2);
}

#[path = "../../../journal/tests/journal/damage.rs"]
mod damage;
use damage::flip_marker;

#[test]
fn verify_is_clean_on_the_fixture_and_names_table_and_key_when_corrupt() {
    let (_d, p, f) = copy();
    let r = ok(&["verify", &f]);
    assert!(r.out.contains("0 problem(s)"));
    // seq 21 is LostLeadership { reason: "lease_lost" }.
    assert!(flip_marker(&p, b"lease_lost") >= 1);
    let r = run(&["verify", &f]);
    assert_eq!(r.code, 1, "{}\n{}", r.out, r.err);
    assert!(
        r.out
            .lines()
            .any(|l| l.starts_with("events") && l.contains("seq 21") && l.contains("crc32")),
        "{}",
        r.out
    );
    assert!(r.err.contains(&f) && r.err.contains("--journal-recovery=rebuild"));
    let r = run(&["--json", "verify", &f]);
    assert_eq!(r.code, 1);
    let v = json_lines(&r.out);
    assert_eq!(v[0]["table"], "events");
    assert_eq!(v[0]["key"], 21);
    assert!(v[0]["offset"].is_u64());
    // Reads that hit the record fail instead of skipping it; others still work.
    let r = run(&["dump", &f, "events"]);
    assert_eq!(r.code, 1);
    assert!(r.out.contains("CORRUPT"));
    assert_eq!(run(&["show", &f, "21"]).code, 1);
    assert_eq!(run(&["pending", &f]).code, 0);
}

#[test]
fn missing_file_exits_2_for_every_subcommand() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.redb");
    let m = missing.to_str().unwrap();
    for args in [
        vec!["summary", m],
        vec!["pending", m],
        vec!["dump", m, "events"],
        vec!["show", m, "1"],
        vec!["blob", m, "abcdef"],
        vec!["verify", m],
        vec!["stats", m],
        vec!["compact", m, "--write"],
        vec!["migrate", m, "--dry-run"],
    ] {
        let r = run(&args);
        assert_eq!(r.code, 2, "{args:?}: {}", r.err);
        assert!(r.err.contains(m), "{args:?} must name the file: {}", r.err);
        assert!(r.err.contains("does not exist"), "{}", r.err);
    }
    assert!(!missing.exists(), "a read must never create the file");
}

#[test]
fn usage_errors_exit_2() {
    let (_d, _p, f) = copy();
    assert_eq!(run(&[]).code, 2);
    assert_eq!(run(&["frobnicate", &f]).code, 2);
    assert_eq!(run(&["show", &f, "not-a-number"]).code, 2);
    assert_eq!(run(&["migrate", &f, "--dry-run", "--write"]).code, 2);
    let r = run(&["compact", &f]);
    assert_eq!(r.code, 2);
    assert!(r.err.contains("--write"));
    assert_eq!(run(&["--help"]).code, 0);
}

#[test]
fn stats_and_compact_and_migrate() {
    let (_d, p, f) = copy();
    let r = ok(&["stats", &f]);
    assert!(r.out.contains("file bytes") && r.out.contains("live bytes"));
    let r = run(&["--json", "stats", &f]);
    let v = json_lines(&r.out);
    // One line per table, then the file's line.
    let tables = haptic_journal::tables::ALL_TABLES.len();
    assert_eq!(v.len(), tables + 1);
    assert!(v[tables]["file_bytes"].as_u64().unwrap() >= v[tables]["live_bytes"].as_u64().unwrap());
    let before = std::fs::read(&p).unwrap();
    let r = ok(&["compact", &f, "--write"]);
    assert!(r.out.contains("compacted"));
    assert_eq!(run(&["verify", &f]).code, 0);
    let r = ok(&["migrate", &f]);
    assert!(r.out.contains("schema 4, this build: 4"), "{}", r.out);
    assert!(r.out.contains("up to date"), "{}", r.out);
    let r = ok(&["--json", "migrate", &f, "--dry-run"]);
    assert_eq!(json_lines(&r.out)[0]["found"], 4);
    assert_eq!(json_lines(&r.out)[0]["steps"], serde_json::json!([]));
    assert_eq!(run(&["migrate", &f, "--write"]).code, 0);
    assert_eq!(run(&["verify", &f]).code, 0);
    // Reads never write.
    let (_d2, p2, f2) = copy();
    let orig = std::fs::read(&p2).unwrap();
    for args in [
        vec!["summary", &f2],
        vec!["pending", &f2],
        vec!["verify", &f2],
        vec!["stats", &f2],
        vec!["migrate", &f2, "--dry-run"],
    ] {
        assert_eq!(run(&args).code, 0);
    }
    assert_eq!(
        std::fs::read(&p2).unwrap(),
        orig,
        "a read-only command wrote"
    );
    drop(before);
}

/// The schema-1 fixture: refused by the reads (exit 2, naming the fix); `migrate` plans
/// `v1_to_v2`, `--dry-run` migrates and verifies a copy (the file keeps schema 1), `--write`
/// migrates the file, after which every read works and the new tables are there, empty.
#[test]
fn migrate_takes_a_v1_journal_to_this_builds_schema() {
    let (_d, p, f) = copy_of(&fixture_v1());
    let orig = std::fs::read(&p).unwrap();
    for args in [vec!["summary", &f], vec!["pending", &f], vec!["verify", &f]] {
        let r = run(&args);
        assert_eq!(r.code, 2, "{args:?}: {}", r.out);
        assert!(
            r.err.contains("schema version 1")
                && r.err.contains("needs 4")
                && r.err
                    .contains(&format!("haptic-journalctl migrate --write {f}")),
            "{args:?}: names both versions and the fix: {}",
            r.err
        );
    }
    let r = ok(&["migrate", &f]);
    assert!(r.out.contains("schema 1, this build: 4"), "{}", r.out);
    assert!(
        r.out
            .contains("step v1_to_v2 (1 -> 2): create the empty pod-truth tables"),
        "{}",
        r.out
    );
    assert!(
        r.out
            .contains("step v3_to_v4 (3 -> 4): create the empty per-pod history table"),
        "{}",
        r.out
    );
    assert!(r.out.contains("plan only"), "{}", r.out);
    let r = ok(&["--json", "migrate", &f, "--dry-run"]);
    let v = &json_lines(&r.out)[0];
    assert_eq!(
        (v["found"].as_u64(), v["target"].as_u64()),
        (Some(1), Some(4))
    );
    assert_eq!(v["steps"][0]["step"], "v1_to_v2");
    assert_eq!(v["result"], "dry run: migrated a copy");
    assert_eq!(std::fs::read(&p).unwrap(), orig, "--dry-run wrote the file");
    let r = ok(&["migrate", &f, "--write"]);
    assert!(r.out.contains("migrated"), "{}", r.out);
    let r = ok(&["verify", &f]);
    assert!(r.out.contains("0 problem(s)"));
    let r = ok(&["--json", "summary", &f]);
    let v = &json_lines(&r.out)[0];
    assert_eq!(v["schema_version"], 4);
    assert_eq!(v["last_seq"], 22, "every event kept");
    for t in ["endpoint_files", "endpoint_transaction", "pod_history"] {
        let r = run(&["dump", &f, t, "--json"]);
        assert_eq!(r.code, 0, "{t}: {}", r.err);
        assert!(
            r.out.is_empty(),
            "{t} is empty after the migration: {}",
            r.out
        );
    }
    let r = run(&["pending", &f]);
    assert!(
        r.out.contains("open Dataplane transactions: 0"),
        "{}",
        r.out
    );
    let r = ok(&["migrate", &f, "--write"]);
    assert!(r.out.contains("up to date"), "idempotent: {}", r.out);
}

/// `dump` of the schema-2 tables: one record per endpoint, the stored files with both hashes
/// (`loaded` null when not known to be loaded), a transaction in each state; `--kind` knows their
/// kinds.
#[test]
fn dump_shows_the_pod_truth_tables() {
    let (_d, _p, f) = copy();
    let r = ok(&["--json", "dump", &f, "endpoint_files"]);
    let v = json_lines(&r.out);
    assert_eq!(v.len(), 2, "{}", r.out);
    assert_eq!(v[0]["kind"], "state.endpoint-files");
    assert_eq!(v[0]["key"], "http://10.0.0.7:5555");
    let files = v[0]["record"]["files"].as_array().unwrap();
    assert_eq!(files.len(), 4);
    let stores: Vec<&str> = files.iter().map(|x| x["store"].as_str().unwrap()).collect();
    assert_eq!(stores, vec!["SslCertificate", "CaFile", "General", "Map"]);
    for x in files {
        assert!(x["written"].as_str().unwrap().starts_with("sha256:"), "{x}");
    }
    assert_eq!(files[0]["loaded"], files[0]["written"], "loaded");
    assert!(files[2]["loaded"].as_str().unwrap().starts_with("sha256:"));
    assert_ne!(
        files[2]["loaded"], files[2]["written"],
        "loaded an older content"
    );
    assert!(files[3]["loaded"].is_null(), "not known to be loaded");
    let r = ok(&[
        "--json",
        "dump",
        &f,
        "endpoint_transaction",
        "--kind",
        "state.endpoint-transaction",
    ]);
    let v = json_lines(&r.out);
    let states: Vec<&str> = v
        .iter()
        .map(|x| x["record"]["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, vec!["Open", "Committing", "Unknown"]);
    assert_eq!(v[1]["record"]["version"], 13);
    let r = ok(&["dump", &f, "endpoint_transaction"]);
    assert_eq!(r.out.lines().count(), 4, "{}", r.out);
    assert!(
        r.out
            .lines()
            .skip(1)
            .all(|l| l.contains("state.endpoint-transaction")),
        "{}",
        r.out
    );
    let r = run(&[
        "dump",
        &f,
        "endpoint_transaction",
        "--kind",
        "state.endpoint-files",
    ]);
    assert_eq!(r.code, 2, "{}", r.out);
    assert!(r.err.contains("state.endpoint-transaction"), "{}", r.err);
}

/// `dump` of the schema-4 history: one record per kept sync, keyed `<ns>/<pod>#<seq>`, in key
/// order, with the render as `sha256:...`, the mode and the result; `--kind` knows the kind.
#[test]
fn dump_shows_the_pod_history() {
    let (_d, _p, f) = copy();
    let r = ok(&["--json", "dump", &f, "pod_history", "--kind", "history."]);
    let v = json_lines(&r.out);
    let keys: Vec<&str> = v.iter().map(|x| x["key"].as_str().unwrap()).collect();
    assert_eq!(
        keys,
        vec![
            "haptic/haproxy-0#2",
            "haptic/haproxy-0#3",
            "haptic/haproxy-0#4",
            "haptic/haproxy-1#1",
            "haptic/haproxy-1#2"
        ],
        "{}",
        r.out
    );
    assert_eq!(v[0]["kind"], "history.sync");
    assert!(
        v[0]["record"]["render"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    assert_eq!(v[0]["record"]["mode"], "RawInitial");
    assert!(v[2]["record"]["mode"].is_null(), "failed before planning");
    assert_eq!(
        v[2]["record"]["result"]["Failed"]["message"],
        "connection refused"
    );
    let r = ok(&["dump", &f, "pod_history"]);
    assert_eq!(r.out.lines().count(), 6, "{}", r.out);
    let r = run(&["dump", &f, "pod_history", "--kind", "state."]);
    assert_eq!(r.code, 2, "{}", r.out);
    assert!(r.err.contains("history.sync"), "{}", r.err);
}

/// `history`: one pod's syncs in order, a gap where its leader terms skip (terms this replica
/// did not lead), the syncs of one render across pods, a time bound, and bad input named
/// (exit 2).
#[test]
fn history_lists_syncs_with_the_terms_this_replica_did_not_lead_as_gaps() {
    let (_d, p, f) = copy();
    // One more sync of haproxy-0, in term 6 (the fixture's last is term 3).
    let render = {
        let j = Journal::open(&JournalOptions::new(&p)).unwrap();
        let pod = haptic_journal::PodRef {
            namespace: "haptic".into(),
            name: "haproxy-0".into(),
        };
        let mut last = j
            .pod_history(
                &pod,
                haptic_journal::UnixMillis(0),
                haptic_journal::UnixMillis(u64::MAX),
            )
            .unwrap()
            .pop()
            .unwrap();
        last.term = haptic_journal::Term(6);
        last.started_at = haptic_journal::UnixMillis(last.ended_at.0 + 60_000);
        last.ended_at = haptic_journal::UnixMillis(last.started_at.0 + 250);
        last.result = haptic_journal::SyncResult::Applied;
        let mut b = haptic_journal::Batch::new();
        b.append_history(last.clone(), haptic_journal::HistoryRetention::default());
        j.accept(b).unwrap();
        last.render
    };
    let r = ok(&["--json", "history", &f, "--pod", "haptic/haproxy-0"]);
    let v = json_lines(&r.out);
    let terms: Vec<Option<u64>> = v.iter().map(|x| x["term"].as_u64()).collect();
    assert_eq!(
        terms,
        vec![Some(2), Some(3), Some(3), None, Some(6)],
        "{}",
        r.out
    );
    assert_eq!(v[3]["gap"]["terms"], serde_json::json!([4, 5]), "{}", r.out);
    assert_eq!(v[3]["gap"]["after"], v[2]["ended_at"]);
    assert_eq!(v[3]["gap"]["before"], v[4]["started_at"]);
    assert_eq!(v[2]["result"], "failed");
    assert_eq!(v[2]["message"], "connection refused");
    assert_eq!(v[4]["result"], "applied");
    let r = ok(&["history", &f, "--pod", "haptic/haproxy-0"]);
    assert!(r.out.contains("gap: term 4..5"), "{}", r.out);

    // Which pods ran the render, and when: both pods, oldest first.
    let r = ok(&["--json", "history", &f, "--render", &render.to_string()]);
    let v = json_lines(&r.out);
    let pods: Vec<&str> = v.iter().filter_map(|x| x["pod"].as_str()).collect();
    assert!(
        pods.contains(&"haptic/haproxy-0") && pods.contains(&"haptic/haproxy-1"),
        "{}",
        r.out
    );
    assert!(
        v.iter()
            .all(|x| x.get("gap").is_some() || x["render"] == render.to_string())
    );

    // The fleet's timeline, bounded after its last sync: nothing.
    let r = ok(&["--json", "history", &f, "--since", "2100-01-01T00:00:00Z"]);
    assert_eq!(r.out.trim(), "", "{}", r.out);
    for (args, names) in [
        (vec!["history", &f, "--pod", "haproxy-0"], "NAMESPACE/NAME"),
        (vec!["history", &f, "--render", "sha256:12"], "64 hex"),
        (vec!["history", &f, "--until", "tomorrow"], "RFC 3339"),
    ] {
        let r = run(&args);
        assert_eq!(r.code, 2, "{args:?}: {}", r.out);
        assert!(r.err.contains(names), "{args:?}: {}", r.err);
    }
}

#[test]
fn schema_too_new_exits_2_naming_both_versions() {
    let (_d, p, f) = copy();
    {
        let db = redb::Database::open(&p).unwrap();
        let txn = db.begin_write().unwrap();
        haptic_journal::write_schema_version(&txn, 7).unwrap();
        txn.commit().unwrap();
    }
    for args in [vec!["summary", &f], vec!["migrate", &f, "--write"]] {
        let r = run(&args);
        assert_eq!(r.code, 2, "{args:?}");
        assert!(
            r.err.contains("schema version 7") && r.err.contains(&f) && r.err.contains("newer"),
            "{}",
            r.err
        );
    }
}

/// Holder mode: opens the journal read-write in the given mode, prints `ready`, waits for EOF.
#[test]
fn holder() {
    let Ok(spec) = std::env::var(HOLDER_ENV) else {
        return;
    };
    let (mode, path) = spec.split_once(':').unwrap();
    let c = if mode == "single-writer" {
        Concurrency::SingleWriter
    } else {
        Concurrency::Exclusive
    };
    let j = Journal::open(&JournalOptions::new(path).concurrency(c)).unwrap();
    // One commit after open: a live reader must see it (the fixture ends at seq 22).
    j.accept_events(vec![haptic_journal::Event::DriftPreventionTriggered {
        correlation: haptic_journal::Correlation::new("holder"),
        time_since_last_deployment_ms: 1,
    }])
    .unwrap();
    println!("holder-ready");
    let mut sink = String::new();
    let _ = std::io::stdin().read_to_string(&mut sink);
    drop(j);
}

type Holder = (
    std::process::Child,
    std::io::Lines<BufReader<std::process::ChildStdout>>,
);

fn hold(mode: &str, path: &Path) -> Holder {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "holder", "--nocapture", "--test-threads", "1"])
        .env(HOLDER_ENV, format!("{mode}:{}", path.display()))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    loop {
        let l = lines.next().expect("holder exited early").unwrap();
        if l.contains("holder-ready") {
            break;
        }
    }
    (child, lines)
}

/// Closes the holder's stdin and waits; its stdout stays open until it exited.
fn release((mut child, lines): Holder) {
    drop(child.stdin.take());
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(child.wait().unwrap().success(), "holder failed: {rest:?}");
}

#[test]
fn a_journal_held_exclusively_is_in_use_but_single_writer_is_readable() {
    let (_d, p, f) = copy();
    let h = hold("exclusive", &p);
    let r = run(&["summary", &f]);
    let r2 = run(&["verify", &f]);
    release(h);
    assert_eq!(r.code, 2, "{}", r.out);
    assert!(r.err.contains("in use") && r.err.contains(&f), "{}", r.err);
    assert!(r.err.contains("single-writer"), "the fix: {}", r.err);
    assert_eq!(r2.code, 2);

    let h = hold("single-writer", &p);
    let r = run(&["summary", &f]);
    let live = run(&["--json", "summary", &f]);
    let r2 = run(&["pending", "--json", &f]);
    let r3 = run(&["verify", &f]);
    let r4 = run(&["compact", &f, "--write"]);
    release(h);
    assert_eq!(r.code, 0, "{}", r.err);
    assert!(r.out.contains("term            3"));
    assert_eq!(
        json_lines(&live.out)[0]["last_seq"],
        24,
        "the live holder's commit is visible (the exclusive holder committed seq 23)"
    );
    assert_eq!(r2.code, 0, "{}", r2.err);
    assert_eq!(r2.out.lines().count(), QUEUES.len() + TRANSACTIONS.len());
    assert_eq!(r3.code, 0, "{}", r3.err);
    assert_eq!(
        r4.code, 2,
        "a writer must not open a live journal: {}",
        r4.out
    );
    assert!(r4.err.contains("in use"));
}

/// A copy of the fixture with one 4 KiB page zeroed or one byte flipped.
fn damaged_copy(zero_page: Option<u64>, flip: Option<usize>) -> (tempfile::TempDir, String) {
    let (d, p, f) = copy();
    let mut b = std::fs::read(&p).unwrap();
    if let Some(n) = zero_page {
        let at = usize::try_from(n * 4096).unwrap();
        b[at..at + 4096].fill(0);
    }
    if let Some(o) = flip {
        b[o] ^= 0xff;
    }
    std::fs::write(&p, b).unwrap();
    (d, f)
}

#[test]
fn damaged_pages_exit_1_naming_file_table_and_fix_never_panic() {
    // Pages in use by the committed fixture, v4.redb (zeroing a free page is no damage, so each
    // listed page must be in use: the assertion below fails otherwise; `pending` reads only the
    // queues and the transactions).
    let cases = [3u64, 5, 8, 11, 12, 13, 16, 20]
        .map(|n| (Some(n), None))
        .into_iter()
        // Byte 0 of pages 1 and 5, and byte 37 of leaf pages: inside the entry offsets, so
        // redb's page walk fails (byte 37 of page 3, 12325, is inside a record there: a CRC
        // error, tested elsewhere).
        .chain([4096usize, 20480, 16421, 28709, 32805, 45093, 49189].map(|o| (None, Some(o))));
    for (page, flip) in cases {
        let (_d, f) = damaged_copy(page, flip);
        for cmd in ["verify", "summary", "pending", "stats"] {
            let r = run(&[cmd, &f]);
            let what = format!("{cmd} with page {page:?} zeroed / byte {flip:?} flipped");
            // `pending` reads only the queues: damage elsewhere does not concern it.
            if cmd == "pending" && r.code == 0 {
                continue;
            }
            assert_eq!(r.code, 1, "{what}: {}", r.err);
            assert!(!r.err.contains("panicked"), "{what}: {}", r.err);
            assert!(r.err.contains(&f), "{what}: names the file: {}", r.err);
            assert!(
                r.err.contains("--journal-recovery=rebuild"),
                "{what}: the fix: {}",
                r.err
            );
        }
    }
    // The table is named when the walk knows it.
    let (_d, f) = damaged_copy(Some(12), None);
    let r = run(&["verify", &f]);
    assert!(r.err.contains("table events"), "{}", r.err);
}

#[test]
fn a_journal_left_by_a_killed_process_is_read_from_a_repaired_copy() {
    let (_d, p, f) = copy();
    let (mut child, _lines) = hold("exclusive", &p);
    child.kill().unwrap(); // SIGKILL: no clean close
    child.wait().unwrap();
    let orig = std::fs::read(&p).unwrap();
    let cmds: Vec<Vec<&str>> = vec![
        vec!["summary", &f],
        vec!["pending", &f],
        vec!["verify", &f],
        vec!["stats", &f],
        vec!["dump", &f, "events"],
        vec!["show", &f, "3"],
        vec!["migrate", &f],
        vec!["migrate", &f, "--dry-run"],
    ];
    let blobs = run(&["--json", "dump", &f, "blobs"]);
    let blob = json_lines(&blobs.out)[0]["key"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut cmds = cmds;
    cmds.push(vec!["blob", &f, &blob]);
    for args in &cmds {
        let r = run(args);
        assert_eq!(r.code, 0, "{args:?}: {}", r.err);
        assert!(
            r.err.contains("not closed cleanly") && r.err.contains("original is untouched"),
            "{args:?}: {}",
            r.err
        );
    }
    let r = run(&["--json", "summary", &f]);
    assert_eq!(
        json_lines(&r.out)[0]["last_seq"],
        23,
        "the killed holder's durable commit is in the copy"
    );
    assert_eq!(
        std::fs::read(&p).unwrap(),
        orig,
        "a read wrote the original"
    );
    // Writes work on the original (its read-write open repairs it); afterwards it is clean.
    assert_eq!(run(&["compact", &f, "--write"]).code, 0);
    let r = ok(&["summary", &f]);
    assert!(!r.err.contains("not closed cleanly"), "{}", r.err);
}

#[test]
fn a_truncated_journal_is_corruption() {
    let (_d, p, f) = copy();
    let file = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
    file.set_len(50_000).unwrap();
    for cmd in ["summary", "verify"] {
        let r = run(&[cmd, &f]);
        assert_eq!(r.code, 1, "{cmd}: {}", r.err);
        assert!(
            r.err.contains(&f) && r.err.contains("--journal-recovery=rebuild"),
            "{}",
            r.err
        );
    }
}

/// Runs the tool, killing it after 10 s (a hang fails the test instead of blocking it).
fn run_bounded(args: &[&str]) -> Run {
    let mut c = Command::new(BIN)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    while c.try_wait().unwrap().is_none() {
        if t0.elapsed() > std::time::Duration::from_secs(10) {
            c.kill().unwrap();
            c.wait().unwrap();
            panic!("haptic-journalctl {args:?} hangs");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let o = c.wait_with_output().unwrap();
    Run {
        code: o.status.code().unwrap_or(-1),
        out: String::from_utf8_lossy(&o.stdout).into_owned(),
        err: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

#[test]
fn non_regular_files_and_symlink_loops_are_refused_up_front() {
    let d = tempfile::tempdir().unwrap();
    let fifo = d.path().join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let fifo = fifo.display().to_string();
    for args in [
        vec!["summary", fifo.as_str()],
        vec!["verify", fifo.as_str()],
        vec!["compact", fifo.as_str(), "--write"],
        vec!["migrate", fifo.as_str()],
    ] {
        let r = run_bounded(&args);
        assert_eq!(r.code, 2, "{args:?}: {}", r.err);
        assert!(r.err.contains("FIFO") && r.err.contains(&fifo), "{}", r.err);
    }
    let dir = d.path().display().to_string();
    let r = run_bounded(&["summary", &dir]);
    assert_eq!(r.code, 2);
    assert!(r.err.contains("directory"), "{}", r.err);
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    std::os::unix::fs::symlink(&b, &a).unwrap();
    std::os::unix::fs::symlink(&a, &b).unwrap();
    let r = run_bounded(&["summary", &a.display().to_string()]);
    assert_eq!(r.code, 2);
    assert!(
        r.err.contains("symbolic link loop") && !r.err.contains("does not exist"),
        "{}",
        r.err
    );
}

#[test]
fn an_unreadable_journal_is_a_permissions_problem() {
    use std::os::unix::fs::PermissionsExt as _;
    use std::os::unix::process::CommandExt as _;
    let (d, p, f) = copy();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o000)).unwrap();
    let mut bin = PathBuf::from(BIN);
    let tools = tempfile::tempdir().unwrap();
    if nix::unistd::geteuid().is_root() {
        // root ignores file modes: run the tool as nobody. Nobody must reach the binary and
        // the journal's directory wherever the checkout lives (a `mktemp -d` is 0700): a copy of
        // the binary and the directory are opened up, the journal itself stays 0000.
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(tools.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        bin = tools.path().join("haptic-journalctl");
        std::fs::copy(BIN, &bin).unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let mut c = Command::new(&bin);
    c.args(["summary", &f]);
    if nix::unistd::geteuid().is_root() {
        c.uid(65534).gid(65534);
    }
    let o = c.output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("permission") && err.contains(&f) && !err.contains("haptic journal"),
        "{err}"
    );
}

#[test]
fn dump_filters_that_do_not_apply_are_usage_errors() {
    let (_d, _p, f) = copy();
    let r = run(&["dump", &f, "events", "--kind", "no.such.kind"]);
    assert_eq!(r.code, 2, "{}", r.out);
    assert!(
        r.err.contains("no.such.kind") && r.err.contains("deployment.completed"),
        "lists the known kinds: {}",
        r.err
    );
    for args in [
        vec!["dump", &f, "blobs", "--since", "3"],
        vec!["dump", &f, "meta", "--since", "3"],
        vec!["dump", &f, "meta", "--kind", "x"],
        vec!["dump", &f, "blob_refs", "--kind", "blob.file"],
        vec!["dump", &f, "status-pending", "--since", "1"],
        vec!["dump", &f, "publish", "--kind", "work.verdict"],
    ] {
        assert_eq!(run(&args).code, 2, "{args:?}");
    }
    for args in [
        vec!["dump", &f, "events", "--kind", "deployment."],
        vec![
            "dump",
            &f,
            "publish",
            "--since",
            "1",
            "--kind",
            "work.publish",
        ],
        vec!["dump", &f, "blobs", "--kind", "blob.render"],
    ] {
        let r = run(&args);
        assert_eq!(r.code, 0, "{args:?}: {}", r.err);
    }
}

#[test]
fn stats_labels_page_slack_as_a_share_of_table_pages() {
    let (_d, _p, f) = copy();
    let r = ok(&["stats", &f]);
    assert!(!r.out.contains("% of stored"), "{}", r.out);
    let v = json_lines(&run(&["--json", "stats", &f]).out);
    let t = &v[v.len() - 1];
    let n = |k: &str| t[k].as_u64().unwrap();
    assert_eq!(
        n("table_page_bytes"),
        n("stored_bytes") + n("metadata_bytes") + n("fragmented_bytes")
    );
    assert_eq!(n("table_page_bytes") % 4096, 0, "whole pages");
    assert_eq!(n("other_bytes"), n("file_bytes") - n("table_page_bytes"));
    let pct = r
        .out
        .lines()
        .find(|l| l.contains("page slack"))
        .and_then(|l| l.split('(').nth(1))
        .and_then(|s| s.split('%').next())
        .and_then(|s| s.parse::<f64>().ok())
        .unwrap();
    assert!(pct <= 100.0, "{}", r.out);
}
