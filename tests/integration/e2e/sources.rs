//! Every render source carries the whole `corpus/renders` stream end to end (issue 6 "Tests"):
//! the ConfigMap source (certificates in a Secret) and the HTTP ingest endpoint, each render
//! checked the way `stream::render_stream_reaches_every_pod_and_is_published` checks the
//! directory source. For ingest, the controller is SIGKILLed right after a `202`: after a
//! restart on the same journal the render is deployed without being posted again.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use haptic::source::configmap::path_to_key;
use haptic_journal::{Event, Journal, JournalOptions, Seq};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use reqwest::multipart::{Form, Part};

use super::stream::published;
use super::telemetry::scrape;
use super::{Controller, Opts, World, checksum, http, rejected, render_files, stream, summary};

const MAIN: &str = "e2e-haproxycfg";
const INVALID: &str = "e2e-haproxycfg-invalid";
const CONFIGMAP: &str = "e2e-render";
const CERTS: &str = "e2e-render-certs";
const TOKEN_SECRET: &str = "e2e-ingest-token";
const TOKEN: &str = "e2e-ingest-token-value";

/// Checks one render of the stream as the directory-source test does: a passed render is in
/// the HAProxyCfg's spec with every pod on it and `ConfigValidated=True`; a rejected one
/// produces `-invalid` (carrying the error) and pins the fleet on `last_passed`. Then every pod
/// answers what the README lists for the render (for a rejected one: for `last_passed`).
/// Returns the last passed render.
pub async fn check_render(
    world: &World,
    ctl: &Controller,
    render: &str,
    last_passed: &str,
) -> String {
    let mut now_passed = last_passed.to_owned();
    if rejected(render) {
        let want = checksum(render);
        // The object is created first and its status written next: wait for both.
        world
            .until(
                Duration::from_secs(60),
                &format!("{INVALID} for {render} carrying the validation error"),
                || async {
                    world
                        .hpcfg(INVALID)
                        .await
                        .filter(|c| c.spec.checksum.to_string() == want)
                        .and_then(|c| c.status?.validation_error)
                        .filter(|e| !e.is_empty())
                },
            )
            .await;
        let main = world
            .until(Duration::from_secs(30), "ConfigPinned=True", || async {
                let c = world.hpcfg(MAIN).await?;
                summary(&c)
                    .1
                    .contains(&"ConfigPinned=True".to_owned())
                    .then_some(c)
            })
            .await;
        let (spec, conditions, _) = summary(&main);
        assert_eq!(
            spec,
            checksum(last_passed),
            "{render}: the spec keeps the last passed render"
        );
        assert!(
            conditions.contains(&"ConfigValidated=False".to_owned()),
            "{conditions:?}"
        );
    } else {
        let cfg = published(world, render, 3).await;
        let (_, conditions, _) = summary(&cfg);
        assert!(
            conditions.contains(&"ConfigValidated=True".to_owned()),
            "{render}: {conditions:?}"
        );
        assert!(
            conditions.contains(&"ConfigPinned=False".to_owned()),
            "{render}: {conditions:?}"
        );
        render.clone_into(&mut now_passed);
    }
    // A rejected render leaves every pod answering the last passed one (the README's
    // "still 07" for the full stream; whatever passed last for a shorter one).
    let answers = if rejected(render) {
        last_passed
    } else {
        render
    };
    world
        .pods_answer(answers, Duration::from_secs(60))
        .await
        .unwrap_or_else(|e| panic!("{render}: {e}\n{}", ctl.log_tail(40)));
    now_passed
}

// ----- ConfigMap -----

