//! Servers at runtime: the commands a configuration `PUT` of runtime fields becomes, and
//! `/v3/services/haproxy/runtime/backends/{parent_name}/servers[/{name}]` (observed-v3.4.md:
//! `PUT {"admin_state": "ready", "weight": 42}` 200 with the runtime object, configuration
//! version unchanged; a bad `admin_state` 422, weight 999 500, an unknown server 404 `no data for
//! b/x: not found`).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Map, Value, json};

use super::super::config::text::read_sections;
use super::super::{PodCore, error};
use super::has_runtime_api;

/// Runtime fields (dataplaneapi `runtimeSupportedServerFields`).
const RUNTIME_FIELDS: &[&str] = &[
    "weight",
    "address",
    "port",
    "maintenance",
    "agent-check",
    "agent-addr",
    "agent-send",
    "health_check_port",
];

/// A stand-in's runtime state of its servers (`backend/server` → admin state, weight), reset by
/// a successful reload as HAProxy's is.
pub(crate) type RuntimeServers = std::sync::Mutex<BTreeMap<String, (String, Option<i64>)>>;

/// The runtime commands that apply a server change when every changed field is a runtime field;
/// `None` when the change needs a reload.
pub(crate) fn server_commands(
    backend: &str,
    old: &Map<String, Value>,
    new: &Map<String, Value>,
) -> Option<Vec<String>> {
    let keys: std::collections::BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    let changed: Vec<&String> = keys
        .into_iter()
        .filter(|k| old.get(*k) != new.get(*k))
        .collect();
    if changed.is_empty()
        || changed
            .iter()
            .any(|k| !RUNTIME_FIELDS.contains(&k.as_str()))
    {
        return None;
    }
    let target = format!("{backend}/{}", new.get("name")?.as_str()?);
    let mut cmds = Vec::new();
    let mut addr_done = false;
    for k in changed {
        match k.as_str() {
            "weight" => cmds.push(format!(
                "set server {target} weight {}",
                new.get("weight")?.as_i64()?
            )),
            "address" | "port" if !addr_done => {
                addr_done = true;
                let addr = new.get("address")?.as_str()?;
                match new.get("port").and_then(Value::as_i64) {
                    Some(p) => cmds.push(format!("set server {target} addr {addr} port {p}")),
                    None => cmds.push(format!("set server {target} addr {addr}")),
                }
            }
            "address" | "port" => {}
            "maintenance" => {
                let maint = new.get("maintenance").and_then(Value::as_str) == Some("enabled");
                let state = if maint { "maint" } else { "ready" };
                cmds.push(format!("set server {target} state {state}"));
            }
            "health_check_port" => cmds.push(format!(
                "set server {target} check-port {}",
                new.get("health_check_port")?.as_i64()?
            )),
            "agent-check" => match new.get("agent-check").and_then(Value::as_str) {
                Some("enabled") => cmds.push(format!("enable agent {target}")),
                Some("disabled") => cmds.push(format!("disable agent {target}")),
                _ => {}
            },
            "agent-addr" => cmds.push(format!(
                "set server {target} agent-addr {}",
                new.get("agent-addr")?.as_str()?
            )),
            "agent-send" => cmds.push(format!(
                "set server {target} agent-send {}",
                new.get("agent-send")?.as_str()?
            )),
            _ => return None,
        }
    }
    Some(cmds)
}

/// Whether HAProxy took a `set server` command (it answers nothing, or a line on addr changes).
fn taken(out: &str) -> bool {
    let out = out.trim();
    out.is_empty()
        || out.starts_with("IP changed")
        || out.contains("no need to change")
        || out.starts_with("port changed")
}

impl PodCore {
    /// Sends the runtime commands of a server change (`text`: the configuration that holds the
    /// runtime API); `Err` when there is none or HAProxy refuses one (the caller reloads).
    pub(crate) async fn runtime_server_update(
        &self,
        text: &str,
        cmds: &[String],
    ) -> Result<(), String> {
        if !has_runtime_api(text) {
            return Err("no runtime API (no admin stats socket)".into());
        }
        if self.stand_in {
            return Ok(());
        }
        for c in cmds {
            let out = self.runtime_cmd(c).await?;
            if !taken(&out) {
                return Err(format!("{c}: {}", out.trim()));
            }
        }
        Ok(())
    }

