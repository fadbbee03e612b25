//! Logs with `tracing`: text or JSON lines on stderr, filtered by `RUST_LOG` (default `info`).

use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

/// Log line format (`--log-format text|json`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines (`tracing_subscriber::fmt` default format; colours only when stderr
    /// is a terminal). Default.
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
    // Colours only on a terminal: container logs must not carry escape codes.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    subscriber(format, filter, ansi, std::io::stderr)
        .try_init()
        .map_err(TelemetryError::Init)
}

/// The subscriber [`init_tracing`] installs, writing to `writer` (tests capture it).
fn subscriber<W>(
    format: LogFormat,
    filter: EnvFilter,
    ansi: bool,
    writer: W,
) -> Box<dyn tracing::Subscriber + Send + Sync>
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    let registry = tracing_subscriber::registry().with(filter);
    match format {
        LogFormat::Text => Box::new(
            registry.with(
                tracing_subscriber::fmt::layer()
                    .with_ansi(ansi)
                    .with_writer(writer),
            ),
        ),
        LogFormat::Json => Box::new(
            registry.with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .flatten_event(true)
                    .with_current_span(true)
                    .with_span_list(false)
                    .with_writer(writer),
            ),
        ),
    }
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

    /// A `MakeWriter` into a shared buffer.
    #[derive(Clone, Default)]
    struct Buf(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'w> tracing_subscriber::fmt::MakeWriter<'w> for Buf {
        type Writer = Buf;
        fn make_writer(&'w self) -> Buf {
            self.clone()
        }
    }

    fn capture(format: LogFormat) -> String {
        let buf = Buf::default();
        let sub = subscriber(format, env_filter(None).unwrap(), false, buf.clone());
        tracing::subscriber::with_default(sub, || {
            let span = tracing::info_span!("deployer", name = "main");
            let _g = span.enter();
            tracing::info!(seq = 7u64, "intent journaled");
            tracing::debug!("filtered out at the default level");
        });
        String::from_utf8(buf.0.lock().unwrap().clone()).unwrap()
    }

    #[test]
    fn json_lines_carry_message_fields_and_span() {
        let out = capture(LogFormat::Json);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 1, "{out}");
        let v: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(v["message"], "intent journaled");
        assert_eq!(v["seq"], 7);
        assert_eq!(v["level"], "INFO");
        assert_eq!(v["span"]["name"], "deployer");
    }

    #[test]
    fn text_lines_are_plain() {
        let out = capture(LogFormat::Text);
        assert_eq!(out.lines().count(), 1, "{out}");
        assert!(
            out.contains("intent journaled") && out.contains("seq=7"),
            "{out}"
        );
        assert!(!out.contains("filtered out"));
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
