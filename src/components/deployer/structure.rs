//! The structural model of an HAProxy configuration and the diff between what a pod runs and
//! the render, as Dataplane API configuration changes. Pure: no I/O.
//!
//! ```text
//!  text ─► parse ─► ParsedConfig: sections keyed by (kind, name)
//!                     each: lines in families (keyword prefix), each line normalised
//!  equal(running, render): family by family, order only within a family
//!  diff(running, render) ─► Changes([ConfigChange]) in apply order
//!                         | Unmodelled { what }  (the change touches something not modelled)
//! ```
//!
//! What never counts as a change: comments, blank lines, indentation and spacing, quoting that
//! HAProxy resolves the same (`"text/plain"` = `text/plain`), the Dataplane API's own header
//! lines (`# _version=`, `# _md5hash=`: comments), the order of sections, the order of lines of
//! different families inside a section (HAProxy evaluates each rule set on its own; the real
//! Dataplane API writes the keywords in its parser's fixed sequence), the order of server
//! parameters, time units (`5000ms` = `5s`), an unnamed `defaults` against the
//! `defaults unnamed_defaults_N` the API names it, and a `from` naming the defaults section that
//! applies anyway. This is the layout the real API rewrites `haproxy.cfg` into after any write
//! through its configuration endpoints, so a drift check after a fine-grained change finds no
//! difference.
//!
//! Families: a line's family is its keyword (`http-request`, `use_backend`, `acl`), with the
//! second word for `timeout`, `option`/`no option`, `tcp-request`, `tcp-response`, `stick`,
//! `stats`, `capture`, `http-check`... and the object's name for keyed objects (`server NAME`,
//! `server-template PREFIX`). Lines of one family are compared in order, except binds, which
//! are compared as a set (their order does not matter to HAProxy).
//!
//! Modelled for fine-grained changes ([`diff`]):
//! - sections `backend` and `frontend`: create, delete, and replace of their attributes
//!   (backend: `mode`, `balance <simple algorithm>`, `timeout connect|server|queue|check|
//!   tunnel|http-request|http-keep-alive`; frontend: `mode`, `maxconn`, `default_backend`,
//!   `option httplog`, `timeout client|http-request|http-keep-alive`);
//! - in a backend: `server` (by name) and `server-template` (by prefix), with the server
//!   parameters of [`SERVER_PARAMS`];
//! - in a frontend: `bind` (by name: its `name` parameter, else `address:port`) with a few
//!   parameters, `use_backend` rules (by index);
//! - in both: `acl` lines, `http-request` rules (`allow`, `deny`, `return`, `set-header`,
//!   `add-header`, `del-header`, `redirect`) and `http-response` rules (`allow`, `deny`,
//!   `set-header`, `add-header`, `del-header`), by index, with an `if`/`unless` condition.
//!
//! Anything else that differs (global, defaults, listen, userlists, resolvers, peers, mailers,
//! caches, rings, http-errors and the other sections; filters, tcp rules, http-check, stick,
//! log targets, `default-server`, an unknown server parameter, a condition with quoted words,
//! ...) is [`ConfigDiff::Unmodelled`]: the sync pushes the whole configuration instead of
//! guessing a model.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::{Map, Value, json};

/// The section keywords HAProxy (2.6 to 3.x) knows.
pub const SECTION_KEYWORDS: &[&str] = &[
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

/// A section's identity: its keyword and name (`""` for `global`; unnamed `defaults` are
/// `unnamed_defaults_N`, counted from 1, as the Dataplane API names them).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SectionKey {
    /// The section keyword (`backend`).
    pub kind: String,
    /// Its name.
    pub name: String,
}

impl fmt::Display for SectionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.name.is_empty() {
            f.write_str(&self.kind)
        } else {
            write!(f, "{} {}", self.kind, self.name)
        }
    }
}

/// One configuration line, tokenised as HAProxy reads it (quotes and escapes resolved).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Line {
    /// The words, unquoted.
    pub words: Vec<String>,
}

/// One section.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Section {
    /// The `from <defaults>` it names, unless that is the defaults section that applies
    /// anyway (the last one before it).
    pub from: Option<String>,
    /// Other words of the section line after the name (kept for comparison).
    pub header: Vec<String>,
    /// Its lines, in file order.
    pub lines: Vec<Line>,
}

/// A parsed configuration: sections keyed by [`SectionKey`], sorted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ParsedConfig {
    /// Sections by key.
    pub sections: BTreeMap<SectionKey, Section>,
    /// Lines before the first section (normally none).
    pub preamble: Vec<Line>,
}

