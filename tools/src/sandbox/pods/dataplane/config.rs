//! Configuration object endpoints and transactions (ecosystem.md §A.4; dataplaneapi
//! `handlers/configuration/{backend,frontend,server,server_template,bind,acl,...}` and
//! `handlers/dataplane/transactions`), no more generous than the real API:
//!
//! - outside a transaction (`?version=N`, 409 when it moved) every write rewrites `haproxy.cfg`
//!   in the API's own layout (config-parser's writer: sections by kind then name, two-space
//!   indentation, keywords in a fixed sequence, server parameters in client-native's order,
//!   comments dropped, unnamed `defaults` named `unnamed_defaults_N`), validated with
//!   `haproxy -c`, and the version moves by one;
//! - a `PUT` of an existing backend server whose changed fields are all runtime fields
//!   (weight, address, port, maintenance, agent-check, agent-addr, agent-send,
//!   health_check_port; dataplaneapi `runtimeSupportedServerFields`) is applied through
//!   HAProxy's runtime socket (`set server b/s weight|addr|state|check-port|agent-*`) and
//!   answers 200 without a reload; when the pod has no admin stats socket or a command fails,
//!   it reloads (202 + Reload-ID), as the real API does;
//! - every other write outside a transaction answers 202 + Reload-ID: server creates reload
//!   too (the real API adds servers at runtime only in cases the sandbox does not implement:
//!   it is never more generous), as do deletes, templates, binds, rules and sections;
//! - inside a transaction (`?transaction_id=T`) writes go to the transaction's copy and answer
//!   202 (201 for section creates is not used by the real API inside transactions either);
//!   `PUT .../transactions/T` validates, writes the file, bumps the version, marks the other
//!   open transactions outdated and answers 202 + Reload-ID (one reload); 409 when the version
//!   moved since the start, 406 for an outdated transaction; `DELETE` aborts (204).
//! - bodies with a field the sandbox does not know answer 400 (the real API validates bodies
//!   against its schema; a field it knows and we do not is refused here, never dropped).

#![allow(clippy::result_large_err)]

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Map, Value, json};

use super::{PodCore, error, with_version};

/// An open transaction.
#[derive(Debug, Clone)]
pub(crate) struct Txn {
    /// Version it started at.
    version: u64,
    /// The configuration it edits (body, no version line).
    text: String,
    /// `in_progress` or `outdated`.
    status: &'static str,
}

/// Open transactions by id.
pub(crate) type Transactions = std::sync::Mutex<BTreeMap<String, Txn>>;

pub(super) fn routes() -> Router<Arc<PodCore>> {
    let base = "/v3/services/haproxy/configuration";
    Router::new()
        .route(
            "/v3/services/haproxy/transactions",
            get(list_transactions).post(start_transaction),
        )
        .route(
            "/v3/services/haproxy/transactions/{id}",
            get(get_transaction)
                .put(commit_transaction)
                .delete(delete_transaction),
        )
        .route(
            &format!("{base}/{{coll}}"),
            get(list_sections).post(create_section),
        )
        .route(
            &format!("{base}/{{coll}}/{{name}}"),
            get(get_section).put(replace_section).delete(delete_section),
        )
        .route(
            &format!("{base}/{{coll}}/{{name}}/{{child}}"),
            get(list_children).post(create_child),
        )
        .route(
            &format!("{base}/{{coll}}/{{name}}/{{child}}/{{key}}"),
            get(get_child)
                .post(create_child_at)
                .put(replace_child)
                .delete(delete_child),
        )
}

// ---- a small model of the file: sections of tokenised lines ----

/// Section keywords (HAProxy 2.6 to 3.x).
const SECTIONS: &[&str] = &[
    "global",
    "defaults",
    "frontend",
    "backend",
    "listen",
    "userlist",
    "peers",
    "mailers",
    "resolvers",
    "cache",
    "program",
    "http-errors",
    "ring",
    "log-forward",
    "fcgi-app",
    "crt-store",
    "traces",
    "acme",
    "log-profile",
];

/// The order config-parser writes section kinds in (`writer.go`).
const SECTION_ORDER: &[&str] = &[
    "global",
    "defaults",
    "userlist",
    "peers",
    "mailers",
    "resolvers",
    "cache",
    "ring",
    "log-forward",
    "http-errors",
    "crt-store",
    "frontend",
    "backend",
    "listen",
    "program",
    "fcgi-app",
    "traces",
    "acme",
    "log-profile",
];

/// Keyword sequence inside a section (a simplification of config-parser's parser sequence;
/// keywords not listed follow in their original order).
const KEYWORD_ORDER: &[&str] = &[
    "mode",
    "maxconn",
    "balance",
    "bind",
    "option",
    "no",
    "timeout",
    "log",
    "acl",
    "http-request",
    "http-response",
    "use_backend",
    "default_backend",
    "default-server",
    "server-template",
    "server",
];

#[derive(Debug, Clone)]
struct Sect {
    kind: String,
    name: String,
    /// Words after the name (`from x`).
    rest: Vec<String>,
    lines: Vec<Vec<String>>,
}

fn tokenize(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let (mut in_word, mut quote) = (false, None::<char>);
    let mut it = line.chars();
    while let Some(c) = it.next() {
        match quote {
            Some(q) if c == q => quote = None,
            Some('"') if c == '\\' => cur.extend(it.next()),
            Some(_) => cur.push(c),
            None => match c {
                ' ' | '\t' | '\r' => {
                    if in_word {
                        words.push(std::mem::take(&mut cur));
                        in_word = false;
                    }
                }
                '#' => break,
                '"' | '\'' => {
                    quote = Some(c);
                    in_word = true;
                }
                '\\' => {
                    cur.extend(it.next());
                    in_word = true;
                }
                _ => {
                    cur.push(c);
                    in_word = true;
                }
            },
        }
    }
    if in_word {
        words.push(cur);
    }
    words
}

fn quote(w: &str) -> String {
    if w.is_empty() || w.contains([' ', '\t', '#', '"', '\'', '\\']) {
        format!("\"{}\"", w.replace('\\', "\\\\").replace('"', "\\\""))
    } else {
        w.to_owned()
    }
}

fn read_sections(text: &str) -> Vec<Sect> {
    let mut out: Vec<Sect> = Vec::new();
    let mut unnamed = 0;
    for raw in text.lines() {
        let w = tokenize(raw);
        if w.is_empty() {
            continue;
        }
        if SECTIONS.contains(&w[0].as_str()) {
            let mut rest = w[1..].to_vec();
            let mut name = if w[0] == "global" || rest.is_empty() || rest[0] == "from" {
                String::new()
            } else {
                rest.remove(0)
            };
            if w[0] == "defaults" && name.is_empty() {
                unnamed += 1;
                name = format!("unnamed_defaults_{unnamed}");
            }
            out.push(Sect {
                kind: w[0].clone(),
                name,
                rest,
                lines: Vec::new(),
            });
        } else if let Some(s) = out.last_mut() {
            s.lines.push(w);
        }
    }
    out
}

