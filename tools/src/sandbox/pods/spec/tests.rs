//! The checks against the published documents themselves (no pod): every schema compiles, and
//! each kind of break is found and named.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use axum::http::{HeaderMap, HeaderValue};
use serde_json::{Value, json};

use super::check::check;
use super::*;

fn v32() -> Arc<Contract> {
    Contract::load(SpecVersion::V32).unwrap()
}

fn req(method: &str, path_query: &str, body: Option<(&str, &str)>) -> SeenRequest {
    let (path, query) = path_query.split_once('?').unwrap_or((path_query, ""));
    SeenRequest {
        method: method.into(),
        path: path.into(),
        query: query.into(),
        content_type: body.map(|(ct, _)| ct.to_owned()),
        body: body.map_or_else(Default::default, |(_, b)| b.as_bytes().to_vec().into()),
    }
}

fn answer(status: u16, headers: &[(&str, &str)], body: Option<(&str, &str)>) -> SeenAnswer {
    let mut h = HeaderMap::new();
    for (k, v) in headers {
        h.insert(
            axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    if let Some((ct, _)) = body {
        h.insert("content-type", HeaderValue::from_str(ct).unwrap());
    }
    SeenAnswer {
        status,
        headers: h,
        body: body.map_or_else(Default::default, |(_, b)| b.as_bytes().to_vec().into()),
    }
}

/// (side, operationId, field) of each violation.
fn found(r: &SeenRequest, a: Option<&SeenAnswer>) -> Vec<(Side, Option<String>, String)> {
    check(&v32(), r, a)
        .violations
        .into_iter()
        .map(|v| (v.side, v.operation.and_then(|o| o.id), v.field))
        .collect()
}

fn one(side: Side, op: &str, field: &str) -> Vec<(Side, Option<String>, String)> {
    vec![(side, Some(op.to_owned()), field.to_owned())]
}

const JSON: &str = "application/json";

#[test]
fn every_schema_of_every_published_document_compiles() {
    for version in [SpecVersion::V30, SpecVersion::V32, SpecVersion::V33] {
        let c = Contract::load(version).unwrap();
        let mut pointers = Vec::new();
        let collect = |v: &Value, base: &str, out: &mut Vec<(String, schema::Direction)>| {
            for (ct, _) in v
                .get("content")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
            {
                out.push((
                    format!("{base}/content/{}/schema", document::token(ct)),
                    schema::Direction::Response,
                ));
            }
        };
        for (p, item) in c.doc()["paths"].as_object().unwrap() {
            for (m, op) in item.as_object().unwrap() {
                let op_ptr = format!("/paths/{}/{m}", document::token(p));
                if let Some(rb) = op.get("requestBody") {
                    for (ct, _) in rb["content"].as_object().unwrap() {
                        pointers.push((
                            format!(
                                "{op_ptr}/requestBody/content/{}/schema",
                                document::token(ct)
                            ),
                            schema::Direction::Request,
                        ));
                    }
                }
                for (st, r) in op["responses"].as_object().unwrap() {
                    collect(
                        r,
                        &format!("{op_ptr}/responses/{}", document::token(st)),
                        &mut pointers,
                    );
                }
            }
        }
        for (name, r) in c.doc()["components"]["responses"].as_object().unwrap() {
            collect(r, &format!("/components/responses/{name}"), &mut pointers);
        }
        assert!(pointers.len() > 500, "{version}: {}", pointers.len());
        let broken: Vec<String> = pointers
            .iter()
            .filter(|(p, _)| c.doc().pointer(p).is_some())
            .filter_map(|(p, d)| c.validator(p, *d).as_ref().as_ref().err().cloned())
            .collect();
        assert!(broken.is_empty(), "{version}: {broken:#?}");
    }
}

#[test]
fn requests_unknown_path_method_and_parameters_are_named() {
    let unmatched = |field: &str| vec![(Side::Request, None, field.to_owned())];
    let transaction_version = one(
        Side::Request,
        "startTransaction",
        "/parameters/query/version",
    );
    for (method, path, expected) in [
        (
            "GET",
            "/v3/services/haproxy/configuration/nonsense",
            unmatched("/path"),
        ),
        (
            "GET",
            "/services/haproxy/configuration/version",
            unmatched("/path"),
        ),
        (
            "PATCH",
            "/v3/services/haproxy/configuration/global",
            unmatched("/method"),
        ),
        (
            "GET",
            "/v3/services/haproxy/configuration/version?verbose=1",
            one(
                Side::Request,
                "getConfigurationVersion",
                "/parameters/query/verbose",
            ),
        ),
        (
            "POST",
            "/v3/services/haproxy/transactions?version=three",
            transaction_version.clone(),
        ),
        (
            "POST",
            "/v3/services/haproxy/transactions",
            transaction_version,
        ),
        (
            "GET",
            "/v3/services/haproxy/reloads/yesterday",
            one(Side::Request, "getReload", "/parameters/path/id"),
        ),
    ] {
        assert_eq!(
            found(&req(method, path, None), None),
            expected,
            "{method} {path}"
        );
    }
}

#[test]
fn request_bodies_are_held_to_the_schema() {
    let path = "/v3/services/haproxy/configuration/backends/be/servers/s1?version=2";
    let ok = r#"{"name": "s1", "address": "10.0.0.1", "port": 80, "weight": 10}"#;
    assert_eq!(found(&req("PUT", path, Some((JSON, ok))), None), vec![]);
    let typo = r#"{"name": "s1", "address": "10.0.0.1", "wieght": 10}"#;
    assert_eq!(
        found(&req("PUT", path, Some((JSON, typo))), None),
        one(Side::Request, "replaceServerBackend", "/body/wieght")
    );
    // each property the schema does not define is named, not the body as a whole
    let two = r#"{"name": "s1", "address": "10.0.0.1", "wieght": 10, "another": {"x": 1}}"#;
    let mut got = found(&req("PUT", path, Some((JSON, two))), None);
    got.sort();
    assert_eq!(
        got,
        [
            one(Side::Request, "replaceServerBackend", "/body/another"),
            one(Side::Request, "replaceServerBackend", "/body/wieght")
        ]
        .concat()
    );
    let no_name = r#"{"address": "10.0.0.1"}"#;
    assert_eq!(
        found(&req("PUT", path, Some((JSON, no_name))), None),
        one(Side::Request, "replaceServerBackend", "/body/name")
    );
    let wrong_type = r#"{"name": "s1", "address": "10.0.0.1", "port": "80"}"#;
    assert_eq!(
        found(&req("PUT", path, Some((JSON, wrong_type))), None),
        one(Side::Request, "replaceServerBackend", "/body/port")
    );
    // nullable fields take null
    let null = r#"{"name": "s1", "address": "10.0.0.1", "port": null, "weight": null}"#;
    assert_eq!(found(&req("PUT", path, Some((JSON, null))), None), vec![]);
    assert_eq!(
        found(&req("PUT", path, Some(("text/plain", ok))), None),
        one(
            Side::Request,
            "replaceServerBackend",
            "/headers/content-type"
        )
    );
    assert_eq!(
        found(&req("PUT", path, None), None),
        one(Side::Request, "replaceServerBackend", "/body")
    );
    // readOnly fields of the runtime server are refused in a request
    let rt = "/v3/services/haproxy/runtime/backends/be/servers/s1";
    let body = r#"{"admin_state": "ready", "weight": 42}"#;
    assert_eq!(found(&req("PUT", rt, Some((JSON, body))), None), vec![]);
    let body = r#"{"admin_state": "ready", "name": "s1"}"#;
    assert_eq!(
        found(&req("PUT", rt, Some((JSON, body))), None),
        one(Side::Request, "replaceRuntimeServer", "/body/name")
    );
    // the spec's capture_id on an http-request rule is a field like any other
    let rule = "/v3/services/haproxy/configuration/frontends/fe/http_request_rules/0?version=2";
    let body = r#"{"type": "capture", "capture_sample": "req.hdr(host)", "capture_id": 0}"#;
    let r = req("PUT", rule, Some((JSON, body)));
    assert_eq!(found(&r, None), vec![]);
    // ... so an answer calling it unknown breaks the contract (a 400 is listed, but not for that)
    let bad_request = |message: &str| {
        let body = format!(r#"{{"code": 400, "message": "{message}"}}"#);
        answer(400, &[("configuration-version", "2")], Some((JSON, &body)))
    };
    assert_eq!(
        found(&r, Some(&bad_request("capture_id: unknown field"))),
        one(
            Side::Response,
            "replaceHTTPRequestRuleFrontend",
            "/body/capture_id"
        )
    );
    assert_eq!(
        found(&r, Some(&bad_request("capture_sample: bad sample"))),
        vec![]
    );
}

#[test]
fn answers_status_headers_and_bodies_are_held_to_the_spec() {
    let r = req(
        "PUT",
        "/v3/services/haproxy/configuration/global?version=2",
        Some((JSON, r#"{"daemon": true}"#)),
    );
    let broken = |field: &str| one(Side::Response, "replaceGlobal", field);
    let version_2 = [("configuration-version", "2")];
    let method_not_allowed = r#"{"code": 405, "message": "method not allowed"}"#;
    for (why, a, expected) in [
        (
            "405 with an empty body: not listed, and not an error with the error body",
            answer(405, &version_2, None),
            broken("/status"),
        ),
        (
            "405 with the error body",
            answer(405, &version_2, Some((JSON, method_not_allowed))),
            vec![],
        ),
        (
            "default covers errors only",
            answer(204, &[], None),
            broken("/status"),
        ),
        (
            "202 needs its Reload-ID",
            answer(202, &[], Some((JSON, r#"{"daemon": true}"#))),
            broken("/headers/Reload-ID"),
        ),
        (
            "202 with a body that is not the schema's",
            answer(
                202,
                &[("reload-id", "2026-12-02-1")],
                Some((JSON, r#"{"daemon": "yes"}"#)),
            ),
            broken("/body/daemon"),
        ),
    ] {
        assert_eq!(found(&r, Some(&a)), expected, "{why}");
    }
    // a queued reload without an id is what the spec allows
    let r = req("GET", "/v3/services/haproxy/reloads/2026-12-02-1", None);
    let a = answer(200, &[], Some((JSON, r#"{"status": "in_progress"}"#)));
    assert_eq!(found(&r, Some(&a)), vec![]);
    let a = answer(200, &[], Some((JSON, r#"{"status": "queued"}"#)));
    assert_eq!(
        found(&r, Some(&a)),
        one(Side::Response, "getReload", "/body/status")
    );
    // a body where the spec declares none
    let r = req(
        "PUT",
        "/v3/services/haproxy/storage/maps/hosts.map",
        Some(("text/plain", "a b\n")),
    );
    let a = answer(204, &[], Some((JSON, "{}")));
    assert_eq!(
        found(&r, Some(&a)),
        one(Side::Response, "replaceStorageMapFile", "/body")
    );
}

#[test]
fn observed_differences_are_allowed_by_name_only() {
    let c = v32();
    // a raw push (text/plain `global`) with the query `q`
    let raw_push = |q: &str| {
        req(
            "POST",
            &format!("/v3/services/haproxy/configuration/raw?{q}"),
            Some(("text/plain", "global\n")),
        )
    };
    // json-errors: a stale raw push answers JSON where the spec says text/plain
    let r = raw_push("version=9");
    let a = answer(
        409,
        &[("configuration-version", "3")],
        Some((JSON, r#"{"code": 409, "message": "version mismatch"}"#)),
    );
    let f = check(&c, &r, Some(&a));
    assert!(f.violations.is_empty(), "{:?}", f.violations);
    assert_eq!(f.allowed, vec![&allow::JSON_ERRORS]);
    // ... but a JSON body that is not the error schema is still a violation
    let a = answer(
        409,
        &[("configuration-version", "3")],
        Some((JSON, r#"{"code": "x"}"#)),
    );
    assert!(!check(&c, &r, Some(&a)).violations.is_empty());
    // only_validate: 202 without Reload-ID
    let r = raw_push("version=3&only_validate=true");
    let a = answer(
        202,
        &[("configuration-version", "3")],
        Some(("text/plain", "global\n")),
    );
    let f = check(&c, &r, Some(&a));
    assert!(f.violations.is_empty(), "{:?}", f.violations);
    assert_eq!(f.allowed, vec![&allow::ONLY_VALIDATE_202]);
    // without only_validate the same answer misses its Reload-ID
    let r = raw_push("version=3");
    assert_eq!(
        found(&r, Some(&a)),
        one(
            Side::Response,
            "postHAProxyConfiguration",
            "/headers/Reload-ID"
        )
    );
    // a write inside a transaction: 202 without Reload-ID
    let body = r#"{"name": "s1", "address": "10.0.0.1", "weight": 10}"#;
    let r = req(
        "PUT",
        "/v3/services/haproxy/configuration/backends/be/servers/s1?transaction_id=abc",
        Some((JSON, body)),
    );
    let a = answer(202, &[], Some((JSON, body)));
    let f = check(&c, &r, Some(&a));
    assert!(f.violations.is_empty(), "{:?}", f.violations);
    assert_eq!(f.allowed, vec![&allow::NO_RELOAD_ID_IN_TRANSACTION]);
    // the header's case does not matter (HTTP), the real API's `Reload-Id` is the spec's
    let r = req(
        "PUT",
        "/v3/services/haproxy/configuration/backends/be/servers/s1?version=3",
        Some((JSON, body)),
    );
    let a = answer(202, &[("Reload-Id", "2026-12-02-0")], Some((JSON, body)));
    assert_eq!(found(&r, Some(&a)), vec![]);
}

#[test]
fn multipart_forms_are_held_to_their_schema() {
    let form = "--XyZ\r\nContent-Disposition: form-data; name=\"file_upload\"; filename=\"a.pem\"\r\n\r\nPEM\r\n--XyZ--\r\n";
    let r = SeenRequest {
        method: "POST".into(),
        path: "/v3/services/haproxy/storage/ssl_certificates".into(),
        query: String::new(),
        content_type: Some("multipart/form-data; boundary=XyZ".into()),
        body: form.as_bytes().to_vec().into(),
    };
    assert_eq!(found(&r, None), vec![]);
    let r = SeenRequest {
        content_type: Some("multipart/form-data".into()),
        ..r
    };
    assert_eq!(
        found(&r, None),
        one(Side::Request, "createStorageSSLCertificate", "/body")
    );
}

#[test]
fn the_reported_api_version_picks_the_document() {
    assert_eq!(
        SpecVersion::for_api_version("v3.2.6 haptic-sandbox"),
        Some(SpecVersion::V32)
    );
    assert_eq!(
        SpecVersion::for_api_version("v3.4.0-dev 7e1d2"),
        Some(SpecVersion::V33)
    );
    assert_eq!(
        SpecVersion::for_api_version("v3.1.2"),
        Some(SpecVersion::V30)
    );
    assert_eq!(SpecVersion::for_api_version("v2.9.1"), None);
    assert_eq!(SpecVersion::for_api_version("dev"), None);
    let log = PodSpecLog::new("p", SpecCheck::Record);
    let info = answer(
        200,
        &[],
        Some((JSON, r#"{"api": {"version": "v3.3.1 x"}, "system": {}}"#)),
    );
    log.record(&req("GET", "/v3/info", None), Some(&info));
    assert_eq!(log.listed()["spec"], json!("v33-spec.json"));
    assert!(log.violations().is_empty(), "{:?}", log.violations());
}

#[test]
fn a_missing_document_names_the_path_and_the_fix() {
    let err = Contract::read(
        SpecVersion::V32,
        std::path::Path::new("/nonexistent/v32-spec.json"),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("/nonexistent/v32-spec.json"), "{err}");
    assert!(err.contains("shared/reference/dataplaneapi/"), "{err}");
    assert!(err.contains("SpecCheck::Off"), "{err}");
}
