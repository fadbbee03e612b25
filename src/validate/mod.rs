//! Validation: the real `haproxy -c` on a render laid out in a private temporary directory
//! (DESIGN.md section 1; issue 6 "Validation").
//!
//! ```text
//!  RenderContent --> names check (Dataplane storage names) --> temp dir:
//!     <tmp>/haproxy.cfg, <tmp>/maps/*, <tmp>/ssl/* (ssl/ + ca/), <tmp>/general/* (general/ + crt-lists/)
//!     with /etc/haproxy/{maps,ssl,general}/ rewritten to <tmp>/{maps,ssl,general}/ in the config
//!     and in crt-lists
//!  --> haproxy -c -f <tmp>/haproxy.cfg (timeout, killed on expiry)
//!  --> Outcome::Pass{warnings} | Outcome::Fail{errors}   (HAProxy's own messages, in order,
//!                                                         temp paths mapped back to /etc/haproxy)
//! ```
//!
//! # Inputs
//! A [`RenderContent`] (already journaled by the dispatcher).
//!
//! # Effects
//! Runs `haproxy -c` (no network traffic) in a fresh temp dir that is removed afterwards.
//! [`verdict_events`] turns an outcome into `ValidationCompleted`/`ValidationFailed` plus
//! `RenderGateCompleted`, which the caller journals.
//!
//! # Journal records
//! None directly.
//!
//! # Failpoints
//! None.
//!
//! # Metrics
//! None yet; the outcome carries its duration.
//!
//! Invariants: an empty render fails without running HAProxy; a file name the Dataplane API would
//! store under another name fails naming the file; messages never contain file contents.

mod names;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use haptic_journal::{Checksum, Correlation, CorrelationId, Event, EventId, GateVerdict};

use crate::core::render::{RenderContent, pod_dir_of_kind};
use crate::dispatch::input::new_event_id;

pub use names::check_names;

/// Default for `--validation-timeout`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Errors of setting up a [`Validator`] (start-up) or running it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ValidatorError {
    /// The `haproxy` binary could not be run.
    #[error(
        "haproxy is not installed or not runnable at `{binary}` (validation needs it; install it \
         with `apt-get install haproxy` or `apk add haproxy`, or pass its path)"
    )]
    HaproxyMissing {
        /// The binary tried.
        binary: PathBuf,
        /// The spawn error.
        #[source]
        source: std::io::Error,
    },
    /// The temporary directory or a file in it could not be written.
    #[error("cannot lay out the render in a temporary directory")]
    TempDir(#[source] std::io::Error),
}

/// The validation verdict with HAProxy's own messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// `haproxy -c` accepted the render; its warnings, in output order.
    Pass {
        /// `[WARNING]` messages, in order.
        warnings: Vec<String>,
    },
    /// The render is rejected; the reasons, in output order.
    Fail {
        /// `[ALERT]` messages of HAProxy, or our own (empty render, file names, timeout).
        errors: Vec<String>,
    },
}

impl Outcome {
    /// Whether the render passed.
    #[must_use]
    pub fn passed(&self) -> bool {
        matches!(self, Outcome::Pass { .. })
    }

    /// The messages (warnings on pass, errors on fail).
    #[must_use]
    pub fn messages(&self) -> &[String] {
        match self {
            Outcome::Pass { warnings } => warnings,
            Outcome::Fail { errors } => errors,
        }
    }
}

/// One validation: the outcome and how long it took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Validation {
    /// The verdict.
    pub outcome: Outcome,
    /// Wall time of the validation.
    pub duration: Duration,
}

/// Runs `haproxy -c` on renders.
#[derive(Debug, Clone)]
pub struct Validator {
    /// The `haproxy` binary (a name looked up in `PATH`, or a path).
    binary: PathBuf,
    /// Upper bound of one `haproxy -c` run; the process is killed after it.
    timeout: Duration,
    /// The HAProxy version line (`HAProxy version 2.6.12 ...`), from the start-up check.
    version: String,
}

