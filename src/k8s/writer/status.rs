//! Status writes of the [`Writer`]: per-pod entries on a HAProxyCfg and on the auxiliary
//! objects it references, conditions, and `observedGeneration` (the `metadata.generation` of
//! the spec a status was written for).

use super::*;
use crate::k8s::crd::AuxiliaryFileStatus;

/// A per-pod status change for [`Writer::update_pod_statuses`].
#[derive(Clone, Debug)]
pub enum PodEntryChange {
    /// Set the pod's entry (already merged by the caller's pure merge function, given the old).
    Applied {
        /// Pod name.
        pod: String,
        /// The render the pod runs (must equal `spec.checksum`, else the update is parked).
        checksum: Checksum,
        /// Builds the new entry from the old one.
        merge: fn(Option<&PodDeploymentStatus>, &PodStatusInput) -> PodDeploymentStatus,
        /// Input of `merge`.
        input: Box<PodStatusInput>,
    },
    /// Remove the pod's entry.
    Removed {
        /// Pod name.
        pod: String,
    },
}

/// Facts of one applied deployment, for the merge function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodStatusInput {
    /// Pod name.
    pub pod: String,
    /// Pod namespace.
    pub namespace: String,
    /// The journal's change.
    pub change: haptic_journal::PodStatusChange,
}

impl PodStatusInput {
    /// Whether this reports a failed deployment (written even when the pod tried a checksum
    /// other than `spec.checksum`: the error is what an operator needs to see).
    #[must_use]
    pub fn is_failure(&self) -> bool {
        matches!(&self.change, haptic_journal::PodStatusChange::Applied { sync, .. } if sync.error.is_some())
    }
}

/// Result of [`Writer::update_pod_statuses`], per change in input order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodEntryOutcome {
    /// Written (or already as wanted).
    Done,
    /// The HAProxyCfg cannot take it yet (missing, not completely published, other checksum).
    Park,
}

