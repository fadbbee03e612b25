//! Kubernetes API emulator: a plain-HTTP peer that kube's typed client, `kube::runtime::watcher`,
//! kube-lease-manager and kubectl 1.32 use unchanged through a kubeconfig (DESIGN.md §5; the request
//! checklist is `reference/apiserver-emulation.md`, protocol facts `reference/ecosystem.md` §B.4).
//!
//! ```text
//!  kube / kubectl --HTTP/1.1--> server (log, faults) --> routes --> store (objects, RV, history)
//!                                      |                                   |
//!                      /_sandbox/faults, /_sandbox/requests       watch streams (history + notify)
//! ```
//!
//! Invariants: one cluster-wide resourceVersion counter bumped by every write (no-op writes do not
//! bump it); every error is a `Status` whose `code` equals the HTTP status; watch expiry is an
//! ERROR event with code 410 in a 200 stream.
//!
//! Control paths (no auth, not in the request log): `POST /_sandbox/faults` ([`Fault`] as JSON),
//! `GET|DELETE /_sandbox/faults`, `GET|DELETE /_sandbox/requests` ([`RequestRecord`] array),
//! `POST /_sandbox/compact` (forget the watch history: older watches get the 410 ERROR event).

mod discovery;
mod events;
mod faults;
mod fields;
mod meta;
mod patch;
mod resources;
mod routes;
mod schema;
mod select;
mod server;
mod shared;
mod status;
mod store;
mod table;
mod watch;

pub use super::control::RequestRecord;
pub use faults::Fault;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Bearer token written into kubeconfigs; accepted, never required (kubectl sends none over http).
pub const TOKEN: &str = "haptic-sandbox-token";

/// How long [`ApiServer::shutdown`] waits for connection tasks to finish.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Settings of one emulator instance.
#[derive(Debug, Clone)]
pub struct ApiServerConfig {
    /// Address to listen on; port 0 lets the OS choose. Default: `127.0.0.1:0`.
    pub listen: SocketAddr,
}

impl Default for ApiServerConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        }
    }
}

/// A running emulator; dropping it (or [`ApiServer::shutdown`]) stops it.
#[derive(Debug)]
pub struct ApiServer {
    shared: Arc<shared::Shared>,
    /// The accept loop; ends when `shared.shutdown` is cancelled.
    accept: Option<tokio::task::JoinHandle<()>>,
}

impl ApiServer {
    /// Starts the emulator and returns once it accepts connections.
    ///
    /// # Errors
    /// When the listen address cannot be bound.
    ///
    /// # Cancel safety
    /// Cancel safe: nothing is spawned before the socket is bound.
    pub async fn start(config: ApiServerConfig) -> anyhow::Result<ApiServer> {
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|e| {
                anyhow::anyhow!(
                    "binding the Kubernetes API emulator to {}: {e}",
                    config.listen
                )
            })?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(shared::Shared::new(addr));
        let accept = tokio::spawn(server::serve(listener, Arc::clone(&shared)));
        Ok(ApiServer {
            shared,
            accept: Some(accept),
        })
    }

    /// Base URL, e.g. `http://127.0.0.1:40123`.
    pub fn url(&self) -> String {
        format!("http://{}", self.shared.addr)
    }

    /// Writes a kubeconfig (plain http, a bearer token, the given default namespace) for this emulator.
    ///
    /// # Errors
    /// When the file cannot be written.
    pub fn write_kubeconfig(&self, path: &Path, namespace: &str) -> anyhow::Result<()> {
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: haptic-sandbox\n  cluster:\n    server: {url}\n\
             contexts:\n- name: haptic-sandbox\n  context:\n    cluster: haptic-sandbox\n    user: haptic-sandbox\n    namespace: {namespace}\n\
             current-context: haptic-sandbox\nusers:\n- name: haptic-sandbox\n  user:\n    token: {TOKEN}\npreferences: {{}}\n",
            url = self.url(),
        );
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| anyhow::anyhow!("creating {}: {e}", dir.display()))?;
        }
        std::fs::write(path, text)
            .map_err(|e| anyhow::anyhow!("writing kubeconfig {}: {e}", path.display()))
    }

    /// Adds a fault (same semantics as `POST /_sandbox/faults`, see [`Fault`]).
    ///
    /// # Errors
    /// When the method or path regex does not compile or the fault is invalid (unknown status,
    /// contradictory fields, a fault that would do nothing).
    pub fn add_fault(&self, fault: Fault) -> anyhow::Result<()> {
        self.shared
            .add_fault(fault)
            .map(|_| ())
            .map_err(|e| anyhow::anyhow!("invalid fault: {e}"))
    }

    /// Removes every fault (`DELETE /_sandbox/faults`).
    pub fn clear_faults(&self) {
        self.shared.clear_faults();
    }

    /// Every request seen so far, oldest first, including the ones a fault answered
    /// (`GET /_sandbox/requests`); `/_sandbox/` requests are not logged.
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.shared.requests()
    }

    /// Empties the request log (`DELETE /_sandbox/requests`).
    pub fn clear_requests(&self) {
        self.shared.clear_requests();
    }

    /// Forgets the watch history (`POST /_sandbox/compact`): a watch from any resourceVersion older
    /// than the current one gets the ERROR event with code 410, as after an etcd compaction.
    pub fn compact(&self) {
        if let Ok(mut s) = self.shared.state.lock() {
            s.compact();
        }
    }

    /// The current cluster-wide resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared.state.lock().map(|s| s.rv).unwrap_or(0)
    }

    /// Stops serving; open watch streams end.
    ///
    /// # Cancel safety
    /// Cancelling the wait leaves the server stopped (cancellation happens first).
    pub async fn shutdown(mut self) {
        self.shared.shutdown.cancel();
        if let Some(a) = self.accept.take() {
            let _ = a.await;
        }
        self.shared.tracker.close();
        let _ = tokio::time::timeout(SHUTDOWN_GRACE, self.shared.tracker.wait()).await;
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.shared.shutdown.cancel();
    }
}
