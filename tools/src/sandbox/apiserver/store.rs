//! Object storage: every object of every kind in one map, one cluster-wide resourceVersion counter
//! bumped by every write, and a bounded history of watch events (apiserver-emulation.md §6, §8, §11).
//!
//! Objects are keyed by (group, plural) and then (namespace, name); all versions of a custom
//! resource share one storage and are relabelled with the requested apiVersion on the way out.

use super::fields::{self, Writer};
use super::resources::{self, ResourceType};
use super::schema;
use super::select::Selector;
use super::status::{ApiError, ApiResult, Cause, qualified};
use base64::Engine as _;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, VecDeque};

/// Request body limit: 3 MiB, answered with 413 (ecosystem.md §B.4).
pub const MAX_REQUEST_BYTES: usize = 3 * 1024 * 1024;
/// Stored object limit: etcd's default `--max-request-bytes` of 1.5 MiB (ecosystem.md §B.4).
pub const MAX_OBJECT_BYTES: usize = 1536 * 1024;
/// Watch events kept for replay; older resourceVersions get the 410 ERROR event.
pub const HISTORY_EVENTS: usize = 10_000;

type Key = (String, String);
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
        let mut o = obj.clone();
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
        self.history.push_back(Event {
            rv: self.rv,
            key: key.clone(),
            type_,
            object: obj.clone(),
        });
        while self.history.len() > HISTORY_EVENTS {
            if let Some(e) = self.history.pop_front() {
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
            .filter(|((ons, _), o)| ns.is_none_or(|n| n == ons) && sel.matches(o))
            .map(|(_, o)| Self::out(rt, o))
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

    /// Schema checks and pruning of custom resources (422 Invalid, 400 for unknown fields under
    /// Strict).
    fn validate(rt: &ResourceType, obj: &mut Value, opts: &WriteOpts) -> ApiResult<()> {
        let name = obj["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
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
            if !report.causes.is_empty() {
                return Err(ApiError::invalid(&rt.group, &rt.kind, &name, report.causes));
            }
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
        mut body: Value,
        opts: &WriteOpts,
    ) -> ApiResult<Value> {
        if !body.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request must be a JSON object",
            ));
        }
        Self::check_kind(rt, &body)?;
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
        Self::validate(rt, &mut body, opts)?;
        let av = rt.api_version();
        let w = Writer {
            manager: opts.manager(),
            subresource: "",
            api_version: &av,
            now: &now,
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

    /// The common tail of PUT, PATCH and apply: status split, preconditions, generation, schema,
    /// managedFields (unless `applied`), size, no-op detection, finalizer-driven removal, commit.
    #[allow(clippy::too_many_arguments)]
    pub fn update(
        &mut self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        status: bool,
        mut new: Value,
        opts: &WriteOpts,
        applied: bool,
    ) -> ApiResult<Value> {
        let old = self.stored(rt, ns, name)?;
        if !new.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request must be a JSON object",
            ));
        }
        Self::check_kind(rt, &new)?;
        if let Some(rv) = new["metadata"]["resourceVersion"].as_str()
            && !rv.is_empty()
            && Some(rv) != old["metadata"]["resourceVersion"].as_str()
        {
            return Err(ApiError::stale(&rt.group, &rt.plural, name));
        }
        if let Some(n) = new["metadata"]["name"].as_str()
            && n != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )));
        }
        if !new["metadata"].is_object() {
            new["metadata"] = json!({});
        }
        if rt.status_subresource {
            if status {
                let mut merged = old.clone();
                match new.get("status") {
                    Some(s) => merged["status"] = s.clone(),
                    None => {
                        if let Some(m) = merged.as_object_mut() {
                            m.remove("status");
                        }
                    }
                }
                if applied {
                    merged["metadata"]["managedFields"] = new["metadata"]["managedFields"].clone();
                }
                new = merged;
            } else {
                match old.get("status") {
                    Some(s) => new["status"] = s.clone(),
                    None => {
                        if let Some(m) = new.as_object_mut() {
                            m.remove("status");
                        }
                    }
                }
            }
        }
        for k in [
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "generation",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "resourceVersion",
        ] {
            match old["metadata"].get(k) {
                Some(v) => new["metadata"][k] = v.clone(),
                None => {
                    if let Some(m) = new["metadata"].as_object_mut() {
                        m.remove(k);
                    }
                }
            }
        }
        new["apiVersion"] = json!(rt.api_version());
        new["kind"] = json!(rt.kind);
        if rt.tracks_generation() && spec_of(&old) != spec_of(&new) {
            let g = old["metadata"]["generation"].as_i64().unwrap_or(0);
            new["metadata"]["generation"] = json!(g + 1);
        }
        if rt.plural == "customresourcedefinitions" {
            crd_status(&mut new);
        }
        Self::validate(rt, &mut new, opts)?;
        let now = now();
        if !applied {
            new["metadata"]["managedFields"] = old["metadata"]["managedFields"].clone();
            if new["metadata"]["managedFields"].is_null()
                && let Some(m) = new["metadata"].as_object_mut()
            {
                m.remove("managedFields");
            }
            let av = rt.api_version();
            let sub = if status { "status" } else { "" };
            let w = Writer {
                manager: opts.manager(),
                subresource: sub,
                api_version: &av,
                now: &now,
            };
            fields::record_update(Some(&old), &mut new, &w);
        }
        let mut old_cmp = old.clone();
        old_cmp["apiVersion"] = new["apiVersion"].clone();
        if strip_times(&old_cmp) == strip_times(&new) {
            return Ok(Self::out(rt, &old));
        }
        Self::check_size(&new)?;
        if opts.dry_run {
            return Ok(Self::out(rt, &new));
        }
        let finalized = new["metadata"]["deletionTimestamp"].is_string()
            && new["metadata"]["finalizers"]
                .as_array()
                .is_none_or(Vec::is_empty);
        let ev = if finalized { "DELETED" } else { "MODIFIED" };
        let stored = self.commit(&rt.key(), ns, name, ev, new);
        if rt.plural == "customresourcedefinitions" {
            self.refresh_types();
        }
        if finalized {
            self.collect_garbage(&stored);
        }
        Ok(Self::out(rt, &stored))
    }

    /// Server-side apply (PATCH `application/apply-patch+yaml`); creates a missing object (201).
    pub fn apply(
        &mut self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        status: bool,
        mut body: Value,
        opts: &WriteOpts,
    ) -> ApiResult<(Value, bool)> {
        let Some(manager) = opts.field_manager.clone().filter(|m| !m.is_empty()) else {
            let cause = Cause {
                reason: "FieldValueRequired".into(),
                message: "Required value: is required for apply patch".into(),
                field: "fieldManager".into(),
            };
            let mut e = ApiError::invalid("meta.k8s.io", "PatchOptions", "", vec![cause]);
            e.message = "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch".into();
            return Err(e);
        };
        if !body.is_object() {
            return Err(ApiError::bad_request("the apply body must be an object"));
        }
        Self::check_kind(rt, &body)?;
        if body["metadata"]["managedFields"].is_array() {
            return Err(ApiError::bad_request("metadata.managedFields must be nil"));
        }
        if let Some(n) = body["metadata"]["name"].as_str()
            && n != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )));
        }
        if let Some(m) = body.as_object_mut() {
            if rt.status_subresource && !status {
                m.remove("status");
            }
            if status {
                m.retain(|k, _| ["apiVersion", "kind", "metadata", "status"].contains(&k.as_str()));
            }
        }
        let ns_eff = if rt.namespaced { ns } else { "" };
        let live = self.stored(rt, ns_eff, name).ok();
        let creating = live.is_none();
        if creating && status {
            return Err(ApiError::not_found(&rt.group, &rt.plural, name));
        }
        let base = live
            .clone()
            .unwrap_or_else(|| json!({"metadata": {"name": name}}));
        let av = rt.api_version();
        let now = now();
        let sub = if status { "status" } else { "" };
        let w = Writer {
            manager: &manager,
            subresource: sub,
            api_version: &av,
            now: &now,
        };
        let precondition = body["metadata"]["resourceVersion"].clone();
        let mut merged = match fields::apply(&base, &body, &w, opts.force) {
            Ok(v) => v,
            Err(conflicts) => return Err(conflict_error(rt, name, &conflicts)),
        };
        if creating {
            if let Some(m) = merged["metadata"].as_object_mut() {
                m.remove("resourceVersion");
            }
            let mf = merged["metadata"]["managedFields"].clone();
            let created = self.create_with_fields(rt, ns_eff, merged, opts, mf)?;
            return Ok((created, true));
        }
        if precondition.is_string() {
            merged["metadata"]["resourceVersion"] = precondition;
        } else if let Some(m) = merged["metadata"].as_object_mut() {
            m.remove("resourceVersion");
        }
        Ok((
            self.update(rt, ns_eff, name, status, merged, opts, true)?,
            false,
        ))
    }

    fn create_with_fields(
        &mut self,
        rt: &ResourceType,
        ns: &str,
        body: Value,
        opts: &WriteOpts,
        mf: Value,
    ) -> ApiResult<Value> {
        let dry = WriteOpts {
            dry_run: true,
            ..opts.clone()
        };
        let mut created = self.create(rt, ns, body, &dry)?;
        created["metadata"]["managedFields"] = mf;
        if opts.dry_run {
            return Ok(created);
        }
        let name = created["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let stored = self.commit(&rt.key(), ns, &name, "ADDED", created);
        if rt.plural == "customresourcedefinitions" {
            self.refresh_types();
        }
        Ok(Self::out(rt, &stored))
    }

    /// DELETE of one object with DeleteOptions (preconditions, dryRun, propagationPolicy).
    pub fn delete(
        &mut self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        opts: &Value,
        dry_run: bool,
    ) -> ApiResult<Value> {
        let old = self.stored(rt, ns, name)?;
        let pre = &opts["preconditions"];
        if let Some(uid) = pre["uid"].as_str()
            && Some(uid) != old["metadata"]["uid"].as_str()
        {
            let mut e = ApiError::stale(&rt.group, &rt.plural, name);
            e.message = format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                old["metadata"]["uid"].as_str().unwrap_or("")
            );
            return Err(e);
        }
        if let Some(rv) = pre["resourceVersion"].as_str()
            && Some(rv) != old["metadata"]["resourceVersion"].as_str()
        {
            let mut e = ApiError::stale(&rt.group, &rt.plural, name);
            e.message = format!(
                "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                old["metadata"]["resourceVersion"].as_str().unwrap_or("")
            );
            return Err(e);
        }
        let dry_run = dry_run
            || opts["dryRun"]
                .as_array()
                .is_some_and(|a| a.iter().any(|x| x == "All"));
        if dry_run {
            return Ok(self.deleted_answer(rt, &old));
        }
        let policy = opts["propagationPolicy"]
            .as_str()
            .unwrap_or("Background")
            .to_owned();
        let uid = old["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if policy == "Foreground" {
            for (dk, dns, dname) in self.dependents(&uid) {
                self.delete_key(&dk, &dns, &dname);
            }
        }
        if policy == "Orphan" {
            self.orphan(&uid);
        }
        let has_finalizers = old["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|a| !a.is_empty());
        let result = if has_finalizers {
            if old["metadata"]["deletionTimestamp"].is_string() {
                old
            } else {
                let mut o = old;
                o["metadata"]["deletionTimestamp"] = json!(now());
                o["metadata"]["deletionGracePeriodSeconds"] = json!(0);
                self.commit(&rt.key(), ns, name, "MODIFIED", o)
            }
        } else {
            let gone = self.commit(&rt.key(), ns, name, "DELETED", old);
            self.after_delete(rt, &gone);
            gone
        };
        Ok(self.deleted_answer(rt, &result))
    }

    fn deleted_answer(&self, rt: &ResourceType, obj: &Value) -> Value {
        if rt.returns_deleted_object() || obj["metadata"]["deletionTimestamp"].is_string() {
            return Self::out(rt, obj);
        }
        let mut details = json!({"name": obj["metadata"]["name"], "kind": rt.plural, "uid": obj["metadata"]["uid"]});
        if !rt.group.is_empty() {
            details["group"] = json!(rt.group);
        }
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details})
    }

    fn after_delete(&mut self, rt: &ResourceType, gone: &Value) {
        if rt.plural == "customresourcedefinitions" {
            let group = gone["spec"]["group"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let plural = gone["spec"]["names"]["plural"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let key = (group, plural);
            let names: Vec<ObjKey> = self
                .objects
                .get(&key)
                .into_iter()
                .flatten()
                .map(|(k, _)| k.clone())
                .collect();
            for (ons, oname) in names {
                self.delete_key(&key, &ons, &oname);
            }
            self.refresh_types();
        }
        if rt.plural == "namespaces" && rt.group.is_empty() {
            let ns = gone["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let victims: Vec<(Key, ObjKey)> = self
                .objects
                .iter()
                .flat_map(|(k, m)| {
                    m.keys()
                        .filter(|(ons, _)| *ons == ns)
                        .map(move |ok| (k.clone(), ok.clone()))
                })
                .collect();
            for (k, (ons, oname)) in victims {
                self.delete_key(&k, &ons, &oname);
            }
        }
        self.collect_garbage(gone);
    }

    /// Background garbage collection: deletes the dependents of a removed owner, recursively.
    fn collect_garbage(&mut self, gone: &Value) {
        let uid = gone["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        for (k, ns, name) in self.dependents(&uid) {
            self.delete_key(&k, &ns, &name);
        }
    }

    fn dependents(&self, uid: &str) -> Vec<(Key, String, String)> {
        let mut out = Vec::new();
        if uid.is_empty() {
            return out;
        }
        for (k, m) in &self.objects {
            for ((ns, name), o) in m {
                let owned = o["metadata"]["ownerReferences"]
                    .as_array()
                    .is_some_and(|refs| refs.iter().any(|r| r["uid"].as_str() == Some(uid)));
                if owned {
                    out.push((k.clone(), ns.clone(), name.clone()));
                }
            }
        }
        out
    }

    fn orphan(&mut self, uid: &str) {
        for (k, ns, name) in self.dependents(uid) {
            if let Some(mut o) = self
                .objects
                .get(&k)
                .and_then(|m| m.get(&(ns.clone(), name.clone())))
                .cloned()
            {
                if let Some(refs) = o["metadata"]["ownerReferences"].as_array_mut() {
                    refs.retain(|r| r["uid"].as_str() != Some(uid));
                }
                self.commit(&k, &ns, &name, "MODIFIED", o);
            }
        }
    }

    /// Deletes by storage key (garbage collection), honouring finalizers.
    fn delete_key(&mut self, key: &Key, ns: &str, name: &str) {
        let Some(old) = self
            .objects
            .get(key)
            .and_then(|m| m.get(&(ns.to_owned(), name.to_owned())))
            .cloned()
        else {
            return;
        };
        let rt = self.types.iter().find(|t| t.key() == *key).cloned();
        if old["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|a| !a.is_empty())
        {
            if !old["metadata"]["deletionTimestamp"].is_string() {
                let mut o = old;
                o["metadata"]["deletionTimestamp"] = json!(now());
                o["metadata"]["deletionGracePeriodSeconds"] = json!(0);
                self.commit(key, ns, name, "MODIFIED", o);
            }
            return;
        }
        let gone = self.commit(key, ns, name, "DELETED", old);
        match rt {
            Some(rt) => self.after_delete(&rt, &gone),
            None => self.collect_garbage(&gone),
        }
    }

    /// DELETE of a collection: deletes every matching object, answers the list of them.
    pub fn delete_collection(
        &mut self,
        rt: &ResourceType,
        ns: Option<&str>,
        sel: &Selector,
        opts: &Value,
        dry_run: bool,
    ) -> ApiResult<Value> {
        let victims = self.select(rt, ns, sel);
        let mut items = Vec::new();
        for v in victims {
            let vns = v["metadata"]["namespace"].as_str().unwrap_or("").to_owned();
            let vname = v["metadata"]["name"].as_str().unwrap_or("").to_owned();
            if let Ok(done) = self.delete(rt, &vns, &vname, opts, dry_run) {
                items.push(if done["kind"] == "Status" { v } else { done });
            }
        }
        Ok(
            json!({"kind": format!("{}List", rt.kind), "apiVersion": rt.api_version(),
            "metadata": {"resourceVersion": self.rv.to_string()}, "items": items}),
        )
    }
}

/// Multi-version CRDs share storage: any version string is accepted when the group matches.
fn resources_share_version(_api_version: &str) -> bool {
    true
}

/// Everything but metadata and status: what `metadata.generation` tracks.
fn spec_of(o: &Value) -> Value {
    let mut v = o.clone();
    if let Some(m) = v.as_object_mut() {
        m.remove("metadata");
        m.remove("status");
        m.remove("apiVersion");
        m.remove("kind");
    }
    v
}

/// The object without managedFields timestamps, for no-op detection.
fn strip_times(o: &Value) -> Value {
    let mut v = o.clone();
    if let Some(list) = v["metadata"]["managedFields"].as_array_mut() {
        for e in list {
            if let Some(m) = e.as_object_mut() {
                m.remove("time");
            }
        }
    }
    v
}

/// The conditions a real apiextensions server sets once a CRD's names are accepted.
fn crd_status(crd: &mut Value) {
    let names = crd["spec"]["names"].clone();
    let t = now();
    crd["status"] = json!({
        "acceptedNames": names,
        "storedVersions": crd["spec"]["versions"].as_array().into_iter().flatten()
            .filter(|v| v["storage"] == true).map(|v| v["name"].clone()).collect::<Vec<_>>(),
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
             "message": "no conflicts found", "lastTransitionTime": t},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
             "message": "the initial names have been accepted", "lastTransitionTime": t},
        ],
    });
}

fn conflict_error(rt: &ResourceType, name: &str, conflicts: &[fields::Conflict]) -> ApiError {
    let message = if conflicts.len() == 1 {
        format!(
            "Apply failed with 1 conflict: conflict with \"{}\": {}",
            conflicts[0].manager, conflicts[0].field
        )
    } else {
        let lines: Vec<String> = conflicts.iter().map(|c| format!("- {}", c.field)).collect();
        let mut managers: Vec<&str> = conflicts.iter().map(|c| c.manager.as_str()).collect();
        managers.dedup();
        format!(
            "Apply failed with {} conflicts: conflicts with \"{}\":\n{}",
            conflicts.len(),
            managers.join("\", \""),
            lines.join("\n")
        )
    };
    let mut e = ApiError::new(409, "Conflict", message).details(&rt.group, &rt.plural, name);
    e.details.causes = conflicts
        .iter()
        .map(|c| Cause {
            reason: "FieldManagerConflict".into(),
            message: format!("conflict with \"{}\"", c.manager),
            field: c.field.clone(),
        })
        .collect();
    let _ = qualified;
    e
}
