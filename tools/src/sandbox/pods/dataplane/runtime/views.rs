//! What HAProxy has loaded, as the spec's runtime endpoints answer it (not what is on disk: a
//! file written and not reloaded, or whose reload failed, shows its old content here):
//!
//! ```text
//!  GET runtime/maps[?include_unmanaged=true]   [{id, file, storage_name, description}]  show map
//!  GET runtime/maps/{name}                     one of them, 404 when not loaded
//!  GET runtime/maps/{parent_name}/entries      [{id, key, value}]                        show map <file>
//!  GET runtime/ssl_certs                       [{storage_name, file, description}]       show ssl cert
//!  GET runtime/ssl_certs/{name}                ssl_certificate (serial, subject, ...)    show ssl cert <file>
//!  GET runtime/ssl_crt_lists                   [{file}]                                  show ssl crt-list
//!  GET runtime/ssl_crt_lists/entries?name=F    [{file, line_number, ssl_bind_config,
//!                                                sni_filter}]                            show ssl crt-list -n F
//! ```
//!
//! Names: a storage name (`hosts.map`, `site.pem`) stands for the file in the pod's storage
//! directory; a path (`/etc/haproxy/...`) for itself. Paths answered are pod paths.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};

use super::super::{PodCore, certinfo, error};
use super::Loaded;

pub(super) fn routes() -> Router<Arc<PodCore>> {
    let base = "/v3/services/haproxy/runtime";
    Router::new()
        .route(&format!("{base}/maps"), get(maps))
        .route(&format!("{base}/maps/{{name}}"), get(one_map))
        .route(&format!("{base}/maps/{{name}}/entries"), get(map_entries))
        .route(&format!("{base}/ssl_certs"), get(certs))
        .route(&format!("{base}/ssl_certs/{{name}}"), get(one_cert))
        .route(&format!("{base}/ssl_crt_lists"), get(crt_lists))
        .route(
            &format!("{base}/ssl_crt_lists/entries"),
            get(crt_list_entries),
        )
}

/// The pod path a name stands for in `dir` (`maps`, `ssl`, `general`).
fn pod_path(dir: &str, name: &str) -> String {
    if name.starts_with('/') {
        name.to_owned()
    } else if dir == "maps" && !name.ends_with(".map") {
        format!("/etc/haproxy/maps/{name}.map")
    } else {
        format!("/etc/haproxy/{dir}/{name}")
    }
}

fn base(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

fn runtime_failed(e: String) -> Response {
    error(500, format!("runtime API: {e}"))
}

async fn loaded(core: &PodCore) -> Loaded {
    core.cfg.lock().await.loaded.clone()
}

/// `(id, pod path, description)` of every map HAProxy loaded.
async fn loaded_maps(core: &PodCore) -> Result<Vec<(String, String, String)>, String> {
    if core.stand_in {
        let l = loaded(core).await;
        return Ok(l
            .files
            .keys()
            .filter(|p| p.starts_with("/etc/haproxy/maps/") && l.config.contains(p.as_str()))
            .enumerate()
            .map(|(i, p)| {
                (
                    i.to_string(),
                    p.clone(),
                    format!("pattern loaded from file '{p}'"),
                )
            })
            .collect());
    }
    let out = core.runtime_cmd("show map").await?;
    Ok(out
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let mut parts = l.splitn(3, ' ');
            let id = parts.next()?;
            let file = parts.next()?.trim_start_matches('(').trim_end_matches(')');
            let desc = parts.next().unwrap_or_default();
            Some((id.to_owned(), core.pod_path(file), desc.to_owned()))
        })
        .collect())
}

fn map_json(id: &str, file: &str, desc: &str) -> Value {
    json!({"id": id, "file": file, "storage_name": base(file), "description": desc})
}

async fn maps(
    State(core): State<Arc<PodCore>>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let all = q.get("include_unmanaged").is_some_and(|v| v == "true");
    match loaded_maps(&core).await {
        Ok(list) => axum::Json(
            list.iter()
                .filter(|(_, f, _)| all || f.starts_with("/etc/haproxy/maps/"))
                .map(|(i, f, d)| map_json(i, f, d))
                .collect::<Vec<_>>(),
        )
        .into_response(),
        Err(e) => runtime_failed(e),
    }
}