impl Writer {
    /// Read-modify-write of a HAProxyCfg's status (409: re-read). `f` gets the status and the
    /// spec checksum; nothing is written when the status does not change. Returns the
    /// resourceVersion and whether a write happened.
    pub(super) async fn update_cfg_status(
        &self,
        name: &str,
        f: impl Fn(&mut HAProxyCfgStatus, &Checksum),
    ) -> Result<(Option<String>, bool), WriteError> {
        let api: Api<HAProxyCfg> = self.api();
        let object = format!("HAProxyCfg/{name}");
        let mut last = None;
        for _ in 0..CONFLICT_REREADS {
            let mut cfg = self.call(&object, api.get(name)).await?;
            self.check_term(&object, &cfg.metadata)?;
            let before = cfg.status.clone();
            let mut st = cfg.status.clone().unwrap_or_default();
            f(&mut st, &cfg.spec.checksum);
            st.refresh_pods_synced(&cfg.spec.checksum);
            st.observed_generation = cfg.metadata.generation;
            if Some(&st) == before.as_ref() {
                return Ok((cfg.metadata.resource_version.clone(), false));
            }
            cfg.status = Some(st);
            match self
                .write(
                    &object,
                    api.replace_status(name, &PostParams::default(), &cfg),
                )
                .await
            {
                Ok(c) => return Ok((c.metadata.resource_version, true)),
                Err(e) if e.kind() == ErrorKind::Conflict => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or(WriteError::Content {
            reason: "conflict re-reads exhausted".into(),
        }))
    }

    /// Sets conditions on a HAProxyCfg's status (keyed by type; the transition time moves only
    /// with the status). Returns whether a write happened.
    ///
    /// # Errors
    /// [`WriteError`]; 404 when the HAProxyCfg does not exist (yet).
    pub async fn set_conditions(&self, name: &str, new: &[Condition]) -> Result<bool, WriteError> {
        let (_, wrote) = self
            .update_cfg_status(name, |st, _| {
                for c in new {
                    set_condition(&mut st.conditions, c.clone());
                }
            })
            .await?;
        Ok(wrote)
    }

    /// Restores a HAProxyCfg's status after the object was recreated (self-healing): adds each
    /// of `conditions` whose type the status lacks and each of `pods` whose pod has no entry,
    /// in one status write (`podsSynced` recomputed); what the status already has is never
    /// overwritten. Returns whether a write happened.
    ///
    /// # Errors
    /// [`WriteError`]; 404 when the HAProxyCfg does not exist.
    pub async fn restore_status(
        &self,
        name: &str,
        conditions: &[Condition],
        pods: &[PodDeploymentStatus],
    ) -> Result<bool, WriteError> {
        let (_, wrote) = self
            .update_cfg_status(name, |st, _| {
                for c in conditions {
                    if !st.conditions.iter().any(|x| x.type_ == c.type_) {
                        st.conditions.push(c.clone());
                    }
                }
                let before = st.deployed_to_pods.len();
                for p in pods {
                    if !st.deployed_to_pods.iter().any(|x| x.pod_name == p.pod_name) {
                        st.deployed_to_pods.push(p.clone());
                    }
                }
                if st.deployed_to_pods.len() != before {
                    st.deployed_to_pods
                        .sort_by(|a, b| a.pod_name.cmp(&b.pod_name));
                }
            })
            .await?;
        Ok(wrote)
    }

    /// Applies per-pod status changes to one HAProxyCfg in one status write. An `Applied`
    /// change the object cannot take yet (object missing, never completely published, or
    /// another `spec.checksum` for a successful deployment; a failure is written with its
    /// error) is reported as [`PodEntryOutcome::Park`]; a `Removed` change on
    /// a missing object is done. Returns one outcome per change.
    ///
    /// Then, in the same call, each HAProxyMapFile, HAProxyGeneralFile and HAProxyCRTListFile
    /// the HAProxyCfg references gets the same changes in one status write per object
    /// (upstream-behaviour.md 10.5, [`merge_aux_pod_entry`]): a successful deployment of
    /// `spec.checksum` sets the pod's entry (the file's own checksum); a failure or another
    /// checksum is not recorded there; `Removed` removes the pod. Every status write sets
    /// `observedGeneration` to the object's `metadata.generation`.
    ///
    /// # Errors
    /// [`WriteError`] for the read or the write.
    pub async fn update_pod_statuses(
        &self,
        name: &str,
        changes: &[PodEntryChange],
    ) -> Result<Vec<PodEntryOutcome>, WriteError> {
        let Some(cfg) = self.get_cfg(name).await? else {
            return Ok(changes
                .iter()
                .map(|c| match c {
                    PodEntryChange::Applied { .. } => PodEntryOutcome::Park,
                    PodEntryChange::Removed { .. } => PodEntryOutcome::Done,
                })
                .collect());
        };
        let published = cfg.status.as_ref().is_some_and(|s| s.metadata.is_some());
        let outcomes: Vec<PodEntryOutcome> = changes
            .iter()
            .map(|c| match c {
                PodEntryChange::Applied {
                    checksum, input, ..
                } if !published || (*checksum != cfg.spec.checksum && !input.is_failure()) => {
                    PodEntryOutcome::Park
                }
                _ => PodEntryOutcome::Done,
            })
            .collect();
        if outcomes.iter().all(|o| *o == PodEntryOutcome::Park) {
            return Ok(outcomes);
        }
        self.update_cfg_status(name, |st, spec_checksum| {
            for c in changes {
                match c {
                    PodEntryChange::Applied {
                        pod,
                        checksum,
                        merge,
                        input,
                    } if checksum == spec_checksum || input.is_failure() => {
                        let pos = st.deployed_to_pods.iter().position(|p| &p.pod_name == pod);
                        let old = pos.map(|i| &st.deployed_to_pods[i]);
                        let entry = merge(old, input);
                        match pos {
                            Some(i) => st.deployed_to_pods[i] = entry,
                            None => st.deployed_to_pods.push(entry),
                        }
                    }
                    PodEntryChange::Applied { .. } => {}
                    PodEntryChange::Removed { pod } => {
                        st.deployed_to_pods.retain(|p| &p.pod_name != pod);
                    }
                }
            }
            st.deployed_to_pods
                .sort_by(|a, b| a.pod_name.cmp(&b.pod_name));
        })
        .await?;
        let aux: Vec<AuxPodChange> = changes
            .iter()
            .zip(&outcomes)
            .filter_map(|(c, o)| match (c, o) {
                (PodEntryChange::Removed { pod }, _) => Some(AuxPodChange::Removed { pod }),
                (
                    PodEntryChange::Applied {
                        checksum, input, ..
                    },
                    PodEntryOutcome::Done,
                ) if *checksum == cfg.spec.checksum && !input.is_failure() => {
                    Some(AuxPodChange::Deployed { input })
                }
                _ => None,
            })
            .collect();
        if !aux.is_empty() {
            let refs = cfg
                .status
                .as_ref()
                .and_then(|s| s.auxiliary_files.clone())
                .unwrap_or_default();
            for r in &refs.map_files {
                self.update_aux_status::<HAProxyMapFile>(&r.name, &aux)
                    .await?;
            }
            for r in &refs.general_files {
                self.update_aux_status::<HAProxyGeneralFile>(&r.name, &aux)
                    .await?;
            }
            for r in &refs.crt_list_files {
                self.update_aux_status::<HAProxyCRTListFile>(&r.name, &aux)
                    .await?;
            }
        }
        Ok(outcomes)
    }

    /// Records that an object of this HAProxyCfg is over the size limit even compressed
    /// (`SizeLimitExceeded=True`, reason `ObjectTooLarge`); best effort.
    ///
    /// # Errors
    /// [`WriteError`].
    pub async fn set_too_large(
        &self,
        name: &str,
        message: &str,
        now: UnixMillis,
    ) -> Result<bool, WriteError> {
        self.set_conditions(
            name,
            &[Condition {
                type_: conditions::SIZE_LIMIT_EXCEEDED.into(),
                status: "True".into(),
                reason: reasons::OBJECT_TOO_LARGE.into(),
                message: message.to_owned(),
                last_transition_time: k8s_time(now),
                observed_generation: None,
            }],
        )
        .await
    }

    /// Applies per-pod changes to one auxiliary object's status in one status write (409:
    /// re-read), and sets its `observedGeneration`. Absent object: nothing to do.
    async fn update_aux_status<K: AuxObject>(
        &self,
        name: &str,
        changes: &[AuxPodChange<'_>],
    ) -> Result<bool, WriteError> {
        let api: Api<K> = self.api();
        let object = format!("{}/{name}", K::kind(&K::DynamicType::default()));
        let mut last = None;
        for _ in 0..CONFLICT_REREADS {
            let Some(mut o) = self.call(&object, api.get_opt(name)).await? else {
                return Ok(false);
            };
            self.check_term(&object, o.meta())?;
            let file = o.file_checksum();
            let generation = o.meta().generation;
            let before = o.aux_status().clone();
            let mut st = before.clone().unwrap_or_default();
            for c in changes {
                match c {
                    AuxPodChange::Deployed { input } => {
                        let pos = st
                            .deployed_to_pods
                            .iter()
                            .position(|p| p.pod_name == input.pod);
                        let entry =
                            merge_aux_pod_entry(pos.map(|i| &st.deployed_to_pods[i]), input, file);
                        match pos {
                            Some(i) => st.deployed_to_pods[i] = entry,
                            None => st.deployed_to_pods.push(entry),
                        }
                    }
                    AuxPodChange::Removed { pod } => {
                        st.deployed_to_pods.retain(|p| p.pod_name != *pod);
                    }
                }
            }
            st.deployed_to_pods
                .sort_by(|a, b| a.pod_name.cmp(&b.pod_name));
            if before.is_none() && st.deployed_to_pods.is_empty() {
                return Ok(false);
            }
            st.observed_generation = generation;
            if Some(&st) == before.as_ref() {
                return Ok(false);
            }
            *o.aux_status() = Some(st);
            match self
                .write(
                    &object,
                    api.replace_status(name, &PostParams::default(), &o),
                )
                .await
            {
                Ok(_) => return Ok(true),
                Err(e) if e.kind() == ErrorKind::Conflict => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or(WriteError::Content {
            reason: "conflict re-reads exhausted".into(),
        }))
    }
}

/// A per-pod change as an auxiliary object takes it.
enum AuxPodChange<'a> {
    /// The pod runs the HAProxyCfg's `spec.checksum` (so this file's current content).
    Deployed { input: &'a PodStatusInput },
    /// The pod left.
    Removed { pod: &'a str },
}

/// The pod entry of an auxiliary object (upstream-behaviour.md section 10.5): an entry that
/// already has `file_checksum` is kept as it is (its `deployedAt` included); otherwise a fresh
/// entry {podName, namespace, checksum = the file's own checksum, deployedAt = when the
/// deployment was applied, or the old entry's}. Aux entries carry no reload, sync or error
/// fields. Pure.
#[must_use]
pub fn merge_aux_pod_entry(
    old: Option<&PodDeploymentStatus>,
    input: &PodStatusInput,
    file_checksum: Checksum,
) -> PodDeploymentStatus {
    if let Some(o) = old
        && o.checksum == Some(file_checksum)
    {
        return o.clone();
    }
    let deployed_at = match &input.change {
        haptic_journal::PodStatusChange::Applied { observed_at, .. } => {
            Some(k8s_time(*observed_at))
        }
        haptic_journal::PodStatusChange::Removed => None,
    };
    PodDeploymentStatus {
        pod_name: input.pod.clone(),
        namespace: Some(input.namespace.clone()),
        checksum: Some(file_checksum),
        deployed_at: deployed_at.or_else(|| old.and_then(|o| o.deployed_at.clone())),
        ..PodDeploymentStatus::default()
    }
}

/// An auxiliary-file custom resource whose status carries per-pod entries.
trait AuxObject:
    Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
    + Clone
    + Serialize
    + DeserializeOwned
    + Debug
{
    /// `spec.checksum`: the file's own checksum.
    fn file_checksum(&self) -> Checksum;
    /// The status, mutable.
    fn aux_status(&mut self) -> &mut Option<AuxiliaryFileStatus>;
}

macro_rules! aux_object {
    ($($t:ty),*) => {$(
        impl AuxObject for $t {
            fn file_checksum(&self) -> Checksum {
                self.spec.checksum
            }
            fn aux_status(&mut self) -> &mut Option<AuxiliaryFileStatus> {
                &mut self.status
            }
        }
    )*};
}

aux_object!(HAProxyMapFile, HAProxyGeneralFile, HAProxyCRTListFile);

#[cfg(test)]
mod tests {
    use super::*;
    use haptic_journal::{PodStatusChange, SyncMetadata};

    fn input(at: u64) -> PodStatusInput {
        PodStatusInput {
            pod: "p0".into(),
            namespace: "ns".into(),
            change: PodStatusChange::Applied {
                checksum: Checksum::of(b"render"),
                is_drift_check: false,
                sync: SyncMetadata::default(),
                observed_at: UnixMillis(at),
            },
        }
    }

    #[test]
    fn aux_entry_is_kept_for_the_same_file_and_fresh_for_another() {
        let file = Checksum::of(b"map v1");
        let first = merge_aux_pod_entry(None, &input(1_000), file);
        assert_eq!(first.checksum, Some(file));
        assert_eq!(first.deployed_at, Some(k8s_time(UnixMillis(1_000))));
        assert!(first.last_reload_at.is_none() && first.sync_duration.is_none());
        // Same file content: kept as it was (no write), deployedAt included.
        assert_eq!(
            merge_aux_pod_entry(Some(&first), &input(9_000), file),
            first
        );
        // New content: a fresh entry with the new time.
        let other = Checksum::of(b"map v2");
        let next = merge_aux_pod_entry(Some(&first), &input(9_000), other);
        assert_eq!(next.checksum, Some(other));
        assert_eq!(next.deployed_at, Some(k8s_time(UnixMillis(9_000))));
    }
}
