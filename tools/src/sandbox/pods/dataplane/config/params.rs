//! Parameter tables: a line's `keyword [value]` words against a model's fields, for servers,
//! `default-server`, server templates, binds and `stats socket` (`runtime_apis`).
//!
//! Each entry is (keyword, field, how): `On`/`Off` write the keyword when the field is
//! `enabled`/`disabled`; `Bool` when it is true; `Str`, `Int`, `Time` (milliseconds) and `List`
//! (comma-joined) write the keyword and the value. The table order is the order the API writes
//! the parameters in (client-native's serialisation order, approximated).

use serde_json::{Map, Value, json};

use super::body::Body;
use super::text::{Line, time_ms, time_text};

/// How a parameter's value is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum How {
    /// The keyword means the field is `enabled`.
    On,
    /// The keyword means the field is `disabled`.
    Off,
    /// The keyword means the field is `true`.
    Bool,
    /// Keyword and a raw word.
    Str,
    /// Keyword and an integer.
    Int,
    /// Keyword and a time (field in milliseconds).
    Time,
    /// Keyword and a comma-joined list.
    List,
}

use How::{Bool, Int, List, Off, On, Str, Time};

/// Server, `default-server` and server-template parameters (`server_params`).
pub(crate) const SERVER_PARAMS: &[(&str, &str, How)] = &[
    ("agent-check", "agent-check", On),
    ("no-agent-check", "agent-check", Off),
    ("allow-0rtt", "allow_0rtt", Bool),
    ("backup", "backup", On),
    ("no-backup", "backup", Off),
    ("check", "check", On),
    ("no-check", "check", Off),
    ("check-send-proxy", "check-send-proxy", On),
    ("check-ssl", "check-ssl", On),
    ("no-check-ssl", "check-ssl", Off),
    ("check-via-socks4", "check_via_socks4", On),
    ("disabled", "maintenance", On),
    ("enabled", "maintenance", Off),
    ("force-sslv3", "force_sslv3", On),
    ("force-tlsv10", "force_tlsv10", On),
    ("force-tlsv11", "force_tlsv11", On),
    ("force-tlsv12", "force_tlsv12", On),
    ("force-tlsv13", "force_tlsv13", On),
    ("no-sslv3", "no_sslv3", On),
    ("no-tlsv10", "no_tlsv10", On),
    ("no-tlsv11", "no_tlsv11", On),
    ("no-tlsv12", "no_tlsv12", On),
    ("no-tlsv13", "no_tlsv13", On),
    ("send-proxy", "send-proxy", On),
    ("no-send-proxy", "send-proxy", Off),
    ("send-proxy-v2", "send-proxy-v2", On),
    ("no-send-proxy-v2", "send-proxy-v2", Off),
    ("send-proxy-v2-ssl", "send_proxy_v2_ssl", On),
    ("send-proxy-v2-ssl-cn", "send_proxy_v2_ssl_cn", On),
    ("ssl", "ssl", On),
    ("no-ssl", "ssl", Off),
    ("ssl-reuse", "ssl_reuse", On),
    ("no-ssl-reuse", "ssl_reuse", Off),
    ("tls-tickets", "tls_tickets", On),
    ("no-tls-tickets", "tls_tickets", Off),
    ("stick", "stick", On),
    ("non-stick", "stick", Off),
    ("tfo", "tfo", On),
    ("no-tfo", "tfo", Off),
    ("no-verifyhost", "no_verifyhost", On),
    ("strict-maxconn", "strict-maxconn", Bool),
    ("agent-send", "agent-send", Str),
    ("agent-inter", "agent-inter", Time),
    ("agent-addr", "agent-addr", Str),
    ("agent-port", "agent-port", Int),
    ("alpn", "alpn", Str),
    ("ca-file", "ssl_cafile", Str),
    ("check-alpn", "check_alpn", Str),
    ("check-proto", "check_proto", Str),
    ("check-sni", "check-sni", Str),
    ("ciphers", "ciphers", Str),
    ("ciphersuites", "ciphersuites", Str),
    ("client-sigalgs", "client_sigalgs", Str),
    ("cookie", "cookie", Str),
    ("crl-file", "crl_file", Str),
    ("crt", "ssl_certificate", Str),
    ("curves", "curves", Str),
    ("error-limit", "error_limit", Int),
    ("fall", "fall", Int),
    ("guid", "guid", Str),
    ("hash-key", "hash_key", Str),
    ("init-addr", "init-addr", Str),
    ("init-state", "init-state", Str),
    ("inter", "inter", Time),
    ("fastinter", "fastinter", Time),
    ("downinter", "downinter", Time),
    ("log-bufsize", "log-bufsize", Int),
    ("log-proto", "log_proto", Str),
    ("maxconn", "maxconn", Int),
    ("maxqueue", "maxqueue", Int),
    ("max-reuse", "max_reuse", Int),
    ("minconn", "minconn", Int),
    ("namespace", "namespace", Str),
    ("npn", "npn", Str),
    ("observe", "observe", Str),
    ("on-error", "on-error", Str),
    ("on-marked-down", "on-marked-down", Str),
    ("on-marked-up", "on-marked-up", Str),
    ("pool-conn-name", "pool_conn_name", Str),
    ("pool-low-conn", "pool_low_conn", Int),
    ("pool-max-conn", "pool_max_conn", Int),
    ("pool-purge-delay", "pool_purge_delay", Time),
    ("addr", "health_check_address", Str),
    ("port", "health_check_port", Int),
    ("proto", "proto", Str),
    ("proxy-v2-options", "proxy-v2-options", List),
    ("redir", "redir", Str),
    ("resolve-net", "resolve-net", Str),
    ("resolve-opts", "resolve_opts", Str),
    ("resolve-prefer", "resolve-prefer", Str),
    ("resolvers", "resolvers", Str),
    ("rise", "rise", Int),
    ("shard", "shard", Int),
    ("sigalgs", "sigalgs", Str),
    ("slowstart", "slowstart", Time),
    ("sni", "sni", Str),
    ("socks4", "socks4", Str),
    ("source", "source", Str),
    ("ssl-max-ver", "ssl_max_ver", Str),
    ("ssl-min-ver", "ssl_min_ver", Str),
    ("tcp-ut", "tcp_ut", Time),
    ("track", "track", Str),
    ("verify", "verify", Str),
    ("verifyhost", "verifyhost", Str),
    ("weight", "weight", Int),
    ("ws", "ws", Str),
];

