//! One published OpenAPI document of the Data Plane API, loaded once per process: its operations
//! indexed by path template, and the draft 4 validators of its schemas compiled on first use.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::Value;

use super::schema::{self, Converter, Direction, SchemaError};

/// Where the published documents live: `shared/reference/dataplaneapi/` beside the workspace.
pub const SPEC_DIR: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/reference/dataplaneapi"
);

/// A Data Plane API version with a published OpenAPI document in [`SPEC_DIR`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum SpecVersion {
    /// Data Plane API 3.0 (`v30-spec.json`).
    #[serde(rename = "v30-spec.json")]
    V30,
    /// Data Plane API 3.2 (`v32-spec.json`), what the sandbox's stand-in reports.
    #[serde(rename = "v32-spec.json")]
    V32,
    /// Data Plane API 3.3 (`v33-spec.json`).
    #[serde(rename = "v33-spec.json")]
    V33,
}

impl SpecVersion {
    /// The document's file name in [`SPEC_DIR`].
    #[must_use]
    pub fn file_name(self) -> &'static str {
        match self {
            SpecVersion::V30 => "v30-spec.json",
            SpecVersion::V32 => "v32-spec.json",
            SpecVersion::V33 => "v33-spec.json",
        }
    }

    /// The document for the API version a pod reports in `GET /v3/info` `api.version`
    /// (`v3.2.6 haptic-sandbox`, `v3.4.0-dev ...`): the newest published one not newer than it
    /// (3.1 is held to 3.0's, 3.4 to 3.3's); `None` before 3.0 or when no `vMAJOR.MINOR` is found.
    #[must_use]
    pub fn for_api_version(reported: &str) -> Option<SpecVersion> {
        let v = reported.trim().trim_start_matches('v');
        let mut parts = v.split(|c: char| !c.is_ascii_digit());
        let major: u32 = parts.next()?.parse().ok()?;
        let minor: u32 = parts.next()?.parse().ok()?;
        match (major, minor) {
            (3, 0 | 1) => Some(SpecVersion::V30),
            (3, 2) => Some(SpecVersion::V32),
            (3, _) | (4.., _) => Some(SpecVersion::V33),
            _ => None,
        }
    }
}

impl std::fmt::Display for SpecVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.file_name())
    }
}

/// Why a published document could not be used.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum SpecError {
    /// The file is missing or unreadable.
    #[error(
        "cannot read the Data Plane API spec {path}: {message}; the sandbox holds every pod to the \
         published OpenAPI documents in shared/reference/dataplaneapi/ beside the workspace: restore \
         that directory (it comes with the project's shared/ folder), or turn the check off \
         (SandboxConfig::spec_check = SpecCheck::Off, haptic-sandbox --spec-check off)"
    )]
    Missing {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        message: String,
    },
    /// The file is not an OpenAPI 3.0 document this module understands.
    #[error("the Data Plane API spec {path} is not an OpenAPI 3.0 document: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// One segment of a path template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    Param(String),
}

/// One path of the document.
#[derive(Debug)]
struct PathEntry {
    template: String,
    segments: Vec<Segment>,
}

/// A path matched to a template: the template and its parameter values (percent-decoded).
#[derive(Debug, Clone)]
pub(super) struct Matched {
    pub(super) template: String,
    pub(super) params: Vec<(String, String)>,
}

/// A loaded document: the JSON, its path index, and compiled validators.
pub struct Contract {
    version: SpecVersion,
    doc: Value,
    /// The server URL's path every operation is under (`/v3`).
    base: String,
    paths: Vec<PathEntry>,
    /// Indexes into `paths` by segment count.
    by_len: HashMap<usize, Vec<usize>>,
    memo: Mutex<HashMap<(String, Direction), Value>>,
    validators: Mutex<HashMap<(String, Direction), Arc<Compiled>>>,
}

