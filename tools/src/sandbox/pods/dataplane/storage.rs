//! Storage endpoints (observed-v3.4.md, ecosystem.md §A.5): maps, SSL certificates, general
//! files, crt-lists, and CA files through `/v3/services/haproxy/runtime/ssl_ca_files` (stored
//! beside the certificates). Files land in the pod's `/etc/haproxy/{maps,ssl,general}`
//! (DESIGN.md §1: crt-lists are stored in `general/`, where renders reference them).
//!
//! ```text
//!  maps             POST multipart 201 (409 exists); GET the file (octet-stream) / 404;
//!                   PUT text/plain 202 + Reload-ID (204 skip_reload; 415 multipart); DELETE 204
//!  ssl_certificates POST/PUT 201/200 with the metadata, applied at runtime without a reload
//!                   (202 + Reload-ID when the runtime update fails); not a PEM 500 "failed to
//!                   parse certificate"; DELETE 202 + Reload-ID (204 skip_reload)
//!  general          POST multipart 201; PUT multipart 202 (204 skip_reload), text/plain 415
//!  ssl_ca_files     POST multipart 201 without a body (the spec declares none); listed with
//!                   HAProxy's built-in @system-ca; PUT applied at runtime (200)
//! ```
//! A delete of a file the in-memory configuration names is 409 (general files excepted).

