//! Equality as HAProxy runs a configuration: line families and the order rules (module doc of
//! `structure`).

use std::collections::BTreeMap;

use super::model::model_line;
use super::parse::{Line, ParsedConfig, Section, SectionKey, time_ms};
use super::server::default_server_model;

/// The family of a line (module doc of `structure`).
pub(super) fn family(words: &[String]) -> String {
    let w0 = words[0].as_str();
    let w1 = words.get(1).map_or("", String::as_str);
    match w0 {
        "server" | "server-template" | "timeout" | "option" | "tcp-request" | "tcp-response"
        | "stats" | "capture" | "errorfile" | "user" | "group" | "nameserver" | "peer"
        | "mailer" | "monitor" | "compression" => {
            format!("{w0} {w1}")
        }
        "no" if w1 == "option" => format!("option {}", words.get(2).map_or("", String::as_str)),
        // `http-check`, `tcp-check`, `stick`, `default-server`, rules: one ordered family each.
        _ => w0.to_owned(),
    }
}

/// Families whose lines are compared as a set.
fn unordered(family: &str) -> bool {
    family == "bind"
}

/// A line's normalised form: its model when it has one, else its words with time values of
/// `timeout` normalised.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Norm {
    Model(String),
    Words(Vec<String>),
}

pub(super) fn normalize(section_kind: &str, line: &Line) -> Norm {
    let model = if line.words[0] == "default-server" {
        default_server_model(&line.words).map(Some)
    } else {
        model_line(section_kind, &line.words)
    };
    match model {
        Ok(Some(m)) => Norm::Model(m.to_string()),
        _ => {
            let mut w = line.words.clone();
            if w[0] == "timeout"
                && w.len() == 3
                && let Some(ms) = time_ms(&w[2])
            {
                w[2] = format!("{ms}ms");
            }
            if w[0] == "no" && w.get(1).is_some_and(|s| s == "option") {
                // `no option x` keeps its own value (differs from `option x`).
                w.insert(0, "!".into());
            }
            Norm::Words(w)
        }
    }
}

/// Normalised lines by family, each family in the order the comparison keeps.
pub(super) type Groups = BTreeMap<String, Vec<Norm>>;

/// The lines of a section by family. A `server` or `server-template` line's family carries the
/// number of `default-server` lines before it in the section (they apply to it).
pub(super) fn groups<'a>(section_kind: &str, lines: impl IntoIterator<Item = &'a Line>) -> Groups {
    let mut out = Groups::new();
    let mut default_servers = 0usize;
    for l in lines {
        let mut f = family(&l.words);
        match l.words[0].as_str() {
            "default-server" => default_servers += 1,
            "server" | "server-template" => {
                f = format!("{f} after default-server #{default_servers}");
            }
            _ => {}
        }
        out.entry(f).or_default().push(normalize(section_kind, l));
    }
    for (f, v) in &mut out {
        if unordered(f) {
            v.sort();
        }
    }
    out
}

pub(super) fn sections_equal(key: &SectionKey, a: &Section, b: &Section) -> bool {
    a.from == b.from
        && a.header == b.header
        && groups(&key.kind, &a.lines) == groups(&key.kind, &b.lines)
}

/// True when `a` and `b` are the same configuration to HAProxy as far as the structural
/// comparison can tell (module doc of `structure`). A false "different" is safe (a push); a
/// false "equal" is not, so everything not known to be layout is kept.
#[must_use]
pub fn equal(a: &ParsedConfig, b: &ParsedConfig) -> bool {
    if a.sections.len() != b.sections.len() {
        return false;
    }
    let pre = |p: &ParsedConfig| {
        p.preamble
            .iter()
            .map(|l| l.words.clone())
            .collect::<Vec<_>>()
    };
    pre(a) == pre(b)
        && a.sections.iter().all(|(k, sa)| {
            b.sections
                .get(k)
                .is_some_and(|sb| sections_equal(k, sa, sb))
        })
}

/// The first section of `config` where a `default-server` line follows a `server` or
/// `server-template` line, described with the fix (`backend be_app: default-server after
/// server web-1 ...`); `None` when every `default-server` line comes before the servers.
///
/// Such a section cannot be stored on a pod through the Dataplane API as written: the API writes
/// every section in config-parser's fixed keyword sequence (`default-server` before `server`
/// and `server-template`), after an object write and after a raw push alike (client-native
/// `PostRawConfiguration` parses the text and saves it through the same writer), and HAProxy
/// then applies the line to the servers that stood before it. [`super::diff`] answers
/// [`super::ConfigDiff::Unmodelled`] for every difference while either side has one.
#[must_use]
pub fn default_server_after_server(config: &ParsedConfig) -> Option<String> {
    config.sections.iter().find_map(|(key, s)| {
        let mut first_server: Option<(&str, &str)> = None;
        for l in &s.lines {
            match l.words[0].as_str() {
                kw @ ("server" | "server-template") if first_server.is_none() => {
                    first_server = Some((kw, l.words.get(1).map_or("", String::as_str)));
                }
                "default-server" => {
                    if let Some((kw, server)) = first_server {
                        return Some(format!(
                            "{key}: default-server after {kw} {server} (the Dataplane API writes \
                             default-server lines before the servers, which changes the servers \
                             they apply to; put the default-server line before the first server, \
                             or its parameters on the servers after it)"
                        ));
                    }
                }
                _ => {}
            }
        }
        None
    })
}
