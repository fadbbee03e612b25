//! Pod discovery: the admitted HAProxy pods of the namespace, by label selector (issue 6
//! "Pod discovery").
//!
//! ```text
//!  kube watcher (Pods, labelSelector) --Init..InitApply..InitDone--> fresh snapshot replaces the store
//!                                     --Apply/Delete--------------> store update
//!     -> admitted set (Running, podIP, Dataplane container ready) differs from the last one sent?
//!        -> HAProxyPodTerminated for each pod that left, then HAProxyPodsDiscovered{full set, authoritative}
//! ```
//!
//! # Inputs
//! Pod watch events; the Dataplane credentials Secret ([`CREDENTIAL_KEYS`]) on request (the
//! watched, rotating copy is [`crate::k8s::credentials`]).
//!
//! # Effects
//! [`Input::Event`]s on the caller's channel; nothing before the first complete list, so a
//! restart never reports an empty set it has not seen. A relist (watch restart after 410 Gone)
//! buffers the new list and diffs it whole against the previous set: pods present in both are not
//! terminated.
//!
//! # Journal records
//! `haproxy.pod.terminated`, `haproxy.pods.discovered` (journaled by the receiver).
//!
//! # Metrics
//! None yet; [`PodDiscovery::synced`] is the readiness signal.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt as _;
use haptic_journal::{Correlation, Endpoint, EndpointUrl, Event, Namespace, ObjectName, PodRef};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Client};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::dispatch::input::{Input, InputSender, SinkClosed, new_event_id};

/// Annotation overriding a pod's Dataplane port.
pub const DATAPLANE_PORT_ANNOTATION: &str = "haproxy-haptic.org/dataplane-port";

/// Default `--dataplane-port`.
pub const DEFAULT_DATAPLANE_PORT: u16 = 5555;

/// Settings of [`PodDiscovery`].
#[derive(Debug, Clone)]
pub struct DiscoveryConfig {
    /// Namespace of the HAProxy pods.
    pub namespace: String,
    /// Label selector (`--pod-selector`, e.g. `app=haproxy`).
    pub selector: String,
    /// Dataplane port when the pod has no [`DATAPLANE_PORT_ANNOTATION`]. Default: 5555.
    pub dataplane_port: u16,
}

/// Errors of discovery.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DiscoveryError {
    /// The dispatcher's channel closed.
    #[error(transparent)]
    SinkClosed(#[from] SinkClosed),
    /// The credentials Secret could not be read.
    #[error("cannot read the dataplane secret {namespace}/{name}")]
    Secret {
        /// Namespace.
        namespace: String,
        /// Secret name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The Secret holds neither complete key pair of [`CREDENTIAL_KEYS`].
    #[error(
        "the dataplane secret {name} has no `{key}` key: it needs `username` and `password` \
         (or upstream's `dataplane_username` and `dataplane_password`)"
    )]
    SecretKey {
        /// Secret name.
        name: String,
        /// The missing key.
        key: &'static str,
    },
}

/// Dataplane API basic-auth credentials. `Debug` redacts the password.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// `username`.
    pub username: String,
    /// `password`.
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// The key pairs a Dataplane credentials Secret may hold, tried in this order: ours
/// (`username`/`password`, as the sandbox and `deploy/` write them) and upstream HAPTIC's chart's
/// (`dataplane_username`/`dataplane_password`), so a Secret written for upstream works unchanged.
pub const CREDENTIAL_KEYS: [(&str, &str); 2] = [
    ("username", "password"),
    ("dataplane_username", "dataplane_password"),
];

/// The Dataplane credentials a Secret holds: the first complete pair of [`CREDENTIAL_KEYS`],
/// from `data` or `stringData`.
///
/// # Errors
/// [`DiscoveryError::SecretKey`] when neither pair is complete (naming the first missing key).
pub fn credentials_from_secret(secret: &Secret) -> Result<Credentials, DiscoveryError> {
    let get = |key: &str| {
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .map(|v| String::from_utf8_lossy(&v.0).into_owned())
            .or_else(|| {
                secret
                    .string_data
                    .as_ref()
                    .and_then(|d| d.get(key).cloned())
            })
    };
    for (user_key, pass_key) in CREDENTIAL_KEYS {
        if let (Some(username), Some(password)) = (get(user_key), get(pass_key)) {
            return Ok(Credentials { username, password });
        }
    }
    let key = if get("username").is_some() || get("dataplane_username").is_none() {
        "password"
    } else {
        "dataplane_password"
    };
    Err(DiscoveryError::SecretKey {
        name: secret.metadata.name.clone().unwrap_or_default(),
        key,
    })
}

