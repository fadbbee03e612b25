//! The HTTP ingest endpoint: a render pushed by a client, answered `202` only once its
//! `TemplateRendered` and blobs are durable in the journal (issue 6 "Render sources" (c)).
//!
//! ```text
//!  client --POST /v1/renders (multipart/form-data | application/x-tar)--> auth (bearer, constant time)
//!     --> leader? no: 503 {"leader": <Lease holderIdentity>} + Retry-After: 2
//!     --> read the body (<= max_body_bytes, else 413), check every part (400 naming it)
//!     --> RenderContent --same checksum as the last one accepted here?--> 202 {"duplicate": true}
//!     --> Input::Rendered(template_rendered(.., "ingest"), reply) --acceptor: accept (fsync)--> 202
//! ```
//!
//! Only the leader takes renders: a render journaled on a follower would wait until that
//! follower leads (DESIGN.md J9), so a follower answers `503` naming the Lease holder and the
//! client retries there (or through a Service that routes to the leader).
//!
//! # Inputs
//! - `POST /v1/renders`, `Authorization: Bearer <token>` (when a token is configured), body one of
//!   - `multipart/form-data`: one part per file, each part *named* by its render-relative path:
//!     `haproxy.cfg` (exactly once), `maps/<name>`, `ssl/<name>`, `ca/<name>`, `general/<name>`,
//!     `crt-lists/<name>` (the folder decides the [`haptic_journal::AuxKind`], [`kind_of_folder`](crate::core::render::kind_of_folder));
//!   - `application/x-tar` (or `application/tar`): a tar of a render directory, paths relative
//!     to its root (`tar -C DIR -cf - .`); directory entries are skipped, links are refused.
//! - `GET /v1/renders/latest`: the last render this process accepted through the endpoint.
//!
//! Answers (JSON bodies):
//! - `202 {"checksum":"sha256:..","seq":N,"duplicate":false}` once durable; `"duplicate":true`
//!   with the earlier `seq` when the checksum equals the last one accepted here (not journaled
//!   again). The checksum is [`RenderContent::checksum`]: config and every auxiliary file, CA
//!   files included, the same as the directory source computes for the same tree;
//! - `400 {"error","part","fix"}` for an invalid part (missing or duplicate `haproxy.cfg`, unknown
//!   folder, nested path, `..`, empty or hidden name, duplicate path, unreadable tar);
//! - `401` with `WWW-Authenticate: Bearer` for a missing or wrong token;
//! - `413` when the body exceeds [`IngestConfig::max_body_bytes`]; `415` for another media type;
//! - `503 {"error":"not the leader","leader":<holderIdentity or null>}` with `Retry-After: 2`;
//! - `507 {"error":"journal <path> not writable (<kind>): <os error>; fix: ..","kind":<full|read_only|removed|io>,"journal":<path>,"fix":..}`
//!   with `Retry-After: 30` while the journal cannot take commits (a storage fault: its volume is
//!   full or read-only, or the file was removed); nothing was journaled, the client retries;
//!   answered at once, before the body is journaled, once the fault is known
//!   ([`IngestConfig::journal`]);
//! - `500 {"error":"journal accept failed: ..","kind":<label>}` when the commit failed otherwise.
//!
//! ```text
//! curl -sS -H "Authorization: Bearer $TOKEN" \
//!   -F haproxy.cfg=@render/haproxy.cfg -F maps/hosts.map=@render/maps/hosts.map \
//!   -F ssl/site.pem=@render/ssl/site.pem -F ca/root.pem=@render/ca/root.pem \
//!   http://haptic:8443/v1/renders
//! tar -C render -cf - . | curl -sS -H "Authorization: Bearer $TOKEN" \
//!   -H 'Content-Type: application/x-tar' --data-binary @- http://haptic:8443/v1/renders
//! ```
//!
//! # Effects
//! Reads the Lease (`get`) to name the leader on a follower. The token comes from a Secret
//! ([`read_token`], key `token`). No other cluster access.
//!
//! # Journal records
//! One batch per new render: the blobs and manifest of [`RenderContent::manifest`] plus
//! `template.rendered` (trigger `ingest`), handed to the acceptor as
//! [`Input::Rendered`] with a reply channel, like every other source; the endpoint answers `202`
//! only once the acceptor's commit (`Durability::Immediate`) returned. A duplicate writes nothing.
//!
//! # Failpoints
//! None of its own. The journal's crash points bracket the commit: a crash at
//! `journal::before_commit` loses the render and the client never got a `202` (it retries); at
//! `journal::after_commit` the render is durable but unanswered (a retry is journaled again after
//! a restart, since the duplicate check is in memory).
//!
//! # Metrics
//! The acceptor counts each journaled render in `haptic_renders_total{source="ingest"}`, its
//! events in `haptic_events_published_total`, its commit in
//! `haptic_journal_commit_duration_seconds`. [`IngestStats`] (renders accepted,
//! duplicates, rejected requests, not-leader answers, journal failures) through
//! [`IngestServer::stats`] (not exported on `/metrics` yet).
//!
//! # Cancel safety
//! A request whose client goes away after the commit started still commits (the commit runs in a
//! blocking task); the endpoint then does not remember it as the last render, so a retry of the
//! same render is journaled once more (harmless: the downstream is idempotent by checksum).

