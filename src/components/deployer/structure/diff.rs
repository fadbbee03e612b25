//! The changes that turn what a pod runs into the render, as Dataplane API configuration
//! changes in apply order, or the reason they cannot be modelled (module doc of `structure`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::{Map, Value, json};

use super::equal::{Groups, default_server_after_server, equal, groups, sections_equal};
use super::model::{
    ChildKey, ChildKind, ObjectBody, Parent, ParentKind, child_kind, child_model, is_child_line,
    set_attribute,
};
use super::parse::{NoModel, ParsedConfig, Section, SectionKey};

/// One configuration change through the Dataplane API's configuration endpoints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigChange {
    /// `POST .../{backends|frontends}`: a new section with its attributes (its children follow
    /// as [`ConfigChange::CreateChild`]).
    CreateSection {
        /// Backend or frontend.
        kind: ParentKind,
        /// Its name.
        name: String,
        /// Its attributes (the API's `backend`/`frontend` model).
        body: ObjectBody,
    },
    /// `PUT .../{backends|frontends}/{name}`: the section's attributes (children untouched).
    ReplaceSection {
        /// Backend or frontend.
        kind: ParentKind,
        /// Its name.
        name: String,
        /// Every attribute of the render's section.
        body: ObjectBody,
    },
    /// `DELETE .../{backends|frontends}/{name}` (with its children).
    DeleteSection {
        /// Backend or frontend.
        kind: ParentKind,
        /// Its name.
        name: String,
    },
    /// `POST .../{parent}/{collection}` (rules: at `index`).
    CreateChild {
        /// The section it belongs to.
        parent: Parent,
        /// What it is.
        kind: ChildKind,
        /// Its name or index.
        key: ChildKey,
        /// The API's model of it.
        body: ObjectBody,
    },
    /// `PUT .../{parent}/{collection}/{key}`.
    ReplaceChild {
        /// The section it belongs to.
        parent: Parent,
        /// What it is.
        kind: ChildKind,
        /// Its name or index.
        key: ChildKey,
        /// The API's model of the render's object.
        body: ObjectBody,
        /// For servers: the model fields that differ (sorted); a server whose differing
        /// fields are all [`RUNTIME_SERVER_FIELDS`] is applied by the real API at runtime.
        changed_fields: Vec<String>,
    },
    /// `DELETE .../{parent}/{collection}/{key}`.
    DeleteChild {
        /// The section it belongs to.
        parent: Parent,
        /// What it is.
        kind: ChildKind,
        /// Its name or index.
        key: ChildKey,
    },
}

impl ConfigChange {
    /// A short description for drift reports and logs (`server be_app/app`).
    #[must_use]
    pub fn describe(&self) -> String {
        match self {
            ConfigChange::CreateSection { kind, name, .. }
            | ConfigChange::ReplaceSection { kind, name, .. }
            | ConfigChange::DeleteSection { kind, name } => format!("{} {name}", kind.keyword()),
            ConfigChange::CreateChild {
                parent, kind, key, ..
            }
            | ConfigChange::ReplaceChild {
                parent, kind, key, ..
            }
            | ConfigChange::DeleteChild { parent, kind, key } => {
                format!("{} {}/{key}", kind.collection(), parent.name)
            }
        }
    }

    /// True for a replace of an existing server whose changed fields are all ones the real
    /// Dataplane API applies through HAProxy's runtime API without a reload
    /// ([`RUNTIME_SERVER_FIELDS`]).
    #[must_use]
    pub fn is_runtime_server_update(&self) -> bool {
        match self {
            ConfigChange::ReplaceChild {
                kind: ChildKind::Server,
                parent:
                    Parent {
                        kind: ParentKind::Backend,
                        ..
                    },
                changed_fields,
                ..
            } => {
                !changed_fields.is_empty()
                    && changed_fields
                        .iter()
                        .all(|f| RUNTIME_SERVER_FIELDS.contains(&f.as_str()))
            }
            _ => false,
        }
    }
}

