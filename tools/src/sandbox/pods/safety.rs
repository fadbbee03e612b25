//! Network safety in loopback mode (no namespaces, so nothing stops a connect): a render naming any
//! non-loopback target in `server`, `default-server` (`addr`), `server-template`, `nameserver`,
//! `peer`, `mailer` or `log` lines is refused, with a message naming the line. In namespace mode
//! HAProxy runs in a namespace without a default route, so such connects fail locally instead.

use std::net::IpAddr;

/// Returns `Err(message)` naming the first line that targets an address outside loopback.
pub fn check_outbound(text: &str) -> Result<(), String> {
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or_default();
        let f: Vec<&str> = line.split_whitespace().collect();
        let Some(kw) = f.first() else { continue };
        let target: Option<&str> = match *kw {
            "server" | "peer" | "mailer" | "nameserver" => f.get(2).copied(),
            "server-template" => f.get(3).copied(),
            "default-server" => f
                .iter()
                .position(|t| *t == "addr")
                .and_then(|p| f.get(p + 1).copied()),
            "log" => f.get(1).copied(),
            _ => None,
        };
        let Some(target) = target else { continue };
        if !is_local_target(kw, target) {
            return Err(format!(
                "refused by haptic-sandbox (loopback mode, no network namespace): line {}: `{}` names \
                 the non-loopback target `{target}`; run the sandbox as root to use such configs",
                i + 1,
                raw.trim()
            ));
        }
        // `server ... addr X` / `source X` options on server lines
        if matches!(*kw, "server" | "server-template" | "default-server") {
            for opt in ["addr", "source"] {
                if let Some(p) = f.iter().skip(3).position(|t| *t == opt)
                    && let Some(v) = f.get(p + 4)
                    && !is_local_target(kw, v)
                {
                    return Err(format!(
                        "refused by haptic-sandbox (loopback mode): line {}: `{}` names the non-loopback \
                         target `{v}`",
                        i + 1,
                        raw.trim()
                    ));
                }
            }
        }
    }
    Ok(())
}

fn is_local_target(kw: &str, target: &str) -> bool {
    if kw == "log"
        && (matches!(target, "global" | "stdout" | "stderr")
            || target.starts_with("ring@")
            || target.starts_with("fd@"))
    {
        return true;
    }
    if target.starts_with('/') || target.starts_with("unix@") || target.starts_with("abns@") {
        return true;
    }
    let t = target
        .trim_start_matches("ipv4@")
        .trim_start_matches("ipv6@")
        .trim_start_matches("udp@")
        .trim_start_matches("tcp@")
        .trim_start_matches("udp4@")
        .trim_start_matches("tcp4@");
    // strip a port (host:port, [v6]:port)
    let host = if let Some(rest) = t.strip_prefix('[') {
        rest.split(']').next().unwrap_or_default()
    } else if t.matches(':').count() == 1 {
        t.split(':').next().unwrap_or_default()
    } else {
        t
    };
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
}
