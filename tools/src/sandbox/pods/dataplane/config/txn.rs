//! Transactions (`/v3/services/haproxy/transactions`), as the real API keeps them
//! (observed-v3.4.md, dataplaneapi `--max-open-transactions` 20):
//!
//! ```text
//!  POST ?version=N      201 {_version, id, status: in_progress}; 409 stale; 400 no version;
//!                       429 with 20 in_progress
//!  PUT  /{id}           commit: 202 + Reload-ID {status: success} (200 with force_reload);
//!                       406 when outdated or failed; 409 when the version moved (stays
//!                       in_progress until deleted); 400 when haproxy -c refuses it (becomes
//!                       failed); the other in_progress ones become outdated
//!  GET  [?status=S]     the in_progress, outdated and failed ones
//!  DELETE /{id}         204 (404 unknown)
//! ```

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};

use super::super::{PodCore, error, qbool, version_mismatch, with_reload_id};

/// The most `in_progress` transactions (dataplaneapi `max_open_transactions`, default 20).
pub(crate) const MAX_OPEN: usize = 20;

/// A transaction.
#[derive(Debug, Clone)]
pub(crate) struct Txn {
    /// Version it started at.
    pub(crate) version: u64,
    /// The configuration it edits (body, no header lines).
    pub(crate) text: String,
    /// `in_progress`, `outdated` or `failed`.
    pub(crate) status: &'static str,
}

/// Transactions by id (committed ones are gone).
pub(crate) type Transactions = std::sync::Mutex<BTreeMap<String, Txn>>;

pub(super) fn routes() -> Router<Arc<PodCore>> {
    Router::new()
        .route("/v3/services/haproxy/transactions", get(list).post(start))
        .route(
            "/v3/services/haproxy/transactions/{id}",
            get(get_one).put(commit).delete(delete),
        )
}

fn txn_json(id: &str, t: &Txn) -> Value {
    json!({"id": id, "_version": t.version, "status": t.status})
}

async fn start(
    State(core): State<Arc<PodCore>>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let Some(v) = q.get("version") else {
        return error(400, "version not specified");
    };
    let Ok(v) = v.parse::<u64>() else {
        return error(400, format!("invalid version: {v}"));
    };
    let st = core.cfg.lock().await;
    let current = core.version();
    if v != current {
        return error(409, version_mismatch(current, v));
    }
    let mut txns = core.transactions.lock().unwrap_or_else(|p| p.into_inner());
    if txns.values().filter(|t| t.status == "in_progress").count() >= MAX_OPEN {
        return error(
            429,
            "cannot start a new transaction: too many open transactions",
        );
    }
    let n = core.txn_counter.fetch_add(1, Ordering::SeqCst) + 1;
    let id = format!("{n:08x}-{:04x}-4000-8000-{:012x}", v & 0xffff, txns.len());
    let t = Txn {
        version: v,
        text: st.memory.clone(),
        status: "in_progress",
    };
    let body = txn_json(&id, &t);
    txns.insert(id, t);
    (StatusCode::CREATED, axum::Json(body)).into_response()
}

async fn list(
    State(core): State<Arc<PodCore>>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let txns = core.transactions.lock().unwrap_or_else(|p| p.into_inner());
    let want = q.get("status");
    axum::Json(
        txns.iter()
            .filter(|(_, t)| want.is_none_or(|s| s == t.status))
            .map(|(id, t)| txn_json(id, t))
            .collect::<Vec<_>>(),
    )
    .into_response()
}

async fn get_one(State(core): State<Arc<PodCore>>, Path(id): Path<String>) -> Response {
    let txns = core.transactions.lock().unwrap_or_else(|p| p.into_inner());
    match txns.get(&id) {
        Some(t) => axum::Json(txn_json(&id, t)).into_response(),
        None => error(404, format!("transaction {id} does not exist")),
    }
}

async fn delete(State(core): State<Arc<PodCore>>, Path(id): Path<String>) -> Response {
    let removed = core
        .transactions
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&id);
    match removed {
        Some(_) => StatusCode::NO_CONTENT.into_response(),
        None => error(404, format!("transaction {id} does not exist")),
    }
}

fn set_status(core: &PodCore, id: &str, status: &'static str) {
    if let Some(t) = core
        .transactions
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get_mut(id)
    {
        t.status = status;
    }
}

async fn commit(
    State(core): State<Arc<PodCore>>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let mut st = core.cfg.lock().await;
    let txn = {
        let txns = core.transactions.lock().unwrap_or_else(|p| p.into_inner());
        match txns.get(&id) {
            Some(t) => t.clone(),
            None => return error(404, format!("transaction {id} does not exist")),
        }
    };
    if txn.status != "in_progress" {
        return error(406, format!("transaction {id} is {}", txn.status));
    }
    let current = core.version();
    if txn.version != current {
        // The real API leaves it in_progress: it must be deleted.
        return error(409, version_mismatch(current, txn.version));
    }
    if let Err(m) = core.validate(&txn.text).await {
        set_status(&core, &id, "failed");
        return error(400, m);
    }
    let new_version = current + 1;
    if let Err(e) = core.store_config(&mut st, &txn.text, new_version) {
        return error(500, format!("writing configuration: {e}"));
    }
    {
        let mut txns = core.transactions.lock().unwrap_or_else(|p| p.into_inner());
        txns.remove(&id);
        for t in txns.values_mut().filter(|t| t.status == "in_progress") {
            t.status = "outdated";
        }
    }
    let body = json!({"id": id, "_version": txn.version, "status": "success"});
    if qbool(&q, "force_reload") {
        return match core.reload_locked(&mut st).await {
            Ok(()) => (StatusCode::OK, axum::Json(body)).into_response(),
            Err(m) => error(400, m),
        };
    }
    drop(st);
    let reload = core.schedule_reload();
    with_reload_id(
        (StatusCode::ACCEPTED, axum::Json(body)).into_response(),
        &reload,
    )
}
