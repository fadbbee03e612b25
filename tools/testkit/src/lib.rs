//! `haptic-testkit`: the one way every integration test, benchmark and the demo start the peers
//! and the controller (issue 17).
//!
//! ```text
//!  Peers (HAPTIC_TEST_PEERS=emulator|real) ─► Fleet::start(FleetConfig { pods, namespace, .. })
//!        Emulator: the sandbox (API emulator + HAProxy pods, faults API, request logs)
//!        Real:     etcd + kube-apiserver (RBAC, admission, audit log), the sandbox's pods
//!                  registered through the admin (issue 18; no dataplaneapi: see crate::real)
//!  Fleet ─► kubeconfig / namespace / client / pods (Pod: product Dataplane client, reload
//!           count, Faults) / api_faults / api_requests / hpcfg / lease_holder / pods_answer
//!  Fleet::controller(ControllerOpts) ─► Controller (child process, log file, stop / kill / wait)
//!  render::feed / write_render ─► render directory (folders first, haproxy.cfg renamed last)
//!  eventually(bound, what, probe) ─► value, or a panic naming what was last seen
//!        (Fleet::eventually / Controller::eventually add the controllers' log tails)
//! ```
//!
//! Invariants: a fleet's request logs start empty (set-up requests are cleared); nothing here
//! talks to anything but loopback and the sandbox's own network namespaces; the only Dataplane
//! client is the product's (`haptic::dataplane`). Bounds of waits derive from the intervals the
//! controller was given ([`Intervals`]), not from round numbers.

#![warn(missing_docs)]
// A test kit: a failed set-up step is a failed test, so its functions panic (each says so
// under `# Panics`) rather than hand every caller an error to unwrap.
#![allow(clippy::expect_used, clippy::unwrap_used)]

pub mod controller;
pub mod fleet;
pub mod peers;
pub mod pod;
pub mod real;
pub mod render;
pub mod wait;

pub use controller::{Controller, ControllerOpts, Intervals};
pub use fleet::Fleet;
pub use haptic_tools::sandbox::control::RequestRecord;
pub use peers::{FleetConfig, PEERS_ENV, PeerError, Peers, Target};
pub use pod::{Faults, Pod, http};
pub use wait::{Probe, eventually, log_tail};

use haptic::dispatch::DispatchHandle;
use haptic::k8s::crd::HAProxyCfg;
use haptic_journal::{
    Batch, Checksum, DeployRequest, InFlightDeployment, Origin, Term, UnixMillis, WorkId, WorkItem,
};

/// A condition's `status` on `cfg` (`None` when absent).
#[must_use]
pub fn condition<'a>(cfg: &'a HAProxyCfg, type_: &str) -> Option<&'a str> {
    cfg.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.as_str())
}

/// The state of a published HAProxyCfg as tests compare it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    /// `spec.checksum`.
    pub spec: Checksum,
    /// Conditions as `Type=Status`, sorted.
    pub conditions: Vec<String>,
    /// `status.deployedToPods` as (pod, checksum or ""), sorted.
    pub pods: Vec<(String, String)>,
}

impl Published {
    /// The summary of `cfg`.
    #[must_use]
    pub fn of(cfg: &HAProxyCfg) -> Published {
        let status = cfg.status.clone().unwrap_or_default();
        let mut conditions: Vec<String> = status
            .conditions
            .iter()
            .map(|c| format!("{}={}", c.type_, c.status))
            .collect();
        conditions.sort();
        let mut pods: Vec<(String, String)> = status
            .deployed_to_pods
            .iter()
            .map(|p| {
                (
                    p.pod_name.clone(),
                    p.checksum.map(|c| c.to_string()).unwrap_or_default(),
                )
            })
            .collect();
        pods.sort();
        Published {
            spec: cfg.spec.checksum,
            conditions,
            pods,
        }
    }

    /// Whether the condition `type_` has `status` (`ConfigPinned`, `"True"`).
    #[must_use]
    pub fn has(&self, type_: &str, status: &str) -> bool {
        self.conditions.contains(&format!("{type_}={status}"))
    }

    /// Whether `spec` is `render` and `pods` pods, all of them, are on it.
    #[must_use]
    pub fn on(&self, render: &Checksum, pods: usize) -> bool {
        let want = render.to_string();
        self.spec == *render && self.pods.len() == pods && self.pods.iter().all(|(_, c)| *c == want)
    }
}

/// Enqueues the in-flight slot of `request` into `b`, as the scheduler writes it (it holds the
/// render until the deployment's run acks it), and accepts the batch; returns the slot's work id.
///
/// # Errors
/// The journal refuses the batch, or it enqueued no work item.
pub async fn accept_inflight(
    dispatch: &DispatchHandle,
    mut b: Batch,
    request: &DeployRequest,
) -> anyhow::Result<WorkId> {
    b.enqueue(
        WorkItem::DeployInflight(InFlightDeployment {
            request: request.clone(),
            started_at: UnixMillis::now(),
            term: Term(0),
        }),
        Origin::None,
    );
    let accepted = dispatch.accept(b).await?;
    let Some(&inflight) = accepted.work_ids().first() else {
        anyhow::bail!("the in-flight slot was not enqueued");
    };
    Ok(inflight)
}
