//! `http-request` and `http-response` rules: each action's syntax as a list of elements, read
//! both ways (model → line for writes, line → model for reads).
//!
//! Values are raw words, written as given: `return_content` `"a b"` stays quoted in the file and
//! comes back quoted; unquoted text with blanks is written as is and HAProxy refuses the file, as
//! with the real API (observed-v3.4.md). A field the spec ties to other rule types is ignored (as
//! the real API's serializer does); a field tied to this type that the action's syntax here does
//! not carry, and an action not listed, answer 501.

use serde_json::{Map, Value, json};

use super::body::{Body, Refusal, not_implemented};
use super::text::Line;

/// One element of an action's syntax after its keyword.
#[derive(Debug, Clone, Copy)]
enum El {
    /// A required raw word.
    Word(&'static str),
    /// A required integer.
    IntWord(&'static str),
    /// The words up to the condition, joined by blanks (required).
    Rest(&'static str),
    /// The words up to the condition, when there are any.
    OptRest(&'static str),
    /// `keyword <raw word>` when the field is set.
    Opt(&'static str, &'static str),
    /// `keyword <integer>` when the field is set.
    OptInt(&'static str, &'static str),
    /// `<return_content_format> [<return_content>]` when set.
    Content,
    /// `hdr <name> <fmt>` for each of `return_hdrs`.
    Hdrs,
}

use El::{Content, Hdrs, IntWord, Opt, OptInt, OptRest, Rest, Word};

/// Actions whose keyword carries `(<var_scope>.<var_name>)`.
const VAR_ACTIONS: &[&str] = &["set-var", "set-var-fmt", "unset-var"];

const DENY: &[El] = &[
    OptInt("deny_status", "deny_status"),
    Opt("content-type", "return_content_type"),
    Content,
    Hdrs,
];
const HEADER_SET: &[El] = &[Word("hdr_name"), Rest("hdr_format")];
const HEADER_REPLACE: &[El] = &[Word("hdr_name"), Word("hdr_match"), Rest("hdr_format")];
const EXPR: &[El] = &[Rest("expr")];

/// Actions of both rule kinds.
const COMMON: &[(&str, &[El])] = &[
    ("allow", &[]),
    ("deny", DENY),
    ("set-header", HEADER_SET),
    ("add-header", HEADER_SET),
    ("del-header", &[Word("hdr_name"), Opt("-m", "hdr_method")]),
    ("replace-header", HEADER_REPLACE),
    ("replace-value", HEADER_REPLACE),
    (
        "redirect",
        &[
            Word("redir_type"),
            Word("redir_value"),
            OptInt("code", "redir_code"),
            OptRest("redir_option"),
        ],
    ),
    (
        "return",
        &[
            OptInt("status", "return_status_code"),
            Opt("content-type", "return_content_type"),
            Content,
            Hdrs,
        ],
    ),
    ("set-var", &[Rest("var_expr")]),
    ("set-var-fmt", &[Rest("var_format")]),
    ("unset-var", &[]),
    ("set-log-level", &[Word("log_level")]),
    ("silent-drop", &[OptInt("rst-ttl", "rst_ttl")]),
    ("set-nice", &[IntWord("nice_value")]),
    ("set-tos", &[Word("tos_value")]),
    ("set-mark", &[Word("mark_value")]),
    ("strict-mode", &[Word("strict_mode")]),
    ("set-timeout", &[Word("timeout_type"), Word("timeout")]),
    ("do-log", &[]),
];

/// `http-request` only.
const REQUEST: &[(&str, &[El])] = &[
    ("tarpit", DENY),
    ("reject", &[]),
    ("auth", &[Opt("realm", "auth_realm")]),
    ("set-path", &[Rest("path_fmt")]),
    ("set-pathq", &[Rest("path_fmt")]),
    ("replace-path", &[Word("path_match"), Rest("path_fmt")]),
    ("replace-pathq", &[Word("path_match"), Rest("path_fmt")]),
    ("set-query", &[Rest("query-fmt")]),
    ("set-uri", &[Rest("uri-fmt")]),
    ("replace-uri", &[Word("uri-match"), Rest("uri-fmt")]),
    ("set-method", &[Rest("method_fmt")]),
    (
        "capture",
        &[
            Word("capture_sample"),
            OptInt("len", "capture_len"),
            OptInt("id", "capture_id"),
        ],
    ),
    ("use-service", &[Word("service_name")]),
    ("cache-use", &[Word("cache_name")]),
    ("early-hint", &[Word("hint_name"), Rest("hint_format")]),
    ("set-src", EXPR),
    ("set-src-port", EXPR),
    ("set-dst", EXPR),
    ("set-dst-port", EXPR),
    ("set-priority-class", EXPR),
    ("set-priority-offset", EXPR),
    ("set-retries", EXPR),
    ("disable-l7-retry", &[]),
    ("wait-for-handshake", &[]),
];

/// `http-response` only.
const RESPONSE: &[(&str, &[El])] = &[
    (
        "set-status",
        &[IntWord("status"), Opt("reason", "status_reason")],
    ),
    (
        "capture",
        &[Word("capture_sample"), OptInt("id", "capture_id")],
    ),
    ("cache-store", &[Word("cache_name")]),
];

fn syntax(response: bool, action: &str) -> Option<&'static [El]> {
    let own = if response { RESPONSE } else { REQUEST };
    COMMON
        .iter()
        .chain(own)
        .find(|(a, _)| *a == action)
        .map(|(_, els)| *els)
}

fn fields_of(els: &[El]) -> Vec<&'static str> {
    let mut out = Vec::new();
    for e in els {
        match *e {
            Word(f) | IntWord(f) | Rest(f) | OptRest(f) | Opt(_, f) | OptInt(_, f) => out.push(f),
            Content => out.extend(["return_content_format", "return_content"]),
            Hdrs => out.push("return_hdrs"),
        }
    }
    out
}

/// The line of a rule body (`keyword` is `http-request` or `http-response`).
pub(crate) fn rule_line(keyword: &str, b: &Body) -> Result<Line, Refusal> {
    let response = keyword == "http-response";
    let ty = b.req_str("type")?.to_owned();
    let els = syntax(response, &ty)
        .ok_or_else(|| not_implemented(format!("the {keyword} action {ty}")))?;
    let mut w = vec![keyword.to_owned()];
    if VAR_ACTIONS.contains(&ty.as_str()) {
        let scope = b.req_str("var_scope")?;
        let name = b.req_str("var_name")?;
        w.push(format!("{ty}({scope}.{name})"));
    } else {
        w.push(ty.clone());
    }
    let need = |f: &str| b.req_str(f).map(str::to_owned);
    for e in els {
        match *e {
            Word(f) | Rest(f) => w.push(need(f)?),
            IntWord(f) => w.push(
                b.int(f)
                    .ok_or_else(|| (422, format!("{f} in body is required")))?
                    .to_string(),
            ),
            OptRest(f) => w.extend(b.str(f).map(str::to_owned)),
            Opt(kw, f) => {
                if let Some(v) = b.str(f) {
                    w.extend([kw.to_owned(), v.to_owned()]);
                }
            }
            OptInt(kw, f) => {
                if let Some(v) = b.int(f) {
                    w.extend([kw.to_owned(), v.to_string()]);
                }
            }
            Content => {
                if let Some(format) = b.str("return_content_format") {
                    w.push(format.to_owned());
                    if format != "default-errorfiles" {
                        w.push(need("return_content")?);
                    }
                }
            }
            Hdrs => {
                for h in b
                    .value("return_hdrs")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let name = h.get("name").and_then(Value::as_str).unwrap_or_default();
                    let fmt = h.get("fmt").and_then(Value::as_str).unwrap_or_default();
                    w.extend(["hdr".to_owned(), name.to_owned(), fmt.to_owned()]);
                }
            }
        }
    }
    if let Some(c) = b.str("cond") {
        w.push(c.to_owned());
        w.push(need("cond_test")?);
    }
    // The spec's fields of other rule types are not this rule's: ignored, as the real API does.
    let used = fields_of(els);
    for f in b.unused() {
        let other_type = b.types_of(&f).is_some_and(|types| !types.contains(&ty));
        let content_only =
            matches!(f.as_str(), "return_content" | "return_hdrs") && !used.contains(&f.as_str());
        if other_type || content_only || f == "cond_test" {
            b.ignore(&f);
        }
    }
    b.finish()?;
    Ok(w)
}

/// A line's condition into the model (`cond`: `if` or `unless`, `cond_test`: the rest of the
/// line); where it starts (the line's length when there is none).
pub(crate) fn cond_model(words: &[String], m: &mut Map<String, Value>) -> usize {
    let at = words
        .iter()
        .position(|w| w == "if" || w == "unless")
        .unwrap_or(words.len());
    if at < words.len() {
        m.insert("cond".into(), json!(words[at]));
        m.insert("cond_test".into(), json!(words[at + 1..].join(" ")));
    }
    at
}

/// The model of a rule line (`None` in `strict` mode when a word is not understood).
pub(crate) fn rule_model(words: &[String], strict: bool) -> Option<Map<String, Value>> {
    let response = words.first()? == "http-response";
    let action = words.get(1)?;
    let (ty, var) = match action.split_once('(') {
        Some((t, rest)) => (t.to_owned(), rest.strip_suffix(')').map(str::to_owned)),
        None => (action.clone(), None),
    };
    let mut m = Map::new();
    m.insert("type".into(), json!(ty));
    if let Some((scope, name)) = var.as_deref().and_then(|v| v.split_once('.')) {
        m.insert("var_scope".into(), json!(scope));
        m.insert("var_name".into(), json!(name));
    }
    let cond_at = cond_model(words, &mut m);
    let Some(els) = syntax(response, &ty) else {
        return (!strict).then_some(m);
    };
    let args = &words[2..cond_at];
    let mut i = 0;
    let mut optional = Vec::new();
    for e in els {
        match *e {
            Word(f) => {
                m.insert(f.into(), json!(args.get(i)?));
                i += 1;
            }
            IntWord(f) => {
                m.insert(f.into(), json!(args.get(i)?.parse::<i64>().ok()?));
                i += 1;
            }
            _ => optional.push(*e),
        }
    }
    // Optional elements in any order, then the rest.
    'words: while i < args.len() {
        for e in &optional {
            match *e {
                Opt(kw, f) if args[i] == kw => {
                    m.insert(f.into(), json!(args.get(i + 1)?));
                    i += 2;
                    continue 'words;
                }
                OptInt(kw, f) if args[i] == kw => {
                    m.insert(f.into(), json!(args.get(i + 1)?.parse::<i64>().ok()?));
                    i += 2;
                    continue 'words;
                }
                Content if is_format(&args[i]) => {
                    m.insert("return_content_format".into(), json!(args[i]));
                    i += 1;
                    if args[i - 1] != "default-errorfiles" {
                        m.insert("return_content".into(), json!(args.get(i)?));
                        i += 1;
                    }
                    continue 'words;
                }
                Hdrs if args[i] == "hdr" => {
                    let hdr = json!({"name": args.get(i + 1)?, "fmt": args.get(i + 2)?});
                    let list = m.entry("return_hdrs").or_insert_with(|| json!([]));
                    list.as_array_mut()?.push(hdr);
                    i += 3;
                    continue 'words;
                }
                Rest(f) | OptRest(f) => {
                    m.insert(f.into(), json!(args[i..].join(" ")));
                    i = args.len();
                    continue 'words;
                }
                _ => {}
            }
        }
        if strict {
            return None;
        }
        i += 1;
    }
    Some(m)
}

