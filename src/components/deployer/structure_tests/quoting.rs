//! Words as HAProxy reads them (`parse_line`), and rule texts sent to the Dataplane API in the
//! form HAProxy reads back as the same words (the real API writes them into the file as given).

use std::path::Path;
use std::process::{Child, Command};

use serde_json::Value;

use super::super::structure::{ConfigChange, ConfigDiff, diff, equal, parse, tokenize};
use super::modes::FRONT;
use super::quote_all;

#[test]
fn tokenizer_reads_words_as_haproxy_does() {
    let cases: &[(&str, &[&str])] = &[
        (
            r#"  http-request return status 200 content-type "text/plain" string "a b" # x"#,
            &[
                "http-request",
                "return",
                "status",
                "200",
                "content-type",
                "text/plain",
                "string",
                "a b",
            ],
        ),
        (r"acl x path_beg /a\ b", &["acl", "x", "path_beg", "/a b"]),
        ("# _version=3", &[]),
        ("log 'a#b'", &["log", "a#b"]),
        // A backslash before anything else stays (regular expressions, back-references).
        (
            r"http-request replace-path /a/(.*) /b/\1",
            &["http-request", "replace-path", "/a/(.*)", "/b/\\1"],
        ),
        (
            r"acl v path_reg ^/v\.1$",
            &["acl", "v", "path_reg", "^/v\\.1$"],
        ),
        (r#"x "a\tb\nc""#, &["x", "a\tb\nc"]),
        (r#"x "\x22q\x22 \x5c" \x41"#, &["x", "\"q\" \\", "A"]),
        (r"x a\#b a\'b", &["x", "a#b", "a'b"]),
        // `\$` is an escape inside double quotes only; `$` is literal outside them.
        (
            r#"x \$HOME "\$HOME" '$HOME' $HOME"#,
            &["x", "\\$HOME", "$HOME", "$HOME", "$HOME"],
        ),
        (r"x 'a\b' 'a\'", &["x", "a\\b", "a\\"]),
        ("x a\rb", &["x", "a"]),
        ("x \"\" ''", &["x", "", ""]),
    ];
    for (line, want) in cases {
        assert_eq!(tokenize(line), *want, "{line}");
    }
}

/// One `http-request return` text in the test frontend.
fn returning(text: &str) -> String {
    FRONT.replace(
        "http-request set-header X-Render one",
        &format!("http-request return status 200 string {text}"),
    )
}

/// Spellings HAProxy reads as different words compare different; spellings of one word equal.
#[test]
fn words_compare_as_haproxy_reads_them() {
    let different = [
        (r#""$HOME""#, "'$HOME'"),
        (r#""${A}""#, r#""${B}""#),
        (r"/b/\1", "/b/1"),
        (r#""a\nb""#, "anb"),
        (r#""\xe9""#, "é"),
    ];
    for (a, b) in different {
        assert!(
            !equal(&parse(&returning(a)), &parse(&returning(b))),
            "{a} and {b} compare equal"
        );
    }
    let same = [
        ("'a b'", r#""a b""#),
        (r"a\ b", "'a b'"),
        (r#""\x41""#, "A"),
        (r#""\$x""#, "'$x'"),
        (r#""\xE9""#, r#""\xe9""#),
        (r#""${A}""#, r#""${A}""#),
    ];
    for (a, b) in same {
        assert!(
            equal(&parse(&returning(a)), &parse(&returning(b))),
            "{a} and {b} compare different"
        );
    }
}

/// The body of the one object created or replaced when the test frontend's line `from` becomes
/// `to`, or the reason it goes raw.
fn sent(from: &str, to: &str) -> Result<Value, String> {
    let render = FRONT.replace(from, to);
    assert_ne!(render, FRONT, "{from}");
    match diff(&parse(FRONT), &parse(&render)) {
        ConfigDiff::Changes(changes) => changes
            .into_iter()
            .find_map(|c| match c {
                ConfigChange::CreateChild { body, .. }
                | ConfigChange::ReplaceChild { body, .. } => Some(body.0),
                _ => None,
            })
            .ok_or_else(|| format!("no object for {to}")),
        ConfigDiff::Unmodelled { what } => Err(what),
    }
}

/// (line replaced, its replacement, fields of the object sent and their values)
type Sent<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)]);

const RULE: &str = "http-request set-header X-Render one";
const ACL: &str = "acl is_api path_beg /api";
const SWITCH: &str = "use_backend be_api if is_api";

/// Rule texts go to the API as HAProxy must read them (quoted where a word needs it, the form
/// the API's own GET returns); what cannot be written so goes raw.
#[test]
fn rule_texts_are_sent_as_haproxy_must_read_them() {
    let modelled: &[Sent] = &[
        (
            RULE,
            r#"http-request return status 503 content-type text/plain string "Service unavailable""#,
            &[
                ("return_content", r#""Service unavailable""#),
                ("return_content_type", "text/plain"),
                ("return_content_format", "string"),
            ],
        ),
        (
            RULE,
            r#"http-request return status 200 content-type "text/plain; charset=utf-8" lf-string "hi %[src]""#,
            &[
                ("return_content_type", r#""text/plain; charset=utf-8""#),
                ("return_content", r#""hi %[src]""#),
            ],
        ),
        (
            RULE,
            "http-request return status 200 content-type text/plain string ok",
            &[("return_content", "ok")],
        ),
        (
            RULE,
            r#"http-request return status 200 string 'say "hi" for $5'"#,
            &[("return_content", r#""say \"hi\" for \$5""#)],
        ),
        (
            RULE,
            r#"http-request set-header X-Render "one two""#,
            &[("hdr_name", "X-Render"), ("hdr_format", r#""one two""#)],
        ),
        (
            RULE,
            r#"http-request redirect location "/a b" code 302"#,
            &[("redir_value", r#""/a b""#)],
        ),
        (
            ACL,
            r"acl is_api path_reg ^/api\.v1$",
            &[("value", r"^/api\.v1$")],
        ),
        (
            ACL,
            r#"acl is_api hdr(host) -i "a b" c"#,
            &[("criterion", "hdr(host)"), ("value", r#"-i "a b" c"#)],
        ),
        (
            SWITCH,
            r#"use_backend be_api if { hdr(x) "a b" }"#,
            &[("cond_test", r#"{ hdr(x) "a b" }"#)],
        ),
    ];
    for (from, to, fields) in modelled {
        let body = sent(from, to).unwrap_or_else(|e| panic!("{to}: {e}"));
        for (field, want) in *fields {
            assert_eq!(body[*field], *want, "{to}: {field} in {body}");
        }
        // Written as the API writes it, the line reads back as the render's words.
        let written: Vec<String> = fields
            .iter()
            .map(|(f, _)| body[*f].as_str().unwrap().to_owned())
            .collect();
        let reread: Vec<String> = tokenize(&written.join(" "));
        let words = tokenize(to);
        assert!(
            reread.iter().all(|w| words.contains(w)),
            "{to}: {written:?} reads as {reread:?}"
        );
    }
    let raw = [
        (
            RULE,
            r#"http-request set-header X-Render "${HOST}""#,
            "environment variable",
        ),
        (
            RULE,
            r#"http-request return status 200 string "\xe9""#,
            "non-ASCII",
        ),
        (SWITCH, r#"use_backend "be api" if is_api"#, "needs quotes"),
        (ACL, r#"acl "is api" path_beg /api"#, "needs quotes"),
    ];
    for (from, to, why) in raw {
        match sent(from, to) {
            Err(what) => assert!(what.contains(why), "{to}: {what}"),
            Ok(body) => panic!("{to}: sent {body}"),
        }
    }
}

/// A process killed when the test ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The texts the model sends, written into a rule as the Dataplane API writes it
/// (config-parser: `return status S content-type T <format> <content> <cond> <test>`), pass
/// `haproxy -c`, and a real HAProxy serves the render's words.
#[test]
fn haproxy_serves_the_texts_the_model_sends() {
    let contents = [
        "Service unavailable",
        "say \"hi\"",
        "back\\",
        r"a\.b\1",
        "100% $HOME #1 'q'",
        "tab\there",
        "é ü",
    ];
    let types = ["text/plain", "text/plain; charset=utf-8"];
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("s.sock");
    let mut cfg = format!(
        "global\n    maxconn 100\ndefaults\n    mode http\n    timeout connect 1s\n    timeout client 5s\n    timeout server 5s\nfrontend f\n    bind unix@{}\n",
        sock.display()
    );
    let s = |v: &Value| v.as_str().unwrap().to_owned();
    for (i, content) in contents.iter().enumerate() {
        let ct = types[i % 2];
        let line = format!(
            "http-request return status 200 content-type {} string {} if {{ path /{i} }}",
            quote_all(&[ct.to_owned()]),
            quote_all(&[(*content).to_owned()])
        );
        let b = sent(RULE, &line).unwrap_or_else(|e| panic!("{line}: {e}"));
        cfg.push_str(&format!(
            "    http-request return status {} content-type {} {} {} {} {}\n",
            b["return_status_code"],
            s(&b["return_content_type"]),
            s(&b["return_content_format"]),
            s(&b["return_content"]),
            s(&b["cond"]),
            s(&b["cond_test"]),
        ));
    }
    let path = dir.path().join("haproxy.cfg");
    std::fs::write(&path, &cfg).unwrap();
    let check = Command::new("haproxy")
        .arg("-c")
        .arg("-f")
        .arg(&path)
        .output()
        .expect("haproxy (the real binary) on PATH");
    assert!(
        check.status.success(),
        "haproxy -c refused what the model sends:\n{cfg}\n{}",
        String::from_utf8_lossy(&check.stderr)
    );
    let _haproxy = Killed(
        Command::new("haproxy")
            .arg("-db")
            .arg("-f")
            .arg(&path)
            .spawn()
            .unwrap(),
    );
    for (i, content) in contents.iter().enumerate() {
        let (ct, body) = get(&sock, i);
        assert_eq!(body, *content, "/{i}");
        assert_eq!(ct, types[i % 2], "/{i}");
    }
}

/// `GET /{i}` over the unix socket: (content type, body). Retried while HAProxy starts
/// (bounded: 200 tries, curl's own connect failure ends each at once).
fn get(sock: &Path, i: usize) -> (String, String) {
    let mut last = String::new();
    for _ in 0..200 {
        let out = Command::new("curl")
            .args(["-s", "--max-time", "5", "--unix-socket"])
            .arg(sock)
            .args(["-w", "\n%{content_type}"])
            .arg(format!("http://pod/{i}"))
            .output()
            .unwrap();
        if out.status.success() {
            let text = String::from_utf8(out.stdout).unwrap();
            let (body, ct) = text.rsplit_once('\n').unwrap();
            return (ct.to_owned(), body.to_owned());
        }
        last = String::from_utf8_lossy(&out.stderr).into_owned();
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("no answer on {}: {last}", sock.display());
}
