//! The Dataplane API's configuration objects of backends and frontends: sections, rules, ACLs,
//! backend switching rules, and the lines that map to them (module doc of `structure`).

use std::fmt;

use serde_json::{Map, Value, json};

use super::parse::{NoModel, config_word, time_ms};
use super::server::{bind_model, plain, server_model, server_template_model};

/// A JSON body of a Dataplane configuration object (the API's model: `server`, `bind`,
/// `backend`, ...). Holds no floating-point numbers, so equality is total.
#[derive(Clone, Debug, PartialEq)]
pub struct ObjectBody(pub Value);

impl Eq for ObjectBody {}

impl fmt::Display for ObjectBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Where a child object lives: `backends/{name}` or `frontends/{name}`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Parent {
    /// `backend` or `frontend`.
    pub kind: ParentKind,
    /// The section's name.
    pub name: String,
}

/// The modelled section kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ParentKind {
    /// `backend` (`.../configuration/backends`).
    Backend,
    /// `frontend` (`.../configuration/frontends`).
    Frontend,
}

impl ParentKind {
    /// The collection segment under `.../configuration/`.
    #[must_use]
    pub fn collection(self) -> &'static str {
        match self {
            ParentKind::Backend => "backends",
            ParentKind::Frontend => "frontends",
        }
    }

    pub(super) fn keyword(self) -> &'static str {
        match self {
            ParentKind::Backend => "backend",
            ParentKind::Frontend => "frontend",
        }
    }

    pub(super) fn of(kind: &str) -> Option<ParentKind> {
        match kind {
            "backend" => Some(ParentKind::Backend),
            "frontend" => Some(ParentKind::Frontend),
            _ => None,
        }
    }
}

/// The modelled child object kinds (collection under the parent).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ChildKind {
    /// `servers/{name}`.
    Server,
    /// `server_templates/{prefix}`.
    ServerTemplate,
    /// `binds/{name}`.
    Bind,
    /// `acls/{index}`.
    Acl,
    /// `http_request_rules/{index}`.
    HttpRequestRule,
    /// `http_response_rules/{index}`.
    HttpResponseRule,
    /// `backend_switching_rules/{index}`.
    BackendSwitchingRule,
}

impl ChildKind {
    /// The collection segment under the parent.
    #[must_use]
    pub fn collection(self) -> &'static str {
        match self {
            ChildKind::Server => "servers",
            ChildKind::ServerTemplate => "server_templates",
            ChildKind::Bind => "binds",
            ChildKind::Acl => "acls",
            ChildKind::HttpRequestRule => "http_request_rules",
            ChildKind::HttpResponseRule => "http_response_rules",
            ChildKind::BackendSwitchingRule => "backend_switching_rules",
        }
    }

    /// True for the kinds addressed by index (ordered lists).
    #[must_use]
    pub fn indexed(self) -> bool {
        matches!(
            self,
            ChildKind::Acl
                | ChildKind::HttpRequestRule
                | ChildKind::HttpResponseRule
                | ChildKind::BackendSwitchingRule
        )
    }
}

/// How a child is addressed: by name (servers, templates, binds) or by index (rules).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ChildKey {
    /// Its name (a server template's prefix).
    Name(String),
    /// Its position in its list, from 0.
    Index(u32),
}

impl fmt::Display for ChildKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChildKey::Name(n) => f.write_str(n),
            ChildKey::Index(i) => write!(f, "{i}"),
        }
    }
}

/// A rule's condition: `if`/`unless` and the test, its words as HAProxy must read them
/// ([`config_word`]) joined by one space.
type Cond<'a> = Option<(&'a str, String)>;

/// Splits `words` at the first `if`/`unless` into (action words, condition).
fn split_cond(words: &[String]) -> Result<(&[String], Cond<'_>), NoModel> {
    match words.iter().position(|w| w == "if" || w == "unless") {
        None => Ok((words, None)),
        Some(i) => {
            let test = &words[i + 1..];
            if test.is_empty() {
                return Err(format!("{} without a condition", words[i]));
            }
            Ok((&words[..i], Some((words[i].as_str(), text(test)?))))
        }
    }
}

