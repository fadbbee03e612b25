//! Least privilege, checked against what the controller really calls (issue 6 "Deployment"): two
//! real `haptic run` processes (the directory source over the whole render stream, then the
//! ConfigMap source with a certificate Secret) write everything they write (maps, general files,
//! crt-lists, certificate Secrets, `-invalid` creation and deletion, GC deletes, status, the Lease,
//! Events created and patched), stop on SIGTERM (the Lease release), and the API server's request log
//! is mapped to `(apiGroup, resource[/subresource], verb)` the way the API server's authorizer
//! does. Every observed triple must be granted by the Role(s) in `deploy/`, and every granted
//! triple must have been observed (or sit on [`NOT_EXERCISED`], with the reason).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use haptic::k8s::crd::{HAProxyCRTListFile, HAProxyGeneralFile};
use haptic::source::dir::read_render;
use haptic_testkit::RequestRecord;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::Role;
use kube::Api;
use kube::api::ListParams;

use haptic_journal::Checksum;
use haptic_testkit::render::put_configmap_render;

use super::{
    Fleet, INVALID, LEASE, Peers, Published, answers, bounds, check_render, checksum, event_until,
    feed, main_until, opts, published, start, stop_cleanly, stream,
};

/// `(apiGroup, resource[/subresource], verb)`; the core group is `""`.
pub type Triple = (String, String, String);

/// Identities of the two runs; their `User-Agent` is `haptic/<version> (<identity>)`.
const DIR_ID: &str = "rbac-dir";
const CM_ID: &str = "rbac-cm";

/// Grants the runs cannot exercise, each with the code path that needs it. Empty on purpose:
/// both sources run here, and the stream writes every kind of object. A grant added to the Role
/// for a path this test cannot reach goes here with its reason.
const NOT_EXERCISED: &[(&str, &str, &str, &str)] = &[];

/// The authorizer's view of one request, or why it has none (a non-resource URL or a
/// cluster-scoped resource, which a namespaced Role cannot grant).
pub fn classify(r: &RequestRecord, namespace: &str) -> Result<Triple, String> {
    let segs: Vec<&str> = r.path.trim_matches('/').split('/').collect();
    let (group, mut rest) = match segs.as_slice() {
        ["api", _version, rest @ ..] => ("", rest),
        ["apis", group, _version, rest @ ..] => (*group, rest),
        _ => return Err(format!("non-resource URL {} {}", r.method, r.path)),
    };
    // The legacy `/watch/` prefix.
    let mut watch = r
        .query
        .split('&')
        .any(|kv| kv == "watch=true" || kv == "watch=1");
    if rest.first() == Some(&"watch") {
        watch = true;
        rest = &rest[1..];
    }
    let rest = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => {
            if *ns != namespace {
                return Err(format!(
                    "outside the namespace {namespace}: {} {}",
                    r.method, r.path
                ));
            }
            rest
        }
        _ => return Err(format!("cluster-scoped: {} {}", r.method, r.path)),
    };
    let (resource, named) = match rest {
        [resource] => (resource.to_string(), false),
        [resource, _name] => (resource.to_string(), true),
        [resource, _name, sub] => (format!("{resource}/{sub}"), true),
        _ => return Err(format!("unexpected path {} {}", r.method, r.path)),
    };
    let verb = match (r.method.as_str(), named) {
        ("GET", _) if watch => "watch",
        ("GET", true) => "get",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        (m, _) => return Err(format!("unexpected method {m} {}", r.path)),
    };
    Ok((group.to_owned(), resource, verb.to_owned()))
}

/// Every `(group, resource, verb)` the Role(s) in `deploy/` grant.
pub fn granted() -> BTreeSet<Triple> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy");
    let mut out = BTreeSet::new();
    let mut roles = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let file = entry.unwrap().path();
        if file.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        for doc in serde_norway::Deserializer::from_str(&text) {
            let value: serde_json::Value = serde::Deserialize::deserialize(doc).unwrap();
            let kind = value["kind"].as_str().unwrap_or_default();
            assert_ne!(
                kind,
                "ClusterRole",
                "{}: the controller needs no cluster-wide grant",
                file.display()
            );
            if kind != "Role" {
                continue;
            }
            roles += 1;
            let role: Role = serde_path_to_error::deserialize(value)
                .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            for rule in role.rules.unwrap_or_default() {
                assert!(
                    rule.resource_names.is_none() && rule.non_resource_urls.is_none(),
                    "{}: plain rules only",
                    file.display()
                );
                for group in rule.api_groups.clone().unwrap_or_default() {
                    for res in rule.resources.clone().unwrap_or_default() {
                        for verb in &rule.verbs {
                            assert!(
                                group != "*" && res != "*" && verb != "*",
                                "{}: no wildcards",
                                file.display()
                            );
                            out.insert((group.clone(), res.clone(), verb.clone()));
                        }
                    }
                }
            }
        }
    }
    assert!(roles >= 1, "a Role in deploy/");
    out
}

