//! The Dataplane API client against an in-test axum server that gives the answers
//! ecosystem.md A documents (409 with `Configuration-Version`, 202 + `Reload-Id`, multipart
//! storage, 404, 500, 429 + Retry-After, slow answers).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Multipart, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use haptic::core::ErrorKind;
use haptic::dataplane::{
    BasicAuth, ClientSettings, ConfigVersion, Dataplane, DataplaneClient, DataplaneError, Endpoint,
    HaproxyHealth, PushApplied, PushOptions, ReloadId, ReloadStatus, StorageKind,
    StorageWriteOptions, normalize_raw_config,
};
use reqwest::Url;
use serde_json::json;

const CURRENT_VERSION: i64 = 7;
const RUNNING: &str = "# _version=7\n# _md5hash=abc\nglobal\n  daemon\n";

/// One request as the server saw it.
#[derive(Debug, Clone, Default)]
struct Seen {
    method: String,
    path: String,
    query: HashMap<String, String>,
    content_type: String,
    body: String,
    /// Multipart parts: (field name, file name, content).
    parts: Vec<(String, Option<String>, String)>,
}

type Log = Arc<Mutex<Vec<Seen>>>;

fn error_body(status: StatusCode, message: &str) -> Response {
    (
        status,
        axum::Json(json!({"code": status.as_u16(), "message": message})),
    )
        .into_response()
}

async fn require_auth(req: Request, next: Next) -> Response {
    // admin:secret
    let ok = req.headers().get(header::AUTHORIZATION)
        == Some(&HeaderValue::from_static("Basic YWRtaW46c2VjcmV0"));
    if ok {
        next.run(req).await
    } else {
        error_body(StatusCode::UNAUTHORIZED, "unauthorized")
    }
}

fn record(log: &Log, seen: Seen) {
    log.lock().unwrap().push(seen);
}

async fn push_raw(
    State(log): State<Log>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: String,
) -> Response {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    record(
        &log,
        Seen {
            method: "POST".into(),
            path: "raw".into(),
            query: query.clone(),
            content_type,
            body: body.clone(),
            parts: vec![],
        },
    );
    let version = query.get("version").cloned().unwrap_or_default();
    if version != CURRENT_VERSION.to_string() {
        let msg = format!(
            "version in configuration file is {CURRENT_VERSION}, given version is {version}"
        );
        let mut resp = error_body(StatusCode::CONFLICT, &msg);
        resp.headers_mut()
            .insert("Configuration-Version", HeaderValue::from(CURRENT_VERSION));
        return resp;
    }
    if body.contains("bogus") {
        return error_body(
            StatusCode::BAD_REQUEST,
            "[ALERT] config : parsing [haproxy.cfg:2] : unknown keyword 'bogus'",
        );
    }
    let flag = |k: &str| query.get(k).map(String::as_str) == Some("true");
    let mut resp = if flag("only_validate") {
        StatusCode::ACCEPTED.into_response()
    } else if flag("skip_reload") || flag("force_reload") {
        (StatusCode::CREATED, body).into_response()
    } else {
        let mut r = (StatusCode::ACCEPTED, body).into_response();
        r.headers_mut()
            .insert("Reload-Id", HeaderValue::from_static("2026-11-30-1"));
        r
    };
    if !flag("only_validate") {
        resp.headers_mut().insert(
            "Configuration-Version",
            HeaderValue::from(CURRENT_VERSION + 1),
        );
        resp.headers_mut()
            .insert("Configuration-Checksum", HeaderValue::from_static("def"));
    }
    resp
}

async fn reload(Path(id): Path<String>) -> Response {
    let (status, response) = match id.as_str() {
        "2026-11-30-1" => ("succeeded", ""),
        "2026-11-30-2" => ("failed", "[ALERT] cannot bind socket"),
        "2026-11-30-3" => ("in_progress", ""),
        _ => return error_body(StatusCode::NOT_FOUND, "reload not found"),
    };
    axum::Json(json!({"id": id, "status": status, "response": response, "reload_timestamp": 1_795_000_000}))
        .into_response()
}