/// Writes sections in the API's layout (module doc).
fn write_sections(mut sections: Vec<Sect>) -> String {
    let rank = |k: &str| SECTION_ORDER.iter().position(|s| *s == k).unwrap_or(99);
    // Stable: defaults keep their relative order (a `from` may depend on it).
    sections.sort_by(|a, b| {
        let by_name = a.kind != "defaults";
        (rank(&a.kind), if by_name { a.name.as_str() } else { "" })
            .cmp(&(rank(&b.kind), if by_name { b.name.as_str() } else { "" }))
    });
    let kw_rank = |w: &str| {
        KEYWORD_ORDER
            .iter()
            .position(|k| *k == w)
            .unwrap_or(KEYWORD_ORDER.len())
    };
    let mut out = String::new();
    for s in sections {
        out.push('\n');
        out.push_str(&s.kind);
        if !s.name.is_empty() {
            out.push(' ');
            out.push_str(&quote(&s.name));
        }
        for r in &s.rest {
            out.push(' ');
            out.push_str(&quote(r));
        }
        out.push('\n');
        let mut lines = s.lines.clone();
        lines.sort_by_key(|l| kw_rank(&l[0]));
        for l in lines {
            out.push_str("  ");
            out.push_str(&l.iter().map(|w| quote(w)).collect::<Vec<_>>().join(" "));
            out.push('\n');
        }
    }
    out
}

// ---- models: JSON <-> lines ----

/// A server parameter: (keyword, field, kind) in client-native's serialisation order.
/// Kinds: `f:<value>` flag setting field to value, `b` boolean, `s` string, `i` integer,
/// `t` time in ms.
const SERVER_PARAMS: &[(&str, &str, &str)] = &[
    ("agent-check", "agent-check", "f:enabled"),
    ("no-agent-check", "agent-check", "f:disabled"),
    ("allow-0rtt", "allow_0rtt", "b"),
    ("backup", "backup", "f:enabled"),
    ("no-backup", "backup", "f:disabled"),
    ("check", "check", "f:enabled"),
    ("no-check", "check", "f:disabled"),
    ("check-send-proxy", "check_send_proxy", "f:enabled"),
    ("check-ssl", "check_ssl", "f:enabled"),
    ("no-check-ssl", "check_ssl", "f:disabled"),
    ("disabled", "maintenance", "f:enabled"),
    ("enabled", "maintenance", "f:disabled"),
    ("send-proxy", "send-proxy", "f:enabled"),
    ("no-send-proxy", "send-proxy", "f:disabled"),
    ("send-proxy-v2", "send-proxy-v2", "f:enabled"),
    ("no-send-proxy-v2", "send-proxy-v2", "f:disabled"),
    ("ssl", "ssl", "f:enabled"),
    ("no-ssl", "ssl", "f:disabled"),
    ("ssl-reuse", "ssl_reuse", "f:enabled"),
    ("no-ssl-reuse", "ssl_reuse", "f:disabled"),
    ("tls-tickets", "tls_tickets", "f:enabled"),
    ("no-tls-tickets", "tls_tickets", "f:disabled"),
    ("stick", "stick", "f:enabled"),
    ("non-stick", "stick", "f:disabled"),
    ("tfo", "tfo", "f:enabled"),
    ("no-tfo", "tfo", "f:disabled"),
    ("agent-send", "agent-send", "s"),
    ("agent-inter", "agent-inter", "t"),
    ("agent-addr", "agent-addr", "s"),
    ("agent-port", "agent-port", "i"),
    ("alpn", "alpn", "s"),
    ("ca-file", "ssl_cafile", "s"),
    ("check-alpn", "check_alpn", "s"),
    ("check-sni", "check_sni", "s"),
    ("ciphers", "ciphers", "s"),
    ("cookie", "cookie", "s"),
    ("crl-file", "crl_file", "s"),
    ("crt", "ssl_certificate", "s"),
    ("error-limit", "error_limit", "i"),
    ("fall", "fall", "i"),
    ("init-addr", "init-addr", "s"),
    ("inter", "inter", "t"),
    ("fastinter", "fastinter", "t"),
    ("downinter", "downinter", "t"),
    ("maxconn", "maxconn", "i"),
    ("maxqueue", "maxqueue", "i"),
    ("max-reuse", "max_reuse", "i"),
    ("minconn", "minconn", "i"),
    ("observe", "observe", "s"),
    ("on-error", "on-error", "s"),
    ("on-marked-down", "on-marked-down", "s"),
    ("on-marked-up", "on-marked-up", "s"),
    ("pool-max-conn", "pool_max_conn", "i"),
    ("pool-purge-delay", "pool_purge_delay", "t"),
    ("addr", "health_check_address", "s"),
    ("port", "health_check_port", "i"),
    ("proto", "proto", "s"),
    ("rise", "rise", "i"),
    ("resolve-prefer", "resolve-prefer", "s"),
    ("resolvers", "resolvers", "s"),
    ("slowstart", "slowstart", "t"),
    ("sni", "sni", "s"),
    ("ssl-max-ver", "ssl_max_ver", "s"),
    ("ssl-min-ver", "ssl_min_ver", "s"),
    ("track", "track", "s"),
    ("verify", "verify", "s"),
    ("verifyhost", "verifyhost", "s"),
    ("no-verifyhost", "no_verifyhost", "f:enabled"),
    ("weight", "weight", "i"),
    ("ws", "ws", "s"),
];

fn time_text(ms: u64) -> String {
    if ms > 0 && ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        ms.to_string()
    }
}

fn time_ms(v: &str) -> Option<u64> {
    let digits: String = v.chars().take_while(char::is_ascii_digit).collect();
    let n: u64 = digits.parse().ok()?;
    let mult = match &v[digits.len()..] {
        "" | "ms" => 1,
        "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return None,
    };
    Some(n * mult)
}

type Bad = String;

fn obj(v: &Value) -> Result<&Map<String, Value>, Bad> {
    v.as_object()
        .ok_or_else(|| "body must be a JSON object".to_owned())
}

fn str_of<'a>(m: &'a Map<String, Value>, k: &str) -> Result<&'a str, Bad> {
    m.get(k)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| format!("{k}: required string"))
}