impl Validator {
    /// Checks at start-up that `binary` runs (`haproxy -v`) and returns a validator.
    ///
    /// # Errors
    /// [`ValidatorError::HaproxyMissing`] when it cannot be spawned or `-v` fails.
    ///
    /// # Cancel safety
    /// Cancel safe: the child is killed when dropped.
    pub async fn new(
        binary: impl Into<PathBuf>,
        timeout: Duration,
    ) -> Result<Self, ValidatorError> {
        let binary = binary.into();
        let missing = |source| ValidatorError::HaproxyMissing {
            binary: binary.clone(),
            source,
        };
        let out = tokio::time::timeout(
            timeout.max(Duration::from_secs(5)),
            tokio::process::Command::new(&binary)
                .arg("-v")
                .kill_on_drop(true)
                .output(),
        )
        .await
        .map_err(|_| missing(std::io::Error::from(std::io::ErrorKind::TimedOut)))?
        .map_err(missing)?;
        if !out.status.success() {
            return Err(missing(std::io::Error::other(format!(
                "`-v` exited with {}",
                out.status
            ))));
        }
        let version = String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or_default()
            .to_owned();
        Ok(Validator {
            binary,
            timeout,
            version,
        })
    }

    /// The first line of `haproxy -v`.
    #[must_use]
    pub fn version(&self) -> &str {
        &self.version
    }

    /// Validates one render.
    ///
    /// An empty config (nothing but blank lines and comments) fails without running HAProxy;
    /// so does a file name the Dataplane API would rename ([`check_names`]). Otherwise the
    /// render is laid out in a fresh temp dir and `haproxy -c` runs on it; exceeding the timeout
    /// fails the render with a message naming the timeout.
    ///
    /// # Errors
    /// [`ValidatorError::TempDir`] when the temp dir cannot be written (not a verdict on the
    /// render: retry later); [`ValidatorError::HaproxyMissing`] when the binary vanished.
    ///
    /// # Cancel safety
    /// Cancel safe: the child is killed and the temp dir removed on drop.
    pub async fn validate(&self, render: &RenderContent) -> Result<Validation, ValidatorError> {
        let started = Instant::now();
        let outcome = self.outcome(render).await?;
        Ok(Validation {
            outcome,
            duration: started.elapsed(),
        })
    }

    async fn outcome(&self, render: &RenderContent) -> Result<Outcome, ValidatorError> {
        if is_empty_config(&render.config) {
            return Ok(Outcome::Fail {
                errors: vec!["empty render: haproxy.cfg has no configuration".to_owned()],
            });
        }
        let name_errors = check_names(render);
        if !name_errors.is_empty() {
            return Ok(Outcome::Fail {
                errors: name_errors,
            });
        }
        let tmp = tempfile::Builder::new()
            .prefix("haptic-validate-")
            .tempdir()
            .map_err(ValidatorError::TempDir)?;
        let root = tmp.path().to_string_lossy().into_owned();
        let config_path = lay_out(render, tmp.path(), &root).map_err(ValidatorError::TempDir)?;

        let child = tokio::process::Command::new(&self.binary)
            .arg("-c")
            .arg("-f")
            .arg(&config_path)
            .current_dir(tmp.path())
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output();
        let out = match tokio::time::timeout(self.timeout, child).await {
            Err(_) => {
                return Ok(Outcome::Fail {
                    errors: vec![format!(
                        "haproxy -c did not finish within the validation timeout of {}",
                        humanize(self.timeout)
                    )],
                });
            }
            Ok(Err(source)) => {
                return Err(ValidatorError::HaproxyMissing {
                    binary: self.binary.clone(),
                    source,
                });
            }
            Ok(Ok(out)) => out,
        };
        let mut text = String::from_utf8_lossy(&out.stderr).into_owned();
        text.push('\n');
        text.push_str(&String::from_utf8_lossy(&out.stdout));
        let (alerts, warnings) = parse_messages(&text, &root);
        if out.status.success() {
            Ok(Outcome::Pass { warnings })
        } else {
            let errors = if alerts.is_empty() {
                vec![format!(
                    "haproxy -c failed ({}) without an alert",
                    out.status
                )]
            } else {
                alerts
            };
            Ok(Outcome::Fail { errors })
        }
    }
}

