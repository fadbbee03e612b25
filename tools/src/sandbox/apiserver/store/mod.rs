//! Object storage: every object of every kind in one map, one cluster-wide resourceVersion counter
//! bumped by every write, and a bounded history of watch events (apiserver-emulation.md §6, §8, §11).
//!
//! Objects are keyed by (group, plural) and then (namespace, name); all versions of a custom
//! resource share one storage and are relabelled with the requested apiVersion on the way out.

use super::events;
use super::fields::{self, Writer};
use super::meta;
use super::resources::{self, ResourceType};
use super::schema;
use super::select::Selector;
use super::status::{ApiError, ApiResult, Cause};
use base64::Engine as _;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, VecDeque};

mod delete;
mod update;

/// Request body limit: 3 MiB, answered with 413 (ecosystem.md §B.4).
pub const MAX_REQUEST_BYTES: usize = 3 * 1024 * 1024;
/// Stored object limit: etcd's default `--max-request-bytes` of 1.5 MiB (ecosystem.md §B.4).
pub const MAX_OBJECT_BYTES: usize = 1536 * 1024;
/// Watch events kept for replay; older resourceVersions get the 410 ERROR event.
pub const HISTORY_EVENTS: usize = 10_000;
/// Serialized bytes of watch history kept (large custom resources make events big); the oldest
/// events go first, as with [`HISTORY_EVENTS`].
pub const HISTORY_BYTES: usize = 256 * 1024 * 1024;
/// The 400 message of a create or update whose body is not a JSON object.
const OBJECT_EXPECTED: &str = "the body of the request must be a JSON object";

/// Storage key of a kind: (group, plural).
type Key = (String, String);
/// Key of an object within its kind: (namespace, name).
type ObjKey = (String, String);

/// One watch event in the history.
#[derive(Debug, Clone)]
pub struct Event {
    /// The resourceVersion the write produced.
    pub rv: u64,
    /// Storage key (group, plural).
    pub key: Key,
    /// `ADDED`, `MODIFIED` or `DELETED`.
    pub type_: &'static str,
    /// The object after the write (for DELETED, its last state with the deletion's RV).
    pub object: Value,
    /// Serialized size of `object`, for the history budget.
    pub bytes: usize,
}

/// Options of a write request.
#[derive(Debug, Clone, Default)]
pub struct WriteOpts {
    /// `dryRun=All`.
    pub dry_run: bool,
    /// `fieldManager`; `unknown` when absent (kube sends none by default).
    pub field_manager: Option<String>,
    /// `fieldValidation` (`Strict` refuses unknown fields of custom resources).
    pub strict: bool,
    /// `force` (apply only).
    pub force: bool,
}

impl WriteOpts {
    fn manager(&self) -> &str {
        self.field_manager.as_deref().unwrap_or("unknown")
    }
}

/// The whole emulated cluster state.
#[derive(Debug)]
pub struct State {
    /// Servable kinds: built-ins first, then the CRD-defined ones.
    pub types: Vec<ResourceType>,
    objects: BTreeMap<Key, BTreeMap<ObjKey, Value>>,
    /// Last resourceVersion handed out.
    pub rv: u64,
    /// Watch events with RV > `floor`, oldest first.
    pub history: VecDeque<Event>,
    /// Sum of `bytes` over `history`.
    history_bytes: usize,
    /// Watches from a resourceVersion below this are too old (410).
    pub floor: u64,
    ids: u64,
    notify: tokio::sync::watch::Sender<u64>,
}

/// Current time as RFC 3339 UTC with seconds, the `metav1.Time` form.
pub fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

impl State {
    /// An empty cluster with the `default`, `kube-system` and `kube-public` namespaces.
    pub fn new(notify: tokio::sync::watch::Sender<u64>) -> Self {
        let mut s = State {
            types: resources::builtins(),
            objects: BTreeMap::new(),
            rv: 0,
            history: VecDeque::new(),
            history_bytes: 0,
            floor: 0,
            ids: 0,
            notify,
        };
        for ns in ["default", "kube-system", "kube-public"] {
            let rt = s.builtin("namespaces");
            let body = json!({"metadata": {"name": ns}});
            let _ = s.create(&rt, "", body, &WriteOpts::default());
        }
        s
    }

    fn builtin(&self, plural: &str) -> ResourceType {
        self.types
            .iter()
            .find(|t| t.group.is_empty() && t.plural == plural)
            .cloned()
            .unwrap_or_else(|| {
                resources::builtins()
                    .into_iter()
                    .find(|t| t.plural == plural)
                    .unwrap_or_else(|| resources::builtins().remove(0))
            })
    }

