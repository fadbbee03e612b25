//! Leases: server-side apply ownership and kube-lease-manager end to end.

use super::Env;
use super::kube_client::api_err;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

#[tokio::test]
async fn server_side_apply_conflicts_force_and_removal() {
    let env = Env::start().await;
    let leases: Api<Lease> = Api::namespaced(env.client(false).await, "default");
    let body = |holder: &str, extra: Value| {
        let mut spec = json!({"holderIdentity": holder, "leaseDurationSeconds": 15});
        spec.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "spec": spec})
    };
    let a = PatchParams::apply("manager-a");
    let created = leases
        .patch(
            "leader",
            &a,
            &Patch::Apply(body("a", json!({"leaseTransitions": 1}))),
        )
        .await
        .unwrap();
    assert_eq!(
        created.spec.as_ref().unwrap().holder_identity.as_deref(),
        Some("a")
    );
    let mf = created.metadata.managed_fields.clone().unwrap();
    assert_eq!(
        (mf[0].manager.as_deref(), mf[0].operation.as_deref()),
        (Some("manager-a"), Some("Apply"))
    );

    let b = PatchParams::apply("manager-b");
    let conflict = api_err(
        leases
            .patch("leader", &b, &Patch::Apply(body("b", json!({}))))
            .await
            .unwrap_err(),
    );
    assert_eq!((conflict.code, conflict.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        conflict.message,
        "Apply failed with 1 conflict: conflict with \"manager-a\": .spec.holderIdentity"
    );
    // same value: co-owned, no conflict
    leases
        .patch("leader", &b, &Patch::Apply(body("a", json!({}))))
        .await
        .unwrap();
    let forced = leases
        .patch(
            "leader",
            &b.clone().force(),
            &Patch::Apply(body("b", json!({}))),
        )
        .await
        .unwrap();
    assert_eq!(
        forced.spec.as_ref().unwrap().holder_identity.as_deref(),
        Some("b")
    );

    // manager-a stops applying leaseTransitions: removed (nobody else owns it)
    let a_again = leases
        .patch(
            "leader",
            &a,
            &Patch::Apply(
                json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "spec": {"leaseDurationSeconds": 15}}),
            ),
        )
        .await
        .unwrap();
    let spec = a_again.spec.unwrap();
    assert_eq!(
        (spec.lease_transitions, spec.holder_identity.as_deref()),
        (None, Some("b"))
    );

    // kube-lease-manager's release: strategic merge with nulls removes the fields
    let released = leases
        .patch(
            "leader",
            &PatchParams::default(),
            &Patch::Strategic(
                json!({"spec": {"holderIdentity": null, "leaseDurationSeconds": null}}),
            ),
        )
        .await
        .unwrap();
    let spec = released.spec.unwrap();
    assert_eq!(
        (spec.holder_identity, spec.lease_duration_seconds),
        (None, None)
    );
    // after the release, the next apply of a new holder is conflict-free
    let c = leases
        .patch(
            "leader",
            &PatchParams::apply("manager-c"),
            &Patch::Apply(body("c", json!({}))),
        )
        .await
        .unwrap();
    assert_eq!(c.spec.unwrap().holder_identity.as_deref(), Some("c"));

    let no_manager = env
        .http(
            "PATCH",
            "/apis/coordination.k8s.io/v1/namespaces/default/leases/leader",
            "application/apply-patch+yaml",
            Some(b"{}".to_vec()),
        )
        .await;
    assert_eq!(
        (no_manager.0, no_manager.1["reason"].as_str()),
        (422, Some("Invalid"))
    );
}

#[tokio::test]
async fn kube_lease_manager_acquires_releases_and_hands_over() {
    let env = Env::start().await;
    let client = env.client(true).await;
    let build = |identity: &str| {
        kube_lease_manager::LeaseManagerBuilder::new(client.clone(), "leader")
            .with_namespace("default")
            .with_identity(identity)
            .with_duration(3)
            .with_grace(1)
            .build()
    };
    let one = build("one").await.unwrap();
    let two = build("two").await.unwrap();
    let wait = super::WAIT;
    assert!(
        tokio::time::timeout(wait, one.changed())
            .await
            .unwrap()
            .unwrap()
    );
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    let holder = |l: Lease| l.spec.and_then(|s| s.holder_identity);
    assert_eq!(
        holder(leases.get("leader").await.unwrap()).as_deref(),
        Some("one")
    );

    let waiter = tokio::spawn(async move {
        let r = two.changed().await;
        (two, r)
    });
    one.release().await.unwrap();
    let (two, won) = tokio::time::timeout(wait, waiter).await.unwrap().unwrap();
    assert!(won.unwrap());
    let lease = leases.get("leader").await.unwrap();
    assert_eq!(holder(lease.clone()).as_deref(), Some("two"));
    assert!(lease.spec.unwrap().lease_transitions.unwrap_or(0) >= 1);
    two.release().await.unwrap();
    assert_eq!(holder(leases.get("leader").await.unwrap()), None);
}
