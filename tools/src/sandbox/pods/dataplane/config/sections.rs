//! Section bodies (`backend`, `frontend`, `defaults`, `global`): a table of attributes, each a
//! spec field and the line it stands for, applied only to the models whose spec has the field.
//!
//! - `option <x>` toggles: every field whose spec enum is `enabled`/`disabled` (`dontlognull`
//!   → `option dontlognull`, `disabled` → `no option dontlognull`);
//! - the attributes in [`ATTRS`] (timeouts, `mode`, `maxconn`, `balance`, global settings, ...);
//! - special shapes: `default_server` (a `default-server` line), `forwardfor`, `adv_check` with
//!   `httpchk_params`, `runtime_apis` (`stats socket` lines), `from`.
//!
//! A `PUT` replaces the lines these attributes stand for and keeps the others: children
//! (servers, binds, rules: their own endpoints) and lines the stand-in does not model. Child
//! lists in a body (`servers`, `*_list`) belong to `full_section`, which the stand-in refuses.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde_json::{Map, Value, json};

use super::body::{Body, Refusal, not_implemented, spec_models};
use super::kinds::SectionKind;
use super::params::{self, BIND_PARAMS, SERVER_PARAMS};
use super::text::{Line, Sect, time_ms, time_text};

/// How an attribute's value is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum How {
    /// The words and one raw word.
    Word,
    /// The words and the value's words.
    Rest,
    /// The words and an integer.
    Int,
    /// The words and a time (milliseconds).
    Time,
    /// The words alone, when true.
    Flag,
    /// The words when `enabled`, `no` + the words when `disabled`.
    Toggle,
    /// The words and the value (an enum naming the keyword: `option httpclose`).
    Choice,
}

/// (field, words, how); a `a.b` field is `b` of the object `a`.
const ATTRS: &[(&str, &[&str], How)] = &[
    ("mode", &["mode"], How::Word),
    ("maxconn", &["maxconn"], How::Int),
    ("backlog", &["backlog"], How::Int),
    ("balance.algorithm", &["balance"], How::Word),
    ("default_backend", &["default_backend"], How::Word),
    ("description", &["description"], How::Rest),
    ("disabled", &["disabled"], How::Flag),
    ("enabled", &["enabled"], How::Flag),
    ("id", &["id"], How::Int),
    ("retries", &["retries"], How::Int),
    ("fullconn", &["fullconn"], How::Int),
    ("hash_balance_factor", &["hash-balance-factor"], How::Int),
    ("log_tag", &["log-tag"], How::Word),
    ("log_format", &["log-format"], How::Rest),
    ("error_log_format", &["error-log-format"], How::Rest),
    ("unique_id_format", &["unique-id-format"], How::Rest),
    ("unique_id_header", &["unique-id-header"], How::Word),
    ("http_reuse", &["http-reuse"], How::Word),
    (
        "http_send_name_header",
        &["http-send-name-header"],
        How::Word,
    ),
    ("httplog", &["option", "httplog"], How::Flag),
    ("tcplog", &["option", "tcplog"], How::Flag),
    ("http_connection_mode", &["option"], How::Choice),
    ("connect_timeout", &["timeout", "connect"], How::Time),
    ("client_timeout", &["timeout", "client"], How::Time),
    ("server_timeout", &["timeout", "server"], How::Time),
    ("queue_timeout", &["timeout", "queue"], How::Time),
    ("check_timeout", &["timeout", "check"], How::Time),
    ("tunnel_timeout", &["timeout", "tunnel"], How::Time),
    ("tarpit_timeout", &["timeout", "tarpit"], How::Time),
    ("client_fin_timeout", &["timeout", "client-fin"], How::Time),
    ("server_fin_timeout", &["timeout", "server-fin"], How::Time),
    (
        "http_request_timeout",
        &["timeout", "http-request"],
        How::Time,
    ),
    (
        "http_keep_alive_timeout",
        &["timeout", "http-keep-alive"],
        How::Time,
    ),
    // global
    ("daemon", &["daemon"], How::Flag),
    ("master-worker", &["master-worker"], How::Flag),
    ("nbthread", &["nbthread"], How::Int),
    ("pidfile", &["pidfile"], How::Word),
    ("user", &["user"], How::Word),
    ("group", &["group"], How::Word),
    ("uid", &["uid"], How::Int),
    ("gid", &["gid"], How::Int),
    ("chroot", &["chroot"], How::Word),
    ("localpeer", &["localpeer"], How::Word),
    ("node", &["node"], How::Word),
    ("hard_stop_after", &["hard-stop-after"], How::Time),
    ("grace", &["grace"], How::Time),
    ("close_spread_time", &["close-spread-time"], How::Time),
    ("stats_timeout", &["stats", "timeout"], How::Time),
    ("stats_maxconn", &["stats", "maxconn"], How::Int),
    ("ulimit_n", &["ulimit-n"], How::Int),
    ("mworker_max_reloads", &["mworker-max-reloads"], How::Int),
    ("strict_limits", &["strict-limits"], How::Flag),
    ("external_check", &["external-check"], How::Flag),
    ("insecure_fork_wanted", &["insecure-fork-wanted"], How::Flag),
    (
        "insecure_setuid_wanted",
        &["insecure-setuid-wanted"],
        How::Flag,
    ),
    ("set_dumpable", &["set-dumpable"], How::Flag),
    ("prealloc_fd", &["prealloc-fd"], How::Flag),
    (
        "expose_experimental_directives",
        &["expose-experimental-directives"],
        How::Flag,
    ),
    (
        "expose_deprecated_directives",
        &["expose-deprecated-directives"],
        How::Flag,
    ),
    ("performance_options.maxconn", &["maxconn"], How::Int),
    (
        "performance_options.maxconnrate",
        &["maxconnrate"],
        How::Int,
    ),
    (
        "performance_options.maxsessrate",
        &["maxsessrate"],
        How::Int,
    ),
    ("performance_options.maxpipes", &["maxpipes"], How::Int),
    (
        "performance_options.spread_checks",
        &["spread-checks"],
        How::Int,
    ),
    (
        "performance_options.server_state_base",
        &["server-state-base"],
        How::Word,
    ),
    (
        "performance_options.server_state_file",
        &["server-state-file"],
        How::Word,
    ),
    ("performance_options.noepoll", &["noepoll"], How::Flag),
    ("performance_options.nopoll", &["nopoll"], How::Flag),
    ("performance_options.nosplice", &["nosplice"], How::Flag),
    (
        "performance_options.noreuseport",
        &["noreuseport"],
        How::Flag,
    ),
];

