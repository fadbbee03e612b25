//! observed-v3.4.md, "Storage": one test per row, and the certificate metadata.

use serde_json::json;

use super::*;

/// Row: maps POST (multipart `file_upload`): 201 with metadata; 409 when it exists.
#[tokio::test]
async fn observed_maps_post_201_with_metadata_409_when_it_exists() {
    let (_l, dp) = stand_in_pod().await;
    let map = render("02-maps", "maps/hosts.map");
    let r = dp.upload("storage/maps", "hosts.map", map.clone()).await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(
        r.json(),
        json!({"storage_name": "hosts.map", "file": "/etc/haproxy/maps/hosts.map",
               "description": "managed map file", "size": map.len()})
    );
    let r = dp.upload("storage/maps", "hosts.map", map).await;
    assert_eq!((r.status, r.json()["code"].as_u64()), (409, Some(409)));
    // The storage name rule: `.map` appended.
    let r = dp.upload("storage/maps", "extra", "a b\n").await;
    assert_eq!(r.json()["storage_name"], "extra.map");
}

/// Row: maps GET one: 200, the raw file (octet-stream); 404 when missing.
#[tokio::test]
async fn observed_maps_get_is_the_raw_file_or_404() {
    let (_l, dp) = stand_in_pod().await;
    let map = render("02-maps", "maps/hosts.map");
    dp.upload("storage/maps", "hosts.map", map.clone()).await;
    let r = dp.get("storage/maps/hosts.map").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/octet-stream"));
    assert_eq!(r.text, map);
    assert_eq!(dp.get("storage/maps/missing.map").await.status, 404);
}

/// Row: maps PUT (text/plain): 202 + Reload-Id, empty body; 204 with skip_reload; 415 for
/// multipart; DELETE 204.
#[tokio::test]
async fn observed_maps_put_202_reload_204_skip_415_multipart_delete_204() {
    let (l, dp) = real_pod().await;
    dp.upload_hosts_map().await;
    let r = dp
        .push(&render("02-maps", "haproxy.cfg"), "&force_reload=true")
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let changed = render("03-maps-changed", "maps/hosts.map");
    let r = dp
        .put_text("storage/maps/hosts.map?skip_reload=true", &changed)
        .await;
    assert_eq!((r.status, r.header("reload-id")), (204, None));
    assert_eq!(
        curl(&l.pod, "http", 80, Some("shop.haptic.test"), "/"),
        "render 02-maps shop-v1"
    );
    let r = dp.put_text("storage/maps/hosts.map", &changed).await;
    assert_eq!((r.status, r.text.as_str()), (202, ""));
    assert_eq!(dp.wait_reload(&r.reload_id()).await["status"], "succeeded");
    assert_eq!(
        curl(&l.pod, "http", 80, Some("shop.haptic.test"), "/"),
        "render 02-maps shop-v2"
    );
    let r = dp
        .call_off_spec(
            "PUT",
            "storage/maps/hosts.map",
            Body::File("hosts.map", changed.into_bytes()),
            &[("replaceStorageMapFile", "/headers/content-type")],
        )
        .await;
    assert_eq!(r.status, 415);
    // Named by the in-memory configuration: 409; once not named: 204.
    assert_eq!(dp.delete("storage/maps/hosts.map").await.status, 409);
    dp.push(&render("01-basic", "haproxy.cfg"), "&skip_reload=true")
        .await;
    assert_eq!(dp.delete("storage/maps/hosts.map").await.status, 204);
}

/// Row: ssl_certificates POST / PUT: 201 / 200 with JSON metadata (not the PEM), applied at
/// runtime: HAProxy presents the new certificate and no reload happened.
#[tokio::test]
async fn observed_ssl_certificates_post_put_201_200_applied_at_runtime_without_reload() {
    let (l, dp) = real_pod().await;
    let r = dp.upload_site_pem("site.pem").await;
    assert_eq!((r.status, r.header("reload-id")), (201, None), "{}", r.text);
    assert_eq!(r.json()["storage_name"], "site.pem");
    assert!(!r.text.contains("PRIVATE KEY"));
    dp.push_and_wait(&render("05-tls", "haproxy.cfg")).await;
    assert_eq!(presented_serial(&l.pod), SITE_SERIAL);
    let reloads = dp.reload_count().await;
    let r = dp.put_reissued_site_pem("").await;
    assert_eq!((r.status, r.header("reload-id")), (200, None), "{}", r.text);
    assert_eq!(
        r.json()["serial"],
        "540946127350749713935599286303148716407392305153"
    );
    assert_eq!(
        presented_serial(&l.pod),
        REISSUED_SERIAL,
        "applied at runtime"
    );
    assert_eq!(dp.reload_count().await, reloads, "without a reload");
}

