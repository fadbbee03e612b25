//! Errors as `meta/v1` `Status` objects (apiserver-emulation.md §7): every 4xx/5xx answer carries a
//! JSON body whose `code` equals the HTTP status and whose `reason` is the one a real API server uses,
//! because clients (kube's `is_*` helpers, kube-lease-manager) key on the body, not the status line.

use serde_json::{Value, json};

/// One field-level cause of an `Invalid` or `Conflict` error (`details.causes[]`).
#[derive(Debug, Clone, PartialEq)]
pub struct Cause {
    /// `FieldValueRequired`, `FieldValueInvalid`, `FieldManagerConflict`, ...
    pub reason: String,
    /// Human text, e.g. `Required value`.
    pub message: String,
    /// Field path, e.g. `spec.name` (SSA conflicts use `.spec.name`).
    pub field: String,
}

/// An error answer: HTTP status plus the `Status` body fields.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status and `Status.code`.
    pub code: u16,
    /// `Status.reason` (empty = omitted, as for unknown internal errors).
    pub reason: String,
    /// `Status.message`.
    pub message: String,
    /// `Status.details` (boxed: results carrying an `ApiError` stay small).
    pub details: Box<Details>,
}

/// The `details` of a `Status`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Details {
    /// `details.name`.
    pub name: Option<String>,
    /// `details.group`.
    pub group: Option<String>,
    /// `details.kind` (the plural resource name for most errors, as the real server writes it).
    pub kind: Option<String>,
    /// `details.causes`.
    pub causes: Vec<Cause>,
    /// `Retry-After` header and `details.retryAfterSeconds`.
    pub retry_after_s: Option<u64>,
}

impl ApiError {
    /// A bare error with a code, reason and message.
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason: reason.to_owned(),
            message: message.into(),
            details: Box::default(),
        }
    }

    /// Adds `details.name/group/kind`.
    pub fn details(mut self, group: &str, kind: &str, name: &str) -> Self {
        if !group.is_empty() {
            self.details.group = Some(group.to_owned());
        }
        self.details.kind = Some(kind.to_owned());
        if !name.is_empty() {
            self.details.name = Some(name.to_owned());
        }
        self
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 404 NotFound for `plural "name"`.
    pub fn not_found(group: &str, plural: &str, name: &str) -> Self {
        let what = qualified(group, plural);
        Self::new(404, "NotFound", format!("{what} \"{name}\" not found"))
            .details(group, plural, name)
    }

    /// 404 for a path that names no resource.
    pub fn no_route(path: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({path})"),
        )
    }

    /// 409 AlreadyExists.
    pub fn already_exists(group: &str, plural: &str, name: &str) -> Self {
        let what = qualified(group, plural);
        Self::new(
            409,
            "AlreadyExists",
            format!("{what} \"{name}\" already exists"),
        )
        .details(group, plural, name)
    }

    /// 409 Conflict for a stale resourceVersion (the exact upstream wording).
    pub fn stale(group: &str, plural: &str, name: &str) -> Self {
        let what = qualified(group, plural);
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {what} \"{name}\": the object has been modified; \
                 please apply your changes to the latest version and try again"
            ),
        )
        .details(group, plural, name)
    }

    /// 422 Invalid with field causes; `kind` is the Kind (`HAProxyCfg`), as upstream writes it.
    pub fn invalid(group: &str, kind: &str, name: &str, causes: Vec<Cause>) -> Self {
        let what = if group.is_empty() {
            kind.to_owned()
        } else {
            format!("{kind}.{group}")
        };
        let list: Vec<String> = causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        let joined = if list.len() == 1 {
            list[0].clone()
        } else {
            format!("[{}]", list.join(", "))
        };
        let mut e = Self::new(
            422,
            "Invalid",
            format!("{what} \"{name}\" is invalid: {joined}"),
        )
        .details(group, kind, name);
        e.details.causes = causes;
        e
    }

    /// 500 with no reason: how an unknown storage error (e.g. etcd's) reaches the client.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "", message)
    }

    /// 415 UnsupportedMediaType.
    pub fn unsupported_media(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml (got {content_type})"
            ),
        )
    }

    /// The reason a real server gives for a bare status code (fault answers).
    pub fn from_code(code: u16) -> Self {
        let reason = match code {
            400 => "BadRequest",
            401 => "Unauthorized",
            403 => "Forbidden",
            404 => "NotFound",
            405 => "MethodNotAllowed",
            409 => "Conflict",
            410 => "Expired",
            413 => "RequestEntityTooLarge",
            415 => "UnsupportedMediaType",
            422 => "Invalid",
            429 => "TooManyRequests",
            500 => "InternalError",
            503 => "ServiceUnavailable",
            504 => "Timeout",
            _ => "",
        };
        let message = match code {
            429 => "the server has received too many requests and has asked us to try again later"
                .to_owned(),
            500 => "Internal error occurred: injected fault".to_owned(),
            503 => "the server is currently unable to handle the request".to_owned(),
            504 => "the server was unable to return a response in the time allotted".to_owned(),
            _ => format!("injected fault (HTTP {code})"),
        };
        Self::new(code, reason, message)
    }

    /// The `Status` body.
    pub fn to_status(&self) -> Value {
        let mut v = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "code": self.code,
        });
        if !self.reason.is_empty() {
            v["reason"] = json!(self.reason);
        }
        let mut details = serde_json::Map::new();
        if let Some(n) = &self.details.name {
            details.insert("name".into(), json!(n));
        }
        if let Some(g) = &self.details.group {
            details.insert("group".into(), json!(g));
        }
        if let Some(k) = &self.details.kind {
            details.insert("kind".into(), json!(k));
        }
        if !self.details.causes.is_empty() {
            let causes: Vec<Value> = self
                .details
                .causes
                .iter()
                .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
                .collect();
            details.insert("causes".into(), Value::Array(causes));
        }
        if let Some(s) = self.details.retry_after_s {
            details.insert("retryAfterSeconds".into(), json!(s));
        }
        if !details.is_empty() {
            v["details"] = Value::Object(details);
        }
        v
    }
}

/// `plural` or `plural.group`, the resource as upstream messages name it.
pub fn qualified(group: &str, plural: &str) -> String {
    if group.is_empty() {
        plural.to_owned()
    } else {
        format!("{plural}.{group}")
    }
}

/// Result alias of the emulator's handlers.
pub type ApiResult<T> = Result<T, ApiError>;