/// The server model fields the real Dataplane API changes through HAProxy's runtime API
/// without a reload when they are the only ones that differ (dataplaneapi
/// `handlers/configuration/server/server.go`, `runtimeSupportedServerFields`: Weight,
/// Address, Port, Maintenance, AgentCheck, AgentAddr, AgentSend, HealthCheckPort).
pub const RUNTIME_SERVER_FIELDS: &[&str] = &[
    "weight",
    "address",
    "port",
    "maintenance",
    "agent-check",
    "agent-addr",
    "agent-send",
    "health_check_port",
];

/// The outcome of [`diff`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigDiff {
    /// The changes, in apply order: deletes (children first, highest index first), creates
    /// (sections first), then updates. Empty when equal.
    Changes(Vec<ConfigChange>),
    /// A difference the model does not cover; `what` names it (`global`, `backend x: filter`).
    Unmodelled {
        /// What differs and is not modelled.
        what: String,
    },
}

/// A child as modelled, or its words and why it has no model (then it may only stay
/// unchanged).
type Child = Result<Value, Opaque>;

/// A child line without a model.
#[derive(Clone, Debug, PartialEq)]
struct Opaque {
    words: Vec<String>,
    why: NoModel,
}

/// A modelled section: attributes and children by kind.
struct ModelledSection {
    /// The modelled attributes (with `name`).
    attributes: Value,
    /// Attribute lines without a model, normalised by family (`equal`'s order rules).
    opaque: Groups,
    /// The first reason an attribute or child has no model.
    why: Option<NoModel>,
    named: BTreeMap<(ChildKind, String), Child>,
    indexed: BTreeMap<ChildKind, Vec<Child>>,
}

impl ModelledSection {
    /// Every line modelled (a section to create or whose attributes are replaced).
    fn complete(&self) -> Result<(), NoModel> {
        let opaque_child = self.named.values().any(Result::is_err)
            || self.indexed.values().flatten().any(Result::is_err);
        match &self.why {
            Some(w) if !self.opaque.is_empty() || opaque_child => Err(w.clone()),
            _ => Ok(()),
        }
    }
}

/// The key of a named child: `name` (a template's `prefix`), from the model or the words.
fn child_key(ck: ChildKind, child: &Child) -> String {
    match child {
        Ok(v) => v
            .get(if ck == ChildKind::ServerTemplate {
                "prefix"
            } else {
                "name"
            })
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        Err(Opaque { words, .. }) if ck == ChildKind::Bind => {
            words.windows(2).find(|w| w[0] == "name").map_or_else(
                || words.get(1).cloned().unwrap_or_default(),
                |w| w[1].clone(),
            )
        }
        Err(Opaque { words, .. }) => words.get(1).cloned().unwrap_or_default(),
    }
}

/// Models one section (what has no model is kept opaque, see [`ModelledSection::complete`]).
fn model_section(kind: ParentKind, name: &str, s: &Section) -> Result<ModelledSection, NoModel> {
    if s.from.is_some() || !s.header.is_empty() {
        return Err(format!("{} {name}: from/header", kind.keyword()));
    }
    let label = |e: &str| format!("{} {name}: {e}", kind.keyword());
    let mut m = ModelledSection {
        attributes: json!({ "name": name }),
        opaque: Groups::new(),
        why: None,
        named: BTreeMap::new(),
        indexed: BTreeMap::new(),
    };
    let mut opaque = Vec::new();
    for l in &s.lines {
        if is_child_line(kind, &l.words[0]) {
            let ck = child_kind(kind, &l.words[0]);
            let child: Child = match child_model(kind, &l.words) {
                Ok(Some((_, v))) => Ok(v),
                Ok(None) => Err(Opaque {
                    words: l.words.clone(),
                    why: "no model".into(),
                }),
                Err(e) => {
                    m.why.get_or_insert_with(|| label(&e));
                    Err(Opaque {
                        words: l.words.clone(),
                        why: e,
                    })
                }
            };
            if ck.indexed() {
                m.indexed.entry(ck).or_default().push(child);
            } else {
                let key = child_key(ck, &child);
                if m.named.insert((ck, key.clone()), child).is_some() {
                    return Err(label(&format!("duplicate {key}")));
                }
            }
        } else if let Some(obj) = m.attributes.as_object_mut()
            && let Err(e) = set_attribute(kind, obj, &l.words)
        {
            m.why.get_or_insert_with(|| label(&e));
            opaque.push(l);
        }
    }
    m.opaque = groups(kind.keyword(), opaque);
    Ok(m)
}

