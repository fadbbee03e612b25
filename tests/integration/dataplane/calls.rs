//! Calls against the documented answers.

use std::time::Duration;

use haptic::core::ErrorKind;
use haptic::dataplane::{
    ConfigVersion, DataplaneError, HaproxyHealth, PushApplied, PushOptions, ReloadId, ReloadStatus,
    StorageKind, StorageWriteOptions, normalize_raw_config,
};

use serde_json::json;

use super::*;
use haptic_tools::sandbox::documented::*;

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
    let cert = client.ssl_certificate_info("site.pem").await.unwrap();
    assert_eq!(cert.sha256_finger_print.as_deref(), Some("AB12"));
    assert_eq!(cert.serial.as_deref(), Some("01"));
    assert_eq!(cert.other.get("domains"), Some(&json!("site.haptic.test")));
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
