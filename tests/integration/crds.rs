//! The CRDs: generated files, CLI output, printer columns, and schemas that accept our objects.

use std::fs;
use std::path::Path;

use haptic::k8s::crd::{
    self, AuxiliaryFileReferences, AuxiliaryFileStatus, ConfigMetadata, HAProxyCRTListFile,
    HAProxyCRTListFileSpec, HAProxyCfg, HAProxyCfgSpec, HAProxyCfgStatus, HAProxyGeneralFile,
    HAProxyGeneralFileSpec, HAProxyMapFile, HAProxyMapFileSpec, OperationSummary,
    PodDeploymentStatus, ResourceReference, conditions, reasons,
};
use haptic_journal::{Checksum, ReloadId, render_checksum};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, MicroTime, Time};
use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

const REGENERATE_ENV: &str = "HAPTIC_UPDATE_CRDS";

fn crds_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/crds")
}

#[test]
fn deploy_crds_match_the_types() {
    let regenerate = std::env::var_os(REGENERATE_ENV).is_some();
    for crd in crd::crds() {
        let file = crds_dir().join(format!("{}.yaml", crd.spec.names.plural));
        let want = crd::crd_yaml(&crd).unwrap();
        if regenerate {
            fs::create_dir_all(crds_dir()).unwrap();
            fs::write(&file, &want).unwrap();
            continue;
        }
        let have = fs::read_to_string(&file).unwrap_or_default();
        assert!(
            have == want,
            "{} differs from the CRD types; regenerate with:\n  \
             {REGENERATE_ENV}=1 cargo test -p haptic --test integration crds::",
            file.display()
        );
    }
}

#[test]
fn haptic_crds_prints_the_deploy_files() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_haptic"))
        .arg("crds")
        .output()
        .unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(stdout, crd::all_crds_yaml().unwrap());
    let docs: Vec<&str> = stdout.split("---\n").filter(|d| !d.is_empty()).collect();
    let plurals: Vec<String> = crd::crds()
        .iter()
        .map(|c| c.spec.names.plural.clone())
        .collect();
    assert_eq!(
        plurals,
        [
            "haproxycfgs",
            "haproxymapfiles",
            "haproxygeneralfiles",
            "haproxycrtlistfiles"
        ]
    );
    assert_eq!(docs.len(), 4);

    let version = std::process::Command::new(env!("CARGO_BIN_EXE_haptic"))
        .arg("version")
        .output();
    let version = String::from_utf8(version.unwrap().stdout).unwrap();
    assert_eq!(version, format!("haptic {}\n", env!("CARGO_PKG_VERSION")));
}