    /// The `runtime_server` model of `backend/name`, as HAProxy has it (`None`: no such server).
    async fn runtime_server(&self, backend: &str, name: &str) -> Result<Option<Value>, String> {
        if self.stand_in {
            let loaded = self.cfg.lock().await.loaded.config.clone();
            let Some((i, line)) = read_sections(&loaded)
                .into_iter()
                .filter(|s| s.kind == "backend" && s.name == backend)
                .flat_map(|s| s.lines)
                .filter(|l| l[0] == "server")
                .enumerate()
                .find(|(_, l)| l.get(1).is_some_and(|n| n == name))
            else {
                return Ok(None);
            };
            let (host, port) = line.get(2).and_then(|a| a.rsplit_once(':')).map_or(
                (line.get(2).cloned().unwrap_or_default(), None),
                |(h, p)| (h.to_owned(), p.parse::<i64>().ok()),
            );
            let key = format!("{backend}/{name}");
            let admin = self
                .runtime_servers
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&key)
                .map_or_else(|| "ready".to_owned(), |(a, _)| a.clone());
            return Ok(Some(json!({
                "id": (i + 1).to_string(), "name": name, "address": host, "port": port,
                "admin_state": admin, "operational_state": "up",
            })));
        }
        let out = self
            .runtime_cmd(&format!("show servers state {backend}"))
            .await?;
        Ok(out.lines().find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() > 18 && f[3] == name).then(|| {
                let admin: u32 = f[6].parse().unwrap_or(0);
                let admin_state = if admin & 0x07 != 0 {
                    "maint"
                } else if admin & 0x08 != 0 {
                    "drain"
                } else {
                    "ready"
                };
                let op = match f[5] {
                    "0" => "down",
                    "3" => "stopping",
                    _ => "up",
                };
                json!({
                    "id": f[2], "name": f[3], "address": f[4], "port": f[18].parse::<i64>().ok(),
                    "admin_state": admin_state, "operational_state": op,
                })
            })
        }))
    }
}

pub(super) fn routes() -> Router<Arc<PodCore>> {
    Router::new().route(
        "/v3/services/haproxy/runtime/backends/{parent}/servers/{name}",
        get(get_server).put(put_server),
    )
}

fn no_data(backend: &str, name: &str) -> Response {
    error(404, format!("no data for {backend}/{name}: not found"))
}

async fn get_server(
    State(core): State<Arc<PodCore>>,
    Path((backend, name)): Path<(String, String)>,
) -> Response {
    match core.runtime_server(&backend, &name).await {
        Ok(Some(v)) => axum::Json(v).into_response(),
        Ok(None) => no_data(&backend, &name),
        Err(e) => error(500, e),
    }
}

async fn put_server(
    State(core): State<Arc<PodCore>>,
    Path((backend, name)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> Response {
    let Ok(v) = serde_json::from_slice::<Value>(&body) else {
        return error(400, "invalid JSON body");
    };
    let admin = v.get("admin_state").and_then(Value::as_str);
    if let Some(a) = admin
        && !matches!(a, "ready" | "drain" | "maint")
    {
        return error(
            422,
            format!("admin_state in body should be one of [ready drain maint], not {a}"),
        );
    }
    let weight = v.get("weight").and_then(Value::as_i64);
    match core.runtime_server(&backend, &name).await {
        Ok(Some(_)) => {}
        Ok(None) => return no_data(&backend, &name),
        Err(e) => return error(500, e),
    }
    let target = format!("{backend}/{name}");
    if core.stand_in {
        if let Some(w) = weight
            && !(0..=256).contains(&w)
        {
            return error(500, "Immediate weight must be between 0 and 256.");
        }
        let mut rs = core
            .runtime_servers
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let e = rs.entry(target).or_insert_with(|| ("ready".into(), None));
        if let Some(a) = admin {
            e.0 = a.to_owned();
        }
        if weight.is_some() {
            e.1 = weight;
        }
    } else {
        let mut cmds = Vec::new();
        if let Some(a) = admin {
            cmds.push(format!("set server {target} state {a}"));
        }
        if let Some(w) = weight {
            cmds.push(format!("set weight {target} {w}"));
        }
        for c in cmds {
            match core.runtime_cmd(&c).await {
                Ok(out) if taken(&out) => {}
                Ok(out) => return error(500, out.trim().to_owned()),
                Err(e) => return error(500, e),
            }
        }
    }
    get_server(State(core), Path((backend, name))).await
}