impl std::fmt::Debug for Contract {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Contract")
            .field("version", &self.version)
            .field("paths", &self.paths.len())
            .finish_non_exhaustive()
    }
}

/// A compiled schema, or why it would not compile (reported as a violation of the validator
/// itself, never skipped).
pub(super) type Compiled = Result<jsonschema::Validator, String>;

impl Contract {
    /// The document for `version`, read from [`SPEC_DIR`] and parsed once per process.
    ///
    /// # Errors
    /// [`SpecError::Missing`] naming the path and the fix, [`SpecError::Invalid`].
    pub fn load(version: SpecVersion) -> Result<Arc<Contract>, SpecError> {
        static LOADED: [OnceLock<Result<Arc<Contract>, SpecError>>; 3] =
            [OnceLock::new(), OnceLock::new(), OnceLock::new()];
        let slot = match version {
            SpecVersion::V30 => &LOADED[0],
            SpecVersion::V32 => &LOADED[1],
            SpecVersion::V33 => &LOADED[2],
        };
        slot.get_or_init(|| {
            let path = Path::new(SPEC_DIR).join(version.file_name());
            Contract::read(version, &path).map(Arc::new)
        })
        .clone()
    }

    /// Reads and indexes the document at `path`.
    ///
    /// # Errors
    /// As [`Contract::load`].
    pub fn read(version: SpecVersion, path: &Path) -> Result<Contract, SpecError> {
        let text = std::fs::read(path).map_err(|e| SpecError::Missing {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
        let invalid = |message: String| SpecError::Invalid {
            path: path.to_owned(),
            message,
        };
        let doc: Value = serde_json::from_slice(&text).map_err(|e| invalid(e.to_string()))?;
        Contract::from_document(version, doc).map_err(invalid)
    }

    /// Indexes an already parsed document.
    ///
    /// # Errors
    /// The reason, when `doc` is not an OpenAPI 3.0 document with `paths`.
    pub fn from_document(version: SpecVersion, doc: Value) -> Result<Contract, String> {
        let openapi = doc.get("openapi").and_then(Value::as_str).unwrap_or("");
        if !openapi.starts_with("3.0") {
            return Err(format!("`openapi` is {openapi:?}, expected 3.0.x"));
        }
        let base = doc
            .pointer("/servers/0/url")
            .and_then(Value::as_str)
            .map(|u| {
                let after_scheme = u.split_once("://").map_or(u, |(_, r)| r);
                after_scheme
                    .find('/')
                    .map_or(String::new(), |i| after_scheme[i..].to_owned())
            })
            .unwrap_or_default();
        let paths: Vec<PathEntry> = doc
            .get("paths")
            .and_then(Value::as_object)
            .ok_or("no `paths` object")?
            .keys()
            .map(|template| PathEntry {
                template: template.clone(),
                segments: template
                    .split('/')
                    .filter(|s| !s.is_empty())
                    .map(
                        |s| match s.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                            Some(p) => Segment::Param(p.to_owned()),
                            None => Segment::Literal(s.to_owned()),
                        },
                    )
                    .collect(),
            })
            .collect();
        let mut by_len: HashMap<usize, Vec<usize>> = HashMap::new();
        for (i, e) in paths.iter().enumerate() {
            by_len.entry(e.segments.len()).or_default().push(i);
        }
        Ok(Contract {
            version,
            by_len,
            doc,
            base: base.trim_end_matches('/').to_owned(),
            paths,
            memo: Mutex::default(),
            validators: Mutex::default(),
        })
    }

    /// The document's version.
    #[must_use]
    pub fn version(&self) -> SpecVersion {
        self.version
    }

    /// The path every operation is under (`/v3`).
    pub(super) fn base(&self) -> &str {
        &self.base
    }

    /// The whole document.
    pub(super) fn doc(&self) -> &Value {
        &self.doc
    }

    /// `v` with its `$ref` chain followed.
    pub(super) fn resolve<'a>(&'a self, v: &'a Value) -> &'a Value {
        schema::resolve(&self.doc, v)
    }

    /// The path item whose template matches `rel` (a path below [`Contract::base`], still
    /// percent-encoded). Literal segments win over parameters, leftmost first, as OpenAPI
    /// says ("concrete paths are matched before their templated counterparts").
    pub(super) fn match_path(&self, rel: &str) -> Option<Matched> {
        let segs: Vec<&str> = rel.split('/').filter(|s| !s.is_empty()).collect();
        let mut best: Option<(u64, &PathEntry)> = None;
        let candidates = self.by_len.get(&segs.len()).map_or(&[][..], Vec::as_slice);
        for e in candidates.iter().map(|&i| &self.paths[i]) {
            // One bit per literal segment, the leftmost highest: more literal segments,
            // leftmost first, win. (Templates have far fewer than 64 segments.)
            let mut literal = 0u64;
            let fits = e
                .segments
                .iter()
                .zip(&segs)
                .enumerate()
                .all(|(i, (t, s))| match t {
                    Segment::Literal(l) => {
                        literal |= 1 << (63 - i.min(63));
                        l == s
                    }
                    Segment::Param(_) => true,
                });
            if fits && best.as_ref().is_none_or(|(b, _)| literal > *b) {
                best = Some((literal, e));
            }
        }
        let (_, e) = best?;
        let params = e
            .segments
            .iter()
            .zip(&segs)
            .filter_map(|(t, s)| match t {
                Segment::Param(p) => Some((
                    p.clone(),
                    percent_encoding::percent_decode_str(s)
                        .decode_utf8_lossy()
                        .into_owned(),
                )),
                Segment::Literal(_) => None,
            })
            .collect();
        Some(Matched {
            template: e.template.clone(),
            params,
        })
    }

    /// The path item of `template`.
    pub(super) fn path_item(&self, template: &str) -> Option<&Value> {
        self.doc.get("paths")?.get(template)
    }

    /// The compiled validator of the schema at `pointer` (a JSON pointer into the document) for
    /// `dir`, compiled on first use. `Err` carries why the schema cannot be used.
    pub(super) fn validator(&self, pointer: &str, dir: Direction) -> Arc<Compiled> {
        let key = (self.canonical(pointer), dir);
        if let Some(v) = self
            .validators
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&key)
        {
            return v.clone();
        }
        let compiled = Arc::new(self.compile(&key.0, dir));
        self.validators
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(key)
            .or_insert(compiled)
            .clone()
    }

