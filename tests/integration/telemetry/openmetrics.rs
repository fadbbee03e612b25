//! A strict OpenMetrics 1.0 text checker for `/metrics` (every line), and the rule for which
//! PromQL metric names select a family's series.

use std::collections::{BTreeMap, BTreeSet};

/// One parsed exposition: family name -> type, and every sample name seen.
#[derive(Debug, Default)]
pub struct Exposition {
    pub families: BTreeMap<String, String>,
    pub samples: BTreeMap<String, f64>,
    pub sample_names: BTreeSet<String>,
}

fn is_metric_name(s: &str) -> bool {
    let mut b = s.bytes();
    b.next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_' || c == b':')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b':')
}

/// Parses `k="v",...` (OpenMetrics escapes `\\`, `\"`, `\n`); returns the pairs.
fn parse_labels(s: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    let mut rest = s;
    while !rest.is_empty() {
        let (k, after) = rest
            .split_once("=\"")
            .ok_or(format!("bad label in {s:?}"))?;
        if !is_metric_name(k) || k.contains(':') {
            return Err(format!("bad label name {k:?}"));
        }
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c @ ('\\' | '"'))) => value.push(c),
                    other => return Err(format!("bad escape {other:?} in {s:?}")),
                },
                Some((i, '"')) => break i,
                Some((_, '\n')) => return Err(format!("raw line break in {s:?}")),
                Some((_, c)) => value.push(c),
                None => return Err(format!("unterminated label value in {s:?}")),
            }
        };
        out.push((k.to_owned(), value));
        rest = &after[end + 1..];
        rest = rest.strip_prefix(',').unwrap_or(rest);
    }
    Ok(out)
}

/// Which sample names a family of `kind` may have (OpenMetrics 1.0).
fn sample_suffixes(kind: &str) -> &'static [&'static str] {
    match kind {
        "counter" => &["_total", "_created"],
        "histogram" | "gaugehistogram" => &["_bucket", "_sum", "_count", "_created"],
        "summary" => &["", "_sum", "_count", "_created"],
        "info" => &["_info"],
        _ => &[""],
    }
}

/// Checks every line of an OpenMetrics text exposition.
pub fn parse_openmetrics(text: &str) -> Result<Exposition, String> {
    let mut exp = Exposition::default();
    let lines: Vec<&str> = text.split('\n').collect();
    if lines.last() != Some(&"") || lines.len() < 2 || lines[lines.len() - 2] != "# EOF" {
        return Err("exposition does not end in \"# EOF\\n\"".into());
    }
    let mut current: Option<(String, String)> = None;
    for line in &lines[..lines.len() - 2] {
        if let Some(rest) = line.strip_prefix("# ") {
            let mut parts = rest.splitn(3, ' ');
            let (Some(kw), Some(name)) = (parts.next(), parts.next()) else {
                return Err(format!("bad metadata line {line:?}"));
            };
            if !is_metric_name(name) {
                return Err(format!("bad family name in {line:?}"));
            }
            let arg = parts.next().unwrap_or("");
            match kw {
                "HELP" => {}
                "TYPE" => {
                    if !matches!(
                        arg,
                        "counter"
                            | "gauge"
                            | "histogram"
                            | "gaugehistogram"
                            | "summary"
                            | "info"
                            | "stateset"
                            | "unknown"
                    ) {
                        return Err(format!("bad type in {line:?}"));
                    }
                    if exp.families.insert(name.into(), arg.into()).is_some() {
                        return Err(format!("family {name} declared twice"));
                    }
                    current = Some((name.into(), arg.into()));
                }
                "UNIT" => {
                    if arg.is_empty() || !name.ends_with(&format!("_{arg}")) {
                        return Err(format!("unit not a suffix of the name: {line:?}"));
                    }
                }
                _ => return Err(format!("unknown metadata {line:?}")),
            }
            continue;
        }
        if line.is_empty() || line.starts_with('#') {
            return Err(format!("bad line {line:?}"));
        }
        let (name, labels, rest) = match line.find('{') {
            Some(open) => {
                let close = line
                    .rfind('}')
                    .ok_or(format!("unclosed labels: {line:?}"))?;
                (
                    &line[..open],
                    parse_labels(&line[open + 1..close])?,
                    &line[close + 1..],
                )
            }
            None => {
                let (n, _) = line.split_once(' ').ok_or(format!("no value: {line:?}"))?;
                (n, Vec::new(), &line[n.len()..])
            }
        };
        if !is_metric_name(name) {
            return Err(format!("bad sample name in {line:?}"));
        }
        let value = rest
            .strip_prefix(' ')
            .ok_or(format!("no space before value: {line:?}"))?;
        let value = value.split(' ').next().unwrap_or("");
        let v: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            "NaN" => f64::NAN,
            v => v.parse().map_err(|_| format!("bad value in {line:?}"))?,
        };
        let (family, kind) = current
            .as_ref()
            .ok_or(format!("sample before any TYPE: {line:?}"))?;
        let suffix = name
            .strip_prefix(family.as_str())
            .ok_or(format!("sample {name} outside its family {family}"))?;
        if !sample_suffixes(kind).contains(&suffix) {
            return Err(format!("sample {name} not allowed in {kind} {family}"));
        }
        if suffix == "_bucket" && !labels.iter().any(|(k, _)| k == "le") {
            return Err(format!("bucket without le: {line:?}"));
        }
        exp.sample_names.insert(name.to_owned());
        let key = if labels.is_empty() {
            name.to_owned()
        } else {
            let l: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
            format!("{name}{{{}}}", l.join(","))
        };
        exp.samples.insert(key, v);
    }
    Ok(exp)
}

