//! The resource registry: built-in kinds plus the kinds that CustomResourceDefinitions register.

use serde_json::Value;

/// One printer column of a CRD (`additionalPrinterColumns[]`).
#[derive(Debug, Clone, PartialEq)]
pub struct PrinterColumn {
    /// Column header.
    pub name: String,
    /// `string`, `integer`, `number`, `boolean`, `date`.
    pub type_: String,
    /// JSONPath subset (`.spec.x`, `.a[0].b`, `.a[?(@.type=="Ready")].status`).
    pub json_path: String,
    /// Column description.
    pub description: String,
    /// 0 = shown by default, higher = only with `-o wide`.
    pub priority: i64,
}

/// A servable group/version/resource.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceType {
    /// API group, empty for core.
    pub group: String,
    /// API version (`v1`, `v1alpha1`).
    pub version: String,
    /// Plural resource name, the URL segment.
    pub plural: String,
    /// Singular name.
    pub singular: String,
    /// Kind.
    pub kind: String,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Short names (`cm`, `hpcfg`).
    pub short_names: Vec<String>,
    /// Whether a `/status` subresource exists (writes are split).
    pub status_subresource: bool,
    /// Custom resource: PUT needs a resourceVersion, no strategic merge, generation tracked.
    pub custom: bool,
    /// openAPIV3Schema of this version (custom resources only).
    pub schema: Option<Value>,
    /// Printer columns (custom resources only; built-ins have fixed tables).
    pub printer_columns: Vec<PrinterColumn>,
    /// Categories (`all`).
    pub categories: Vec<String>,
}

impl ResourceType {
    /// `v1` or `group/version`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// Storage key: objects are shared by every version of a group/resource.
    pub fn key(&self) -> (String, String) {
        if self.group.is_empty() && self.plural == "events" {
            // Core events are a view of the events.k8s.io storage (see `events.rs`).
            return ("events.k8s.io".to_owned(), "events".to_owned());
        }
        (self.group.clone(), self.plural.clone())
    }

    /// Whether DELETE answers with the object (custom kinds, pods) rather than a success Status.
    pub fn returns_deleted_object(&self) -> bool {
        self.custom || self.plural == "pods" || self.plural == "namespaces"
    }

    /// Whether `metadata.generation` bumps on spec changes.
    pub fn tracks_generation(&self) -> bool {
        self.custom || self.plural == "customresourcedefinitions"
    }

    /// Whether strategic merge patch is accepted (built-in kinds only).
    pub fn strategic_merge(&self) -> bool {
        !self.custom
    }

    /// Base URL path of the group/version (`/api/v1`, `/apis/g/v`).
    pub fn gv_path(&self) -> String {
        if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        }
    }
}

fn builtin(
    group: &str,
    version: &str,
    plural: &str,
    kind: &str,
    namespaced: bool,
    short: &[&str],
    status: bool,
) -> ResourceType {
    ResourceType {
        group: group.into(),
        version: version.into(),
        plural: plural.into(),
        singular: kind.to_lowercase(),
        kind: kind.into(),
        namespaced,
        short_names: short.iter().map(|s| (*s).to_owned()).collect(),
        status_subresource: status,
        custom: false,
        schema: None,
        printer_columns: Vec::new(),
        categories: if plural == "pods" {
            vec!["all".into()]
        } else {
            Vec::new()
        },
    }
}

/// The built-in kinds the emulator serves.
pub fn builtins() -> Vec<ResourceType> {
    vec![
        builtin("", "v1", "namespaces", "Namespace", false, &["ns"], true),
        builtin("", "v1", "pods", "Pod", true, &["po"], true),
        builtin("", "v1", "secrets", "Secret", true, &[], false),
        builtin("", "v1", "configmaps", "ConfigMap", true, &["cm"], false),
        builtin("", "v1", "events", "Event", true, &["ev"], false),
        builtin("", "v1", "services", "Service", true, &["svc"], true),
        builtin(
            "coordination.k8s.io",
            "v1",
            "leases",
            "Lease",
            true,
            &[],
            false,
        ),
        builtin(
            "events.k8s.io",
            "v1",
            "events",
            "Event",
            true,
            &["ev"],
            false,
        ),
        builtin(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            false,
            &["crd", "crds"],
            true,
        ),
    ]
}

/// The resource types a CRD object defines, one per served version.
pub fn from_crd(crd: &Value) -> Vec<ResourceType> {
    let spec = &crd["spec"];
    let group = spec["group"].as_str().unwrap_or_default().to_owned();
    let names = &spec["names"];
    let plural = names["plural"].as_str().unwrap_or_default().to_owned();
    let kind = names["kind"].as_str().unwrap_or_default().to_owned();
    let singular = names["singular"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| kind.to_lowercase());
    let short_names = str_list(&names["shortNames"]);
    let categories = str_list(&names["categories"]);
    let namespaced = spec["scope"].as_str() != Some("Cluster");
    let mut out = Vec::new();
    for v in spec["versions"].as_array().into_iter().flatten() {
        if v["served"].as_bool() == Some(false) {
            continue;
        }
        let printer_columns = v["additionalPrinterColumns"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| PrinterColumn {
                name: c["name"].as_str().unwrap_or_default().to_owned(),
                type_: c["type"].as_str().unwrap_or("string").to_owned(),
                json_path: c["jsonPath"].as_str().unwrap_or_default().to_owned(),
                description: c["description"].as_str().unwrap_or_default().to_owned(),
                priority: c["priority"].as_i64().unwrap_or(0),
            })
            .collect();
        out.push(ResourceType {
            group: group.clone(),
            version: v["name"].as_str().unwrap_or_default().to_owned(),
            plural: plural.clone(),
            singular: singular.clone(),
            kind: kind.clone(),
            namespaced,
            short_names: short_names.clone(),
            status_subresource: v["subresources"]["status"].is_object(),
            custom: true,
            schema: v["schema"]["openAPIV3Schema"]
                .as_object()
                .map(|o| Value::Object(o.clone())),
            printer_columns,
            categories: categories.clone(),
        });
    }
    out
}

fn str_list(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_owned))
        .collect()
}
