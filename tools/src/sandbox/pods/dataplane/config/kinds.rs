//! The object endpoints as a table of kinds: each collection the stand-in serves, its keyword,
//! its spec model, where it lives, how it is addressed, and how its body becomes a line and a
//! line its model. One handler shape (`mod.rs`) serves them all.

use serde_json::{Map, Value, json};

use super::body::{Body, Refusal};
use super::params::{self, BIND_PARAMS, SERVER_PARAMS};
use super::rules::{cond_model, rule_line, rule_model};
use super::text::Line;

/// A section collection: `configuration/<collection>[/<name>]`.
#[derive(Debug)]
pub(crate) struct SectionKind {
    /// Path segment (`backends`).
    pub(crate) collection: &'static str,
    /// Section keyword (`backend`).
    pub(crate) keyword: &'static str,
    /// Spec model of its body (`backend`).
    pub(crate) model: &'static str,
    /// One section without a name, at `configuration/<collection>` (`global`).
    pub(crate) singleton: bool,
}

/// The sections served.
pub(crate) const SECTION_KINDS: &[SectionKind] = &[
    SectionKind::named("backends", "backend"),
    SectionKind::named("frontends", "frontend"),
    SectionKind::named("defaults", "defaults"),
    SectionKind {
        singleton: true,
        ..SectionKind::named("global", "global")
    },
];

impl SectionKind {
    /// The named sections at `collection`, their keyword also their spec model.
    const fn named(collection: &'static str, keyword: &'static str) -> SectionKind {
        SectionKind {
            collection,
            keyword,
            model: keyword,
            singleton: false,
        }
    }
}

/// The section kind served at `collection`.
pub(crate) fn section_kind(collection: &str) -> Option<&'static SectionKind> {
    SECTION_KINDS.iter().find(|k| k.collection == collection)
}

/// Line → model (`strict`: `None` when a word is not understood).
pub(crate) type ToModel = fn(&[String], bool) -> Option<Map<String, Value>>;

/// A child collection: `configuration/<sections>/<parent>/<collection>[/<key>]`.
#[derive(Debug)]
pub(crate) struct ChildKind {
    /// Path segment (`servers`).
    pub(crate) collection: &'static str,
    /// Keyword of its lines (`server`).
    pub(crate) keyword: &'static str,
    /// Spec model of its body.
    pub(crate) model: &'static str,
    /// Section keywords it lives in.
    pub(crate) parents: &'static [&'static str],
    /// Addressed by position among its kind's lines (`acls/0`), else by name.
    pub(crate) by_index: bool,
    /// Body → line.
    pub(crate) to_line: fn(&Body) -> Result<Line, Refusal>,
    /// Line → model.
    pub(crate) to_model: ToModel,
}

/// The child collections served.
pub(crate) const CHILD_KINDS: &[ChildKind] = &[
    ChildKind {
        collection: "servers",
        keyword: "server",
        model: "server",
        parents: &["backend"],
        by_index: false,
        to_line: server_line,
        to_model: server_model,
    },
    ChildKind {
        collection: "server_templates",
        keyword: "server-template",
        model: "server_template",
        parents: &["backend"],
        by_index: false,
        to_line: template_line,
        to_model: template_model,
    },
    ChildKind {
        collection: "binds",
        keyword: "bind",
        model: "bind",
        parents: &["frontend"],
        by_index: false,
        to_line: bind_line,
        to_model: bind_model,
    },
    ChildKind {
        collection: "acls",
        keyword: "acl",
        model: "acl",
        parents: &["frontend", "backend", "defaults"],
        by_index: true,
        to_line: acl_line,
        to_model: acl_model,
    },
    ChildKind {
        collection: "backend_switching_rules",
        keyword: "use_backend",
        model: "backend_switching_rule",
        parents: &["frontend"],
        by_index: true,
        to_line: switching_line,
        to_model: switching_model,
    },
    ChildKind::http_rules(
        "http_request_rules",
        "http-request",
        "http_request_rule",
        |b| rule_line("http-request", b),
    ),
    ChildKind::http_rules(
        "http_response_rules",
        "http-response",
        "http_response_rule",
        |b| rule_line("http-response", b),
    ),
];