/// Body fields that are child lists (`full_section`).
fn is_child_list(field: &str) -> bool {
    field.ends_with("_list") || matches!(field, "servers" | "server_templates" | "binds")
}

/// One attribute of one model.
#[derive(Debug, Clone)]
struct Attr {
    top: String,
    sub: Option<String>,
    words: Vec<String>,
    how: How,
    choices: Vec<String>,
}

/// The attributes that apply to `model` (cached).
fn attrs(model: &str) -> &'static [Attr] {
    static CACHE: OnceLock<BTreeMap<String, Vec<Attr>>> = OnceLock::new();
    let all = CACHE.get_or_init(|| {
        let mut out = BTreeMap::new();
        for (name, m) in spec_models() {
            let mut list = Vec::new();
            for (field, words, how) in ATTRS {
                let (top, sub) = match field.split_once('.') {
                    Some((t, s)) => (t, Some(s.to_owned())),
                    None => (*field, None),
                };
                if m.fields.contains_key(top) {
                    let choices = m
                        .enums
                        .get(top)
                        .map(|e| {
                            e.iter()
                                .filter_map(|v| v.as_str().map(str::to_owned))
                                .collect()
                        })
                        .unwrap_or_default();
                    list.push(Attr {
                        top: top.to_owned(),
                        sub,
                        words: words.iter().map(|w| (*w).to_owned()).collect(),
                        how: *how,
                        choices,
                    });
                }
            }
            for (field, values) in &m.enums {
                let toggle = values.len() == 2
                    && values.contains(&json!("enabled"))
                    && values.contains(&json!("disabled"));
                if toggle && name != "global" && !list.iter().any(|a| a.top == *field) {
                    let option = if field == "http_proxy" {
                        field.clone()
                    } else {
                        field.replace('_', "-")
                    };
                    list.push(Attr {
                        top: field.clone(),
                        sub: None,
                        words: vec!["option".to_owned(), option],
                        how: How::Toggle,
                        choices: Vec::new(),
                    });
                }
            }
            out.insert(name.clone(), list);
        }
        out
    });
    all.get(model).map_or(&[], Vec::as_slice)
}