/// Splits a line into words as HAProxy does: blanks separate words, `"..."` and `'...'` quote,
/// `\` escapes one character outside single quotes, `#` outside quotes starts a comment.
#[must_use]
pub fn tokenize(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    let mut quote: Option<char> = None;
    while let Some(c) = chars.next() {
        match quote {
            Some(q) => {
                if c == q {
                    quote = None;
                } else if c == '\\' && q == '"' {
                    if let Some(n) = chars.next() {
                        cur.push(n);
                    }
                } else {
                    cur.push(c);
                }
            }
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
                    if let Some(n) = chars.next() {
                        cur.push(n);
                    }
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

/// Parses a configuration into sections (module doc).
#[must_use]
pub fn parse(text: &str) -> ParsedConfig {
    let mut out = ParsedConfig::default();
    let mut current: Option<SectionKey> = None;
    let mut unnamed_defaults = 0u32;
    let mut last_defaults: Option<String> = None;
    for raw in text.lines() {
        let words = tokenize(raw);
        if words.is_empty() {
            continue;
        }
        if SECTION_KEYWORDS.contains(&words[0].as_str()) {
            let kind = words[0].clone();
            let mut rest = words[1..].to_vec();
            let mut name = if kind == "global" || rest.is_empty() || rest[0] == "from" {
                String::new()
            } else {
                rest.remove(0)
            };
            let mut from = None;
            if rest.len() >= 2 && rest[0] == "from" {
                from = Some(rest[1].clone());
                rest.drain(..2);
            }
            if kind == "defaults" {
                if name.is_empty() {
                    unnamed_defaults += 1;
                    name = format!("unnamed_defaults_{unnamed_defaults}");
                }
                last_defaults = Some(name.clone());
            } else if from.is_some() && from == last_defaults {
                // The defaults that applies anyway (the API writes it out explicitly).
                from = None;
            }
            let key = SectionKey { kind, name };
            out.sections.entry(key.clone()).or_insert(Section {
                from,
                header: rest,
                lines: Vec::new(),
            });
            current = Some(key);
            continue;
        }
        let line = Line { words };
        match current.as_ref().and_then(|k| out.sections.get_mut(k)) {
            Some(s) => s.lines.push(line),
            None => out.preamble.push(line),
        }
    }
    out
}

/// The family of a line (module doc).
fn family(words: &[String]) -> String {
    let w0 = words[0].as_str();
    let w1 = words.get(1).map_or("", String::as_str);
    match w0 {
        "server" | "server-template" | "timeout" | "option" | "tcp-request" | "tcp-response"
        | "stick" | "stats" | "capture" | "errorfile" | "user" | "group" | "nameserver"
        | "peer" | "mailer" | "http-check" | "tcp-check" | "monitor" | "compression" => {
            format!("{w0} {w1}")
        }
        "no" if w1 == "option" => format!("option {}", words.get(2).map_or("", String::as_str)),
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
enum Norm {
    Model(String),
    Words(Vec<String>),
}

fn normalize(section_kind: &str, line: &Line) -> Norm {
    match model_line(section_kind, &line.words) {
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

fn families(section_kind: &str, s: &Section) -> BTreeMap<String, Vec<Norm>> {
    let mut out: BTreeMap<String, Vec<Norm>> = BTreeMap::new();
    for l in &s.lines {
        out.entry(family(&l.words))
            .or_default()
            .push(normalize(section_kind, l));
    }
    for (f, v) in &mut out {
        if unordered(f) {
            v.sort();
        }
    }
    out
}

fn sections_equal(key: &SectionKey, a: &Section, b: &Section) -> bool {
    a.from == b.from && a.header == b.header && families(&key.kind, a) == families(&key.kind, b)
}

/// True when `a` and `b` are the same configuration to HAProxy as far as the structural
/// comparison can tell (module doc). A false "different" is safe (a push); a false "equal" is
/// not, so everything not known to be layout is kept.
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

    fn keyword(self) -> &'static str {
        match self {
            ParentKind::Backend => "backend",
            ParentKind::Frontend => "frontend",
        }
    }

    fn of(kind: &str) -> Option<ParentKind> {
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

/// One configuration change through the Dataplane API's configuration endpoints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigChange {
    /// `POST .../{backends|frontends}`: a new section with its attributes (its children follow
    /// as [`ConfigChange::CreateChild`]).
    CreateSection {
        /// Backend or frontend.
        kind: ParentKind,
        /// Its name.
        name: String,
        /// Its attributes (the API's `backend`/`frontend` model).
        body: ObjectBody,
    },
    /// `PUT .../{backends|frontends}/{name}`: the section's attributes (children untouched).
    ReplaceSection {
        /// Backend or frontend.
        kind: ParentKind,
        /// Its name.
        name: String,
        /// Every attribute of the render's section.
        body: ObjectBody,
    },
    /// `DELETE .../{backends|frontends}/{name}` (with its children).
    DeleteSection {
        /// Backend or frontend.
        kind: ParentKind,
        /// Its name.
        name: String,
    },
    /// `POST .../{parent}/{collection}` (rules: at `index`).
    CreateChild {
        /// The section it belongs to.
        parent: Parent,
        /// What it is.
        kind: ChildKind,
        /// Its name or index.
        key: ChildKey,
        /// The API's model of it.
        body: ObjectBody,
    },
    /// `PUT .../{parent}/{collection}/{key}`.
    ReplaceChild {
        /// The section it belongs to.
        parent: Parent,
        /// What it is.
        kind: ChildKind,
        /// Its name or index.
        key: ChildKey,
        /// The API's model of the render's object.
        body: ObjectBody,
        /// For servers: the model fields that differ (sorted); a server whose differing
        /// fields are all [`RUNTIME_SERVER_FIELDS`] is applied by the real API at runtime.
        changed_fields: Vec<String>,
    },
    /// `DELETE .../{parent}/{collection}/{key}`.
    DeleteChild {
        /// The section it belongs to.
        parent: Parent,
        /// What it is.
        kind: ChildKind,
        /// Its name or index.
        key: ChildKey,
    },
}

impl ConfigChange {
    /// A short description for drift reports and logs (`server be_app/app`).
    #[must_use]
    pub fn describe(&self) -> String {
        match self {
            ConfigChange::CreateSection { kind, name, .. }
            | ConfigChange::ReplaceSection { kind, name, .. }
            | ConfigChange::DeleteSection { kind, name } => format!("{} {name}", kind.keyword()),
            ConfigChange::CreateChild {
                parent, kind, key, ..
            }
            | ConfigChange::ReplaceChild {
                parent, kind, key, ..
            }
            | ConfigChange::DeleteChild { parent, kind, key } => {
                format!("{} {}/{key}", kind.collection(), parent.name)
            }
        }
    }

    /// True for a replace of an existing server whose changed fields are all ones the real
    /// Dataplane API applies through HAProxy's runtime API without a reload
    /// ([`RUNTIME_SERVER_FIELDS`]).
    #[must_use]
    pub fn is_runtime_server_update(&self) -> bool {
        match self {
            ConfigChange::ReplaceChild {
                kind: ChildKind::Server,
                parent:
                    Parent {
                        kind: ParentKind::Backend,
                        ..
                    },
                changed_fields,
                ..
            } => {
                !changed_fields.is_empty()
                    && changed_fields
                        .iter()
                        .all(|f| RUNTIME_SERVER_FIELDS.contains(&f.as_str()))
            }
            _ => false,
        }
    }
}

/// The server model fields the real Dataplane API changes through HAProxy's runtime API
/// without a reload when they are the only ones that differ (dataplaneapi
/// `handlers/configuration/server/server.go`, `runtimeSupportedServerFields`: Weight,
/// Address, Port, Maintenance, AgentCheck, AgentAddr, AgentSend, HealthCheckPort).
pub const RUNTIME_SERVER_FIELDS: &[&str] = &[
    "weight",
    "address",
    "port",
    "maintenance",
    "agent-check",
    "agent-addr",
    "agent-send",
    "health_check_port",
];

/// The outcome of [`diff`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigDiff {
    /// The changes, in apply order: deletes (children first, highest index first), creates
    /// (sections first), then updates. Empty when equal.
    Changes(Vec<ConfigChange>),
    /// A difference the model does not cover; `what` names it (`global`, `backend x: filter`).
    Unmodelled {
        /// What differs and is not modelled.
        what: String,
    },
}

/// A server parameter: its keyword, whether it takes a value, the model field and how the
/// value is read.
#[derive(Clone, Copy, Debug)]
enum Param {
    /// The keyword alone sets `field` to `value` (`check` sets `check: enabled`).
    Flag(&'static str, &'static str),
    /// The keyword alone sets a boolean field true.
    Bool(&'static str),
    /// `kw <string>`.
    Str(&'static str),
    /// `kw <integer>`.
    Int(&'static str),
    /// `kw <time>`, in milliseconds.
    Time(&'static str),
}

/// The server (and server-template) parameters the model knows (client-native
/// `configuration/server.go` `parseServerParams`); any other makes the line unmodelled.
pub const SERVER_PARAMS: &[&str] = &[
    "agent-check",
    "no-agent-check",
    "backup",
    "no-backup",
    "check",
    "no-check",
    "check-ssl",
    "no-check-ssl",
    "check-send-proxy",
    "disabled",
    "enabled",
    "ssl",
    "no-ssl",
    "send-proxy",
    "no-send-proxy",
    "send-proxy-v2",
    "no-send-proxy-v2",
    "tfo",
    "no-tfo",
    "no-verifyhost",
    "ssl-reuse",
    "no-ssl-reuse",
    "tls-tickets",
    "no-tls-tickets",
    "stick",
    "non-stick",
    "allow-0rtt",
    "weight",
    "maxconn",
    "maxqueue",
    "minconn",
    "fall",
    "rise",
    "inter",
    "fastinter",
    "downinter",
    "slowstart",
    "agent-inter",
    "agent-port",
    "agent-addr",
    "agent-send",
    "addr",
    "port",
    "cookie",
    "id",
    "verify",
    "verifyhost",
    "sni",
    "alpn",
    "check-alpn",
    "check-sni",
    "proto",
    "ca-file",
    "crt",
    "crl-file",
    "resolvers",
    "resolve-prefer",
    "init-addr",
    "observe",
    "on-error",
    "on-marked-down",
    "on-marked-up",
    "error-limit",
    "track",
    "ssl-min-ver",
    "ssl-max-ver",
    "ciphers",
    "pool-max-conn",
    "pool-purge-delay",
    "max-reuse",
    "ws",
];

fn server_param(kw: &str) -> Option<Param> {
    use Param::{Bool, Flag, Int, Str, Time};
    Some(match kw {
        "agent-check" => Flag("agent-check", "enabled"),
        "no-agent-check" => Flag("agent-check", "disabled"),
        "backup" => Flag("backup", "enabled"),
        "no-backup" => Flag("backup", "disabled"),
        "check" => Flag("check", "enabled"),
        "no-check" => Flag("check", "disabled"),
        "check-ssl" => Flag("check_ssl", "enabled"),
        "no-check-ssl" => Flag("check_ssl", "disabled"),
        "check-send-proxy" => Flag("check_send_proxy", "enabled"),
        "disabled" => Flag("maintenance", "enabled"),
        "enabled" => Flag("maintenance", "disabled"),
        "ssl" => Flag("ssl", "enabled"),
        "no-ssl" => Flag("ssl", "disabled"),
        "send-proxy" => Flag("send-proxy", "enabled"),
        "no-send-proxy" => Flag("send-proxy", "disabled"),
        "send-proxy-v2" => Flag("send-proxy-v2", "enabled"),
        "no-send-proxy-v2" => Flag("send-proxy-v2", "disabled"),
        "tfo" => Flag("tfo", "enabled"),
        "no-tfo" => Flag("tfo", "disabled"),
        "no-verifyhost" => Flag("no_verifyhost", "enabled"),
        "ssl-reuse" => Flag("ssl_reuse", "enabled"),
        "no-ssl-reuse" => Flag("ssl_reuse", "disabled"),
        "tls-tickets" => Flag("tls_tickets", "enabled"),
        "no-tls-tickets" => Flag("tls_tickets", "disabled"),
        "stick" => Flag("stick", "enabled"),
        "non-stick" => Flag("stick", "disabled"),
        "allow-0rtt" => Bool("allow_0rtt"),
        "weight" => Int("weight"),
        "maxconn" => Int("maxconn"),
        "maxqueue" => Int("maxqueue"),
        "minconn" => Int("minconn"),
        "fall" => Int("fall"),
        "rise" => Int("rise"),
        "inter" => Time("inter"),
        "fastinter" => Time("fastinter"),
        "downinter" => Time("downinter"),
        "slowstart" => Time("slowstart"),
        "agent-inter" => Time("agent-inter"),
        "agent-port" => Int("agent-port"),
        "agent-addr" => Str("agent-addr"),
        "agent-send" => Str("agent-send"),
        "addr" => Str("health_check_address"),
        "port" => Int("health_check_port"),
        "cookie" => Str("cookie"),
        "id" => Int("id"),
        "verify" => Str("verify"),
        "verifyhost" => Str("verifyhost"),
        "sni" => Str("sni"),
        "alpn" => Str("alpn"),
        "check-alpn" => Str("check_alpn"),
        "check-sni" => Str("check_sni"),
        "proto" => Str("proto"),
        "ca-file" => Str("ssl_cafile"),
        "crt" => Str("ssl_certificate"),
        "crl-file" => Str("crl_file"),
        "resolvers" => Str("resolvers"),
        "resolve-prefer" => Str("resolve-prefer"),
        "init-addr" => Str("init-addr"),
        "observe" => Str("observe"),
        "on-error" => Str("on-error"),
        "on-marked-down" => Str("on-marked-down"),
        "on-marked-up" => Str("on-marked-up"),
        "error-limit" => Int("error_limit"),
        "track" => Str("track"),
        "ssl-min-ver" => Str("ssl_min_ver"),
        "ssl-max-ver" => Str("ssl_max_ver"),
        "ciphers" => Str("ciphers"),
        "pool-max-conn" => Int("pool_max_conn"),
        "pool-purge-delay" => Time("pool_purge_delay"),
        "max-reuse" => Int("max_reuse"),
        "ws" => Str("ws"),
        _ => return None,
    })
}

/// A time value in milliseconds (`500`, `500ms`, `2s`, `1m`, `1h`, `1d`); `None` for other
/// units (`us`) or a value that is not a whole number of milliseconds.
#[must_use]
pub fn time_ms(v: &str) -> Option<u64> {
    let digits: String = v.chars().take_while(char::is_ascii_digit).collect();
    let n: u64 = digits.parse().ok()?;
    let unit = &v[digits.len()..];
    let mult = match unit {
        "" | "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return None,
    };
    n.checked_mul(mult)
}

/// Why a line has no model (only for messages).
type NoModel = String;

fn set_param(
    obj: &mut Map<String, Value>,
    kw: &str,
    p: Param,
    value: Option<&str>,
) -> Result<(), NoModel> {
    let need = || value.ok_or_else(|| format!("{kw} without a value"));
    match p {
        Param::Flag(field, v) => {
            obj.insert(field.into(), json!(v));
        }
        Param::Bool(field) => {
            obj.insert(field.into(), json!(true));
        }
        Param::Str(field) => {
            obj.insert(field.into(), json!(need()?));
        }
        Param::Int(field) => {
            let v = need()?;
            let n: i64 = v.parse().map_err(|_| format!("{kw} {v}: not an integer"))?;
            obj.insert(field.into(), json!(n));
        }
        Param::Time(field) => {
            let v = need()?;
            let ms = time_ms(v).ok_or_else(|| format!("{kw} {v}: time unit"))?;
            obj.insert(field.into(), json!(ms));
        }
    }
    Ok(())
}

fn takes_value(p: Param) -> bool {
    matches!(p, Param::Str(..) | Param::Int(..) | Param::Time(..))
}

/// Server parameters into the model's fields.
fn server_params(obj: &mut Map<String, Value>, params: &[String]) -> Result<(), NoModel> {
    let mut i = 0;
    while i < params.len() {
        let kw = params[i].as_str();
        let p = server_param(kw).ok_or_else(|| format!("server parameter {kw}"))?;
        let value = if takes_value(p) {
            i += 1;
            Some(
                params
                    .get(i)
                    .map(String::as_str)
                    .ok_or_else(|| format!("{kw} without a value"))?,
            )
        } else {
            None
        };
        set_param(obj, kw, p, value)?;
        i += 1;
    }
    Ok(())
}

/// `addr:port` into (address, port); `None` port when there is none (sockets, no port).
fn split_address(a: &str) -> Result<(String, Option<i64>), NoModel> {
    if a.starts_with('/') || a.contains('@') {
        return Err(format!("address {a}"));
    }
    if let Some(rest) = a.strip_prefix('[') {
        let (host, tail) = rest.split_once(']').ok_or_else(|| format!("address {a}"))?;
        return match tail.strip_prefix(':') {
            Some(p) => Ok((host.to_owned(), Some(parse_port(p)?))),
            None if tail.is_empty() => Ok((host.to_owned(), None)),
            None => Err(format!("address {a}")),
        };
    }
    match a.matches(':').count() {
        0 => Ok((a.to_owned(), None)),
        1 => {
            let (h, p) = a.split_once(':').unwrap_or((a, ""));
            Ok((h.to_owned(), Some(parse_port(p)?)))
        }
        _ => Err(format!("address {a}")),
    }
}

fn parse_port(p: &str) -> Result<i64, NoModel> {
    p.parse::<i64>()
        .ok()
        .filter(|n| (1..=65535).contains(n))
        .ok_or_else(|| format!("port {p}"))
}

/// The `server` model of a server line (`server NAME ADDR[:PORT] params...`).
fn server_model(words: &[String]) -> Result<Value, NoModel> {
    if words.len() < 3 {
        return Err("server line".into());
    }
    let mut obj = Map::new();
    obj.insert("name".into(), json!(words[1]));
    let (address, port) = split_address(&words[2])?;
    obj.insert("address".into(), json!(address));
    if let Some(p) = port {
        obj.insert("port".into(), json!(p));
    }
    server_params(&mut obj, &words[3..])?;
    Ok(Value::Object(obj))
}

/// The `server_template` model (`server-template PREFIX NUM FQDN[:PORT] params...`).
fn server_template_model(words: &[String]) -> Result<Value, NoModel> {
    if words.len() < 4 {
        return Err("server-template line".into());
    }
    let mut obj = Map::new();
    obj.insert("prefix".into(), json!(words[1]));
    obj.insert("num_or_range".into(), json!(words[2]));
    let (fqdn, port) = split_address(&words[3])?;
    obj.insert("fqdn".into(), json!(fqdn));
    if let Some(p) = port {
        obj.insert("port".into(), json!(p));
    }
    server_params(&mut obj, &words[4..])?;
    Ok(Value::Object(obj))
}

/// The `bind` model (`bind ADDR:PORT params...`); its name is `name` or `address:port`.
fn bind_model(words: &[String]) -> Result<Value, NoModel> {
    if words.len() < 2 || words[1].contains(',') {
        return Err("bind line".into());
    }
    let a = &words[1];
    let (address, port) = match a.rfind(':') {
        Some(i) if !a.starts_with('/') && !a.contains('@') => {
            (a[..i].to_owned(), parse_port(&a[i + 1..])?)
        }
        _ => return Err(format!("bind address {a}")),
    };
    let mut obj = Map::new();
    obj.insert("address".into(), json!(address));
    obj.insert("port".into(), json!(port));
    let mut name = a.clone();
    let mut i = 2;
    while i < words.len() {
        let kw = words[i].as_str();
        let mut value = || {
            i += 1;
            words
                .get(i)
                .cloned()
                .ok_or_else(|| format!("bind {kw} without a value"))
        };
        match kw {
            "name" => name = value()?,
            "ssl" => {
                obj.insert("ssl".into(), json!(true));
            }
            "accept-proxy" => {
                obj.insert("accept_proxy".into(), json!(true));
            }
            "v4v6" => {
                obj.insert("v4v6".into(), json!(true));
            }
            "v6only" => {
                obj.insert("v6only".into(), json!(true));
            }
            "transparent" => {
                obj.insert("transparent".into(), json!(true));
            }
            "crt" => {
                obj.insert("ssl_certificate".into(), json!(value()?));
            }
            "crt-list" => {
                obj.insert("crt_list".into(), json!(value()?));
            }
            "alpn" => {
                obj.insert("alpn".into(), json!(value()?));
            }
            other => return Err(format!("bind parameter {other}")),
        }
        i += 1;
    }
    obj.insert("name".into(), json!(name));
    Ok(Value::Object(obj))
}

/// Splits `words` at the first `if`/`unless` into (action words, cond, cond_test).
/// A rule's condition: `if`/`unless` and the test, words joined by one space.
type Cond<'a> = Option<(&'a str, String)>;

fn split_cond(words: &[String]) -> Result<(&[String], Cond<'_>), NoModel> {
    match words.iter().position(|w| w == "if" || w == "unless") {
        None => Ok((words, None)),
        Some(i) => {
            let test = &words[i + 1..];
            if test.is_empty() || test.iter().any(|w| needs_quotes(w)) {
                return Err("condition with quoted words".into());
            }
            Ok((&words[..i], Some((words[i].as_str(), test.join(" ")))))
        }
    }
}

/// True when a word cannot be written back without quotes (HAProxy would split or read it
/// otherwise).
fn needs_quotes(w: &str) -> bool {
    w.is_empty()
        || w.chars()
            .any(|c| c.is_whitespace() || matches!(c, '"' | '\'' | '\\' | '#'))
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
            obj.insert("hdr_name".into(), json!(rest[0]));
            obj.insert("hdr_format".into(), json!(rest[1]));
        }
        ("del-header", 1) => {
            obj.insert("hdr_name".into(), json!(rest[0]));
        }
        ("redirect", 2 | 4) if !response => {
            obj.insert("redir_type".into(), json!(rest[0]));
            obj.insert("redir_value".into(), json!(rest[1]));
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
                        obj.insert("return_content_type".into(), json!(v));
                    }
                    f @ ("string" | "lf-string" | "file" | "lf-file" | "errorfile"
                    | "errorfiles") => {
                        obj.insert("return_content_format".into(), json!(f));
                        obj.insert("return_content".into(), json!(v));
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
    if words.len() < 3 || words[3..].iter().any(|w| needs_quotes(w)) {
        return Err("acl line".into());
    }
    let mut obj = Map::new();
    obj.insert("acl_name".into(), json!(words[1]));
    obj.insert("criterion".into(), json!(words[2]));
    obj.insert("value".into(), json!(words[3..].join(" ")));
    Ok(Value::Object(obj))
}

fn switching_model(words: &[String]) -> Result<Value, NoModel> {
    let (target, cond) = split_cond(&words[1..])?;
    if target.len() != 1 {
        return Err("use_backend line".into());
    }
    let mut obj = Map::new();
    obj.insert("name".into(), json!(target[0]));
    Ok(with_cond(obj, cond))
}

/// A child object line of a modelled section: (kind, model), or `Ok(None)` when the line is
/// an attribute (or not a child kind at all).
fn child_model(
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
fn is_child_line(parent: ParentKind, w0: &str) -> bool {
    matches!(
        (parent, w0),
        (ParentKind::Backend, "server" | "server-template")
            | (ParentKind::Frontend, "bind" | "use_backend")
            | (_, "acl" | "http-request" | "http-response")
    )
}

/// An attribute line into the section model; `Err` when not modelled.
fn set_attribute(
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
            obj.insert("default_backend".into(), json!(b));
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
fn model_line(section_kind: &str, words: &[String]) -> Result<Option<Value>, NoModel> {
    match ParentKind::of(section_kind) {
        Some(p) => Ok(child_model(p, words)?.map(|(_, v)| v)),
        None if words[0] == "server" => server_model(words).map(Some),
        None if words[0] == "server-template" => server_template_model(words).map(Some),
        None => Ok(None),
    }
}

/// A child as modelled, or its normalised words when it has no model (then it may only stay
/// unchanged).
type Child = Result<Value, Vec<String>>;

/// A modelled section: attributes and children by kind.
struct ModelledSection {
    /// The modelled attributes (with `name`).
    attributes: Value,
    /// Attribute lines without a model, normalised (sorted).
    opaque: Vec<Vec<String>>,
    /// The first reason an attribute or child has no model.
    why: Option<NoModel>,
    named: BTreeMap<(ChildKind, String), Child>,
    indexed: BTreeMap<ChildKind, Vec<Child>>,
}

impl ModelledSection {
    /// Every line modelled (a section to create or whose attributes are replaced).
    fn complete(&self) -> Result<(), NoModel> {
        let opaque_child = self.named.values().any(Result::is_err)
            || self.indexed.values().flatten().any(Result::is_err);
        match &self.why {
            Some(w) if !self.opaque.is_empty() || opaque_child => Err(w.clone()),
            _ => Ok(()),
        }
    }
}

/// The key of a named child: `name` (a template's `prefix`), from the model or the words.
fn child_key(ck: ChildKind, child: &Child) -> String {
    match child {
        Ok(v) => v
            .get(if ck == ChildKind::ServerTemplate {
                "prefix"
            } else {
                "name"
            })
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        Err(words) if ck == ChildKind::Bind => {
            words.windows(2).find(|w| w[0] == "name").map_or_else(
                || words.get(1).cloned().unwrap_or_default(),
                |w| w[1].clone(),
            )
        }
        Err(words) => words.get(1).cloned().unwrap_or_default(),
    }
}

/// Models one section (what has no model is kept opaque, see [`ModelledSection::complete`]).
fn model_section(kind: ParentKind, name: &str, s: &Section) -> Result<ModelledSection, NoModel> {
    if s.from.is_some() || !s.header.is_empty() {
        return Err(format!("{} {name}: from/header", kind.keyword()));
    }
    let label = |e: &str| format!("{} {name}: {e}", kind.keyword());
    let mut m = ModelledSection {
        attributes: json!({ "name": name }),
        opaque: Vec::new(),
        why: None,
        named: BTreeMap::new(),
        indexed: BTreeMap::new(),
    };
    for l in &s.lines {
        if is_child_line(kind, &l.words[0]) {
            let ck = child_kind(kind, &l.words[0]);
            let child: Child = match child_model(kind, &l.words) {
                Ok(Some((_, v))) => Ok(v),
                Ok(None) => Err(l.words.clone()),
                Err(e) => {
                    m.why.get_or_insert_with(|| label(&e));
                    Err(l.words.clone())
                }
            };
            if ck.indexed() {
                m.indexed.entry(ck).or_default().push(child);
            } else {
                let key = child_key(ck, &child);
                if m.named.insert((ck, key.clone()), child).is_some() {
                    return Err(label(&format!("duplicate {key}")));
                }
            }
        } else if let Some(obj) = m.attributes.as_object_mut()
            && let Err(e) = set_attribute(kind, obj, &l.words)
        {
            m.why.get_or_insert_with(|| label(&e));
            let Norm::Words(w) = normalize(kind.keyword(), l) else {
                unreachable!("an attribute line has no child model")
            };
            m.opaque.push(w);
        }
    }
    m.opaque.sort();
    Ok(m)
}

fn child_kind(parent: ParentKind, w0: &str) -> ChildKind {
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

/// The model of a changed child, or `Err` naming it when it has none.
fn modelled<'a>(
    parent: &Parent,
    ck: ChildKind,
    key: &dyn fmt::Display,
    c: &'a Child,
) -> Result<&'a Value, NoModel> {
    c.as_ref().map_err(|words| {
        format!(
            "{} {}: {} {key}: {}",
            parent.kind.keyword(),
            parent.name,
            ck.collection(),
            words.join(" ")
        )
    })
}

/// Changed top-level fields of two models (sorted).
fn changed_fields(a: &Value, b: &Value) -> Vec<String> {
    let empty = Map::new();
    let a = a.as_object().unwrap_or(&empty);
    let b = b.as_object().unwrap_or(&empty);
    let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    keys.into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .cloned()
        .collect()
}

/// Lists the Dataplane configuration changes that turn `running` into `render` (module doc).
#[must_use]
pub fn diff(running: &ParsedConfig, render: &ParsedConfig) -> ConfigDiff {
    match try_diff(running, render) {
        Ok(c) => ConfigDiff::Changes(c),
        Err(what) => ConfigDiff::Unmodelled { what },
    }
}

fn try_diff(running: &ParsedConfig, render: &ParsedConfig) -> Result<Vec<ConfigChange>, NoModel> {
    let pre = |p: &ParsedConfig| {
        p.preamble
            .iter()
            .map(|l| l.words.clone())
            .collect::<Vec<_>>()
    };
    if pre(running) != pre(render) {
        return Err("lines before the first section".into());
    }
    let mut child_deletes = Vec::new();
    let mut section_deletes = Vec::new();
    let mut section_creates = Vec::new();
    let mut child_creates = Vec::new();
    let mut updates = Vec::new();
    let keys: BTreeSet<&SectionKey> = running
        .sections
        .keys()
        .chain(render.sections.keys())
        .collect();
    // Backends before frontends in every group (a frontend names its backends).
    let mut keys: Vec<&SectionKey> = keys.into_iter().collect();
    keys.sort_by_key(|k| (ParentKind::of(&k.kind).map_or(2, |p| p as u8), (*k).clone()));
    for key in keys {
        let (a, b) = (running.sections.get(key), render.sections.get(key));
        if let (Some(a), Some(b)) = (a, b)
            && sections_equal(key, a, b)
        {
            continue;
        }
        let Some(kind) = ParentKind::of(&key.kind) else {
            return Err(key.to_string());
        };
        let name = key.name.clone();
        match (a, b) {
            (Some(_), None) => section_deletes.push(ConfigChange::DeleteSection { kind, name }),
            (None, Some(b)) => {
                let m = model_section(kind, &name, b)?;
                m.complete()?;
                section_creates.push(ConfigChange::CreateSection {
                    kind,
                    name: name.clone(),
                    body: ObjectBody(m.attributes),
                });
                let parent = Parent { kind, name };
                for ((ck, k), body) in m.named {
                    child_creates.push(ConfigChange::CreateChild {
                        parent: parent.clone(),
                        kind: ck,
                        key: ChildKey::Name(k),
                        body: ObjectBody(body.map_err(|w| w.join(" "))?),
                    });
                }
                for (ck, list) in m.indexed {
                    for (i, body) in list.into_iter().enumerate() {
                        child_creates.push(ConfigChange::CreateChild {
                            parent: parent.clone(),
                            kind: ck,
                            key: ChildKey::Index(i as u32),
                            body: ObjectBody(body.map_err(|w| w.join(" "))?),
                        });
                    }
                }
            }
            (Some(a), Some(b)) => {
                let (ma, mb) = (model_section(kind, &name, a), model_section(kind, &name, b));
                let mb = mb?;
                let ma = ma.map_err(|e| format!("running {e}"))?;
                let parent = Parent {
                    kind,
                    name: name.clone(),
                };
                if ma.attributes != mb.attributes || ma.opaque != mb.opaque {
                    if !mb.opaque.is_empty() || !ma.opaque.is_empty() {
                        return Err(mb.why.or(ma.why).unwrap_or_else(|| key.to_string()));
                    }
                    updates.push(ConfigChange::ReplaceSection {
                        kind,
                        name: name.clone(),
                        body: ObjectBody(mb.attributes.clone()),
                    });
                }
                let named: BTreeSet<&(ChildKind, String)> =
                    ma.named.keys().chain(mb.named.keys()).collect();
                for nk in named {
                    let (ck, k) = nk.clone();
                    match (ma.named.get(nk), mb.named.get(nk)) {
                        (Some(_), None) => child_deletes.push(ConfigChange::DeleteChild {
                            parent: parent.clone(),
                            kind: ck,
                            key: ChildKey::Name(k),
                        }),
                        (None, Some(body)) => {
                            let body = modelled(&parent, ck, &k, body)?;
                            child_creates.push(ConfigChange::CreateChild {
                                parent: parent.clone(),
                                kind: ck,
                                key: ChildKey::Name(k),
                                body: ObjectBody(body.clone()),
                            });
                        }
                        (Some(old), Some(new)) if old != new => {
                            let old = modelled(&parent, ck, &k, old)?;
                            let new = modelled(&parent, ck, &k, new)?;
                            updates.push(ConfigChange::ReplaceChild {
                                parent: parent.clone(),
                                kind: ck,
                                key: ChildKey::Name(k),
                                body: ObjectBody(new.clone()),
                                changed_fields: changed_fields(old, new),
                            });
                        }
                        _ => {}
                    }
                }
                let kinds: BTreeSet<&ChildKind> =
                    ma.indexed.keys().chain(mb.indexed.keys()).collect();
                let none = Vec::new();
                for ck in kinds {
                    let old = ma.indexed.get(ck).unwrap_or(&none);
                    let new = mb.indexed.get(ck).unwrap_or(&none);
                    for i in (new.len()..old.len()).rev() {
                        child_deletes.push(ConfigChange::DeleteChild {
                            parent: parent.clone(),
                            kind: *ck,
                            key: ChildKey::Index(i as u32),
                        });
                    }
                    for (i, body) in new.iter().enumerate().skip(old.len()) {
                        let body = modelled(&parent, *ck, &i, body)?;
                        child_creates.push(ConfigChange::CreateChild {
                            parent: parent.clone(),
                            kind: *ck,
                            key: ChildKey::Index(i as u32),
                            body: ObjectBody(body.clone()),
                        });
                    }
                    for (i, (o, n)) in old.iter().zip(new).enumerate() {
                        if o != n {
                            let o = modelled(&parent, *ck, &i, o)?;
                            let n = modelled(&parent, *ck, &i, n)?;
                            updates.push(ConfigChange::ReplaceChild {
                                parent: parent.clone(),
                                kind: *ck,
                                key: ChildKey::Index(i as u32),
                                body: ObjectBody(n.clone()),
                                changed_fields: changed_fields(o, n),
                            });
                        }
                    }
                }
            }
            (None, None) => {}
        }
    }
    let mut out = child_deletes;
    out.extend(section_deletes);
    out.extend(section_creates);
    out.extend(child_creates);
    out.extend(updates);
    Ok(out)
}
