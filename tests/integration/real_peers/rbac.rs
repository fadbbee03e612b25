//! The e2e RBAC test against the real RBAC authorizer: the two runs of `e2e::rbac` (directory
//! source over the whole stream, then the ConfigMap source) as deploy/'s ServiceAccount, every
//! call of theirs allowed by the authorizer (the audit log's decision); then each grant of the
//! Role removed in turn (the Role replaced without that `(apiGroup, resource, verb)`): the first
//! call the controller made under it, replayed with the controller's token, is refused 403.

use std::collections::BTreeSet;

use haptic_testkit::real::setup::{RBAC_IN_FORCE, deploy_docs, into_namespace};
use haptic_testkit::{Fleet, Peers, RequestRecord};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role};
use kube::Api;
use kube::api::PostParams;

use crate::e2e::rbac::{Triple, granted, observed_and_checked};

/// deploy/'s Role in `ns` with one rule per granted triple, `without` left out.
fn role_without(ns: &str, without: Option<&Triple>) -> Role {
    let docs = deploy_docs("Role").unwrap();
    assert_eq!(docs.len(), 1, "one Role in deploy/");
    let mut role: Role = serde_json::from_value(into_namespace(docs[0].clone(), ns)).unwrap();
    role.rules = Some(
        granted()
            .into_iter()
            .filter(|t| Some(t) != without)
            .map(|(group, resource, verb)| PolicyRule {
                api_groups: Some(vec![group]),
                resources: Some(vec![resource]),
                verbs: vec![verb],
                ..PolicyRule::default()
            })
            .collect(),
    );
    role
}

async fn put_role(world: &Fleet, role: Role) {
    let api = Api::<Role>::namespaced(world.client(), world.namespace());
    let name = role.metadata.name.clone().unwrap();
    let mut role = role;
    role.metadata.resource_version = api.get(&name).await.unwrap().metadata.resource_version;
    api.replace(&name, &PostParams::default(), &role)
        .await
        .unwrap();
}

/// What the authorizer answers the controller for `t` (a SelfSubjectAccessReview, which every
/// authenticated user may create).
async fn allowed(world: &Fleet, t: &Triple) -> bool {
    let (group, res) = (&t.0, &t.1);
    let (resource, subresource) = res.split_once('/').unwrap_or((res, ""));
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                group: Some(group.clone()),
                resource: Some(resource.to_owned()),
                subresource: (!subresource.is_empty()).then(|| subresource.to_owned()),
                verb: Some(t.2.clone()),
                namespace: Some(world.namespace().to_owned()),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    let got = Api::<SelfSubjectAccessReview>::all(world.controller_client())
        .create(&PostParams::default(), &review)
        .await
        .unwrap();
    got.status.is_some_and(|s| s.allowed)
}

/// `r` sent again with the controller's token (an empty JSON body for writes: the authorizer
/// answers before the body is read); the HTTP status and the answer.
async fn replay(world: &Fleet, r: &RequestRecord) -> (u16, String) {
    let uri = if r.query.is_empty() {
        r.path.clone()
    } else {
        format!("{}?{}", r.path, r.query)
    };
    let (body, ctype) = match r.method.as_str() {
        "GET" | "DELETE" => (Vec::new(), "application/json"),
        "PATCH" => (b"{}".to_vec(), "application/merge-patch+json"),
        _ => (b"{}".to_vec(), "application/json"),
    };
    let req = http::Request::builder()
        .method(r.method.as_str())
        .uri(uri)
        .header("content-type", ctype)
        .body(body)
        .unwrap();
    match world.controller_client().request_text(req).await {
        Ok(text) => (200, text),
        Err(kube::Error::Api(s)) => (s.code, s.message),
        Err(e) => (0, e.to_string()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_authorizer_allows_every_call_and_each_grant_is_needed() {
    let (world, first) = observed_and_checked(Peers::Real).await;
    let real = world.real().unwrap();
    let sa = format!(
        "system:serviceaccount:{}:{}",
        world.namespace(),
        real.service_account
    );
    // Every call of the controller's: allowed by the RoleBinding, never 403.
    let audit = world.audit().unwrap();
    let mine: Vec<_> = audit.iter().filter(|e| e.user == sa).collect();
    assert!(!mine.is_empty(), "the controller's calls are audited");
    let refused: Vec<String> = mine
        .iter()
        .filter(|e| e.decision != "allow" || e.code == 403)
        .map(|e| format!("{} {} -> {} ({})", e.verb, e.request_uri, e.code, e.reason))
        .collect();
    assert!(
        refused.is_empty(),
        "refused by the real authorizer: {refused:#?}"
    );
    assert!(
        mine.iter()
            .filter(|e| !e.resource.is_empty() && e.namespace == world.namespace())
            .all(|e| e.reason.contains("RoleBinding")),
        "namespaced calls are allowed by deploy/'s RoleBinding"
    );

    // Each grant removed in turn: its first observed call is refused.
    let mut not_refused = Vec::new();
    let mut checked = BTreeSet::new();
    for t in granted() {
        let call = first
            .get(&t)
            .unwrap_or_else(|| panic!("granted but never called: {t:?}"));
        put_role(&world, role_without(world.namespace(), Some(&t))).await;
        world
            .eventually(
                RBAC_IN_FORCE,
                &format!("the Role without {t:?} in force"),
                || {
                    let t = t.clone();
                    let world = &world;
                    async move { !allowed(world, &t).await }
                },
            )
            .await;
        let (code, message) = replay(&world, call).await;
        let named = format!("{t:?}: {} {}?{}", call.method, call.path, call.query);
        if code == 403 && message.contains(&format!("cannot {}", t.2)) {
            checked.insert(named);
        } else {
            not_refused.push(format!("{named} -> {code} {message}"));
        }
    }
    put_role(&world, role_without(world.namespace(), None)).await;
    assert!(
        not_refused.is_empty(),
        "without the grant, these calls were not refused: {not_refused:#?}"
    );
    eprintln!("refused without their grant: {checked:#?}");
    world.shutdown().await;
}