impl Exposition {
    /// Whether a PromQL metric name selects a series of this exposition as Prometheus stores
    /// it: counters only as `<family>_total` (or `_created`), histograms only through
    /// `_bucket`/`_sum`/`_count`, gauges by the bare family name. A family with no sample yet
    /// (a gauge with labels not present) still counts, by its type's rules.
    pub fn exports(&self, name: &str) -> bool {
        self.families.iter().any(|(family, kind)| {
            name.strip_prefix(family.as_str())
                .is_some_and(|suffix| sample_suffixes(kind).contains(&suffix))
        })
    }

    pub fn value(&self, key: &str) -> f64 {
        *self
            .samples
            .get(key)
            .unwrap_or_else(|| panic!("no sample {key}"))
    }
}

#[test]
fn the_exposition_checker_rejects_what_it_should() {
    let ok = "# HELP a_total x\n# TYPE a counter\na_total 1\n# EOF\n";
    assert!(parse_openmetrics(ok).is_ok());
    for bad in [
        "# TYPE a counter\na_total 1\n",                        // no EOF
        "# TYPE a counter\na 1\n# EOF\n",                       // counter without _total
        "# TYPE a gauge\na_total 1\n# EOF\n",                   // gauge with a suffix
        "# TYPE a gauge\na{x=\"1} 1\n# EOF\n",                  // unterminated label value
        "# TYPE a gauge\na{x=\"a\"b\"} 1\n# EOF\n",             // unescaped quote
        "# TYPE a gauge\na one\n# EOF\n",                       // bad value
        "# TYPE h histogram\nh_bucket 1\n# EOF\n",              // bucket without le
        "# TYPE a_seconds gauge\n# UNIT a_seconds ms\n# EOF\n", // unit not a suffix
        "b 1\n# EOF\n",                                         // no TYPE
    ] {
        assert!(parse_openmetrics(bad).is_err(), "accepted {bad:?}");
    }
    let exp = parse_openmetrics(
        "# TYPE c counter\nc_total 1\n# TYPE h_seconds histogram\n# UNIT h_seconds seconds\n\
         h_seconds_sum 0\nh_seconds_count 0\nh_seconds_bucket{le=\"+Inf\"} 0\n\
         # TYPE g gauge\n# EOF\n",
    )
    .unwrap();
    assert!(exp.exports("c_total") && !exp.exports("c") && !exp.exports("c_total_total"));
    assert!(exp.exports("h_seconds_bucket") && !exp.exports("h_seconds"));
    assert!(exp.exports("g") && !exp.exports("g_total"));
}
