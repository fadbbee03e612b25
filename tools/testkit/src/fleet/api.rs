//! The fleet's API server: its request log (the emulator's, or the real API server's audit
//! log), its faults, and the objects tests read (the HAProxyCfg, the Lease).

use haptic::k8s::crd::HAProxyCfg;
use haptic_tools::sandbox::apiserver::ApiServer;
use haptic_tools::sandbox::control::RequestRecord;
use kube::Api;

use super::Fleet;
use crate::peers::PeerError;
use crate::pod::Faults;
use crate::real::audit::AuditEvent;

impl Fleet {
    /// Every request the real API server audited since set-up (or the last clear), with the
    /// authenticated user and the authorizer's decision and reason.
    ///
    /// # Errors
    /// [`PeerError::Unsupported`] on the emulator (it has no authorizer: use
    /// [`Fleet::api_requests`]); [`PeerError::Control`] when the log cannot be read.
    pub fn audit(&self) -> Result<Vec<AuditEvent>, PeerError> {
        let real = self.real.as_ref().ok_or_else(|| PeerError::Unsupported {
            peer: "the API emulator".into(),
            what: "audit log",
        })?;
        real.audit().map_err(|e| PeerError::Control {
            what: format!("reading {}", real.api.audit_log.display()),
            message: format!("{e:#}"),
        })
    }

    fn api(&self, what: &'static str) -> Result<&ApiServer, PeerError> {
        self.emulator().ok_or_else(|| PeerError::Unsupported {
            peer: "the API server".into(),
            what,
        })
    }

    /// Every request the API server logged since set-up (or the last clear), oldest first: the
    /// emulator's request log, or the real API server's audit log ([`Fleet::audit`]) in the same
    /// form (the method derived from the verb; the API server's own requests left out).
    ///
    /// # Errors
    /// [`PeerError::Control`] when the real API server's audit log cannot be read.
    pub fn api_requests(&self) -> Result<Vec<RequestRecord>, PeerError> {
        if self.real.is_some() {
            return Ok(self.audit()?.iter().map(AuditEvent::record).collect());
        }
        Ok(self.api("request log")?.requests())
    }

    /// Empties the API server's request log (on real peers: the audit log is read from here on).
    ///
    /// # Errors
    /// None today; kept for peers that may lack a log.
    pub fn clear_api_requests(&self) -> Result<(), PeerError> {
        if let Some(r) = &self.real {
            r.clear_audit();
            return Ok(());
        }
        self.api("request log")?.clear_requests();
        Ok(())
    }

    /// The API server's faults API (`/_sandbox/faults` over HTTP, as a test would use it); on
    /// real peers every call answers [`PeerError::Unsupported`].
    #[must_use]
    pub fn api_faults(&self) -> Faults {
        Faults {
            peer: "the API server".into(),
            base: self.emulator().map(ApiServer::url),
        }
    }

    /// The HAProxyCfg `name` in the fleet's namespace, if it exists (read errors count as
    /// absent).
    ///
    /// # Cancel safety
    /// Cancel safe (a read).
    pub async fn hpcfg(&self, name: &str) -> Option<HAProxyCfg> {
        Api::<HAProxyCfg>::namespaced(self.client(), &self.namespace)
            .get_opt(name)
            .await
            .unwrap_or(None)
    }

    /// The holder of the Lease `lease`, when one holds it.
    ///
    /// # Cancel safety
    /// Cancel safe (a read).
    pub async fn lease_holder(&self, lease: &str) -> Option<String> {
        Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(self.client(), &self.namespace)
            .get_opt(lease)
            .await
            .ok()
            .flatten()
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
            .filter(|h| !h.is_empty())
    }
}