fn int_of(m: &Map<String, Value>, k: &str) -> Result<Option<i64>, Bad> {
    match m.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_i64()
            .map(Some)
            .ok_or_else(|| format!("{k}: must be an integer")),
    }
}

fn address(addr: &str, port: Option<i64>) -> String {
    let a = if addr.contains(':') {
        format!("[{addr}]")
    } else {
        addr.to_owned()
    };
    match port {
        Some(p) => format!("{a}:{p}"),
        None => a.to_owned(),
    }
}

/// Server (or template) parameters from the model, in serialisation order; `known` lists the
/// other fields the caller consumed. Unknown fields are refused.
fn server_params(m: &Map<String, Value>, known: &[&str]) -> Result<Vec<String>, Bad> {
    for k in m.keys() {
        if !known.contains(&k.as_str()) && !SERVER_PARAMS.iter().any(|(_, f, _)| f == k) {
            return Err(format!("{k}: unknown field"));
        }
    }
    let mut out = Vec::new();
    for (kw, field, kind) in SERVER_PARAMS {
        let Some(v) = m.get(*field) else { continue };
        match *kind {
            k if k.starts_with("f:") => {
                if v.as_str() == Some(&k[2..]) {
                    out.push((*kw).to_owned());
                } else if v.as_str().is_none_or(|s| s != "enabled" && s != "disabled") {
                    return Err(format!("{field}: enabled or disabled"));
                }
            }
            "b" => {
                if v.as_bool() == Some(true) {
                    out.push((*kw).to_owned());
                }
            }
            "s" => {
                out.push((*kw).to_owned());
                out.push(
                    v.as_str()
                        .ok_or_else(|| format!("{field}: string"))?
                        .to_owned(),
                );
            }
            "i" => {
                out.push((*kw).to_owned());
                out.push(
                    v.as_i64()
                        .ok_or_else(|| format!("{field}: integer"))?
                        .to_string(),
                );
            }
            _ => {
                out.push((*kw).to_owned());
                out.push(time_text(
                    v.as_u64().ok_or_else(|| format!("{field}: integer (ms)"))?,
                ));
            }
        }
    }
    Ok(out)
}

/// A server line's model (the inverse of [`server_line`]); unknown parameters make it `None`
/// (then the sandbox always reloads for it).
fn server_model_of(words: &[String]) -> Option<Map<String, Value>> {
    let mut m = Map::new();
    m.insert("name".into(), json!(words.get(1)?));
    let a = words.get(2)?;
    let (host, port) = match a.rsplit_once(':') {
        Some((h, p)) if !a.starts_with('/') => {
            (h.trim_matches(['[', ']']).to_owned(), p.parse::<i64>().ok())
        }
        _ => (a.clone(), None),
    };
    m.insert("address".into(), json!(host));
    if let Some(p) = port {
        m.insert("port".into(), json!(p));
    }
    let mut i = 3;
    while i < words.len() {
        let (_, field, kind) = SERVER_PARAMS.iter().find(|(kw, _, _)| *kw == words[i])?;
        match *kind {
            k if k.starts_with("f:") => {
                m.insert((*field).into(), json!(&k[2..]));
            }
            "b" => {
                m.insert((*field).into(), json!(true));
            }
            "s" => {
                i += 1;
                m.insert((*field).into(), json!(words.get(i)?));
            }
            "i" => {
                i += 1;
                m.insert((*field).into(), json!(words.get(i)?.parse::<i64>().ok()?));
            }
            _ => {
                i += 1;
                m.insert((*field).into(), json!(time_ms(words.get(i)?)?));
            }
        }
        i += 1;
    }
    Some(m)
}

fn server_line(v: &Value) -> Result<Vec<String>, Bad> {
    let m = obj(v)?;
    let mut w = vec![
        "server".to_owned(),
        str_of(m, "name")?.to_owned(),
        address(str_of(m, "address")?, int_of(m, "port")?),
    ];
    if let Some(id) = int_of(m, "id")? {
        w.push("id".into());
        w.push(id.to_string());
    }
    w.extend(server_params(m, &["name", "address", "port", "id"])?);
    Ok(w)
}

fn template_line(v: &Value) -> Result<Vec<String>, Bad> {
    let m = obj(v)?;
    let mut w = vec![
        "server-template".to_owned(),
        str_of(m, "prefix")?.to_owned(),
        str_of(m, "num_or_range")?.to_owned(),
        address(str_of(m, "fqdn")?, int_of(m, "port")?),
    ];
    w.extend(server_params(
        m,
        &["prefix", "num_or_range", "fqdn", "port", "id"],
    )?);
    Ok(w)
}

fn only(m: &Map<String, Value>, known: &[&str]) -> Result<(), Bad> {
    match m.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) => Err(format!("{k}: unknown field")),
        None => Ok(()),
    }
}

fn bind_line(v: &Value) -> Result<Vec<String>, Bad> {
    let m = obj(v)?;
    only(
        m,
        &[
            "name",
            "address",
            "port",
            "ssl",
            "ssl_certificate",
            "crt_list",
            "alpn",
            "accept_proxy",
            "v4v6",
            "v6only",
            "transparent",
        ],
    )?;
    let addr = format!(
        "{}:{}",
        m.get("address").and_then(Value::as_str).unwrap_or(""),
        int_of(m, "port")?.ok_or("port: required")?
    );
    let name = str_of(m, "name")?;
    let mut w = vec!["bind".to_owned(), addr.clone()];
    if name != addr {
        w.extend(["name".to_owned(), name.to_owned()]);
    }
    for (f, kw) in [
        ("accept_proxy", "accept-proxy"),
        ("ssl", "ssl"),
        ("transparent", "transparent"),
        ("v4v6", "v4v6"),
        ("v6only", "v6only"),
    ] {
        if m.get(f).and_then(Value::as_bool) == Some(true) {
            w.push(kw.into());
        }
    }
    for (f, kw) in [
        ("alpn", "alpn"),
        ("ssl_certificate", "crt"),
        ("crt_list", "crt-list"),
    ] {
        if let Some(s) = m.get(f).and_then(Value::as_str) {
            w.extend([kw.to_owned(), s.to_owned()]);
        }
    }
    Ok(w)
}

fn bind_name(words: &[String]) -> String {
    words.windows(2).find(|p| p[0] == "name").map_or_else(
        || words.get(1).cloned().unwrap_or_default(),
        |p| p[1].clone(),
    )
}

fn cond(m: &Map<String, Value>, w: &mut Vec<String>) -> Result<(), Bad> {
    if let Some(c) = m.get("cond").and_then(Value::as_str) {
        if c != "if" && c != "unless" {
            return Err("cond: if or unless".into());
        }
        w.push(c.to_owned());
        w.extend(tokenize(str_of(m, "cond_test")?));
    }
    Ok(())
}