/// Runs the whole stream through the directory source and waits until every write it causes
/// has happened: each render published (or `-invalid` for a rejected one), then the GC of the
/// objects the last render no longer carries and the `-invalid` deletion.
async fn dir_run(world: &Fleet) {
    let render_dir = world.dir().join("render");
    feed(&render_dir, "01-basic");
    let mut ctl = world.controller(opts(world, DIR_ID, &render_dir));
    let mut last_passed = String::new();
    for render in stream() {
        feed(&render_dir, &render);
        last_passed = check_render(world, &render, &last_passed).await;
    }
    // The last render (maps only) passed: -invalid, general files, crt-lists and certificate
    // Secrets are deleted.
    let general = Api::<HAProxyGeneralFile>::namespaced(world.client(), world.namespace());
    let crtlists = Api::<HAProxyCRTListFile>::namespaced(world.client(), world.namespace());
    let secrets = Api::<Secret>::namespaced(world.client(), world.namespace());
    let published_secrets = ListParams::default().labels("haproxy-haptic.org/runtime-config");
    world
        .eventually(bounds().converge(), "GC of the last render", || async {
            let none = world.hpcfg(INVALID).await.is_none()
                && general
                    .list(&ListParams::default())
                    .await
                    .ok()?
                    .items
                    .is_empty()
                && crtlists
                    .list(&ListParams::default())
                    .await
                    .ok()?
                    .items
                    .is_empty()
                && secrets
                    .list(&published_secrets)
                    .await
                    .ok()?
                    .items
                    .is_empty();
            none.then_some(())
        })
        .await;
    // 08 and 09 are both rejected: the second ConfigPinned Event is a patch of the first's series.
    event_until(
        world,
        bounds().follow_up(),
        "ConfigPinned Event series",
        |e| {
            e.reason.as_deref() == Some("ConfigPinned")
                && e.series.as_ref().is_some_and(|s| s.count >= 2)
        },
    )
    .await;
    stop_cleanly(&mut ctl);
    assert!(
        world.lease_holder(LEASE).await.is_none(),
        "the Lease is released on SIGTERM"
    );
}

/// Writes the render in `dir` to the ConfigMap `rbac-render` and the Secret `rbac-render-certs`
/// (key conventions of `src/source/configmap.rs`: `<folder>--<name>`, `ssl--` and `ca--` keys in
/// the Secret), Secret first; returns the render's checksum.
async fn write_source(world: &Fleet, dir: &Path) -> Checksum {
    let render = read_render(dir).unwrap();
    put_configmap_render(
        &world.client(),
        world.namespace(),
        "rbac-render",
        "rbac-render-certs",
        &render,
    )
    .await;
    render.checksum()
}

/// Waits until the main HAProxyCfg holds the render `want` with all 3 pods on it.
async fn on_checksum(world: &Fleet, want: Checksum) {
    let what = format!("HAProxyCfg on {want}");
    main_until(world, bounds().converge(), &what, |c| {
        let p = Published::of(c);
        p.on(&want, 3).then_some(()).ok_or(format!("{p:?}"))
    })
    .await;
}

/// Appends `text` to the file `path`.
fn append(path: &Path, text: &str) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes.extend_from_slice(text.as_bytes());
    std::fs::write(path, bytes).unwrap();
}

/// The ConfigMap source with its certificate Secret: 04-errors, then its error page changed in
/// place; 06-crtlist, then its crt-list and certificate changed in place (the stream never changes
/// a general file, crt-list or certificate in place: these are the updates of those objects).
async fn configmap_run(world: &Fleet) {
    let dir = world.dir().join("cm-render");
    feed(&dir, "04-errors");
    let first = write_source(world, &dir).await;
    assert_eq!(first, checksum("04-errors"), "the source keeps the render");
    let opts = opts(world, CM_ID, Path::new("/nonexistent"))
        .with_configmap("rbac-render", Some("rbac-render-certs"));
    let mut ctl = world.controller(opts);
    published(world, "04-errors", 3).await;
    answers(world, "04-errors").await;

    append(&dir.join("general/403.http"), "changed in place\n");
    on_checksum(world, write_source(world, &dir).await).await;

    feed(&dir, "06-crtlist");
    write_source(world, &dir).await;
    published(world, "06-crtlist", 3).await;
    answers(world, "06-crtlist").await;

    append(&dir.join("crt-lists/sites.crtlist"), "# changed in place\n");
    append(&dir.join("ssl/site.pem"), "\n");
    on_checksum(world, write_source(world, &dir).await).await;

    stop_cleanly(&mut ctl);
}

on_peers!(Emulator, the_role_grants_exactly_what_the_controller_calls => role_grants_exactly);

/// [`observed_and_checked`], then the fleet stops.
pub async fn role_grants_exactly(peers: Peers) {
    let (world, _) = observed_and_checked(peers).await;
    world.shutdown().await;
}

