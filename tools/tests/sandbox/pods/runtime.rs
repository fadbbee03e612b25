//! What HAProxy has loaded (issue 24 item 1): the runtime views answer it, not the files on disk.
//! A file written with `skip_reload` whose reload then failed shows its old content here while
//! storage shows the new one. And `PUT runtime/backends/{b}/servers/{s}` (observed-v3.4.md).

use serde_json::{Value, json};

use super::*;

/// 05-tls plus the map of 02-maps (one configuration loading a certificate and a map).
fn tls_and_map() -> String {
    render("05-tls", "haproxy.cfg").replace(
        "lf-string \"render 05-tls ssl=%[ssl_fc]\"",
        "lf-string \"%[req.hdr(host),lower,map(/etc/haproxy/maps/hosts.map,no-route)]\"",
    )
}

/// Loads hosts.map (02-maps) and site.pem (05-tls) with a successful reload.
async fn load_map_and_cert(dp: &Dp) {
    assert_eq!(dp.upload_hosts_map().await.status, 201);
    let r = dp.upload_site_pem("site.pem").await;
    assert_eq!(r.status, 201);
    assert_eq!(
        dp.push_and_wait(&tls_and_map()).await["status"],
        "succeeded"
    );
}

/// Writes new content with `skip_reload`, then a reload that HAProxy refuses once.
async fn write_new_then_fail_the_reload(dp: &Dp) {
    let map = render("03-maps-changed", "maps/hosts.map");
    let r = dp
        .put_text("storage/maps/hosts.map?skip_reload=true", &map)
        .await;
    assert_eq!(r.status, 204);
    let r = dp.put_reissued_site_pem("?skip_reload=true").await;
    assert_eq!(r.status, 200);
    assert_eq!(
        dp.hook("/_sandbox/faults", json!({"reload": "fail", "times": 1}))
            .await
            .status,
        201
    );
    assert_eq!(dp.push_and_wait(&tls_and_map()).await["status"], "failed");
}

