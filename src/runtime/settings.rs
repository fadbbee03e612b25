//! The settings `haptic run` resolves from its flags: checked combinations, derived names, and
//! the one start-up log line (nothing secret is in the flags: Secrets are named, never read here).

use std::path::{Path, PathBuf};

use super::args::{RunArgs, SourceKind};

/// A flag combination that cannot work, with the fix in the message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SettingsError {
    /// `--source dir` without `--render-dir`.
    #[error(
        "--source dir needs --render-dir DIR (or HAPTIC_RENDER_DIR): the directory holding haproxy.cfg"
    )]
    RenderDirMissing,
    /// `--source configmap` without `--configmap`.
    #[error("--source configmap needs --configmap NAME (or HAPTIC_CONFIGMAP)")]
    ConfigMapMissing,
    /// `--ingest-addr` without `--ingest-token-secret`.
    #[error(
        "--ingest-addr needs --ingest-token-secret NAME: a Secret with the bearer token under the key `token`"
    )]
    IngestTokenMissing,
    /// An empty selector or Secret name.
    #[error("--{flag} must not be empty")]
    Empty {
        /// The flag.
        flag: &'static str,
    },
    /// `--publish-retry-initial` is zero or above `--publish-retry-max`.
    #[error(
        "--publish-retry-initial ({initial:?}) must be above zero and at most --publish-retry-max ({max:?})"
    )]
    PublishRetry {
        /// The initial delay given.
        initial: std::time::Duration,
        /// The cap given.
        max: std::time::Duration,
    },
    /// `--quarantine-retry-initial` (or the drift interval it defaults to) is zero, or above
    /// `--quarantine-retry-max`.
    #[error(
        "--quarantine-retry-initial ({initial:?}; default: --drift-prevention-interval) must be above zero and at most --quarantine-retry-max ({max:?})"
    )]
    QuarantineRetry {
        /// The initial delay in effect.
        initial: std::time::Duration,
        /// The cap given.
        max: std::time::Duration,
    },
    /// `--kube-request-timeout` is zero.
    #[error(
        "--kube-request-timeout must be above zero: the bound of one Kubernetes API request (default 10s)"
    )]
    KubeRequestTimeout,
    /// `--config-name` is not a DNS-1123 label prefix.
    #[error(
        "--config-name {name:?} is not a valid name: use lower-case letters, digits and '-', \
         starting and ending with a letter or digit, at most 40 characters"
    )]
    ConfigName {
        /// The name given or derived.
        name: String,
    },
}

/// What the runtime runs with.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The flags as given.
    pub args: RunArgs,
    /// The config name (`--config-name`, or derived from the source).
    pub config_name: String,
}

impl Settings {
    /// Checks the flags and derives the config name (DESIGN.md section 1: the ConfigMap's
    /// name, the render directory's base name, or `haptic`).
    ///
    /// # Errors
    /// [`SettingsError`] naming the flag and the fix.
    pub fn resolve(args: &RunArgs) -> Result<Settings, SettingsError> {
        if args.pod_selector.trim().is_empty() {
            return Err(SettingsError::Empty {
                flag: "pod-selector",
            });
        }
        if args.dataplane_secret.trim().is_empty() {
            return Err(SettingsError::Empty {
                flag: "dataplane-secret",
            });
        }
        let derived = match args.source {
            SourceKind::Dir => {
                let dir = args
                    .render_dir
                    .as_deref()
                    .ok_or(SettingsError::RenderDirMissing)?;
                base_name(dir)
            }
            SourceKind::Configmap => Some(
                args.configmap
                    .clone()
                    .ok_or(SettingsError::ConfigMapMissing)?,
            ),
        };
        if args.ingest_addr.is_some() && args.ingest_token_secret.is_none() {
            return Err(SettingsError::IngestTokenMissing);
        }
        if args.publish_retry_initial.is_zero()
            || args.publish_retry_initial > args.publish_retry_max
        {
            return Err(SettingsError::PublishRetry {
                initial: args.publish_retry_initial,
                max: args.publish_retry_max,
            });
        }
        let quarantine_initial = quarantine_retry_initial(args);
        if quarantine_initial.is_zero() || quarantine_initial > args.quarantine_retry_max {
            return Err(SettingsError::QuarantineRetry {
                initial: quarantine_initial,
                max: args.quarantine_retry_max,
            });
        }
        if args.kube_request_timeout.is_zero() {
            return Err(SettingsError::KubeRequestTimeout);
        }
        let config_name = match &args.config_name {
            Some(n) => n.clone(),
            None => derived
                .map(|n| sanitize(&n))
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| "haptic".to_owned()),
        };
        if !valid_config_name(&config_name) {
            return Err(SettingsError::ConfigName { name: config_name });
        }
        Ok(Settings {
            args: args.clone(),
            config_name,
        })
    }

    /// The journal path.
    #[must_use]
    pub fn journal(&self) -> &Path {
        &self.args.journal
    }
}

