//! Shared rules of the `/_sandbox/` control paths of both peers (the API emulator and every pod's
//! Dataplane endpoint), so they read and answer alike:
//!
//! - request bodies are JSON whatever the `Content-Type` (plain `curl -d` sends
//!   `application/x-www-form-urlencoded`);
//! - a fault with an unknown field, a field of the wrong type, a status outside `100..=599` or a
//!   contradictory combination is refused with 400 naming the field (the peer's native error);
//! - `POST /_sandbox/faults` answers `201 {"ok": true, "faults": N}` (N = faults now armed),
//!   `DELETE /_sandbox/faults` and `DELETE /_sandbox/requests` answer `200 {"ok": true}`;
//! - `GET /_sandbox/faults` lists the armed faults as posted plus `remaining` (`null` = every
//!   time); a fault whose `times` are used up is dropped.

use serde::de::DeserializeOwned;
use serde_json::Value;

/// One request as both peers' logs show it (`GET /_sandbox/requests`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RequestRecord {
    /// HTTP method.
    pub method: String,
    /// Path without the query.
    pub path: String,
    /// Raw query string (empty when none).
    pub query: String,
    /// HTTP status answered; 0 when the connection was dropped by a fault.
    pub status: u16,
    /// Arrival time, RFC 3339.
    pub at: String,
    /// The client's `User-Agent` ("" when none): tells two controllers' requests apart.
    #[serde(default)]
    pub user_agent: String,
}

/// Parses a control body as JSON regardless of its content type. Errors name the offending field:
/// serde names unknown fields itself; for a value of the wrong type the fields are tried one by one.
///
/// # Errors
/// A message for a 400 answer.
pub fn parse_json<T: DeserializeOwned>(body: &[u8]) -> Result<T, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("body is not JSON: {e}"))?;
    let Value::Object(map) = &v else {
        return Err("body must be a JSON object".into());
    };
    serde_json::from_value::<T>(v.clone()).map_err(|e| {
        let e = e.to_string();
        if e.contains("unknown field") {
            return e;
        }
        for (k, val) in map {
            let one = Value::Object([(k.clone(), val.clone())].into_iter().collect());
            if let Err(fe) = serde_json::from_value::<T>(one)
                && !fe.to_string().starts_with("missing field")
            {
                return format!("{k}: {fe}");
            }
        }
        e
    })
}

/// Checks a fault's `status` (an HTTP status, `100..=599`).
///
/// # Errors
/// A message naming the field.
pub fn check_status(status: Option<u16>) -> Result<(), String> {
    match status {
        Some(s) if !(100..=599).contains(&s) => {
            Err(format!("status: {s} is not an HTTP status (100..=599)"))
        }
        _ => Ok(()),
    }
}

/// Checks the fields common to request faults of both peers.
///
/// # Errors
/// A message naming the offending field.
pub fn check_request_fault(
    status: Option<u16>,
    retry_after_s: Option<u64>,
    delay_ms: Option<u64>,
    drop: bool,
    end_watch: bool,
) -> Result<(), String> {
    check_status(status)?;
    if drop && status.is_some() {
        return Err("drop: a dropped connection has no status; give one of drop and status".into());
    }
    if retry_after_s.is_some() && status.is_none() {
        return Err("retry_after_s: only sent with a status".into());
    }
    if status.is_none() && !drop && delay_ms.unwrap_or(0) == 0 && !end_watch {
        return Err(
            "status: the fault does nothing (it would forward every request); give status, drop \
             or delay_ms"
                .into(),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct F {
        path: Option<String>,
        status: Option<u16>,
    }

    #[test]
    fn errors_name_the_field() {
        let e = parse_json::<F>(br#"{"path":"x","stauts":500}"#)
            .err()
            .unwrap_or_default();
        assert!(e.contains("stauts"), "{e}");
        let e = parse_json::<F>(br#"{"path":"x","status":"500"}"#)
            .err()
            .unwrap_or_default();
        assert!(e.starts_with("status:"), "{e}");
        assert!(parse_json::<F>(b"[1]").is_err());
        assert!(
            check_status(Some(99))
                .err()
                .unwrap_or_default()
                .contains("status")
        );
        assert!(check_status(Some(600)).is_err());
        assert!(check_status(Some(599)).is_ok());
        assert!(check_request_fault(None, None, None, false, false).is_err());
        assert!(check_request_fault(Some(500), None, None, true, false).is_err());
        assert!(check_request_fault(None, Some(1), Some(5), false, false).is_err());
        assert!(check_request_fault(None, None, Some(5), false, false).is_ok());
    }
}
