//! The health and metrics HTTP server (`--metrics-addr`): `GET /startupz`, `GET /healthz`,
//! `GET /readyz`, `GET /metrics`, `GET /debug/history` (read-only).

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio_util::sync::CancellationToken;

use super::health::{HealthRegistry, HealthReport};
use super::metrics::Metrics;

/// Content type of `/metrics` (OpenMetrics 1.0 text).
pub const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug)]
struct AppState {
    metrics: Arc<Metrics>,
    health: HealthRegistry,
}

/// The routes, for embedding in another server or testing without a socket:
/// - `GET /startupz`: 200 `ok`, or 503 with one `<check>: <reason>` line per failing startup
///   or liveness check ([`HealthRegistry::startup`]; the startupProbe's endpoint);
/// - `GET /healthz`: 200 `ok`, or 503 with one `<check>: <reason>` line per failing liveness
///   check;
/// - `GET /readyz`: the same over the readiness checks (503 while none is registered);
/// - `GET /metrics`: 200, [`METRICS_CONTENT_TYPE`], [`Metrics::encode`];
/// - `GET /debug/history?pod=NS/NAME&render=sha256:...&since=RFC3339&until=RFC3339&limit=N`
///   (each optional; `limit` default 1000: the newest records, a first line
///   `{"truncated": {"omitted", "limit"}}` when more matched): this replica's per-pod
///   deployment history from the live journal (issue 28),
///   one JSON object per line ([`haptic_journal::TimelineLine::to_json`], the lines
///   `haptic-journalctl history --json` prints offline), `application/x-ndjson`; 400 naming a
///   bad parameter, 503 before the journal is open. Read-only: a redb read transaction beside
///   the writer.
///
/// Bodies are `text/plain; charset=utf-8` except `/metrics`. Checks and encoding run on the
/// blocking pool (they read the journal).
pub fn router(metrics: Arc<Metrics>, health: HealthRegistry) -> Router {
    Router::new()
        .route("/startupz", get(startupz))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_handler))
        .route("/debug/history", get(history))
        .with_state(AppState { metrics, health })
}

/// Serves [`router`] on `listener` until `cancel` fires, then finishes the requests in flight
/// and returns.
///
/// # Errors
/// The I/O error that stopped the accept loop (axum retries transient accept errors itself).
///
/// # Cancel safety
/// Cancel through `cancel` for a graceful stop; dropping the future closes the listener and
/// drops connections in flight (probes and scrapes are read-only, so nothing is lost).
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
    health: HealthRegistry,
    cancel: CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, router(metrics, health))
        .with_graceful_shutdown(cancel.cancelled_owned())
        .await
}

async fn startupz(State(state): State<AppState>) -> Response {
    probe(move || state.health.startup()).await
}

async fn healthz(State(state): State<AppState>) -> Response {
    probe(move || state.health.liveness()).await
}

async fn readyz(State(state): State<AppState>) -> Response {
    probe(move || state.health.readiness()).await
}

async fn probe(run: impl FnOnce() -> HealthReport + Send + 'static) -> Response {
    match tokio::task::spawn_blocking(run).await {
        Ok(report) => {
            let status = if report.is_healthy() {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            text(status, report.body())
        }
        Err(e) => text(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("checks: panicked or cancelled: {e}\n"),
        ),
    }
}

async fn metrics_handler(State(state): State<AppState>) -> Response {
    match tokio::task::spawn_blocking(move || state.metrics.encode()).await {
        Ok(body) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, METRICS_CONTENT_TYPE)],
            body,
        )
            .into_response(),
        Err(e) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("metrics encoding failed: {e}\n"),
        ),
    }
}

/// Records `/debug/history` answers with when the query names no `limit` (the newest).
const HISTORY_LIMIT: usize = 1000;

/// The query of `/debug/history`.
#[derive(Debug, serde::Deserialize)]
struct HistoryParams {
    limit: Option<usize>,
    pod: Option<String>,
    render: Option<String>,
    since: Option<String>,
    until: Option<String>,
}

async fn history(
    State(state): State<AppState>,
    axum::extract::Query(p): axum::extract::Query<HistoryParams>,
) -> Response {
    let query = match haptic_journal::HistoryQuery::parse(
        p.pod.as_deref(),
        p.render.as_deref(),
        p.since.as_deref(),
        p.until.as_deref(),
    ) {
        Ok(q) => q,
        Err(m) => return text(StatusCode::BAD_REQUEST, format!("{m}\n")),
    };
    let Some(journal) = state.metrics.journal() else {
        return text(
            StatusCode::SERVICE_UNAVAILABLE,
            "journal: not open yet\n".to_owned(),
        );
    };
    let limit = p.limit.unwrap_or(HISTORY_LIMIT);
    let read = tokio::task::spawn_blocking(move || {
        journal.history_query(&query).map(|records| {
            let mut body = String::new();
            // The newest `limit` records; what is left out is said first.
            let omitted = records.len().saturating_sub(limit);
            if omitted > 0 {
                body.push_str(
                    &serde_json::json!({"truncated": {"omitted": omitted, "limit": limit}})
                        .to_string(),
                );
                body.push('\n');
            }
            for line in haptic_journal::timeline(&records[omitted..]) {
                body.push_str(&line.to_json().to_string());
                body.push('\n');
            }
            body
        })
    })
    .await;
    match read {
        Ok(Ok(body)) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/x-ndjson")],
            body,
        )
            .into_response(),
        Ok(Err(e)) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("journal: {}\n", crate::core::error::chain(&e)),
        ),
        Err(e) => text(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("journal read: panicked or cancelled: {e}\n"),
        ),
    }
}

fn text(status: StatusCode, body: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        body,
    )
        .into_response()
}
