//! What every connection shares (the cluster, the fault script, the request log, the open watch
//! streams) and the response helpers: below the front end (`server`), the REST routes
//! (`routes`) and the watch streams (`watch`), which all use it.

use super::faults::{ArmedFault, Fault};
use super::status::ApiError;
use super::store::State;
use crate::sandbox::control::RequestRecord;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper::{Response, StatusCode};
use serde_json::Value;
use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Response body: a full buffer or a watch stream.
pub type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// State shared by every connection.
#[derive(Debug)]
pub struct Shared {
    /// The cluster.
    pub state: Mutex<State>,
    /// Latest resourceVersion; watch streams wait on it.
    pub rv_rx: tokio::sync::watch::Receiver<u64>,
    /// Fault script, in the order added.
    pub faults: Mutex<Vec<ArmedFault>>,
    /// Every request seen (but `/_sandbox/` ones).
    /// Entries carry a sequence number so a status lands on its own request even after a reset.
    pub log: Mutex<Vec<(u64, RequestRecord)>>,
    pub(super) next_request: AtomicU64,
    /// Open watch streams by id.
    pub watches: Mutex<HashMap<u64, OpenWatch>>,
    next_watch: AtomicU64,
    /// Cancelled on shutdown: ends the accept loop, connections and watch streams.
    pub shutdown: CancellationToken,
    /// Connection and watch tasks, awaited on shutdown.
    pub tracker: TaskTracker,
    /// Bound address.
    pub addr: SocketAddr,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Shared {
    /// A fresh cluster bound to `addr`.
    pub fn new(addr: SocketAddr) -> Self {
        let (tx, rx) = tokio::sync::watch::channel(0);
        Self {
            state: Mutex::new(State::new(tx)),
            rv_rx: rx,
            faults: Mutex::new(Vec::new()),
            log: Mutex::new(Vec::new()),
            next_request: AtomicU64::new(1),
            watches: Mutex::new(HashMap::new()),
            next_watch: AtomicU64::new(1),
            shutdown: CancellationToken::new(),
            tracker: TaskTracker::new(),
            addr,
        }
    }

    /// Registers an open watch; returns its id.
    pub fn register_watch(&self, w: OpenWatch) -> u64 {
        let id = self.next_watch.fetch_add(1, Ordering::Relaxed);
        lock(&self.watches).insert(id, w);
        id
    }

    /// Forgets a finished watch.
    pub fn unregister_watch(&self, id: u64) {
        lock(&self.watches).remove(&id);
    }

    /// Adds a fault; an `end_watch` fault ends matching open streams at once.
    ///
    /// # Errors
    /// A message naming the field when a regex does not compile or the fault is invalid.
    /// Returns how many faults are armed afterwards.
    pub fn add_fault(&self, f: Fault) -> Result<usize, String> {
        let mut armed = ArmedFault::new(f)?;
        if armed.spec.end_watch {
            let watches = lock(&self.watches);
            let mut ids: Vec<&u64> = watches.keys().collect();
            ids.sort();
            for id in ids {
                let w = &watches[id];
                if armed.matches("GET", &w.path) {
                    w.end.cancel();
                    armed.consume();
                    if armed.remaining == Some(0) {
                        break;
                    }
                }
            }
            drop(watches);
            let future_watches = armed.remaining.is_some_and(|r| r > 0);
            if !future_watches && !armed.acts_on_requests() {
                return Ok(lock(&self.faults).len());
            }
        }
        let mut faults = lock(&self.faults);
        if !armed.spent() {
            faults.push(armed);
        }
        Ok(faults.len())
    }

    /// Removes every fault.
    pub fn clear_faults(&self) {
        lock(&self.faults).clear();
    }

    /// The first fault matching a request, consumed.
    pub(super) fn take_fault(&self, method: &str, path: &str) -> Option<Fault> {
        let mut faults = lock(&self.faults);
        let f = faults
            .iter_mut()
            .find(|f| f.acts_on_requests() && f.matches(method, path))?;
        f.consume();
        let spec = f.spec.clone();
        faults.retain(|f| !f.spent());
        Some(spec)
    }

    /// Whether a new watch on `path` must end after its replay (an `end_watch` fault with times left).
    pub(super) fn take_watch_end(&self, path: &str) -> bool {
        let mut faults = lock(&self.faults);
        match faults.iter_mut().find(|f| {
            f.spec.end_watch && f.remaining.is_some_and(|r| r > 0) && f.matches("GET", path)
        }) {
            Some(f) => {
                f.consume();
                faults.retain(|f| !f.spent());
                true
            }
            None => false,
        }
    }

    /// A copy of the request log.
    pub fn requests(&self) -> Vec<RequestRecord> {
        lock(&self.log).iter().map(|(_, r)| r.clone()).collect()
    }

    /// Empties the request log.
    pub fn clear_requests(&self) {
        lock(&self.log).clear();
    }
}

/// An open watch stream that `end_watch` faults can end.
#[derive(Debug, Clone)]
pub struct OpenWatch {
    /// Request path.
    pub path: String,
    /// Cancelled to end the stream.
    pub end: CancellationToken,
}

pub(super) fn full(status: u16, content_type: &str, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(Full::new(body.into()).boxed());
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if let Ok(v) = content_type.parse() {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    r
}

pub(super) fn json_resp(status: u16, v: &Value) -> Response<Body> {
    full(status, "application/json", v.to_string())
}

pub(super) fn error_resp(e: &ApiError) -> Response<Body> {
    let mut r = json_resp(e.code, &e.to_status());
    if let Some(s) = e.details.retry_after_s
        && let Ok(v) = s.to_string().parse()
    {
        r.headers_mut().insert(hyper::header::RETRY_AFTER, v);
    }
    r
}
