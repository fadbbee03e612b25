//! Every render source carries the whole `corpus/renders` stream end to end (issue 6 "Tests"):
//! the ConfigMap source (certificates in a Secret) and the HTTP ingest endpoint, each render
//! checked the way `stream::render_stream_reaches_every_pod_and_is_published` checks the
//! directory source. For ingest, the controller is SIGKILLed right after a `202`: after a
//! restart on the same journal the render is deployed without being posted again.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use haptic_journal::{Event, Journal, JournalOptions, Seq};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use reqwest::multipart::{Form, Part};

use super::telemetry::scrape;
use super::{
    Controller, Fleet, MAIN, Peers, bounds, check_render, checksum, invalid_removed, opts, start,
    stop_cleanly, stream,
};
use haptic_testkit::http;
use haptic_testkit::render::{corpus, put_configmap_render};
const CONFIGMAP: &str = "e2e-render";
const CERTS: &str = "e2e-render-certs";
pub const TOKEN_SECRET: &str = "e2e-ingest-token";
pub const TOKEN: &str = "e2e-ingest-token-value";

// ----- ConfigMap -----

/// Writes `render` the way the ConfigMap source's doc says writers should: the Secret first
/// (`ssl--*` and `ca--*` keys), then the ConfigMap (everything else), each replaced whole.
async fn put_render(world: &Fleet, render: &str) {
    put_configmap_render(
        &world.client(),
        world.namespace(),
        CONFIGMAP,
        CERTS,
        &corpus(render),
    )
    .await;
}

on_peers!(
    Emulator,
    configmap_source_carries_the_stream => configmap_stream,
    ingest_carries_the_stream_and_a_202_survives_sigkill => ingest_stream,
);

/// The stream through the ConfigMap source (certificates in a Secret); the HAProxyCfg owned by
/// the ConfigMap.
pub async fn configmap_stream(peers: Peers) {
    let world = start(peers, 3).await;
    put_render(&world, "01-basic").await;
    let cm_uid = Api::<ConfigMap>::namespaced(world.client(), world.namespace())
        .get(CONFIGMAP)
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    let mut ctl = world.controller(
        opts(&world, "solo", std::path::Path::new("/nonexistent"))
            .with_configmap(CONFIGMAP, Some(CERTS)),
    );
    let mut last_passed = String::new();
    let renders = stream();
    for render in &renders {
        put_render(&world, render).await;
        last_passed = check_render(&world, render, &last_passed).await;
    }
    // DESIGN.md section 1: the HAProxyCfg is owned by the source ConfigMap.
    let cfg = world.hpcfg(MAIN).await.unwrap();
    let owners = cfg.metadata.owner_references.unwrap_or_default();
    assert!(
        owners
            .iter()
            .any(|o| o.kind == "ConfigMap" && o.name == CONFIGMAP && o.uid == cm_uid),
        "the HAProxyCfg is owner-referenced to the ConfigMap {CONFIGMAP} ({cm_uid}): {owners:?}"
    );
    let m = scrape(ctl.metrics_addr().await).await;
    let n = m.value("haptic_renders_total{source=\"configmap\"}");
    assert!(
        n >= renders.len() as f64,
        "renders counted from the configmap: {n}"
    );
    invalid_removed(&world).await;
    stop_cleanly(&mut ctl);
    world.shutdown().await;
}

// ----- ingest -----

pub async fn create_token_secret(world: &Fleet) {
    let s = Secret {
        metadata: ObjectMeta {
            name: Some(TOKEN_SECRET.into()),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(
            "token".to_owned(),
            ByteString(TOKEN.as_bytes().to_vec()),
        )])),
        ..Secret::default()
    };
    Api::<Secret>::namespaced(world.client(), world.namespace())
        .create(&PostParams::default(), &s)
        .await
        .unwrap();
}

/// The files of a corpus render: (render-relative path, content), `haproxy.cfg` first.
fn render_files(render: &str) -> Vec<(String, Vec<u8>)> {
    let content = corpus(render);
    let mut v = vec![("haproxy.cfg".to_owned(), content.config.clone())];
    v.extend(content.files.into_iter().map(|f| (f.path, f.content)));
    v
}

pub fn form(render: &str) -> Form {
    render_files(render)
        .into_iter()
        .fold(Form::new(), |form, (path, content)| {
            let name = path.rsplit('/').next().unwrap().to_owned();
            form.part(path, Part::bytes(content).file_name(name))
        })
}

