//! The reload agent (dataplaneapi `haproxy/reload_agent.go`; observed-v3.4.md):
//!
//! - writes schedule a reload; every write until the next tick of the reload delay gets the same
//!   id, `YYYY-MM-DD-N` with N counting from 0 over the endpoint's life;
//! - `GET reloads/{id}`: a queued one answers `{"status": "in_progress"}` without an `id` (the
//!   agent's quirk: it answers the id of the running reload, which is none yet); the running one
//!   `{id, status: in_progress}`; a failed one its record; the last success its record
//!   `{id, reload_timestamp, response, status: succeeded}`; an id older than the last success,
//!   even one never issued, `{id, status: succeeded}`; any other 404; a malformed id 400;
//! - a failed reload copies the last-known-good file back over `haproxy.cfg`; the API's in-memory
//!   configuration and version keep the failed one.
//!
//! `GET reloads` lists every reload of the endpoint's life (the real agent lists the failed
//! ones, the last success and the pending one): the test kit counts reloads from it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::json;

use super::hooks::ReloadFaultKind;
use super::{CfgState, PodCore, error};
use crate::sandbox::pods::haproxy;

/// A reload as `GET /v3/services/haproxy/reloads/{id}` reports it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ReloadRecord {
    id: String,
    status: String,
    response: String,
    reload_timestamp: i64,
}

/// The agent's memory of reloads.
#[derive(Debug, Default)]
pub(crate) struct ReloadAgent {
    /// The number of the next id.
    index: u64,
    /// The queued reload.
    next: Option<String>,
    /// The running reload.
    current: Option<String>,
    /// Failed reloads by id.
    failed: BTreeMap<String, ReloadRecord>,
    /// The last successful one.
    last_success: Option<ReloadRecord>,
    /// Every reload of the endpoint's life, in order (`GET reloads`).
    history: Vec<ReloadRecord>,
}

/// `YYYY-MM-DD-N` → (date, N).
fn parse_id(id: &str) -> Option<(jiff::civil::Date, u64)> {
    let (date, n) = id.rsplit_once('-')?;
    Some((date.parse().ok()?, n.parse().ok()?))
}

impl ReloadAgent {
    fn get(&self, id: &str) -> Option<serde_json::Value> {
        if self.current.as_deref() == Some(id) {
            return Some(json!({"id": id, "status": "in_progress"}));
        }
        if self.next.as_deref() == Some(id) {
            // reload_agent.go answers the running reload's id here: none.
            return Some(json!({"status": "in_progress"}));
        }
        if let Some(r) = self.failed.get(id) {
            return serde_json::to_value(r).ok();
        }
        let last = self.last_success.as_ref()?;
        if last.id == id {
            return serde_json::to_value(last).ok();
        }
        let (s_date, s_index) = parse_id(&last.id)?;
        let (g_date, g_index) = parse_id(id)?;
        (g_date < s_date || s_index > g_index).then(|| json!({"id": id, "status": "succeeded"}))
    }
}

impl PodCore {
    /// Schedules a batched reload and returns its id (writes before the next tick share it).
    pub(crate) fn schedule_reload(&self) -> String {
        let mut ra = self.reloads.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(id) = &ra.next {
            return id.clone();
        }
        let date = jiff::Zoned::now().date();
        let id = format!("{date}-{}", ra.index);
        ra.index += 1;
        ra.next = Some(id.clone());
        id
    }

    fn finish_reload(&self, id: &str, res: &Result<(), String>) {
        let mut ra = self.reloads.lock().unwrap_or_else(|p| p.into_inner());
        let r = ReloadRecord {
            id: id.to_owned(),
            status: if res.is_ok() { "succeeded" } else { "failed" }.into(),
            response: res.clone().err().unwrap_or_default(),
            reload_timestamp: jiff::Timestamp::now().as_second(),
        };
        ra.current = None;
        ra.history.push(r.clone());
        if res.is_ok() {
            ra.last_success = Some(r);
        } else {
            ra.failed.insert(id.to_owned(), r);
        }
    }

    fn take_reload_fault(&self) -> Option<(ReloadFaultKind, u64)> {
        let mut f = self.faults.lock().unwrap_or_else(|p| p.into_inner());
        let i = f
            .reloads
            .iter()
            .position(|r| r.times == 0 || r.used < r.times)?;
        let r = &mut f.reloads[i];
        r.used += 1;
        let out = (r.kind, r.delay_ms);
        if r.times != 0 && r.used >= r.times {
            f.reloads.remove(i);
        }
        Some(out)
    }

