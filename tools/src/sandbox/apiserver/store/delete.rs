//! DELETE, finalizers and ownerReference garbage collection.

use super::{Key, ObjKey, State, now};
use crate::sandbox::apiserver::resources::ResourceType;
use crate::sandbox::apiserver::select::Selector;
use crate::sandbox::apiserver::status::{ApiError, ApiResult};
use serde_json::{Value, json};

impl State {
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
        // (field, its name in the message), checked in this order
        for (field, label) in [("uid", "UID"), ("resourceVersion", "ResourceVersion")] {
            let stored = old["metadata"][field].as_str();
            if let Some(wanted) = pre[field].as_str()
                && Some(wanted) != stored
            {
                let mut e = ApiError::stale(&rt.group, &rt.plural, name);
                e.message = format!(
                    "Precondition failed: {label} in precondition: {wanted}, {label} in object meta: {}",
                    stored.unwrap_or("")
                );
                return Err(e);
            }
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
    pub(super) fn collect_garbage(&mut self, gone: &Value) {
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
