//! Kubernetes side of haptic: the custom resource types and the publisher's writer.
//!
//! - [`crd`]: the custom resources and their CRDs;
//! - [`writer`]: idempotent, term-fenced writes of HAProxyCfg, auxiliary objects, Secrets,
//!   per-pod status and conditions;
//! - [`error`]: [`WriteError`] and its classification;
//! - [`client`]: a kube client with kube's retry layer off;
//! - [`discovery`]: HAProxy pod discovery by label selector;
//! - [`credentials`]: the Dataplane credentials Secret, watched (rotation without a restart);
//! - [`lease`]: leader election on a coordination.k8s.io/v1 Lease, with terms and a fencing guard;
//! - [`events`]: Kubernetes Events (the deployer's `DriftDetected` hook).

pub mod client;
pub mod crd;
pub mod error;
pub mod writer;

pub mod credentials;
pub mod discovery;
pub mod events;
pub mod lease;

pub use error::WriteError;
