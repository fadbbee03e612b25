//! Storage endpoints (ecosystem.md §A.5): maps, SSL certificates, general files, crt-lists, and CA
//! files through `/v3/services/haproxy/runtime/ssl_ca_files` (stored beside the certificates).
//! Files land in the pod's `/etc/haproxy/{maps,ssl,general}` (DESIGN.md §1: crt-lists are stored in
//! `general/`, where renders reference them).

#![allow(clippy::result_large_err)]

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::{FromRequest as _, Multipart, Path, Query, Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;

use super::{PodCore, certinfo, error, qbool, write_atomic};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Map,
    Cert,
    General,
    CrtList,
    Ca,
}

impl Kind {
    fn dir(self) -> &'static str {
        match self {
            Kind::Map => "maps",
            Kind::Cert | Kind::Ca => "ssl",
            Kind::General | Kind::CrtList => "general",
        }
    }

    /// Stored name (client-native storage rules, approximated: characters outside
    /// `[A-Za-z0-9._-]` become `_`; maps get `.map` appended when missing; a certificate's base name
    /// loses its dots, `a.b.pem` → `a_b.pem`).
    fn storage_name(self, filename: &str) -> Option<String> {
        let base = filename.rsplit('/').next().unwrap_or_default();
        let mut name: String = base
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        if name.is_empty() || name == "." || name == ".." {
            return None;
        }
        match self {
            Kind::Map if !name.ends_with(".map") => name.push_str(".map"),
            Kind::Cert => {
                if let Some((stem, ext)) = name.rsplit_once('.') {
                    name = format!("{}.{ext}", stem.replace('.', "_"));
                }
            }
            _ => {}
        }
        Some(name)
    }
}

pub(super) fn routes() -> Router<Arc<PodCore>> {
    let mut r = Router::new();
    for (base, kind) in [
        ("/v3/services/haproxy/storage/maps", Kind::Map),
        ("/v3/services/haproxy/storage/ssl_certificates", Kind::Cert),
        ("/v3/services/haproxy/storage/general", Kind::General),
        ("/v3/services/haproxy/storage/ssl_crt_lists", Kind::CrtList),
        ("/v3/services/haproxy/runtime/ssl_ca_files", Kind::Ca),
    ] {
        r = r
            .route(
                base,
                get(move |s, q| list(kind, s, q)).post(move |s, q, req| create(kind, s, q, req)),
            )
            .route(
                &format!("{base}/{{name}}"),
                get(move |s, p| get_one(kind, s, p))
                    .put(move |s, p, q, req| replace(kind, s, p, q, req))
                    .delete(move |s, p, q| delete(kind, s, p, q)),
            );
    }
    r.route(
        "/v3/services/haproxy/runtime/ssl_ca_files/{name}/entries/{index}",
        get(ca_entry),
    )
}

/// `GET .../runtime/ssl_ca_files/{name}/entries/{index}` (index from 1): one certificate of a
/// CA file (certinfo.rs).
async fn ca_entry(
    State(core): State<Arc<PodCore>>,
    Path((name, index)): Path<(String, String)>,
) -> Response {
    let Some(name) = Kind::Ca.storage_name(&name) else {
        return error(400, "invalid name");
    };
    let Ok(index) = index.parse::<usize>() else {
        return error(400, "index must be a number");
    };
    let pem = match std::fs::read(core.fs.etc.join(Kind::Ca.dir()).join(&name)) {
        Ok(b) if is_ca_file(&core, &name) => b,
        _ => return error(404, format!("ca file {name} not found")),
    };
    match certinfo::ca_entry(&name, &pem, index) {
        Some(v) => axum::Json(v).into_response(),
        None => error(404, format!("ca file {name} has no certificate {index}")),
    }
}

/// A listing entry, as the real handlers send it: name and path (no size), plus the count for
/// CA files (`show ssl ca-file`: `3 certificate(s)`).
fn listed(core: &PodCore, kind: Kind, name: &str) -> serde_json::Value {
    let path = format!("/etc/haproxy/{}/{name}", kind.dir());
    match kind {
        Kind::Ca => ca_meta(core, name),
        Kind::Map => json!({"storage_name": name, "file": path, "description": "managed map file"}),
        Kind::Cert => {
            json!({"storage_name": name, "file": path, "description": "managed SSL file"})
        }
        Kind::General | Kind::CrtList => {
            json!({"storage_name": name, "file": path, "description": "managed general use file"})
        }
    }
}