/// Reads the Dataplane credentials from the Secret (keys: [`CREDENTIAL_KEYS`]).
///
/// # Errors
/// [`DiscoveryError::Secret`] on an API error (404 included), [`DiscoveryError::SecretKey`]
/// when no key pair is complete.
///
/// # Cancel safety
/// Cancel safe.
pub async fn read_credentials(
    client: Client,
    namespace: &str,
    name: &str,
) -> Result<Credentials, DiscoveryError> {
    let secret = Api::<Secret>::namespaced(client, namespace)
        .get(name)
        .await
        .map_err(|source| DiscoveryError::Secret {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            source,
        })?;
    credentials_from_secret(&secret).map_err(|e| match e {
        DiscoveryError::SecretKey { key, .. } => DiscoveryError::SecretKey {
            name: name.to_owned(),
            key,
        },
        other => other,
    })
}

/// The endpoint of an admitted pod, `None` otherwise. Admitted: phase Running, a `status.podIP`,
/// not being deleted (no deletionTimestamp), and ready for the Dataplane API: the container that
/// declares the pod's Dataplane port in `spec.containers[].ports` is ready in
/// `status.containerStatuses` (as upstream HAPTIC selects pods); when no container declares that
/// port, the pod's `Ready` condition is True.
///
/// The container rule matters because HAProxy pods are commonly NotReady until they hold a
/// configuration (a readiness probe on HAProxy's own health endpoint answers 503 before one is
/// loaded): waiting for `Ready` would wait for pods that wait for the controller.
///
/// URL `http://<podIP>:<port>` (IPv6 in brackets), the port from [`DATAPLANE_PORT_ANNOTATION`]
/// when it parses as a port, else `default_port`.
#[must_use]
pub fn admitted_endpoint(pod: &Pod, default_port: u16) -> Option<Endpoint> {
    if pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let status = pod.status.as_ref()?;
    if status.phase.as_deref() != Some("Running") {
        return None;
    }
    let ip = status.pod_ip.as_deref().filter(|ip| !ip.is_empty())?;
    let port = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(DATAPLANE_PORT_ANNOTATION))
        .and_then(|p| p.trim().parse::<u16>().ok())
        .filter(|p| *p != 0)
        .unwrap_or(default_port);
    if !dataplane_ready(pod, port) {
        return None;
    }
    let host = if ip.contains(':') {
        format!("[{ip}]")
    } else {
        ip.to_owned()
    };
    Some(Endpoint {
        url: EndpointUrl::new(format!("http://{host}:{port}")),
        pod: PodRef {
            namespace: Namespace::new(pod.metadata.namespace.clone().unwrap_or_default()),
            name: ObjectName::new(pod.metadata.name.clone()?),
        },
        detected_version: None,
    })
}

/// Whether the pod can take a deployment on `port`: the container declaring `port` is ready;
/// without such a container, the pod's `Ready` condition is True.
fn dataplane_ready(pod: &Pod, port: u16) -> bool {
    let status = pod.status.as_ref();
    let declaring = pod.spec.as_ref().and_then(|spec| {
        spec.containers.iter().find(|c| {
            c.ports
                .iter()
                .flatten()
                .any(|p| p.container_port == i32::from(port))
        })
    });
    match declaring {
        Some(container) => status
            .and_then(|s| s.container_statuses.as_ref())
            .into_iter()
            .flatten()
            .any(|cs| cs.name == container.name && cs.ready),
        None => status
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True"),
    }
}