/// The child kind served at `collection` under a `parent` section.
pub(crate) fn child_kind(parent: &str, collection: &str) -> Option<&'static ChildKind> {
    CHILD_KINDS
        .iter()
        .find(|k| k.collection == collection && k.parents.contains(&parent))
}

impl ChildKind {
    /// The `http-request`/`http-response` rules of frontends, backends and defaults, addressed
    /// by position (`keyword`'s lines written by `to_line`).
    const fn http_rules(
        collection: &'static str,
        keyword: &'static str,
        model: &'static str,
        to_line: fn(&Body) -> Result<Line, Refusal>,
    ) -> ChildKind {
        ChildKind {
            collection,
            keyword,
            model,
            parents: &["frontend", "backend", "defaults"],
            by_index: true,
            to_line,
            to_model: rule_model,
        }
    }

    /// The key of one of its lines: its name (`bind`: its `name` parameter, else
    /// `address:port`).
    pub(crate) fn key_of(&self, words: &[String]) -> String {
        match self.keyword {
            "bind" => words.windows(2).find(|p| p[0] == "name").map_or_else(
                || words.get(1).cloned().unwrap_or_default(),
                |p| p[1].clone(),
            ),
            _ => words.get(1).cloned().unwrap_or_default(),
        }
    }

    /// The model of a line for a `GET` (what can be modelled of it).
    pub(crate) fn model_of(&self, words: &[String]) -> Value {
        (self.to_model)(words, false).map_or_else(|| json!({}), Value::Object)
    }
}

/// `host:port`, IPv6 in brackets.
pub(crate) fn address(addr: &str, port: Option<i64>) -> String {
    let a = if addr.contains(':') {
        format!("[{addr}]")
    } else {
        addr.to_owned()
    };
    match port {
        Some(p) => format!("{a}:{p}"),
        None => a,
    }
}

/// `host[:port]` → (host, port).
fn split_address(a: &str) -> (String, Option<i64>) {
    if a.starts_with('/') || a.contains('@') {
        return (a.to_owned(), None);
    }
    match a.rsplit_once(':') {
        Some((h, p)) if p.parse::<i64>().is_ok() => {
            (h.trim_matches(['[', ']']).to_owned(), p.parse().ok())
        }
        _ => (a.trim_matches(['[', ']']).to_owned(), None),
    }
}

/// A `server` or `server-template` line: the keyword, the body's `names` fields in order, the
/// address from `address_field` and `port`, then the server parameters.
fn addressed_line(
    b: &Body,
    keyword: &str,
    names: &[&str],
    address_field: &str,
) -> Result<Line, Refusal> {
    let mut w = vec![keyword.to_owned()];
    for name in names {
        w.push(b.req_str(name)?.to_owned());
    }
    w.push(address(b.req_str(address_field)?, b.int("port")));
    w.extend(params::write(b, SERVER_PARAMS));
    b.finish()?;
    Ok(w)
}

/// The model of an [`addressed_line`].
fn addressed_model(
    words: &[String],
    strict: bool,
    names: &[&str],
    address_field: &str,
) -> Option<Map<String, Value>> {
    let at = names.len() + 1;
    let mut m = params::read(words.get(at + 1..)?, SERVER_PARAMS, strict)?;
    for (i, name) in names.iter().enumerate() {
        m.insert((*name).into(), json!(words.get(i + 1)?));
    }
    let (host, port) = split_address(words.get(at)?);
    m.insert(address_field.into(), json!(host));
    if let Some(p) = port {
        m.insert("port".into(), json!(p));
    }
    Some(m)
}

fn server_line(b: &Body) -> Result<Line, Refusal> {
    addressed_line(b, "server", &["name"], "address")
}

