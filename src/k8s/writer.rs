//! The Kubernetes writer of the config publisher: HAProxyCfg (+ `-invalid`), auxiliary custom
//! resources, Secrets, per-pod status and conditions (upstream-behaviour.md section 10, with the
//! fixes of DESIGN.md section 3).
//!
//! Every call is idempotent: it reads the object first and writes only what differs (spec,
//! labels, owner references, status), so a call repeated after a crash between effect and ack
//! changes nothing. Writes are `replace` guarded by the `resourceVersion` just read; a 409 is
//! re-read and retried a few times here (that is a re-read, not a retry policy). Every other
//! failure goes back to the caller classified ([`WriteError::kind`]); the retry policy lives in
//! the publisher's pure core. Each request has a timeout ([`WriterConfig::request_timeout`]).
//!
//! Fencing (DESIGN.md J7): every write stamps the annotation [`labels::LEADER_TERM`] with the
//! writer's term; an object stamped with a newer term is never overwritten
//! ([`WriteError::StaleTerm`]). And immediately before every write (create, replace, status
//! replace, delete) the writer checks its [`LeaseGuard`] (renew time + duration - margin > now);
//! when it refuses, nothing is sent and the call fails with [`WriteError::Deposed`]: the caller
//! stops acting for this term at once (no retry, nothing acked).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use haptic_journal::{AuxKind, Checksum, Term, UnixMillis};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, OwnerReference, Time};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, Resource, ResourceExt as _};
use serde::Serialize;
use serde::de::DeserializeOwned;

mod build;
mod gc;
mod status;

pub use gc::Retired;
pub use status::AuxObject;

use super::crd::{
    AuxiliaryFileReferences, ConfigMetadata, HAProxyCRTListFile, HAProxyCRTListFileSpec,
    HAProxyCfg, HAProxyCfgSpec, HAProxyCfgStatus, HAProxyGeneralFile, HAProxyGeneralFileSpec,
    HAProxyMapFile, HAProxyMapFileSpec, PodDeploymentStatus, ResourceReference, conditions, labels,
    reasons, secrets, set_condition,
};
use super::error::WriteError;
use crate::core::ErrorKind;
use crate::core::compression::compress_if_needed;
use crate::core::guard::LeaseGuard;
use crate::core::naming::aux_object_name;
use crate::core::render::{JournaledFile, JournaledRender};

/// How often a 409 is re-read and retried inside one call.
const CONFLICT_REREADS: usize = 5;

/// The API server's request body limit (3 MiB): an object whose JSON is larger is not sent; it
/// fails as the server would, with a permanent 413 (no upload of megabytes only to be refused).
pub const MAX_REQUEST_BYTES: usize = 3 * 1024 * 1024;

/// Settings of one [`Writer`] (one per leadership term).
#[derive(Clone, Debug)]
pub struct WriterConfig {
    /// Namespace of every object written.
    pub namespace: String,
    /// Value of the `haproxy-haptic.org/config` label on HAProxyCfg objects.
    pub config_label: String,
    /// Owner reference of the HAProxyCfg (the source ConfigMap), when there is one.
    pub owner: Option<OwnerReference>,
    /// The leadership term stamped on every write.
    pub term: Term,
    /// Content longer than this is stored zstd + base64 when that is shorter; 0 = never.
    /// Default: 1 MiB.
    pub compression_threshold_bytes: u64,
    /// Timeout of one API request. Default: 10 s.
    pub request_timeout: Duration,
    /// The fencing check before every write (DESIGN.md J7); [`AlwaysValid`](crate::core::guard::AlwaysValid) without election.
    pub lease: Arc<dyn LeaseGuard>,
}

/// The runtime's Lease guard is the fencing check of both writers (deployer and publisher).
impl LeaseGuard for super::lease::LeaseGuard {
    fn is_valid(&self) -> bool {
        super::lease::LeaseGuard::is_valid(self)
    }
}

