//! Content comparison of raw configurations.

/// The configuration text without the Dataplane API's own header lines, for comparison.
///
/// Removes the `# _version=N` and `# _md5hash=...` lines the Dataplane API keeps at the top of
/// the file (ecosystem.md A.1), when they are in the leading block of comment/blank lines;
/// reads `\r\n` as `\n`; and ends the text with exactly one `\n` (none for an empty text).
/// Two configurations that normalise to the same string are the same configuration to
/// HAProxy, so the deployer pushes nothing (and triggers no reload) when they are equal.
pub fn normalize_raw_config(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut in_header = true;
    for line in raw.lines() {
        let trimmed = line.trim_end();
        if in_header {
            if is_dataplane_header(trimmed) {
                continue;
            }
            if !(trimmed.is_empty() || trimmed.starts_with('#')) {
                in_header = false;
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    while out.ends_with("\n\n") {
        out.pop();
    }
    if out == "\n" {
        out.clear();
    }
    out
}

/// True when `a` and `b` are the same configuration after [`normalize_raw_config`].
pub fn raw_configs_equal(a: &str, b: &str) -> bool {
    normalize_raw_config(a) == normalize_raw_config(b)
}

fn is_dataplane_header(line: &str) -> bool {
    line.starts_with("# _version=") || line.starts_with("# _md5hash=")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_dataplane_headers_and_trailing_newlines() {
        let running = "# _version=7\n# _md5hash=abc\nglobal\n  daemon\n\n\n";
        let desired = "global\n  daemon";
        assert_eq!(normalize_raw_config(running), "global\n  daemon\n");
        assert!(raw_configs_equal(running, desired));
    }

    #[test]
    fn keeps_other_comments_and_later_lines() {
        let cfg = "# managed by haptic\n# _version=3\nglobal\n# _version=9\n";
        assert_eq!(
            normalize_raw_config(cfg),
            "# managed by haptic\nglobal\n# _version=9\n"
        );
    }

    #[test]
    fn real_differences_remain() {
        assert!(!raw_configs_equal(
            "global\n  daemon\n",
            "global\n  nbthread 2\n"
        ));
        assert!(!raw_configs_equal("global\n", "\nglobal\n"));
        assert!(raw_configs_equal("global\r\n", "global\n"));
        assert_eq!(normalize_raw_config("# _version=1\n"), "");
    }
}
