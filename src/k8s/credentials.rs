//! The Dataplane credentials Secret, watched (issue 16): a rotated password reaches the
//! deployer without a restart.
//!
//! ```text
//!  kube watcher (Secret, fieldSelector metadata.name=<--dataplane-secret>)
//!     Apply / InitApply --credentials_from_secret--> changed? --> watch::Sender<Option<Credentials>>
//!     Delete, a Secret without a complete key pair --> logged; the current credentials stay
//!  readers (the deployer, at each endpoint sync) borrow the newest value
//! ```
//!
//! # Inputs
//! Watch events of one Secret (keys: [`CREDENTIAL_KEYS`], ours first, then upstream HAPTIC's).
//!
//! # Effects
//! The newest complete credentials on a [`watch`] channel; `None` until the Secret was read once.
//! Log lines: `dataplane credentials read`, `dataplane credentials rotated` (never the values).
//!
//! # Journal records
//! None: credentials are never journaled.
//!
//! # Metrics
//! None.

use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Client};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::k8s::discovery::{CREDENTIAL_KEYS, Credentials, credentials_from_secret};

/// The receiving side: the newest credentials, `None` before the Secret was first read.
pub type CredentialsReceiver = watch::Receiver<Option<Credentials>>;

/// Watches one Secret and publishes its credentials.
pub struct CredentialsWatch {
    client: Client,
    namespace: String,
    name: String,
    /// The newest credentials; replaced on every change, never reset to `None`.
    tx: watch::Sender<Option<Credentials>>,
}

impl std::fmt::Debug for CredentialsWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CredentialsWatch")
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl CredentialsWatch {
    /// A watch of the Secret `name` in `namespace` (client built with kube's retry layer off).
    #[must_use]
    pub fn new(client: Client, namespace: &str, name: &str) -> Self {
        CredentialsWatch {
            client,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            tx: watch::Sender::new(None),
        }
    }

    /// A receiver of the newest credentials.
    #[must_use]
    pub fn subscribe(&self) -> CredentialsReceiver {
        self.tx.subscribe()
    }

    /// Watches until `cancel` fires. Watch errors are logged and the watch restarts with
    /// kube-runtime's default backoff.
    ///
    /// # Errors
    /// None today (the `Result` keeps the critical-task signature).
    ///
    /// # Cancel safety
    /// Cancel safe: the channel keeps the last credentials.
    pub async fn run(self, cancel: CancellationToken) -> Result<(), std::convert::Infallible> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &self.namespace);
        let cfg = watcher::Config::default().fields(&format!("metadata.name={}", self.name));
        let mut stream = watcher(api, cfg).default_backoff().boxed();
        let mut seen_in_list = false;
        loop {
            let event = tokio::select! {
                () = cancel.cancelled() => return Ok(()),
                e = stream.next() => e,
            };
            match event {
                None => return Ok(()),
                Some(Err(error)) => {
                    tracing::warn!(secret = %self.name, %error,
                        "dataplane credentials watch failed; retrying");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Some(Ok(watcher::Event::Init)) => seen_in_list = false,
                Some(Ok(watcher::Event::InitApply(secret) | watcher::Event::Apply(secret))) => {
                    seen_in_list = true;
                    self.apply(&secret);
                }
                Some(Ok(watcher::Event::InitDone)) => {
                    if !seen_in_list && self.tx.borrow().is_none() {
                        tracing::warn!(secret = %self.name, namespace = %self.namespace,
                            "dataplane credentials Secret not found: create it with keys \
                             `username` and `password` (or `dataplane_username` and \
                             `dataplane_password`); waiting for it");
                    }
                }
                Some(Ok(watcher::Event::Delete(_))) => {
                    tracing::warn!(secret = %self.name,
                        "dataplane credentials Secret deleted; keeping the current credentials");
                }
            }
        }
    }

    fn apply(&self, secret: &Secret) {
        match credentials_from_secret(secret) {
            Ok(new) => {
                let first = self.tx.borrow().is_none();
                let changed = self.tx.send_if_modified(|cur| {
                    if cur.as_ref() == Some(&new) {
                        false
                    } else {
                        *cur = Some(new.clone());
                        true
                    }
                });
                if changed && first {
                    tracing::info!(secret = %self.name, "dataplane credentials read");
                } else if changed {
                    tracing::info!(secret = %self.name, "dataplane credentials rotated");
                }
            }
            Err(error) => tracing::warn!(secret = %self.name, %error,
                pairs = ?CREDENTIAL_KEYS, "dataplane credentials Secret unusable; keeping the current credentials"),
        }
    }
}