/// Row: ssl_certificates POST / PUT: 202 + Reload-Id only when the runtime update fails (here:
/// a configuration without an admin stats socket, so the API has no runtime API).
#[tokio::test]
async fn observed_ssl_certificates_runtime_update_failing_answers_202_and_reloads() {
    let (l, dp) = real_pod().await;
    dp.upload_site_pem("site.pem").await;
    let no_socket = render("05-tls", "haproxy.cfg").replace(
        "    stats socket /var/run/haproxy.sock mode 600 level admin\n",
        "",
    );
    let r = dp.push(&no_socket, "&force_reload=true").await;
    assert_eq!(r.status, 201, "{}", r.text);
    let r = dp.put_reissued_site_pem("").await;
    assert_eq!(r.status, 202, "{}", r.text);
    assert_eq!(r.json()["storage_name"], "site.pem");
    assert_eq!(dp.wait_reload(&r.reload_id()).await["status"], "succeeded");
    assert_eq!(
        presented_serial(&l.pod),
        REISSUED_SERIAL,
        "loaded by the reload"
    );
}

/// Row: ssl_certificates, not a PEM: 500 "failed to parse certificate" (not a 4xx); a PEM
/// without its key: 500 too (client-native's `validatePEM`).
#[tokio::test]
async fn observed_ssl_certificates_not_a_pem_500() {
    let (_l, dp) = stand_in_pod().await;
    let r = dp
        .upload("storage/ssl_certificates", "bad.pem", "not a certificate\n")
        .await;
    assert_eq!(
        (r.status, r.message().as_str()),
        (500, "failed to parse certificate")
    );
    let pem = render("05-tls", "ssl/site.pem");
    let start = pem.find("-----BEGIN CERTIFICATE-----").unwrap();
    let end = pem.find("-----END CERTIFICATE-----").unwrap() + "-----END CERTIFICATE-----".len();
    let r = dp
        .upload(
            "storage/ssl_certificates",
            "bad.pem",
            format!("{}\n", &pem[start..end]),
        )
        .await;
    assert_eq!(r.status, 500, "{}", r.text);
    assert!(r.message().contains("private key"), "{}", r.text);
    assert_eq!(dp.get("storage/ssl_certificates/bad.pem").await.status, 404);
}

/// Row: ssl_certificates DELETE: 202 (204 with skip_reload).
#[tokio::test]
async fn observed_ssl_certificates_delete_202_or_204_with_skip_reload() {
    let (_l, dp) = real_pod().await;
    for (name, flags, status) in [("a.pem", "", 202), ("b.pem", "?skip_reload=true", 204)] {
        let r = dp.upload_site_pem(name).await;
        assert_eq!(r.status, 201, "{}", r.text);
        let r = dp
            .delete(&format!("storage/ssl_certificates/{name}{flags}"))
            .await;
        assert_eq!(r.status, status, "{name}: {}", r.text);
        if status == 202 {
            assert_eq!(dp.wait_reload(&r.reload_id()).await["status"], "succeeded");
        }
    }
    // Named by the configuration: 409.
    dp.upload_site_pem("site.pem").await;
    dp.push(&render("05-tls", "haproxy.cfg"), "&force_reload=true")
        .await;
    let r = dp.delete("storage/ssl_certificates/site.pem").await;
    assert_eq!(r.status, 409);
    assert!(r.message().contains("referenced"), "{}", r.text);
}

/// Row: general PUT: multipart 202 (204 with skip_reload); text/plain 415.
#[tokio::test]
async fn observed_general_put_multipart_202_204_skip_text_plain_415() {
    let (_l, dp) = stand_in_pod().await;
    let page = render("04-errors", "general/403.http");
    let r = dp.upload("storage/general", "403.http", page.clone()).await;
    assert_eq!(r.status, 201);
    let file = || Body::File("403.http", page.clone().into_bytes());
    let r = dp.call("PUT", "storage/general/403.http", file()).await;
    assert_eq!(r.status, 202, "{}", r.text);
    r.reload_id();
    let r = dp
        .call("PUT", "storage/general/403.http?skip_reload=true", file())
        .await;
    assert_eq!((r.status, r.header("reload-id")), (204, None));
    let r = dp
        .call_off_spec(
            "PUT",
            "storage/general/403.http",
            Body::Text(&page),
            &[("replaceStorageGeneralFile", "/headers/content-type")],
        )
        .await;
    assert_eq!(r.status, 415);
    assert_eq!(dp.delete("storage/general/403.http").await.status, 204);
}