fn acl_line(v: &Value) -> Result<Vec<String>, Bad> {
    let m = obj(v)?;
    only(m, &["acl_name", "criterion", "value"])?;
    let mut w = vec![
        "acl".to_owned(),
        str_of(m, "acl_name")?.to_owned(),
        str_of(m, "criterion")?.to_owned(),
    ];
    w.extend(tokenize(
        m.get("value").and_then(Value::as_str).unwrap_or(""),
    ));
    Ok(w)
}

fn switching_line(v: &Value) -> Result<Vec<String>, Bad> {
    let m = obj(v)?;
    only(m, &["name", "cond", "cond_test"])?;
    let mut w = vec!["use_backend".to_owned(), str_of(m, "name")?.to_owned()];
    cond(m, &mut w)?;
    Ok(w)
}

fn http_rule_line(v: &Value, response: bool) -> Result<Vec<String>, Bad> {
    let m = obj(v)?;
    let kw = if response {
        "http-response"
    } else {
        "http-request"
    };
    let ty = str_of(m, "type")?;
    let mut w = vec![kw.to_owned(), ty.to_owned()];
    let mut known = vec!["type", "cond", "cond_test"];
    match ty {
        "allow" => {}
        "deny" => {
            known.push("deny_status");
            if let Some(s) = int_of(m, "deny_status")? {
                w.extend(["deny_status".to_owned(), s.to_string()]);
            }
        }
        "set-header" | "add-header" => {
            known.extend(["hdr_name", "hdr_format"]);
            w.push(str_of(m, "hdr_name")?.to_owned());
            w.push(str_of(m, "hdr_format")?.to_owned());
        }
        "del-header" => {
            known.push("hdr_name");
            w.push(str_of(m, "hdr_name")?.to_owned());
        }
        "redirect" if !response => {
            known.extend(["redir_type", "redir_value", "redir_code"]);
            w.push(str_of(m, "redir_type")?.to_owned());
            w.push(str_of(m, "redir_value")?.to_owned());
            if let Some(c) = int_of(m, "redir_code")? {
                w.extend(["code".to_owned(), c.to_string()]);
            }
        }
        "return" if !response => {
            known.extend([
                "return_status_code",
                "return_content_type",
                "return_content_format",
                "return_content",
            ]);
            if let Some(s) = int_of(m, "return_status_code")? {
                w.extend(["status".to_owned(), s.to_string()]);
            }
            if let Some(t) = m.get("return_content_type").and_then(Value::as_str) {
                w.extend(["content-type".to_owned(), t.to_owned()]);
            }
            if let Some(f) = m.get("return_content_format").and_then(Value::as_str) {
                w.extend([f.to_owned(), str_of(m, "return_content")?.to_owned()]);
            }
        }
        other => return Err(format!("type: {other} not supported by haptic-sandbox")),
    }
    only(m, &known)?;
    cond(m, &mut w)?;
    Ok(w)
}

/// The child keyword of each collection, and whether it is addressed by index.
fn child_info(parent_kind: &str, coll: &str) -> Option<(&'static str, bool)> {
    Some(match (parent_kind, coll) {
        ("backend", "servers") => ("server", false),
        ("backend", "server_templates") => ("server-template", false),
        ("frontend", "binds") => ("bind", false),
        ("frontend", "backend_switching_rules") => ("use_backend", true),
        (_, "acls") => ("acl", true),
        (_, "http_request_rules") => ("http-request", true),
        (_, "http_response_rules") => ("http-response", true),
        _ => return None,
    })
}

fn child_line(kw: &str, v: &Value) -> Result<Vec<String>, Bad> {
    match kw {
        "server" => server_line(v),
        "server-template" => template_line(v),
        "bind" => bind_line(v),
        "use_backend" => switching_line(v),
        "acl" => acl_line(v),
        "http-request" => http_rule_line(v, false),
        _ => http_rule_line(v, true),
    }
}

fn child_key(kw: &str, words: &[String]) -> String {
    match kw {
        "bind" => bind_name(words),
        _ => words.get(1).cloned().unwrap_or_default(),
    }
}

/// Lines of a section that belong to other endpoints (kept by a `PUT` of the section).
const CHILD_KEYWORDS: &[&str] = &[
    "server",
    "server-template",
    "bind",
    "acl",
    "http-request",
    "http-response",
    "http-after-response",
    "use_backend",
    "use-server",
    "tcp-request",
    "tcp-response",
    "filter",
    "log",
    "stick",
    "http-check",
    "tcp-check",
    "http-error",
    "declare",
    "capture",
    "stick-table",
];

fn section_lines(kind: &str, v: &Value, name: &str) -> Result<Vec<Vec<String>>, Bad> {
    let m = obj(v)?;
    if str_of(m, "name")? != name {
        return Err("name: does not match the path".into());
    }
    let mut lines = Vec::new();
    let timeouts: &[(&str, &str)] = if kind == "backend" {
        &[
            ("connect_timeout", "connect"),
            ("server_timeout", "server"),
            ("queue_timeout", "queue"),
            ("check_timeout", "check"),
            ("tunnel_timeout", "tunnel"),
            ("http_request_timeout", "http-request"),
            ("http_keep_alive_timeout", "http-keep-alive"),
        ]
    } else {
        &[
            ("client_timeout", "client"),
            ("http_request_timeout", "http-request"),
            ("http_keep_alive_timeout", "http-keep-alive"),
        ]
    };
    let mut known = vec!["name", "mode"];
    known.extend(timeouts.iter().map(|t| t.0));
    if let Some(mode) = m.get("mode").and_then(Value::as_str) {
        lines.push(vec!["mode".to_owned(), mode.to_owned()]);
    }
    if kind == "backend" {
        known.push("balance");
        if let Some(b) = m.get("balance") {
            let a = b
                .get("algorithm")
                .and_then(Value::as_str)
                .ok_or("balance: algorithm required")?;
            lines.push(vec!["balance".to_owned(), a.to_owned()]);
        }
    } else {
        known.extend(["maxconn", "default_backend", "httplog"]);
        if let Some(n) = int_of(m, "maxconn")? {
            lines.push(vec!["maxconn".to_owned(), n.to_string()]);
        }
        if let Some(b) = m.get("default_backend").and_then(Value::as_str) {
            lines.push(vec!["default_backend".to_owned(), b.to_owned()]);
        }
        if m.get("httplog").and_then(Value::as_bool) == Some(true) {
            lines.push(vec!["option".to_owned(), "httplog".to_owned()]);
        }
    }
    for (f, t) in timeouts {
        if let Some(ms) = m.get(*f) {
            let ms = ms.as_u64().ok_or_else(|| format!("{f}: integer (ms)"))?;
            lines.push(vec!["timeout".to_owned(), (*t).to_owned(), time_text(ms)]);
        }
    }
    only(m, &known)?;
    Ok(lines)
}