/// The first family whose lines differ between `a` and `b`.
fn first_difference<'a>(a: &'a Groups, b: &'a Groups) -> Option<&'a str> {
    a.keys()
        .chain(b.keys())
        .find(|f| a.get(*f) != b.get(*f))
        .map(String::as_str)
}

/// The model of a changed child, or `Err` naming it when it has none.
fn modelled<'a>(
    parent: &Parent,
    ck: ChildKind,
    key: &dyn fmt::Display,
    c: &'a Child,
) -> Result<&'a Value, NoModel> {
    c.as_ref().map_err(|o| {
        format!(
            "{} {}: {} {key}: {}: {}",
            parent.kind.keyword(),
            parent.name,
            ck.collection(),
            o.words.join(" "),
            o.why
        )
    })
}

/// Changed top-level fields of two models (sorted).
fn changed_fields(a: &Value, b: &Value) -> Vec<String> {
    let empty = Map::new();
    let a = a.as_object().unwrap_or(&empty);
    let b = b.as_object().unwrap_or(&empty);
    let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    keys.into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .cloned()
        .collect()
}

/// Lists the Dataplane configuration changes that turn `running` into `render` (module doc).
#[must_use]
pub fn diff(running: &ParsedConfig, render: &ParsedConfig) -> ConfigDiff {
    match try_diff(running, render) {
        Ok(c) => ConfigDiff::Changes(c),
        Err(what) => ConfigDiff::Unmodelled { what },
    }
}