/// POSTs `render` to the ingest endpoint at `addr` with the token: the status and the JSON body.
pub async fn post(addr: SocketAddr, render: &str) -> (u16, serde_json::Value) {
    let resp = http()
        .post(format!("http://{addr}/v1/renders"))
        .bearer_auth(TOKEN)
        .multipart(form(render))
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or_default())
}

/// POSTs `render` to the ingest endpoint, retrying `503` (not the leader yet) within
/// [`haptic_testkit::Intervals::converge`]; returns the `202` body.
async fn post_render(ctl: &Controller, addr: SocketAddr, render: &str) -> serde_json::Value {
    ctl.eventually(
        bounds().converge(),
        &format!("POST {render} answered 202"),
        || async {
            let (status, body) = post(addr, render).await;
            match status {
                202 => Ok(body),
                503 => Err(format!("{status} {body}")),
                _ => panic!("POST {render}: {status} {body}"),
            }
        },
    )
    .await
}

/// The stream through the ingest endpoint; a follower refuses naming the leader; a render
/// answered 202 survives a SIGKILL.
pub async fn ingest_stream(peers: Peers) {
    let world = start(peers, 3).await;
    create_token_secret(&world).await;
    // The directory source stays empty: every render comes through the endpoint.
    let render_dir = world.dir().join("render");
    std::fs::create_dir_all(&render_dir).unwrap();
    let opts = opts(&world, "solo", &render_dir).ingest(TOKEN_SECRET);
    let mut ctl = world.controller(opts.clone());
    let addr = ctl.ingest_addr().await;
    let renders = stream();
    let mut last_passed = String::new();
    for render in &renders {
        let body = post_render(&ctl, addr, render).await;
        assert_eq!(body["checksum"], checksum(render).to_string(), "{body}");
        assert_eq!(body["duplicate"], false, "{body}");
        last_passed = check_render(&world, render, &last_passed).await;
    }
    let m = scrape(ctl.metrics_addr().await).await;
    let n = m.value("haptic_renders_total{source=\"ingest\"}");
    assert!(
        n >= renders.len() as f64,
        "renders counted from ingest: {n}"
    );

    // A follower refuses renders, naming the leader (stopped again before the SIGKILL below,
    // so it cannot take over).
    let mut follower =
        world.controller(super::opts(&world, "standby", &render_dir).ingest(TOKEN_SECRET));
    let resp = http()
        .post(format!(
            "http://{}/v1/renders",
            follower.ingest_addr().await
        ))
        .bearer_auth(TOKEN)
        .multipart(form("01-basic"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 503);
    assert!(resp.headers().contains_key("retry-after"));
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["leader"], "solo", "{body}");
    follower.kill();

    // One more render, different from the deployed one; SIGKILL right after its 202.
    let extra = "03-maps-changed";
    assert_ne!(last_passed, extra);
    let body = post_render(&ctl, addr, extra).await;
    assert_eq!(body["checksum"], checksum(extra).to_string(), "{body}");
    ctl.kill();
    let spec = world.hpcfg(MAIN).await.map(|c| c.spec.checksum.to_string());
    assert_ne!(
        spec,
        Some(checksum(extra).to_string()),
        "killed before {extra} was deployed and published"
    );
    // Restart on the same journal; nothing is posted again.
    let mut ctl = world.controller(opts.clone());
    check_render(&world, extra, &last_passed).await;
    // It came from the journal: the new process took no render through its endpoint.
    let m = scrape(ctl.metrics_addr().await).await;
    assert_eq!(m.value("haptic_renders_total{source=\"ingest\"}"), 0.0);
    stop_cleanly(&mut ctl);
    // The newest render in the journal is the one answered 202 before the SIGKILL.
    let journal = Journal::open(&JournalOptions::new(&opts.journal)).unwrap();
    assert!(journal.verify().unwrap().problems.is_empty());
    let newest = journal
        .events(Seq(1), usize::MAX)
        .unwrap()
        .into_iter()
        .rev()
        .find_map(|(_, _, e)| match e {
            Event::TemplateRendered {
                render,
                trigger_reason,
                ..
            } => Some((render.to_string(), trigger_reason)),
            _ => None,
        });
    assert_eq!(
        newest,
        Some((checksum(extra).to_string(), "ingest".to_owned()))
    );
    world.shutdown().await;
}