#[test]
fn names_scope_and_columns() {
    let shorts: Vec<(String, Vec<String>)> = crd::crds()
        .into_iter()
        .map(|c| {
            (
                c.spec.names.kind,
                c.spec.names.short_names.unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        shorts,
        [
            ("HAProxyCfg".into(), vec!["hpcfg".into()]),
            ("HAProxyMapFile".into(), vec!["hpmap".into()]),
            ("HAProxyGeneralFile".into(), vec!["hpgf".into()]),
            ("HAProxyCRTListFile".into(), vec!["hpcl".into()]),
        ]
    );
    for c in crd::crds() {
        assert_eq!(c.spec.group, crd::GROUP);
        assert_eq!(c.spec.scope, "Namespaced");
        let v = &c.spec.versions[0];
        assert_eq!(v.name, crd::VERSION);
        assert!(
            v.subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some()
        );
    }
    let cfg = HAProxyCfg::crd_for_test();
    let columns: Vec<String> = cfg.spec.versions[0]
        .additional_printer_columns
        .iter()
        .flatten()
        .filter(|c| c.priority.unwrap_or(0) == 0)
        .map(|c| c.name.clone())
        .collect();
    assert_eq!(
        columns,
        [
            "Checksum",
            "Pods",
            "Synced",
            "ConfigValidated",
            "ConfigPinned",
            "Age"
        ]
    );
}

trait CrdForTest {
    fn crd_for_test() -> CustomResourceDefinition;
}

impl<K: kube::CustomResourceExt> CrdForTest for K {
    fn crd_for_test() -> CustomResourceDefinition {
        K::crd()
    }
}

fn time(s: &str) -> Time {
    Time(s.parse::<Timestamp>().unwrap())
}

fn full_pod(name: &str, checksum: Checksum) -> PodDeploymentStatus {
    PodDeploymentStatus {
        pod_name: name.into(),
        namespace: Some("haproxy".into()),
        checksum: Some(checksum),
        deployed_at: Some(time("2026-11-30T06:00:00Z")),
        last_reload_at: Some(time("2026-11-30T06:00:01Z")),
        last_reload_id: Some(ReloadId::new("2026-11-30-3")),
        sync_duration: Some("1250ms".into()),
        version_conflict_retries: Some(1),
        fallback_used: Some(false),
        sync_mode: Some("runtime".into()),
        last_operation_summary: Some(OperationSummary {
            total_api_operations: 3,
            backends_added: 1,
            servers_modified: 2,
            ..OperationSummary::default()
        }),
        last_error: None,
        rejected: None,
        next_retry_at: None,
        consecutive_errors: Some(0),
        last_error_at: None,
    }
}

/// A pod whose first deployment failed: an error, and no `deployedAt`.
fn failed_pod(name: &str) -> PodDeploymentStatus {
    PodDeploymentStatus {
        pod_name: name.into(),
        last_error: Some("reload 2026-11-30-4 failed: [ALERT] ...".into()),
        consecutive_errors: Some(1),
        last_error_at: Some(MicroTime(time("2026-11-30T06:00:02Z").0)),
        ..PodDeploymentStatus::default()
    }
}

fn condition(type_: &str, status: &str, reason: &str) -> Condition {
    Condition {
        last_transition_time: time("2026-11-30T06:00:00Z"),
        message: String::new(),
        observed_generation: Some(2),
        reason: reason.into(),
        status: status.into(),
        type_: type_.into(),
    }
}

fn aux_status(checksum: Checksum) -> AuxiliaryFileStatus {
    AuxiliaryFileStatus {
        deployed_to_pods: vec![full_pod("haproxy-0", checksum), failed_pod("haproxy-1")],
        observed_generation: Some(1),
        conditions: vec![condition(
            conditions::SIZE_LIMIT_EXCEEDED,
            "False",
            reasons::WITHIN_SIZE_LIMIT,
        )],
    }
}

fn reference(kind: &str, name: &str) -> ResourceReference {
    ResourceReference {
        kind: kind.into(),
        name: name.into(),
        namespace: Some("haproxy".into()),
    }
}

pub(crate) fn examples() -> Vec<(CustomResourceDefinition, Value)> {
    let checksum = render_checksum(b"global\n", &[]);
    let mut cfg = HAProxyCfg::new(
        "web-haproxycfg",
        HAProxyCfgSpec {
            path: crd::HAPROXY_CONFIG_PATH.into(),
            content: "global\n".into(),
            checksum,
            compressed: true,
        },
    );
    let mut status = HAProxyCfgStatus {
        deployed_to_pods: vec![full_pod("haproxy-0", checksum), failed_pod("haproxy-1")],
        pods_synced: None,
        auxiliary_files: Some(AuxiliaryFileReferences {
            map_files: vec![reference("HAProxyMapFile", "haproxy-map-hosts-0123456789")],
            ssl_certificates: vec![reference("Secret", "haproxy-cert-ex-0123456789")],
            ca_files: vec![reference("Secret", "haproxy-ca-ca-0123456789")],
            general_files: vec![reference(
                "HAProxyGeneralFile",
                "haproxy-file-503-0123456789",
            )],
            crt_list_files: vec![reference(
                "HAProxyCRTListFile",
                "haproxy-crtlist-l-0123456789",
            )],
        }),
        metadata: Some(ConfigMetadata {
            total_size: Some(7),
            content_size: Some(7),
            rendered_at: Some(time("2026-11-30T05:59:58Z")),
            validated_at: Some(time("2026-11-30T05:59:59Z")),
        }),
        validation_error: Some("[ALERT] bad (+2 more errors)".into()),
        observed_generation: Some(2),
        conditions: vec![
            condition(
                conditions::CONFIG_VALIDATED,
                "True",
                reasons::VALIDATION_SUCCEEDED,
            ),
            condition(
                conditions::CONFIG_PINNED,
                "False",
                reasons::NEWEST_RENDER_PASSED,
            ),
            condition(
                conditions::SIZE_LIMIT_EXCEEDED,
                "False",
                reasons::WITHIN_SIZE_LIMIT,
            ),
        ],
    };
    status.refresh_pods_synced(&checksum);
    assert_eq!(status.pods_synced.as_deref(), Some("1/2"));
    // One pod failed: Synced=False/PodsFailed, as the status worker writes it.
    assert!(status.refresh_synced(&checksum, Some(2), &time("2026-11-30T06:00:02Z")));
    let synced = status.conditions.last().unwrap();
    assert_eq!(
        (
            synced.type_.as_str(),
            synced.status.as_str(),
            synced.reason.as_str()
        ),
        (conditions::SYNCED, "False", reasons::PODS_FAILED)
    );
    cfg.status = Some(status);

    let file_sum = Checksum::of(b"a b\n");
    let mut map = HAProxyMapFile::new(
        "haproxy-map-hosts-0123456789",
        HAProxyMapFileSpec {
            map_name: "hosts.map".into(),
            path: "/etc/haproxy/maps/hosts.map".into(),
            entries: String::new(),
            checksum: file_sum,
            compressed: true,
        },
    );
    map.status = Some(aux_status(file_sum));
    let mut general = HAProxyGeneralFile::new(
        "haproxy-file-503-0123456789",
        HAProxyGeneralFileSpec {
            file_name: "503.http".into(),
            path: "/etc/haproxy/general/503.http".into(),
            content: "HTTP/1.0 503\r\n\r\n".into(),
            checksum: file_sum,
            compressed: false,
        },
    );
    general.status = Some(aux_status(file_sum));
    let mut list = HAProxyCRTListFile::new(
        "haproxy-crtlist-l-0123456789",
        HAProxyCRTListFileSpec {
            list_name: "l.crtlist".into(),
            path: "/etc/haproxy/general/l.crtlist".into(),
            entries: "/etc/haproxy/ssl/ex.pem\n".into(),
            checksum: file_sum,
            compressed: false,
        },
    );
    list.status = Some(aux_status(file_sum));
    vec![
        (
            HAProxyCfg::crd_for_test(),
            serde_json::to_value(&cfg).unwrap(),
        ),
        (
            HAProxyMapFile::crd_for_test(),
            serde_json::to_value(&map).unwrap(),
        ),
        (
            HAProxyGeneralFile::crd_for_test(),
            serde_json::to_value(&general).unwrap(),
        ),
        (
            HAProxyCRTListFile::crd_for_test(),
            serde_json::to_value(&list).unwrap(),
        ),
    ]
}

fn root_schema(crd: &CustomResourceDefinition) -> &JSONSchemaProps {
    crd.spec.versions[0]
        .schema
        .as_ref()
        .unwrap()
        .open_api_v3_schema
        .as_ref()
        .unwrap()
}

/// A small validator for the subset of OpenAPI v3 the generated schemas use: types,
/// `required`, `nullable`, `minLength`, the checksum `pattern`, `minimum`, `date-time`, and
/// unknown fields (which the API server would prune, silently losing data).
fn validate(schema: &JSONSchemaProps, value: &Value, at: &str, errors: &mut Vec<String>) {
    if value.is_null() {
        if schema.nullable != Some(true) {
            errors.push(format!("{at}: null but not nullable"));
        }
        return;
    }
    let preserve = schema.x_kubernetes_preserve_unknown_fields == Some(true);
    match schema.type_.as_deref() {
        Some("object") => {
            let Some(obj) = value.as_object() else {
                return errors.push(format!("{at}: not an object"));
            };
            for key in schema.required.iter().flatten() {
                if !obj.contains_key(key) {
                    errors.push(format!("{at}: required field {key} missing"));
                }
            }
            match (&schema.properties, &schema.additional_properties) {
                (Some(props), _) => {
                    for (key, v) in obj {
                        match props.get(key) {
                            Some(s) => validate(s, v, &format!("{at}.{key}"), errors),
                            None if preserve => {}
                            // Implicit at the root: the API server validates these itself.
                            None if at.is_empty()
                                && ["apiVersion", "kind", "metadata"].contains(&key.as_str()) => {}
                            None => errors.push(format!("{at}.{key}: unknown field (pruned)")),
                        }
                    }
                }
                (None, Some(JSONSchemaPropsOrBool::Schema(s))) => {
                    for (key, v) in obj {
                        validate(s, v, &format!("{at}.{key}"), errors);
                    }
                }
                (None, _) => {}
            }
        }
        Some("array") => {
            let Some(items) = value.as_array() else {
                return errors.push(format!("{at}: not an array"));
            };
            if let Some(JSONSchemaPropsOrArray::Schema(s)) = &schema.items {
                for (i, v) in items.iter().enumerate() {
                    validate(s, v, &format!("{at}[{i}]"), errors);
                }
            }
        }
        Some("string") => match value.as_str() {
            None => errors.push(format!("{at}: not a string")),
            Some(s) => {
                if (s.len() as i64) < schema.min_length.unwrap_or(0) {
                    errors.push(format!("{at}: shorter than minLength"));
                }
                match schema.pattern.as_deref() {
                    None => {}
                    Some(crd::CHECKSUM_PATTERN) if Checksum::parse(s).is_ok() => {}
                    Some(crd::CHECKSUM_PATTERN) => errors.push(format!("{at}: not a checksum")),
                    Some(crd::DURATION_MS_PATTERN)
                        if s.strip_suffix("ms").is_some_and(|n| {
                            !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())
                        }) => {}
                    Some(crd::DURATION_MS_PATTERN) => {
                        errors.push(format!("{at}: not whole milliseconds"));
                    }
                    Some(other) => errors.push(format!("{at}: pattern {other} not checked")),
                }
                if schema.format.as_deref() == Some("date-time") && s.parse::<Timestamp>().is_err()
                {
                    errors.push(format!("{at}: not a date-time"));
                }
            }
        },
        Some("integer") => match value.as_i64() {
            None => errors.push(format!("{at}: not an integer")),
            Some(n) if schema.minimum.is_some_and(|m| (n as f64) < m) => {
                errors.push(format!("{at}: below minimum"));
            }
            Some(_) => {}
        },
        Some("boolean") if !value.is_boolean() => errors.push(format!("{at}: not a boolean")),
        Some("boolean") => {}
        other if !preserve => errors.push(format!("{at}: schema type {other:?} not structural")),
        _ => {}
    }
}

/// Every node has a type (structural schema), except under preserve-unknown-fields.
fn structural(schema: &JSONSchemaProps, at: &str, errors: &mut Vec<String>) {
    if schema.type_.is_none() && schema.x_kubernetes_preserve_unknown_fields != Some(true) {
        errors.push(format!("{at}: no type"));
    }
    if schema.any_of.is_some() || schema.one_of.is_some() || schema.all_of.is_some() {
        errors.push(format!("{at}: anyOf/oneOf/allOf"));
    }
    for (key, s) in schema.properties.iter().flatten() {
        structural(s, &format!("{at}.{key}"), errors);
    }
    if let Some(JSONSchemaPropsOrArray::Schema(s)) = &schema.items {
        structural(s, &format!("{at}[]"), errors);
    }
}

#[test]
fn schemas_accept_fully_populated_objects() {
    for (crd, value) in examples() {
        let mut errors = Vec::new();
        structural(root_schema(&crd), "", &mut errors);
        validate(root_schema(&crd), &value, "", &mut errors);
        assert!(errors.is_empty(), "{}: {errors:#?}", crd.spec.names.kind);
        let pods = &value["status"]["deployedToPods"];
        assert!(
            pods[1].get("deployedAt").is_none(),
            "failed pod must have no deployedAt"
        );
    }
}

#[test]
fn validator_rejects_what_the_api_server_would() {
    let (crd, mut value) = examples().remove(0);
    value["status"]["deployedToPods"][0]
        .as_object_mut()
        .unwrap()
        .remove("podName");
    value["spec"]["checksum"] = Value::String(String::new());
    value["spec"]["path"] = Value::String(String::new());
    value["status"]["deployedToPods"][0]["checksum"] = Value::String("md5:00".into());
    value["status"]["bogus"] = Value::Bool(true);
    let mut errors = Vec::new();
    validate(root_schema(&crd), &value, "", &mut errors);
    assert_eq!(errors.len(), 5, "{errors:#?}");
}

/// Every checksum field is the text form of `haptic_journal::Checksum`: a string with the
/// pattern, so the API server refuses what the controller could not deserialise.
#[test]
fn checksum_fields_are_patterned_strings() {
    for crd in crd::crds() {
        let props = root_schema(&crd).properties.as_ref().unwrap();
        let spec = &props["spec"].properties.as_ref().unwrap()["checksum"];
        let status = &props["status"].properties.as_ref().unwrap()["deployedToPods"];
        let Some(JSONSchemaPropsOrArray::Schema(pod)) = &status.items else {
            panic!("no items")
        };
        let pod_checksum = &pod.properties.as_ref().unwrap()["checksum"];
        for (at, schema) in [("spec", spec), ("pod", pod_checksum)] {
            let kind = &crd.spec.names.kind;
            assert_eq!(schema.type_.as_deref(), Some("string"), "{kind} {at}");
            assert_eq!(
                schema.pattern.as_deref(),
                Some(crd::CHECKSUM_PATTERN),
                "{kind} {at}"
            );
        }
    }
    let c = Checksum::of(b"x").to_string();
    assert_eq!(
        serde_json::to_value(Checksum::parse(&c).unwrap()).unwrap(),
        Value::String(c)
    );
}

#[test]
fn deployed_at_is_optional_and_pod_name_required() {
    for crd in crd::crds() {
        let status = &root_schema(&crd).properties.as_ref().unwrap()["status"];
        let pods = &status.properties.as_ref().unwrap()["deployedToPods"];
        let Some(JSONSchemaPropsOrArray::Schema(item)) = &pods.items else {
            panic!("no items")
        };
        assert_eq!(item.required.as_deref(), Some(&["podName".to_owned()][..]));
        assert!(item.properties.as_ref().unwrap().contains_key("deployedAt"));
        let conditions = &status.properties.as_ref().unwrap()["conditions"];
        assert_eq!(conditions.x_kubernetes_list_type.as_deref(), Some("map"));
    }
}

/// Every unit or format the schema describes is what the writer produces (issue 15):
/// `syncDuration` is whole milliseconds (`1250ms`, a schema pattern), every pod entry names
/// its namespace, and `metadata.totalSize` counts the auxiliary files (checked against the
/// writer on the corpus in `publisher::flows`).
#[test]
fn described_units_and_formats_match_what_the_writer_writes() {
    use haptic::components::publisher::decide::{PodChange, merge_pod_entry};
    use haptic_journal::{PodStatusChange, SyncMetadata, UnixMillis};

    let crd = HAProxyCfg::crd_for_test();
    let status = &root_schema(&crd).properties.as_ref().unwrap()["status"];
    let props = status.properties.as_ref().unwrap();
    let Some(JSONSchemaPropsOrArray::Schema(item)) = &props["deployedToPods"].items else {
        panic!("no items")
    };
    let pod = item.properties.as_ref().unwrap();
    let described = |s: &JSONSchemaProps| s.description.clone().unwrap_or_default();
    let duration = &pod["syncDuration"];
    assert_eq!(duration.pattern.as_deref(), Some(crd::DURATION_MS_PATTERN));
    assert!(described(duration).contains("milliseconds"), "{duration:?}");
    assert!(!described(duration).contains("humantime"), "{duration:?}");
    let namespace = described(&pod["namespace"]);
    assert!(!namespace.contains("differs"), "{namespace}");
    let metadata = &props["metadata"].properties.as_ref().unwrap()["totalSize"];
    assert!(described(metadata).contains("auxiliary"), "{metadata:?}");

    let checksum = render_checksum(b"global\n", &[]);
    for (ms, error) in [(0, None), (7, None), (1_250, None), (61_000, Some("x"))] {
        let change = PodChange {
            pod: "haproxy-0".into(),
            namespace: "haproxy".into(),
            change: PodStatusChange::Applied {
                checksum,
                is_drift_check: false,
                sync: SyncMetadata {
                    sync_duration_ms: ms,
                    error: error.map(str::to_owned),
                    ..SyncMetadata::default()
                },
                observed_at: UnixMillis(1_764_482_400_000),
            },
        };
        let entry = merge_pod_entry(None, &change);
        assert_eq!(entry.sync_duration, Some(format!("{ms}ms")));
        assert_eq!(entry.namespace.as_deref(), Some("haproxy"));
        let mut errors = Vec::new();
        validate(
            item,
            &serde_json::to_value(&entry).unwrap(),
            "pod",
            &mut errors,
        );
        assert!(errors.is_empty(), "{errors:?}");
    }
}
