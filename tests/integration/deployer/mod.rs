//! The deployer (scheduler + executor + drift monitor + dispatcher) against the sandbox:
//! 3 real HAProxy pods behind Dataplane API endpoints, the render corpus, scripted faults,
//! drift and a restart. Bounded waits only; no timed assertions.

mod corpus;
mod drain;
mod drift;
pub mod drift_event;
mod failover;
mod faults;
mod fine_grained;
pub(crate) mod harness;
mod history;
mod one_reload;
mod order;
mod parallel;
pub mod plan;
mod pod_truth;
mod quarantine;
mod reload_ids;
mod render_stream;
mod restart;
mod resume;
mod timeout;
mod transactions;
pub(crate) mod truth_kit;