#![allow(clippy::result_large_err)]

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::{FromRequest as _, Multipart, Path, Query, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;

use super::{PodCore, certinfo, error, qbool, with_reload_id, write_atomic};

/// HAProxy's built-in CA bundle, listed among the CA files once HAProxy runs.
const SYSTEM_CA: &str = "@system-ca";
/// Where the host keeps the bundle `@system-ca` loads.
const SYSTEM_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

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

    /// Stored name (client-native's `SanitizeFilename`, approximated: characters outside
    /// `[A-Za-z0-9._-]` become `_`; maps get `.map` appended when missing; a certificate's base
    /// name loses its dots, `a.b.pem` → `a_b.pem`).
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

    fn pod_path(self, name: &str) -> String {
        format!("/etc/haproxy/{}/{name}", self.dir())
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
                get(move |s| list(kind, s)).post(move |s, q, req| create(kind, s, q, req)),
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
    let path = kind.pod_path(name);
    let description = match kind {
        Kind::Ca => return ca_meta(core, name),
        Kind::Map => "managed map file",
        Kind::Cert => "managed SSL file",
        Kind::General | Kind::CrtList => "managed general use file",
    };
    json!({"storage_name": name, "file": path, "description": description})
}

/// What create/replace/GET answer for one stored file: the certificate model (certinfo.rs) for
/// certificates, the listing entry with its size for the others.
fn meta(core: &PodCore, kind: Kind, name: &str) -> serde_json::Value {
    let on_disk = core.fs.etc.join(kind.dir()).join(name);
    match kind {
        Kind::Cert => {
            let pem = std::fs::read(&on_disk).unwrap_or_default();
            certinfo::storage_certificate(name, &kind.pod_path(name), &pem)
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
    let pem = if name == SYSTEM_CA {
        std::fs::read(SYSTEM_CA_BUNDLE).unwrap_or_default()
    } else {
        std::fs::read(core.fs.etc.join(Kind::Ca.dir()).join(name)).unwrap_or_default()
    };
    json!({"storage_name": name, "count": format!("{} certificate(s)", certinfo::ca_count(&pem))})
}

/// A file of the SSL directory that holds a private key is a certificate, not a CA file.
fn is_ca_file(core: &PodCore, name: &str) -> bool {
    std::fs::read(core.fs.etc.join(Kind::Ca.dir()).join(name))
        .is_ok_and(|b| !String::from_utf8_lossy(&b).contains("PRIVATE KEY-----"))
}

/// The stored name a path names (`@`-names of HAProxy's own CA files kept as they are).
fn name_of(kind: Kind, name: &str) -> Option<String> {
    if kind == Kind::Ca && name == SYSTEM_CA {
        return Some(name.to_owned());
    }
    kind.storage_name(name)
}

async fn list(kind: Kind, State(core): State<Arc<PodCore>>) -> Response {
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
        names.insert(0, SYSTEM_CA.to_owned());
    }
    let entries: Vec<_> = names.iter().map(|n| listed(&core, kind, n)).collect();
    axum::Json(entries).into_response()
}

async fn get_one(
    kind: Kind,
    State(core): State<Arc<PodCore>>,
    Path(name): Path<String>,
) -> Response {
    let Some(name) = name_of(kind, &name) else {
        return error(400, "invalid name");
    };
    if kind == Kind::Ca && name == SYSTEM_CA {
        return axum::Json(ca_meta(&core, &name)).into_response();
    }
    let Ok(bytes) = std::fs::read(core.fs.etc.join(kind.dir()).join(&name)) else {
        return error(404, format!("file {name} not found"));
    };
    match kind {
        Kind::Cert => axum::Json(meta(&core, kind, &name)).into_response(),
        Kind::Ca if is_ca_file(&core, &name) => axum::Json(ca_meta(&core, &name)).into_response(),
        Kind::Ca => error(404, format!("ca file {name} not found")),
        _ => (
            StatusCode::OK,
            [("content-type", "application/octet-stream")],
            bytes,
        )
            .into_response(),
    }
}

fn is_multipart(req: &Request) -> bool {
    req.headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("multipart/"))
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

/// A replacement body: maps take text/plain only, general and CA files multipart only (415
/// otherwise, as the real API); certificates and crt-lists either.
async fn replacement(kind: Kind, req: Request) -> Result<Vec<u8>, Response> {
    let multipart = is_multipart(&req);
    match kind {
        Kind::Map if multipart => return Err(error(415, "maps are replaced with text/plain")),
        Kind::General | Kind::Ca if !multipart => {
            return Err(error(
                415,
                "the file is replaced with multipart/form-data (file_upload)",
            ));
        }
        _ => {}
    }
    if multipart {
        return upload(req).await.map(|(_, b)| b);
    }
    axum::body::to_bytes(req.into_body(), 1 << 30)
        .await
        .map(|b| b.to_vec())
        .map_err(|e| error(400, format!("reading body: {e}")))
}

/// client-native's `validatePEM`: its errors are plain errors, answered 500.
fn check_pem(kind: Kind, bytes: &[u8]) -> Result<(), Response> {
    let text = String::from_utf8_lossy(bytes);
    let has_cert = certinfo::ca_count(bytes) > 0;
    let has_key = text.contains("PRIVATE KEY-----");
    match kind {
        Kind::Cert if !has_cert => Err(error(500, "failed to parse certificate")),
        Kind::Cert if !has_key => Err(error(
            500,
            "file should contain both certificate and private key",
        )),
        Kind::Ca if !has_cert => Err(error(400, "invalid CA file: no certificate found")),
        _ => Ok(()),
    }
}

/// Whether the API's in-memory configuration names the file.
async fn referenced(core: &PodCore, kind: Kind, name: &str) -> bool {
    core.cfg.lock().await.memory.contains(&kind.pod_path(name))
}

/// Scheduled, forced or skipped: the answer of a write whose file is stored.
async fn after_write(
    core: &PodCore,
    q: &HashMap<String, String>,
    done: Response,
    scheduled: Response,
) -> Response {
    if qbool(q, "skip_reload") {
        return done;
    }
    if qbool(q, "force_reload") {
        let mut st = core.cfg.lock().await;
        return match core.reload_locked(&mut st).await {
            Ok(()) => done,
            Err(msg) => error(500, format!("Reload failed: {msg}")),
        };
    }
    let id = core.schedule_reload();
    with_reload_id(scheduled, &id)
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
    let path = core.fs.etc.join(kind.dir()).join(&name);
    if path.exists() {
        return error(409, format!("file {} already exists", kind.pod_path(&name)));
    }
    if let Err(e) = write_atomic(&path, &bytes) {
        return error(500, e.to_string());
    }
    if kind == Kind::Ca {
        // createCaFile's 201 declares no body in the spec (v30/v32/v33).
        return StatusCode::CREATED.into_response();
    }
    let body = meta(&core, kind, &name);
    if kind != Kind::Cert {
        return (StatusCode::CREATED, axum::Json(body)).into_response();
    }
    let pod_path = kind.pod_path(&name);
    after_cert_write(
        &core,
        &q,
        &pod_path,
        &bytes,
        true,
        StatusCode::CREATED,
        body,
    )
    .await
}

/// A certificate stored: applied at runtime (`status` and the metadata), unless `skip_reload`
/// or `force_reload` say otherwise; when the runtime update fails, 202 + Reload-ID.
async fn after_cert_write(
    core: &PodCore,
    q: &HashMap<String, String>,
    pod_path: &str,
    pem: &[u8],
    new: bool,
    status: StatusCode,
    body: serde_json::Value,
) -> Response {
    let done = (status, axum::Json(body.clone())).into_response();
    let runtime = !qbool(q, "skip_reload")
        && !qbool(q, "force_reload")
        && core.runtime_cert(pod_path, pem, new).await.is_ok();
    if runtime {
        return done;
    }
    let scheduled = (StatusCode::ACCEPTED, axum::Json(body)).into_response();
    after_write(core, q, done, scheduled).await
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
    let bytes = match replacement(kind, req).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    if let Err(r) = check_pem(kind, &bytes) {
        return r;
    }
    let path = core.fs.etc.join(kind.dir()).join(&name);
    if !path.exists() {
        return error(404, format!("file {name} not found"));
    }
    if let Err(e) = write_atomic(&path, &bytes) {
        return error(500, e.to_string());
    }
    let pod_path = kind.pod_path(&name);
    match kind {
        Kind::Map | Kind::General => {
            let done = StatusCode::NO_CONTENT.into_response();
            after_write(&core, &q, done, StatusCode::ACCEPTED.into_response()).await
        }
        Kind::Cert => {
            let body = meta(&core, kind, &name);
            after_cert_write(&core, &q, &pod_path, &bytes, false, StatusCode::OK, body).await
        }
        Kind::CrtList => {
            let body = axum::Json(meta(&core, kind, &name));
            let done = (StatusCode::OK, body.clone()).into_response();
            let scheduled = (StatusCode::ACCEPTED, body).into_response();
            after_write(&core, &q, done, scheduled).await
        }
        Kind::Ca => {
            // The spec's PUT has no 202: HAProxy takes the CA file at runtime when it has it
            // loaded; otherwise its next reload loads the stored file.
            let _ = core.runtime_ca_file(&pod_path, &bytes).await;
            (StatusCode::OK, axum::Json(meta(&core, kind, &name))).into_response()
        }
    }
}

async fn delete(
    kind: Kind,
    State(core): State<Arc<PodCore>>,
    Path(name): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let Some(name) = name_of(kind, &name) else {
        return error(400, "invalid name");
    };
    if kind == Kind::Ca && name == SYSTEM_CA {
        return StatusCode::NO_CONTENT.into_response();
    }
    let path = core.fs.etc.join(kind.dir()).join(&name);
    if !path.exists() {
        return error(404, format!("file {name} not found"));
    }
    if kind != Kind::General && referenced(&core, kind, &name).await {
        return error(
            409,
            format!(
                "rejecting attempt to delete file {} referenced in haproxy conf",
                kind.pod_path(&name)
            ),
        );
    }
    if let Err(e) = std::fs::remove_file(&path) {
        return error(500, e.to_string());
    }
    let done = StatusCode::NO_CONTENT.into_response();
    if kind != Kind::Cert
        || qbool(&q, "skip_reload")
        || (!qbool(&q, "force_reload") && core.runtime_cert_delete(&name).await.is_ok())
    {
        return done;
    }
    after_write(&core, &q, done, StatusCode::ACCEPTED.into_response()).await
}