/// Bind parameters (`bind_params`), also those of `stats socket` (`runtime_apis`).
pub(crate) const BIND_PARAMS: &[(&str, &str, How)] = &[
    ("accept-netscaler-cip", "accept_netscaler_cip", Int),
    ("accept-proxy", "accept_proxy", Bool),
    ("allow-0rtt", "allow_0rtt", Bool),
    ("alpn", "alpn", Str),
    ("backlog", "backlog", Str),
    ("ca-file", "ssl_cafile", Str),
    ("ca-ignore-err", "ca_ignore_err", Str),
    ("ciphers", "ciphers", Str),
    ("ciphersuites", "ciphersuites", Str),
    ("crl-file", "crl_file", Str),
    ("crt", "ssl_certificate", Str),
    ("crt-ignore-err", "crt_ignore_err", Str),
    ("crt-list", "crt_list", Str),
    ("curves", "curves", Str),
    ("defer-accept", "defer_accept", Bool),
    ("ecdhe", "ecdhe", Str),
    ("expose-fd", "expose_fd_listeners", Bool),
    ("force-sslv3", "force_sslv3", Bool),
    ("force-tlsv10", "force_tlsv10", Bool),
    ("force-tlsv11", "force_tlsv11", Bool),
    ("force-tlsv12", "force_tlsv12", Bool),
    ("force-tlsv13", "force_tlsv13", Bool),
    ("generate-certificates", "generate_certificates", Bool),
    ("gid", "gid", Int),
    ("group", "group", Str),
    ("id", "id", Str),
    ("interface", "interface", Str),
    ("level", "level", Str),
    ("maxconn", "maxconn", Int),
    ("mode", "mode", Str),
    ("mss", "mss", Str),
    ("namespace", "namespace", Str),
    ("nice", "nice", Int),
    ("no-alpn", "no_alpn", Bool),
    ("no-ca-names", "no_ca_names", Bool),
    ("no-sslv3", "no_sslv3", Bool),
    ("no-strict-sni", "no_strict_sni", Bool),
    ("no-tls-tickets", "no_tls_tickets", Bool),
    ("no-tlsv10", "no_tlsv10", Bool),
    ("no-tlsv11", "no_tlsv11", Bool),
    ("no-tlsv12", "no_tlsv12", Bool),
    ("no-tlsv13", "no_tlsv13", Bool),
    ("npn", "npn", Str),
    ("prefer-client-ciphers", "prefer_client_ciphers", Bool),
    ("proto", "proto", Str),
    ("sigalgs", "sigalgs", Str),
    ("ssl", "ssl", Bool),
    ("ssl-max-ver", "ssl_max_ver", Str),
    ("ssl-min-ver", "ssl_min_ver", Str),
    ("strict-sni", "strict_sni", Bool),
    ("tcp-ut", "tcp_user_timeout", Time),
    ("tfo", "tfo", Bool),
    ("thread", "thread", Str),
    ("tls-ticket-keys", "tls_ticket_keys", Str),
    ("transparent", "transparent", Bool),
    ("uid", "uid", Str),
    ("user", "user", Str),
    ("v4v6", "v4v6", Bool),
    ("v6only", "v6only", Bool),
    ("verify", "verify", Str),
];

