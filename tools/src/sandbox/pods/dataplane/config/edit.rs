//! One edit of the configuration through the object endpoints, applied to a text: the new text
//! (in the API's layout) and the object as the API answers it.

use serde_json::Value;

use super::body::{Body, Refusal};
use super::kinds::{ChildKind, SectionKind};
use super::sections::{owns, section_lines};
use super::text::{Line, Sect, read_sections, write_sections};

/// Where a child lives: its section keyword and name.
#[derive(Debug, Clone)]
pub(crate) struct Parent {
    /// `backend`, `frontend`, `defaults`.
    pub(crate) keyword: &'static str,
    /// The section's name.
    pub(crate) name: String,
}

/// One edit.
#[derive(Debug)]
pub(crate) enum Edit {
    /// `POST .../<sections>`: a new section.
    CreateSection {
        kind: &'static SectionKind,
        body: Value,
    },
    /// `PUT .../<sections>/<name>` (or `.../global`): the section's attributes.
    ReplaceSection {
        kind: &'static SectionKind,
        name: String,
        body: Value,
    },
    /// `DELETE .../<sections>/<name>`.
    DeleteSection {
        kind: &'static SectionKind,
        name: String,
    },
    /// `POST .../<children>` (`index`: `POST .../<children>/<index>`).
    CreateChild {
        kind: &'static ChildKind,
        parent: Parent,
        index: Option<usize>,
        body: Value,
    },
    /// `PUT .../<children>/<key>`.
    ReplaceChild {
        kind: &'static ChildKind,
        parent: Parent,
        key: String,
        body: Value,
    },
    /// `DELETE .../<children>/<key>`.
    DeleteChild {
        kind: &'static ChildKind,
        parent: Parent,
        key: String,
    },
}

/// The position of the child `key` among `lines` (by index among its kind's lines, or name).
pub(crate) fn locate(kind: &ChildKind, lines: &[Line], key: &str) -> Option<usize> {
    let mine = (0..lines.len()).filter(|j| lines[*j][0] == kind.keyword);
    if kind.by_index {
        let n: usize = key.parse().ok()?;
        mine.clone().nth(n)
    } else {
        mine.clone().find(|j| kind.key_of(&lines[*j]) == key)
    }
}

fn find(sections: &[Sect], keyword: &str, name: &str) -> Option<usize> {
    sections
        .iter()
        .position(|s| s.kind == keyword && s.name == name)
}

fn not_found(what: impl std::fmt::Display) -> Refusal {
    (404, format!("{what} not found"))
}

/// The index of a child's section (404 naming it when missing).
fn find_parent(sections: &[Sect], parent: &Parent) -> Result<usize, Refusal> {
    find(sections, parent.keyword, &parent.name)
        .ok_or_else(|| not_found(format!("{} {}", parent.keyword, parent.name)))
}

fn child_line(kind: &ChildKind, body: &Value) -> Result<(Line, Value), Refusal> {
    let b = Body::new(kind.model, body)?;
    let line = (kind.to_line)(&b)?;
    Ok((line, b.echo()))
}

/// Applies `edit` to `text`: the new text and the object as answered.
pub(crate) fn apply(text: &str, edit: &Edit) -> Result<(String, Value), Refusal> {
    let mut sections = read_sections(text);
    let echo = match edit {
        Edit::CreateSection { kind, body } => {
            let b = Body::new(kind.model, body)?;
            let name = b.req_str("name")?.to_owned();
            if find(&sections, kind.keyword, &name).is_some() {
                return Err((409, format!("{} {name} already exists", kind.keyword)));
            }
            let (lines, rest) = section_lines(kind, &b)?;
            sections.push(Sect {
                kind: kind.keyword.to_owned(),
                name,
                rest,
                lines,
            });
            b.echo()
        }
        Edit::ReplaceSection { kind, name, body } => {
            let i = find(&sections, kind.keyword, name)
                .ok_or_else(|| not_found(format!("{} {name}", kind.keyword)))?;
            let b = Body::new(kind.model, body)?;
            if !kind.singleton && b.str("name").is_some_and(|n| n != name) {
                return Err((400, "name: does not match the path".to_owned()));
            }
            let (mut lines, rest) = section_lines(kind, &b)?;
            lines.extend(sections[i].lines.iter().filter(|l| !owns(kind, l)).cloned());
            sections[i].lines = lines;
            sections[i].rest = rest;
            b.echo()
        }
        Edit::DeleteSection { kind, name } => {
            let i = find(&sections, kind.keyword, name)
                .ok_or_else(|| not_found(format!("{} {name}", kind.keyword)))?;
            sections.remove(i);
            Value::Null
        }
        Edit::CreateChild {
            kind,
            parent,
            index,
            body,
        } => {
            let i = find_parent(&sections, parent)?;
            let (line, echo) = child_line(kind, body)?;
            let lines = &mut sections[i].lines;
            if kind.by_index {
                let positions: Vec<usize> = (0..lines.len())
                    .filter(|j| lines[*j][0] == kind.keyword)
                    .collect();
                let at = index.unwrap_or(positions.len());
                if at > positions.len() {
                    return Err((400, format!("index {at} out of range")));
                }
                let pos = positions
                    .get(at)
                    .copied()
                    .unwrap_or_else(|| positions.last().map_or(lines.len(), |p| p + 1));
                lines.insert(pos, line);
            } else {
                let key = kind.key_of(&line);
                if locate(kind, lines, &key).is_some() {
                    return Err((409, format!("{} {key} already exists", kind.keyword)));
                }
                lines.push(line);
            }
            echo
        }
        Edit::ReplaceChild {
            kind,
            parent,
            key,
            body,
        } => {
            let i = find_parent(&sections, parent)?;
            let pos = locate(kind, &sections[i].lines, key)
                .ok_or_else(|| not_found(format!("{} {key}", kind.keyword)))?;
            let (line, echo) = child_line(kind, body)?;
            if !kind.by_index && kind.key_of(&line) != *key {
                return Err((400, "name: does not match the path".to_owned()));
            }
            sections[i].lines[pos] = line;
            echo
        }
        Edit::DeleteChild { kind, parent, key } => {
            let i = find_parent(&sections, parent)?;
            let pos = locate(kind, &sections[i].lines, key)
                .ok_or_else(|| not_found(format!("{} {key}", kind.keyword)))?;
            sections[i].lines.remove(pos);
            Value::Null
        }
    };
    Ok((write_sections(sections), echo))
}

