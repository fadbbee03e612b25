//! Reading and checking a request body into a [`RenderContent`]: part names, folders, tar.

use std::io::Read;

use axum::extract::{FromRequest, Multipart, Request};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use haptic_journal::AuxKind;
use serde_json::json;

use crate::core::render::{CONFIG_FILE, RenderContent, RenderFile, kind_of_folder};

/// A refused request: status plus a JSON body naming the part and the fix.
#[derive(Debug)]
pub(super) struct Refusal {
    pub(super) status: StatusCode,
    pub(super) error: String,
    pub(super) part: Option<String>,
    pub(super) fix: Option<&'static str>,
}

impl Refusal {
    fn bad(part: &str, error: impl Into<String>, fix: &'static str) -> Self {
        Refusal {
            status: StatusCode::BAD_REQUEST,
            error: error.into(),
            part: Some(part.to_owned()),
            fix: Some(fix),
        }
    }

    pub(super) fn too_large(limit: usize) -> Self {
        Refusal {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            error: format!("request body exceeds {limit} bytes"),
            part: None,
            fix: Some("send a smaller render or raise the endpoint's body limit"),
        }
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let body = json!({ "error": self.error, "part": self.part, "fix": self.fix });
        (self.status, axum::Json(body)).into_response()
    }
}

const FIX_NAME: &str = "name each part by its path in the render: haproxy.cfg, maps/<name>, \
     ssl/<name>, ca/<name>, general/<name> or crt-lists/<name>";

/// The longest file name a pod's filesystem takes (`NAME_MAX` of Linux filesystems), in bytes
/// of UTF-8: a longer one could be journaled and validated nowhere, and stored on no pod.
const MAX_FILE_NAME_BYTES: usize = 255;

/// Where one part goes.
enum Target {
    Config,
    File(AuxKind, String),
}

/// Checks a render-relative path and says where it goes.
fn classify(path: &str) -> Result<Target, Refusal> {
    if path.is_empty() {
        return Err(Refusal::bad(path, "empty part name", FIX_NAME));
    }
    if path.starts_with('/') || path.contains('\\') || path.chars().any(char::is_control) {
        return Err(Refusal::bad(
            path,
            "absolute path, backslash or control character in the part name",
            FIX_NAME,
        ));
    }
    if path == CONFIG_FILE {
        return Ok(Target::Config);
    }
    let segments: Vec<&str> = path.split('/').collect();
    if segments.iter().any(|s| *s == ".." || *s == ".") {
        return Err(Refusal::bad(
            path,
            "`..` or `.` in the part name",
            "use a plain <folder>/<name> path inside the render",
        ));
    }
    match segments.as_slice() {
        [_] => Err(Refusal::bad(
            path,
            "only haproxy.cfg sits at the top of a render",
            "put auxiliary files in maps/, ssl/, ca/, general/ or crt-lists/",
        )),
        [folder, name] => {
            let Some(kind) = kind_of_folder(folder) else {
                return Err(Refusal::bad(
                    path,
                    format!("unknown folder `{folder}`"),
                    "use one of maps/, ssl/, ca/, general/, crt-lists/",
                ));
            };
            if name.is_empty() {
                return Err(Refusal::bad(path, "empty file name", FIX_NAME));
            }
            if name.starts_with('.') {
                return Err(Refusal::bad(
                    path,
                    "hidden file name",
                    "rename the file: names starting with `.` are not part of a render",
                ));
            }
            if name.len() > MAX_FILE_NAME_BYTES {
                return Err(Refusal::bad(
                    path,
                    format!(
                        "file name of {} bytes: a pod's filesystem (and the Dataplane API's \
                         storage) takes at most {MAX_FILE_NAME_BYTES}",
                        name.len()
                    ),
                    "shorten the file name (and its references in haproxy.cfg)",
                ));
            }
            Ok(Target::File(kind, path.to_owned()))
        }
        _ => Err(Refusal::bad(
            path,
            "nested path",
            "folders are flat: use <folder>/<name>",
        )),
    }
}

/// Collects checked parts into a render.
#[derive(Default)]
struct Builder {
    config: Option<Vec<u8>>,
    files: Vec<RenderFile>,
}

impl Builder {
    fn add(&mut self, path: &str, content: Vec<u8>) -> Result<(), Refusal> {
        match classify(path)? {
            Target::Config => {
                if self.config.is_some() {
                    return Err(Refusal::bad(
                        path,
                        "haproxy.cfg sent more than once",
                        "send haproxy.cfg exactly once",
                    ));
                }
                self.config = Some(content);
            }
            Target::File(kind, path) => {
                if self.files.iter().any(|f| f.path == path) {
                    return Err(Refusal::bad(&path, "duplicate path", "send each file once"));
                }
                self.files.push(RenderFile {
                    kind,
                    path,
                    content,
                });
            }
        }
        Ok(())
    }

    fn finish(self) -> Result<RenderContent, Refusal> {
        let Some(config) = self.config else {
            return Err(Refusal::bad(
                CONFIG_FILE,
                "haproxy.cfg missing",
                "send the config as a part named haproxy.cfg",
            ));
        };
        Ok(RenderContent::new(config, self.files))
    }
}

