//! Order where HAProxy cares: a `default-server` line applies to the servers after it; health
//! check steps run in order. Each case: two layouts of one backend, whether they compare equal,
//! and (when not) that the difference goes by a raw push, never by a guess.

use haptic_journal::{ConfigVersion, SyncMode};

use super::super::decide::{Operation, decide, mode_of};
use super::super::structure::{ConfigDiff, default_server_after_server, diff, equal, parse};
use super::{api_layout, pod, render};

const HEAD: &str = "global\n    stats socket /var/run/haproxy.sock mode 600 level admin\ndefaults\n    mode http\n    timeout connect 1s\n    timeout client 5s\n    timeout server 5s\nfrontend fe_http\n    bind *:80\n    default_backend be_app\n";

/// A configuration whose backend `be_app` has `lines` (and `section` other than a backend when
/// given as `listen`).
fn with(section: &str, lines: &[&str]) -> String {
    let body: String = lines.iter().map(|l| format!("    {l}\n")).collect();
    format!("{HEAD}{section} be_app\n{body}")
}

/// Asserts the pair compares `want_equal` both ways, and that an unequal pair is a raw push
/// whose reason names `reason`.
fn check(what: &str, section: &str, a: &[&str], b: &[&str], want_equal: bool, reason: &str) {
    let (ta, tb) = (with(section, a), with(section, b));
    let (pa, pb) = (parse(&ta), parse(&tb));
    assert_eq!(equal(&pa, &pb), want_equal, "{what}: a -> b");
    assert_eq!(equal(&pb, &pa), want_equal, "{what}: b -> a");
    if want_equal {
        assert_eq!(decide(&pod(&ta, 5), &render(&tb), None), vec![], "{what}");
        return;
    }
    for (from, to, pto) in [(&ta, &tb, &pb), (&tb, &ta, &pa)] {
        match diff(&parse(from), pto) {
            ConfigDiff::Unmodelled { what: why } => {
                assert!(why.contains(reason), "{what}: reason {why:?}");
            }
            other => panic!("{what}: {other:?}"),
        }
        assert_eq!(
            decide(&pod(from, 5), &render(to), None),
            vec![Operation::PushRawConfig {
                version: ConfigVersion(5),
                mode: SyncMode::RawUnmodelled
            }],
            "{what}"
        );
    }
}

