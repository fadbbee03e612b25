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
mod handlers;
mod token;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use haptic_journal::{Checksum, Seq};
use sha2::{Digest, Sha256};
use tokio::sync::{Mutex, watch};
use tokio_util::sync::CancellationToken;

use crate::dispatch::Leadership;
use crate::dispatch::input::InputSender;
pub use token::{IngestError, TOKEN_KEY, read_token, read_token_retrying};

/// Default body limit: 64 MiB (a render with large maps and certificate bundles).
pub const DEFAULT_MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

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

/// The atomics behind [`IngestStats`].
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

/// What every request shares (the state of the routes).
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
            .route("/v1/renders", post(handlers::post_render))
            .route("/v1/renders/latest", get(handlers::get_latest))
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