fn base_name(dir: &Path) -> Option<String> {
    let abs: PathBuf = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    abs.file_name().map(|n| n.to_string_lossy().into_owned())
}

/// Lower-cases and maps anything outside `[a-z0-9-]` to `-`, trims `-`, caps at 40 characters
/// (room for `-haproxycfg-invalid` within a 63-character label).
fn sanitize(name: &str) -> String {
    let s: String = name
        .to_ascii_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let s: String = s.trim_matches('-').chars().take(40).collect();
    s.trim_end_matches('-').to_owned()
}

fn valid_config_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 40
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

/// The first retry delay of a quarantined render: `--quarantine-retry-initial`, else the drift
/// prevention interval capped by `--quarantine-retry-max` (so a long drift interval needs no
/// second flag).
#[must_use]
pub fn quarantine_retry_initial(args: &RunArgs) -> std::time::Duration {
    args.quarantine_retry_initial.unwrap_or_else(|| {
        args.drift_prevention_interval
            .min(args.quarantine_retry_max)
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use clap::Parser as _;

    /// `haptic run`'s flags alone (the runtime does not see the CLI above it).
    #[derive(clap::Parser)]
    struct Run {
        #[command(flatten)]
        args: RunArgs,
    }

    fn args(extra: &[&str]) -> RunArgs {
        let mut v = vec![
            "haptic",
            "--pod-selector",
            "app=haproxy",
            "--dataplane-secret",
            "dp",
        ];
        v.extend_from_slice(extra);
        Run::try_parse_from(v).unwrap().args
    }

    #[test]
    fn derives_the_config_name_from_the_source() {
        let s = Settings::resolve(&args(&["--render-dir", "/srv/Edge_Renders/"])).unwrap();
        assert_eq!(s.config_name, "edge-renders");
        let s = Settings::resolve(&args(&["--source", "configmap", "--configmap", "web"])).unwrap();
        assert_eq!(s.config_name, "web");
        let s = Settings::resolve(&args(&["--render-dir", "/x", "--config-name", "demo"])).unwrap();
        assert_eq!(s.config_name, "demo");
    }

    #[test]
    fn refuses_incomplete_combinations_naming_the_flag() {
        assert_eq!(
            Settings::resolve(&args(&[])).unwrap_err(),
            SettingsError::RenderDirMissing
        );
        assert_eq!(
            Settings::resolve(&args(&["--source", "configmap"])).unwrap_err(),
            SettingsError::ConfigMapMissing
        );
        let e = Settings::resolve(&args(&[
            "--render-dir",
            "/x",
            "--ingest-addr",
            "127.0.0.1:1",
        ]))
        .unwrap_err();
        assert!(e.to_string().contains("--ingest-token-secret"), "{e}");
        let e = Settings::resolve(&args(&["--render-dir", "/x", "--config-name", "Bad_Name"]))
            .unwrap_err();
        assert!(e.to_string().contains("Bad_Name"), "{e}");
    }

    #[test]
    fn the_kube_request_timeout_defaults_to_10s_and_must_be_above_zero() {
        let a = args(&["--render-dir", "/x"]);
        assert_eq!(a.kube_request_timeout, std::time::Duration::from_secs(10));
        let a = args(&["--render-dir", "/x", "--kube-request-timeout", "0s"]);
        let e = Settings::resolve(&a).unwrap_err();
        assert_eq!(e, SettingsError::KubeRequestTimeout);
        assert!(e.to_string().contains("--kube-request-timeout"), "{e}");
    }

    /// Issue 27: the quarantine's first retry is the drift interval unless given, capped by
    /// `--quarantine-retry-max` (default 1 h); an explicit zero or one above the cap is
    /// refused, naming both flags.
    #[test]
    fn the_quarantine_retry_defaults_to_the_drift_interval_and_is_checked() {
        use std::time::Duration;
        let a = args(&["--render-dir", "/x"]);
        assert_eq!(a.quarantine_retry_max, Duration::from_secs(3600));
        assert_eq!(quarantine_retry_initial(&a), Duration::from_secs(60));
        let a = args(&["--render-dir", "/x", "--drift-prevention-interval", "5s"]);
        assert_eq!(quarantine_retry_initial(&a), Duration::from_secs(5));
        let a = args(&["--render-dir", "/x", "--drift-prevention-interval", "3h"]);
        assert_eq!(quarantine_retry_initial(&a), Duration::from_secs(3600));
        assert!(Settings::resolve(&a).is_ok());
        for bad in [
            &["--quarantine-retry-initial", "0s"][..],
            &["--quarantine-retry-initial", "2h"][..],
            &[
                "--quarantine-retry-initial",
                "10s",
                "--quarantine-retry-max",
                "5s",
            ][..],
        ] {
            let a = args(&[&["--render-dir", "/x"][..], bad].concat());
            let e = Settings::resolve(&a).unwrap_err();
            assert!(
                matches!(e, SettingsError::QuarantineRetry { .. }),
                "{bad:?}: {e}"
            );
            let m = e.to_string();
            assert!(
                m.contains("--quarantine-retry-initial") && m.contains("--quarantine-retry-max"),
                "{m}"
            );
        }
    }

    #[test]
    fn durations_parse_in_humantime_syntax() {
        let a = args(&[
            "--render-dir",
            "/x",
            "--min-deployment-interval",
            "1m30s",
            "--publish-interval",
            "250ms",
        ]);
        assert_eq!(
            a.min_deployment_interval,
            std::time::Duration::from_secs(90)
        );
        assert_eq!(a.publish_interval, std::time::Duration::from_millis(250));
        assert_eq!(a.deployment_timeout, std::time::Duration::from_secs(30));
        assert_eq!(
            a.publish_retry_initial,
            std::time::Duration::from_millis(200)
        );
        assert_eq!(a.publish_retry_max, std::time::Duration::from_secs(30));
    }

    #[test]
    fn publish_retry_flags_compress_time_and_are_checked() {
        let a = args(&[
            "--render-dir",
            "/x",
            "--publish-retry-initial",
            "20ms",
            "--publish-retry-max",
            "1s",
        ]);
        assert_eq!(
            a.publish_retry_initial,
            std::time::Duration::from_millis(20)
        );
        assert_eq!(a.publish_retry_max, std::time::Duration::from_secs(1));
        assert!(Settings::resolve(&a).is_ok());
        for (initial, max) in [("0s", "1s"), ("2s", "1s")] {
            let e = Settings::resolve(&args(&[
                "--render-dir",
                "/x",
                "--publish-retry-initial",
                initial,
                "--publish-retry-max",
                max,
            ]))
            .unwrap_err();
            assert!(e.to_string().contains("--publish-retry-initial"), "{e}");
        }
    }
}