    /// `pointer`, or where the `$ref` chain of the schema there leads: one validator per schema,
    /// however many operations name it.
    fn canonical(&self, pointer: &str) -> String {
        let mut pointer = pointer.to_owned();
        for _ in 0..32 {
            match self
                .doc
                .pointer(&pointer)
                .and_then(|v| v.get("$ref"))
                .and_then(Value::as_str)
                .and_then(|r| r.strip_prefix('#'))
            {
                Some(target) if self.doc.pointer(target).is_some() => pointer = target.to_owned(),
                _ => break,
            }
        }
        pointer
    }

    fn compile(&self, pointer: &str, dir: Direction) -> Compiled {
        let raw = self
            .doc
            .pointer(pointer)
            .ok_or_else(|| format!("no schema at {pointer}"))?;
        let converted = {
            let mut memo = self
                .memo
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            Converter::new(&self.doc, &mut memo)
                .convert(raw, dir)
                .map_err(|e: SchemaError| format!("schema at {pointer}: {e}"))?
        };
        jsonschema::options()
            .with_draft(jsonschema::Draft::Draft4)
            .should_validate_formats(true)
            .should_ignore_unknown_formats(true)
            .build(&converted)
            .map_err(|e| format!("schema at {pointer} does not compile: {e}"))
    }
}

/// `s` escaped as one JSON pointer token (RFC 6901: `~` as `~0`, `/` as `~1`).
pub(super) fn token(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}