/// Row: the CA files listing after a reload includes HAProxy's built-in `@system-ca` (never
/// ours to delete: its DELETE answers 204 and it stays listed).
#[tokio::test]
async fn observed_ca_files_listing_includes_system_ca() {
    let (_l, dp) = real_pod().await;
    let r = dp.upload_clients_ca().await;
    assert_eq!(
        (r.status, r.text.as_str()),
        (201, ""),
        "no body, as the spec"
    );
    let names = |v: serde_json::Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|e| e["storage_name"].as_str().unwrap().to_owned())
            .collect()
    };
    let listed = names(dp.get("runtime/ssl_ca_files").await.json());
    assert_eq!(listed, ["@system-ca", "clients-ca.pem"]);
    assert_eq!(
        dp.delete("runtime/ssl_ca_files/@system-ca").await.status,
        204
    );
    assert!(names(dp.get("runtime/ssl_ca_files").await.json()).contains(&"@system-ca".into()));
    let one = dp.get("runtime/ssl_ca_files/@system-ca").await;
    assert_eq!(one.status, 200);
    assert!(
        one.json()["count"]
            .as_str()
            .unwrap()
            .ends_with("certificate(s)")
    );
}

/// Certificate and CA-file metadata as the real API reports it (dataplaneapi
/// `GetOneStorageSSLCertificate`, client-native `ParseCertificatesInfo`; HAProxy's `show ssl
/// ca-file` through `runtime/ssl_ca_files`); values as `openssl x509` prints them.
#[tokio::test]
async fn storage_certificate_metadata_is_what_the_real_api_reports() {
    let (_l, dp) = stand_in_pod().await;
    let site = render("05-tls", "ssl/site.pem");
    let created = dp
        .upload("storage/ssl_certificates", "site.pem", site.clone())
        .await;
    assert_eq!(created.status, 201);
    let keys = |v: &serde_json::Value| -> Vec<String> {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    let list = dp.get("storage/ssl_certificates").await.json();
    assert_eq!(keys(&list[0]), ["description", "file", "storage_name"]);
    let one = dp.get("storage/ssl_certificates/site.pem").await.json();
    assert_eq!(
        keys(&one),
        [
            "description",
            "file",
            "issuers",
            "not_after",
            "not_before",
            "serial",
            "size",
            "storage_name",
            "subject"
        ]
    );
    assert_eq!(one["file"], "/etc/haproxy/ssl/site.pem");
    assert_eq!(one["size"], site.len());
    // serial=6D480BD9A95DF8A7594DDA5A5D4AB7DAEDF11939, in decimal
    assert_eq!(
        one["serial"],
        "623886679975639042405780590102433805754648566073"
    );
    assert_eq!(
        (one["issuers"].as_str(), one["subject"].as_str()),
        (Some("site.haptic.test"), Some("site.haptic.test"))
    );
    assert_eq!(one["not_before"], "2026-11-30T05:49:15.000Z");
    assert_eq!(one["not_after"], "2126-11-06T05:49:15.000Z");
    assert_eq!(created.json(), one, "create answers the same model");
    let r = dp.upload_clients_ca().await;
    assert_eq!(r.status, 201);
    let ca = dp.get("runtime/ssl_ca_files/clients-ca.pem").await.json();
    assert_eq!(
        ca,
        json!({"storage_name": "clients-ca.pem", "count": "1 certificate(s)"})
    );
    let entry = dp
        .get("runtime/ssl_ca_files/clients-ca.pem/entries/1")
        .await
        .json();
    assert_eq!(entry["serial"], "49B82019AA272FCD22D641602DADC739163D9F14");
    assert_eq!(entry["subject"], "/CN=Haptic Test CA");
    assert_eq!(
        entry["sha1_finger_print"],
        "D62F0B1C37D39D671E7DFBD07F7AC933FBAD21BA"
    );
    assert_eq!(entry["algorithm"], "RSA2048");
    assert_eq!(
        dp.get("runtime/ssl_ca_files/clients-ca.pem/entries/2")
            .await
            .status,
        404
    );
    assert_eq!(
        dp.get("runtime/ssl_ca_files/site.pem").await.status,
        404,
        "a certificate is not a CA file"
    );
    let r = dp.put_reissued_site_pem("?skip_reload=true").await;
    assert_eq!(r.status, 200);
    let one = dp.get("storage/ssl_certificates/site.pem").await.json();
    assert_eq!(
        one["serial"],
        "540946127350749713935599286303148716407392305153"
    );
}
