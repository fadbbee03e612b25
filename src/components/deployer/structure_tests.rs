//! Table tests of the structural comparison and the mode decision over the shared corpus
//! (`../shared/corpus/haproxy/`) and renders of our own: `corpus` (the whole corpus), `modes`
//! (which sync mode a change takes), `order` (order where HAProxy cares), `quoting` (words as
//! HAProxy reads them, texts as the Dataplane API must write them).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod corpus;
mod modes;
mod order;
mod quoting;
mod spec_fields;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use haptic_journal::{Checksum, ConfigVersion};

use super::decide::RunningPod;
use super::structure::tokenize;
use crate::core::render::JournaledRender;
use crate::dataplane::RawConfiguration;

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/corpus/haproxy");

fn corpus_file(rel: &str) -> String {
    std::fs::read_to_string(Path::new(CORPUS).join(rel)).unwrap()
}

/// Every `.cfg` file under the corpus, at any depth, sorted.
fn all_corpus_configs() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|e| e == "cfg") {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(Path::new(CORPUS), &mut out);
    out.sort();
    assert!(out.len() >= 100, "corpus configs found: {}", out.len());
    out
}

fn render(config: &str) -> JournaledRender {
    JournaledRender {
        checksum: Checksum::of(config.as_bytes()),
        config_blob: Checksum::of(config.as_bytes()),
        config: config.into(),
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

/// The configuration rewritten the way the Dataplane API lays out a file after any write
/// (config-parser's writer): two-space indentation, a blank line before each section, sections
/// grouped by kind and sorted by name, keywords grouped (here in reverse order of appearance,
/// except `default-server`, first, as config-parser writes it before `server` and
/// `server-template`), each group in file order, comments dropped, timeouts in seconds, server
/// and `default-server` parameters in another order, `defaults` named `unnamed_defaults_1` and
/// proxies naming it with `from`.
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
        let fixed = match w[0].as_str() {
            "server" => 3,
            "server-template" => 4,
            "default-server" => 1,
            _ => w.len(),
        };
        if w.len() > fixed {
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
        groups.sort_by_key(|g| g.0 != "default-server");
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

/// Words written back, quoted where HAProxy needs it (the way a person would, not the way the
/// model does: the comparison must not depend on one spelling).
fn quote_all(words: &[String]) -> String {
    words
        .iter()
        .map(|w| {
            if w.is_empty() || w.contains([' ', '\t', '\r', '\n', '#', '"', '\'', '\\']) {
                let escaped = w
                    .replace('\\', "\\\\")
                    .replace('"', "\\\"")
                    .replace('$', "\\$")
                    .replace('\r', "\\r")
                    .replace('\n', "\\n");
                format!("\"{escaped}\"")
            } else {
                w.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}