/// Writes `render` the way the ConfigMap source's doc says writers should: the Secret first
/// (`ssl--*` and `ca--*` keys), then the ConfigMap (everything else), each replaced whole.
async fn put_render(world: &World, render: &str) {
    let mut cm_data = BTreeMap::new();
    let mut secret_data = BTreeMap::new();
    for (path, content) in render_files(render) {
        let key = path_to_key(&path);
        if path.starts_with("ssl/") || path.starts_with("ca/") {
            secret_data.insert(key, ByteString(content));
        } else {
            cm_data.insert(key, String::from_utf8(content).unwrap());
        }
    }
    let pp = PostParams::default();
    let secrets: Api<Secret> = Api::namespaced(world.client.clone(), world.ns());
    match secrets.get_opt(CERTS).await.unwrap() {
        Some(mut s) => {
            s.data = Some(secret_data);
            s.string_data = None;
            secrets.replace(CERTS, &pp, &s).await.unwrap();
        }
        None => {
            let s = Secret {
                metadata: ObjectMeta {
                    name: Some(CERTS.into()),
                    ..ObjectMeta::default()
                },
                data: Some(secret_data),
                ..Secret::default()
            };
            secrets.create(&pp, &s).await.unwrap();
        }
    }
    let cms: Api<ConfigMap> = Api::namespaced(world.client.clone(), world.ns());
    match cms.get_opt(CONFIGMAP).await.unwrap() {
        Some(mut c) => {
            c.data = Some(cm_data);
            c.binary_data = None;
            cms.replace(CONFIGMAP, &pp, &c).await.unwrap();
        }
        None => {
            let c = ConfigMap {
                metadata: ObjectMeta {
                    name: Some(CONFIGMAP.into()),
                    ..ObjectMeta::default()
                },
                data: Some(cm_data),
                ..ConfigMap::default()
            };
            cms.create(&pp, &c).await.unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configmap_source_carries_the_stream() {
    let world = World::start(3).await;
    put_render(&world, "01-basic").await;
    let cm_uid = Api::<ConfigMap>::namespaced(world.client.clone(), world.ns())
        .get(CONFIGMAP)
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    let mut ctl = world.controller(Opts::configmap(&world, "solo", CONFIGMAP, Some(CERTS)));
    let mut last_passed = String::new();
    let renders = stream();
    for render in &renders {
        put_render(&world, render).await;
        last_passed = check_render(&world, &ctl, render, &last_passed).await;
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
    let m = scrape(ctl.metrics_addr()).await;
    let n = m.value("haptic_renders_total{source=\"configmap\"}");
    assert!(
        n >= renders.len() as f64,
        "renders counted from the configmap: {n}"
    );
    world
        .until(Duration::from_secs(30), "-invalid removed", || async {
            world.hpcfg(INVALID).await.is_none().then_some(())
        })
        .await;
    let status = ctl.stop(Duration::from_secs(30)).expect("stops on SIGTERM");
    assert!(status.success(), "exit {status:?}\n{}", ctl.log_tail(40));
    world.cluster.shutdown().await;
}

// ----- ingest -----

async fn create_token_secret(world: &World) {
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
    Api::<Secret>::namespaced(world.client.clone(), world.ns())
        .create(&PostParams::default(), &s)
        .await
        .unwrap();
}

fn form(render: &str) -> Form {
    render_files(render)
        .into_iter()
        .fold(Form::new(), |form, (path, content)| {
            let name = path.rsplit('/').next().unwrap().to_owned();
            form.part(path, Part::bytes(content).file_name(name))
        })
}

/// POSTs `render` to the ingest endpoint, retrying `503` (not the leader yet) within a minute;
/// returns the `202` body.
async fn post_render(addr: SocketAddr, render: &str) -> serde_json::Value {
    let http = http();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let resp = http
            .post(format!("http://{addr}/v1/renders"))
            .bearer_auth(TOKEN)
            .multipart(form(render))
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let body: serde_json::Value = resp.json().await.unwrap_or_default();
        if status == 202 {
            return body;
        }
        assert!(
            status == 503 && Instant::now() < deadline,
            "POST {render}: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingest_carries_the_stream_and_a_202_survives_sigkill() {
    let world = World::start(3).await;
    create_token_secret(&world).await;
    // The directory source stays empty: every render comes through the endpoint.
    let render_dir = world.dir.path().join("render");
    std::fs::create_dir_all(&render_dir).unwrap();
    let opts = Opts::dir(&world, "solo", &render_dir).ingest(TOKEN_SECRET);
    let mut ctl = world.controller(opts.clone());
    let addr = ctl.ingest_addr();
    let renders = stream();
    let mut last_passed = String::new();
    for render in &renders {
        let body = post_render(addr, render).await;
        assert_eq!(body["checksum"], checksum(render), "{body}");
        assert_eq!(body["duplicate"], false, "{body}");
        last_passed = check_render(&world, &ctl, render, &last_passed).await;
    }
    let m = scrape(ctl.metrics_addr()).await;
    let n = m.value("haptic_renders_total{source=\"ingest\"}");
    assert!(
        n >= renders.len() as f64,
        "renders counted from ingest: {n}"
    );

    // A follower refuses renders, naming the leader (stopped again before the SIGKILL below,
    // so it cannot take over).
    let mut follower =
        world.controller(Opts::dir(&world, "standby", &render_dir).ingest(TOKEN_SECRET));
    let resp = http()
        .post(format!("http://{}/v1/renders", follower.ingest_addr()))
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
    let body = post_render(addr, extra).await;
    assert_eq!(body["checksum"], checksum(extra), "{body}");
    ctl.kill();
    let spec = world.hpcfg(MAIN).await.map(|c| c.spec.checksum.to_string());
    assert_ne!(
        spec,
        Some(checksum(extra)),
        "killed before {extra} was deployed and published"
    );
    // Restart on the same journal; nothing is posted again.
    let mut ctl = world.controller(opts.clone());
    check_render(&world, &ctl, extra, &last_passed).await;
    // It came from the journal: the new process took no render through its endpoint.
    let m = scrape(ctl.metrics_addr()).await;
    assert_eq!(m.value("haptic_renders_total{source=\"ingest\"}"), 0.0);
    let status = ctl.stop(Duration::from_secs(30)).expect("stops on SIGTERM");
    assert!(status.success(), "exit {status:?}\n{}", ctl.log_tail(40));
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
    assert_eq!(newest, Some((checksum(extra), "ingest".to_owned())));
    world.cluster.shutdown().await;
}