fn server_model(words: &[String], strict: bool) -> Option<Map<String, Value>> {
    addressed_model(words, strict, &["name"], "address")
}

fn template_line(b: &Body) -> Result<Line, Refusal> {
    addressed_line(b, "server-template", &["prefix", "num_or_range"], "fqdn")
}

fn template_model(words: &[String], strict: bool) -> Option<Map<String, Value>> {
    addressed_model(words, strict, &["prefix", "num_or_range"], "fqdn")
}

fn bind_line(b: &Body) -> Result<Line, Refusal> {
    let host = b.str("address").unwrap_or_default();
    let mut addr = match b.int("port") {
        Some(p) => format!("{}:{p}", address(host, None)),
        None => host.to_owned(),
    };
    if let Some(end) = b.int("port-range-end") {
        addr.push_str(&format!("-{end}"));
    }
    let name = b.str("name").unwrap_or(&addr).to_owned();
    let mut w = vec!["bind".to_owned(), addr.clone()];
    if name != addr {
        w.extend(["name".to_owned(), name]);
    }
    w.extend(params::write(b, BIND_PARAMS));
    b.finish()?;
    Ok(w)
}

fn bind_model(words: &[String], strict: bool) -> Option<Map<String, Value>> {
    let rest: Vec<String> = words.get(2..)?.to_vec();
    let (name, params_words): (Option<String>, Vec<String>) =
        match rest.iter().position(|w| w == "name") {
            Some(i) => {
                let mut p = rest.clone();
                let n = p.get(i + 1).cloned();
                p.drain(i..(i + 2).min(p.len()));
                (n, p)
            }
            None => (None, rest),
        };
    let mut m = params::read(&params_words, BIND_PARAMS, strict)?;
    let a = words.get(1)?;
    m.insert("name".into(), json!(name.unwrap_or_else(|| a.clone())));
    let (host, port) = match a.rsplit_once(':') {
        Some((h, p)) => {
            let (p, end) = p.split_once('-').map_or((p, None), |(a, b)| (a, Some(b)));
            if let Some(end) = end.and_then(|e| e.parse::<i64>().ok()) {
                m.insert("port-range-end".into(), json!(end));
            }
            (h.trim_matches(['[', ']']).to_owned(), p.parse::<i64>().ok())
        }
        None => (a.clone(), None),
    };
    m.insert("address".into(), json!(host));
    if let Some(p) = port {
        m.insert("port".into(), json!(p));
    }
    Some(m)
}

fn cond(b: &Body, w: &mut Line) -> Result<(), Refusal> {
    if let Some(c) = b.str("cond") {
        w.push(c.to_owned());
        w.push(b.req_str("cond_test")?.to_owned());
    } else {
        b.ignore("cond_test");
    }
    Ok(())
}

fn acl_line(b: &Body) -> Result<Line, Refusal> {
    let mut w = vec![
        "acl".to_owned(),
        b.req_str("acl_name")?.to_owned(),
        b.req_str("criterion")?.to_owned(),
    ];
    w.extend(b.str("value").map(str::to_owned));
    b.finish()?;
    Ok(w)
}

fn acl_model(words: &[String], _strict: bool) -> Option<Map<String, Value>> {
    let mut m = Map::new();
    m.insert("acl_name".into(), json!(words.get(1)?));
    m.insert("criterion".into(), json!(words.get(2)?));
    m.insert("value".into(), json!(words.get(3..)?.join(" ")));
    Some(m)
}

fn switching_line(b: &Body) -> Result<Line, Refusal> {
    let mut w = vec!["use_backend".to_owned(), b.req_str("name")?.to_owned()];
    cond(b, &mut w)?;
    b.finish()?;
    Ok(w)
}

fn switching_model(words: &[String], _strict: bool) -> Option<Map<String, Value>> {
    let mut m = Map::new();
    m.insert("name".into(), json!(words.get(1)?));
    cond_model(words, &mut m);
    Some(m)
}
