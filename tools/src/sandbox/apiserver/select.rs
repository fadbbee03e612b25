//! Label selectors (`a=b`, `a==b`, `a!=b`, `a`, `!a`, `a in (x,y)`, `a notin (x)`; comma = AND) and
//! field selectors (`metadata.name`, `metadata.namespace`, any other dotted path; `=`, `==`, `!=`),
//! on list and watch (apiserver-emulation.md §6).

use super::status::{ApiError, ApiResult};
use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
enum Req {
    Eq(String, String),
    Ne(String, String),
    Exists(String),
    NotExists(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
}

/// A parsed label plus field selector; empty matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Selector {
    labels: Vec<Req>,
    fields: Vec<Req>,
}

/// Splits on commas that are not inside parentheses.
fn split_top(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut cur = String::new();
    for c in s.chars() {
        match c {
            '(' => {
                depth += 1;
                cur.push(c);
            }
            ')' => {
                depth -= 1;
                cur.push(c);
            }
            ',' if depth == 0 => out.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    out.push(cur);
    out.into_iter()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect()
}

fn parse_req(term: &str, fields: bool) -> ApiResult<Req> {
    let bad = || {
        ApiError::bad_request(format!(
            "unable to parse requirement: invalid selector: '{term}'"
        ))
    };
    if let Some((k, v)) = term.split_once("!=") {
        return Ok(Req::Ne(k.trim().into(), v.trim().into()));
    }
    if let Some((k, v)) = term.split_once("==") {
        return Ok(Req::Eq(k.trim().into(), v.trim().into()));
    }
    if let Some((k, v)) = term.split_once('=') {
        return Ok(Req::Eq(k.trim().into(), v.trim().into()));
    }
    if fields {
        return Err(bad());
    }
    for (op, notin) in [(" notin ", true), (" in ", false)] {
        if let Some((k, rest)) = term.split_once(op) {
            let rest = rest.trim();
            let inner = rest
                .strip_prefix('(')
                .and_then(|r| r.strip_suffix(')'))
                .ok_or_else(bad)?;
            let vals = inner
                .split(',')
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
                .collect();
            let k = k.trim().to_owned();
            return Ok(if notin {
                Req::NotIn(k, vals)
            } else {
                Req::In(k, vals)
            });
        }
    }
    if let Some(k) = term.strip_prefix('!') {
        return Ok(Req::NotExists(k.trim().into()));
    }
    if term.contains(|c: char| c.is_whitespace() || c == '(' || c == ')') {
        return Err(bad());
    }
    Ok(Req::Exists(term.into()))
}

impl Selector {
    /// Parses `labelSelector` and `fieldSelector` query values.
    pub fn parse(labels: Option<&str>, fields: Option<&str>) -> ApiResult<Self> {
        let mut s = Selector::default();
        for t in split_top(labels.unwrap_or("")) {
            s.labels.push(parse_req(&t, false)?);
        }
        for t in split_top(fields.unwrap_or("")) {
            let r = parse_req(&t, true)?;
            s.fields.push(r);
        }
        Ok(s)
    }

    /// Whether the object matches.
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = &obj["metadata"]["labels"];
        let label = |k: &str| labels.get(k).and_then(Value::as_str).map(str::to_owned);
        // Any dotted path is accepted (upstream allows a per-kind set such as `involvedObject.name`
        // for events or `status.phase` for pods); a missing field compares as "".
        let field = |k: &str| {
            let v = k.split('.').try_fold(obj, |v, part| v.get(part));
            Some(match v {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            })
        };
        self.labels.iter().all(|r| check(r, &label)) && self.fields.iter().all(|r| check(r, &field))
    }
}

fn check(r: &Req, get: &dyn Fn(&str) -> Option<String>) -> bool {
    match r {
        Req::Eq(k, v) => get(k).as_deref() == Some(v.as_str()),
        Req::Ne(k, v) => get(k).as_deref() != Some(v.as_str()),
        Req::Exists(k) => get(k).is_some(),
        Req::NotExists(k) => get(k).is_none(),
        Req::In(k, vs) => get(k).is_some_and(|x| vs.contains(&x)),
        Req::NotIn(k, vs) => get(k).is_none_or(|x| !vs.contains(&x)),
    }
}