fn entries(v: &Value) -> Vec<(String, String)> {
    v.as_array()
        .expect("entries")
        .iter()
        .map(|e| {
            (
                e["key"].as_str().unwrap().to_owned(),
                e["value"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn pairs(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// The views of the old content after the failed reload, storage the new (both pod kinds).
async fn old_loaded_new_stored(dp: &Dp) {
    load_map_and_cert(dp).await;
    let loaded_map = entries(&dp.get("runtime/maps/hosts.map/entries").await.json());
    assert_eq!(loaded_map, pairs(&render("02-maps", "maps/hosts.map")));
    assert_eq!(
        dp.get("runtime/ssl_certs/site.pem").await.json()["serial"],
        SITE_SERIAL
    );
    write_new_then_fail_the_reload(dp).await;
    assert_eq!(
        entries(&dp.get("runtime/maps/hosts.map/entries").await.json()),
        loaded_map,
        "HAProxy still runs the old map"
    );
    assert_eq!(
        dp.get("storage/maps/hosts.map").await.text,
        render("03-maps-changed", "maps/hosts.map")
    );
    assert_eq!(
        dp.get("runtime/ssl_certs/site.pem").await.json()["serial"],
        SITE_SERIAL
    );
    assert_eq!(
        dp.get("storage/ssl_certificates/site.pem").await.json()["serial"],
        "540946127350749713935599286303148716407392305153",
        "storage shows the new certificate"
    );
    // The next successful reload loads them.
    assert_eq!(
        dp.push_and_wait(&tls_and_map()).await["status"],
        "succeeded"
    );
    assert_eq!(
        entries(&dp.get("runtime/maps/hosts.map/entries").await.json()),
        pairs(&render("03-maps-changed", "maps/hosts.map"))
    );
    assert_eq!(
        dp.get("runtime/ssl_certs/site.pem").await.json()["serial"],
        "5EC0DD0000000000000000000000000000000001"
    );
}

/// On a real-HAProxy pod (through its master CLI): a file written with skip_reload whose reload
/// then failed shows its old content in the runtime views, the new one in storage; HAProxy
/// answers from the old map.
#[tokio::test]
async fn runtime_views_of_a_real_pod_show_the_loaded_files_not_the_written_ones() {
    let (l, dp) = real_pod().await;
    old_loaded_new_stored(&dp).await;
    assert_eq!(
        curl(&l.pod, "http", 80, Some("new.haptic.test"), "/"),
        "new-v1"
    );
    let r = dp
        .hook("/_sandbox/faults", json!({"reload": "fail", "times": 1}))
        .await;
    assert_eq!(r.status, 201);
    dp.put_text(
        "storage/maps/hosts.map?skip_reload=true",
        "new.haptic.test v3\n",
    )
    .await;
    assert_eq!(dp.push_and_wait(&tls_and_map()).await["status"], "failed");
    assert_eq!(
        curl(&l.pod, "http", 80, Some("new.haptic.test"), "/"),
        "new-v1",
        "old map served"
    );
}

/// On a stand-in pod (its snapshot of the last successful reload): the same.
#[tokio::test]
async fn runtime_views_of_a_stand_in_follow_its_last_successful_reload() {
    let (_l, dp) = stand_in_pod().await;
    old_loaded_new_stored(&dp).await;
}

/// Both pod kinds answer the runtime views alike for the same files.
#[tokio::test]
async fn runtime_views_of_a_real_pod_and_a_stand_in_agree() {
    let (_r, real) = real_pod().await;
    let (_s, stand_in) = stand_in_pod().await;
    for dp in [&real, &stand_in] {
        load_map_and_cert(dp).await;
        assert_eq!(
            dp.upload(
                "storage/general",
                "sites.crtlist",
                render("06-crtlist", "crt-lists/sites.crtlist")
            )
            .await
            .status,
            201
        );
        let cfg = tls_and_map().replace(
            "bind *:443 ssl crt /etc/haproxy/ssl/site.pem",
            "bind *:443 ssl crt-list /etc/haproxy/general/sites.crtlist",
        );
        assert_eq!(dp.push_and_wait(&cfg).await["status"], "succeeded");
    }
    for path in [
        "runtime/maps/hosts.map/entries",
        "runtime/ssl_certs/site.pem",
        "runtime/ssl_crt_lists",
        "runtime/ssl_crt_lists/entries?name=sites.crtlist",
        "runtime/ssl_certs",
    ] {
        let (a, b) = (real.get(path).await, stand_in.get(path).await);
        assert_eq!(
            (a.status, b.status),
            (200, 200),
            "{path}: {} / {}",
            a.text,
            b.text
        );
        let strip_ids = |v: Value| -> Value {
            match v {
                Value::Array(items) => Value::Array(
                    items
                        .into_iter()
                        .map(|mut e| {
                            if let Some(o) = e.as_object_mut() {
                                o.remove("id");
                            }
                            e
                        })
                        .collect(),
                ),
                other => other,
            }
        };
        assert_eq!(strip_ids(a.json()), strip_ids(b.json()), "{path}");
    }
    let cert = real.get("runtime/ssl_certs/site.pem").await.json();
    assert_eq!(cert["subject"], "/CN=site.haptic.test");
    assert_eq!(cert["not_after"], "2126-11-06T05:49:15.000Z");
    assert!(
        cert["sha1_finger_print"]
            .as_str()
            .is_some_and(|s| s.len() == 40)
    );
    let maps = real.get("runtime/maps").await.json();
    assert_eq!(maps[0]["file"], "/etc/haproxy/maps/hosts.map");
    let crt = real
        .get("runtime/ssl_crt_lists/entries?name=sites.crtlist")
        .await
        .json();
    assert_eq!(
        crt,
        json!([{"file": "/etc/haproxy/ssl/site.pem", "line_number": 1,
                "ssl_bind_config": "alpn h2,http/1.1", "sni_filter": ["site.haptic.test"]}])
    );
}

/// Row: `PUT runtime/backends/{b}/servers/{s}` `{"admin_state": "ready", "weight": 42}`: 200
/// with the runtime object, configuration version unchanged; a bad admin_state / weight 999 /
/// an unknown server: 422 / 500 / 404 `no data for b/x: not found`.
#[tokio::test]
async fn observed_runtime_server_put_200_422_500_404() {
    let (_r, real) = real_pod().await;
    let (_s, stand_in) = stand_in_pod().await;
    let cfg = format!(
        "{}backend be\n    server s1 127.0.0.1:9001\n",
        render("01-basic", "haproxy.cfg")
    );
    for dp in [&real, &stand_in] {
        let r = dp.push(&cfg, "&force_reload=true").await;
        assert_eq!(r.status, 201);
        let v = dp.version().await;
        let path = "runtime/backends/be/servers/s1";
        let r = dp
            .call(
                "PUT",
                path,
                Body::Json(json!({"admin_state": "maint", "weight": 42})),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
        let got = r.json();
        assert_eq!(
            (got["name"].as_str(), got["admin_state"].as_str()),
            (Some("s1"), Some("maint"))
        );
        assert_eq!(
            (got["address"].as_str(), got["port"].as_i64()),
            (Some("127.0.0.1"), Some(9001))
        );
        let r = dp
            .call("PUT", path, Body::Json(json!({"admin_state": "ready"})))
            .await;
        assert_eq!(r.json()["admin_state"], "ready");
        assert_eq!(
            dp.version().await,
            v,
            "the configuration version does not move"
        );
        let r = dp
            .call_off_spec(
                "PUT",
                path,
                Body::Json(json!({"admin_state": "sleepy"})),
                &[("replaceRuntimeServer", "/body/admin_state")],
            )
            .await;
        assert_eq!(r.status, 422);
        let r = dp
            .call("PUT", path, Body::Json(json!({"weight": 999})))
            .await;
        assert_eq!(r.status, 500, "{}", r.text);
        let r = dp
            .call(
                "PUT",
                "runtime/backends/be/servers/x",
                Body::Json(json!({"weight": 1})),
            )
            .await;
        assert_eq!(
            (r.status, r.message().as_str()),
            (404, "no data for be/x: not found")
        );
    }
}