    fn uid(&mut self) -> String {
        self.ids += 1;
        let nanos = jiff::Timestamp::now().as_nanosecond();
        let h = Sha256::digest(format!("{}:{}:{}", self.ids, nanos, std::process::id()));
        let x = hex::encode(&h[..16]);
        format!(
            "{}-{}-4{}-a{}-{}",
            &x[0..8],
            &x[8..12],
            &x[13..16],
            &x[17..20],
            &x[20..32]
        )
    }

    fn suffix(&mut self) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        let u = self.uid();
        u.bytes()
            .filter(u8::is_ascii_hexdigit)
            .take(5)
            .enumerate()
            .map(|(i, b)| ALPHABET[(usize::from(b) * 7 + i * 13) % ALPHABET.len()] as char)
            .collect()
    }

    /// Labels an object with the type's kind and apiVersion.
    pub fn out(rt: &ResourceType, obj: &Value) -> Value {
        let mut o = if events::is_core(rt) {
            events::to_core(obj)
        } else {
            obj.clone()
        };
        if let Some(m) = o.as_object_mut() {
            m.insert("apiVersion".into(), json!(rt.api_version()));
            m.insert("kind".into(), json!(rt.kind));
        }
        o
    }

    fn commit(
        &mut self,
        key: &Key,
        ns: &str,
        name: &str,
        type_: &'static str,
        mut obj: Value,
    ) -> Value {
        self.rv += 1;
        obj["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        let map = self.objects.entry(key.clone()).or_default();
        let ok = (ns.to_owned(), name.to_owned());
        if type_ == "DELETED" {
            map.remove(&ok);
        } else {
            map.insert(ok, obj.clone());
        }
        let bytes = obj.to_string().len();
        self.history_bytes += bytes;
        self.history.push_back(Event {
            rv: self.rv,
            key: key.clone(),
            type_,
            object: obj.clone(),
            bytes,
        });
        while self.history.len() > 1
            && (self.history.len() > HISTORY_EVENTS || self.history_bytes > HISTORY_BYTES)
        {
            if let Some(e) = self.history.pop_front() {
                self.history_bytes -= e.bytes;
                self.floor = e.rv;
            }
        }
        self.notify.send_replace(self.rv);
        obj
    }

    /// Forgets the watch history: watches from any resourceVersion older than the current one get
    /// the 410 ERROR event.
    pub fn compact(&mut self) {
        self.history.clear();
        self.history_bytes = 0;
        self.floor = self.rv;
    }

    fn stored(&self, rt: &ResourceType, ns: &str, name: &str) -> ApiResult<Value> {
        self.objects
            .get(&rt.key())
            .and_then(|m| m.get(&(ns.to_owned(), name.to_owned())))
            .cloned()
            .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))
    }

    /// GET of one object.
    pub fn get(&self, rt: &ResourceType, ns: &str, name: &str) -> ApiResult<Value> {
        Ok(Self::out(rt, &self.stored(rt, ns, name)?))
    }

    /// Objects of a kind in a namespace (or all namespaces) matching a selector, sorted by
    /// namespace then name.
    pub fn select(&self, rt: &ResourceType, ns: Option<&str>, sel: &Selector) -> Vec<Value> {
        self.objects
            .get(&rt.key())
            .into_iter()
            .flatten()
            .filter(|((ons, _), _)| ns.is_none_or(|n| n == ons))
            .map(|(_, o)| Self::out(rt, o))
            .filter(|o| sel.matches(o))
            .collect()
    }

    /// LIST with `limit`/`continue` (the token holds the list's RV and the last key).
    pub fn list(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        sel: &Selector,
        limit: Option<usize>,
        cont: Option<&str>,
    ) -> ApiResult<Value> {
        let mut items = self.select(rt, ns, sel);
        let mut list_rv = self.rv.to_string();
        if let Some(token) = cont.filter(|c| !c.is_empty()) {
            let raw = base64::engine::general_purpose::STANDARD
                .decode(token)
                .ok()
                .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
                .ok_or_else(|| ApiError::bad_request("continue key is not valid"))?;
            let after = (
                raw["ns"].as_str().unwrap_or(""),
                raw["name"].as_str().unwrap_or(""),
            );
            list_rv = raw["rv"].as_str().unwrap_or("0").to_owned();
            items.retain(|o| {
                (
                    o["metadata"]["namespace"].as_str().unwrap_or(""),
                    o["metadata"]["name"].as_str().unwrap_or(""),
                ) > after
            });
        }
        let mut meta = json!({"resourceVersion": list_rv});
        if let Some(l) = limit.filter(|l| *l > 0 && items.len() > *l) {
            let rest = items.len() - l;
            items.truncate(l);
            let last = &items[l - 1]["metadata"];
            let token = json!({"rv": list_rv, "ns": last["namespace"].as_str().unwrap_or(""), "name": last["name"]});
            meta["continue"] =
                json!(base64::engine::general_purpose::STANDARD.encode(token.to_string()));
            meta["remainingItemCount"] = json!(rest);
        }
        Ok(json!({
            "kind": format!("{}List", rt.kind),
            "apiVersion": rt.api_version(),
            "metadata": meta,
            "items": items,
        }))
    }

    /// A written body as it is stored: a JSON object of `rt`'s kind (a core Event in its
    /// `events.k8s.io` form); anything but an object is a 400 saying `not_an_object`.
    pub(super) fn storable(
        rt: &ResourceType,
        body: Value,
        not_an_object: &str,
    ) -> ApiResult<Value> {
        if !body.is_object() {
            return Err(ApiError::bad_request(not_an_object));
        }
        Self::check_kind(rt, &body)?;
        Ok(if events::is_core(rt) {
            events::to_storage(&body)
        } else {
            body
        })
    }

    fn check_kind(rt: &ResourceType, body: &Value) -> ApiResult<()> {
        if let Some(av) = body["apiVersion"].as_str()
            && av != rt.api_version()
        {
            let group = av.rsplit_once('/').map(|(g, _)| g).unwrap_or("");
            if group != rt.group || !resources_share_version(av) {
                return Err(ApiError::bad_request(format!(
                    "the API version in the data ({av}) does not match the expected API version ({})",
                    rt.api_version()
                )));
            }
        }
        if let Some(k) = body["kind"].as_str()
            && k != rt.kind
        {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                rt.kind
            )));
        }
        Ok(())
    }

    fn check_ns(rt: &ResourceType, ns: &str, body: &mut Value) -> ApiResult<()> {
        let meta = &mut body["metadata"];
        if !rt.namespaced {
            if let Some(m) = meta.as_object_mut() {
                m.remove("namespace");
            }
            return Ok(());
        }
        match meta["namespace"].as_str() {
            Some(n) if !n.is_empty() && n != ns => Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            )),
            _ => {
                meta["namespace"] = json!(ns);
                Ok(())
            }
        }
    }

    /// Metadata checks, plus schema checks and pruning of custom resources (422 Invalid, 400 for
    /// unknown fields under Strict).
    fn validate(rt: &ResourceType, obj: &mut Value, opts: &WriteOpts) -> ApiResult<()> {
        let name = obj["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let mut causes = meta::validate(obj, rt.group.is_empty() && rt.plural == "namespaces");
        if rt.group.is_empty() {
            causes.extend(meta::data_size(&rt.plural, obj));
        }
        if let Some(s) = &rt.schema {
            let report = schema::validate(s, obj);
            if opts.strict && !report.unknown.is_empty() {
                let list: Vec<String> = report
                    .unknown
                    .iter()
                    .map(|u| format!("unknown field \"{}\"", &u[1..]))
                    .collect();
                return Err(ApiError::bad_request(format!(
                    "strict decoding error: {}",
                    list.join(", ")
                )));
            }
            causes.extend(report.causes);
        }
        if !causes.is_empty() {
            return Err(ApiError::invalid(&rt.group, &rt.kind, &name, causes));
        }
        Ok(())
    }

    fn check_size(obj: &Value) -> ApiResult<()> {
        if obj.to_string().len() > MAX_OBJECT_BYTES {
            return Err(ApiError::internal("etcdserver: request is too large"));
        }
        Ok(())
    }

    /// CREATE (POST).
    pub fn create(
        &mut self,
        rt: &ResourceType,
        ns: &str,
        body: Value,
        opts: &WriteOpts,
    ) -> ApiResult<Value> {
        let mut body = Self::storable(rt, body, OBJECT_EXPECTED)?;
        if !body["metadata"].is_object() {
            body["metadata"] = json!({});
        }
        Self::check_ns(rt, ns, &mut body)?;
        if body["metadata"]["resourceVersion"]
            .as_str()
            .is_some_and(|s| !s.is_empty())
        {
            return Err(ApiError::bad_request(
                "resourceVersion should not be set on objects to be created",
            ));
        }
        let name = match (
            body["metadata"]["name"].as_str(),
            body["metadata"]["generateName"].as_str(),
        ) {
            (Some(n), _) if !n.is_empty() => n.to_owned(),
            (_, Some(g)) if !g.is_empty() => format!("{g}{}", self.suffix()),
            _ => {
                let cause = Cause {
                    reason: "FieldValueRequired".into(),
                    message: "Required value: name or generateName is required".into(),
                    field: "metadata.name".into(),
                };
                return Err(ApiError::invalid(&rt.group, &rt.kind, "", vec![cause]));
            }
        };
        let ns = if rt.namespaced { ns } else { "" };
        if self.stored(rt, ns, &name).is_ok() {
            return Err(ApiError::already_exists(&rt.group, &rt.plural, &name));
        }
        let now = now();
        let uid = self.uid();
        let meta = &mut body["metadata"];
        meta["name"] = json!(name);
        meta["uid"] = json!(uid);
        meta["creationTimestamp"] = json!(now);
        if let Some(m) = meta.as_object_mut() {
            m.remove("managedFields");
            m.remove("deletionTimestamp");
            m.remove("generation");
        }
        if rt.tracks_generation() {
            body["metadata"]["generation"] = json!(1);
        }
        if rt.status_subresource {
            if let Some(m) = body.as_object_mut() {
                m.remove("status");
            }
            match rt.plural.as_str() {
                "pods" => body["status"] = json!({"phase": "Pending", "qosClass": "BestEffort"}),
                "namespaces" => body["status"] = json!({"phase": "Active"}),
                _ => {}
            }
        }
        if rt.plural == "leases" && body.get("spec").is_none() {
            body["spec"] = json!({});
        }
        if rt.plural == "customresourcedefinitions" {
            crd_status(&mut body);
        }
        body["apiVersion"] = json!(rt.api_version());
        body["kind"] = json!(rt.kind);
        normalize(rt, &mut body);
        Self::validate(rt, &mut body, opts)?;
        let av = rt.api_version();
        let w = Writer {
            manager: opts.manager(),
            subresource: "",
            api_version: &av,
            now: &now,
            schema: rt.schema.as_ref(),
        };
        fields::record_update(None, &mut body, &w);
        Self::check_size(&body)?;
        if opts.dry_run {
            return Ok(Self::out(rt, &body));
        }
        let stored = self.commit(&rt.key(), ns, &name, "ADDED", body);
        if rt.plural == "customresourcedefinitions" {
            self.refresh_types();
        }
        Ok(Self::out(rt, &stored))
    }

    fn refresh_types(&mut self) {
        let mut types = resources::builtins();
        let crds: Vec<Value> = self
            .objects
            .get(&(
                "apiextensions.k8s.io".to_owned(),
                "customresourcedefinitions".to_owned(),
            ))
            .into_iter()
            .flatten()
            .map(|(_, v)| v.clone())
            .collect();
        for crd in &crds {
            types.extend(resources::from_crd(crd));
        }
        self.types = types;
    }
}

