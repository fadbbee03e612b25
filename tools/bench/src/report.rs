//! One row per figure, printed as one Markdown table or as JSON lines.

use std::fmt::Write as _;

/// How a figure is judged.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Target {
    /// `value / reference` at most this.
    RatioAtMost(f64),
    /// `value / reference` at least this.
    RatioAtLeast(f64),
    /// The value itself below this (in the row's unit).
    ValueBelow(f64),
}

impl Target {
    fn text(self, unit: Unit) -> String {
        match self {
            Target::RatioAtMost(x) => format!("<= {x}x"),
            Target::RatioAtLeast(x) => format!(">= {x}x"),
            Target::ValueBelow(x) => format!("< {}", unit.format(x)),
        }
    }
}

/// The unit of a value; decides how it is printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// Milliseconds.
    Ms,
    /// Seconds.
    S,
    /// Events (or rows) per second.
    EventsPerSec,
    /// Operations per second.
    PerSec,
    /// Bytes (printed in MiB).
    Bytes,
    /// A plain count.
    Count,
}

impl Unit {
    fn name(self) -> &'static str {
        match self {
            Unit::Ms => "ms",
            Unit::S => "s",
            Unit::EventsPerSec => "ev/s",
            Unit::PerSec => "1/s",
            Unit::Bytes => "bytes",
            Unit::Count => "count",
        }
    }

    /// The value as the table prints it.
    pub fn format(self, v: f64) -> String {
        match self {
            Unit::Ms => format!("{v:.3} ms"),
            Unit::S => format!("{v:.2} s"),
            Unit::EventsPerSec => format!("{} ev/s", thousands(v)),
            Unit::PerSec => format!("{} /s", thousands(v)),
            Unit::Bytes => format!("{:.2} MiB", v / (1024.0 * 1024.0)),
            Unit::Count => thousands(v),
        }
    }
}

fn thousands(v: f64) -> String {
    let n = v.round() as i64;
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 { format!("-{out}") } else { out }
}

/// One figure: a value, what it is compared with (measured in the same run), the target and
/// what limits it.
#[derive(Clone, Debug)]
pub struct Row {
    /// Figure number and name, e.g. `2.3 accept, 8 producers`.
    pub figure: String,
    /// The value, in `unit`.
    pub value: f64,
    /// Its unit.
    pub unit: Unit,
    /// Extra text printed after the value (e.g. events per commit).
    pub detail: Option<String>,
    /// The reference: what it is, and its value in the same unit.
    pub reference: Option<(String, f64)>,
    /// The target, if the figure has one.
    pub target: Option<Target>,
    /// The ratio when it is not `value / reference`: the median of paired samples
    /// ([`crate::stats::paired_ratio`]).
    pub paired: Option<f64>,
    /// What limits the figure (CPU, fsync, ...).
    pub limit: &'static str,
}

impl Row {
    /// A row without reference or target.
    pub fn new(figure: impl Into<String>, value: f64, unit: Unit, limit: &'static str) -> Self {
        Row {
            figure: figure.into(),
            value,
            unit,
            detail: None,
            reference: None,
            target: None,
            paired: None,
            limit,
        }
    }

    /// Sets the reference.
    #[must_use]
    pub fn vs(mut self, what: impl Into<String>, value: f64) -> Self {
        self.reference = Some((what.into(), value));
        self
    }

    /// Sets the target.
    #[must_use]
    pub fn target(mut self, t: Target) -> Self {
        self.target = Some(t);
        self
    }

    /// Sets the detail text.
    #[must_use]
    pub fn detail(mut self, d: impl Into<String>) -> Self {
        self.detail = Some(d.into());
        self
    }

    /// Sets the paired ratio (see [`Row::paired`]).
    #[must_use]
    pub fn paired(mut self, ratio: f64) -> Self {
        self.paired = Some(ratio);
        self
    }

