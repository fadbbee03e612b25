//! Faults: 500, 429, slow answers, refused connections; connection reuse and base URLs.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::IntoResponse;
use haptic::core::ErrorKind;
use haptic::dataplane::{
    BasicAuth, ClientSettings, ConfigVersion, Dataplane, DataplaneError, Endpoint,
};
use reqwest::Url;
use serde_json::json;

use super::*;
use haptic_tools::sandbox::documented::*;

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
