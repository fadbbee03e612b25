//! A changed `--config-name` (issue 15): the objects this journal published under the earlier
//! name (the HAProxyCfg, its auxiliary objects and Secrets) are removed at the next term, with a
//! log line and an Event; objects that carry the same label but that another controller owns,
//! and another config's HAProxyCfg, are left alone; the journal forgets the old checkpoint.

use std::collections::BTreeMap;

use haptic::k8s::crd::{
    HAProxyCRTListFile, HAProxyCfg, HAProxyCfgSpec, HAProxyGeneralFile, HAProxyMapFile,
    HAProxyMapFileSpec, labels,
};
use haptic_journal::{Checksum, Journal, JournalOptions};
use haptic_testkit::render::write_render;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::events::v1::Event as KubeEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, ListParams, PostParams};
use kube::{Resource, ResourceExt};

use super::down::render_with_files;
use super::{Fleet, MAIN, Peers, bounds, object_until, opts, start, stop_cleanly};

on_peers!(
    Emulator,
    a_changed_config_name_retires_what_the_earlier_name_published_and_nothing_else =>
        changed_config_name,
);

const OLD: &str = "old";
const OLD_CFG: &str = "old-haproxycfg";

/// Names of the objects of kind `K` labelled as belonging to the HAProxyCfg `cfg`.
async fn labelled<K>(world: &Fleet, cfg: &str) -> Vec<String>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    <K as Resource>::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(world.client(), world.namespace());
    let lp = ListParams::default().labels(&format!("{}={cfg}", labels::RUNTIME_CONFIG));
    let mut names: Vec<String> = api
        .list(&lp)
        .await
        .expect("list")
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    names.sort();
    names
}

/// Every auxiliary object and Secret labelled for `cfg`, as `Kind/name`.
async fn dependants(world: &Fleet, cfg: &str) -> Vec<String> {
    let mut all = Vec::new();
    for (kind, names) in [
        (
            "HAProxyMapFile",
            labelled::<HAProxyMapFile>(world, cfg).await,
        ),
        (
            "HAProxyGeneralFile",
            labelled::<HAProxyGeneralFile>(world, cfg).await,
        ),
        (
            "HAProxyCRTListFile",
            labelled::<HAProxyCRTListFile>(world, cfg).await,
        ),
        ("Secret", labelled::<Secret>(world, cfg).await),
    ] {
        all.extend(names.into_iter().map(|n| format!("{kind}/{n}")));
    }
    all
}

fn meta(name: &str, labels: &[(&str, &str)], owner: Option<OwnerReference>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        labels: Some(
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<BTreeMap<_, _>>(),
        ),
        owner_references: owner.map(|o| vec![o]),
        ..ObjectMeta::default()
    }
}

