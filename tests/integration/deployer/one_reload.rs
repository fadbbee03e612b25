//! One reload per render: a render that changes files and the configuration is applied by the
//! configuration push's single reload (files written with `skip_reload`), so a pod never serves
//! the new files with the old configuration; a render that changes only files reloads once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use haptic_journal::AuxKind;
use haptic_tools::sandbox::pods::PodInfo;

use super::harness::*;

/// Curls every pod until stopped; returns every answer seen.
fn sample(
    pods: Vec<PodInfo>,
    probe: fn(&PodInfo) -> String,
) -> (Arc<AtomicBool>, tokio::task::JoinHandle<Vec<String>>) {
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let task = tokio::task::spawn_blocking(move || {
        let mut seen = Vec::new();
        while !s.load(Ordering::SeqCst) {
            for p in &pods {
                seen.push(probe(p));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        seen
    });
    (stop, task)
}

fn site(p: &PodInfo) -> String {
    curl(p, "https", 443, None, Some("site.haptic.test"))
}

async fn deploy_counting(
    h: &Harness,
    sb: &Fleet,
    name: &str,
    want: &str,
    probe: fn(&PodInfo) -> String,
) -> Vec<String> {
    let eps = endpoints(sb);
    let before = sb.reload_counts().await;
    let (stop, sampler) = sample(sb.pods().iter().map(|p| p.info.clone()).collect(), probe);
    let r = h.feed(name, true).await;
    h.wait_applied(r, &eps).await;
    for pod in &sb.pods() {
        wait_answer(pod, want, probe).await;
    }
    stop.store(true, Ordering::SeqCst);
    let seen = sampler.await.unwrap();
    let after = sb.reload_counts().await;
    for (i, (b, a)) in before.iter().zip(&after).enumerate() {
        assert_eq!(a - b, 1, "pod {i}: reloads for render {name}");
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployer_render_with_files_and_config_reloads_once_and_never_mixes() {
    let sb = sandbox(2).await;
    let (h, eps, _) = Harness::deployed(&sb, Knobs::default(), "02-maps").await;
    for pod in &sb.pods() {
        wait_answer(pod, "render 02-maps shop-v1", shop).await;
    }

    // 02 -> 03: map and config change together.
    let seen = deploy_counting(
        &h,
        &sb,
        "03-maps-changed",
        "render 03-maps-changed shop-v2",
        shop,
    )
    .await;
    assert!(
        !seen.iter().any(|a| a.contains("render 02-maps shop-v2")),
        "a pod served config 02 with map 03: {seen:?}"
    );
    assert!(
        seen.iter().all(|a| a.is_empty()
            || a.contains("render 02-maps shop-v1")
            || a.contains("render 03-maps-changed shop-v2")),
        "only whole renders served: {seen:?}"
    );

    // Only the map changes (configuration identical): the file takes effect, one reload.
    let (config, mut files) = read_render("03-maps-changed");
    for f in &mut files {
        if f.0 == AuxKind::Map {
            f.2 = b"shop.haptic.test shop-v3\n".to_vec();
        }
    }
    let before = sb.reload_counts().await;
    let r = h.feed_files(config, files, "03-map-only").await;
    h.wait_applied(r, &eps).await;
    for pod in &sb.pods() {
        wait_answer(pod, "render 03-maps-changed shop-v3", shop).await;
    }
    let after = sb.reload_counts().await;
    for (i, (b, a)) in before.iter().zip(&after).enumerate() {
        assert_eq!(a - b, 1, "pod {i}: reloads for a map-only render");
    }

    // 05 -> 06: certificate + crt-list + config.
    let r = h.feed("05-tls", true).await;
    h.wait_applied(r, &eps).await;
    for pod in &sb.pods() {
        wait_answer(pod, "render 05-tls", |p| curl(p, "https", 443, None, None)).await;
    }
    deploy_counting(
        &h,
        &sb,
        "06-crtlist",
        "render 06-crtlist sni=site.haptic.test",
        site,
    )
    .await;
    h.stop().await;
}

/// A file already on disk but never loaded (a sync cancelled between its `skip_reload` write and
/// its reload) still gets a reload: the pod's journaled render names the older blob.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployer_file_stored_but_not_loaded_is_reloaded() {
    let sb = sandbox(1).await;
    let (h, eps, _) = Harness::deployed(&sb, Knobs::default(), "02-maps").await;
    let pod = &sb.pods()[0];
    wait_answer(pod, "render 02-maps shop-v1", shop).await;
    // The new map lands on disk without a reload.
    let (config, mut files) = read_render("02-maps");
    let new_map = b"shop.haptic.test shop-stored\n".to_vec();
    pod.faults()
        .edit_file(
            "/etc/haproxy/maps/hosts.map",
            std::str::from_utf8(&new_map).unwrap(),
        )
        .await
        .unwrap();
    for f in &mut files {
        if f.0 == AuxKind::Map {
            f.2 = new_map.clone();
        }
    }
    let before = pod.reload_count().await;
    let r = h.feed_files(config, files, "02-stored-map").await;
    h.wait_applied(r, &eps).await;
    wait_answer(pod, "render 02-maps shop-stored", shop).await;
    assert_eq!(pod.reload_count().await - before, 1, "one reload");
    h.stop().await;
}