mod body;
mod token;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use haptic_journal::{Checksum, Seq};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use serde_json::json;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio::sync::{Mutex, watch};
use tokio_util::sync::CancellationToken;

use crate::core::render::RenderContent;
use crate::dispatch::Leadership;
use crate::dispatch::input::{Input, InputSender, RenderSource, template_rendered};
use body::Refusal;
pub use token::{IngestError, TOKEN_KEY, read_token, read_token_retrying};

/// Default body limit: 64 MiB (a render with large maps and certificate bundles).
pub const DEFAULT_MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

/// The `Retry-After` a follower sends, in seconds (the Lease retry period).
const RETRY_AFTER_SECONDS: &str = "2";

/// How long a follower waits for the Lease when naming the leader; past it answers `null`.
const LEADER_LOOKUP_TIMEOUT: Duration = Duration::from_secs(2);

/// The Lease that names the leader.
#[derive(Clone)]
pub struct LeaseRef {
    /// Client to read the Lease with.
    pub client: kube::Client,
    /// Namespace of the Lease.
    pub namespace: String,
    /// Lease name (`--lease-name`).
    pub name: String,
}

debug_non_exhaustive!(LeaseRef, |x| "namespace" => x.namespace, "name" => x.name);

/// Called once per render the endpoint refuses because the journal is not writable (`507`).
pub type RefusedHook = Arc<dyn Fn() + Send + Sync>;

/// Settings of the ingest endpoint.
#[derive(Clone)]
pub struct IngestConfig {
    /// The bearer token clients must send; `None` = no authentication (the runtime allows that
    /// only behind an explicit insecure flag).
    pub token: Option<String>,
    /// Largest accepted request body, in bytes. Default: [`DEFAULT_MAX_BODY_BYTES`].
    pub max_body_bytes: usize,
    /// The Lease whose `spec.holderIdentity` a follower names; `None` answers `"leader": null`.
    pub lease: Option<LeaseRef>,
    /// The dispatcher whose journal's writability is checked before a render is handed to the
    /// acceptor (a known storage fault answers `507` at once), and what to call for each refused
    /// render (the runtime counts it in `haptic_journal_refused_inputs_total`); `None`: a
    /// storage fault is seen only from the commit's answer.
    pub journal: Option<(crate::dispatch::DispatchHandle, RefusedHook)>,
}

impl IngestConfig {
    /// A config with this token, the default body limit and no Lease.
    #[must_use]
    pub fn new(token: Option<String>) -> Self {
        IngestConfig {
            token,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            lease: None,
            journal: None,
        }
    }

    /// Checks `dispatch`'s journal before each commit and calls `on_refused` for each render
    /// refused for a storage fault (see [`IngestConfig::journal`]).
    #[must_use]
    pub fn journal(
        mut self,
        dispatch: crate::dispatch::DispatchHandle,
        on_refused: RefusedHook,
    ) -> Self {
        self.journal = Some((dispatch, on_refused));
        self
    }

    /// Names the leader from this Lease on followers.
    #[must_use]
    pub fn lease(
        mut self,
        client: kube::Client,
        namespace: impl Into<String>,
        name: impl Into<String>,
    ) -> Self {
        self.lease = Some(LeaseRef {
            client,
            namespace: namespace.into(),
            name: name.into(),
        });
        self
    }

    /// Sets the body limit (bytes, at least 1).
    #[must_use]
    pub fn max_body_bytes(mut self, n: usize) -> Self {
        self.max_body_bytes = n.max(1);
        self
    }
}

impl std::fmt::Debug for IngestConfig {
    // Never print the token (STYLE.md 2.10).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IngestConfig")
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("max_body_bytes", &self.max_body_bytes)
            .field("lease", &self.lease)
            .field("journal", &self.journal.is_some())
            .finish()
    }
}

/// Counters of the endpoint (monotonic since start).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IngestStats {
    /// Renders journaled (`202`, not duplicate).
    pub accepted: u64,
    /// Duplicates answered `202` without journaling.
    pub duplicates: u64,
    /// Requests refused with a 4xx (auth, validation, size, media type).
    pub rejected: u64,
    /// `503` answers on a follower.
    pub not_leader: u64,
    /// Journal commits that failed (`500`), or refused for a storage fault (`507`).
    pub journal_failures: u64,
}

