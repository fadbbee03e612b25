//! The endpoint's request handlers: the bearer-token check, the follower's `503` naming the
//! leader, `POST /v1/renders` (read, check, journal through the acceptor, answer) and
//! `GET /v1/renders/latest`.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse as _, Response};
use haptic_journal::Seq;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use serde_json::json;
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;

use super::body::{self, Refusal};
use super::{Inner, Latest};
use crate::core::render::RenderContent;
use crate::dispatch::input::{Input, RenderSource, template_rendered};

/// The `Retry-After` a follower sends, in seconds (the Lease retry period).
const RETRY_AFTER_SECONDS: &str = "2";

/// How long a follower waits for the Lease when naming the leader; past it answers `null`.
const LEADER_LOOKUP_TIMEOUT: Duration = Duration::from_secs(2);

fn authorized(inner: &Inner, headers: &HeaderMap) -> bool {
    let expected = *inner
        .token_digest
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let Some(expected) = expected else {
        return true;
    };
    // The scheme name is case-insensitive (RFC 7235 section 2.1).
    let presented = headers
        .get(header::AUTHORIZATION)
        .map(HeaderValue::as_bytes)
        .and_then(|v| v.split_at_checked(7))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case(b"bearer "))
        .map(|(_, token)| token)
        .unwrap_or_default();
    let digest: [u8; 32] = Sha256::digest(presented).into();
    !presented.is_empty() && bool::from(digest.ct_eq(&expected))
}

fn unauthorized(inner: &Inner) -> Response {
    inner.counters.rejected.fetch_add(1, Ordering::Relaxed);
    let mut resp = (
        StatusCode::UNAUTHORIZED,
        axum::Json(json!({ "error": "missing or wrong bearer token" })),
    )
        .into_response();
    resp.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"haptic-ingest\""),
    );
    resp
}

async fn not_leader(inner: &Inner) -> Response {
    inner.counters.not_leader.fetch_add(1, Ordering::Relaxed);
    let leader = leader_identity(inner).await;
    let mut resp = (
        StatusCode::SERVICE_UNAVAILABLE,
        axum::Json(json!({ "error": "not the leader", "leader": leader })),
    )
        .into_response();
    resp.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from_static(RETRY_AFTER_SECONDS),
    );
    resp
}

/// The Lease's `spec.holderIdentity`, `None` when unknown, empty or unreadable in time.
async fn leader_identity(inner: &Inner) -> Option<String> {
    let lease = inner.cfg.lease.as_ref()?;
    let api: Api<Lease> = Api::namespaced(lease.client.clone(), &lease.namespace);
    match tokio::time::timeout(LEADER_LOOKUP_TIMEOUT, api.get_opt(&lease.name)).await {
        Ok(Ok(found)) => found
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
            .filter(|h| !h.is_empty()),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, lease = %lease.name, "reading the Lease to name the leader failed");
            None
        }
        Err(_) => {
            tracing::warn!(lease = %lease.name, "reading the Lease to name the leader timed out");
            None
        }
    }
}

fn is_leader(inner: &Inner) -> bool {
    inner.leadership.borrow().is_leader()
}

pub(super) async fn post_render(State(inner): State<Arc<Inner>>, req: Request) -> Response {
    if !authorized(&inner, req.headers()) {
        return unauthorized(&inner);
    }
    if !is_leader(&inner) {
        return not_leader(&inner).await;
    }
    let limit = inner.cfg.max_body_bytes;
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let media = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_ascii_lowercase();
    let started = Instant::now();
    let read = if declared.is_some_and(|n| n > limit as u64) {
        Err(Refusal::too_large(limit))
    } else if media.starts_with("multipart/form-data") {
        body::read_multipart(req, limit).await
    } else if media.starts_with("application/x-tar") || media.starts_with("application/tar") {
        body::read_tar(req, limit).await
    } else {
        Err(Refusal {
            status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
            error: format!("unsupported content type `{media}`"),
            part: None,
            fix: Some("send multipart/form-data (one part per file) or application/x-tar"),
        })
    };
    let content = match read {
        Ok(c) => c,
        Err(refusal) => {
            inner.counters.rejected.fetch_add(1, Ordering::Relaxed);
            tracing::info!(status = refusal.status.as_u16(), error = %refusal.error, part = ?refusal.part, "ingest request refused");
            return refusal.into_response();
        }
    };
    commit(&inner, content, started.elapsed()).await
}