/// Multi-version CRDs share storage: any version string is accepted when the group matches.
fn resources_share_version(_api_version: &str) -> bool {
    true
}

/// Built-in defaulting the clients rely on: a Secret's `stringData` is folded into base64 `data`
/// and its `type` defaults to `Opaque`.
fn normalize(rt: &ResourceType, obj: &mut Value) {
    if rt.group.is_empty() && rt.plural == "secrets" {
        if let Some(Value::Object(string_data)) =
            obj.as_object_mut().and_then(|m| m.remove("stringData"))
        {
            if !obj["data"].is_object() {
                obj["data"] = json!({});
            }
            for (k, v) in string_data {
                let text = v.as_str().unwrap_or_default().to_owned();
                obj["data"][k] = json!(base64::engine::general_purpose::STANDARD.encode(text));
            }
        }
        if obj.get("type").is_none_or(Value::is_null) {
            obj["type"] = json!("Opaque");
        }
    }
}

/// The conditions a real apiextensions server sets once a CRD's names are accepted.
fn crd_status(crd: &mut Value) {
    let names = crd["spec"]["names"].clone();
    let t = now();
    let mut stored: Vec<Value> = crd["status"]["storedVersions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for v in crd["spec"]["versions"].as_array().into_iter().flatten() {
        if v["storage"] == true && !stored.contains(&v["name"]) {
            stored.push(v["name"].clone());
        }
    }
    // Conditions keep their transition times across updates, so re-applying a CRD is a no-op.
    let conditions = match crd["status"]["conditions"].as_array() {
        Some(c) if !c.is_empty() => Value::Array(c.clone()),
        _ => json!([
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
             "message": "no conflicts found", "lastTransitionTime": t},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
             "message": "the initial names have been accepted", "lastTransitionTime": t},
        ]),
    };
    crd["status"] =
        json!({"acceptedNames": names, "storedVersions": stored, "conditions": conditions});
}
