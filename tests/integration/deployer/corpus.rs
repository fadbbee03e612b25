//! The haproxy corpus (`../shared/corpus/haproxy`): every config that `haproxy -c` accepts on
//! its own is deployed to 3 pods and read back through the Dataplane API.

use std::path::{Path, PathBuf};

use haptic::components::deployer::structure;
use haptic::dataplane::{ClientSettings, Dataplane, Endpoint as DpEndpoint, raw_configs_equal};
use haptic_journal::SyncMode;

use super::harness::*;

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/corpus/haproxy");

/// One accepted config per corpus folder (the first, by name, that `haproxy -c` accepts alone).
fn accepted_configs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(CORPUS)
        .map(|rd| rd.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    dirs.sort();
    let mut out = Vec::new();
    for d in dirs {
        let mut cfgs: Vec<PathBuf> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "cfg"))
            .collect();
        cfgs.sort();
        if let Some(ok) = cfgs.into_iter().find(|p| check(p)) {
            out.push(ok);
        }
    }
    out
}

fn check(p: &Path) -> bool {
    std::process::Command::new("haproxy")
        .args(["-c", "-q", "-f"])
        .arg(p)
        .output()
        .is_ok_and(|o| o.status.success())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployer_corpus_configs_are_deployed_and_read_back() {
    let configs = accepted_configs();
    if configs.is_empty() {
        eprintln!("corpus not found at {CORPUS}: skipped");
        return;
    }
    let (sb, h, eps) = Harness::with_fleet(3, Knobs::default()).await;
    h.lead(&eps).await;
    let dp = Dataplane::new(&ClientSettings::default()).unwrap();
    let clients: Vec<_> = sb
        .pods()
        .iter()
        .map(|p| {
            dp.client(DpEndpoint::new(
                p.dataplane_url.parse().unwrap(),
                Some(sb.pods()[0].credentials()),
            ))
        })
        .collect();
    let mut deployed = 0;
    for cfg in &configs {
        let text = std::fs::read(cfg).unwrap();
        let r = h
            .feed_files(&text, vec![], &cfg.display().to_string())
            .await;
        h.wait_applied(r, &eps).await;
        let modes = syncs(&h, r);
        let desired = String::from_utf8_lossy(&text);
        for (pod, c) in sb.pods().iter().zip(&clients) {
            let running = c.raw_configuration().await.unwrap();
            // A raw push stores the text as sent; a transaction (issue 14) makes the API
            // rewrite the file in its own layout, equal structurally (a no-op too: the file
            // may be in that layout from before).
            let raw = modes
                .iter()
                .find(|(p, _)| *p == pod.name)
                .and_then(|(_, s)| s.sync_mode)
                .is_some_and(|m| !matches!(m, SyncMode::FineGrained | SyncMode::Runtime));
            let same = if raw {
                raw_configs_equal(&running.text, &desired)
            } else {
                structure::equal(
                    &structure::parse(&running.text),
                    &structure::parse(&desired),
                )
            };
            assert!(
                same,
                "{} not running on {} ({modes:?}):\n{}",
                cfg.display(),
                c.endpoint().url(),
                running.text
            );
        }
        deployed += 1;
    }
    assert!(deployed >= 10, "only {deployed} corpus configs deployed");
    eprintln!("corpus configs deployed and read back: {deployed}");
    h.stop().await;
}
