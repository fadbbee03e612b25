//! The write paths that change an existing object: PUT, PATCH and server-side apply.

use super::{OBJECT_EXPECTED, State, WriteOpts, crd_status, now};
use crate::sandbox::apiserver::fields::{self, Writer};
use crate::sandbox::apiserver::resources::ResourceType;
use crate::sandbox::apiserver::status::{ApiError, ApiResult, Cause};
use serde_json::{Value, json};

impl State {
    /// The common tail of PUT, PATCH and apply: status split, preconditions, generation, schema,
    /// managedFields (unless `applied`), size, no-op detection, finalizer-driven removal, commit.
    #[allow(clippy::too_many_arguments)]
    pub fn update(
        &mut self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        status: bool,
        new: Value,
        opts: &WriteOpts,
        applied: bool,
    ) -> ApiResult<Value> {
        let old = self.stored(rt, ns, name)?;
        let mut new = Self::storable(rt, new, OBJECT_EXPECTED)?;
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
        super::normalize(rt, &mut new);
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
                schema: rt.schema.as_ref(),
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
        body: Value,
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
        let mut body = Self::storable(rt, body, "the apply body must be an object")?;
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
            schema: rt.schema.as_ref(),
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

fn conflict_error(rt: &ResourceType, name: &str, conflicts: &[fields::Conflict]) -> ApiError {
    let message = if conflicts.len() == 1 {
        format!(
            "Apply failed with 1 conflict: conflict with \"{}\": {}",
            conflicts[0].manager, conflicts[0].field
        )
    } else {
        // Upstream groups the paths by manager, managers sorted (apimachinery conflict.go).
        let mut by_manager: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
        for c in conflicts {
            by_manager.entry(&c.manager).or_default().push(&c.field);
        }
        let mut lines = Vec::new();
        for (m, paths) in by_manager {
            lines.push(format!("conflicts with \"{m}\":"));
            lines.extend(paths.iter().map(|p| format!("- {p}")));
        }
        format!(
            "Apply failed with {} conflicts: {}",
            conflicts.len(),
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
    e
}