#[derive(Debug, Default)]
struct Counters {
    accepted: AtomicU64,
    duplicates: AtomicU64,
    rejected: AtomicU64,
    not_leader: AtomicU64,
    journal_failures: AtomicU64,
}

/// The last render accepted here.
#[derive(Clone, Copy, Debug)]
struct Latest {
    checksum: Checksum,
    seq: Seq,
}

struct Inner {
    cfg: IngestConfig,
    /// SHA-256 of the token: compared in constant time with the digest of the presented one,
    /// so neither content nor length leaks through timing.
    /// Replaced by [`IngestServer::set_token`] when the Secret rotates.
    token_digest: std::sync::RwLock<Option<[u8; 32]>>,
    /// The acceptor's input channel (the one door into the journal).
    sink: InputSender,
    leadership: watch::Receiver<Leadership>,
    /// Held across the duplicate check and the commit, so two requests never journal one render
    /// twice and `latest` follows the commit order.
    latest: Mutex<Option<Latest>>,
    counters: Counters,
}

/// The ingest endpoint. Cheap to clone (shared state); keep a clone for [`IngestServer::stats`].
#[derive(Clone)]
pub struct IngestServer {
    inner: Arc<Inner>,
}

debug_non_exhaustive!(IngestServer, |x| "cfg" => x.inner.cfg);

impl IngestServer {
    /// An endpoint journaling through the acceptor behind `sink`; only a leader (as `leadership`
    /// says, e.g. [`crate::dispatch::DispatchHandle::leadership`]) takes renders.
    #[must_use]
    pub fn new(
        cfg: IngestConfig,
        sink: InputSender,
        leadership: watch::Receiver<Leadership>,
    ) -> Self {
        let token_digest = cfg.token.as_deref().map(|t| Sha256::digest(t).into());
        IngestServer {
            inner: Arc::new(Inner {
                cfg,
                token_digest: std::sync::RwLock::new(token_digest),
                sink,
                leadership,
                latest: Mutex::new(None),
                counters: Counters::default(),
            }),
        }
    }

    /// Replaces the bearer token (a rotated Secret): requests from now on must present `token`.
    /// Never switches authentication off: `token` is required.
    pub fn set_token(&self, token: &str) {
        let digest: [u8; 32] = Sha256::digest(token).into();
        *self
            .inner
            .token_digest
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(digest);
    }

    /// Serves on `listener` (bound by the caller, e.g. `--ingest-addr`) until `cancel`, then
    /// finishes in-flight requests (a request past its commit still gets its `202`).
    ///
    /// # Errors
    /// I/O errors of the listener.
    ///
    /// # Cancel safety
    /// Use `cancel` to stop; dropping the future drops open connections.
    pub async fn serve(
        listener: tokio::net::TcpListener,
        cfg: IngestConfig,
        sink: InputSender,
        leadership: watch::Receiver<Leadership>,
        cancel: CancellationToken,
    ) -> std::io::Result<()> {
        IngestServer::new(cfg, sink, leadership)
            .run(listener, cancel)
            .await
    }

    /// As [`IngestServer::serve`], on an endpoint built with [`IngestServer::new`].
    ///
    /// # Errors
    /// I/O errors of the listener.
    pub async fn run(
        self,
        listener: tokio::net::TcpListener,
        cancel: CancellationToken,
    ) -> std::io::Result<()> {
        if let Ok(addr) = listener.local_addr() {
            tracing::info!(%addr, auth = self.inner.token_digest.read().map(|d| d.is_some()).unwrap_or(true), "ingest endpoint listening");
        }
        axum::serve(listener, self.router())
            .with_graceful_shutdown(cancel.cancelled_owned())
            .await
    }

    /// The routes, for embedding in another server.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/v1/renders", post(post_render))
            .route("/v1/renders/latest", get(get_latest))
            .layer(DefaultBodyLimit::max(self.inner.cfg.max_body_bytes))
            .with_state(self.inner.clone())
    }

    /// The counters.
    #[must_use]
    pub fn stats(&self) -> IngestStats {
        let c = &self.inner.counters;
        IngestStats {
            accepted: c.accepted.load(Ordering::Relaxed),
            duplicates: c.duplicates.load(Ordering::Relaxed),
            rejected: c.rejected.load(Ordering::Relaxed),
            not_leader: c.not_leader.load(Ordering::Relaxed),
            journal_failures: c.journal_failures.load(Ordering::Relaxed),
        }
    }
}

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

async fn post_render(State(inner): State<Arc<Inner>>, req: Request) -> Response {
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

async fn get_latest(State(inner): State<Arc<Inner>>, headers: HeaderMap) -> Response {
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
