//! `haptic::source::configmap` against the Kubernetes API emulator.

use std::collections::BTreeMap;
use std::time::Duration;

use haptic::core::render::RenderContent;
use haptic::dispatch::input::Input;
use haptic::source::configmap::{ConfigMapSource, ConfigMapSourceConfig, render_from_objects};
use haptic_journal::AuxKind;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, ObjectMeta, PostParams};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{NS, api_server};

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some(NS.into()),
        ..Default::default()
    }
}

fn configmap(data: &[(&str, &str)]) -> ConfigMap {
    let data = data.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned()));
    ConfigMap {
        metadata: meta("render"),
        data: Some(data.collect()),
        ..Default::default()
    }
}

fn secret(data: &[(&str, &str)]) -> Secret {
    let data = data
        .iter()
        .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())));
    Secret {
        metadata: meta("render-certs"),
        data: Some(data.collect::<BTreeMap<_, _>>()),
        ..Default::default()
    }
}

async fn next(rx: &mut mpsc::Receiver<Input>, within: Duration) -> Option<RenderContent> {
    match tokio::time::timeout(within, rx.recv()).await {
        Ok(Some(Input::Rendered { content, .. })) => Some((*content).clone()),
        Ok(other) => panic!("unexpected {other:?}"),
        Err(_) => None,
    }
}

#[test]
fn key_conventions() {
    let cm = configmap(&[
        ("haproxy.cfg", "global\n"),
        ("maps--hosts.map", "a b\n"),
        ("crt-lists--sites.crtlist", "/etc/haproxy/ssl/site.pem\n"),
        ("ssl--leak.pem", "KEY"),
        ("README", "ignored"),
    ]);
    let s = secret(&[("ssl--site.pem", "PEM"), ("ca--ca.pem", "CA")]);
    let r = render_from_objects(&cm, Some(&s)).unwrap();
    let paths: Vec<(&str, AuxKind)> = r.files.iter().map(|f| (f.path.as_str(), f.kind)).collect();
    assert_eq!(
        paths,
        vec![
            ("ca/ca.pem", AuxKind::Ca),
            ("crt-lists/sites.crtlist", AuxKind::CrtList),
            ("maps/hosts.map", AuxKind::Map),
            ("ssl/site.pem", AuxKind::Ssl),
        ]
    );
    assert_eq!(r.files[3].content, b"PEM");
    assert!(render_from_objects(&configmap(&[("maps--a.map", "")]), None).is_none());
}

#[tokio::test]
async fn configmap_and_secret_flow_through_the_emulator() {
    let emu = api_server().await;
    let cms: Api<ConfigMap> = Api::namespaced(emu.client(), NS);
    let secrets: Api<Secret> = Api::namespaced(emu.client(), NS);
    let (tx, mut rx) = mpsc::channel(8);
    let cancel = CancellationToken::new();
    let mut config = ConfigMapSourceConfig::new(NS, "render");
    config.secret = Some("render-certs".into());
    config.debounce = Duration::from_millis(100);
    let source = ConfigMapSource::new(emu.client(), config);
    let uid = source.source_uid();
    let task = tokio::spawn(source.run(tx, cancel.clone()));

    cms.create(
        &PostParams::default(),
        &configmap(&[("haproxy.cfg", "global\n"), ("maps--hosts.map", "a 1\n")]),
    )
    .await
    .unwrap();
    assert!(
        next(&mut rx, Duration::from_millis(800)).await.is_none(),
        "no render while the secret is absent"
    );
    secrets
        .create(&PostParams::default(), &secret(&[("ssl--site.pem", "PEM")]))
        .await
        .unwrap();
    let r = next(&mut rx, Duration::from_secs(5)).await.expect("render");
    assert_eq!(r.files.len(), 2);
    assert_eq!(r.config, b"global\n");
    let created = cms.get("render").await.unwrap().metadata.uid.unwrap();
    assert_eq!(uid.borrow().as_ref().map(|u| u.0.clone()), Some(created));

    // A change of the map yields a new render; re-writing identical data yields none.
    let mut cm = cms.get("render").await.unwrap();
    cm.data
        .as_mut()
        .unwrap()
        .insert("maps--hosts.map".into(), "a 2\n".into());
    let cm = cms
        .replace("render", &PostParams::default(), &cm)
        .await
        .unwrap();
    let r2 = next(&mut rx, Duration::from_secs(5))
        .await
        .expect("render 2");
    assert_eq!(r2.files[0].content, b"a 2\n");
    assert_ne!(r.checksum(), r2.checksum());
    let mut same = cm.clone();
    same.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert("touched".into(), "yes".into());
    cms.replace("render", &PostParams::default(), &same)
        .await
        .unwrap();
    assert!(next(&mut rx, Duration::from_millis(800)).await.is_none());

    // A watch restart after compaction (410) relists without sending the same render again.
    super::force_relist(&emu, "configmaps");
    assert!(next(&mut rx, Duration::from_millis(1500)).await.is_none());

    cancel.cancel();
    task.await.unwrap().unwrap();
}
