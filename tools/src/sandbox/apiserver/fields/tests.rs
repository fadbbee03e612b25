#![allow(clippy::unwrap_used)]

use super::*;

const W1: Writer<'static> = Writer {
    manager: "a",
    subresource: "",
    api_version: "v1",
    now: "t",
    schema: None,
};
const W2: Writer<'static> = Writer { manager: "b", ..W1 };

#[test]
fn apply_conflicts_forces_and_removes_dropped_fields() {
    let base = json!({"metadata": {"name": "x"}});
    let one = apply(&base, &json!({"spec": {"h": "a", "d": 1}}), &W1, false).unwrap();
    let err = apply(&one, &json!({"spec": {"h": "b"}}), &W2, false).unwrap_err();
    assert_eq!(
        err,
        vec![Conflict {
            manager: "a".into(),
            field: ".spec.h".into()
        }]
    );
    let same = apply(&one, &json!({"spec": {"d": 1}}), &W2, false).unwrap();
    assert_eq!(same["spec"], json!({"h": "a", "d": 1}));
    let forced = apply(&one, &json!({"spec": {"h": "b"}}), &W2, true).unwrap();
    assert_eq!(forced["spec"]["h"], "b");
    let dropped = apply(&forced, &json!({"spec": {}}), &W1, false).unwrap();
    assert_eq!(dropped["spec"], json!({"h": "b"}));
}

#[test]
fn numbers_are_compared_by_value_as_the_api_server_decodes_them() {
    // Found by `kubectl apply --server-side -f deploy/crds` over CRDs a client created with
    // `minimum: 0.0`: kubectl sends `0`; the real kube-apiserver finds no conflict.
    let base = json!({"metadata": {"name": "x"}});
    let one = apply(&base, &json!({"spec": {"min": 0.0, "n": 2}}), &W1, false).unwrap();
    apply(&one, &json!({"spec": {"min": 0, "n": 2.0}}), &W2, false).unwrap();
    let err = apply(&one, &json!({"spec": {"min": 0.5}}), &W2, false).unwrap_err();
    assert_eq!(err[0].field, ".spec.min");
}

#[test]
fn keyed_lists_are_owned_per_item() {
    let schema = json!({"type": "object", "properties": {"status": {"type": "object", "properties": {
        "conditions": {"type": "array", "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"], "items": {"type": "object"}}}}}});
    let wa = Writer {
        schema: Some(&schema),
        ..W1
    };
    let wb = Writer {
        schema: Some(&schema),
        ..W2
    };
    let cond = |t: &str, s: &str| json!({"type": t, "status": s});
    let conditions = |c: &[Value]| json!({"status": {"conditions": c}});
    let base = json!({"metadata": {"name": "x"}});
    let one = apply(&base, &conditions(&[cond("A", "True")]), &wa, false).unwrap();
    let two = apply(&one, &conditions(&[cond("B", "False")]), &wb, false).unwrap();
    assert_eq!(
        two["status"]["conditions"],
        json!([cond("A", "True"), cond("B", "False")])
    );
    let mf = &two["metadata"]["managedFields"][1]["fieldsV1"]["f:status"]["f:conditions"];
    assert!(mf.get("k:{\"type\":\"B\"}").is_some(), "{mf}");
    let err = apply(&two, &conditions(&[cond("A", "False")]), &wb, false).unwrap_err();
    assert_eq!(err[0].field, ".status.conditions[type=\"A\"].status");
    let dropped = apply(&two, &conditions(&[]), &wa, false).unwrap();
    assert_eq!(dropped["status"]["conditions"], json!([cond("B", "False")]));
    let read_back = read(&dropped);
    assert_eq!(read_back.len(), 1);
    assert_eq!(read_back[0].manager, "b");
}