/// The duplicate check and the commit, serialized by `latest`.
async fn commit(inner: &Inner, content: RenderContent, read_time: Duration) -> Response {
    let manifest = content.manifest();
    let checksum = manifest.checksum;
    let mut latest = inner.latest.lock().await;
    if let Some(last) = *latest
        && last.checksum == checksum
    {
        inner.counters.duplicates.fetch_add(1, Ordering::Relaxed);
        tracing::info!(%checksum, seq = last.seq.0, "ingest render unchanged, not journaled again");
        return accepted(last, true);
    }
    // Leadership may have gone while the body was read.
    if !is_leader(inner) {
        drop(latest);
        return not_leader(inner).await;
    }
    if let Some((dispatch, _)) = &inner.cfg.journal
        && !dispatch.journal_writable()
    {
        return insufficient_storage(inner, None);
    }
    let event = template_rendered(&content, &manifest, read_time, "ingest");
    let (reply, answer) = tokio::sync::oneshot::channel();
    let files = content.files.len();
    let config_bytes = content.config.len();
    let input = Input::Rendered {
        event,
        content: Arc::new(content),
        manifest: Arc::new(manifest),
        source: RenderSource::Ingest,
        reply: Some(reply),
    };
    let outcome = match inner.sink.send(input).await {
        Ok(()) => answer.await.map_err(|_| None),
        Err(_) => Err(None),
    };
    let outcome = match outcome {
        Ok(Ok(done)) => Ok(done),
        Ok(Err(e)) => Err(Some(e)),
        Err(none) => Err(none),
    };
    match outcome {
        Ok(done) => {
            let seq = done.seqs().last().copied().unwrap_or(Seq(0));
            let now = Latest { checksum, seq };
            *latest = Some(now);
            inner.counters.accepted.fetch_add(1, Ordering::Relaxed);
            tracing::info!(
                %checksum,
                seq = seq.0,
                config_bytes,
                files,
                "ingest render journaled"
            );
            accepted(now, false)
        }
        Err(Some(e)) if e.storage_fault().is_some() => insufficient_storage(inner, Some(&e)),
        Err(e) => {
            inner
                .counters
                .journal_failures
                .fetch_add(1, Ordering::Relaxed);
            // `None`: the acceptor is gone (the process is stopping), nothing was journaled.
            let (message, kind) = match &e {
                Some(e) => (crate::core::error::chain(e), e.metric_label()),
                None => ("the acceptor is not running".to_owned(), "stopped"),
            };
            tracing::error!(error = %message, "ingest render not journaled");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                axum::Json(json!({ "error": message, "kind": kind })),
            )
                .into_response()
        }
    }
}

/// `507 Insufficient Storage`: the journal cannot take the render (a storage fault); nothing was
/// journaled. Names the journal file, the OS error and the fix.
fn insufficient_storage(inner: &Inner, error: Option<&crate::dispatch::DispatchError>) -> Response {
    inner
        .counters
        .journal_failures
        .fetch_add(1, Ordering::Relaxed);
    let journal = inner.cfg.journal.as_ref().map(|(d, on_refused)| {
        on_refused();
        (d.journal().path().to_owned(), d.journal().storage_fault())
    });
    let kind = error
        .and_then(crate::dispatch::DispatchError::storage_fault)
        .or_else(|| {
            journal
                .as_ref()
                .and_then(|(_, f)| f.as_ref().map(|f| f.kind))
        })
        .unwrap_or(haptic_journal::FaultKind::Io);
    let (path, message) = match &journal {
        Some((path, Some(fault))) => (
            Some(path.clone()),
            crate::dispatch::fault::describe(path, fault),
        ),
        Some((path, None)) => (
            Some(path.clone()),
            format!(
                "journal {} not writable: {}; fix: {}",
                path.display(),
                error.map_or_else(String::new, |e| crate::core::error::chain(e)),
                crate::dispatch::fault::fix(kind, path)
            ),
        ),
        None => (
            None,
            error.map_or_else(
                || "journal not writable".to_owned(),
                |e| crate::core::error::chain(e),
            ),
        ),
    };
    tracing::warn!(error = %message, "ingest render refused: journal not writable");
    let fix = path
        .as_deref()
        .map(|p| crate::dispatch::fault::fix(kind, p));
    let mut resp = (
        StatusCode::INSUFFICIENT_STORAGE,
        axum::Json(json!({
            "error": message,
            "kind": kind.metric_label(),
            "journal": path.map(|p| p.display().to_string()),
            "fix": fix,
        })),
    )
        .into_response();
    resp.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from_static(INSUFFICIENT_STORAGE_RETRY_AFTER_SECONDS),
    );
    resp
}

/// The `Retry-After` of a `507`, in seconds (the journal watch's longest probe interval).
const INSUFFICIENT_STORAGE_RETRY_AFTER_SECONDS: &str = "30";

fn accepted(latest: Latest, duplicate: bool) -> Response {
    (
        StatusCode::ACCEPTED,
        axum::Json(json!({
            "checksum": latest.checksum.to_string(),
            "seq": latest.seq.0,
            "duplicate": duplicate,
        })),
    )
        .into_response()
}

pub(super) async fn get_latest(State(inner): State<Arc<Inner>>, headers: HeaderMap) -> Response {
    if !authorized(&inner, &headers) {
        return unauthorized(&inner);
    }
    match *inner.latest.lock().await {
        Some(l) => (
            StatusCode::OK,
            axum::Json(json!({ "checksum": l.checksum.to_string(), "seq": l.seq.0 })),
        )
            .into_response(),
        None => (
            StatusCode::NOT_FOUND,
            axum::Json(json!({ "error": "no render accepted since this process started" })),
        )
            .into_response(),
    }
}