/// Both runs on a fleet of 3 pods on `peers`, then the check of every call against deploy/'s
/// Role: every observed triple granted, every grant observed (or on [`NOT_EXERCISED`]). Returns
/// the fleet, still up, and the first request seen of each observed triple.
pub async fn observed_and_checked(peers: Peers) -> (Fleet, BTreeMap<Triple, RequestRecord>) {
    let world = start(peers, 3).await;
    dir_run(&world).await;
    configmap_run(&world).await;

    let mut observed: BTreeMap<Triple, usize> = BTreeMap::new();
    let mut first: BTreeMap<Triple, RequestRecord> = BTreeMap::new();
    let mut unauthorizable = Vec::new();
    let mut seen = BTreeSet::new();
    for r in world.api_requests().unwrap() {
        if !r.user_agent.contains("haptic/") {
            continue;
        }
        for id in [DIR_ID, CM_ID] {
            if r.user_agent.contains(&format!("({id})")) {
                seen.insert(id);
            }
        }
        match classify(&r, world.namespace()) {
            Ok(t) => {
                *observed.entry(t.clone()).or_default() += 1;
                first.entry(t).or_insert(r);
            }
            Err(e) => unauthorizable.push(e),
        }
    }
    assert_eq!(seen.len(), 2, "both runs are in the request log");
    let table: Vec<String> = observed
        .iter()
        .map(|((g, r, v), n)| format!("{:<22} {:<30} {:<8} {n}", format!("{g:?}"), r, v))
        .collect();
    println!(
        "observed (group, resource, verb, requests):\n{}",
        table.join("\n")
    );
    assert!(
        unauthorizable.is_empty(),
        "requests a namespaced Role cannot grant: {unauthorizable:?}"
    );

    let grants = granted();
    let observed: BTreeSet<Triple> = observed.into_keys().collect();
    let missing: Vec<&Triple> = observed.difference(&grants).collect();
    assert!(missing.is_empty(), "called but not granted: {missing:?}");

    let allowed: BTreeSet<Triple> = NOT_EXERCISED
        .iter()
        .map(|(g, r, v, _why)| ((*g).into(), (*r).into(), (*v).into()))
        .collect();
    let unused: Vec<&Triple> = grants
        .difference(&observed)
        .filter(|t| !allowed.contains(*t))
        .collect();
    assert!(unused.is_empty(), "granted but never called: {unused:?}");
    // The allow-list stays honest: what it excuses is granted and really not called.
    for t in &allowed {
        assert!(grants.contains(t), "allow-listed but not granted: {t:?}");
        assert!(!observed.contains(t), "allow-listed but called: {t:?}");
    }
    (world, first)
}

#[test]
fn requests_map_to_verbs_the_way_the_authorizer_does() {
    let req = |method: &str, path: &str, query: &str| RequestRecord {
        method: method.into(),
        path: path.into(),
        query: query.into(),
        status: 200,
        at: String::new(),
        user_agent: "haptic/0 (t)".into(),
    };
    let t = |g: &str, r: &str, v: &str| Ok((g.to_owned(), r.to_owned(), v.to_owned()));
    let ns = "/api/v1/namespaces/n";
    let crs = "/apis/haproxy-haptic.org/v1alpha1/namespaces/n/haproxycfgs";
    for (r, want) in [
        (req("GET", &format!("{ns}/pods"), ""), t("", "pods", "list")),
        (
            req("GET", &format!("{ns}/pods"), "labelSelector=a&watch=true"),
            t("", "pods", "watch"),
        ),
        (
            req("GET", &format!("{ns}/secrets"), "watch=1"),
            t("", "secrets", "watch"),
        ),
        (
            req("GET", "/api/v1/watch/namespaces/n/secrets", ""),
            t("", "secrets", "watch"),
        ),
        (
            req("GET", &format!("{ns}/secrets/s"), ""),
            t("", "secrets", "get"),
        ),
        (
            req("POST", crs, ""),
            t("haproxy-haptic.org", "haproxycfgs", "create"),
        ),
        (
            req("PUT", &format!("{crs}/c/status"), ""),
            t("haproxy-haptic.org", "haproxycfgs/status", "update"),
        ),
        (
            req("PATCH", "/apis/events.k8s.io/v1/namespaces/n/events/e", ""),
            t("events.k8s.io", "events", "patch"),
        ),
        (
            req("DELETE", &format!("{crs}/c"), ""),
            t("haproxy-haptic.org", "haproxycfgs", "delete"),
        ),
        (
            req("DELETE", crs, ""),
            t("haproxy-haptic.org", "haproxycfgs", "deletecollection"),
        ),
    ] {
        assert_eq!(classify(&r, "n"), want, "{r:?}");
    }
    for r in [
        req("GET", "/version", ""),
        req("GET", "/api/v1/namespaces/other/pods", ""),
        req("GET", "/api/v1/nodes", ""),
        req(
            "GET",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            "",
        ),
    ] {
        assert!(classify(&r, "n").is_err(), "{r:?}");
    }
}
