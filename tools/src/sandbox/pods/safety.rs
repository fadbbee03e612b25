//! Network safety in loopback mode (no namespaces, so nothing stops a connect). In namespace mode
//! HAProxy runs in a namespace without a default route, so outbound connects fail locally instead.
//!
//! In loopback mode every render is checked line by line (HAProxy's tokenizer: quotes, `\`
//! escapes, `#` comments) and refused, naming the first offending line, when it holds anything
//! that can make HAProxy open a connection (or send a datagram) to an address outside loopback
//! (`127.0.0.0/8`, `::1`, `localhost`; the host's own non-loopback addresses are refused too).
//! Addresses that are not literals (host names, `${VAR}` expansions) are refused as well, since
//! resolving or expanding them could lead anywhere. Checked:
//!
//! - addresses: `server <name> <addr>` (backends, `peers`, `ring`), `server-template … <addr>`,
//!   `dispatch <addr>`, `source <addr>`, `nameserver <id> <addr>`, `peer <name> <addr>`,
//!   `mailer <name> <addr>`, `log <target>` (also in `log-forward`; `stdout`, `stderr`, `global`,
//!   `ring@`, `backend@`, `fd@` and unix sockets are local);
//! - options on `server` / `default-server` / `server-template` lines: `addr`, `source`,
//!   `usesrc`, `agent-addr`, `socks4`, `init-addr` (literal fallback addresses); `agent-check`
//!   and `check` connect to the server's (checked) address unless `addr` / `agent-addr` say
//!   otherwise;
//! - `http-check connect … addr <addr>` and `tcp-check connect … addr <addr>`;
//! - refused outright, whatever their arguments: `parse-resolv-conf` (the host's nameservers),
//!   `do-resolve(…,<id>)` naming a `resolvers` section this config does not declare (HAProxy's
//!   implicit `default` section is the host's resolv.conf), `set-dst` (re-targets servers with no
//!   address), `option transparent` / `transparent` / `option http_proxy` (connect to
//!   client-chosen destinations), `option external-check` / `external-check` and `program`
//!   sections (run arbitrary commands), `lua-load` / `lua-load-per-thread` (Lua can open sockets
//!   and use the HTTP client), `ocsp-update on` / `tune.ssl.ocsp-update.mode on` (OCSP
//!   responders through the HTTP client) and `acme` sections (ACME directories).
//!
//! Inbound directives (`bind`, `dgram-bind`, `stats socket`) are not outbound and are not checked
//! (bind addresses are rewritten onto the pod's loopback address). Not covered: `ocsp-update on`
//! inside an uploaded crt-list file, and runtime CLI commands (`httpclient` in expert mode).

use std::net::IpAddr;

/// Returns `Err(message)` naming the first line that can make HAProxy connect outside loopback.
pub fn check_outbound(text: &str) -> Result<(), String> {
    let declared_resolvers: Vec<String> = text
        .lines()
        .map(tokens)
        .filter(|f| f.len() >= 2 && f[0] == "resolvers")
        .map(|f| f[1].clone())
        .collect();
    for (i, raw) in text.lines().enumerate() {
        let f = tokens(raw);
        if let Some(why) = offence(&f, &declared_resolvers) {
            return Err(format!(
                "refused by haptic-sandbox (loopback mode, no network namespace): line {}: `{}` {why}; \
                 run the sandbox as root (namespace mode) to use such configs",
                i + 1,
                raw.trim()
            ));
        }
    }
    Ok(())
}

