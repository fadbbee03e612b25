//! Discovery (`/api`, `/apis`, `/api/v1`, `/apis/G[/V]`, legacy and aggregated), `/version` and the
//! minimal `/openapi/v3` kubectl's default strict validation needs (apiserver-emulation.md §2, §3).

use super::resources::ResourceType;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// Content-Type of an aggregated discovery answer; client-go switches on exactly this string.
pub const AGGREGATED_CT: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

const VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// `/version`: minor 32, so the kubectl dispatcher runs its 1.32 build.
pub fn version() -> Value {
    json!({"major": "1", "minor": "32", "gitVersion": "v1.32.0-haptic-sandbox",
        "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
        "buildDate": "2024-12-11T00:00:00Z", "goVersion": "go1.23", "compiler": "gc",
        "platform": "linux/amd64"})
}

/// Versions of one group, each with its types.
type Versions<'a> = Vec<(String, Vec<&'a ResourceType>)>;

/// Group name -> version -> types, groups in registration order (core excluded).
fn groups(types: &[ResourceType]) -> Vec<(String, Versions<'_>)> {
    let mut out: Vec<(String, Versions<'_>)> = Vec::new();
    for t in types.iter().filter(|t| !t.group.is_empty()) {
        let gi = match out.iter().position(|(g, _)| *g == t.group) {
            Some(i) => i,
            None => {
                out.push((t.group.clone(), Vec::new()));
                out.len() - 1
            }
        };
        let versions = &mut out[gi].1;
        match versions.iter_mut().find(|(v, _)| *v == t.version) {
            Some((_, list)) => list.push(t),
            None => versions.push((t.version.clone(), vec![t])),
        }
    }
    out
}

/// `/api` (legacy `APIVersions`).
pub fn api_legacy(addr: &str) -> Value {
    json!({"kind": "APIVersions", "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": addr}]})
}

/// `/apis` (legacy `APIGroupList`).
pub fn apis_legacy(types: &[ResourceType]) -> Value {
    let groups: Vec<Value> = groups(types)
        .into_iter()
        .map(|(g, vs)| group_doc(&g, &vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

fn group_doc(g: &str, vs: &Versions<'_>) -> Value {
    let versions: Vec<Value> = vs
        .iter()
        .map(|(v, _)| json!({"groupVersion": format!("{g}/{v}"), "version": v}))
        .collect();
    json!({"kind": "APIGroup", "apiVersion": "v1", "name": g, "versions": versions, "preferredVersion": versions[0]})
}

/// `/apis/G` (`APIGroup`), if the group exists.
pub fn group(types: &[ResourceType], name: &str) -> Option<Value> {
    groups(types)
        .into_iter()
        .find(|(g, _)| g == name)
        .map(|(g, vs)| group_doc(&g, &vs))
}

/// The types of one group-version, in registration order; `None` when it has none.
fn of_group_version<'a>(
    types: &'a [ResourceType],
    group: &str,
    version: &str,
) -> Option<Vec<&'a ResourceType>> {
    let selected: Vec<&ResourceType> = types
        .iter()
        .filter(|t| t.group == group && t.version == version)
        .collect();
    (!selected.is_empty()).then_some(selected)
}

/// `/api/v1` or `/apis/G/V` (`APIResourceList`), if the group-version exists.
pub fn resource_list(types: &[ResourceType], group: &str, version: &str) -> Option<Value> {
    let selected = of_group_version(types, group, version)?;
    let mut resources = Vec::new();
    for t in &selected {
        let mut r = json!({"name": t.plural, "singularName": t.singular, "namespaced": t.namespaced,
            "kind": t.kind, "verbs": VERBS, "shortNames": t.short_names});
        if !t.categories.is_empty() {
            r["categories"] = json!(t.categories);
        }
        resources.push(r);
        if t.status_subresource {
            resources.push(
                json!({"name": format!("{}/status", t.plural), "singularName": "",
                "namespaced": t.namespaced, "kind": t.kind, "verbs": ["get", "patch", "update"]}),
            );
        }
    }
    let gv = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    )
}

fn aggregated_version(v: &str, list: &[&ResourceType]) -> Value {
    let resources: Vec<Value> = list
        .iter()
        .map(|t| {
            let kind = json!({"group": t.group, "version": t.version, "kind": t.kind});
            let mut r = json!({"resource": t.plural, "responseKind": kind,
                "scope": if t.namespaced { "Namespaced" } else { "Cluster" },
                "singularResource": t.singular, "verbs": VERBS, "shortNames": t.short_names});
            if !t.categories.is_empty() {
                r["categories"] = json!(t.categories);
            }
            if t.status_subresource {
                r["subresources"] = json!([{"subresource": "status", "responseKind": kind,
                    "verbs": ["get", "patch", "update"]}]);
            }
            r
        })
        .collect();
    json!({"version": v, "freshness": "Current", "resources": resources})
}

/// `/api` in the aggregated form (one item without a name).
pub fn api_aggregated(types: &[ResourceType]) -> Value {
    let core: Vec<&ResourceType> = types.iter().filter(|t| t.group.is_empty()).collect();
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {},
        "items": [{"metadata": {}, "versions": [aggregated_version("v1", &core)]}]})
}

/// `/apis` in the aggregated form.
pub fn apis_aggregated(types: &[ResourceType]) -> Value {
    let items: Vec<Value> = groups(types)
        .into_iter()
        .map(|(g, vs)| {
            let versions: Vec<Value> = vs
                .iter()
                .map(|(v, list)| aggregated_version(v, list))
                .collect();
            json!({"metadata": {"name": g}, "versions": versions})
        })
        .collect();
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": items})
}

/// The OpenAPI v3 document of one group-version: a PATCH operation with `fieldValidation` per kind
/// (no `requestBody`, so client-side apply does not build patches from it).
pub fn openapi_gv(types: &[ResourceType], group: &str, version: &str) -> Option<Value> {
    let selected = of_group_version(types, group, version)?;
    let mut paths = serde_json::Map::new();
    for t in selected {
        let base = t.gv_path();
        let item = if t.namespaced {
            format!("{base}/namespaces/{{namespace}}/{}/{{name}}", t.plural)
        } else {
            format!("{base}/{}/{{name}}", t.plural)
        };
        let op = json!({"patch": {
            "x-kubernetes-group-version-kind": {"group": t.group, "version": t.version, "kind": t.kind},
            "parameters": [{"name": "fieldValidation", "in": "query", "schema": {"type": "string"}}],
            "responses": {"200": {"description": "OK"}}}});
        paths.insert(item, op);
    }
    Some(
        json!({"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.32.0"}, "paths": paths}),
    )
}

/// `/openapi/v3`: one entry per group-version, with a content hash so kubectl's disk cache notices
/// CRD changes.
pub fn openapi_root(types: &[ResourceType]) -> Value {
    let mut gvs: BTreeMap<String, (String, String)> = BTreeMap::new();
    for t in types {
        let key = if t.group.is_empty() {
            format!("api/{}", t.version)
        } else {
            format!("apis/{}/{}", t.group, t.version)
        };
        gvs.insert(key, (t.group.clone(), t.version.clone()));
    }
    let mut paths = serde_json::Map::new();
    for (key, (g, v)) in gvs {
        let doc = openapi_gv(types, &g, &v).unwrap_or(Value::Null);
        let hash = hex::encode(Sha256::digest(doc.to_string()));
        paths.insert(
            key.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{key}?hash={hash}")}),
        );
    }
    json!({"paths": paths})
}