/// What create/replace/GET answer for one stored file: the certificate model (certinfo.rs) for
/// certificates, the listing entry with its size for the others.
fn meta(core: &PodCore, kind: Kind, name: &str) -> serde_json::Value {
    let on_disk = core.fs.etc.join(kind.dir()).join(name);
    let path = format!("/etc/haproxy/{}/{name}", kind.dir());
    match kind {
        Kind::Cert => {
            let pem = std::fs::read(&on_disk).unwrap_or_default();
            certinfo::storage_certificate(name, &path, &pem)
        }
        _ => {
            let mut v = listed(core, kind, name);
            let size = std::fs::metadata(&on_disk).map(|m| m.len()).unwrap_or(0);
            v["size"] = json!(size);
            v
        }
    }
}

/// `GET .../runtime/ssl_ca_files/{name}`: the CA file and how many certificates it holds.
fn ca_meta(core: &PodCore, name: &str) -> serde_json::Value {
    let pem = std::fs::read(core.fs.etc.join(Kind::Ca.dir()).join(name)).unwrap_or_default();
    json!({"storage_name": name, "count": format!("{} certificate(s)", certinfo::ca_count(&pem))})
}

/// A file of the SSL directory that holds a private key is a certificate, not a CA file (the
/// real runtime lists the CA files HAProxy loaded; certificates must carry their key, §A.5).
fn is_ca_file(core: &PodCore, name: &str) -> bool {
    std::fs::read(core.fs.etc.join(Kind::Ca.dir()).join(name))
        .is_ok_and(|b| !String::from_utf8_lossy(&b).contains("PRIVATE KEY-----"))
}

async fn list(
    kind: Kind,
    State(core): State<Arc<PodCore>>,
    Query(_q): Query<HashMap<String, String>>,
) -> Response {
    let dir = core.fs.etc.join(kind.dir());
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| !n.starts_with('.'))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    if kind == Kind::Ca {
        names.retain(|n| is_ca_file(&core, n));
    }
    axum::Json(
        names
            .iter()
            .map(|n| listed(&core, kind, n))
            .collect::<Vec<_>>(),
    )
    .into_response()
}

async fn get_one(
    kind: Kind,
    State(core): State<Arc<PodCore>>,
    Path(name): Path<String>,
) -> Response {
    let Some(name) = kind.storage_name(&name) else {
        return error(400, "invalid name");
    };
    let path = core.fs.etc.join(kind.dir()).join(&name);
    let Ok(bytes) = std::fs::read(&path) else {
        return error(404, format!("file {name} not found"));
    };
    if kind == Kind::Ca && !is_ca_file(&core, &name) {
        return error(404, format!("ca file {name} not found"));
    }
    match kind {
        Kind::Cert => axum::Json(meta(&core, kind, &name)).into_response(),
        Kind::Ca => axum::Json(ca_meta(&core, &name)).into_response(),
        _ => (
            StatusCode::OK,
            [("content-type", "application/octet-stream")],
            bytes,
        )
            .into_response(),
    }
}

/// The multipart part `file_upload` (filename, content).
async fn upload(req: Request) -> Result<(String, Vec<u8>), Response> {
    let mut mp = Multipart::from_request(req, &())
        .await
        .map_err(|e| error(400, format!("expected multipart/form-data: {e}")))?;
    while let Ok(Some(field)) = mp.next_field().await {
        if field.name() == Some("file_upload") {
            let fname = field.file_name().unwrap_or_default().to_string();
            let bytes = field
                .bytes()
                .await
                .map_err(|e| error(400, format!("reading file_upload: {e}")))?;
            return Ok((fname, bytes.to_vec()));
        }
    }
    Err(error(400, "missing multipart part file_upload"))
}

/// A replacement body: multipart `file_upload` or the raw body (text/plain).
async fn replacement(req: Request) -> Result<Vec<u8>, Response> {
    let multipart = req
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("multipart/"));
    if multipart {
        return upload(req).await.map(|(_, b)| b);
    }
    axum::body::to_bytes(req.into_body(), 1 << 30)
        .await
        .map(|b| b.to_vec())
        .map_err(|e| error(400, format!("reading body: {e}")))
}

fn check_pem(kind: Kind, bytes: &[u8]) -> Result<(), Response> {
    let text = String::from_utf8_lossy(bytes);
    let has_cert = text.contains("-----BEGIN CERTIFICATE-----");
    let has_key = text.contains("PRIVATE KEY-----");
    match kind {
        Kind::Cert if !(has_cert && has_key) => Err(error(
            400,
            "invalid certificate: the PEM file must contain a certificate and a private key",
        )),
        Kind::Ca if !has_cert => Err(error(400, "invalid CA file: no certificate found")),
        _ => Ok(()),
    }
}

