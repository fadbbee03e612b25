//! Renders whose meaning the Dataplane API would change when it stores them: it writes every
//! configuration in its own layout (config-parser's writer, for raw pushes too), and that
//! layout puts a section's `default-server` lines before its `server` and `server-template`
//! lines. HAProxy applies a `default-server` line only to the servers after it, so a render with
//! one after a server would run differently once stored: refused at validation, naming the
//! section and the fix (issue 24, finding 5; the deployer's comparison would otherwise push it
//! again at every drift check).

/// One message per section that has a `default-server` line after a `server` or
/// `server-template` line; empty when none has.
#[must_use]
pub fn check_layout(config: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(config);
    let mut errors = Vec::new();
    let mut section: Option<String> = None;
    let mut first_server: Option<String> = None;
    let mut reported = false;
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let Some(first) = words.next() else { continue };
        if first.starts_with('#') {
            continue;
        }
        if crate::core::render::SECTION_KEYWORDS.contains(&first) {
            section = Some(match words.next() {
                Some(name) => format!("{first} {name}"),
                None => first.to_owned(),
            });
            first_server = None;
            reported = false;
            continue;
        }
        match first {
            "server" | "server-template" if first_server.is_none() => {
                first_server = Some(words.next().unwrap_or_default().to_owned());
            }
            "default-server" if !reported => {
                if let (Some(section), Some(server)) = (&section, &first_server) {
                    errors.push(format!(
                        "{section}: a default-server line after server {server}: HAProxy applies \
                         it only to the servers after it, but the Dataplane API stores every \
                         default-server line before the servers, which would change what it \
                         does; put the default-server line before the first server, or its \
                         parameters on the servers after it"
                    ));
                    reported = true;
                }
            }
            _ => {}
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_default_server_after_a_server_is_refused_naming_the_section() {
        let ok = "backend be\n    default-server check\n    server a 127.0.0.1:1\n    server b 127.0.0.1:2\n";
        assert!(check_layout(ok.as_bytes()).is_empty());
        let bad = "global\n    daemon\nbackend be\n    server a 127.0.0.1:1\n    default-server maxconn 7\n    server b 127.0.0.1:2\n    default-server check\nbackend other\n    server c 127.0.0.1:3\n";
        let errors = check_layout(bad.as_bytes());
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].starts_with("backend be: a default-server line after server a"));
        // A commented-out line and another section's servers do not count.
        let commented = "backend be\n    server a 127.0.0.1:1\n    # default-server check\nbackend x\n    default-server check\n";
        assert!(check_layout(commented.as_bytes()).is_empty());
    }
}