impl Attr {
    /// The line for `v`, if any.
    fn line(&self, v: &Value) -> Option<Line> {
        let mut w = self.words.clone();
        match self.how {
            How::Word => w.push(v.as_str()?.to_owned()),
            How::Rest => w.push(v.as_str()?.to_owned()),
            How::Int => w.push(v.as_i64()?.to_string()),
            How::Time => w.push(time_text(v.as_u64()?)),
            How::Flag => {
                if v.as_bool() != Some(true) {
                    return None;
                }
            }
            How::Toggle => match v.as_str()? {
                "enabled" => {}
                _ => w.insert(0, "no".to_owned()),
            },
            How::Choice => w.push(v.as_str()?.to_owned()),
        }
        Some(w)
    }

    /// The value a line stands for, when it is this attribute's.
    fn read(&self, l: &[String]) -> Option<Value> {
        let (negated, l) = match l.first().map(String::as_str) {
            Some("no") if self.how == How::Toggle => (true, &l[1..]),
            _ => (false, l),
        };
        let n = self.words.len();
        if l.len() < n || l[..n] != self.words[..] {
            return None;
        }
        let rest = &l[n..];
        Some(match self.how {
            How::Word => json!(rest.first()?),
            How::Rest => json!(rest.join(" ")),
            How::Int => json!(rest.first()?.parse::<i64>().ok()?),
            How::Time => json!(time_ms(rest.first()?)?),
            How::Flag if rest.is_empty() => json!(true),
            How::Toggle if rest.is_empty() => json!(if negated { "disabled" } else { "enabled" }),
            How::Choice if rest.len() == 1 && self.choices.contains(&rest[0]) => json!(rest[0]),
            _ => return None,
        })
    }
}

/// Whether a line is one the section's model stands for (replaced by a `PUT`).
pub(crate) fn owns(kind: &SectionKind, l: &[String]) -> bool {
    let first = l.first().map(String::as_str);
    let special = match kind.keyword {
        "global" => l.len() > 2 && l[0] == "stats" && l[1] == "socket",
        _ => {
            first == Some("default-server")
                || (l.len() >= 2 && l[0] == "option" && matches!(l[1].as_str(), "forwardfor"))
                || (l.len() >= 2 && l[0] == "option" && adv_check_word(&l[1]))
        }
    };
    special || attrs(kind.model).iter().any(|a| a.read(l).is_some())
}

fn adv_check_word(w: &str) -> bool {
    matches!(
        w,
        "httpchk"
            | "ldap-check"
            | "mysql-check"
            | "pgsql-check"
            | "redis-check"
            | "smtpchk"
            | "ssl-hello-chk"
            | "tcp-check"
    )
}

