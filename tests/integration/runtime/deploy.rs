//! `deploy/` manifests parse strictly with k8s-openapi types, say what issue 6 asks for, and the
//! `Dockerfile` copies files that exist.

use std::path::{Path, PathBuf};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Namespace, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Deserializes into `T` and back; anything `T` does not know (a misspelled or misplaced field)
/// is lost on the way, so the round trip must be lossless.
fn strict<T: DeserializeOwned + Serialize>(file: &Path, doc: &Value) -> T {
    let typed: T = serde_path_to_error::deserialize(doc.clone())
        .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let back = serde_json::to_value(&typed).unwrap();
    assert_eq!(
        &back,
        doc,
        "{}: fields k8s-openapi does not know",
        file.display()
    );
    typed
}

fn manifests() -> Vec<(PathBuf, Value)> {
    let mut out = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("deploy"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for doc in serde_norway::Deserializer::from_str(&text) {
            let value: Value = serde::Deserialize::deserialize(doc)
                .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            if !value.is_null() {
                out.push((file.clone(), value));
            }
        }
    }
    out
}

#[test]
fn every_manifest_parses_strictly_and_says_what_the_issue_asks() {
    let mut kinds = Vec::new();
    let mut sts = None;
    let mut role = None;
    let mut binding = None;
    for (file, doc) in manifests() {
        let kind = doc["kind"].as_str().unwrap_or_default().to_owned();
        match kind.as_str() {
            "StatefulSet" => sts = Some(strict::<StatefulSet>(&file, &doc)),
            "Role" => role = Some(strict::<Role>(&file, &doc)),
            "RoleBinding" => binding = Some(strict::<RoleBinding>(&file, &doc)),
            "ServiceAccount" => drop(strict::<ServiceAccount>(&file, &doc)),
            "Service" => drop(strict::<Service>(&file, &doc)),
            "PodDisruptionBudget" => drop(strict::<PodDisruptionBudget>(&file, &doc)),
            "Namespace" => drop(strict::<Namespace>(&file, &doc)),
            other => panic!("{}: unexpected kind {other}", file.display()),
        }
        kinds.push(kind);
    }
    kinds.sort();
    assert_eq!(
        kinds,
        [
            "Namespace",
            "PodDisruptionBudget",
            "Role",
            "RoleBinding",
            "Service",
            "ServiceAccount",
            "StatefulSet"
        ]
    );

    let sts = sts.unwrap().spec.unwrap();
    assert_eq!(sts.replicas, Some(1));
    let claims = sts.volume_claim_templates.unwrap();
    assert_eq!(claims[0].metadata.name.as_deref(), Some("journal"));
    let pod = sts.template.spec.unwrap();
    let sc = pod.security_context.unwrap();
    assert_eq!(sc.run_as_non_root, Some(true));
    assert!(sc.fs_group.is_some());
    assert!(pod.termination_grace_period_seconds.unwrap() >= 60);
    let c = &pod.containers[0];
    assert!(c.lifecycle.as_ref().unwrap().pre_stop.is_some());
    assert!(
        c.volume_mounts
            .as_ref()
            .unwrap()
            .iter()
            .any(|m| m.name == "journal")
    );
    let image = c.image.clone().unwrap();
    let dockerfile = std::fs::read_to_string(root().join("Dockerfile")).unwrap();
    assert!(
        dockerfile.contains(&image),
        "the Dockerfile names the image {image}"
    );

    // The grants themselves are checked against a real run in tests/integration/e2e/rbac.rs;
    // here: the binding ties that Role to the ServiceAccount the pod runs as.
    let role = role.unwrap();
    let binding = binding.unwrap();
    assert_eq!(binding.role_ref.kind, "Role");
    assert_eq!(Some(&binding.role_ref.name), role.metadata.name.as_ref());
    let subject = &binding.subjects.unwrap()[0];
    assert_eq!(subject.kind, "ServiceAccount");
    assert_eq!(pod.service_account_name.as_ref(), Some(&subject.name));
    assert_eq!(subject.namespace, role.metadata.namespace);
}

#[test]
fn dockerfile_copies_files_that_exist_and_runs_non_root_with_haproxy() {
    let text = std::fs::read_to_string(root().join("Dockerfile")).unwrap();
    let mut copies = 0;
    for line in text.lines().map(str::trim) {
        let Some(rest) = line.strip_prefix("COPY ") else {
            continue;
        };
        if rest.starts_with("--from=") {
            continue;
        }
        let parts: Vec<&str> = rest.split_whitespace().collect();
        for src in &parts[..parts.len() - 1] {
            assert!(root().join(src).exists(), "Dockerfile copies missing {src}");
            copies += 1;
        }
    }
    assert!(copies >= 5);
    assert_eq!(
        text.matches("\nFROM ").count() + usize::from(text.starts_with("FROM ")),
        2
    );
    assert!(text.contains("install -y --no-install-recommends haproxy"));
    assert!(text.contains("USER 10001"));
}
