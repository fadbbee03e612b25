//! Status writes of the [`Writer`]: per-pod entries on a HAProxyCfg and on the auxiliary
//! objects it references, conditions, and `observedGeneration` (the `metadata.generation` of
//! the spec a status was written for).
//!
//! The writer only reads and writes: what a status becomes is decided by the caller's pure
//! function ([`Writer::modify_cfg_status`], [`Writer::modify_aux_status`]; the publisher's
//! `decide::status`).

use super::*;
use crate::k8s::crd::AuxiliaryFileStatus;

/// An exhausted run of conflict re-reads, as the 409 it is (retried with backoff by the caller).
pub(super) fn conflicts_exhausted(object: &str) -> WriteError {
    WriteError::Api {
        object: object.to_owned(),
        status: 409,
        reason: "Conflict".into(),
        message: "conflict re-reads exhausted".into(),
        retry_after: None,
    }
}

impl Writer {
    /// Writes `cfg`'s status (`replaceStatus`, conditional on its resourceVersion): the object
    /// as written, or `None` on a 409 (kept in `last`; the caller reads again).
    async fn replace_cfg_status(
        &self,
        object: &str,
        cfg: &HAProxyCfg,
        last: &mut Option<WriteError>,
    ) -> Result<Option<HAProxyCfg>, WriteError> {
        let api: Api<HAProxyCfg> = self.api();
        let name = cfg.metadata.name.as_deref().unwrap_or_default();
        match self
            .write(
                object,
                api.replace_status(name, &PostParams::default(), cfg),
            )
            .await
        {
            Ok(c) => Ok(Some(c)),
            Err(e) if e.kind() == ErrorKind::Conflict => {
                *last = Some(e);
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Read-modify-write of a HAProxyCfg's status (409: re-read). `f` gets the status and the
    /// spec checksum; `podsSynced`, `observedGeneration` and, when `synced` (the main
    /// HAProxyCfg, not `-invalid`), the `Synced` condition are recomputed for the spec as read
    /// (so a publication that moves the spec also says its pods are pending); nothing is
    /// written when the status does not change. Returns the resourceVersion and whether a
    /// write happened.
    pub(super) async fn update_cfg_status(
        &self,
        name: &str,
        synced: bool,
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
            if synced {
                st.refresh_synced(
                    &cfg.spec.checksum,
                    cfg.metadata.generation,
                    &k8s_time(UnixMillis::now()),
                );
            }
            if Some(&st) == before.as_ref() {
                return Ok((cfg.metadata.resource_version.clone(), false));
            }
            cfg.status = Some(st);
            if let Some(c) = self.replace_cfg_status(&object, &cfg, &mut last).await? {
                return Ok((c.metadata.resource_version, true));
            }
        }
        Err(last.unwrap_or_else(|| conflicts_exhausted(&object)))
    }

    /// Sets conditions on the main HAProxyCfg's status (keyed by type; the transition time
    /// moves only with the status; `Synced` recomputed). Returns whether a write happened.
    ///
    /// # Errors
    /// [`WriteError`]; 404 when the HAProxyCfg does not exist (yet).
    pub async fn set_conditions(&self, name: &str, new: &[Condition]) -> Result<bool, WriteError> {
        let (_, wrote) = self
            .update_cfg_status(name, true, |st, _| {
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
            .update_cfg_status(name, true, |st, _| {
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

    /// Read-modify-write of a HAProxyCfg's status for the caller's pure function `f`: `f` gets
    /// the object as read and returns the status to write (`None`: nothing to write) and a
    /// value; on a 409 the object is read again and `f` called again. Returns `None` when the
    /// object does not exist, else `f`'s value of the last read and whether a write happened.
    ///
    /// # Errors
    /// [`WriteError`] for the read or the write; [`WriteError::StaleTerm`] when the object is
    /// stamped by a newer term.
    pub async fn modify_cfg_status<T>(
        &self,
        name: &str,
        mut f: impl FnMut(&HAProxyCfg) -> (Option<HAProxyCfgStatus>, T),
    ) -> Result<Option<(T, bool)>, WriteError> {
        let api: Api<HAProxyCfg> = self.api();
        let object = format!("HAProxyCfg/{name}");
        let mut last = None;
        for _ in 0..CONFLICT_REREADS {
            let Some(mut cfg) = self.call(&object, api.get_opt(name)).await? else {
                return Ok(None);
            };
            self.check_term(&object, &cfg.metadata)?;
            let (status, value) = f(&cfg);
            let Some(st) = status.filter(|st| Some(st) != cfg.status.as_ref()) else {
                return Ok(Some((value, false)));
            };
            cfg.status = Some(st);
            if self
                .replace_cfg_status(&object, &cfg, &mut last)
                .await?
                .is_some()
            {
                return Ok(Some((value, true)));
            }
        }
        Err(last.unwrap_or_else(|| conflicts_exhausted(&object)))
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

    /// Read-modify-write of an auxiliary object's status for the caller's pure function `f`:
    /// `f` gets the object's own checksum (`spec.checksum`), its `metadata.generation` and its
    /// status, and returns the status to write (`None`: nothing). 409: read again. An absent
    /// object is nothing to do. Returns whether a write happened.
    ///
    /// # Errors
    /// [`WriteError`]; [`WriteError::StaleTerm`] when the object is stamped by a newer term.
    pub async fn modify_aux_status<K: AuxObject>(
        &self,
        name: &str,
        mut f: impl FnMut(
            Checksum,
            Option<i64>,
            Option<&AuxiliaryFileStatus>,
        ) -> Option<AuxiliaryFileStatus>,
    ) -> Result<bool, WriteError> {
        let api: Api<K> = self.api();
        let object = format!("{}/{name}", K::kind(&()));
        let mut last = None;
        for _ in 0..CONFLICT_REREADS {
            let Some(mut o) = self.call(&object, api.get_opt(name)).await? else {
                return Ok(false);
            };
            self.check_term(&object, o.meta())?;
            let file = o.file_checksum();
            let generation = o.meta().generation;
            let Some(st) = f(file, generation, o.aux_status().as_ref()) else {
                return Ok(false);
            };
            if Some(&st) == o.aux_status().as_ref() {
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
        Err(last.unwrap_or_else(|| conflicts_exhausted(&object)))
    }
}

/// An auxiliary-file custom resource whose status carries per-pod entries (HAProxyMapFile,
/// HAProxyGeneralFile, HAProxyCRTListFile).
pub trait AuxObject:
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
