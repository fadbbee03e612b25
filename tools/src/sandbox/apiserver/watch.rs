//! WATCH streams (apiserver-emulation.md §8): chunked JSON lines, replay from a resourceVersion out
//! of the bounded history, live events, bookmarks only when asked, `timeoutSeconds`, and for a
//! too-old resourceVersion a 200 stream whose only event is an `ERROR` with code 410 (an HTTP 410
//! would make kube's watcher retry the same resourceVersion forever).

use super::resources::ResourceType;
use super::select::Selector;
use super::shared::{Body, OpenWatch, Shared};
use super::store::State;
use super::table;
use futures::StreamExt as _;
use hyper::body::{Bytes, Frame};
use serde_json::{Value, json};
use std::collections::HashSet;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Interval between bookmarks when `allowWatchBookmarks=true`.
const BOOKMARK_EVERY: Duration = Duration::from_secs(5);
/// Lines buffered per stream before the producer waits for the client.
const STREAM_BUFFER_LINES: usize = 256;

/// Parameters of one watch request.
#[derive(Debug, Clone)]
pub struct WatchParams {
    /// Namespace, or all.
    pub ns: Option<String>,
    /// Label/field selector.
    pub selector: Selector,
    /// `resourceVersion`; `None` or 0 starts with the current objects as ADDED.
    pub from_rv: Option<u64>,
    /// `allowWatchBookmarks=true`.
    pub bookmarks: bool,
    /// `sendInitialEvents=true`: ADDED for every object, then the initial-events-end bookmark.
    pub send_initial: bool,
    /// `timeoutSeconds`.
    pub timeout: Option<Duration>,
    /// Events carry `Table`s (kubectl `get --watch`).
    pub table: bool,
    /// Events carry `PartialObjectMetadata` (metadata watchers).
    pub metadata_only: bool,
}

fn line(v: &Value) -> Bytes {
    let mut s = v.to_string();
    s.push('\n');
    Bytes::from(s)
}

fn expired(rv: u64, current: u64) -> Value {
    json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": format!("too old resource version: {rv} ({current})"),
        "reason": "Expired", "code": 410}})
}

struct Stream {
    rt: ResourceType,
    p: WatchParams,
    seen: HashSet<(String, String)>,
    first: bool,
}