/// The events for a move from `old` to `new` admitted sets: one `HAProxyPodTerminated` per pod
/// that left (sorted by pod), then `HAProxyPodsDiscovered` with the whole new set (sorted by pod,
/// authoritative). Empty when nothing changed.
#[must_use]
pub fn diff_events(
    old: &BTreeMap<PodRef, Endpoint>,
    new: &BTreeMap<PodRef, Endpoint>,
    first: bool,
) -> Vec<Event> {
    if !first && old == new {
        return Vec::new();
    }
    let mut out: Vec<Event> = old
        .keys()
        .filter(|p| !new.contains_key(*p))
        .map(|pod| Event::HAProxyPodTerminated {
            correlation: Correlation::new(new_event_id("pod-terminated")),
            pod: pod.clone(),
        })
        .collect();
    out.push(Event::HAProxyPodsDiscovered {
        correlation: Correlation::new(new_event_id("pods-discovered")),
        endpoints: new.values().cloned().collect(),
        authoritative: true,
    });
    out
}

/// The pod watcher.
pub struct PodDiscovery {
    client: Client,
    config: DiscoveryConfig,
    /// Set to `true` once the first complete list was sent; never back to `false`.
    synced: watch::Sender<bool>,
}

debug_non_exhaustive!(PodDiscovery, |x| "config" => x.config);

impl PodDiscovery {
    /// Discovery through `client` (built with kube's retry layer off).
    #[must_use]
    pub fn new(client: Client, config: DiscoveryConfig) -> Self {
        PodDiscovery {
            client,
            config,
            synced: watch::Sender::new(false),
        }
    }

    /// `true` after the first complete pod list was sent (for `/readyz`).
    #[must_use]
    pub fn synced(&self) -> watch::Receiver<bool> {
        self.synced.subscribe()
    }

    /// Watches pods until `cancel` fires, sending the events of [`diff_events`].
    ///
    /// Watch errors are logged and the watch restarts with kube-runtime's default backoff.
    ///
    /// # Errors
    /// [`DiscoveryError::SinkClosed`] when the receiver is gone.
    ///
    /// # Cancel safety
    /// Cancel safe; a cancelled run may have sent part of one diff's events.
    pub async fn run(
        self,
        sink: InputSender,
        cancel: CancellationToken,
    ) -> Result<(), DiscoveryError> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &self.config.namespace);
        let mut stream = watcher(
            api,
            watcher::Config::default().labels(&self.config.selector),
        )
        .default_backoff()
        .boxed();
        let mut store: BTreeMap<String, Pod> = BTreeMap::new();
        let mut relist: Option<BTreeMap<String, Pod>> = None;
        let mut sent: BTreeMap<PodRef, Endpoint> = BTreeMap::new();
        let mut first = true;
        loop {
            let event = tokio::select! {
                () = cancel.cancelled() => return Ok(()),
                e = stream.next() => e,
            };
            let changed = match event {
                None => return Ok(()),
                Some(Err(error)) => {
                    tracing::warn!(error = %error, "pod watch failed; retrying");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    false
                }
                Some(Ok(watcher::Event::Init)) => {
                    relist = Some(BTreeMap::new());
                    false
                }
                Some(Ok(watcher::Event::InitApply(pod))) => {
                    if let Some(buf) = relist.as_mut() {
                        buf.insert(pod.metadata.name.clone().unwrap_or_default(), pod);
                    }
                    false
                }
                Some(Ok(watcher::Event::InitDone)) => {
                    store = relist.take().unwrap_or_default();
                    true
                }
                Some(Ok(watcher::Event::Apply(pod))) => {
                    store.insert(pod.metadata.name.clone().unwrap_or_default(), pod);
                    !first
                }
                Some(Ok(watcher::Event::Delete(pod))) => {
                    store.remove(&pod.metadata.name.clone().unwrap_or_default());
                    !first
                }
            };
            if !changed {
                continue;
            }
            let admitted: BTreeMap<PodRef, Endpoint> = store
                .values()
                .filter_map(|p| admitted_endpoint(p, self.config.dataplane_port))
                .map(|e| (e.pod.clone(), e))
                .collect();
            let events = diff_events(&sent, &admitted, first);
            if !events.is_empty() {
                tracing::info!(pods = admitted.len(), "haproxy pods discovered");
            }
            for event in events {
                sink.send(Input::Event(event))
                    .await
                    .map_err(|_| SinkClosed)?;
            }
            sent = admitted;
            if first {
                first = false;
                self.synced.send_replace(true);
            }
        }
    }
}
