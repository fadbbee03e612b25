//! The demo's output: one progress block per render and the summary table.

use std::fmt::Write as _;
use std::time::Duration;

use super::observe::{Observation, RenderCase, condition, pods_on, short};
use haptic::k8s::crd::{HAProxyCfg, conditions};

/// How one render ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Applied on every pod, published, status synced.
    Applied,
    /// Rejected: `-invalid` published, the fleet kept the last applied render.
    Rejected,
    /// Did not reach the expected state in time; what still differed.
    NotConverged(Vec<String>),
}

/// One row of the summary.
#[derive(Debug, Clone)]
pub struct Row {
    /// Render name.
    pub render: String,
    /// How it ended.
    pub verdict: Verdict,
    /// Pods answering as expected at the end, out of all pods.
    pub pods_ok: usize,
    /// Number of pods.
    pub pods: usize,
    /// From writing the render to the expected state (or to giving up).
    pub took: Duration,
}

impl Verdict {
    fn label(&self, last_applied: &str) -> String {
        match self {
            Verdict::Applied => "applied".into(),
            Verdict::Rejected => format!("rejected, fleet kept {last_applied}"),
            Verdict::NotConverged(_) => "NOT AS EXPECTED".into(),
        }
    }
}

/// The summary table (render, verdict, pods matching, time to converge), one line per row.
#[must_use]
pub fn summary_table(rows: &[Row]) -> String {
    let mut out = String::new();
    let width = rows
        .iter()
        .map(|r| r.render.len())
        .max()
        .unwrap_or(6)
        .max(6);
    let _ = writeln!(
        out,
        "{:<width$}  {:<28}  {:>5}  {:>9}",
        "render", "verdict", "pods", "converged"
    );
    let mut last_applied = String::from("-");
    for r in rows {
        let label = r.verdict.label(&last_applied);
        let took = match r.verdict {
            Verdict::NotConverged(_) => format!("> {:.1}s", r.took.as_secs_f64()),
            _ => format!("{:.1}s", r.took.as_secs_f64()),
        };
        let _ = writeln!(
            out,
            "{:<width$}  {:<28}  {:>5}  {:>9}",
            r.render,
            label,
            format!("{}/{}", r.pods_ok, r.pods),
            took
        );
        if r.verdict == Verdict::Applied {
            last_applied.clone_from(&r.render);
        }
    }
    out
}

/// One line summarising a HAProxyCfg: checksum, pods on it, the two gate conditions.
#[must_use]
pub fn cfg_line(name: &str, cfg: Option<&HAProxyCfg>) -> String {
    let Some(c) = cfg else {
        return format!("HAProxyCfg {name}: absent");
    };
    let listed = c.status.as_ref().map_or(0, |s| s.deployed_to_pods.len());
    let cond = |t: &str| condition(c, t).unwrap_or("-").to_owned();
    format!(
        "HAProxyCfg {name}: spec.checksum {}, pods on it {}/{listed}, {}={}, {}={}",
        short(&c.spec.checksum),
        pods_on(c, &c.spec.checksum),
        conditions::CONFIG_VALIDATED,
        cond(conditions::CONFIG_VALIDATED),
        conditions::CONFIG_PINNED,
        cond(conditions::CONFIG_PINNED),
    )
}

/// The block printed once a render converged (or was given up): the objects, then what each
/// pod answered and its reload count.
#[must_use]
pub fn render_block(
    case: &RenderCase,
    obs: &Observation,
    names: (&str, &str),
    reloads: &[Option<usize>],
) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "  {}", cfg_line(names.0, obs.main.as_ref()));
    match &obs.invalid {
        Some(inv) => {
            let _ = writeln!(
                out,
                "  HAProxyCfg {}: spec.checksum {}",
                names.1,
                short(&inv.spec.checksum)
            );
            if let Some(msg) = inv
                .status
                .as_ref()
                .and_then(|s| s.validation_error.as_ref())
            {
                let first = msg.lines().next().unwrap_or_default();
                let _ = writeln!(out, "    validation error: {first}");
            }
        }
        None if !case.valid => {
            let _ = writeln!(out, "  HAProxyCfg {}: absent", names.1);
        }
        None => {}
    }
    for (i, p) in obs.pods.iter().enumerate() {
        let reload = match reloads.get(i).copied().flatten() {
            Some(n) => format!("reloads: {n}"),
            None => "reloads: unknown".into(),
        };
        let _ = writeln!(out, "  {} ({reload}):", p.pod);
        for a in &p.answers {
            let _ = writeln!(
                out,
                "    {} -> {:?} {}",
                a.what,
                a.got,
                if a.ok { "ok" } else { "MISMATCH" }
            );
            if !a.ok {
                let _ = writeln!(out, "      expected {:?}", a.expected);
            }
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_names_the_render_a_rejection_kept() {
        let row = |render: &str, verdict, pods_ok| Row {
            render: render.into(),
            verdict,
            pods_ok,
            pods: 3,
            took: Duration::from_millis(2_340),
        };
        let t = summary_table(&[
            row("07-ca", Verdict::Applied, 3),
            row("08-invalid", Verdict::Rejected, 3),
            row("10-large-map", Verdict::NotConverged(vec!["x".into()]), 1),
        ]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 4, "{t}");
        assert!(lines[0].starts_with("render"), "{t}");
        assert!(
            lines[1].contains("applied") && lines[1].contains("3/3"),
            "{t}"
        );
        assert!(lines[1].trim_end().ends_with("2.3s"), "{t}");
        assert!(lines[2].contains("rejected, fleet kept 07-ca"), "{t}");
        assert!(
            lines[3].contains("NOT AS EXPECTED") && lines[3].contains("1/3"),
            "{t}"
        );
        assert!(lines[3].contains("> 2.3s"), "{t}");
    }

    #[test]
    fn an_absent_object_is_said_so() {
        assert_eq!(
            cfg_line("demo-haproxycfg", None),
            "HAProxyCfg demo-haproxycfg: absent"
        );
    }
}