/// Reads a `multipart/form-data` body (parts named by render-relative path).
pub(super) async fn read_multipart(req: Request, limit: usize) -> Result<RenderContent, Refusal> {
    let limit_or = |status: StatusCode, error: String| {
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            Refusal::too_large(limit)
        } else {
            Refusal {
                status: StatusCode::BAD_REQUEST,
                error,
                part: None,
                fix: Some("send a multipart/form-data body with one part per file"),
            }
        }
    };
    let mut multipart = Multipart::from_request(req, &())
        .await
        .map_err(|e| limit_or(e.status(), e.body_text()))?;
    let mut builder = Builder::default();
    loop {
        let field = match multipart.next_field().await {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(e) => return Err(limit_or(e.status(), e.body_text())),
        };
        let name = part_name(&field);
        // Refuse a bad name before reading its content.
        classify(&name)?;
        let bytes = field
            .bytes()
            .await
            .map_err(|e| limit_or(e.status(), e.body_text()))?;
        builder.add(&name, bytes.to_vec())?;
    }
    builder.finish()
}

/// The part's name: `name="..."` verbatim (curl), else the RFC 8187 form
/// `name*=utf-8''<percent-encoded>` that some clients (reqwest) send for names with `/`.
fn part_name(field: &axum::extract::multipart::Field<'_>) -> String {
    if let Some(name) = field.name() {
        return name.to_owned();
    }
    field
        .headers()
        .get(header::CONTENT_DISPOSITION)
        .and_then(|v| v.to_str().ok())
        .and_then(extended_name)
        .unwrap_or_default()
}

/// `name*=utf-8'<lang>'<pct-encoded>` from a `Content-Disposition` value.
fn extended_name(disposition: &str) -> Option<String> {
    let value = disposition
        .split(';')
        .find_map(|p| p.trim().strip_prefix("name*="))?;
    let (charset, rest) = value.split_once('\'')?;
    let (_language, encoded) = rest.split_once('\'')?;
    if !charset.eq_ignore_ascii_case("utf-8") {
        return None;
    }
    let bytes = encoded.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        match (
            bytes[i],
            bytes.get(i + 1).copied().and_then(hex),
            bytes.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(hi), Some(lo)) => {
                out.push(u8::try_from(hi * 16 + lo).ok()?);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// Reads an `application/x-tar` body (a tar of a render directory).
pub(super) async fn read_tar(req: Request, limit: usize) -> Result<RenderContent, Refusal> {
    let body = axum::body::Bytes::from_request(req, &())
        .await
        .map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                Refusal::too_large(limit)
            } else {
                Refusal {
                    status: StatusCode::BAD_REQUEST,
                    error: e.body_text(),
                    part: None,
                    fix: None,
                }
            }
        })?;
    let tar_error = |e: std::io::Error| Refusal {
        status: StatusCode::BAD_REQUEST,
        error: format!("unreadable tar: {e}"),
        part: None,
        fix: Some("send a tar of the render directory: tar -C DIR -cf - ."),
    };
    let mut archive = tar::Archive::new(&body[..]);
    let mut builder = Builder::default();
    for entry in archive.entries().map_err(tar_error)? {
        let mut entry = entry.map_err(tar_error)?;
        let raw = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let mut path = raw.as_str();
        while let Some(rest) = path.strip_prefix("./") {
            path = rest;
        }
        let entry_type = entry.header().entry_type();
        if entry_type.is_dir() || path.is_empty() || path == "." {
            continue;
        }
        if !(entry_type.is_file() || entry_type.is_contiguous()) {
            return Err(Refusal::bad(
                path,
                "not a regular file (link or special file)",
                "put the files themselves into the tar (tar -h follows symlinks)",
            ));
        }
        classify(path)?;
        let mut content = Vec::new();
        entry.read_to_end(&mut content).map_err(tar_error)?;
        builder.add(path, content)?;
    }
    builder.finish()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn extended_names_are_percent_decoded() {
        let cd = "form-data; name*=utf-8''ca%2Froot.pem; filename=\"root.pem\"";
        assert_eq!(extended_name(cd).unwrap(), "ca/root.pem");
        assert_eq!(
            extended_name("form-data; name*=UTF-8'en'maps%2Fh%C3%B6sts.map").unwrap(),
            "maps/h\u{f6}sts.map"
        );
        assert_eq!(extended_name("form-data; name*=iso-8859-1''a%2Fb"), None);
        assert_eq!(extended_name("form-data; filename*=utf-8''a%2Fb"), None);
        assert_eq!(
            extended_name("form-data; name*=utf-8''%FF"),
            None,
            "not UTF-8"
        );
        assert_eq!(
            extended_name("form-data; name*=utf-8''a%2"),
            Some("a%2".into())
        );
    }

    #[test]
    fn paths_map_onto_kinds() {
        assert!(matches!(classify("haproxy.cfg"), Ok(Target::Config)));
        assert!(matches!(
            classify("crt-lists/list.txt"),
            Ok(Target::File(AuxKind::CrtList, _))
        ));
        assert!(matches!(
            classify("ca/root.pem"),
            Ok(Target::File(AuxKind::Ca, _))
        ));
        for bad in [
            "",
            "a",
            "maps",
            "maps/",
            "maps/a/b",
            "x/y",
            "maps/..",
            "./haproxy.cfg",
            "maps\\a",
        ] {
            assert!(classify(bad).is_err(), "{bad}");
        }
    }
}
