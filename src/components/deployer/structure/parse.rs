//! Text to sections: HAProxy's word rules (`parse_line` in HAProxy's `src/tools.c`), and the way
//! back from a word to text HAProxy reads as that word ([`config_word`]).

use std::collections::BTreeMap;
use std::fmt;

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

/// In a word, marks an environment variable HAProxy expands (`$NAME`, `${NAME}`,
/// `${NAME-default}` inside double quotes); the expression follows. The pod's environment is not
/// known here, so such a word compares by its expression and has no model.
pub(super) const ENV: char = '\u{E000}';

/// In a word, marks a byte written `\xHH` that is not ASCII (a word here is text, HAProxy's is
/// bytes); its two hex digits follow.
pub(super) const BYTE: char = '\u{E001}';

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

/// One configuration line, tokenised as HAProxy reads it ([`tokenize`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Line {
    /// The words, unquoted and unescaped.
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

/// The whitespace that separates words (C's `isspace`).
fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\u{b}' | '\u{c}' | '\r')
}

/// Splits a line into words as HAProxy does (`parse_line`): blanks separate words; `"..."` and
/// `'...'` quote; `#` outside quotes starts a comment; a `\r` ends the line; outside single
/// quotes `\` escapes a blank, `\`, `#`, `'`, `"` (and `$` inside double quotes), and `\t`,
/// `\n`, `\r`, `\xHH` stand for their bytes, while any other `\` stays as written (`\1`, `\.`);
/// `$NAME` and `${NAME}` inside double quotes are environment variables, kept as a private-use
/// marker and the expression. A non-ASCII `\xHH` is kept as another marker and its digits.
#[must_use]
pub fn tokenize(line: &str) -> Vec<String> {
    let chars: Vec<char> = line.chars().collect();
    let mut words = Vec::new();
    let mut cur = String::new();
    let (mut in_word, mut squote, mut dquote) = (false, false, false);
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        i += 1;
        match c {
            '\r' => break,
            '#' if !squote && !dquote => break,
            '"' if !squote => dquote = !dquote,
            '\'' if !dquote => squote = !squote,
            '\\' if !squote => match next {
                Some(n @ (' ' | '\\' | '#' | '\'' | '"')) => {
                    cur.push(n);
                    i += 1;
                }
                Some('$') if dquote => {
                    cur.push('$');
                    i += 1;
                }
                Some(n @ ('t' | 'n' | 'r')) => {
                    cur.push(match n {
                        't' => '\t',
                        'n' => '\n',
                        _ => '\r',
                    });
                    i += 1;
                }
                Some('x') => match chars.get(i + 1..i + 3) {
                    Some(h) if h.iter().all(char::is_ascii_hexdigit) => {
                        let hex: String = h.iter().collect();
                        match u8::from_str_radix(&hex, 16) {
                            Ok(b) if b.is_ascii() => cur.push(char::from(b)),
                            _ => {
                                cur.push(BYTE);
                                cur.push_str(&hex.to_ascii_uppercase());
                            }
                        }
                        i += 3;
                    }
                    // HAProxy refuses an incomplete `\x`; keep it as written.
                    _ => cur.push('\\'),
                },
                _ => cur.push('\\'),
            },
            '$' if dquote => {
                cur.push(ENV);
                cur.push('$');
                if next == Some('{') {
                    while i < chars.len() {
                        cur.push(chars[i]);
                        i += 1;
                        if chars[i - 1] == '}' {
                            break;
                        }
                    }
                } else {
                    while i < chars.len()
                        && (chars[i].is_ascii_alphanumeric() || matches!(chars[i], '_' | '.'))
                    {
                        cur.push(chars[i]);
                        i += 1;
                    }
                }
            }
            c if is_space(c) && !squote && !dquote => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
                continue;
            }
            c => cur.push(c),
        }
        in_word = true;
    }
    if in_word {
        words.push(cur);
    }
    words
}

/// Why a line or word has no model (only for messages).
pub(super) type NoModel = String;