/// `solo` publishes a render with every kind of file under `--config-name old`; another
/// controller's HAProxyCfg `other-haproxycfg` and a map file it owns but labelled like the old
/// HAProxyCfg's are created beside them. `solo` is restarted on the same journal as
/// `--config-name e2e`: within one convergence of the new name, `old-haproxycfg` and every
/// dependant owner-referenced to it are gone, a `RetiredConfigRemoved` Event says so, the other
/// controller's two objects are untouched, and after a clean stop the journal's published
/// checkpoints name only the new HAProxyCfg. Fails on code that leaves the old objects behind.
pub async fn changed_config_name(peers: Peers) {
    let world = start(peers, 2).await;
    let render_dir = world.dir().join("render");
    write_render(&render_with_files(), &render_dir).unwrap();
    let mut o = opts(&world, "solo", &render_dir);
    o.config_name = OLD.into();
    let mut ctl = world.controller(o.clone());
    let old = object_until(
        &world,
        OLD_CFG,
        bounds().converge(),
        "old-haproxycfg on both pods",
        |c| {
            let p = haptic_testkit::Published::of(c);
            if p.on(&c.spec.checksum, 2) {
                Ok(c.clone())
            } else {
                Err(format!("{p:?}"))
            }
        },
    )
    .await;
    let before = dependants(&world, OLD_CFG).await;
    assert!(
        before.len() >= 5,
        "maps, general files, crt-lists and Secrets published: {before:?}"
    );
    stop_cleanly(&mut ctl);

    // Another controller's objects: its own HAProxyCfg, and a map file carrying the old
    // HAProxyCfg's label but owned by that other HAProxyCfg.
    let cfgs: Api<HAProxyCfg> = Api::namespaced(world.client(), world.namespace());
    let other = cfgs
        .create(
            &PostParams::default(),
            &HAProxyCfg {
                metadata: meta("other-haproxycfg", &[(labels::CONFIG, "other")], None),
                spec: HAProxyCfgSpec {
                    path: "/etc/haproxy/haproxy.cfg".into(),
                    content: "global\n".into(),
                    checksum: Checksum::of(b"global\n"),
                    compressed: false,
                },
                status: None,
            },
        )
        .await
        .expect("create the other controller's HAProxyCfg");
    let owner = OwnerReference {
        api_version: "haproxy-haptic.org/v1alpha1".into(),
        kind: "HAProxyCfg".into(),
        name: "other-haproxycfg".into(),
        uid: other.metadata.uid.clone().expect("uid"),
        controller: Some(true),
        block_owner_deletion: None,
    };
    let maps: Api<HAProxyMapFile> = Api::namespaced(world.client(), world.namespace());
    maps.create(
        &PostParams::default(),
        &HAProxyMapFile {
            metadata: meta(
                "other-hosts",
                &[(labels::RUNTIME_CONFIG, OLD_CFG)],
                Some(owner),
            ),
            spec: HAProxyMapFileSpec {
                map_name: "hosts.map".into(),
                path: "/etc/haproxy/maps/hosts.map".into(),
                entries: String::new(),
                checksum: Checksum::of(b""),
                compressed: false,
            },
            status: None,
        },
    )
    .await
    .expect("create the other controller's map file");

    // The same journal, a new config name.
    o.config_name = super::CONFIG.into();
    let mut ctl = world.controller(o.clone());
    world
        .eventually(
            bounds().converge(),
            "e2e-haproxycfg on both pods, old-haproxycfg retired",
            || async {
                let new = world
                    .hpcfg(MAIN)
                    .await
                    .ok_or("no e2e-haproxycfg".to_owned())?;
                let p = haptic_testkit::Published::of(&new);
                if !p.on(&old.spec.checksum, 2) {
                    return Err(format!("{MAIN}: {p:?}"));
                }
                if world.hpcfg(OLD_CFG).await.is_some() {
                    return Err("old-haproxycfg still there".into());
                }
                let left = dependants(&world, OLD_CFG).await;
                (left == vec!["HAProxyMapFile/other-hosts".to_owned()])
                    .then_some(())
                    .ok_or(format!("labelled {OLD_CFG}: {left:?}"))
            },
        )
        .await;
    assert!(
        world.hpcfg("other-haproxycfg").await.is_some(),
        "another config's HAProxyCfg is never retired"
    );
    let events: Api<KubeEvent> = Api::namespaced(world.client(), world.namespace());
    world
        .eventually(
            bounds().follow_up(),
            "a RetiredConfigRemoved Event",
            || async {
                let list = events
                    .list(&ListParams::default())
                    .await
                    .map_err(|e| e.to_string())?;
                list.items
                    .iter()
                    .find(|e| e.reason.as_deref() == Some("RetiredConfigRemoved"))
                    .and_then(|e| e.note.clone())
                    .filter(|n| n.contains(OLD_CFG) && n.contains(MAIN))
                    .ok_or(format!(
                        "{} events, none retiring {OLD_CFG}",
                        list.items.len()
                    ))
            },
        )
        .await;
    assert!(
        ctl.log_text()
            .contains("retired the HAProxyCfg of an earlier config name"),
        "{}",
        ctl.log_tail(40)
    );
    stop_cleanly(&mut ctl);
    let j = Journal::open(&JournalOptions::new(&o.journal)).expect("reopen the journal");
    let names: Vec<String> = j
        .published_checkpoints()
        .unwrap()
        .into_iter()
        .map(|c| c.name.as_str().to_owned())
        .collect();
    assert_eq!(
        names,
        vec![MAIN.to_owned()],
        "the old checkpoint is forgotten"
    );
    assert!(j.verify().unwrap().is_clean());
    drop(j);
    world.shutdown().await;
}
