//! Deletions of the [`Writer`]: garbage collection of auxiliary objects and Secrets no render
//! references any more, and the `-invalid` HAProxyCfg once a render passes. Term-fenced like
//! every write.

use super::*;

/// What [`Writer::retire_cfg`] did to a HAProxyCfg published under an earlier `--config-name`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Retired {
    /// The HAProxyCfg was deleted (`false`: it was absent, or left because it is not ours).
    pub cfg_deleted: bool,
    /// Auxiliary objects and Secrets deleted (those owner-referenced to it).
    pub objects_deleted: u32,
    /// The HAProxyCfg holds another render than the one this journal recorded: another
    /// publisher wrote it since, so nothing was deleted. The render it holds.
    pub not_ours: Option<Checksum>,
}

impl Writer {
    /// Deletes the auxiliary objects and Secrets of `cfg_name` that are not in `wanted`
    /// ((kind, name) pairs). Returns how many were deleted.
    pub(super) async fn collect_garbage(
        &self,
        cfg_name: &str,
        wanted: &BTreeSet<(&'static str, String)>,
    ) -> Result<u32, WriteError> {
        let lp = ListParams::default().labels(&format!("{}={cfg_name}", labels::RUNTIME_CONFIG));
        self.delete_dependants(&lp, |kind, name, _| {
            !wanted.contains(&(kind, name.to_owned()))
        })
        .await
    }

    /// Deletes, of every kind of auxiliary object and Secret listed by `lp`, those `doomed`
    /// picks (by kind, name and metadata); each delete term-fenced, an object already gone
    /// counted as nothing. Returns how many were deleted.
    async fn delete_dependants(
        &self,
        lp: &ListParams,
        doomed: impl Fn(&'static str, &str, &ObjectMeta) -> bool + Copy,
    ) -> Result<u32, WriteError> {
        Ok(self
            .delete_listed::<HAProxyMapFile>("HAProxyMapFile", lp, doomed)
            .await?
            + self
                .delete_listed::<HAProxyGeneralFile>("HAProxyGeneralFile", lp, doomed)
                .await?
            + self
                .delete_listed::<HAProxyCRTListFile>("HAProxyCRTListFile", lp, doomed)
                .await?
            + self.delete_listed::<Secret>("Secret", lp, doomed).await?)
    }

    async fn delete_listed<K: super::Object>(
        &self,
        kind: &'static str,
        lp: &ListParams,
        doomed: impl Fn(&'static str, &str, &ObjectMeta) -> bool,
    ) -> Result<u32, WriteError> {
        let api: Api<K> = self.api();
        let list = self.call(kind, api.list(lp)).await?;
        let mut n = 0;
        for o in list.items {
            let name = o.name_any();
            if !doomed(kind, &name, o.meta()) {
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

    /// Retires the HAProxyCfg `name` that this journal published under an earlier
    /// `--config-name`, with `recorded` the render its published checkpoint names: deletes the
    /// auxiliary objects and Secrets labelled with it and owner-referenced to it (to its uid
    /// when it exists: never another controller's objects that carry the same label), then the
    /// HAProxyCfg itself. A HAProxyCfg whose spec holds another render was written by another
    /// publisher since: nothing is deleted ([`Retired::not_ours`]). Idempotent: a call repeated
    /// after a crash finds what is left.
    ///
    /// # Errors
    /// [`WriteError`]; [`WriteError::StaleTerm`] when an object is stamped by a newer term.
    pub async fn retire_cfg(&self, name: &str, recorded: Checksum) -> Result<Retired, WriteError> {
        let api: Api<HAProxyCfg> = self.api();
        let object = format!("HAProxyCfg/{name}");
        let existing = self.call(&object, api.get_opt(name)).await?;
        if let Some(cfg) = &existing
            && cfg.spec.checksum != recorded
        {
            return Ok(Retired {
                not_ours: Some(cfg.spec.checksum),
                ..Retired::default()
            });
        }
        let uid = existing.as_ref().and_then(|c| c.metadata.uid.clone());
        let owner = Owner {
            name,
            uid: uid.as_deref(),
        };
        let lp = ListParams::default().labels(&format!("{}={name}", labels::RUNTIME_CONFIG));
        let n = self
            .delete_dependants(&lp, |_, _, meta| owner.owns(meta))
            .await?;
        let cfg_deleted = match existing {
            Some(_) => self.delete_cfg(name).await?,
            None => false,
        };
        Ok(Retired {
            cfg_deleted,
            objects_deleted: n,
            not_ours: None,
        })
    }
}

/// The HAProxyCfg an auxiliary object must be owner-referenced to, to be retired with it: by
/// name, and by uid when the HAProxyCfg still exists (when it is gone, its dependants are
/// orphans the API server's garbage collector would delete too).
struct Owner<'a> {
    name: &'a str,
    uid: Option<&'a str>,
}

impl Owner<'_> {
    fn owns(&self, meta: &ObjectMeta) -> bool {
        meta.owner_references.iter().flatten().any(|r| {
            r.kind == "HAProxyCfg" && r.name == self.name && self.uid.is_none_or(|u| r.uid == u)
        })
    }
}