/// Why one tokenised line is refused, if it is.
fn offence(f: &[String], declared_resolvers: &[String]) -> Option<String> {
    let kw = f.first()?.as_str();
    let arg = |n: usize| f.get(n).map(String::as_str);
    let names = |t: &str| Some(format!("names the non-loopback target `{t}`"));
    let can = |what: &str| Some(format!("{what} (can connect outside loopback)"));
    // addresses in fixed positions
    let target = match kw {
        "server" | "peer" | "mailer" | "nameserver" => arg(2),
        "server-template" => arg(3),
        "dispatch" | "source" => arg(1),
        "log" => arg(1),
        _ => None,
    };
    if let Some(t) = target
        && !is_local_target(kw, t)
    {
        return names(t);
    }
    // options on server lines
    if matches!(kw, "server" | "default-server" | "server-template") {
        for (p, opt) in f.iter().enumerate().skip(1) {
            let v = f.get(p + 1).map(String::as_str);
            match (opt.as_str(), v) {
                ("addr" | "source" | "agent-addr" | "socks4", Some(v))
                    if !is_local_target(opt, v) =>
                {
                    return names(v);
                }
                ("usesrc", Some(v))
                    if !matches!(v, "client" | "clientip" | "hdr_ip")
                        && !v.starts_with("hdr_ip(")
                        && !is_local_target(opt, v) =>
                {
                    return names(v);
                }
                ("init-addr", Some(v)) => {
                    for m in v.split(',') {
                        if !matches!(m, "last" | "libc" | "none") && !is_local_target(opt, m) {
                            return names(m);
                        }
                    }
                }
                _ => {}
            }
        }
    }
    // health-check connect rules
    if matches!(kw, "http-check" | "tcp-check") && arg(1) == Some("connect") {
        for (p, opt) in f.iter().enumerate().skip(2) {
            if opt == "addr"
                && let Some(v) = f.get(p + 1)
                && !is_local_target(opt, v)
            {
                return names(v);
            }
        }
    }
    // refused outright
    match kw {
        "parse-resolv-conf" => {
            return can("`parse-resolv-conf` uses the host's nameservers");
        }
        "program" => return can("`program` sections run arbitrary commands"),
        "external-check" => return can("`external-check` runs arbitrary commands"),
        "lua-load" | "lua-load-per-thread" => {
            return can("Lua scripts can open sockets and use the HTTP client");
        }
        "acme" => return can("`acme` sections contact ACME directories"),
        "transparent" => return can("`transparent` connects to client-chosen destinations"),
        "option" => match arg(1) {
            Some("transparent" | "http_proxy") => {
                return can("this option connects to client-chosen destinations");
            }
            Some("external-check") => {
                return can("`option external-check` runs arbitrary commands");
            }
            _ => {}
        },
        _ => {}
    }
    for (p, t) in f.iter().enumerate() {
        let next = f.get(p + 1).map(String::as_str);
        if t == "set-dst" {
            return can("`set-dst` re-targets connections");
        }
        if (t == "ocsp-update" || t == "tune.ssl.ocsp-update.mode") && next == Some("on") {
            return can("OCSP auto-update contacts OCSP responders");
        }
        if let Some(args) = t.strip_prefix("do-resolve(") {
            let id = args.trim_end_matches(')').split(',').nth(1).unwrap_or("");
            if !declared_resolvers.iter().any(|d| d == id) {
                return can(&format!(
                    "`do-resolve` names resolvers `{id}` that this config does not declare \
                     (the implicit `default` section is the host's resolv.conf)"
                ));
            }
        }
    }
    None
}

/// Splits a line as HAProxy does: blanks separate words, `#` starts a comment outside quotes, `\`
/// escapes the next character, `"…"` and `'…'` quote (quotes removed; `$` kept, so an
/// environment expansion never parses as an address).
fn tokens(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (_, '\\') => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
                in_word = true;
            }
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '"' | '\'') => {
                quote = Some(c);
                in_word = true;
            }
            (None, '#') => break,
            (None, c) if c.is_whitespace() => {
                if in_word {
                    out.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            (None, c) => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        out.push(cur);
    }
    out
}

