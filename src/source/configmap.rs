//! The ConfigMap render source: a ConfigMap holding `haproxy.cfg` and the auxiliary files, plus an
//! optional Secret for certificates, both watched with kube's watcher (issue 6 "Render sources").
//!
//! # Key conventions
//! Object keys cannot hold `/`, so a file's render path `<folder>/<name>` becomes the key
//! `<folder>--<name>`:
//!
//! | key | render path | where |
//! |---|---|---|
//! | `haproxy.cfg` | `haproxy.cfg` | ConfigMap (required) |
//! | `maps--hosts.map` | `maps/hosts.map` | ConfigMap |
//! | `general--403.http` | `general/403.http` | ConfigMap |
//! | `crt-lists--sites.crtlist` | `crt-lists/sites.crtlist` | ConfigMap |
//! | `ca--clients-ca.pem` | `ca/clients-ca.pem` | ConfigMap or Secret |
//! | `ssl--site.pem` | `ssl/site.pem` | Secret (certificate + key: never in a ConfigMap) |
//!
//! `data` and `binaryData` (ConfigMap) are both read. Keys without a known `<folder>--` prefix
//! are ignored (logged at debug), and `ssl--` keys in the ConfigMap are refused (logged at warn)
//! so private keys never sit in a ConfigMap. A key present in both objects is taken from the Secret.
//!
//! # Commit point
//! A render is built from the newest ConfigMap and Secret once both initial lists are done and
//! the objects have been quiet for the debounce (default 500 ms). Writers update the Secret
//! first, then the ConfigMap; two writes inside the debounce window become one render. With a
//! Secret configured, no render is produced while the Secret is absent.
//!
//! # Inputs
//! Watch events of one ConfigMap and optionally one Secret (field selector `metadata.name`).
//!
//! # Effects
//! [`super::Input::Rendered`] with trigger `configmap_changed` for each new checksum.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Client};
use tokio_util::sync::CancellationToken;

use crate::core::render::{CONFIG_FILE, RenderContent, RenderFile, kind_of_folder};
use crate::dispatch::input::{InputSender, SinkClosed};

/// The separator between folder and file name in a key (`maps--hosts.map`).
pub const KEY_SEPARATOR: &str = "--";

/// Settings of a [`ConfigMapSource`].
#[derive(Debug, Clone)]
pub struct ConfigMapSourceConfig {
    /// Namespace of both objects.
    pub namespace: String,
    /// Name of the ConfigMap (`--configmap`).
    pub configmap: String,
    /// Name of the optional Secret with `ssl--*` (and `ca--*`) keys.
    pub secret: Option<String>,
    /// Quiet time after a change before a render is built. Default: 500 ms.
    pub debounce: Duration,
}

impl ConfigMapSourceConfig {
    /// The defaults for a ConfigMap without a Secret.
    #[must_use]
    pub fn new(namespace: impl Into<String>, configmap: impl Into<String>) -> Self {
        ConfigMapSourceConfig {
            namespace: namespace.into(),
            configmap: configmap.into(),
            secret: None,
            debounce: Duration::from_millis(500),
        }
    }
}

/// Errors that end [`ConfigMapSource::run`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigMapSourceError {
    /// The dispatcher's channel closed.
    #[error(transparent)]
    SinkClosed(#[from] SinkClosed),
}

/// The render path of a key, or `None` when the key is not a render file key.
///
/// `haproxy.cfg` -> `haproxy.cfg`; `maps--hosts.map` -> `maps/hosts.map`.
#[must_use]
pub fn key_to_path(key: &str) -> Option<String> {
    if key == CONFIG_FILE {
        return Some(key.to_owned());
    }
    let (folder, name) = key.split_once(KEY_SEPARATOR)?;
    kind_of_folder(folder)?;
    (!name.is_empty()).then(|| format!("{folder}/{name}"))
}

/// The key of a render path (`maps/hosts.map` -> `maps--hosts.map`).
#[must_use]
pub fn path_to_key(path: &str) -> String {
    path.replacen('/', KEY_SEPARATOR, 1)
}

/// Builds a render from a ConfigMap and an optional Secret; `None` without `haproxy.cfg`.
#[must_use]
pub fn render_from_objects(cm: &ConfigMap, secret: Option<&Secret>) -> Option<RenderContent> {
    let mut by_path: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let text = cm.data.iter().flatten().map(|(k, v)| (k, v.as_bytes()));
    let binary = cm
        .binary_data
        .iter()
        .flatten()
        .map(|(k, v)| (k, v.0.as_slice()));
    for (key, value) in text.chain(binary) {
        match key_to_path(key) {
            Some(path) if path.starts_with("ssl/") => {
                tracing::warn!(key = %key, "ssl key in a configmap ignored; put it in the secret");
            }
            Some(path) => {
                by_path.insert(path, value.to_vec());
            }
            None => tracing::debug!(key = %key, "configmap key ignored"),
        }
    }
    for (key, value) in secret.and_then(|s| s.data.as_ref()).into_iter().flatten() {
        match key_to_path(key) {
            Some(path) if path != CONFIG_FILE => {
                by_path.insert(path, value.0.clone());
            }
            _ => tracing::debug!(key = %key, "secret key ignored"),
        }
    }
    let config = by_path.remove(CONFIG_FILE)?;
    let files = by_path
        .into_iter()
        .filter_map(|(path, content)| {
            let kind = kind_of_folder(path.split('/').next()?)?;
            Some(RenderFile {
                kind,
                path,
                content,
            })
        })
        .collect();
    Some(RenderContent::new(config, files))
}