/// Whether HAProxy has the file loaded: the running configuration names it, or (certificates)
/// a crt-list in `general/` does. A loaded certificate or CA file that is replaced without
/// `skip_reload` takes effect at once in the real API (runtime `set ssl cert` / `set ssl
/// ca-file` and commit); the sandbox gets the same effect with a reload.
fn loaded(core: &PodCore, kind: Kind, name: &str) -> bool {
    if referenced(core, kind, name) {
        return true;
    }
    let pod_path = format!("/etc/haproxy/{}/{name}", kind.dir());
    matches!(kind, Kind::Cert | Kind::Ca)
        && std::fs::read_dir(core.fs.etc.join(Kind::General.dir())).is_ok_and(|rd| {
            rd.filter_map(Result::ok)
                .any(|e| std::fs::read_to_string(e.path()).is_ok_and(|t| t.contains(&pod_path)))
        })
}

fn referenced(core: &PodCore, kind: Kind, name: &str) -> bool {
    let pod_path = format!("/etc/haproxy/{}/{name}", kind.dir());
    core.read_config().contains(&pod_path)
}

fn with_reload_id(mut r: Response, id: &str) -> Response {
    if let Ok(v) = HeaderValue::from_str(id) {
        r.headers_mut().insert("reload-id", v);
    }
    r
}

async fn create(
    kind: Kind,
    State(core): State<Arc<PodCore>>,
    Query(q): Query<HashMap<String, String>>,
    req: Request,
) -> Response {
    let (fname, bytes) = match upload(req).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    let Some(name) = kind.storage_name(&fname) else {
        return error(400, "the multipart part file_upload needs a file name");
    };
    if let Err(r) = check_pem(kind, &bytes) {
        return r;
    }
    let _st = core.cfg.lock().await;
    let path = core.fs.etc.join(kind.dir()).join(&name);
    if path.exists() {
        return error(409, format!("file {name} already exists"));
    }
    if let Err(e) = write_atomic(&path, &bytes) {
        return error(500, e.to_string());
    }
    let body = axum::Json(meta(&core, kind, &name));
    // A new certificate the running config (or a crt-list) already names needs a reload (the real API tries a
    // runtime hot-add first and answers 202 + Reload-ID when it cannot; §A.5).
    if kind == Kind::Cert && !qbool(&q, "skip_reload") && loaded(&core, kind, &name) {
        let id = core.schedule_reload();
        return with_reload_id((StatusCode::ACCEPTED, body).into_response(), &id);
    }
    (StatusCode::CREATED, body).into_response()
}

async fn replace(
    kind: Kind,
    State(core): State<Arc<PodCore>>,
    Path(name): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    req: Request,
) -> Response {
    let Some(name) = kind.storage_name(&name) else {
        return error(400, "invalid name");
    };
    let bytes = match replacement(req).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    if let Err(r) = check_pem(kind, &bytes) {
        return r;
    }
    let mut st = core.cfg.lock().await;
    let path = core.fs.etc.join(kind.dir()).join(&name);
    if !path.exists() {
        return error(404, format!("file {name} not found"));
    }
    if let Err(e) = write_atomic(&path, &bytes) {
        return error(500, e.to_string());
    }
    let skip = qbool(&q, "skip_reload");
    let force = qbool(&q, "force_reload");
    let ok_status = match kind {
        Kind::Cert | Kind::Ca => StatusCode::OK,
        _ => StatusCode::NO_CONTENT,
    };
    let ok = |core: &PodCore| -> Response {
        if ok_status == StatusCode::NO_CONTENT {
            StatusCode::NO_CONTENT.into_response()
        } else {
            (ok_status, axum::Json(meta(core, kind, &name))).into_response()
        }
    };
    if skip {
        return ok(&core);
    }
    if force {
        return match core.reload_locked(&mut st).await {
            Ok(()) => ok(&core),
            Err(msg) => error(400, msg),
        };
    }
    if matches!(kind, Kind::Cert | Kind::Ca) && !loaded(&core, kind, &name) {
        return ok(&core);
    }
    let id = core.schedule_reload();
    with_reload_id(
        (StatusCode::ACCEPTED, axum::Json(meta(&core, kind, &name))).into_response(),
        &id,
    )
}

async fn delete(
    kind: Kind,
    State(core): State<Arc<PodCore>>,
    Path(name): Path<String>,
    Query(_q): Query<HashMap<String, String>>,
) -> Response {
    let Some(name) = kind.storage_name(&name) else {
        return error(400, "invalid name");
    };
    let _st = core.cfg.lock().await;
    let path = core.fs.etc.join(kind.dir()).join(&name);
    if !path.exists() {
        return error(404, format!("file {name} not found"));
    }
    if kind != Kind::General && referenced(&core, kind, &name) {
        return error(
            409,
            format!(
                "rejecting attempt to delete file /etc/haproxy/{}/{name} referenced in haproxy conf",
                kind.dir()
            ),
        );
    }
    match std::fs::remove_file(&path) {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => error(500, e.to_string()),
    }
}