/// The line of the child `key` in `text`, if there is one.
pub(crate) fn child_of(text: &str, kind: &ChildKind, parent: &Parent, key: &str) -> Option<Line> {
    let s = read_sections(text)
        .into_iter()
        .find(|s| s.kind == parent.keyword && s.name == parent.name)?;
    let pos = locate(kind, &s.lines, key)?;
    s.lines.into_iter().nth(pos)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::kinds::{child_kind, section_kind};
    use super::*;
    use serde_json::json;

    const TEXT: &str = "global\n    stats socket /var/run/haproxy.sock level admin\ndefaults\n  mode http\nbackend web\n    server srv1 10.0.0.1:80 weight 100 check # c\n    balance roundrobin\n";

    fn parent(name: &str) -> Parent {
        Parent {
            keyword: "backend",
            name: name.into(),
        }
    }

    #[test]
    fn api_layout_unknown_fields_dropped_spec_fields_refused() {
        let servers = child_kind("backend", "servers").unwrap();
        let (out, echo) = apply(
            TEXT,
            &Edit::ReplaceChild {
                kind: servers,
                parent: parent("web"),
                key: "srv1".into(),
                body: json!({"name": "srv1", "address": "10.0.0.2", "port": 81, "weight": 5,
                             "check": "enabled", "inter": 2000, "bogus": 1}),
            },
        )
        .unwrap();
        assert!(
            out.contains("\nbackend web\n  balance roundrobin\n  server srv1 10.0.0.2:81 check inter 2s weight 5\n"),
            "{out}"
        );
        assert!(
            out.contains("\ndefaults unnamed_defaults_1\n  mode http\n"),
            "{out}"
        );
        assert!(echo.get("bogus").is_none(), "unknown fields are dropped");
        let (status, msg) = apply(
            TEXT,
            &Edit::CreateChild {
                kind: servers,
                parent: parent("web"),
                index: None,
                body: json!({"name": "s2", "address": "10.0.0.3", "set-proxy-v2-tlv-fmt": {"id": "x"}}),
            },
        )
        .unwrap_err();
        assert_eq!(status, 501, "{msg}");
        assert!(msg.contains("set-proxy-v2-tlv-fmt"), "{msg}");
    }

    #[test]
    fn global_and_defaults_sections_keep_what_they_do_not_model() {
        let global = section_kind("global").unwrap();
        let (out, _) = apply(
            TEXT,
            &Edit::ReplaceSection {
                kind: global,
                name: String::new(),
                body: json!({"daemon": true, "performance_options": {"maxconn": 100},
                             "runtime_apis": [{"address": "/var/run/haproxy.sock", "level": "admin"}]}),
            },
        )
        .unwrap();
        assert!(
            out.starts_with("\nglobal\n  maxconn 100\n  daemon\n  stats socket /var/run/haproxy.sock level admin\n"),
            "{out}"
        );
        let defaults = section_kind("defaults").unwrap();
        let (out, _) = apply(
            TEXT,
            &Edit::ReplaceSection {
                kind: defaults,
                name: "unnamed_defaults_1".into(),
                body: json!({"name": "unnamed_defaults_1", "mode": "tcp", "connect_timeout": 5000,
                             "dontlognull": "enabled"}),
            },
        )
        .unwrap();
        assert!(
            out.contains("defaults unnamed_defaults_1\n  mode tcp\n  option dontlognull\n  timeout connect 5s\n"),
            "{out}"
        );
    }
}
