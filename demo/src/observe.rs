//! What the demo expects after each render and what it sees: every pod's answers (real HTTP(S)
//! requests, the checks of `tests/corpus/renders/README.md`) and the published HAProxyCfg objects
//! read from the Kubernetes API emulator. Nothing here reads the controller's journal, so the
//! evidence is independent of it.

use std::path::Path;

use haptic::source::dir::read_render;
use haptic_journal::Checksum;
use haptic_testkit::Pod;
use haptic_tools::sandbox::pods::demo::{Check, checks_for, matches, run_check};
use kube::Api;

use super::DemoError;
use haptic::core::render::RenderContent;
use haptic::k8s::crd::{HAProxyCfg, conditions};

/// One render of the stream and what it must lead to.
#[derive(Debug, Clone)]
pub struct RenderCase {
    /// Folder name, e.g. `03-maps-changed`.
    pub name: String,
    /// The render as read from the folder.
    pub content: RenderContent,
    /// Its render checksum (what `spec.checksum` must show).
    pub checksum: Checksum,
    /// True when the render must be applied; false when it must be rejected (08, 09).
    pub valid: bool,
    /// The requests each pod must answer exactly (for a rejected render: the answers of the last
    /// applied one, 07).
    pub checks: Vec<Check>,
}

/// Reads every render folder of `dir` (sub-directories holding `haproxy.cfg`), in name order.
///
/// # Errors
/// [`DemoError::Renders`] when `dir` or a render cannot be read, [`DemoError::NoRenders`] when
/// it holds none.
pub fn load_stream(dir: &Path) -> Result<Vec<RenderCase>, DemoError> {
    let err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| DemoError::Renders { path, source }
    };
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map_err(err(dir))?
        .filter_map(Result::ok)
        .filter(|e| e.path().join(haptic::core::render::CONFIG_FILE).is_file())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    if names.is_empty() {
        return Err(DemoError::NoRenders {
            path: dir.to_path_buf(),
        });
    }
    names
        .into_iter()
        .map(|name| {
            let dir = dir.join(&name);
            let content = read_render(&dir).map_err(err(&dir))?;
            let (valid, checks) = checks_for(&name, &dir);
            Ok(RenderCase {
                checksum: content.checksum(),
                name,
                content,
                valid,
                checks,
            })
        })
        .collect()
}

/// One pod's answer to one check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The check's description, e.g. `GET / on :80`.
    pub what: String,
    /// The body received (for last-line checks: its last line), trimmed to one line for display.
    pub got: String,
    /// The expected body (or last line).
    pub expected: String,
    /// Whether it matched.
    pub ok: bool,
}

/// What one pod answered to every check of a render.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodAnswers {
    /// Pod name.
    pub pod: String,
    /// One per check, in check order.
    pub answers: Vec<Answer>,
}

impl PodAnswers {
    /// True when every answer matched.
    #[must_use]
    pub fn all_ok(&self) -> bool {
        self.answers.iter().all(|a| a.ok)
    }
}

/// One look at the fleet and the published objects.
#[derive(Debug, Clone, Default)]
pub struct Observation {
    /// `demo-haproxycfg`, when it exists.
    pub main: Option<HAProxyCfg>,
    /// `demo-haproxycfg-invalid`, when it exists.
    pub invalid: Option<HAProxyCfg>,
    /// Every pod's answers, in pod order.
    pub pods: Vec<PodAnswers>,
}

/// Reads the fleet and the published objects.
#[derive(Debug, Clone)]
pub struct Observer {
    cfgs: Api<HAProxyCfg>,
    main_name: String,
    invalid_name: String,
    pods: Vec<Pod>,
}

impl Observer {
    /// An observer of `pods` and the HAProxyCfg objects of `config_name` in `namespace`.
    #[must_use]
    pub fn new(
        client: kube::Client,
        namespace: &str,
        config_name: &str,
        pods: Vec<Pod>,
    ) -> Observer {
        Observer {
            cfgs: Api::namespaced(client, namespace),
            main_name: haptic::core::naming::haproxycfg_name(config_name),
            invalid_name: haptic::core::naming::invalid_haproxycfg_name(config_name),
            pods,
        }
    }

    /// Name of the main HAProxyCfg.
    #[must_use]
    pub fn main_name(&self) -> &str {
        &self.main_name
    }

    /// Name of the `-invalid` HAProxyCfg.
    #[must_use]
    pub fn invalid_name(&self) -> &str {
        &self.invalid_name
    }

    /// Number of pods.
    #[must_use]
    pub fn pod_count(&self) -> usize {
        self.pods.len()
    }