fn humanize(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

/// Whether a config holds nothing but blank lines and `#` comments.
#[must_use]
pub fn is_empty_config(config: &[u8]) -> bool {
    String::from_utf8_lossy(config)
        .lines()
        .map(str::trim)
        .all(|l| l.is_empty() || l.starts_with('#'))
}

/// Writes the render under `dir` with pod paths rewritten; returns the config path.
fn lay_out(render: &RenderContent, dir: &Path, root: &str) -> std::io::Result<PathBuf> {
    for sub in ["maps", "ssl", "general"] {
        std::fs::create_dir_all(dir.join(sub))?;
    }
    for f in &render.files {
        let local = local_dir(pod_dir_of_kind(f.kind), root);
        let path = PathBuf::from(local).join(f.name());
        if matches!(f.kind, haptic_journal::AuxKind::CrtList) {
            std::fs::write(path, rewrite_paths(&f.content, root))?;
        } else {
            std::fs::write(path, &f.content)?;
        }
    }
    let config = dir.join("haproxy.cfg");
    std::fs::write(&config, rewrite_paths(&render.config, root))?;
    Ok(config)
}

/// `/etc/haproxy/maps` -> `<root>/maps`, and so on.
fn local_dir(pod_dir: &str, root: &str) -> String {
    let tail = pod_dir.rsplit('/').next().unwrap_or(pod_dir);
    format!("{root}/{tail}")
}

const POD_DIRS: &[&str] = &[
    "/etc/haproxy/maps/",
    "/etc/haproxy/ssl/",
    "/etc/haproxy/general/",
];

/// Rewrites every `/etc/haproxy/{maps,ssl,general}/` reference into the temp dir.
fn rewrite_paths(content: &[u8], root: &str) -> Vec<u8> {
    let mut text = String::from_utf8_lossy(content).into_owned();
    for pod in POD_DIRS {
        let local = format!("{}/", local_dir(pod.trim_end_matches('/'), root));
        text = text.replace(pod, &local);
    }
    text.into_bytes()
}

/// Splits HAProxy's output into alerts and warnings, in order.
///
/// A message is the text after `[ALERT]    (pid) : ` (or `[WARNING]`); continuation lines
/// (starting with whitespace) join the message before them. Temp-dir paths are mapped back to
/// the pod paths, and the temp config path to `haproxy.cfg`.
fn parse_messages(text: &str, root: &str) -> (Vec<String>, Vec<String>) {
    enum Last {
        None,
        Alert,
        Warning,
        Other,
    }
    let mut alerts: Vec<String> = Vec::new();
    let mut warnings: Vec<String> = Vec::new();
    let mut last = Last::None;
    for line in text.lines() {
        let unrooted = unroot(line, root);
        if let Some(msg) = message_after(&unrooted, "[ALERT]") {
            alerts.push(msg);
            last = Last::Alert;
        } else if let Some(msg) = message_after(&unrooted, "[WARNING]") {
            warnings.push(msg);
            last = Last::Warning;
        } else if unrooted.starts_with('[') {
            last = Last::Other;
        } else if unrooted.starts_with(char::is_whitespace) && !unrooted.trim().is_empty() {
            let target = match last {
                Last::Alert => alerts.last_mut(),
                Last::Warning => warnings.last_mut(),
                Last::None | Last::Other => None,
            };
            if let Some(m) = target {
                m.push('\n');
                m.push_str(unrooted.trim_end());
            }
        }
    }
    (alerts, warnings)
}

fn unroot(line: &str, root: &str) -> String {
    line.replace(&format!("{root}/haproxy.cfg"), "haproxy.cfg")
        .replace(&format!("{root}/maps/"), "/etc/haproxy/maps/")
        .replace(&format!("{root}/ssl/"), "/etc/haproxy/ssl/")
        .replace(&format!("{root}/general/"), "/etc/haproxy/general/")
        .replace(root, "<render>")
}

fn message_after(line: &str, tag: &str) -> Option<String> {
    let rest = line.strip_prefix(tag)?.trim_start();
    // `(pid) : message`; the pid differs on every run, so it is dropped.
    let rest = match rest.strip_prefix('(') {
        Some(r) => r.split_once(')').map_or(rest, |(_, after)| after),
        None => rest,
    };
    let rest = rest.trim_start();
    let rest = rest.strip_prefix(':').unwrap_or(rest).trim();
    Some(rest.to_owned())
}

/// The events of one validation, in journal order: `ValidationCompleted` or `ValidationFailed`,
/// then `RenderGateCompleted`.
///
/// `rendered` is the correlation of the render's `TemplateRendered`; the chain continues it.
/// `last_passed` is the newest render that passed before this one: the gate stays pinned to it
/// on failure (`pinned_to`), and is `None` on pass.
#[must_use]
pub fn verdict_events(
    rendered: &Correlation,
    render: Checksum,
    validation: &Validation,
    trigger_reason: &str,
    last_passed: Option<Checksum>,
) -> Vec<Event> {
    let chain = rendered
        .correlation_id
        .clone()
        .unwrap_or_else(|| CorrelationId::new(rendered.event_id.as_str()));
    let validation_id = EventId::new(new_event_id("validation"));
    let first = Correlation {
        event_id: validation_id.clone(),
        correlation_id: Some(chain.clone()),
        causation_id: Some(rendered.event_id.clone()),
    };
    let gate = Correlation {
        event_id: EventId::new(new_event_id("gate")),
        correlation_id: Some(chain),
        causation_id: Some(validation_id),
    };
    let duration_ms = u64::try_from(validation.duration.as_millis()).unwrap_or(u64::MAX);
    match &validation.outcome {
        Outcome::Pass { warnings } => vec![
            Event::ValidationCompleted {
                correlation: first,
                render,
                warnings: warnings.clone(),
                duration_ms,
                trigger_reason: trigger_reason.to_owned(),
                coalescible: true,
            },
            Event::RenderGateCompleted {
                correlation: gate,
                render,
                verdict: GateVerdict::Pass,
                messages: warnings.clone(),
                pinned_to: None,
            },
        ],
        Outcome::Fail { errors } => vec![
            Event::ValidationFailed {
                correlation: first,
                render: Some(render),
                errors: errors.clone(),
                duration_ms,
                trigger_reason: trigger_reason.to_owned(),
            },
            Event::RenderGateCompleted {
                correlation: gate,
                render,
                verdict: GateVerdict::Fail,
                messages: errors.clone(),
                pinned_to: last_passed,
            },
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_keep_order_join_continuations_and_unroot() {
        let root = "/tmp/haptic-validate-x";
        let text = "[NOTICE]   (1) : haproxy version\n\
            [ALERT]    (1) : config : parsing [/tmp/haptic-validate-x/haproxy.cfg:3] : first\n\
            [WARNING]  (1) : config : w1\n\
            [ALERT]    (1) : cannot open </tmp/haptic-validate-x/maps/a.map>\n  | more\n";
        let (a, w) = parse_messages(text, root);
        assert_eq!(
            a,
            vec![
                "config : parsing [haproxy.cfg:3] : first".to_owned(),
                "cannot open </etc/haproxy/maps/a.map>\n  | more".to_owned()
            ]
        );
        assert_eq!(w, vec!["config : w1".to_owned()]);
    }

    #[test]
    fn verdict_events_continue_the_chain_and_pin_on_failure() {
        let rendered = crate::dispatch::input::chain_start("render");
        let render = Checksum([1; 32]);
        let last = Checksum([2; 32]);
        let fail = Validation {
            outcome: Outcome::Fail {
                errors: vec!["e1".into(), "e2".into()],
            },
            duration: Duration::from_millis(5),
        };
        let events = verdict_events(&rendered, render, &fail, "t", Some(last));
        let [
            Event::ValidationFailed {
                correlation,
                errors,
                ..
            },
            Event::RenderGateCompleted {
                correlation: gate,
                verdict,
                pinned_to,
                messages,
                ..
            },
        ] = events.as_slice()
        else {
            panic!("{events:?}")
        };
        assert_eq!(correlation.correlation_id, rendered.correlation_id);
        assert_eq!(correlation.causation_id.as_ref(), Some(&rendered.event_id));
        assert_eq!(gate.causation_id.as_ref(), Some(&correlation.event_id));
        assert_eq!((*verdict, *pinned_to), (GateVerdict::Fail, Some(last)));
        assert_eq!(errors, messages);
        let pass = Validation {
            outcome: Outcome::Pass { warnings: vec![] },
            duration: Duration::ZERO,
        };
        let events = verdict_events(&rendered, render, &pass, "t", Some(last));
        assert!(matches!(
            events.as_slice(),
            [
                Event::ValidationCompleted { .. },
                Event::RenderGateCompleted {
                    verdict: GateVerdict::Pass,
                    pinned_to: None,
                    ..
                }
            ]
        ));
    }

    #[test]
    fn empty_configs() {
        assert!(is_empty_config(b""));
        assert!(is_empty_config(b"  \n# nothing\n\t\n"));
        assert!(!is_empty_config(b"global\n"));
    }

    #[test]
    fn rewrites_pod_paths() {
        let out = rewrite_paths(
            b"crt /etc/haproxy/ssl/a.pem map(/etc/haproxy/maps/b.map)",
            "/r",
        );
        assert_eq!(out, b"crt /r/ssl/a.pem map(/r/maps/b.map)");
    }
}