// ---- edits ----

/// One edit of the configuration.
enum Edit {
    CreateSection {
        kind: String,
        body: Value,
    },
    ReplaceSection {
        kind: String,
        name: String,
        body: Value,
    },
    DeleteSection {
        kind: String,
        name: String,
    },
    CreateChild {
        kind: String,
        parent: String,
        coll: String,
        index: Option<usize>,
        body: Value,
    },
    ReplaceChild {
        kind: String,
        parent: String,
        coll: String,
        key: String,
        body: Value,
    },
    DeleteChild {
        kind: String,
        parent: String,
        coll: String,
        key: String,
    },
}

fn section_kind(coll: &str) -> Option<&'static str> {
    match coll {
        "backends" => Some("backend"),
        "frontends" => Some("frontend"),
        _ => None,
    }
}

/// Applies `edit` to `text`; the new text (API layout) or (status, message).
fn apply(text: &str, edit: &Edit) -> Result<String, (u16, String)> {
    let bad = |m: String| (400u16, m);
    let mut sections = read_sections(text);
    let find = |s: &[Sect], kind: &str, name: &str| {
        s.iter().position(|x| x.kind == kind && x.name == name)
    };
    match edit {
        Edit::CreateSection { kind, body } => {
            let name = body
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| bad("name: required".into()))?
                .to_owned();
            if find(&sections, kind, &name).is_some() {
                return Err((409, format!("{kind} {name} already exists")));
            }
            let lines = section_lines(kind, body, &name).map_err(bad)?;
            sections.push(Sect {
                kind: kind.clone(),
                name,
                rest: vec![],
                lines,
            });
        }
        Edit::ReplaceSection { kind, name, body } => {
            let i = find(&sections, kind, name).ok_or((404, format!("{kind} {name} not found")))?;
            let mut lines = section_lines(kind, body, name).map_err(bad)?;
            lines.extend(
                sections[i]
                    .lines
                    .iter()
                    .filter(|l| CHILD_KEYWORDS.contains(&l[0].as_str()))
                    .cloned(),
            );
            sections[i].lines = lines;
        }
        Edit::DeleteSection { kind, name } => {
            let i = find(&sections, kind, name).ok_or((404, format!("{kind} {name} not found")))?;
            sections.remove(i);
        }
        Edit::CreateChild {
            kind,
            parent,
            coll,
            index,
            body,
        } => {
            let (kw, indexed) =
                child_info(kind, coll).ok_or((404, format!("no {coll} in a {kind}")))?;
            let i =
                find(&sections, kind, parent).ok_or((404, format!("{kind} {parent} not found")))?;
            let line = child_line(kw, body).map_err(bad)?;
            let lines = &mut sections[i].lines;
            if indexed {
                let positions: Vec<usize> =
                    (0..lines.len()).filter(|j| lines[*j][0] == kw).collect();
                let at = index.unwrap_or(positions.len());
                if at > positions.len() {
                    return Err((400, format!("index {at} out of range")));
                }
                let pos = positions
                    .get(at)
                    .copied()
                    .unwrap_or_else(|| positions.last().map_or(lines.len(), |p| p + 1));
                lines.insert(pos, line);
            } else {
                let key = child_key(kw, &line);
                if lines.iter().any(|l| l[0] == kw && child_key(kw, l) == key) {
                    return Err((409, format!("{kw} {key} already exists")));
                }
                lines.push(line);
            }
        }
        Edit::ReplaceChild {
            kind,
            parent,
            coll,
            key,
            body,
        } => {
            let (kw, indexed) =
                child_info(kind, coll).ok_or((404, format!("no {coll} in a {kind}")))?;
            let i =
                find(&sections, kind, parent).ok_or((404, format!("{kind} {parent} not found")))?;
            let line = child_line(kw, body).map_err(bad)?;
            let lines = &mut sections[i].lines;
            let pos =
                locate(lines, kw, indexed, key).ok_or((404, format!("{kw} {key} not found")))?;
            if !indexed && child_key(kw, &line) != *key {
                return Err((400, "name: does not match the path".into()));
            }
            lines[pos] = line;
        }
        Edit::DeleteChild {
            kind,
            parent,
            coll,
            key,
        } => {
            let (kw, indexed) =
                child_info(kind, coll).ok_or((404, format!("no {coll} in a {kind}")))?;
            let i =
                find(&sections, kind, parent).ok_or((404, format!("{kind} {parent} not found")))?;
            let lines = &mut sections[i].lines;
            let pos =
                locate(lines, kw, indexed, key).ok_or((404, format!("{kw} {key} not found")))?;
            lines.remove(pos);
        }
    }
    Ok(write_sections(sections))
}

fn locate(lines: &[Vec<String>], kw: &str, indexed: bool, key: &str) -> Option<usize> {
    if indexed {
        let n: usize = key.parse().ok()?;
        (0..lines.len()).filter(|j| lines[*j][0] == kw).nth(n)
    } else {
        lines
            .iter()
            .position(|l| l[0] == kw && child_key(kw, l) == key)
    }
}

// ---- runtime ----

/// Runtime fields (dataplaneapi `runtimeSupportedServerFields`).
const RUNTIME_FIELDS: &[&str] = &[
    "weight",
    "address",
    "port",
    "maintenance",
    "agent-check",
    "agent-addr",
    "agent-send",
    "health_check_port",
];

