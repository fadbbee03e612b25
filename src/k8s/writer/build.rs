//! The objects a publication writes, built without I/O: the HAProxyCfg, one auxiliary object or
//! Secret per file. [`Writer::publish`] upserts them; [`Writer::planned_objects`] lists them
//! (with the content self-healing compares) before anything is written.

use super::*;

/// One auxiliary object or Secret, as it is written.
enum AuxObject {
    Map(HAProxyMapFile),
    General(HAProxyGeneralFile),
    CrtList(HAProxyCRTListFile),
    Secret(Secret),
}

impl AuxObject {
    fn kind(&self) -> &'static str {
        match self {
            AuxObject::Map(_) => "HAProxyMapFile",
            AuxObject::General(_) => "HAProxyGeneralFile",
            AuxObject::CrtList(_) => "HAProxyCRTListFile",
            AuxObject::Secret(_) => "Secret",
        }
    }

    fn content(&self) -> String {
        match self {
            AuxObject::Map(o) => content_of(o),
            AuxObject::General(o) => content_of(o),
            AuxObject::CrtList(o) => content_of(o),
            AuxObject::Secret(o) => content_of(o),
        }
    }
}

impl Writer {
    /// The HAProxyCfg `spec` asks for (labels, term annotation, owner; no status).
    pub(super) fn desired_cfg(&self, spec: &PublishSpec<'_>) -> HAProxyCfg {
        let stored = compress_if_needed(
            &spec.render.config_text(),
            self.cfg.compression_threshold_bytes,
        );
        let mut cfg_labels = BTreeMap::new();
        cfg_labels.insert(labels::CONFIG.to_owned(), self.cfg.config_label.clone());
        let mut desired = HAProxyCfg::new(
            spec.name,
            HAProxyCfgSpec {
                path: super::super::crd::HAPROXY_CONFIG_PATH.to_owned(),
                content: stored.content,
                checksum: spec.render.checksum,
                compressed: stored.compressed,
            },
        );
        desired.metadata = self.meta(spec.name, cfg_labels, self.cfg.owner.clone());
        desired
    }

    /// Every object [`Writer::publish`] of `spec` writes (the HAProxyCfg, and the auxiliary
    /// objects and Secrets when `spec.with_files`), sorted, with the content self-healing
    /// compares (JSON besides metadata and status). No I/O: call it before publishing, so a
    /// watch can tell the writes of a publication in progress from outside edits.
    #[must_use]
    pub fn planned_objects(&self, spec: &PublishSpec<'_>) -> Vec<PublishedObject> {
        let mut objects = vec![PublishedObject {
            kind: "HAProxyCfg",
            name: spec.name.to_owned(),
            content: content_of(&self.desired_cfg(spec)),
        }];
        if spec.with_files {
            // The owner's uid is metadata: not part of the compared content.
            let owner = OwnerReference::default();
            for f in &spec.render.files {
                let (name, o, _) = self.build_file(spec.name, f, &owner);
                objects.push(PublishedObject {
                    kind: o.kind(),
                    name,
                    content: o.content(),
                });
            }
        }
        objects.sort();
        objects
    }

    fn build_file(
        &self,
        cfg_name: &str,
        f: &JournaledFile,
        owner: &OwnerReference,
    ) -> (String, AuxObject, i64) {
        let name = aux_object_name(cfg_name, f.kind, &f.path);
        let stored = compress_if_needed(&f.text(), self.cfg.compression_threshold_bytes);
        let size = stored.content.len() as i64;
        let checksum = Checksum::of(&f.content);
        let mut lbl = BTreeMap::new();
        lbl.insert(labels::RUNTIME_CONFIG.to_owned(), cfg_name.to_owned());
        let path = f.pod_path();
        let base = f.name().to_owned();
        let obj = match f.kind {
            AuxKind::Map => {
                let mut o = HAProxyMapFile::new(
                    &name,
                    HAProxyMapFileSpec {
                        map_name: base,
                        path,
                        entries: stored.content,
                        checksum,
                        compressed: stored.compressed,
                    },
                );
                o.metadata = self.meta(&name, lbl, Some(owner.clone()));
                AuxObject::Map(o)
            }
            AuxKind::General => {
                let mut o = HAProxyGeneralFile::new(
                    &name,
                    HAProxyGeneralFileSpec {
                        file_name: base,
                        path,
                        content: stored.content,
                        checksum,
                        compressed: stored.compressed,
                    },
                );
                o.metadata = self.meta(&name, lbl, Some(owner.clone()));
                AuxObject::General(o)
            }
            AuxKind::CrtList => {
                let mut o = HAProxyCRTListFile::new(
                    &name,
                    HAProxyCRTListFileSpec {
                        list_name: base,
                        path,
                        entries: stored.content,
                        checksum,
                        compressed: stored.compressed,
                    },
                );
                o.metadata = self.meta(&name, lbl, Some(owner.clone()));
                AuxObject::CrtList(o)
            }
            AuxKind::Ssl | AuxKind::Ca => {
                let type_value = if f.kind == AuxKind::Ssl {
                    secrets::TYPE_SSL_CERTIFICATE
                } else {
                    secrets::TYPE_CA_FILE
                };
                lbl.insert(secrets::TYPE_LABEL.to_owned(), type_value.to_owned());
                let mut meta = self.meta(&name, lbl, Some(owner.clone()));
                if let Some(a) = meta.annotations.as_mut() {
                    a.insert(
                        secrets::COMPRESSED_ANNOTATION.to_owned(),
                        stored.compressed.to_string(),
                    );
                    a.insert(
                        secrets::CHECKSUM_ANNOTATION.to_owned(),
                        checksum.to_string(),
                    );
                }
                let mut data = BTreeMap::new();
                data.insert(
                    secrets::CERTIFICATE_KEY.to_owned(),
                    ByteString(stored.content.into_bytes()),
                );
                data.insert(secrets::PATH_KEY.to_owned(), ByteString(path.into_bytes()));
                AuxObject::Secret(Secret {
                    metadata: meta,
                    data: Some(data),
                    type_: Some(secrets::SECRET_TYPE.to_owned()),
                    ..Secret::default()
                })
            }
        };
        (name, obj, size)
    }

    /// Upserts the object of one file. Returns (kind, name, compared content, wrote, size).
    pub(super) async fn publish_file(
        &self,
        cfg_name: &str,
        f: &JournaledFile,
        owner: &OwnerReference,
    ) -> Result<(&'static str, String, String, bool, i64), WriteError> {
        let (name, o, size) = self.build_file(cfg_name, f, owner);
        let (kind, content) = (o.kind(), o.content());
        let wrote = match &o {
            AuxObject::Map(o) => self.upsert(o).await.map(|x| x.1),
            AuxObject::General(o) => self.upsert(o).await.map(|x| x.1),
            AuxObject::CrtList(o) => self.upsert(o).await.map(|x| x.1),
            AuxObject::Secret(o) => self.upsert(o).await.map(|x| x.1),
        }
        .map_err(|e| e.with_input(&f.path))?;
        Ok((kind, name, content, wrote, size))
    }
}
