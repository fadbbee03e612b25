//! HTTP/1.1 front end: connection handling, the request log, faults, `/_sandbox/` control paths and
//! routing of the Kubernetes REST paths to the store.

use super::faults::{ArmedFault, Fault};
use super::shared::{Body, Shared, error_resp, json_resp, lock};
use super::status::ApiError;
use super::store;
use crate::sandbox::control::RequestRecord;
use http_body_util::{BodyExt as _, Limited};
use hyper::body::Incoming;
use hyper::{Request, Response};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

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