    /// Sends every check to every pod (pods in parallel) and reads both HAProxyCfg objects.
    ///
    /// # Errors
    /// [`DemoError::Kube`] when the emulator cannot be read.
    ///
    /// # Cancel safety
    /// Cancel safe (reads only).
    pub async fn observe(&self, checks: &[Check]) -> Result<Observation, DemoError> {
        let kube = |source| DemoError::Kube {
            what: "read haproxycfg",
            source,
        };
        let main = self.cfgs.get_opt(&self.main_name).await.map_err(kube)?;
        let invalid = self.cfgs.get_opt(&self.invalid_name).await.map_err(kube)?;
        let pods = futures::future::join_all(self.pods.iter().map(|pod| async move {
            let mut answers = Vec::with_capacity(checks.len());
            for c in checks {
                let body = run_check(pod, c).await;
                answers.push(Answer {
                    what: c.what.clone(),
                    got: shown(c, &body),
                    expected: c.expect.clone(),
                    ok: matches(c, &body),
                });
            }
            PodAnswers {
                pod: pod.name.clone(),
                answers,
            }
        }))
        .await;
        Ok(Observation {
            main,
            invalid,
            pods,
        })
    }

    /// Successful reloads of each pod's HAProxy so far (`None` for a pod that did not say), in
    /// pod order.
    ///
    /// # Cancel safety
    /// Cancel safe (reads only).
    pub async fn reload_counts(&self) -> Vec<Option<usize>> {
        futures::future::join_all(
            self.pods
                .iter()
                .map(|pod| async move { pod.try_reload_count().await.ok() }),
        )
        .await
    }
}

/// The part of a body a check compares, on one line.
fn shown(c: &Check, body: &str) -> String {
    let s = if c.last_line {
        body.trim_end().lines().last().unwrap_or_default()
    } else {
        body
    };
    s.replace('\n', "\\n")
}

pub use haptic_testkit::condition;

/// Pods listed in `status.deployedToPods` of `cfg` whose checksum is `checksum`.
#[must_use]
pub fn pods_on(cfg: &HAProxyCfg, checksum: &Checksum) -> usize {
    cfg.status.as_ref().map_or(0, |s| {
        s.deployed_to_pods
            .iter()
            .filter(|p| p.checksum.as_ref() == Some(checksum))
            .count()
    })
}

/// `sha256:` plus the first 12 hex digits.
#[must_use]
pub fn short(c: &Checksum) -> String {
    c.to_string().chars().take(19).collect()
}

/// Names of the objects the evaluation talks about.
#[derive(Debug, Clone, Copy)]
pub struct Names<'a> {
    /// The main HAProxyCfg.
    pub main: &'a str,
    /// The `-invalid` HAProxyCfg.
    pub invalid: &'a str,
}

/// What still differs from what `case` must lead to; empty when the render converged.
///
/// An applied render: every pod answers its checks, the main HAProxyCfg holds its checksum with
/// every pod on it in `status.deployedToPods`, `ConfigValidated=True`, `ConfigPinned=False`, and no
/// `-invalid` object is left. A rejected render: the `-invalid` HAProxyCfg holds its checksum, the
/// main one still holds `last_applied` with `ConfigValidated=False` and `ConfigPinned=True`, and
/// every pod still answers the last applied render's checks.
#[must_use]
pub fn shortfalls(
    case: &RenderCase,
    last_applied: Option<&Checksum>,
    pods: usize,
    names: Names<'_>,
    obs: &Observation,
) -> Vec<String> {
    let mut out = Vec::new();
    let main_on = if case.valid {
        Some(&case.checksum)
    } else {
        last_applied
    };
    match (&obs.main, main_on) {
        (None, _) => out.push(format!("HAProxyCfg {} is not published", names.main)),
        (Some(m), Some(want)) if m.spec.checksum != *want => out.push(format!(
            "HAProxyCfg {} holds {}, not {}",
            names.main,
            short(&m.spec.checksum),
            short(want)
        )),
        (Some(m), _) => {
            let (validated, pinned) = if case.valid {
                ("True", "False")
            } else {
                ("False", "True")
            };
            for (type_, want) in [
                (conditions::CONFIG_VALIDATED, validated),
                (conditions::CONFIG_PINNED, pinned),
            ] {
                let got = condition(m, type_);
                if got != Some(want) {
                    out.push(format!(
                        "HAProxyCfg {} {type_} is {}, not {want}",
                        names.main,
                        got.unwrap_or("absent")
                    ));
                }
            }
            if case.valid {
                let on = pods_on(m, &case.checksum);
                if on < pods {
                    out.push(format!(
                        "HAProxyCfg {} status: {on}/{pods} pods on this render",
                        names.main
                    ));
                }
            }
        }
    }
    match (&obs.invalid, case.valid) {
        (Some(_), true) => out.push(format!("HAProxyCfg {} still exists", names.invalid)),
        (None, false) => out.push(format!("HAProxyCfg {} is not published", names.invalid)),
        (Some(inv), false) if inv.spec.checksum != case.checksum => out.push(format!(
            "HAProxyCfg {} holds {}, not this render's {}",
            names.invalid,
            short(&inv.spec.checksum),
            short(&case.checksum)
        )),
        _ => {}
    }
    for p in &obs.pods {
        for a in p.answers.iter().filter(|a| !a.ok) {
            out.push(format!(
                "{}: {} answered {:?}, expected {:?}",
                p.pod, a.what, a.got, a.expected
            ));
        }
    }
    out
}

#[cfg(test)]
#[path = "observe_tests.rs"]
mod tests;
