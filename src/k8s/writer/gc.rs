//! Deletions of the [`Writer`]: garbage collection of auxiliary objects and Secrets no render
//! references any more, and the `-invalid` HAProxyCfg once a render passes. Term-fenced like
//! every write.

use super::*;

impl Writer {
    /// Deletes the auxiliary objects and Secrets of `cfg_name` that are not in `wanted`
    /// ((kind, name) pairs). Returns how many were deleted.
    pub(super) async fn collect_garbage(
        &self,
        cfg_name: &str,
        wanted: &BTreeSet<(&'static str, String)>,
    ) -> Result<u32, WriteError> {
        let lp = ListParams::default().labels(&format!("{}={cfg_name}", labels::RUNTIME_CONFIG));
        let mut deleted = 0;
        deleted += self
            .gc_kind::<HAProxyMapFile>("HAProxyMapFile", &lp, wanted)
            .await?;
        deleted += self
            .gc_kind::<HAProxyGeneralFile>("HAProxyGeneralFile", &lp, wanted)
            .await?;
        deleted += self
            .gc_kind::<HAProxyCRTListFile>("HAProxyCRTListFile", &lp, wanted)
            .await?;
        deleted += self.gc_kind::<Secret>("Secret", &lp, wanted).await?;
        Ok(deleted)
    }

    async fn gc_kind<K>(
        &self,
        kind: &'static str,
        lp: &ListParams,
        wanted: &BTreeSet<(&'static str, String)>,
    ) -> Result<u32, WriteError>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + Serialize
            + DeserializeOwned
            + Debug,
        <K as Resource>::DynamicType: Default,
    {
        let api: Api<K> = self.api();
        let list = self.call(kind, api.list(lp)).await?;
        let mut n = 0;
        for o in list.items {
            let name = o.name_any();
            if wanted.contains(&(kind, name.clone())) {
                continue;
            }
            let object = format!("{kind}/{name}");
            self.check_term(&object, o.meta())?;
            match self
                .write(&object, api.delete(&name, &DeleteParams::default()))
                .await
            {
                Ok(_) => n += 1,
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
        }
        Ok(n)
    }

    /// Deletes a HAProxyCfg (the `-invalid` one once a render passes); absent is success.
    ///
    /// # Errors
    /// [`WriteError`]; [`WriteError::StaleTerm`] when it is stamped by a newer term.
    pub async fn delete_cfg(&self, name: &str) -> Result<bool, WriteError> {
        let api: Api<HAProxyCfg> = self.api();
        let object = format!("HAProxyCfg/{name}");
        let Some(existing) = self.call(&object, api.get_opt(name)).await? else {
            return Ok(false);
        };
        self.check_term(&object, &existing.metadata)?;
        match self
            .write(&object, api.delete(name, &DeleteParams::default()))
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if e.is_not_found() => Ok(false),
            Err(e) => Err(e),
        }
    }
}