fn try_diff(running: &ParsedConfig, render: &ParsedConfig) -> Result<Vec<ConfigChange>, NoModel> {
    let pre = |p: &ParsedConfig| {
        p.preamble
            .iter()
            .map(|l| l.words.clone())
            .collect::<Vec<_>>()
    };
    if pre(running) != pre(render) {
        return Err("lines before the first section".into());
    }
    if !equal(running, render) {
        // The API would rewrite such a section with its default-server lines first.
        for (side, config) in [("render", render), ("running", running)] {
            if let Some(what) = default_server_after_server(config) {
                return Err(format!("{side} {what}"));
            }
        }
    }
    let mut child_deletes = Vec::new();
    let mut section_deletes = Vec::new();
    let mut section_creates = Vec::new();
    let mut child_creates = Vec::new();
    let mut updates = Vec::new();
    let keys: BTreeSet<&SectionKey> = running
        .sections
        .keys()
        .chain(render.sections.keys())
        .collect();
    // Backends before frontends in every group (a frontend names its backends).
    let mut keys: Vec<&SectionKey> = keys.into_iter().collect();
    keys.sort_by_key(|k| (ParentKind::of(&k.kind).map_or(2, |p| p as u8), (*k).clone()));
    for key in keys {
        let (a, b) = (running.sections.get(key), render.sections.get(key));
        if let (Some(a), Some(b)) = (a, b)
            && sections_equal(key, a, b)
        {
            continue;
        }
        let Some(kind) = ParentKind::of(&key.kind) else {
            return Err(key.to_string());
        };
        let name = key.name.clone();
        match (a, b) {
            (Some(_), None) => section_deletes.push(ConfigChange::DeleteSection { kind, name }),
            (None, Some(b)) => {
                let m = model_section(kind, &name, b)?;
                m.complete()?;
                section_creates.push(ConfigChange::CreateSection {
                    kind,
                    name: name.clone(),
                    body: ObjectBody(m.attributes),
                });
                let parent = Parent { kind, name };
                for ((ck, k), body) in m.named {
                    let body = ObjectBody(modelled(&parent, ck, &k, &body)?.clone());
                    child_creates.push(ConfigChange::CreateChild {
                        parent: parent.clone(),
                        kind: ck,
                        key: ChildKey::Name(k),
                        body,
                    });
                }
                for (ck, list) in m.indexed {
                    for (i, body) in list.into_iter().enumerate() {
                        child_creates.push(ConfigChange::CreateChild {
                            parent: parent.clone(),
                            kind: ck,
                            key: ChildKey::Index(i as u32),
                            body: ObjectBody(modelled(&parent, ck, &i, &body)?.clone()),
                        });
                    }
                }
            }
            (Some(a), Some(b)) => {
                let (ma, mb) = (model_section(kind, &name, a), model_section(kind, &name, b));
                let mb = mb?;
                let ma = ma.map_err(|e| format!("running {e}"))?;
                let parent = Parent {
                    kind,
                    name: name.clone(),
                };
                if let Some(family) = first_difference(&ma.opaque, &mb.opaque) {
                    return Err(format!("{key}: {family} (not modelled)"));
                }
                if ma.attributes != mb.attributes {
                    if !mb.opaque.is_empty() || !ma.opaque.is_empty() {
                        return Err(mb.why.or(ma.why).unwrap_or_else(|| key.to_string()));
                    }
                    updates.push(ConfigChange::ReplaceSection {
                        kind,
                        name: name.clone(),
                        body: ObjectBody(mb.attributes.clone()),
                    });
                }
                let named: BTreeSet<&(ChildKind, String)> =
                    ma.named.keys().chain(mb.named.keys()).collect();
                for nk in named {
                    let (ck, k) = nk.clone();
                    match (ma.named.get(nk), mb.named.get(nk)) {
                        (Some(_), None) => child_deletes.push(ConfigChange::DeleteChild {
                            parent: parent.clone(),
                            kind: ck,
                            key: ChildKey::Name(k),
                        }),
                        (None, Some(body)) => {
                            let body = modelled(&parent, ck, &k, body)?;
                            child_creates.push(ConfigChange::CreateChild {
                                parent: parent.clone(),
                                kind: ck,
                                key: ChildKey::Name(k),
                                body: ObjectBody(body.clone()),
                            });
                        }
                        (Some(old), Some(new)) if old != new => {
                            let old = modelled(&parent, ck, &k, old)?;
                            let new = modelled(&parent, ck, &k, new)?;
                            updates.push(ConfigChange::ReplaceChild {
                                parent: parent.clone(),
                                kind: ck,
                                key: ChildKey::Name(k),
                                body: ObjectBody(new.clone()),
                                changed_fields: changed_fields(old, new),
                            });
                        }
                        _ => {}
                    }
                }
                let kinds: BTreeSet<&ChildKind> =
                    ma.indexed.keys().chain(mb.indexed.keys()).collect();
                let none = Vec::new();
                for ck in kinds {
                    let old = ma.indexed.get(ck).unwrap_or(&none);
                    let new = mb.indexed.get(ck).unwrap_or(&none);
                    for i in (new.len()..old.len()).rev() {
                        child_deletes.push(ConfigChange::DeleteChild {
                            parent: parent.clone(),
                            kind: *ck,
                            key: ChildKey::Index(i as u32),
                        });
                    }
                    for (i, body) in new.iter().enumerate().skip(old.len()) {
                        let body = modelled(&parent, *ck, &i, body)?;
                        child_creates.push(ConfigChange::CreateChild {
                            parent: parent.clone(),
                            kind: *ck,
                            key: ChildKey::Index(i as u32),
                            body: ObjectBody(body.clone()),
                        });
                    }
                    for (i, (o, n)) in old.iter().zip(new).enumerate() {
                        if o != n {
                            let o = modelled(&parent, *ck, &i, o)?;
                            let n = modelled(&parent, *ck, &i, n)?;
                            updates.push(ConfigChange::ReplaceChild {
                                parent: parent.clone(),
                                kind: *ck,
                                key: ChildKey::Index(i as u32),
                                body: ObjectBody(n.clone()),
                                changed_fields: changed_fields(o, n),
                            });
                        }
                    }
                }
            }
            (None, None) => {}
        }
    }
    let mut out = child_deletes;
    out.extend(section_deletes);
    out.extend(section_creates);
    out.extend(child_creates);
    out.extend(updates);
    Ok(out)
}