/// The lines of a section body and the words after its name (`from x`).
pub(crate) fn section_lines(
    kind: &SectionKind,
    b: &Body,
) -> Result<(Vec<Line>, Vec<String>), Refusal> {
    let mut lines = Vec::new();
    let mut nested_used: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for a in attrs(kind.model) {
        let Some(top) = b.value(&a.top) else { continue };
        let v = match &a.sub {
            Some(s) => {
                nested_used
                    .entry(a.top.clone())
                    .or_default()
                    .push(s.clone());
                match top.get(s) {
                    Some(v) => v,
                    None => continue,
                }
            }
            None => top,
        };
        if let Some(l) = a.line(v) {
            lines.push(l);
        }
    }
    if let Some(ds) = b.value("default_server") {
        let inner = Body::new("default_server", ds)?;
        let mut l = vec!["default-server".to_owned()];
        l.extend(params::write(&inner, SERVER_PARAMS));
        inner.finish()?;
        lines.push(l);
    }
    if let Some(ff) = b.value("forwardfor") {
        let inner = Body::new("forwardfor", ff)?;
        inner.ignore("enabled");
        let mut l = vec!["option".to_owned(), "forwardfor".to_owned()];
        if let Some(e) = inner.str("except") {
            l.extend(["except".to_owned(), e.to_owned()]);
        }
        if let Some(h) = inner.str("header") {
            l.extend(["header".to_owned(), h.to_owned()]);
        }
        if inner.flag("ifnone") {
            l.push("if-none".to_owned());
        }
        inner.finish()?;
        lines.push(l);
    }
    if let Some(check) = b.str("adv_check") {
        let mut l = vec!["option".to_owned(), check.to_owned()];
        if let Some(p) = b.value("httpchk_params").filter(|_| check == "httpchk") {
            let inner = Body::new("httpchk_params", p)?;
            for f in ["method", "uri", "version"] {
                l.extend(inner.str(f).map(str::to_owned));
            }
            inner.finish()?;
        }
        lines.push(l);
    }
    for api in b
        .value("runtime_apis")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let inner = Body::new("bind", api)?;
        let Some(address) = api.get("address").and_then(Value::as_str) else {
            return Err((422, "runtime_apis.address in body is required".to_owned()));
        };
        for f in ["address", "name", "port"] {
            inner.ignore(f);
        }
        let mut l = vec!["stats".to_owned(), "socket".to_owned(), address.to_owned()];
        l.extend(params::write(&inner, BIND_PARAMS));
        inner.finish()?;
        lines.push(l);
    }
    // Sub-fields of the objects above that the stand-in does not apply.
    for (top, used) in &nested_used {
        let Some(obj) = b.value(top).and_then(Value::as_object) else {
            continue;
        };
        let spec = spec_models().get(top.as_str());
        for k in obj.keys() {
            let in_spec = spec.is_none_or(|m| m.fields.contains_key(k));
            if in_spec && !used.contains(k) && !obj[k].is_null() {
                return Err(not_implemented(format!(
                    "the {} field {top}.{k}",
                    kind.model
                )));
            }
        }
    }
    let mut rest = Vec::new();
    if let Some(from) = b.str("from") {
        rest.extend(["from".to_owned(), from.to_owned()]);
    }
    b.ignore("name");
    for f in b.unused() {
        if is_child_list(&f) {
            b.ignore(&f);
        }
    }
    b.finish()?;
    Ok((lines, rest))
}

/// The model of a section (what can be modelled of it).
pub(crate) fn section_model(kind: &SectionKind, s: &Sect) -> Value {
    let mut m = Map::new();
    if !kind.singleton {
        m.insert("name".into(), json!(s.name));
    }
    if s.rest.len() == 2 && s.rest[0] == "from" {
        m.insert("from".into(), json!(s.rest[1]));
    }
    let mut apis = Vec::new();
    for l in &s.lines {
        for a in attrs(kind.model) {
            if let Some(v) = a.read(l) {
                match &a.sub {
                    Some(sub) => {
                        let o = m.entry(a.top.clone()).or_insert_with(|| json!({}));
                        if let Some(o) = o.as_object_mut() {
                            o.insert(sub.clone(), v);
                        }
                    }
                    None => {
                        m.insert(a.top.clone(), v);
                    }
                }
                break;
            }
        }
        match l.first().map(String::as_str) {
            Some("default-server") if kind.keyword != "global" => {
                if let Some(p) = params::read(&l[1..], SERVER_PARAMS, false) {
                    m.insert("default_server".into(), Value::Object(p));
                }
            }
            Some("option") if l.get(1).is_some_and(|w| w == "forwardfor") => {
                let mut ff = Map::new();
                ff.insert("enabled".into(), json!("enabled"));
                for p in l[2..].windows(2) {
                    if p[0] == "except" || p[0] == "header" {
                        ff.insert(p[0].clone(), json!(p[1]));
                    }
                }
                if l.iter().any(|w| w == "if-none") {
                    ff.insert("ifnone".into(), json!(true));
                }
                m.insert("forwardfor".into(), Value::Object(ff));
            }
            Some("option") if l.get(1).is_some_and(|w| adv_check_word(w)) => {
                m.insert("adv_check".into(), json!(l[1]));
                if l[1] == "httpchk" && l.len() > 2 {
                    let mut p = Map::new();
                    for (f, w) in ["method", "uri", "version"].iter().zip(&l[2..]) {
                        p.insert((*f).into(), json!(w));
                    }
                    m.insert("httpchk_params".into(), Value::Object(p));
                }
            }
            Some("stats")
                if kind.keyword == "global" && l.get(1).is_some_and(|w| w == "socket") =>
            {
                if let (Some(addr), Some(mut p)) =
                    (l.get(2), params::read(&l[3..], BIND_PARAMS, false))
                {
                    p.insert("address".into(), json!(addr));
                    apis.push(Value::Object(p));
                }
            }
            _ => {}
        }
    }
    if !apis.is_empty() {
        m.insert("runtime_apis".into(), Value::Array(apis));
    }
    Value::Object(m)
}