/// (what, section keyword, lines of one layout, of the other, equal?)
type Case<'a> = (&'a str, &'a str, &'a [&'a str], &'a [&'a str], bool);

const A: &str = "server a 127.0.0.1:9001";
const B: &str = "server b 127.0.0.1:9002";
const T: &str = "server-template w 3 127.0.0.1:9100";

/// `default-server` applies to the servers after it (HAProxy 2.6: `server a`,
/// `default-server maxconn 7`, `server b` gives `b` a limit of 7 and `a` none).
#[test]
fn default_server_applies_to_the_servers_after_it() {
    let ds = "default-server inter 3s";
    let ds2 = "default-server maxconn 5";
    let cases: &[Case] = &[
        (
            "moved after the first server",
            "backend",
            &[ds, A, B],
            &[A, ds, B],
            false,
        ),
        (
            "moved after every server",
            "backend",
            &[ds, A, B],
            &[A, B, ds],
            false,
        ),
        (
            "servers swapped across it",
            "backend",
            &[A, ds, B],
            &[B, ds, A],
            false,
        ),
        (
            "one of two lines moved",
            "backend",
            &[ds, A, ds2, B],
            &[ds, ds2, A, B],
            false,
        ),
        (
            "template before it",
            "backend",
            &[ds, T, A],
            &[T, ds, A],
            false,
        ),
        (
            "in a listen section",
            "listen",
            &[ds, A, B],
            &[A, ds, B],
            false,
        ),
        (
            "servers swapped after it",
            "backend",
            &[ds, A, B],
            &[ds, B, A],
            true,
        ),
        (
            "servers swapped between two",
            "backend",
            &[A, ds, B, T],
            &[A, ds, T, B],
            true,
        ),
        (
            "other families around it",
            "backend",
            &["balance roundrobin", ds, A, "option httpchk"],
            &["option httpchk", ds, "balance roundrobin", A],
            true,
        ),
        (
            "its parameters in another order",
            "backend",
            &["default-server inter 3s fall 2 check", A],
            &["default-server check fall 2 inter 3000", A],
            true,
        ),
    ];
    for (what, section, a, b, want) in cases {
        check(what, section, a, b, *want, "default-server after server");
    }
}

/// The Dataplane API's layout (every `default-server` line first) still compares equal, and a
/// change next to it still goes at runtime; but while a render has a `default-server` line
/// after a server anywhere, no change goes through the object endpoints (the API would rewrite
/// the whole file with the line first).
#[test]
fn the_api_layout_keeps_fine_grained_changes_and_a_late_default_server_stops_them() {
    let first = with("backend", &["default-server inter 3s", A, B]);
    assert!(equal(&parse(&first), &parse(&api_layout(&first))));
    let weighted = first.replace(A, &format!("{A} weight 20"));
    let ops = decide(&pod(&api_layout(&first), 5), &render(&weighted), None);
    assert_eq!(mode_of(&ops), SyncMode::Runtime, "{ops:?}");

    let other = "backend be_other\n    server c 127.0.0.1:9003\n    default-server check\n    server d 127.0.0.1:9004\n";
    let (pod_text, render_text) = (format!("{first}{other}"), format!("{weighted}{other}"));
    match diff(&parse(&pod_text), &parse(&render_text)) {
        ConfigDiff::Unmodelled { what } => {
            assert!(
                what.contains("backend be_other: default-server after server c"),
                "{what}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        mode_of(&decide(&pod(&pod_text, 5), &render(&render_text), None)),
        SyncMode::RawUnmodelled
    );
    assert_eq!(
        default_server_after_server(&parse(&render_text)).as_deref(),
        Some(
            "backend be_other: default-server after server c (the Dataplane API writes \
             default-server lines before the servers, which changes the servers they apply to; \
             put the default-server line before the first server, or its parameters on the \
             servers after it)"
        )
    );
    assert_eq!(default_server_after_server(&parse(&weighted)), None);
    assert_eq!(
        default_server_after_server(&parse(&api_layout(&render_text))),
        None
    );
}

/// Health check steps run in order; the place of `option httpchk` among them does not matter
/// (HAProxy merges its request into the first send step: checked on 2.6).
#[test]
fn check_steps_run_in_order() {
    let send = "http-check send meth GET uri /a";
    let expect = "http-check expect status 200";
    let connect = "http-check connect";
    let send_b = "http-check send meth GET uri /b";
    let tcp = [
        "tcp-check connect port 6379",
        "tcp-check send PING\\r\\n",
        "tcp-check expect string +PONG",
    ];
    let cases: &[(&str, &[&str], &[&str], bool)] = &[
        (
            "send and expect swapped",
            &["option httpchk", send, expect, A],
            &["option httpchk", expect, send, A],
            false,
        ),
        (
            "connect blocks swapped",
            &[connect, send, expect, connect, send_b, expect, A],
            &[connect, send_b, expect, connect, send, expect, A],
            false,
        ),
        (
            "swapped across other lines",
            &[send, A, expect],
            &[expect, A, send],
            false,
        ),
        (
            "tcp-check connect and send swapped",
            &["option tcp-check", tcp[0], tcp[1], tcp[2], A],
            &["option tcp-check", tcp[1], tcp[0], tcp[2], A],
            false,
        ),
        (
            "tcp-check steps split by other lines, reordered",
            &[tcp[0], "balance roundrobin", tcp[1], A, tcp[2]],
            &[tcp[0], "balance roundrobin", tcp[2], A, tcp[1]],
            false,
        ),
        (
            "stick rules swapped",
            &["stick match src", "stick on hdr(x)", A],
            &["stick on hdr(x)", "stick match src", A],
            false,
        ),
        (
            "steps interleaved with other lines, same order",
            &[send, "balance roundrobin", A, expect],
            &["balance roundrobin", send, expect, A],
            true,
        ),
        (
            "option httpchk after the steps",
            &[
                "http-check send hdr X-A 1",
                expect,
                "option httpchk GET /x",
                A,
            ],
            &[
                "option httpchk GET /x",
                "http-check send hdr X-A 1",
                expect,
                A,
            ],
            true,
        ),
    ];
    for (what, a, b, want) in cases {
        let reason = if what.starts_with("stick") {
            "stick"
        } else if what.starts_with("tcp") {
            "tcp-check"
        } else {
            "http-check"
        };
        check(what, "backend", a, b, *want, reason);
    }
    // In a defaults section too.
    let defaults = |a: &str, b: &str| {
        HEAD.replace(
            "    timeout server 5s\n",
            &format!("    timeout server 5s\n    {a}\n    {b}\n"),
        )
    };
    assert!(!equal(
        &parse(&defaults(send, expect)),
        &parse(&defaults(expect, send))
    ));
}