async fn one_map(State(core): State<Arc<PodCore>>, Path(name): Path<String>) -> Response {
    let path = pod_path("maps", &name);
    match loaded_maps(&core).await {
        Ok(list) => match list.iter().find(|(_, f, _)| *f == path) {
            Some((i, f, d)) => axum::Json(map_json(i, f, d)).into_response(),
            None => error(404, format!("map {name} is not loaded")),
        },
        Err(e) => runtime_failed(e),
    }
}

async fn map_entries(State(core): State<Arc<PodCore>>, Path(name): Path<String>) -> Response {
    let path = pod_path("maps", &name);
    let entries: Vec<Value> = if core.stand_in {
        let l = loaded(&core).await;
        let Some(bytes) = l.files.get(&path).filter(|_| l.config.contains(&path)) else {
            return error(404, format!("map {name} is not loaded"));
        };
        String::from_utf8_lossy(bytes)
            .lines()
            .filter(|line| !line.trim().is_empty() && !line.trim_start().starts_with('#'))
            .enumerate()
            .filter_map(|(i, line)| {
                let mut kv = line.split_whitespace();
                let key = kv.next()?;
                let value = kv.collect::<Vec<_>>().join(" ");
                Some(json!({"id": format!("0x{:012x}", i + 1), "key": key, "value": value}))
            })
            .collect()
    } else {
        let out = match core
            .runtime_cmd(&format!("show map {}", core.live_path(&path)))
            .await
        {
            Ok(o) => o,
            Err(e) => return runtime_failed(e),
        };
        if out.contains("Unknown map identifier") {
            return error(404, format!("map {name} is not loaded"));
        }
        out.lines()
            .filter_map(|line| {
                let mut f = line.splitn(3, ' ');
                let id = f.next().filter(|i| i.starts_with("0x"))?;
                let key = f.next()?;
                Some(json!({"id": id, "key": key, "value": f.next().unwrap_or_default()}))
            })
            .collect()
    };
    axum::Json(entries).into_response()
}

/// Pod paths of the certificates HAProxy loaded.
async fn loaded_certs(core: &PodCore) -> Result<Vec<String>, String> {
    if core.stand_in {
        let l = loaded(core).await;
        return Ok(l
            .files
            .iter()
            .filter(|(p, b)| {
                p.starts_with("/etc/haproxy/ssl/")
                    && String::from_utf8_lossy(b).contains("PRIVATE KEY-----")
                    && (l.uses(p) || l.runtime_certs.contains(*p))
            })
            .map(|(p, _)| p.clone())
            .collect());
    }
    listed_paths(core, "show ssl cert").await
}

/// The paths a `show ...` command lists, one a line (comments skipped), as pod paths.
async fn listed_paths(core: &PodCore, cmd: &str) -> Result<Vec<String>, String> {
    let out = core.runtime_cmd(cmd).await?;
    Ok(out
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| core.pod_path(l))
        .collect())
}

async fn certs(State(core): State<Arc<PodCore>>) -> Response {
    match loaded_certs(&core).await {
        Ok(list) => axum::Json(
            list.iter()
                .map(|p| json!({"storage_name": base(p), "file": p, "description": base(p)}))
                .collect::<Vec<_>>(),
        )
        .into_response(),
        Err(e) => runtime_failed(e),
    }
}

async fn one_cert(State(core): State<Arc<PodCore>>, Path(name): Path<String>) -> Response {
    let path = pod_path("ssl", &name);
    if core.stand_in {
        let l = loaded(&core).await;
        let used = l.uses(&path);
        return match l.files.get(&path) {
            Some(pem) if used || l.runtime_certs.contains(&path) => {
                axum::Json(certinfo::runtime_certificate(&path, pem, used)).into_response()
            }
            _ => error(404, format!("certificate {name} is not loaded")),
        };
    }
    let out = match core
        .runtime_cmd(&format!("show ssl cert {}", core.live_path(&path)))
        .await
    {
        Ok(o) => o,
        Err(e) => return runtime_failed(e),
    };
    if !out.contains("Filename:") {
        return error(
            404,
            format!("certificate {name} is not loaded: {}", out.trim()),
        );
    }
    axum::Json(show_ssl_cert(&path, &out)).into_response()
}