/// Words as HAProxy must read them ([`config_word`]), joined by one space.
fn text(words: &[String]) -> Result<String, NoModel> {
    Ok(words
        .iter()
        .map(|w| config_word(w))
        .collect::<Result<Vec<_>, _>>()?
        .join(" "))
}

fn with_cond(mut obj: Map<String, Value>, cond: Cond<'_>) -> Value {
    if let Some((c, t)) = cond {
        obj.insert("cond".into(), json!(c));
        obj.insert("cond_test".into(), json!(t));
    }
    Value::Object(obj)
}

/// `http-request` / `http-response` rules (the kinds listed in the module doc).
fn http_rule_model(words: &[String], response: bool) -> Result<Value, NoModel> {
    let (action, cond) = split_cond(&words[1..])?;
    let mut obj = Map::new();
    let kind = action.first().map_or("", String::as_str);
    obj.insert("type".into(), json!(kind));
    let rest = &action[1.min(action.len())..];
    let bad = || format!("{} {kind}", words[0]);
    match (kind, rest.len()) {
        ("allow", 0) => {}
        ("deny", 0) => {}
        ("deny", 2) if rest[0] == "deny_status" => {
            let n: i64 = rest[1].parse().map_err(|_| bad())?;
            obj.insert("deny_status".into(), json!(n));
        }
        ("set-header" | "add-header", 2) => {
            obj.insert("hdr_name".into(), json!(config_word(&rest[0])?));
            obj.insert("hdr_format".into(), json!(config_word(&rest[1])?));
        }
        ("del-header", 1) => {
            obj.insert("hdr_name".into(), json!(config_word(&rest[0])?));
        }
        ("redirect", 2 | 4) if !response => {
            obj.insert("redir_type".into(), json!(plain(&rest[0])?));
            obj.insert("redir_value".into(), json!(config_word(&rest[1])?));
            if rest.len() == 4 {
                if rest[2] != "code" {
                    return Err(bad());
                }
                let n: i64 = rest[3].parse().map_err(|_| bad())?;
                obj.insert("redir_code".into(), json!(n));
            }
        }
        ("return", _) if !response => {
            let mut i = 0;
            while i < rest.len() {
                let v = rest.get(i + 1).ok_or_else(bad)?;
                match rest[i].as_str() {
                    "status" => {
                        let n: i64 = v.parse().map_err(|_| bad())?;
                        obj.insert("return_status_code".into(), json!(n));
                    }
                    "content-type" => {
                        obj.insert("return_content_type".into(), json!(config_word(v)?));
                    }
                    f @ ("string" | "lf-string" | "file" | "lf-file" | "errorfile"
                    | "errorfiles") => {
                        obj.insert("return_content_format".into(), json!(f));
                        obj.insert("return_content".into(), json!(config_word(v)?));
                    }
                    _ => return Err(bad()),
                }
                i += 2;
            }
        }
        _ => return Err(bad()),
    }
    Ok(with_cond(obj, cond))
}

fn acl_model(words: &[String]) -> Result<Value, NoModel> {
    if words.len() < 3 {
        return Err("acl line".into());
    }
    let mut obj = Map::new();
    obj.insert("acl_name".into(), json!(plain(&words[1])?));
    obj.insert("criterion".into(), json!(config_word(&words[2])?));
    obj.insert("value".into(), json!(text(&words[3..])?));
    Ok(Value::Object(obj))
}

fn switching_model(words: &[String]) -> Result<Value, NoModel> {
    let (target, cond) = split_cond(&words[1..])?;
    if target.len() != 1 {
        return Err("use_backend line".into());
    }
    let mut obj = Map::new();
    obj.insert("name".into(), json!(plain(&target[0])?));
    Ok(with_cond(obj, cond))
}

/// A child object line of a modelled section: (kind, model), or `Ok(None)` when the line is
/// an attribute (or not a child kind at all).
pub(super) fn child_model(
    parent: ParentKind,
    words: &[String],
) -> Result<Option<(ChildKind, Value)>, NoModel> {
    let w0 = words[0].as_str();
    Ok(Some(match (parent, w0) {
        (ParentKind::Backend, "server") => (ChildKind::Server, server_model(words)?),
        (ParentKind::Backend, "server-template") => {
            (ChildKind::ServerTemplate, server_template_model(words)?)
        }
        (ParentKind::Frontend, "bind") => (ChildKind::Bind, bind_model(words)?),
        (ParentKind::Frontend, "use_backend") => {
            (ChildKind::BackendSwitchingRule, switching_model(words)?)
        }
        (_, "acl") => (ChildKind::Acl, acl_model(words)?),
        (_, "http-request") => (ChildKind::HttpRequestRule, http_rule_model(words, false)?),
        (_, "http-response") => (ChildKind::HttpResponseRule, http_rule_model(words, true)?),
        _ => return Ok(None),
    }))
}

