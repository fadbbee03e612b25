//! Logs with `tracing`: text or JSON lines on stderr, filtered by `RUST_LOG` (default `info`).

use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

/// Log line format (`--log-format text|json`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines (`tracing_subscriber::fmt` default format). Default.
    #[default]
    Text,
    /// One JSON object per line (fields flattened next to `message`; current span included).
    Json,
}

/// Errors of [`init_tracing`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TelemetryError {
    /// `RUST_LOG` holds a directive that does not parse.
    #[error("invalid RUST_LOG filter")]
    Filter(#[source] tracing_subscriber::filter::ParseError),
    /// A global subscriber was already installed (init called twice, or by a test harness).
    #[error("cannot install the global tracing subscriber")]
    Init(#[source] tracing_subscriber::util::TryInitError),
}

/// Installs the global `tracing` subscriber: `format` lines on stderr, filtered by the env var
/// `RUST_LOG` (`EnvFilter` syntax), `info` when it is unset or empty.
///
/// Call once, early in `main`. Never log certificate, key or Secret material: nothing here
/// redacts fields.
///
/// # Errors
/// [`TelemetryError::Filter`] when `RUST_LOG` does not parse (fatal: the operator asked for
/// something we cannot give); [`TelemetryError::Init`] when a global subscriber is already set.
pub fn init_tracing(format: LogFormat) -> Result<(), TelemetryError> {
    let filter = env_filter(std::env::var("RUST_LOG").ok().as_deref())?;
    let registry = tracing_subscriber::registry().with(filter);
    match format {
        LogFormat::Text => registry
            .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr))
            .try_init(),
        LogFormat::Json => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .flatten_event(true)
                    .with_current_span(true)
                    .with_span_list(false)
                    .with_writer(std::io::stderr),
            )
            .try_init(),
    }
    .map_err(TelemetryError::Init)
}

/// The filter for a `RUST_LOG` value (`None` or empty: `info`).
fn env_filter(value: Option<&str>) -> Result<EnvFilter, TelemetryError> {
    let builder = EnvFilter::builder().with_default_directive(LevelFilter::INFO.into());
    match value {
        Some(v) if !v.trim().is_empty() => builder.parse(v).map_err(TelemetryError::Filter),
        _ => Ok(builder.parse_lossy("")),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn default_filter_is_info() {
        let f = env_filter(None).unwrap();
        assert_eq!(f.max_level_hint(), Some(LevelFilter::INFO));
        let f = env_filter(Some("  ")).unwrap();
        assert_eq!(f.max_level_hint(), Some(LevelFilter::INFO));
    }

    #[test]
    fn rust_log_is_honoured_and_bad_values_fail() {
        let f = env_filter(Some("haptic=debug")).unwrap();
        assert_eq!(f.max_level_hint(), Some(LevelFilter::DEBUG));
        assert!(matches!(
            env_filter(Some("haptic=notalevel")),
            Err(TelemetryError::Filter(_))
        ));
    }

    #[test]
    fn log_format_values() {
        use clap::ValueEnum as _;
        let names: Vec<_> = LogFormat::value_variants()
            .iter()
            .map(|v| v.to_possible_value().unwrap().get_name().to_owned())
            .collect();
        assert_eq!(names, ["text", "json"]);
    }
}
