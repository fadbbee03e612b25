//! observed-v3.4.md, "Common to every answer" and "Raw configuration": one test per row.

use serde_json::json;

use super::*;

/// Row: every answer, errors included, carries `Configuration-Version` (0 for an unknown
/// transaction id); errors are `{code, message}`.
#[tokio::test]
async fn observed_every_answer_carries_configuration_version() {
    let (_l, dp) = stand_in_pod().await;
    let v = dp.version().await.to_string();
    // A path the spec does not list and a malformed reload id break it on purpose.
    let none: &[OffSpec<'_>] = &[];
    for (method, path, status, off) in [
        ("GET", "configuration/version", 200, none),
        ("GET", "configuration/raw", 200, none),
        ("GET", "configuration/backends/nope", 404, none),
        ("GET", "/v3/no/such/path", 404, &[(NO_OPERATION, "/path")]),
        (
            "GET",
            "reloads/not-an-id",
            400,
            &[("getReload", "/parameters/path/id")],
        ),
        ("DELETE", "transactions/nope", 404, none),
        ("POST", "configuration/raw?version=999", 409, none),
    ] {
        let body = if method == "POST" {
            Body::Text("global\n")
        } else {
            Body::None
        };
        let r = if off.is_empty() {
            dp.call(method, path, body).await
        } else {
            dp.call_off_spec(method, path, body, off).await
        };
        assert_eq!(r.status, status, "{method} {path}: {r:?}");
        assert_eq!(
            r.header("configuration-version"),
            Some(v.as_str()),
            "{method} {path}"
        );
        if status >= 400 {
            assert_eq!(r.json()["code"], status, "{method} {path}: {}", r.text);
            assert!(!r.message().is_empty(), "{method} {path}");
        }
    }
    let r = dp
        .get("configuration/backends?transaction_id=no-such-transaction")
        .await;
    assert_eq!(r.status, 404);
    assert_eq!(r.header("configuration-version"), Some("0"));
    let unauthenticated =
        dp.c.get(dp.url("configuration/version"))
            .send()
            .await
            .unwrap();
    assert_eq!(unauthenticated.status(), 401);
    assert_eq!(
        unauthenticated.headers()["configuration-version"]
            .to_str()
            .unwrap(),
        v
    );
}

/// Row: missing or wrong credentials: 401 with `Www-Authenticate: Basic realm="API"`.
#[tokio::test]
async fn observed_401_names_the_basic_realm_api() {
    let (_l, dp) = stand_in_pod().await;
    for auth in [None, Some(("admin", "wrong"))] {
        let mut req = dp.c.get(dp.url("/v3/info"));
        if let Some((u, p)) = auth {
            req = req.basic_auth(u, Some(p));
        }
        let r = req.send().await.unwrap();
        assert_eq!(r.status(), 401);
        assert_eq!(r.headers()["www-authenticate"], "Basic realm=\"API\"");
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(body["code"], 401);
    }
    assert_eq!(dp.get("/v3/info").await.status, 200);
}

/// Row: `GET configuration/version`: 200, a bare number.
#[tokio::test]
async fn observed_get_version_is_a_bare_number() {
    let (_l, dp) = stand_in_pod().await;
    let r = dp.get("configuration/version").await;
    assert_eq!(r.status, 200);
    assert!(r.text.trim().parse::<u64>().is_ok(), "{}", r.text);
}

/// Row: `GET configuration/raw`: the file as on disk; after the API wrote it, it begins with
/// `# _md5hash=` and `# _version=N`, and a `Configuration-Checksum` header comes with it.
#[tokio::test]
async fn observed_get_raw_is_the_file_with_its_header_lines_and_checksum() {
    let (l, dp) = real_pod().await;
    let cfg = read(&format!("{CORPUS}/basic/two-servers.cfg"));
    let r = dp.push(&cfg, "").await;
    assert_eq!(r.status, 202, "{}", r.text);
    let v = dp.version().await;
    let raw = dp.get("configuration/raw").await;
    assert_eq!(raw.status, 200);
    assert!(
        raw.header("content-type")
            .unwrap()
            .starts_with("text/plain")
    );
    let checksum = md5_hex(cfg.as_bytes());
    assert_eq!(
        raw.header("configuration-checksum"),
        Some(checksum.as_str())
    );
    assert_eq!(
        raw.text,
        format!("# _md5hash={checksum}\n# _version={v}\n{cfg}")
    );
    let on_disk = read(
        &l.pod
            .dir
            .join("etc-haproxy/haproxy.cfg")
            .display()
            .to_string(),
    );
    assert_eq!(raw.text, on_disk, "the file HAProxy loads");
}

/// Row: `POST raw?version=N`: 202 + Reload-Id, version N+1; an identical configuration still
/// bumps the version and reloads.
#[tokio::test]
async fn observed_raw_push_202_reload_id_and_version_plus_one_even_when_identical() {
    let (l, dp) = real_pod().await;
    let cfg = render("01-basic", "haproxy.cfg").replace("render 01-basic", "render raw-push");
    let id_shape = regex::Regex::new(r"^\d{4}-\d{2}-\d{2}-\d+$").unwrap();
    for round in 0..2 {
        let v = dp.version().await;
        let reloads = dp.reload_count().await;
        let r = dp.push(&cfg, "").await;
        assert_eq!(r.status, 202, "round {round}: {}", r.text);
        assert_eq!(
            r.header("configuration-version"),
            Some((v + 1).to_string().as_str())
        );
        let id = r.reload_id();
        assert!(id_shape.is_match(&id), "{id}");
        assert_eq!(dp.wait_reload(&id).await["status"], "succeeded");
        assert_eq!(dp.version().await, v + 1);
        assert_eq!(
            dp.reload_count().await,
            reloads + 1,
            "round {round} reloaded"
        );
    }
    assert_eq!(curl(&l.pod, "http", 80, None, "/"), "render raw-push");
}

/// Row: `POST raw` with `skip_reload` or `force_reload`: 201, no Reload-Id.
#[tokio::test]
async fn observed_raw_push_skip_or_force_reload_201_without_reload_id() {
    let (l, dp) = real_pod().await;
    let cfg = render("01-basic", "haproxy.cfg");
    // (the render's text replaced by, flags, what HAProxy then serves, why)
    for (text, flags, served, why) in [
        (
            "skipped",
            "&skip_reload=true",
            "render 01-basic",
            "not reloaded",
        ),
        (
            "forced",
            "&force_reload=true",
            "forced",
            "reloaded before the answer",
        ),
    ] {
        let r = dp.push(&cfg.replace("render 01-basic", text), flags).await;
        assert_eq!((r.status, r.header("reload-id")), (201, None), "{}", r.text);
        assert_eq!(curl(&l.pod, "http", 80, None, "/"), served, "{why}");
    }
}

/// Row: `POST raw` with `only_validate`: 202 (not 200), nothing written.
#[tokio::test]
async fn observed_raw_push_only_validate_202_nothing_written() {
    let (_l, dp) = stand_in_pod().await;
    let (v, before) = (dp.version().await, dp.raw().await);
    let r = dp
        .push(
            &render("01-basic", "haproxy.cfg").replace("render 01-basic", "validated"),
            "&only_validate=true",
        )
        .await;
    assert_eq!((r.status, r.header("reload-id")), (202, None), "{}", r.text);
    assert_eq!((dp.version().await, dp.raw().await), (v, before));
}

/// Row: `POST raw`, stale version: 409 `version mismatch: version in configuration file is N,
/// given version is M`.
#[tokio::test]
async fn observed_raw_push_stale_version_409_version_mismatch() {
    let (_l, dp) = stand_in_pod().await;
    let v = dp.version().await;
    let r = dp
        .call(
            "POST",
            &format!("configuration/raw?version={}", v + 4),
            Body::Text(&render("01-basic", "haproxy.cfg")),
        )
        .await;
    assert_eq!(r.status, 409);
    assert_eq!(
        r.message(),
        format!(
            "version mismatch: version in configuration file is {v}, given version is {}",
            v + 4
        )
    );
    assert_eq!(
        r.header("configuration-version"),
        Some(v.to_string().as_str())
    );
}

/// Row: `POST raw`, invalid configuration: 400 `validation error: exit status 1: ...`
/// (HAProxy's message); version unchanged.
#[tokio::test]
async fn observed_raw_push_invalid_400_validation_error_version_unchanged() {
    let (_l, dp) = real_pod().await;
    let v = dp.version().await;
    let r = dp.push(&render("08-invalid", "haproxy.cfg"), "").await;
    assert_eq!(r.status, 400);
    let msg = r.message();
    assert!(
        msg.starts_with("validation error: exit status 1: ")
            && msg.contains("[ALERT]")
            && msg.contains("unknown keyword 'no-such-directive'"),
        "{msg}"
    );
    let r = dp.push(&render("09-missing-map", "haproxy.cfg"), "").await;
    assert_eq!(r.status, 400);
    assert!(r.message().contains("absent.map"), "{}", r.text);
    assert_eq!(dp.version().await, v);
}

/// Row: `POST raw` without a version / with an empty body / with a JSON content type:
/// 400 / 400 / 415.
#[tokio::test]
async fn observed_raw_push_without_version_empty_or_json_400_400_415() {
    let (_l, dp) = stand_in_pod().await;
    let v = dp.version().await;
    let cfg = render("01-basic", "haproxy.cfg");
    // The spec does not require `version` on this operation: only the real API refuses it.
    let r = dp.call("POST", "configuration/raw", Body::Text(&cfg)).await;
    assert_eq!(r.status, 400, "{}", r.text);
    let path = format!("configuration/raw?version={v}");
    let r = dp
        .call_off_spec(
            "POST",
            &path,
            Body::Text(""),
            &[("postHAProxyConfiguration", "/body")],
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.text);
    let r = dp
        .call_off_spec(
            "POST",
            &path,
            Body::Json(json!({"config": cfg})),
            &[("postHAProxyConfiguration", "/headers/content-type")],
        )
        .await;
    assert_eq!(r.status, 415, "{}", r.text);
    assert_eq!(dp.version().await, v);
}