/// A watched ConfigMap (+ Secret).
pub struct ConfigMapSource {
    client: Client,
    config: ConfigMapSourceConfig,
    last_sent: Option<haptic_journal::Checksum>,
    /// The ConfigMap's uid at the last render sent (for `ConfigIdentity.source_uid` and the
    /// HAProxyCfg's owner reference); `None` until then.
    source_uid: tokio::sync::watch::Sender<Option<haptic_journal::ObjectUid>>,
}

debug_non_exhaustive!(ConfigMapSource, |x| "config" => x.config);

enum Change {
    ConfigMap(watcher::Event<ConfigMap>),
    Secret(watcher::Event<Secret>),
}

/// One watched object: the newest version and whether the initial list is done.
struct Slot<K> {
    object: Option<K>,
    synced: bool,
}

impl<K> Slot<K> {
    fn apply(&mut self, event: watcher::Event<K>) {
        match event {
            watcher::Event::Apply(o) | watcher::Event::InitApply(o) => self.object = Some(o),
            watcher::Event::Delete(_) => self.object = None,
            watcher::Event::Init => {}
            watcher::Event::InitDone => self.synced = true,
        }
    }
}

impl ConfigMapSource {
    /// A source reading through `client` (built with kube's retry layer off, DESIGN.md section 2).
    #[must_use]
    pub fn new(client: Client, config: ConfigMapSourceConfig) -> Self {
        ConfigMapSource {
            client,
            config,
            last_sent: None,
            source_uid: tokio::sync::watch::Sender::new(None),
        }
    }

    /// The uid of the ConfigMap the last render came from (DESIGN.md "Identity and names":
    /// `ConfigIdentity.source_uid`, owner of the HAProxyCfg); updated before the render is sent.
    #[must_use]
    pub fn source_uid(&self) -> tokio::sync::watch::Receiver<Option<haptic_journal::ObjectUid>> {
        self.source_uid.subscribe()
    }

    /// Tells the source which render was last journaled, so it is not sent again.
    pub fn set_last_sent(&mut self, checksum: haptic_journal::Checksum) {
        self.last_sent = Some(checksum);
    }

    /// Watches until `cancel` fires, sending every new render.
    ///
    /// Watch errors are logged and the watch restarts with kube-runtime's default backoff
    /// (a relist after 410 included); an unchanged render is never sent twice.
    ///
    /// # Errors
    /// [`ConfigMapSourceError::SinkClosed`] when the receiver is gone.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn run(
        mut self,
        sink: InputSender,
        cancel: CancellationToken,
    ) -> Result<(), ConfigMapSourceError> {
        let ns = &self.config.namespace;
        let cms: Api<ConfigMap> = Api::namespaced(self.client.clone(), ns);
        let cm_stream = watcher(
            cms,
            watcher::Config::default().fields(&format!("metadata.name={}", self.config.configmap)),
        )
        .default_backoff()
        .map(|e| e.map(Change::ConfigMap))
        .boxed();
        let secret_stream = match &self.config.secret {
            Some(name) => {
                let secrets: Api<Secret> = Api::namespaced(self.client.clone(), ns);
                watcher(
                    secrets,
                    watcher::Config::default().fields(&format!("metadata.name={name}")),
                )
                .default_backoff()
                .map(|e| e.map(Change::Secret))
                .boxed()
            }
            None => futures::stream::pending().boxed(),
        };
        let mut changes = futures::stream::select(cm_stream, secret_stream);
        let mut cm = Slot::<ConfigMap> {
            object: None,
            synced: false,
        };
        let mut secret = Slot::<Secret> {
            object: None,
            synced: self.config.secret.is_none(),
        };
        let mut dirty_since: Option<Instant> = None;
        let mut first = true;
        loop {
            let wait = dirty_since.map_or(Duration::from_secs(3600), |t| {
                self.config.debounce.saturating_sub(t.elapsed())
            });
            tokio::select! {
                () = cancel.cancelled() => return Ok(()),
                change = changes.next() => match change {
                    Some(Ok(Change::ConfigMap(e))) => { cm.apply(e); dirty_since = Some(Instant::now()); }
                    Some(Ok(Change::Secret(e))) => { secret.apply(e); dirty_since = Some(Instant::now()); }
                    Some(Err(error)) => tracing::warn!(error = %error, "render source watch failed; retrying"),
                    None => return Ok(()),
                },
                () = tokio::time::sleep(wait), if dirty_since.is_some() => {
                    dirty_since = None;
                    if !(cm.synced && secret.synced) {
                        continue;
                    }
                    let Some(cm_obj) = cm.object.as_ref() else { continue };
                    if self.config.secret.is_some() && secret.object.is_none() {
                        tracing::warn!("render secret absent; waiting for it");
                        continue;
                    }
                    let started = Instant::now();
                    let Some(content) = render_from_objects(cm_obj, secret.object.as_ref()) else {
                        tracing::warn!("configmap has no haproxy.cfg key; no render");
                        continue;
                    };
                    let manifest = content.manifest();
                    let checksum = manifest.checksum;
                    let uid = cm_obj.metadata.uid.clone().map(haptic_journal::ObjectUid::new);
                    self.source_uid.send_if_modified(|old| {
                        let changed = *old != uid;
                        old.clone_from(&uid);
                        changed
                    });
                    if self.last_sent != Some(checksum) {
                        let trigger = if first { "startup" } else { "configmap_changed" };
                        crate::dispatch::input::send_render(
                            &sink,
                            content,
                            manifest,
                            started.elapsed(),
                            trigger,
                            crate::dispatch::input::RenderSource::ConfigMap,
                        )
                        .await?;
                        self.last_sent = Some(checksum);
                        tracing::info!(render = %checksum, "render read from configmap");
                    }
                    first = false;
                }
            }
        }
    }
}
