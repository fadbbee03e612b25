//! Server, server-template, `default-server` and bind lines into the Dataplane API's models
//! (client-native `configuration/server.go` `parseServerParams`, `configuration/bind.go`).
//! Values are sent as written: one that HAProxy would need quoted has no model (module doc of
//! `structure`).

use serde_json::{Map, Value, json};

use super::parse::{NoModel, config_word, time_ms};

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

/// The field of the spec's `server` model that server keyword `kw` is sent as, if the model
/// knows the keyword.
#[must_use]
pub fn server_field(kw: &str) -> Option<&'static str> {
    server_param(kw).map(|p| match p {
        Param::Flag(f, _) | Param::Bool(f) | Param::Str(f) | Param::Int(f) | Param::Time(f) => f,
    })
}

fn server_param(kw: &str) -> Option<Param> {
    use Param::{Bool, Flag, Int, Str, Time};
    Some(match kw {
        "agent-check" => Flag("agent-check", "enabled"),
        "no-agent-check" => Flag("agent-check", "disabled"),
        "backup" => Flag("backup", "enabled"),
        "no-backup" => Flag("backup", "disabled"),
        "check" => Flag("check", "enabled"),
        "no-check" => Flag("check", "disabled"),
        "check-ssl" => Flag("check-ssl", "enabled"),
        "no-check-ssl" => Flag("check-ssl", "disabled"),
        "check-send-proxy" => Flag("check-send-proxy", "enabled"),
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
        "check-sni" => Str("check-sni"),
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
            obj.insert(field.into(), json!(plain(need()?)?));
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

/// `w` when HAProxy reads it back unquoted as the same word, else `Err`: the API writes the
/// value as given, and the runtime fields go to HAProxy's runtime API as they are.
pub(super) fn plain(w: &str) -> Result<&str, NoModel> {
    match config_word(w) {
        Ok(written) if written == w => Ok(w),
        Ok(written) => Err(format!("{written}: a value that needs quotes")),
        Err(e) => Err(e),
    }
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
pub(super) fn server_model(words: &[String]) -> Result<Value, NoModel> {
    if words.len() < 3 {
        return Err("server line".into());
    }
    let mut obj = Map::new();
    obj.insert("name".into(), json!(plain(&words[1])?));
    insert_address(&mut obj, "address", &words[2])?;
    server_params(&mut obj, &words[3..])?;
    Ok(Value::Object(obj))
}

/// `word` (`HOST[:PORT]`) into `obj` as `key` and, when it has one, `port`.
fn insert_address(obj: &mut Map<String, Value>, key: &str, word: &str) -> Result<(), NoModel> {
    let (host, port) = split_address(plain(word)?)?;
    obj.insert(key.into(), json!(host));
    if let Some(p) = port {
        obj.insert("port".into(), json!(p));
    }
    Ok(())
}

/// The `server_template` model (`server-template PREFIX NUM FQDN[:PORT] params...`).
pub(super) fn server_template_model(words: &[String]) -> Result<Value, NoModel> {
    if words.len() < 4 {
        return Err("server-template line".into());
    }
    let mut obj = Map::new();
    obj.insert("prefix".into(), json!(plain(&words[1])?));
    obj.insert("num_or_range".into(), json!(plain(&words[2])?));
    insert_address(&mut obj, "fqdn", &words[3])?;
    server_params(&mut obj, &words[4..])?;
    Ok(Value::Object(obj))
}

/// The `bind` model (`bind ADDR:PORT params...`); its name is `name` or `address:port`.
pub(super) fn bind_model(words: &[String]) -> Result<Value, NoModel> {
    if words.len() < 2 || words[1].contains(',') {
        return Err("bind line".into());
    }
    let a = plain(&words[1])?;
    let (address, port) = match a.rfind(':') {
        Some(i) if !a.starts_with('/') && !a.contains('@') => {
            (a[..i].to_owned(), parse_port(&a[i + 1..])?)
        }
        _ => return Err(format!("bind address {a}")),
    };
    let mut obj = Map::new();
    obj.insert("address".into(), json!(address));
    obj.insert("port".into(), json!(port));
    let mut name = a.to_owned();
    let mut i = 2;
    while i < words.len() {
        let kw = words[i].as_str();
        let mut value = || {
            i += 1;
            words
                .get(i)
                .ok_or_else(|| format!("bind {kw} without a value"))
                .and_then(|v| plain(v).map(str::to_owned))
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

/// The model of a `default-server` line: its parameters as a server's fields, so their order
/// does not count (the API writes them in client-native's order).
pub(super) fn default_server_model(words: &[String]) -> Result<Value, NoModel> {
    let mut obj = Map::new();
    server_params(&mut obj, &words[1..])?;
    Ok(Value::Object(obj))
}