/// Whether a line is a child kind of a modelled section (whatever its parameters).
pub(super) fn is_child_line(parent: ParentKind, w0: &str) -> bool {
    matches!(
        (parent, w0),
        (ParentKind::Backend, "server" | "server-template")
            | (ParentKind::Frontend, "bind" | "use_backend")
            | (_, "acl" | "http-request" | "http-response")
    )
}

/// An attribute line into the section model; `Err` when not modelled.
pub(super) fn set_attribute(
    parent: ParentKind,
    obj: &mut Map<String, Value>,
    words: &[String],
) -> Result<(), NoModel> {
    let w = |i: usize| words.get(i).map(String::as_str);
    let timeout = |obj: &mut Map<String, Value>, field: &str| -> Result<(), NoModel> {
        let v = w(2).ok_or("timeout without a value")?;
        let ms = time_ms(v).ok_or_else(|| format!("timeout {v}"))?;
        obj.insert(field.into(), json!(ms));
        Ok(())
    };
    let unmodelled = || format!("{} {}", parent.keyword(), words.join(" "));
    match (parent, w(0), w(1), words.len()) {
        (_, Some("mode"), Some(m @ ("http" | "tcp")), 2) => {
            obj.insert("mode".into(), json!(m));
        }
        (
            ParentKind::Backend,
            Some("balance"),
            Some(a @ ("roundrobin" | "static-rr" | "leastconn" | "first" | "source" | "random")),
            2,
        ) => {
            obj.insert("balance".into(), json!({ "algorithm": a }));
        }
        (ParentKind::Frontend, Some("maxconn"), Some(n), 2) => {
            let n: i64 = n.parse().map_err(|_| unmodelled())?;
            obj.insert("maxconn".into(), json!(n));
        }
        (ParentKind::Frontend, Some("default_backend"), Some(b), 2) => {
            obj.insert("default_backend".into(), json!(plain(b)?));
        }
        (ParentKind::Frontend, Some("option"), Some("httplog"), 2) => {
            obj.insert("httplog".into(), json!(true));
        }
        (_, Some("timeout"), Some(t), 3) => {
            let field = match (parent, t) {
                (ParentKind::Backend, "connect") => "connect_timeout",
                (ParentKind::Backend, "server") => "server_timeout",
                (ParentKind::Backend, "queue") => "queue_timeout",
                (ParentKind::Backend, "check") => "check_timeout",
                (ParentKind::Backend, "tunnel") => "tunnel_timeout",
                (ParentKind::Frontend, "client") => "client_timeout",
                (_, "http-request") => "http_request_timeout",
                (_, "http-keep-alive") => "http_keep_alive_timeout",
                _ => return Err(unmodelled()),
            };
            timeout(obj, field)?;
        }
        _ => return Err(unmodelled()),
    }
    Ok(())
}

/// The model of a line of a modelled section, when it has one (used to normalise).
pub(super) fn model_line(section_kind: &str, words: &[String]) -> Result<Option<Value>, NoModel> {
    match ParentKind::of(section_kind) {
        Some(p) => Ok(child_model(p, words)?.map(|(_, v)| v)),
        None if words[0] == "server" => server_model(words).map(Some),
        None if words[0] == "server-template" => server_template_model(words).map(Some),
        None => Ok(None),
    }
}

pub(super) fn child_kind(parent: ParentKind, w0: &str) -> ChildKind {
    match (parent, w0) {
        (_, "server") => ChildKind::Server,
        (_, "server-template") => ChildKind::ServerTemplate,
        (_, "bind") => ChildKind::Bind,
        (_, "use_backend") => ChildKind::BackendSwitchingRule,
        (_, "acl") => ChildKind::Acl,
        (_, "http-request") => ChildKind::HttpRequestRule,
        _ => ChildKind::HttpResponseRule,
    }
}