/// The runtime commands that apply a server change, when every changed field is a runtime
/// field; `None` when the change needs a reload.
fn runtime_commands(
    backend: &str,
    old: &Map<String, Value>,
    new: &Map<String, Value>,
) -> Option<Vec<String>> {
    let keys: std::collections::BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    let changed: Vec<&String> = keys
        .into_iter()
        .filter(|k| old.get(*k) != new.get(*k))
        .collect();
    if changed.is_empty()
        || changed
            .iter()
            .any(|k| !RUNTIME_FIELDS.contains(&k.as_str()))
    {
        return None;
    }
    let name = new.get("name")?.as_str()?;
    let target = format!("{backend}/{name}");
    let mut cmds = Vec::new();
    let mut addr_done = false;
    for k in changed {
        match k.as_str() {
            "weight" => cmds.push(format!(
                "set server {target} weight {}",
                new.get("weight")?.as_i64()?
            )),
            "address" | "port" if !addr_done => {
                addr_done = true;
                let addr = new.get("address")?.as_str()?;
                match new.get("port").and_then(Value::as_i64) {
                    Some(p) => cmds.push(format!("set server {target} addr {addr} port {p}")),
                    None => cmds.push(format!("set server {target} addr {addr}")),
                }
            }
            "address" | "port" => {}
            "maintenance" => {
                let maint = new.get("maintenance").and_then(Value::as_str) == Some("enabled");
                cmds.push(format!(
                    "set server {target} state {}",
                    if maint { "maint" } else { "ready" }
                ));
            }
            "health_check_port" => cmds.push(format!(
                "set server {target} check-port {}",
                new.get("health_check_port")?.as_i64()?
            )),
            "agent-check" => match new.get("agent-check").and_then(Value::as_str) {
                Some("enabled") => cmds.push(format!("enable agent {target}")),
                Some("disabled") => cmds.push(format!("disable agent {target}")),
                _ => {}
            },
            "agent-addr" => cmds.push(format!(
                "set server {target} agent-addr {}",
                new.get("agent-addr")?.as_str()?
            )),
            "agent-send" => cmds.push(format!(
                "set server {target} agent-send {}",
                new.get("agent-send")?.as_str()?
            )),
            _ => return None,
        }
    }
    Some(cmds)
}

/// The admin stats socket of the stored configuration, on the host (the runtime API the real
/// Dataplane API is configured with).
fn admin_socket(core: &PodCore, text: &str) -> Option<std::path::PathBuf> {
    let sections = read_sections(text);
    let global = sections.iter().find(|s| s.kind == "global")?;
    global.lines.iter().find_map(|l| {
        (l.len() >= 3
            && l[0] == "stats"
            && l[1] == "socket"
            && l.windows(2).any(|w| w[0] == "level" && w[1] == "admin"))
        .then(|| core.fs.host_path(&l[2]))
        .flatten()
    })
}

/// Sends runtime commands; `Err` at the first one HAProxy does not take.
async fn runtime(core: &PodCore, sock: &std::path::Path, cmds: &[String]) -> Result<(), String> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    if core.stand_in {
        return Ok(());
    }
    for c in cmds {
        let mut s = tokio::net::UnixStream::connect(sock)
            .await
            .map_err(|e| e.to_string())?;
        s.write_all(format!("{c}\n").as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        s.shutdown().await.map_err(|e| e.to_string())?;
        let mut out = String::new();
        tokio::time::timeout(
            std::time::Duration::from_secs(5),
            s.read_to_string(&mut out),
        )
        .await
        .map_err(|_| "runtime API timed out".to_owned())?
        .map_err(|e| e.to_string())?;
        let out = out.trim();
        // `set server` answers nothing on success, or an informational line for addr changes.
        let ok = out.is_empty()
            || out.starts_with("IP changed")
            || out.contains("no need to change")
            || out.starts_with("port changed");
        if !ok {
            return Err(format!("{c}: {out}"));
        }
    }
    Ok(())
}

// ---- handlers ----

fn target(q: &HashMap<String, String>) -> Result<Result<u64, String>, Response> {
    match (q.get("transaction_id"), q.get("version")) {
        (Some(_), Some(_)) => Err(error(400, "specify either version or transaction_id")),
        (Some(t), None) => Ok(Err(t.clone())),
        (None, Some(v)) => v
            .parse::<u64>()
            .map(Ok)
            .map_err(|_| error(400, format!("invalid version: {v}"))),
        (None, None) => Err(error(400, "version or transaction not specified")),
    }
}

fn with_reload(mut r: Response, id: &str) -> Response {
    if let Ok(v) = HeaderValue::from_str(id) {
        r.headers_mut().insert("reload-id", v);
    }
    r
}

/// Runs one edit: in a transaction (202), or now at `version` (module doc).
async fn run(
    core: Arc<PodCore>,
    q: HashMap<String, String>,
    edit: Edit,
    answer: Value,
) -> Response {
    let t = match target(&q) {
        Ok(t) => t,
        Err(r) => return r,
    };
    match t {
        Err(txn_id) => {
            let mut txns = core.transactions.lock().unwrap_or_else(|p| p.into_inner());
            let Some(txn) = txns.get_mut(&txn_id) else {
                return error(404, format!("transaction {txn_id} does not exist"));
            };
            if txn.status != "in_progress" {
                return error(406, format!("transaction {txn_id} is {}", txn.status));
            }
            match apply(&txn.text, &edit) {
                Ok(text) => {
                    txn.text = text;
                    (StatusCode::ACCEPTED, axum::Json(answer)).into_response()
                }
                Err((s, m)) => error(s, m),
            }
        }
        Ok(version) => {
            let mut st = core.cfg.lock().await;
            let current = core.version();
            if version != current {
                return error(
                    409,
                    format!(
                        "version in configuration file is {current}, given version is {version}"
                    ),
                );
            }
            let on_disk = super::strip_meta(&core.read_config());
            let text = match apply(&on_disk, &edit) {
                Ok(t) => t,
                Err((s, m)) => return error(s, m),
            };
            if let Err(m) = core.validate(&text).await {
                return error(400, m);
            }
            // Runtime path: a replace of an existing backend server in runtime fields only.
            let commands = match &edit {
                Edit::ReplaceChild {
                    kind,
                    parent,
                    coll,
                    key,
                    body,
                } if kind == "backend" && coll == "servers" => {
                    let old = read_sections(&on_disk)
                        .into_iter()
                        .find(|s| s.kind == "backend" && s.name == *parent)
                        .and_then(|s| {
                            s.lines
                                .into_iter()
                                .find(|l| l[0] == "server" && l.get(1) == Some(key))
                        })
                        .and_then(|l| server_model_of(&l));
                    let new = body.as_object().cloned();
                    match (old, new) {
                        (Some(o), Some(n)) => runtime_commands(parent, &o, &n),
                        _ => None,
                    }
                }
                _ => None,
            };
            let new_version = current + 1;
            if let Err(e) = core.write_config(&with_version(&text, new_version)) {
                return error(500, format!("writing configuration: {e}"));
            }
            core.version.store(new_version, Ordering::SeqCst);
            if let Some(cmds) = commands
                && let Some(sock) = admin_socket(&core, &text)
                && runtime(&core, &sock, &cmds).await.is_ok()
            {
                drop(st);
                return (StatusCode::OK, axum::Json(answer)).into_response();
            }
            let _ = &mut st;
            drop(st);
            let id = core.schedule_reload();
            with_reload(
                (StatusCode::ACCEPTED, axum::Json(answer)).into_response(),
                &id,
            )
        }
    }
}

type Q = Query<HashMap<String, String>>;

fn body_of(bytes: &axum::body::Bytes) -> Result<Value, Response> {
    serde_json::from_slice(bytes).map_err(|e| error(400, format!("invalid JSON body: {e}")))
}