fn is_format(w: &str) -> bool {
    matches!(
        w,
        "default-errorfiles"
            | "errorfile"
            | "errorfiles"
            | "file"
            | "lf-file"
            | "string"
            | "lf-string"
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn line(keyword: &str, v: Value) -> Result<Line, Refusal> {
        let model = if keyword == "http-request" {
            "http_request_rule"
        } else {
            "http_response_rule"
        };
        rule_line(keyword, &Body::new(model, &v)?)
    }

    #[test]
    fn return_content_is_written_as_given_and_read_back_with_its_quotes() {
        let w = line(
            "http-request",
            json!({"type": "return", "return_status_code": 200, "return_content_format": "string",
                   "return_content": "\"a b\"", "cond": "if", "cond_test": "{ path /x }"}),
        )
        .unwrap();
        assert_eq!(
            w.join(" "),
            "http-request return status 200 string \"a b\" if { path /x }"
        );
        let m = rule_model(&w, true).unwrap();
        assert_eq!(m["return_content"], "\"a b\"");
        assert_eq!(m["cond_test"], "{ path /x }");
    }

    #[test]
    fn fields_of_other_types_are_ignored_and_unsupported_ones_refused() {
        // The upstream Go deployer's body: capture_id on a capture rule, and on others.
        let w = line(
            "http-request",
            json!({"type": "capture", "capture_sample": "req.hdr(host)", "capture_len": 64}),
        )
        .unwrap();
        assert_eq!(w.join(" "), "http-request capture req.hdr(host) len 64");
        let w = line(
            "http-request",
            json!({"type": "set-header", "hdr_name": "X", "hdr_format": "y", "capture_id": 0}),
        )
        .unwrap();
        assert_eq!(w.join(" "), "http-request set-header X y");
        let (status, msg) =
            line("http-request", json!({"type": "lua", "lua_action": "x"})).unwrap_err();
        assert_eq!(status, 501, "{msg}");
        let w = line(
            "http-response",
            json!({"type": "set-var", "var_scope": "txn", "var_name": "x", "var_expr": "str(a)"}),
        )
        .unwrap();
        assert_eq!(w.join(" "), "http-response set-var(txn.x) str(a)");
        assert_eq!(rule_model(&w, true).unwrap()["var_name"], "x");
    }
}
