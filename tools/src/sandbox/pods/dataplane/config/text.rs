//! The configuration file as the object endpoints edit it: sections of lines of raw words.
//!
//! A word is kept as written (quotes and escapes included), so a value goes back into the file
//! exactly as the client gave it and comes back from a `GET` as the file holds it: the real API
//! writes `return_content` as given and answers it with its quotes (observed-v3.4.md). Comments
//! are dropped. [`write_sections`] is the API's layout (config-parser's writer): sections by kind,
//! then by name (defaults keep their order), two-space indentation, keywords in a fixed sequence
//! (the others after them, in their order), unnamed `defaults` named `unnamed_defaults_N`.

/// Section keywords (HAProxy 2.6 to 3.x).
pub(crate) const SECTIONS: &[&str] = &[
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

/// One line: its raw words (the first is the keyword).
pub(crate) type Line = Vec<String>;

/// One section of the file.
#[derive(Debug, Clone)]
pub(crate) struct Sect {
    /// `backend`, `global`, ...
    pub(crate) kind: String,
    /// Its name (`""` for `global`; `unnamed_defaults_N` for an unnamed `defaults`).
    pub(crate) name: String,
    /// Raw words after the name (`from x`).
    pub(crate) rest: Vec<String>,
    /// Its lines.
    pub(crate) lines: Vec<Line>,
}

/// The raw words of one line: split at unquoted blanks, quotes and escapes kept, a comment (an
/// unquoted `#`) dropped.
pub(crate) fn words(line: &str) -> Line {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut it = line.chars();
    while let Some(c) = it.next() {
        match quote {
            Some(q) if c == q => {
                quote = None;
                cur.push(c);
            }
            Some('"') if c == '\\' => {
                cur.push(c);
                cur.extend(it.next());
            }
            Some(_) => cur.push(c),
            None => match c {
                ' ' | '\t' | '\r' => {
                    if !cur.is_empty() {
                        out.push(std::mem::take(&mut cur));
                    }
                }
                '#' => break,
                '"' | '\'' => {
                    quote = Some(c);
                    cur.push(c);
                }
                '\\' => {
                    cur.push(c);
                    cur.extend(it.next());
                }
                _ => cur.push(c),
            },
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// The sections of a configuration text (lines before the first section are dropped, as the
/// API's parser does).
pub(crate) fn read_sections(text: &str) -> Vec<Sect> {
    let mut out: Vec<Sect> = Vec::new();
    let mut unnamed = 0;
    for raw in text.lines() {
        let w = words(raw);
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
pub(crate) fn write_sections(mut sections: Vec<Sect>) -> String {
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
            out.push_str(&s.name);
        }
        for r in &s.rest {
            out.push(' ');
            out.push_str(r);
        }
        out.push('\n');
        let mut lines = s.lines;
        lines.sort_by_key(|l| kw_rank(&l[0]));
        for l in lines {
            out.push_str("  ");
            out.push_str(&l.join(" "));
            out.push('\n');
        }
    }
    out
}

/// Milliseconds as the API writes a time (`5s`, `250`).
pub(crate) fn time_text(ms: u64) -> String {
    if ms > 0 && ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        ms.to_string()
    }
}

/// A time word in milliseconds (`250`, `250ms`, `5s`, `1m`, `2h`, `1d`).
pub(crate) fn time_ms(v: &str) -> Option<u64> {
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn raw_words_keep_quotes_and_drop_comments() {
        let w = words(r#"  http-request return string "a b" if { path /x } # c"#);
        assert_eq!(
            w,
            [
                "http-request",
                "return",
                "string",
                "\"a b\"",
                "if",
                "{",
                "path",
                "/x",
                "}"
            ]
        );
        assert_eq!(time_ms("5s"), Some(5000));
        assert_eq!(time_text(1500), "1500");
    }

    #[test]
    fn layout_names_unnamed_defaults_and_orders_keywords() {
        let out = write_sections(read_sections(
            "global\n    daemon\ndefaults\n  mode http\nbackend b\n    server s 1.2.3.4:80\n    default-server check\n    mode http\n",
        ));
        assert_eq!(
            out,
            "\nglobal\n  daemon\n\ndefaults unnamed_defaults_1\n  mode http\n\nbackend b\n  mode http\n  default-server check\n  server s 1.2.3.4:80\n"
        );
    }
}
