//! HTTP/1.1 front end: connection handling, the request log, faults, `/_sandbox/` control paths and
//! routing of the Kubernetes REST paths to the store.

use super::faults::{ArmedFault, Fault};
use super::status::ApiError;
use super::store::{self, State};
use super::watch::OpenWatch;
use crate::sandbox::control::RequestRecord;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
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
    next_request: AtomicU64,
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
    fn take_fault(&self, method: &str, path: &str) -> Option<Fault> {
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

/// Serves connections until shutdown.
pub async fn serve(listener: tokio::net::TcpListener, sh: Arc<Shared>) {
    loop {
        let accepted = tokio::select! {
            () = sh.shutdown.cancelled() => break,
            a = listener.accept() => a,
        };
        let Ok((stream, _)) = accepted else { continue };
        let conn_sh = Arc::clone(&sh);
        sh.tracker.spawn(async move {
            let token = conn_sh.shutdown.clone();
            let svc_sh = Arc::clone(&conn_sh);
            let svc = hyper::service::service_fn(move |req| handle(Arc::clone(&svc_sh), req));
            let conn = hyper::server::conn::http1::Builder::new()
                .keep_alive(true)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), svc);
            tokio::select! {
                _ = conn => {}
                () = token.cancelled() => {}
            }
        });
    }
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

async fn handle(sh: Arc<Shared>, req: Request<Incoming>) -> Result<Response<Body>, std::io::Error> {
    let method = req.method().as_str().to_owned();
    let path = req.uri().path().to_owned();
    let query = req.uri().query().unwrap_or("").to_owned();
    if path.starts_with("/_sandbox/") {
        return Ok(sandbox(&sh, req, &method, &path).await);
    }
    let seq = sh.next_request.fetch_add(1, Ordering::Relaxed);
    lock(&sh.log).push((
        seq,
        RequestRecord {
            method: method.clone(),
            path: path.clone(),
            query: query.clone(),
            status: 0,
            at: jiff::Timestamp::now().to_string(),
            user_agent: req
                .headers()
                .get(hyper::header::USER_AGENT)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned(),
        },
    ));
    let set_status = |status: u16| {
        let mut log = lock(&sh.log);
        if let Some((_, r)) = log.iter_mut().rev().find(|(s, _)| *s == seq) {
            r.status = status;
        }
    };
    let mut drop_answer = false;
    if let Some(f) = sh.take_fault(&method, &path) {
        drop_answer = f.drop_after_apply;
        if let Some(d) = f.delay_ms.filter(|d| *d > 0) {
            tokio::time::sleep(Duration::from_millis(d)).await;
        }
        if f.drop {
            return Err(std::io::Error::other(
                "connection dropped by a sandbox fault",
            ));
        }
        if let Some(code) = f.status {
            let mut e = ApiError::from_code(code);
            e.details.retry_after_s = f.retry_after_s;
            set_status(code);
            return Ok(error_resp(&e));
        }
    }
    let resp = match super::routes::route(&sh, req, &method, &path, &query).await {
        Ok(r) => r,
        Err(e) => error_resp(&e),
    };
    if drop_answer {
        // Applied; the answer is lost (the log keeps status 0: the client got none).
        return Err(std::io::Error::other(
            "answer dropped by a sandbox fault after the request was applied",
        ));
    }
    set_status(resp.status().as_u16());
    Ok(resp)
}

async fn sandbox(sh: &Shared, req: Request<Incoming>, method: &str, path: &str) -> Response<Body> {
    let body = match Limited::new(req.into_body(), store::MAX_REQUEST_BYTES)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            return error_resp(&ApiError::new(
                413,
                "RequestEntityTooLarge",
                "body too large",
            ));
        }
    };
    match (method, path) {
        ("POST", "/_sandbox/faults") => match crate::sandbox::control::parse_json::<Fault>(&body) {
            Ok(f) => match sh.add_fault(f) {
                Ok(n) => json_resp(201, &json!({"ok": true, "faults": n})),
                Err(e) => error_resp(&ApiError::bad_request(e)),
            },
            Err(e) => error_resp(&ApiError::bad_request(format!("invalid fault: {e}"))),
        },
        ("GET", "/_sandbox/faults") => {
            let list: Vec<Value> = lock(&sh.faults).iter().map(ArmedFault::listed).collect();
            json_resp(200, &json!(list))
        }
        ("DELETE", "/_sandbox/faults") => {
            sh.clear_faults();
            json_resp(200, &json!({"ok": true}))
        }
        ("GET", "/_sandbox/requests") => json_resp(200, &json!(sh.requests())),
        ("DELETE", "/_sandbox/requests") => {
            sh.clear_requests();
            json_resp(200, &json!({"ok": true}))
        }
        ("POST", "/_sandbox/compact") => {
            lock(&sh.state).compact();
            json_resp(200, &json!({"ok": true}))
        }
        _ => error_resp(&ApiError::no_route(path)),
    }
}