/// `show ssl cert <file>` as the `ssl_certificate` model (certinfo's field names).
fn show_ssl_cert(path: &str, out: &str) -> Value {
    let mut m = serde_json::Map::new();
    m.insert("storage_name".into(), json!(base(path)));
    m.insert("file".into(), json!(path));
    for line in out.lines() {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let v = v.trim();
        if v.is_empty() {
            continue;
        }
        let field = match k.trim() {
            "Status" => "status",
            "Serial" => "serial",
            "Subject Alternative Name" => "subject_alternative_names",
            "Algorithm" => "algorithm",
            "SHA1 FingerPrint" => "sha1_finger_print",
            "Subject" => "subject",
            "Issuer" => "issuers",
            "Chain Subject" => "chain_subject",
            "Chain Issuer" => "chain_issuer",
            "notBefore" | "notAfter" => {
                let f = if k.trim() == "notBefore" {
                    "not_before"
                } else {
                    "not_after"
                };
                if let Some(t) = certinfo::haproxy_date(v) {
                    m.insert(f.into(), json!(t));
                }
                continue;
            }
            _ => continue,
        };
        m.insert(field.into(), json!(v));
    }
    Value::Object(m)
}

async fn loaded_crt_lists(core: &PodCore) -> Result<Vec<String>, String> {
    if core.stand_in {
        return Ok(loaded(core).await.crt_lists());
    }
    listed_paths(core, "show ssl crt-list").await
}

async fn crt_lists(State(core): State<Arc<PodCore>>) -> Response {
    match loaded_crt_lists(&core).await {
        Ok(list) => {
            axum::Json(list.iter().map(|f| json!({"file": f})).collect::<Vec<_>>()).into_response()
        }
        Err(e) => runtime_failed(e),
    }
}

/// One crt-list entry line (`<cert>[:<line>] [<ssl options>] [<sni filters>]`).
fn crt_list_entry(core: &PodCore, line: &str, number: Option<usize>) -> Option<Value> {
    // HAProxy 2.6 prints an ALPN list with a trailing NUL byte.
    let line: String = line.chars().filter(|c| !c.is_control()).collect();
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let (first, rest) = line.split_once(' ').unwrap_or((line, ""));
    let (cert, n) = match (number, first.rsplit_once(':')) {
        (Some(n), _) => (first.to_owned(), n),
        (None, Some((c, n))) => (c.to_owned(), n.parse().ok()?),
        (None, None) => (first.to_owned(), 0),
    };
    let rest = rest.trim();
    let (opts, sni) = match rest.strip_prefix('[').and_then(|r| r.split_once(']')) {
        Some((o, s)) => (o.trim().to_owned(), s.trim()),
        None => (String::new(), rest),
    };
    let mut e = serde_json::Map::new();
    e.insert("file".into(), json!(core.pod_path(&cert)));
    e.insert("line_number".into(), json!(n));
    if !opts.is_empty() {
        e.insert("ssl_bind_config".into(), json!(opts));
    }
    let filters: Vec<&str> = sni.split_whitespace().collect();
    if !filters.is_empty() {
        e.insert("sni_filter".into(), json!(filters));
    }
    Some(Value::Object(e))
}

async fn crt_list_entries(
    State(core): State<Arc<PodCore>>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let Some(name) = q.get("name") else {
        return error(400, "name: query parameter required");
    };
    let path = pod_path("general", name);
    let entries: Vec<Value> = if core.stand_in {
        let l = loaded(&core).await;
        let Some(bytes) = l.files.get(&path).filter(|_| l.crt_lists().contains(&path)) else {
            return error(404, format!("crt-list {name} is not loaded"));
        };
        String::from_utf8_lossy(bytes)
            .lines()
            .enumerate()
            .filter_map(|(i, line)| crt_list_entry(&core, line, Some(i + 1)))
            .collect()
    } else {
        let cmd = format!("show ssl crt-list -n {}", core.live_path(&path));
        let out = match core.runtime_cmd(&cmd).await {
            Ok(o) => o,
            Err(e) => return runtime_failed(e),
        };
        if !out.trim_start().starts_with('#') {
            return error(
                404,
                format!("crt-list {name} is not loaded: {}", out.trim()),
            );
        }
        out.lines()
            .filter_map(|line| crt_list_entry(&core, line, None))
            .collect()
    };
    axum::Json(entries).into_response()
}