async fn storage_create(
    State(log): State<Log>,
    Path(kind): Path<String>,
    mut multipart: Multipart,
) -> Response {
    let mut parts = Vec::new();
    while let Ok(Some(field)) = multipart.next_field().await {
        let name = field.name().unwrap_or_default().to_owned();
        let file_name = field.file_name().map(str::to_owned);
        let text = field.text().await.unwrap_or_default();
        parts.push((name, file_name, text));
    }
    let file_name = parts.iter().find_map(|p| p.1.clone()).unwrap_or_default();
    record(
        &log,
        Seen {
            method: "POST".into(),
            path: kind.clone(),
            parts,
            ..Seen::default()
        },
    );
    if file_name.starts_with("exists") {
        return error_body(StatusCode::CONFLICT, "file already exists");
    }
    let body = axum::Json(
        json!({"storage_name": file_name, "file": format!("/etc/haproxy/{kind}/{file_name}")}),
    );
    if kind == "ssl_certificates" {
        let mut r = (StatusCode::ACCEPTED, body).into_response();
        r.headers_mut()
            .insert("Reload-Id", HeaderValue::from_static("2026-11-30-4"));
        r
    } else {
        (StatusCode::CREATED, body).into_response()
    }
}

async fn storage_list(Path(kind): Path<String>) -> Response {
    axum::Json(json!([{"storage_name": "hosts.map", "file": format!("/etc/haproxy/{kind}/hosts.map"), "size": 4}]))
        .into_response()
}

async fn storage_get(Path((_kind, name)): Path<(String, String)>) -> Response {
    if name == "missing.map" {
        return error_body(StatusCode::NOT_FOUND, "file not found");
    }
    (
        [(header::CONTENT_TYPE, "application/octet-stream")],
        "a b\n",
    )
        .into_response()
}