async fn create_section(
    State(core): State<Arc<PodCore>>,
    Path(coll): Path<String>,
    q: Q,
    bytes: axum::body::Bytes,
) -> Response {
    let Some(kind) = section_kind(&coll) else {
        return error(404, "not found");
    };
    let body = match body_of(&bytes) {
        Ok(b) => b,
        Err(r) => return r,
    };
    run(
        core,
        q.0,
        Edit::CreateSection {
            kind: kind.into(),
            body: body.clone(),
        },
        body,
    )
    .await
}

async fn replace_section(
    State(core): State<Arc<PodCore>>,
    Path((coll, name)): Path<(String, String)>,
    q: Q,
    bytes: axum::body::Bytes,
) -> Response {
    let Some(kind) = section_kind(&coll) else {
        return error(404, "not found");
    };
    let body = match body_of(&bytes) {
        Ok(b) => b,
        Err(r) => return r,
    };
    run(
        core,
        q.0,
        Edit::ReplaceSection {
            kind: kind.into(),
            name,
            body: body.clone(),
        },
        body,
    )
    .await
}

async fn delete_section(
    State(core): State<Arc<PodCore>>,
    Path((coll, name)): Path<(String, String)>,
    q: Q,
) -> Response {
    let Some(kind) = section_kind(&coll) else {
        return error(404, "not found");
    };
    run(
        core,
        q.0,
        Edit::DeleteSection {
            kind: kind.into(),
            name,
        },
        Value::Null,
    )
    .await
}

async fn create_child(
    State(core): State<Arc<PodCore>>,
    Path((coll, parent, child)): Path<(String, String, String)>,
    q: Q,
    bytes: axum::body::Bytes,
) -> Response {
    let Some(kind) = section_kind(&coll) else {
        return error(404, "not found");
    };
    let body = match body_of(&bytes) {
        Ok(b) => b,
        Err(r) => return r,
    };
    run(
        core,
        q.0,
        Edit::CreateChild {
            kind: kind.into(),
            parent,
            coll: child,
            index: None,
            body: body.clone(),
        },
        body,
    )
    .await
}

async fn create_child_at(
    State(core): State<Arc<PodCore>>,
    Path((coll, parent, child, key)): Path<(String, String, String, String)>,
    q: Q,
    bytes: axum::body::Bytes,
) -> Response {
    let Some(kind) = section_kind(&coll) else {
        return error(404, "not found");
    };
    if child_info(kind, &child).is_none_or(|(_, indexed)| !indexed) {
        return error(405, "method not allowed");
    }
    let Ok(index) = key.parse::<usize>() else {
        return error(400, "index must be a number");
    };
    let body = match body_of(&bytes) {
        Ok(b) => b,
        Err(r) => return r,
    };
    run(
        core,
        q.0,
        Edit::CreateChild {
            kind: kind.into(),
            parent,
            coll: child,
            index: Some(index),
            body: body.clone(),
        },
        body,
    )
    .await
}

async fn replace_child(
    State(core): State<Arc<PodCore>>,
    Path((coll, parent, child, key)): Path<(String, String, String, String)>,
    q: Q,
    bytes: axum::body::Bytes,
) -> Response {
    let Some(kind) = section_kind(&coll) else {
        return error(404, "not found");
    };
    let body = match body_of(&bytes) {
        Ok(b) => b,
        Err(r) => return r,
    };
    run(
        core,
        q.0,
        Edit::ReplaceChild {
            kind: kind.into(),
            parent,
            coll: child,
            key,
            body: body.clone(),
        },
        body,
    )
    .await
}

async fn delete_child(
    State(core): State<Arc<PodCore>>,
    Path((coll, parent, child, key)): Path<(String, String, String, String)>,
    q: Q,
) -> Response {
    let Some(kind) = section_kind(&coll) else {
        return error(404, "not found");
    };
    run(
        core,
        q.0,
        Edit::DeleteChild {
            kind: kind.into(),
            parent,
            coll: child,
            key,
        },
        Value::Null,
    )
    .await
}

/// The text a read sees: the transaction's copy or the file.
fn read_text(core: &PodCore, q: &HashMap<String, String>) -> Result<String, Response> {
    match q.get("transaction_id") {
        Some(t) => core
            .transactions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(t)
            .map(|x| x.text.clone())
            .ok_or_else(|| error(404, format!("transaction {t} does not exist"))),
        None => Ok(super::strip_meta(&core.read_config())),
    }
}

async fn list_sections(
    State(core): State<Arc<PodCore>>,
    Path(coll): Path<String>,
    q: Q,
) -> Response {
    let Some(kind) = section_kind(&coll) else {
        return error(404, "not found");
    };
    let text = match read_text(&core, &q.0) {
        Ok(t) => t,
        Err(r) => return r,
    };
    let names: Vec<Value> = read_sections(&text)
        .into_iter()
        .filter(|s| s.kind == kind)
        .map(|s| json!({"name": s.name}))
        .collect();
    axum::Json(names).into_response()
}

async fn get_section(
    State(core): State<Arc<PodCore>>,
    Path((coll, name)): Path<(String, String)>,
    q: Q,
) -> Response {
    let Some(kind) = section_kind(&coll) else {
        return error(404, "not found");
    };
    let text = match read_text(&core, &q.0) {
        Ok(t) => t,
        Err(r) => return r,
    };
    match read_sections(&text)
        .into_iter()
        .find(|s| s.kind == kind && s.name == name)
    {
        Some(_) => axum::Json(json!({"name": name})).into_response(),
        None => error(404, format!("{kind} {name} not found")),
    }
}

async fn list_children(
    State(core): State<Arc<PodCore>>,
    Path((coll, parent, child)): Path<(String, String, String)>,
    q: Q,
) -> Response {
    let Some(kind) = section_kind(&coll) else {
        return error(404, "not found");
    };
    let Some((kw, _)) = child_info(kind, &child) else {
        return error(404, "not found");
    };
    let text = match read_text(&core, &q.0) {
        Ok(t) => t,
        Err(r) => return r,
    };
    let Some(s) = read_sections(&text)
        .into_iter()
        .find(|s| s.kind == kind && s.name == parent)
    else {
        return error(404, format!("{kind} {parent} not found"));
    };
    let lines: Vec<Value> = s
        .lines
        .iter()
        .filter(|l| l[0] == kw)
        .map(|l| match kw {
            "server" => {
                server_model_of(l).map_or_else(|| json!({"line": l.join(" ")}), Value::Object)
            }
            _ => json!({"line": l.join(" ")}),
        })
        .collect();
    axum::Json(lines).into_response()
}