    /// Reloads HAProxy now (the caller holds the config lock): `force_reload`, the hooks.
    pub(crate) async fn reload_locked(&self, st: &mut CfgState) -> Result<(), String> {
        let fault = self.take_reload_fault();
        if let Some((_, delay)) = fault
            && delay > 0
        {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        self.reload_with_fault(st, fault).await
    }

    async fn reload_with_fault(
        &self,
        st: &mut CfgState,
        fault: Option<(ReloadFaultKind, u64)>,
    ) -> Result<(), String> {
        let current = self.read_config();
        let scripted_fail = matches!(fault, Some((ReloadFaultKind::Fail, _)));
        let res = if self.stand_in {
            if scripted_fail {
                Err("[ALERT] haptic-sandbox: scripted reload failure (stand-in pod)".to_string())
            } else {
                Ok(())
            }
        } else {
            if scripted_fail {
                // Make HAProxy itself reject this reload.
                let bad = format!("{current}    haptic-sandbox-scripted-reload-failure\n");
                self.write_config(&bad).map_err(|e| e.to_string())?;
            }
            let r = match self.master.lock().await.as_ref() {
                Some(_) => haproxy::reload(&self.fs, &self.view).await,
                None => Err("HAProxy is not running".to_string()),
            };
            if scripted_fail {
                self.write_config(&current).map_err(|e| e.to_string())?;
                r.and(Err("scripted reload failure did not fail".into()))
            } else {
                r
            }
        };
        match &res {
            Ok(()) => {
                if self.stand_in {
                    st.loaded =
                        super::runtime::Loaded::capture(&self.fs.etc, &super::strip_meta(&current));
                    self.runtime_servers
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .clear();
                }
                st.lkg = current;
            }
            Err(_) => {
                let _ = self.write_config(&st.lkg);
            }
        }
        res
    }

    /// The reload agent: every reload delay, performs the pending batched reload.
    pub(crate) async fn reload_agent(self: Arc<Self>) {
        loop {
            tokio::select! {
                _ = self.cancel.cancelled() => return,
                _ = tokio::time::sleep(self.settings.reload_delay) => {}
            }
            let pending = {
                let ra = self.reloads.lock().unwrap_or_else(|p| p.into_inner());
                ra.next.clone()
            };
            let Some(id) = pending else { continue };
            // A slow reload waits without the config lock: writes meanwhile join this batch.
            let fault = self.take_reload_fault();
            if let Some((_, delay)) = fault
                && delay > 0
            {
                tokio::select! {
                    _ = self.cancel.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_millis(delay)) => {}
                }
            }
            let mut st = self.cfg.lock().await;
            // Writes from here on get a new id.
            {
                let mut ra = self.reloads.lock().unwrap_or_else(|p| p.into_inner());
                ra.next = None;
                ra.current = Some(id.clone());
            }
            let res = self.reload_with_fault(&mut st, fault).await;
            drop(st);
            self.finish_reload(&id, &res);
        }
    }
}

/// `GET /v3/services/haproxy/reloads`: every reload of this endpoint, then the pending ones.
pub(super) async fn list_reloads(State(core): State<Arc<PodCore>>) -> Response {
    let ra = core.reloads.lock().unwrap_or_else(|p| p.into_inner());
    let mut out: Vec<serde_json::Value> = ra
        .history
        .iter()
        .filter_map(|r| serde_json::to_value(r).ok())
        .collect();
    for id in ra.current.iter().chain(&ra.next) {
        out.push(json!({"id": id, "status": "in_progress"}));
    }
    axum::Json(out).into_response()
}

/// `GET /v3/services/haproxy/reloads/{id}` (module doc).
pub(super) async fn get_reload(
    State(core): State<Arc<PodCore>>,
    Path(id): Path<String>,
) -> Response {
    if parse_id(&id).is_none() {
        return error(
            400,
            format!("invalid reload id {id}: expected YYYY-MM-DD-N"),
        );
    }
    let ra = core.reloads.lock().unwrap_or_else(|p| p.into_inner());
    match ra.get(&id) {
        Some(v) => axum::Json(v).into_response(),
        None => error(404, format!("reload {id} not found")),
    }
}