/// The words of every parameter of `table` the body sets (fields the model lacks are skipped).
pub(crate) fn write(b: &Body, table: &[(&str, &str, How)]) -> Line {
    let mut out = Vec::new();
    for (kw, field, how) in table {
        let Some(v) = b.value(field) else { continue };
        match how {
            On | Off => {
                let want = if *how == On { "enabled" } else { "disabled" };
                if v.as_str() == Some(want) {
                    out.push((*kw).to_owned());
                }
            }
            Bool => {
                if v.as_bool() == Some(true) {
                    out.push((*kw).to_owned());
                }
            }
            Str => {
                out.push((*kw).to_owned());
                out.push(v.as_str().unwrap_or_default().to_owned());
            }
            Int => {
                out.push((*kw).to_owned());
                out.push(v.as_i64().unwrap_or_default().to_string());
            }
            Time => {
                out.push((*kw).to_owned());
                out.push(time_text(v.as_u64().unwrap_or_default()));
            }
            List => {
                let items: Vec<&str> = v
                    .as_array()
                    .map(|a| a.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                out.push((*kw).to_owned());
                out.push(items.join(","));
            }
        }
    }
    out
}

/// The fields of parameter words (`words` after the fixed part of the line). `strict`: an
/// unknown keyword or a bad value makes it `None`; otherwise such words are skipped (a `GET`
/// answers what it can model).
pub(crate) fn read(
    words: &[String],
    table: &[(&str, &str, How)],
    strict: bool,
) -> Option<Map<String, Value>> {
    let mut m = Map::new();
    let mut i = 0;
    while i < words.len() {
        let Some((_, field, how)) = table.iter().find(|(kw, _, _)| *kw == words[i]) else {
            if strict {
                return None;
            }
            i += 1;
            continue;
        };
        let value = || words.get(i + 1);
        let parsed = match how {
            On => Some(json!("enabled")),
            Off => Some(json!("disabled")),
            Bool => Some(json!(true)),
            Str => value().map(|v| json!(v)),
            Int => value().and_then(|v| v.parse::<i64>().ok()).map(Value::from),
            Time => value().and_then(|v| time_ms(v)).map(Value::from),
            List => value().map(|v| json!(v.split(',').collect::<Vec<_>>())),
        };
        match parsed {
            Some(v) => {
                m.insert((*field).to_owned(), v);
            }
            None if strict => return None,
            None => {}
        }
        i += if matches!(how, On | Off | Bool) { 1 } else { 2 };
    }
    Some(m)
}