async fn get_child(
    State(core): State<Arc<PodCore>>,
    Path((coll, parent, child, key)): Path<(String, String, String, String)>,
    q: Q,
) -> Response {
    let Some(kind) = section_kind(&coll) else {
        return error(404, "not found");
    };
    let Some((kw, indexed)) = child_info(kind, &child) else {
        return error(404, "not found");
    };
    let text = match read_text(&core, &q.0) {
        Ok(t) => t,
        Err(r) => return r,
    };
    let Some(s) = read_sections(&text)
        .into_iter()
        .find(|s| s.kind == kind && s.name == parent)
    else {
        return error(404, format!("{kind} {parent} not found"));
    };
    match locate(&s.lines, kw, indexed, &key) {
        Some(i) if kw == "server" => {
            axum::Json(server_model_of(&s.lines[i]).map_or(Value::Null, Value::Object))
                .into_response()
        }
        Some(i) => axum::Json(json!({"line": s.lines[i].join(" ")})).into_response(),
        None => error(404, format!("{kw} {key} not found")),
    }
}

fn txn_json(id: &str, t: &Txn) -> Value {
    json!({"id": id, "_version": t.version, "status": t.status})
}

async fn start_transaction(State(core): State<Arc<PodCore>>, q: Q) -> Response {
    let Some(v) = q.get("version") else {
        return error(400, "version not specified");
    };
    let Ok(v) = v.parse::<u64>() else {
        return error(400, format!("invalid version: {v}"));
    };
    let _st = core.cfg.lock().await;
    let current = core.version();
    if v != current {
        return error(
            409,
            format!("version in configuration file is {current}, given version is {v}"),
        );
    }
    let mut txns = core.transactions.lock().unwrap_or_else(|p| p.into_inner());
    // dataplaneapi --max-open-transactions (default 20): 429 above it.
    if txns.values().filter(|t| t.status == "in_progress").count() >= 20 {
        return error(
            429,
            "cannot start a new transaction: too many open transactions",
        );
    }
    let id = format!(
        "{:08x}-{:04x}-4000-8000-{:012x}",
        core.next_txn_id(),
        v & 0xffff,
        txns.len()
    );
    let t = Txn {
        version: v,
        text: super::strip_meta(&core.read_config()),
        status: "in_progress",
    };
    let body = txn_json(&id, &t);
    txns.insert(id, t);
    (StatusCode::CREATED, axum::Json(body)).into_response()
}

async fn list_transactions(State(core): State<Arc<PodCore>>) -> Response {
    let txns = core.transactions.lock().unwrap_or_else(|p| p.into_inner());
    axum::Json(
        txns.iter()
            .map(|(id, t)| txn_json(id, t))
            .collect::<Vec<_>>(),
    )
    .into_response()
}

async fn get_transaction(State(core): State<Arc<PodCore>>, Path(id): Path<String>) -> Response {
    let txns = core.transactions.lock().unwrap_or_else(|p| p.into_inner());
    match txns.get(&id) {
        Some(t) => axum::Json(txn_json(&id, t)).into_response(),
        None => error(404, format!("transaction {id} does not exist")),
    }
}

async fn delete_transaction(State(core): State<Arc<PodCore>>, Path(id): Path<String>) -> Response {
    let removed = core
        .transactions
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&id);
    match removed {
        Some(_) => StatusCode::NO_CONTENT.into_response(),
        None => error(404, format!("transaction {id} does not exist")),
    }
}

async fn commit_transaction(State(core): State<Arc<PodCore>>, Path(id): Path<String>) -> Response {
    let st = core.cfg.lock().await;
    let txn = {
        let txns = core.transactions.lock().unwrap_or_else(|p| p.into_inner());
        match txns.get(&id) {
            Some(t) => t.clone(),
            None => return error(404, format!("transaction {id} does not exist")),
        }
    };
    if txn.status != "in_progress" {
        return error(406, format!("transaction {id} is {}", txn.status));
    }
    let current = core.version();
    if txn.version != current {
        if let Some(t) = core
            .transactions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(&id)
        {
            t.status = "outdated";
        }
        return error(
            409,
            format!(
                "version in configuration file is {current}, given version is {}",
                txn.version
            ),
        );
    }
    if let Err(m) = core.validate(&txn.text).await {
        return error(400, m);
    }
    let new_version = current + 1;
    if let Err(e) = core.write_config(&with_version(&txn.text, new_version)) {
        return error(500, format!("writing configuration: {e}"));
    }
    core.version.store(new_version, Ordering::SeqCst);
    {
        let mut txns = core.transactions.lock().unwrap_or_else(|p| p.into_inner());
        txns.remove(&id);
        for t in txns.values_mut() {
            if t.version <= new_version {
                t.status = "outdated";
            }
        }
    }
    drop(st);
    let id_r = core.schedule_reload();
    let body = json!({"id": id, "_version": txn.version, "status": "success"});
    with_reload(
        (StatusCode::ACCEPTED, axum::Json(body)).into_response(),
        &id_r,
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn api_layout_and_edits() {
        let text = "global\n    stats socket /var/run/haproxy.sock level admin\ndefaults\n  mode http\nbackend web\n    server srv1 10.0.0.1:80 weight 100 check # c\n    balance roundrobin\n";
        let out = apply(text, &Edit::ReplaceChild {
            kind: "backend".into(),
            parent: "web".into(),
            coll: "servers".into(),
            key: "srv1".into(),
            body: json!({"name": "srv1", "address": "10.0.0.2", "port": 81, "weight": 5, "check": "enabled", "inter": 2000}),
        })
        .unwrap();
        assert!(out.contains("\nbackend web\n  balance roundrobin\n  server srv1 10.0.0.2:81 check inter 2s weight 5\n"), "{out}");
        assert!(
            out.contains("\ndefaults unnamed_defaults_1\n  mode http\n"),
            "{out}"
        );
        let err = apply(
            text,
            &Edit::CreateChild {
                kind: "backend".into(),
                parent: "web".into(),
                coll: "servers".into(),
                index: None,
                body: json!({"name": "srv2", "address": "10.0.0.3", "bogus": 1}),
            },
        )
        .unwrap_err();
        assert_eq!(err.0, 400);
        let old = server_model_of(&tokenize("server srv1 10.0.0.1:80 weight 100 check")).unwrap();
        let mut new = old.clone();
        new.insert("weight".into(), json!(7));
        assert_eq!(
            runtime_commands("web", &old, &new),
            Some(vec!["set server web/srv1 weight 7".to_owned()])
        );
        new.insert("inter".into(), json!(1000));
        assert_eq!(runtime_commands("web", &old, &new), None);
    }
}
