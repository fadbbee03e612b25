//! The controller's components, one module each (STYLE.md 2.2): a pure `decide` core plus a thin
//! async shell that journals, then acts.
//!
//! - [`scheduler`]: `deployment-scheduler`, when deployments happen;
//! - [`deployer`]: `deployer`, the executor that talks to each pod's Dataplane API;
//! - [`drift`]: `drift-monitor`, periodic drift checks;
//! - [`publisher`]: `config-publisher`, the custom resources, Secrets and per-pod status;
//! - [`validator`]: `validator`, `haproxy -c` on every journaled render (every replica).

pub mod deployer;
pub mod drift;
pub mod publisher;
pub mod scheduler;
pub mod validator;