/// What to publish as one HAProxyCfg.
#[derive(Clone, Debug)]
pub struct PublishSpec<'a> {
    /// HAProxyCfg name (`<config>-haproxycfg` or `...-invalid`).
    pub name: &'a str,
    /// The render (every content UTF-8: objects hold text; the publisher checks it when it
    /// loads the render, [`JournaledRender::not_text`]).
    pub render: &'a JournaledRender,
    /// Also publish the auxiliary files (false for `-invalid`, whose files would duplicate).
    pub with_files: bool,
    /// `status.metadata.renderedAt`.
    pub rendered_at: Option<UnixMillis>,
    /// `status.metadata.validatedAt`.
    pub validated_at: Option<UnixMillis>,
    /// `status.validationError` (only `-invalid`).
    pub validation_error: Option<String>,
    /// Conditions set (keyed by type) in the publication's own status write, e.g.
    /// `Published=True`; empty for none.
    pub conditions: &'a [Condition],
}

/// One object the last publication wrote, as self-healing compares it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct PublishedObject {
    /// `HAProxyCfg`, `HAProxyMapFile`, `HAProxyGeneralFile`, `HAProxyCRTListFile` or `Secret`.
    pub kind: &'static str,
    /// Object name.
    pub name: String,
    /// JSON of what we wrote besides metadata and status (spec, or Secret data).
    pub content: String,
}

/// Result of a complete publication.
#[derive(Clone, Debug)]
pub struct Published {
    /// HAProxyCfg name.
    pub name: String,
    /// `resourceVersion` after the last write.
    pub resource_version: Option<String>,
    /// Map files published.
    pub map_files: u32,
    /// Secrets published.
    pub secrets: u32,
    /// Number of objects created, replaced or deleted (0: everything was already as wanted).
    pub writes: u32,
    /// Every object of the publication, sorted.
    pub objects: Vec<PublishedObject>,
}

/// What the writer reads, writes and deletes: a namespaced object kube can send and receive.
trait Object:
    Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType: Default>
    + Clone
    + Serialize
    + DeserializeOwned
    + Debug
{
}

impl<K> Object for K where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType: Default>
        + Clone
        + Serialize
        + DeserializeOwned
        + Debug
{
}

/// The writer: one per leadership term.
#[derive(Clone)]
pub struct Writer {
    client: Client,
    cfg: WriterConfig,
}

impl Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer").field("cfg", &self.cfg).finish()
    }
}

/// Converts unix milliseconds to a Kubernetes `MicroTime` (serialized with microseconds, so
/// the milliseconds survive a round trip through the API server).
#[must_use]
pub fn k8s_micro_time(at: UnixMillis) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime {
    let ms = i64::try_from(at.0).unwrap_or(i64::MAX);
    k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
        k8s_openapi::jiff::Timestamp::from_millisecond(ms).unwrap_or_default(),
    )
}

/// Converts unix milliseconds to a Kubernetes `Time` (serialized in whole seconds).
#[must_use]
pub fn k8s_time(at: UnixMillis) -> Time {
    let ms = i64::try_from(at.0).unwrap_or(i64::MAX);
    Time(k8s_openapi::jiff::Timestamp::from_millisecond(ms).unwrap_or_default())
}

/// JSON of an object without `metadata` and `status`: what "same content" compares (the writer's
/// skip-unchanged check and the self-heal watch's "is this our write" check alike).
#[must_use]
pub fn content_of<K: Serialize>(obj: &K) -> String {
    let mut v = serde_json::to_value(obj).unwrap_or_default();
    if let Some(m) = v.as_object_mut() {
        m.remove("metadata");
        m.remove("status");
        m.remove("apiVersion");
        m.remove("kind");
    }
    v.to_string()
}

/// The term stamped on an object, if any.
#[must_use]
pub fn stamped_term(meta: &ObjectMeta) -> Option<Term> {
    meta.annotations
        .as_ref()?
        .get(labels::LEADER_TERM)?
        .parse()
        .ok()
        .map(Term)
}

impl Writer {
    /// A writer for one term. Build the client with kube's retry layer off
    /// (`Config::default_retry = false`): retries are the publisher's.
    #[must_use]
    pub fn new(client: Client, cfg: WriterConfig) -> Writer {
        Writer { client, cfg }
    }

    /// The settings.
    #[must_use]
    pub fn config(&self) -> &WriterConfig {
        &self.cfg
    }

    fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.cfg.namespace)
    }

    async fn call<T>(
        &self,
        object: &str,
        fut: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, WriteError> {
        match tokio::time::timeout(self.cfg.request_timeout, fut).await {
            Ok(r) => r.map_err(|e| WriteError::from_kube(object, e)),
            Err(_) => Err(WriteError::Timeout {
                object: object.to_owned(),
                after: self.cfg.request_timeout,
            }),
        }
    }

    /// Runs a write request after the Lease check (DESIGN.md J7): when the guard refuses,
    /// nothing is sent and the result is [`WriteError::Deposed`].
    async fn write<T>(
        &self,
        object: &str,
        fut: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, WriteError> {
        if !self.cfg.lease.is_valid() {
            return Err(WriteError::Deposed {
                object: object.to_owned(),
                term: self.cfg.term,
            });
        }
        self.call(object, fut).await
    }

    fn check_term(&self, object: &str, meta: &ObjectMeta) -> Result<(), WriteError> {
        match stamped_term(meta) {
            Some(theirs) if theirs > self.cfg.term => Err(WriteError::StaleTerm {
                object: object.to_owned(),
                ours: self.cfg.term,
                theirs,
            }),
            _ => Ok(()),
        }
    }

    fn meta(
        &self,
        name: &str,
        labels: BTreeMap<String, String>,
        owner: Option<OwnerReference>,
    ) -> ObjectMeta {
        let mut annotations = BTreeMap::new();
        annotations.insert(labels::LEADER_TERM.to_owned(), self.cfg.term.0.to_string());
        ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(self.cfg.namespace.clone()),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: owner.map(|o| vec![o]),
            ..ObjectMeta::default()
        }
    }

    /// Creates or replaces `desired` unless the stored object already has its content, labels and
    /// owner references. Returns the stored object and whether a write happened.
    async fn upsert<K: Object>(&self, desired: &K) -> Result<(K, bool), WriteError> {
        let api: Api<K> = self.api();
        let name = desired.name_any();
        let object = format!("{}/{name}", K::kind(&K::DynamicType::default()));
        let size = serde_json::to_vec(desired).map_or(0, |v| v.len());
        if size > MAX_REQUEST_BYTES {
            return Err(WriteError::Api {
                object,
                status: 413,
                reason: "RequestEntityTooLarge".into(),
                message: format!("request is too large: {size} bytes (limit {MAX_REQUEST_BYTES})"),
                retry_after: None,
            });
        }
        let mut last = None;
        for _ in 0..CONFLICT_REREADS {
            let existing = self.call(&object, api.get_opt(&name)).await?;
            let result = match existing {
                None => {
                    haptic_journal::crash_point!("publisher::before_create");
                    self.write(&object, api.create(&PostParams::default(), desired))
                        .await
                }
                Some(existing) => {
                    self.check_term(&object, existing.meta())?;
                    if self.same(&existing, desired) {
                        return Ok((existing, false));
                    }
                    let mut obj = desired.clone();
                    obj.meta_mut().resource_version = existing.meta().resource_version.clone();
                    // Keep annotations and labels others put there; ours win.
                    merge_maps(&mut obj.meta_mut().labels, &existing.meta().labels);
                    merge_maps(
                        &mut obj.meta_mut().annotations,
                        &existing.meta().annotations,
                    );
                    self.write(&object, api.replace(&name, &PostParams::default(), &obj))
                        .await
                }
            };
            match result {
                Ok(k) => return Ok((k, true)),
                Err(e) if e.kind() == ErrorKind::Conflict => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| status::conflicts_exhausted(&object)))
    }

    fn same<K: Resource + Serialize>(&self, existing: &K, desired: &K) -> bool {
        let (e, d) = (existing.meta(), desired.meta());
        let labels_ok = d
            .labels
            .iter()
            .flatten()
            .all(|(k, v)| e.labels.as_ref().and_then(|l| l.get(k)) == Some(v));
        let owners_ok = d.owner_references.is_none() || d.owner_references == e.owner_references;
        labels_ok && owners_ok && content_of(existing) == content_of(desired)
    }

    /// Reads a HAProxyCfg.
    ///
    /// # Errors
    /// [`WriteError`] (not found is `Ok(None)`).
    pub async fn get_cfg(&self, name: &str) -> Result<Option<HAProxyCfg>, WriteError> {
        let api: Api<HAProxyCfg> = self.api();
        self.call(&format!("HAProxyCfg/{name}"), api.get_opt(name))
            .await
    }

    /// Publishes one render completely: the HAProxyCfg spec, every auxiliary object and Secret
    /// (owner-referenced to it), the status references and metadata, then deletes the auxiliary
    /// objects of this HAProxyCfg that the render no longer has. Returns only when all of it is
    /// in the cluster.
    ///
    /// Idempotent: objects already as wanted are not written.
    ///
    /// # Errors
    /// The first failed request ([`WriteError::kind`] says how to react); a
    /// [`WriteError::StaleTerm`] when any object is stamped with a newer term.
    ///
    /// # Cancel safety
    /// Dropping the future leaves a partial publication; calling again completes it.
    pub async fn publish(&self, spec: &PublishSpec<'_>) -> Result<Published, WriteError> {
        let render = spec.render;
        let desired = self.desired_cfg(spec);
        let mut objects = vec![PublishedObject {
            kind: "HAProxyCfg",
            name: spec.name.to_owned(),
            content: content_of(&desired),
        }];
        let (cfg, wrote) = self
            .upsert(&desired)
            .await
            .map_err(|e| e.with_input("haproxy.cfg"))?;
        if wrote && spec.with_files {
            haptic_journal::crash_point!("publisher::after_cfg_write");
        }
        let mut writes = u32::from(wrote);
        let owner = OwnerReference {
            api_version: format!("{}/{}", super::crd::GROUP, super::crd::VERSION),
            kind: "HAProxyCfg".into(),
            name: spec.name.to_owned(),
            uid: cfg.metadata.uid.clone().unwrap_or_default(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        };
        let mut refs = AuxiliaryFileReferences::default();
        let mut wanted: BTreeSet<(&'static str, String)> = BTreeSet::new();
        let mut total_size = desired.spec.content.len() as i64;
        if spec.with_files {
            for f in &render.files {
                let (kind, name, content, wrote, size) =
                    self.publish_file(spec.name, f, &owner).await?;
                writes += u32::from(wrote);
                total_size += size;
                let r = ResourceReference {
                    kind: kind.to_owned(),
                    name: name.clone(),
                    namespace: Some(self.cfg.namespace.clone()),
                };
                match f.kind {
                    AuxKind::Map => refs.map_files.push(r),
                    AuxKind::Ssl => refs.ssl_certificates.push(r),
                    AuxKind::Ca => refs.ca_files.push(r),
                    AuxKind::General => refs.general_files.push(r),
                    AuxKind::CrtList => refs.crt_list_files.push(r),
                }
                wanted.insert((kind, name.clone()));
                objects.push(PublishedObject {
                    kind,
                    name,
                    content,
                });
            }
        }
        if spec.with_files && !render.files.is_empty() {
            haptic_journal::crash_point!("publisher::after_aux_objects");
        }
        let metadata = ConfigMetadata {
            total_size: Some(total_size),
            content_size: Some(render.config.len() as i64),
            rendered_at: spec.rendered_at.map(k8s_time),
            validated_at: spec.validated_at.map(k8s_time),
        };
        let (rv, wrote) = self
            .update_cfg_status(spec.name, spec.with_files, |st, _| {
                st.auxiliary_files = Some(refs.clone());
                st.metadata = Some(metadata.clone());
                st.validation_error.clone_from(&spec.validation_error);
                for c in spec.conditions {
                    set_condition(&mut st.conditions, c.clone());
                }
            })
            .await?;
        writes += u32::from(wrote);
        if spec.with_files {
            writes += self.collect_garbage(spec.name, &wanted).await?;
        }
        objects.sort();
        Ok(Published {
            name: spec.name.to_owned(),
            resource_version: rv,
            map_files: refs.map_files.len() as u32,
            secrets: (refs.ssl_certificates.len() + refs.ca_files.len()) as u32,
            writes,
            objects,
        })
    }
}

fn merge_maps(
    ours: &mut Option<BTreeMap<String, String>>,
    theirs: &Option<BTreeMap<String, String>>,
) {
    let Some(theirs) = theirs else { return };
    let ours = ours.get_or_insert_with(BTreeMap::new);
    for (k, v) in theirs {
        ours.entry(k.clone()).or_insert_with(|| v.clone());
    }
}