/// The text HAProxy reads back as the word `w` (the inverse of [`tokenize`] for one word): `w`
/// itself when it stands alone, else `w` in double quotes with `"`, `$`, control characters,
/// and every `\` that HAProxy would read as an escape, escaped. `Err` for a word holding an
/// environment variable or a non-ASCII `\x` byte (module doc of `structure`).
pub(super) fn config_word(w: &str) -> Result<String, NoModel> {
    if w.contains(ENV) {
        return Err(format!(
            "{}: an environment variable",
            w.replace(ENV, "").replace(BYTE, "\\x")
        ));
    }
    if w.contains(BYTE) {
        return Err(format!("{}: a non-ASCII byte", w.replace(BYTE, "\\x")));
    }
    let quoted = w.is_empty()
        || w.chars()
            .any(|c| is_space(c) || c.is_ascii_control() || matches!(c, '"' | '\'' | '#'));
    let chars: Vec<char> = w.chars().collect();
    let mut out = String::with_capacity(w.len() + 2);
    if quoted {
        out.push('"');
    }
    for (i, &c) in chars.iter().enumerate() {
        match c {
            '\\' => {
                // A backslash HAProxy would read as the start of an escape is written as a byte;
                // `\x5c` also never stands before a quote or a blank, where config-parser (the
                // API's reader) would take it for an escape of its own.
                let escape = match chars.get(i + 1) {
                    None => true,
                    Some(n) => {
                        is_space(*n)
                            || matches!(n, '\\' | 't' | 'n' | 'r' | '#' | '\'' | '"' | 'x')
                            || (quoted && *n == '$')
                    }
                };
                out.push_str(if escape { "\\x5c" } else { "\\" });
            }
            '"' => out.push_str("\\\""),
            '$' if quoted => out.push_str("\\$"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c.is_ascii_control() => out.push_str(&format!("\\x{:02x}", u32::from(c))),
            c => out.push(c),
        }
    }
    if quoted {
        out.push('"');
    }
    Ok(out)
}

/// Parses a configuration into sections (module doc of `structure`).
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// What [`config_word`] writes, HAProxy's word rules read back as the same word, and
        /// config-parser (the Dataplane API's reader, which takes `\` before a blank or a quote
        /// as an escape of its own) sees one word: no `\` before a blank, and inside quotes
        /// none before a `"` but the `\"` escape.
        #[test]
        fn a_written_word_reads_back_as_itself(
            w in r#"([ -~]|[\t\n\r]|é|\\[ \\tnrx#'"$]|\$\{?[A-Z]+\}?){0,12}"#
        ) {
            let written = config_word(&w).unwrap();
            prop_assert_eq!(tokenize(&format!("k {written} if x")), vec!["k".to_owned(), w.clone(), "if".into(), "x".into()]);
            let inner = written.strip_prefix('"').and_then(|s| s.strip_suffix('"')).unwrap_or(&written);
            let bytes = inner.as_bytes();
            for (i, b) in bytes.iter().enumerate() {
                if *b == b'\\' {
                    let next = bytes.get(i + 1).copied();
                    prop_assert!(next.is_some_and(|n| n != b' ' && n != b'\t'), "{written}");
                }
                if *b == b'"' {
                    prop_assert!(i > 0 && bytes[i - 1] == b'\\', "{written}");
                }
            }
        }
    }

    #[test]
    fn words_holding_the_environment_or_raw_bytes_cannot_be_written() {
        for line in [r#"x "${HOME}""#, r#"x "$HOME/a b""#, r#"x "\xe9""#] {
            let w = &tokenize(line)[1];
            assert!(config_word(w).is_err(), "{line}");
        }
        for (line, want) in [
            ("x '$HOME'", "$HOME"),
            (r#"x "\$HOME x""#, r#""\$HOME x""#),
            (r"x a\.b\1", r"a\.b\1"),
            (r#"x "a\\""#, r"a\x5c"),
            (r#"x "a\\ b""#, r#""a\x5c b""#),
            (r#"x "Service unavailable""#, r#""Service unavailable""#),
            (r#"x 'say "hi"'"#, r#""say \"hi\"""#),
        ] {
            assert_eq!(config_word(&tokenize(line)[1]).unwrap(), want, "{line}");
        }
    }
}