async fn storage_put(
    State(log): State<Log>,
    Path((kind, name)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    record(
        &log,
        Seen {
            method: "PUT".into(),
            path: format!("{kind}/{name}"),
            query,
            content_type,
            body: String::from_utf8_lossy(&body).into_owned(),
            parts: vec![],
        },
    );
    let mut r = StatusCode::ACCEPTED.into_response();
    r.headers_mut()
        .insert("Reload-Id", HeaderValue::from_static("2026-11-30-5"));
    r
}

async fn storage_delete(Path((_kind, name)): Path<(String, String)>) -> Response {
    if name == "used.map" {
        return error_body(
            StatusCode::CONFLICT,
            "rejecting attempt to delete file used.map referenced in haproxy conf",
        );
    }
    StatusCode::NO_CONTENT.into_response()
}

async fn serve(router: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    addr
}

async fn documented_server() -> (SocketAddr, Log) {
    let log: Log = Arc::default();
    let router = Router::new()
        .route(
            "/v3/info",
            get(|| async { axum::Json(json!({"api": {"version": "v3.2.1 test", "build_date": "2026-01-01T00:00:00Z"}, "system": {"hostname": "pod-a"}})) }),
        )
        .route("/v3/health", get(|| async { axum::Json(json!({"haproxy": "up"})) }))
        .route(
            "/v3/services/haproxy/configuration/version",
            get(|| async { ([(header::CONTENT_TYPE, "application/json")], "7\n") }),
        )
        .route(
            "/v3/services/haproxy/configuration/raw",
            get(|| async {
                (
                    [("Configuration-Version", "7"), ("Configuration-Checksum", "abc")],
                    RUNNING,
                )
            })
            .post(push_raw),
        )
        .route("/v3/services/haproxy/reloads/{id}", get(reload))
        .route("/v3/services/haproxy/storage/{kind}", get(storage_list).post(storage_create))
        .route(
            "/v3/services/haproxy/storage/{kind}/{name}",
            get(storage_get).put(storage_put).delete(storage_delete),
        )
        .route("/v3/services/haproxy/runtime/{kind}", get(storage_list).post(storage_create))
        .route(
            "/v3/services/haproxy/runtime/{kind}/{name}",
            get(storage_get).put(storage_put).delete(storage_delete),
        )
        .layer(middleware::from_fn(require_auth))
        .with_state(log.clone());
    (serve(router).await, log)
}

fn settings(request_timeout: Duration) -> ClientSettings {
    ClientSettings {
        request_timeout,
        ..ClientSettings::default()
    }
}

fn client_for(addr: SocketAddr, timeout: Duration, auth: bool) -> DataplaneClient {
    let credentials = auth.then(|| BasicAuth {
        username: "admin".into(),
        password: "secret".into(),
    });
    Dataplane::new(&settings(timeout))
        .unwrap()
        .client(Endpoint::for_pod(addr.ip(), addr.port(), credentials))
}

async fn documented() -> (DataplaneClient, Log) {
    let (addr, log) = documented_server().await;
    (client_for(addr, Duration::from_secs(5), true), log)
}

#[tokio::test]
async fn reads_info_health_version_and_raw() {
    let (client, _) = documented().await;
    let info = client.info().await.unwrap();
    assert_eq!(info.api.version.as_deref(), Some("v3.2.1 test"));
    assert_eq!(client.health().await.unwrap().haproxy, HaproxyHealth::Up);
    assert_eq!(
        client.configuration_version().await.unwrap(),
        ConfigVersion(7)
    );
    let raw = client.raw_configuration().await.unwrap();
    assert_eq!(raw.version, ConfigVersion(7));
    assert_eq!(raw.configuration_checksum.as_deref(), Some("abc"));
    assert_eq!(normalize_raw_config(&raw.text), "global\n  daemon\n");
}

#[tokio::test]
async fn push_schedules_a_reload_and_reports_the_new_version() {
    let (client, log) = documented().await;
    let out = client
        .push_raw_configuration(
            "global\n  daemon\n",
            ConfigVersion(7),
            PushOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(out.applied, PushApplied::ReloadScheduled);
    assert_eq!(out.reload_id, Some(ReloadId("2026-11-30-1".into())));
    assert_eq!(out.version_after, Some(ConfigVersion(8)));
    assert_eq!(out.configuration_checksum.as_deref(), Some("def"));
    let seen = log.lock().unwrap().last().cloned().unwrap();
    assert_eq!(seen.query.get("version").map(String::as_str), Some("7"));
    assert_eq!(seen.query.len(), 1);
    assert!(seen.content_type.starts_with("text/plain"));
    assert_eq!(seen.body, "global\n  daemon\n");

    let info = client
        .reload_status(out.reload_id.as_ref().unwrap())
        .await
        .unwrap();
    assert_eq!(info.status, ReloadStatus::Succeeded);
}

#[tokio::test]
async fn push_options_map_to_query_flags_and_answers() {
    let (client, log) = documented().await;
    let skip = PushOptions {
        skip_reload: true,
        ..PushOptions::default()
    };
    let out = client
        .push_raw_configuration("global\n", ConfigVersion(7), skip)
        .await
        .unwrap();
    assert_eq!((out.applied, out.reload_id), (PushApplied::Written, None));
    let validate = PushOptions {
        only_validate: true,
        ..PushOptions::default()
    };
    let out = client
        .push_raw_configuration("global\n", ConfigVersion(7), validate)
        .await
        .unwrap();
    assert_eq!(
        (out.applied, out.reload_id, out.version_after),
        (PushApplied::ValidatedOnly, None, None)
    );
    let seen = log.lock().unwrap().clone();
    assert_eq!(
        seen[0].query.get("skip_reload").map(String::as_str),
        Some("true")
    );
    assert_eq!(
        seen[1].query.get("only_validate").map(String::as_str),
        Some("true")
    );
}

#[tokio::test]
async fn stale_version_is_a_conflict_with_the_current_version() {
    let (client, _) = documented().await;
    let err = client
        .push_raw_configuration("global\n", ConfigVersion(5), PushOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            DataplaneError::Conflict {
                expected: ConfigVersion(5),
                actual: Some(ConfigVersion(7))
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.kind(), ErrorKind::Conflict);
    assert_eq!(err.metric_label(), "version_conflict");
}

#[tokio::test]
async fn invalid_config_is_rejected_with_haproxy_alerts() {
    let (client, _) = documented().await;
    let err = client
        .push_raw_configuration(
            "global\n  bogus\n",
            ConfigVersion(7),
            PushOptions::default(),
        )
        .await
        .unwrap_err();
    match &err {
        DataplaneError::Rejected {
            status: 400,
            message,
        } => {
            assert!(
                message.contains("[ALERT]") && message.contains("bogus"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(err.kind(), ErrorKind::Fatal);
}

#[tokio::test]
async fn reload_polling_ends_in_success_failure_or_timeout() {
    let (client, _) = documented().await;
    let quick = Duration::from_millis(20);
    let ok = client
        .wait_for_reload(&ReloadId("2026-11-30-1".into()), quick, quick * 10)
        .await;
    assert_eq!(ok.unwrap().status, ReloadStatus::Succeeded);

    let failed = client
        .wait_for_reload(&ReloadId("2026-11-30-2".into()), quick, quick * 10)
        .await;
    let err = failed.unwrap_err();
    assert!(
        matches!(&err, DataplaneError::ReloadFailed { response, .. } if response.contains("bind"))
    );
    assert_eq!(err.kind(), ErrorKind::Fatal);

    let pending = client
        .wait_for_reload(&ReloadId("2026-11-30-3".into()), quick, quick * 5)
        .await;
    let err = pending.unwrap_err();
    assert!(
        matches!(err, DataplaneError::ReloadTimeout { .. }),
        "{err:?}"
    );
    assert_eq!(err.kind(), ErrorKind::Retryable);

    let unknown = client
        .reload_status(&ReloadId("2026-11-29-9".into()))
        .await
        .unwrap_err();
    assert!(
        matches!(unknown, DataplaneError::NotFound { .. }),
        "{unknown:?}"
    );
    assert_eq!(unknown.kind(), ErrorKind::Fatal);
}

#[tokio::test]
async fn storage_create_is_multipart_and_409_means_exists() {
    let (client, log) = documented().await;
    let none = StorageWriteOptions::default();
    let out = client
        .create_storage_file(StorageKind::Map, "hosts.map", b"a b\n", none)
        .await
        .unwrap();
    assert_eq!(out.storage_name.as_deref(), Some("hosts.map"));
    assert_eq!(out.reload_id, None);

    let out = client
        .create_storage_file(
            StorageKind::General,
            "503.http",
            b"HTTP/1.0 503\r\n\r\n",
            none,
        )
        .await
        .unwrap();
    assert_eq!(out.storage_name.as_deref(), Some("503.http"));

    let cert = client
        .create_storage_file(StorageKind::SslCertificate, "ex.pem", b"PEM", none)
        .await
        .unwrap();
    assert_eq!(cert.reload_id, Some(ReloadId("2026-11-30-4".into())));

    client
        .create_storage_file(StorageKind::CaFile, "ca.pem", b"CA", none)
        .await
        .unwrap();

    let err = client
        .create_storage_file(StorageKind::Map, "exists.map", b"x\n", none)
        .await
        .unwrap_err();
    assert!(matches!(&err, DataplaneError::AlreadyExists { name } if name == "exists.map"));
    assert_eq!(err.kind(), ErrorKind::Conflict);

    let seen = log.lock().unwrap().clone();
    assert_eq!(seen[0].path, "maps");
    assert_eq!(
        seen[0].parts,
        vec![(
            "file_upload".into(),
            Some("hosts.map".into()),
            "a b\n".into()
        )]
    );
    assert_eq!(seen[1].path, "general");
    assert!(
        seen[1]
            .parts
            .contains(&("id".into(), None, "503.http".into()))
    );
    assert_eq!(seen[2].path, "ssl_certificates");
    assert_eq!(seen[3].path, "ssl_ca_files");
}

#[tokio::test]
async fn storage_list_get_replace_delete() {
    let (client, log) = documented().await;
    let list = client.list_storage(StorageKind::Map).await.unwrap();
    assert_eq!(list[0].storage_name.as_deref(), Some("hosts.map"));
    assert_eq!(list[0].size, Some(4));
    assert_eq!(
        client
            .get_storage_file(StorageKind::Map, "hosts.map")
            .await
            .unwrap(),
        b"a b\n"
    );
    let missing = client
        .get_storage_file(StorageKind::Map, "missing.map")
        .await
        .unwrap_err();
    assert!(matches!(missing, DataplaneError::NotFound { .. }));

    let skip = StorageWriteOptions {
        skip_reload: true,
        ..StorageWriteOptions::default()
    };
    let out = client
        .replace_storage_file(StorageKind::Map, "hosts.map", b"c d\n", skip)
        .await
        .unwrap();
    assert_eq!(out.reload_id, Some(ReloadId("2026-11-30-5".into())));
    client
        .replace_storage_file(
            StorageKind::General,
            "503.http",
            b"x",
            StorageWriteOptions::default(),
        )
        .await
        .unwrap();
    let seen = log.lock().unwrap().clone();
    assert_eq!(
        (seen[0].method.as_str(), seen[0].path.as_str()),
        ("PUT", "maps/hosts.map")
    );
    assert!(seen[0].content_type.starts_with("text/plain"));
    assert_eq!(seen[0].body, "c d\n");
    assert_eq!(
        seen[0].query.get("skip_reload").map(String::as_str),
        Some("true")
    );
    assert!(
        seen[1].content_type.starts_with("multipart/form-data"),
        "{}",
        seen[1].content_type
    );

    let none = StorageWriteOptions::default();
    let out = client
        .delete_storage_file(StorageKind::Map, "old.map", none)
        .await
        .unwrap();
    assert_eq!(out.reload_id, None);
    let err = client
        .delete_storage_file(StorageKind::Map, "used.map", none)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, DataplaneError::InUse { message, .. } if message.contains("referenced"))
    );
}

#[tokio::test]
async fn missing_credentials_are_unauthorized() {
    let (addr, _) = documented_server().await;
    let client = client_for(addr, Duration::from_secs(5), false);
    let err = client.info().await.unwrap_err();
    assert!(
        matches!(err, DataplaneError::Unauthorized { status: 401 }),
        "{err:?}"
    );
    assert_eq!(err.kind(), ErrorKind::Fatal);
}

async fn fault_server(fault: &'static str) -> SocketAddr {
    serve(Router::new().fallback(move || async move {
        match fault {
            "500" => error_body(StatusCode::INTERNAL_SERVER_ERROR, "boom"),
            "429" => {
                let mut r = error_body(StatusCode::TOO_MANY_REQUESTS, "too many transactions");
                r.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("3"));
                r
            }
            _ => {
                tokio::time::sleep(Duration::from_secs(3)).await;
                "7".into_response()
            }
        }
    }))
    .await
}

#[tokio::test]
async fn server_errors_are_retryable() {
    let client = client_for(fault_server("500").await, Duration::from_secs(5), true);
    let err = client.configuration_version().await.unwrap_err();
    assert!(matches!(&err, DataplaneError::Server { status: 500, message } if message == "boom"));
    assert_eq!(
        (err.kind(), err.metric_label()),
        (ErrorKind::Retryable, "server")
    );
}

#[tokio::test]
async fn too_many_requests_carries_retry_after() {
    let client = client_for(fault_server("429").await, Duration::from_secs(5), true);
    let err = client.configuration_version().await.unwrap_err();
    assert_eq!(err.retry_after(), Some(Duration::from_secs(3)));
    assert_eq!(err.kind(), ErrorKind::Retryable);
}

#[tokio::test]
async fn slow_answer_times_out() {
    let client = client_for(fault_server("slow").await, Duration::from_millis(200), true);
    let started = std::time::Instant::now();
    let err = client.configuration_version().await.unwrap_err();
    assert!(matches!(err, DataplaneError::Timeout { .. }), "{err:?}");
    assert_eq!(
        (err.kind(), err.metric_label()),
        (ErrorKind::Retryable, "timeout")
    );
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn refused_connection_is_a_transport_error() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let client = client_for(addr, Duration::from_secs(5), true);
    let err = client.info().await.unwrap_err();
    assert!(matches!(err, DataplaneError::Transport { .. }), "{err:?}");
    assert_eq!(err.kind(), ErrorKind::Retryable);
}

#[tokio::test]
async fn base_url_path_prefix_is_kept() {
    let (addr, _) = documented_server().await;
    let url = Url::parse(&format!("http://{addr}/")).unwrap();
    let auth = BasicAuth {
        username: "admin".into(),
        password: "secret".into(),
    };
    let client = Dataplane::new(&ClientSettings::default())
        .unwrap()
        .client(Endpoint::new(url, Some(auth)));
    assert_eq!(
        client.configuration_version().await.unwrap(),
        ConfigVersion(7)
    );
    assert!(!format!("{:?}", client.endpoint()).contains("secret"));
}

#[tokio::test]
async fn connections_are_reused() {
    use axum::extract::ConnectInfo;
    let peers: Arc<Mutex<Vec<SocketAddr>>> = Arc::default();
    let seen = peers.clone();
    let router = Router::new().fallback(move |ConnectInfo(peer): ConnectInfo<SocketAddr>| {
        let seen = seen.clone();
        async move {
            seen.lock().unwrap().push(peer);
            "7"
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            router.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
    });
    let client = client_for(addr, Duration::from_secs(5), true);
    for _ in 0..3 {
        assert_eq!(
            client.configuration_version().await.unwrap(),
            ConfigVersion(7)
        );
    }
    let peers = peers.lock().unwrap().clone();
    assert_eq!(peers.len(), 3);
    assert!(
        peers.iter().all(|p| *p == peers[0]),
        "one connection expected: {peers:?}"
    );
}

#[tokio::test]
async fn raw_configuration_of_a_v3_0_api_is_unwrapped() {
    let router = Router::new().fallback(|| async {
        (
            [(header::CONTENT_TYPE, "application/json")],
            axum::Json(json!({"data": "# _version=3\nglobal\n"})),
        )
    });
    let client = client_for(serve(router).await, Duration::from_secs(5), true);
    let raw = client.raw_configuration().await.unwrap();
    assert_eq!(
        (raw.version, raw.text.as_str()),
        (ConfigVersion(3), "# _version=3\nglobal\n")
    );
}
