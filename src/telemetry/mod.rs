//! Telemetry: logs, Prometheus metrics, and the health and metrics HTTP server.
//!
//! ```text
//!  components' atomics (each component's CounterSource: components/<name>/metrics.rs),
//!  DispatchStats, Journal::commit_stats, Journal::pending    runtime: renders, events
//!        | registered handles, read at scrape time          | accepted, commit latency
//!        v                                                  v
//!   Metrics (one prometheus-client Registry, no globals) <--+
//!        |  encode() -> OpenMetrics text
//!        v
//!   server::serve (axum) --- GET /metrics
//!                       \--- GET /healthz  <-- HealthRegistry liveness checks (stalls, journal)
//!                        \-- GET /readyz   <-- HealthRegistry readiness checks (replayed, synced)
//!   logging::init_tracing(text | json) -> stderr, EnvFilter from RUST_LOG (default `info`)
//!   fleet::run: journal events (pods, gate, applied, completed) + leadership -> fleet gauges,
//!   deployment histogram, leader-election counters
//! ```
//!
//! The server is started before the journal opens, so the probes answer from the first moment
//! (`/readyz`: `journal opening` until then).
//!
//! Invariants: every label value is a bounded enum (no object names or IDs); a scrape never
//! writes to the journal (it reads meta and queue summaries in one read transaction); counters
//! read from component handles stay monotonic when a handle is replaced at a new leadership term
//! (the old handle's last values are carried over).
//!
//! Telemetry names no component (the architecture test checks it): each component implements
//! [`CounterSource`] for its own families, and liveness checks take a closure
//! ([`handler_stall_check`], [`timer_stall_check`]).
//!
//! # Inputs
//! Handles registered by the runtime ([`Metrics::register_journal`], [`Metrics::register`],
//! ...), direct counter calls
//! ([`Metrics::render_accepted`], [`Metrics::validation`], [`Metrics::events_accepted`],
//! [`Metrics::observe_commit`]), and health checks ([`HealthRegistry::add_liveness`],
//! [`HealthRegistry::add_readiness`]).
//!
//! # Effects
//! HTTP answers on the metrics address; log lines on stderr.
//!
//! # Journal records
//! None written. Read at scrape time: meta (term), queue summaries, commit counters.
//!
//! # Failpoints
//! With the crate feature `failpoints`: `HealthRegistry::block_for_test` marks a component
//! stalled, also armed at start by the env var `HAPTIC_TEST_STALL=<component>[,<component>..]`.
//!
//! # Metrics
//! See [`metrics`] for the full list of `haptic_*` families.

pub mod fleet;
pub mod health;
pub mod logging;
pub mod metrics;
pub mod server;

pub use health::{
    HealthCheck, HealthRegistry, HealthReport, component_stall_check,
    excused_while_journal_faulted, handler_stall_check, journal_fault_check,
    journal_writable_check, timer_stall_check,
};
pub use logging::{LogFormat, TelemetryError, init_tracing};
pub use metrics::{
    CounterFamily, CounterSource, Metrics, RETRIES, RenderSource, Series, ValidationResult,
};
pub use server::{METRICS_CONTENT_TYPE, router, serve};