    /// The paired ratio when set, else `value / reference`.
    pub fn ratio(&self) -> Option<f64> {
        if self.paired.is_some() {
            return self.paired;
        }
        self.reference
            .as_ref()
            .filter(|(_, r)| *r > 0.0)
            .map(|(_, r)| self.value / r)
    }

    /// Whether the target is met; `None` without a target (or without the reference it needs).
    pub fn pass(&self) -> Option<bool> {
        match self.target? {
            Target::RatioAtMost(x) => self.ratio().map(|r| r <= x),
            Target::RatioAtLeast(x) => self.ratio().map(|r| r >= x),
            Target::ValueBelow(x) => Some(self.value < x),
        }
    }

    /// The JSON line: `{"figure","value","unit","reference","ratio","target","pass"}` plus
    /// `reference_name`, `detail` and `limit`.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "figure": self.figure,
            "value": self.value,
            "unit": self.unit.name(),
            "reference": self.reference.as_ref().map(|(_, v)| *v),
            "ratio": self.ratio(),
            "target": self.target.map(|t| t.text(self.unit)),
            "pass": self.pass(),
            "reference_name": self.reference.as_ref().map(|(n, _)| n.clone()),
            "ratio_paired": self.paired.is_some(),
            "detail": self.detail,
            "limit": self.limit,
        })
    }
}

/// The leading figure number of a row name (`"2.10 x"` -> `[2, 10]`), for ordering.
pub fn number(figure: &str) -> Vec<u32> {
    figure
        .split_whitespace()
        .next()
        .unwrap_or("")
        .split('.')
        .map(|p| p.parse().unwrap_or(u32::MAX))
        .collect()
}

/// The Markdown table of `rows`.
pub fn markdown(rows: &[Row]) -> String {
    let mut out = String::new();
    out.push_str(
        "| figure | value | reference (same run) | ratio | target | pass | limited by |\n",
    );
    out.push_str("|---|---|---|---|---|---|---|\n");
    for r in rows {
        let value = match &r.detail {
            Some(d) => format!("{} ({d})", r.unit.format(r.value)),
            None => r.unit.format(r.value),
        };
        let reference = r.reference.as_ref().map_or("-".to_owned(), |(n, v)| {
            format!("{n}: {}", r.unit.format(*v))
        });
        let ratio = r.ratio().map_or("-".to_owned(), |x| {
            if r.paired.is_some() {
                format!("{x:.2}x (paired)")
            } else {
                format!("{x:.2}x")
            }
        });
        let target = r.target.map_or("-".to_owned(), |t| t.text(r.unit));
        let pass = match r.pass() {
            Some(true) => "PASS",
            Some(false) => "MISS",
            None => "-",
        };
        let _ = writeln!(
            out,
            "| {} | {value} | {reference} | {ratio} | {target} | {pass} | {} |",
            r.figure, r.limit
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratio_targets_and_formatting() {
        let r = Row::new("2.3 accept", 150_000.0, Unit::EventsPerSec, "CPU")
            .vs("raw redb", 200_000.0)
            .target(Target::RatioAtLeast(0.8));
        assert_eq!(r.ratio(), Some(0.75));
        assert_eq!(r.pass(), Some(false));
        assert_eq!(Unit::EventsPerSec.format(1_234_567.4), "1,234,567 ev/s");
        let j = r.json();
        assert_eq!(j["target"], ">= 0.8x");
        assert_eq!(j["pass"], false);
        assert_eq!(j["reference"], 200_000.0);
        let t = markdown(&[r]);
        assert!(t.contains("| 2.3 accept | 150,000 ev/s | raw redb: 200,000 ev/s | 0.75x"));
        let v = Row::new("4.1", 300.0, Unit::Ms, "disk").target(Target::ValueBelow(1000.0));
        assert_eq!(v.pass(), Some(true));
        assert_eq!(v.ratio(), None);
        assert!(number("2.5 a") < number("2.10 b"));
        assert!(number("1.4 x") < number("2.1 y"));
    }
}