fn is_local_target(kw: &str, target: &str) -> bool {
    if kw == "log"
        && (matches!(target, "global" | "stdout" | "stderr")
            || target.starts_with("ring@")
            || target.starts_with("backend@")
            || target.starts_with("fd@"))
    {
        return true;
    }
    if target.starts_with('/')
        || target.starts_with("unix@")
        || target.starts_with("abns@")
        || target.starts_with("abnsz@")
    {
        return true;
    }
    let t = match target.split_once('@') {
        Some((
            "ipv4" | "ipv6" | "udp" | "udp4" | "udp6" | "tcp" | "tcp4" | "tcp6" | "quic4" | "quic6",
            rest,
        )) => rest,
        Some(_) => return false,
        None => target,
    };
    // strip a port (host:port, [v6]:port)
    let host = if let Some(rest) = t.strip_prefix('[') {
        rest.split(']').next().unwrap_or_default()
    } else if t.matches(':').count() == 1 {
        t.split(':').next().unwrap_or_default()
    } else {
        t
    };
    // An empty host (`server s :80`) connects to the client connection's destination, a pod
    // address (bind lines are rewritten) since `set-dst` is refused.
    if host.is_empty() || host == "localhost" {
        return true;
    }
    match host.parse::<IpAddr>() {
        Ok(ip) => ip.is_loopback(),
        Err(_) => false, // a host name would be resolved (DNS traffic): refused
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(cfg: &str, line: usize) {
        let e = check_outbound(cfg).err().unwrap_or_default();
        assert!(e.contains(&format!("line {line}:")), "{cfg:?} → {e:?}");
    }

    #[test]
    fn refusals() {
        assert!(check_outbound("backend b\n    server s1 127.0.0.1:1 check\n").is_ok());
        assert!(check_outbound("global\n    log stdout format raw local0\n").is_ok());
        let e = check_outbound("backend b\n    server s1 192.168.1.10:80 check\n")
            .err()
            .unwrap_or_default();
        assert!(e.contains("line 2"), "{e}");
        assert!(check_outbound("resolvers r\n  nameserver dns1 8.8.8.8:53\n").is_err());
        assert!(check_outbound("global\n  log 10.0.0.1:514 local0\n").is_err());
        assert!(
            check_outbound("backend b\n server-template web- 3 192.168.1.10:8080 check\n").is_err()
        );
        assert!(check_outbound("peers p\n peer a 10.0.1.1:1024\n").is_err());
        assert!(check_outbound("backend b\n server s example.com:80\n").is_err());
    }

    #[test]
    fn health_check_connect_addresses() {
        let b = "backend b\n  option httpchk\n";
        refused(
            &format!(
                "{b}  http-check connect addr 10.0.0.5 port 80\n  server s 127.0.0.1:1 check\n"
            ),
            3,
        );
        refused(
            &format!(
                "{b}  tcp-check connect addr 10.0.0.6 port 80\n  server s 127.0.0.1:1 check\n"
            ),
            3,
        );
        // the host's own (non-loopback) address is off-limits too
        refused(
            &format!("{b}  http-check connect addr 192.0.2.2 port 9999\n"),
            3,
        );
        assert!(
            check_outbound(&format!("{b}  http-check connect addr 127.0.0.1 port 80\n")).is_ok()
        );
        assert!(check_outbound(&format!("{b}  tcp-check connect port 80\n")).is_ok());
    }

    #[test]
    fn agent_and_server_options() {
        refused(
            "backend b\n  server s 127.0.0.1:1 agent-check agent-addr 10.0.0.8 agent-port 9\n",
            2,
        );
        refused("backend b\n  default-server agent-addr 10.0.0.8\n", 2);
        refused("backend b\n  server s 127.0.0.1:1 check addr 10.0.0.5\n", 2);
        refused(
            "backend b\n  server s 127.0.0.1:1 socks4 10.0.0.9:1080\n",
            2,
        );
        refused("backend b\n  server s 127.0.0.1:1 source 10.0.0.1\n", 2);
        refused(
            "backend b\n  server s 127.0.0.1:1 source 0.0.0.0 usesrc 10.0.0.1\n",
            2,
        );
        refused(
            "backend b\n  server s 127.0.0.1:1 init-addr last,10.0.0.1\n",
            2,
        );
        refused("backend b\n  source 10.0.0.1\n", 2);
        refused("backend b\n  dispatch 10.0.0.1:80\n", 2);
        assert!(
            check_outbound(
                "backend b\n  server s 127.0.0.1:1 agent-check agent-port 9 addr 127.0.0.2\n"
            )
            .is_ok()
        );
    }

    #[test]
    fn resolvers_and_dns() {
        refused("resolvers r\n  parse-resolv-conf\n", 2);
        refused(
            "frontend f\n  http-request do-resolve(txn.ip,default) hdr(host)\n",
            2,
        );
        assert!(
            check_outbound(
                "resolvers r\n  nameserver d 127.0.0.1:53\nfrontend f\n  http-request do-resolve(txn.ip,r,ipv4) hdr(host)\n"
            )
            .is_ok()
        );
    }

    #[test]
    fn log_and_ring_targets() {
        refused(
            "log-forward lf\n  dgram-bind 127.0.0.1:514\n  log 10.0.0.1:514 local0\n",
            3,
        );
        refused("ring r\n  server s 10.0.0.1:6514\n", 2);
        refused("global\n  log udp6@[2001:db8::1]:514 local0\n", 2);
        assert!(check_outbound("global\n  log ring@r local0\n  log /dev/log local0\n").is_ok());
        assert!(check_outbound("global\n  log tcp@127.0.0.1:514 local0\n").is_ok());
    }

    #[test]
    fn outright_refusals() {
        refused("global\n  lua-load /etc/haproxy/x.lua\n", 2);
        refused("program p\n  command /bin/true\n", 1);
        refused("backend b\n  option external-check\n", 2);
        refused("backend b\n  external-check command /bin/true\n", 2);
        refused("backend b\n  option http_proxy\n", 2);
        refused("backend b\n  option transparent\n", 2);
        refused(
            "frontend f\n  tcp-request connection set-dst ipv4(10.0.0.1)\n",
            2,
        );
        refused("global\n  tune.ssl.ocsp-update.mode on\n", 2);
        refused("frontend f\n  bind :443 ssl crt /x.pem ocsp-update on\n", 2);
        // inbound is fine
        assert!(check_outbound("frontend f\n  bind 10.0.0.1:80\n  bind :443\n").is_ok());
    }

    #[test]
    fn tokenizer_does_not_hide_targets() {
        refused("backend b\n  server a\\#b 10.0.0.1:80\n", 2);
        refused("backend b\n  server \"a#b\" 10.0.0.1:80\n", 2);
        refused("backend b\n  server s \"${TARGET}:80\"\n", 2);
        assert!(check_outbound("backend b\n  server s \"127.0.0.1:80\" # 10.0.0.1\n").is_ok());
    }
}