impl Stream {
    fn event(&mut self, type_: &str, obj: &Value, rv: &str) -> Option<Value> {
        let ns = obj["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        let name = obj["metadata"]["name"].as_str().unwrap_or("").to_owned();
        let id = (ns, name);
        let out = State::out(&self.rt, obj);
        let matches = self.p.selector.matches(&out);
        let was = self.seen.contains(&id);
        let everything = self.p.selector == Selector::default();
        let t = match (type_, matches, was) {
            _ if everything => type_,
            ("DELETED", m, w) if m || w => "DELETED",
            ("DELETED", _, _) => return None,
            (_, true, true) => type_,
            (_, true, false) => "ADDED",
            (_, false, true) => "DELETED",
            (_, false, false) => return None,
        };
        if t == "DELETED" {
            self.seen.remove(&id);
        } else {
            self.seen.insert(id);
        }
        let object = if self.p.table {
            let first = std::mem::replace(&mut self.first, false);
            table::table(&self.rt, &[out], rv, first)
        } else if self.p.metadata_only {
            table::partial(&out)
        } else {
            out
        };
        Some(json!({"type": t, "object": object}))
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Value {
        let mut meta = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        json!({"type": "BOOKMARK", "object": {"kind": self.rt.kind, "apiVersion": self.rt.api_version(), "metadata": meta}})
    }
}

/// Starts a watch stream and returns its (chunked) body.
pub fn start(
    sh: &Arc<Shared>,
    rt: ResourceType,
    path: &str,
    p: WatchParams,
    end_after_replay: bool,
) -> Body {
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(STREAM_BUFFER_LINES);
    let end = sh.shutdown.child_token();
    let id = sh.register_watch(OpenWatch {
        path: path.to_owned(),
        end: end.clone(),
    });
    let sh2 = Arc::clone(sh);
    sh.tracker.spawn(async move {
        produce(&sh2, rt, p, tx, end, end_after_replay).await;
        sh2.unregister_watch(id);
    });
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx)
        .map(|b| Ok::<_, Infallible>(Frame::data(b)));
    http_body_util::BodyExt::boxed(http_body_util::StreamBody::new(stream))
}

/// First step under the lock: the initial ADDED events (or none when resuming from an RV) and the
/// resourceVersion to continue from; `None` when the RV is too old (the 410 event is in `out`).
fn begin(sh: &Shared, s: &mut Stream, out: &mut Vec<Value>) -> Option<u64> {
    let state = sh.state.lock().ok()?;
    let ns = s.p.ns.clone();
    let current = state.select(&s.rt, ns.as_deref(), &Selector::default());
    match s.p.from_rv.filter(|rv| *rv > 0 && !s.p.send_initial) {
        Some(rv) if rv < state.floor => {
            out.push(expired(rv, state.rv));
            None
        }
        Some(rv) => {
            for o in current.iter().filter(|o| s.p.selector.matches(o)) {
                let m = &o["metadata"];
                s.seen.insert((
                    m["namespace"].as_str().unwrap_or("").into(),
                    m["name"].as_str().unwrap_or("").into(),
                ));
            }
            Some(rv)
        }
        None => {
            let rvs = state.rv.to_string();
            for o in &current {
                if let Some(ev) = s.event("ADDED", o, &rvs) {
                    out.push(ev);
                }
            }
            if s.p.send_initial {
                out.push(s.bookmark(state.rv, true));
            }
            Some(state.rv)
        }
    }
}

/// Collects the history events after `last` under the lock; `None` when `last` fell out of the
/// history (the 410 event is in `out`).
fn poll(sh: &Shared, s: &mut Stream, last: u64, out: &mut Vec<Value>) -> Option<u64> {
    let state = sh.state.lock().ok()?;
    if last < state.floor {
        out.push(expired(last, state.rv));
        return None;
    }
    let key = s.rt.key();
    let ns = s.p.ns.clone();
    // The history is ordered by resourceVersion.
    let start = state.history.partition_point(|e| e.rv <= last);
    let events: Vec<(&'static str, Value, u64)> = state
        .history
        .range(start..)
        .filter(|e| e.key == key)
        .filter(|e| {
            ns.as_deref()
                .is_none_or(|n| e.object["metadata"]["namespace"].as_str() == Some(n))
        })
        .map(|e| (e.type_, e.object.clone(), e.rv))
        .collect();
    let next = last.max(state.rv);
    drop(state);
    for (t, o, rv) in events {
        if let Some(ev) = s.event(t, &o, &rv.to_string()) {
            out.push(ev);
        }
    }
    Some(next)
}

async fn produce(
    sh: &Shared,
    rt: ResourceType,
    p: WatchParams,
    tx: tokio::sync::mpsc::Sender<Bytes>,
    end: CancellationToken,
    end_after_replay: bool,
) {
    let deadline = p.timeout.map(|t| tokio::time::Instant::now() + t);
    let mut rv_rx = sh.rv_rx.clone();
    rv_rx.borrow_and_update();
    let mut s = Stream {
        rt,
        p,
        seen: HashSet::new(),
        first: true,
    };
    let mut out = Vec::new();
    let mut last = begin(sh, &mut s, &mut out);
    let mut next_bookmark = tokio::time::Instant::now() + BOOKMARK_EVERY;
    loop {
        rv_rx.borrow_and_update();
        if let Some(l) = last {
            last = poll(sh, &mut s, l, &mut out);
        }
        for v in out.drain(..) {
            if tx.send(line(&v)).await.is_err() {
                return;
            }
        }
        let Some(l) = last else { return };
        if end_after_replay {
            return;
        }
        let sleep_deadline =
            deadline.unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(86_400));
        tokio::select! {
            changed = rv_rx.changed() => if changed.is_err() { return },
            () = tokio::time::sleep_until(sleep_deadline) => return,
            () = end.cancelled() => return,
            () = tx.closed() => return,
            () = tokio::time::sleep_until(next_bookmark), if s.p.bookmarks => {
                next_bookmark = tokio::time::Instant::now() + BOOKMARK_EVERY;
                out.push(s.bookmark(l, false));
            }
        }
    }
}
