//! Kubernetes side of haptic: the custom resource types and the publisher's writer.
//!
//! - [`crd`]: the custom resources and their CRDs;
//! - [`writer`]: idempotent, term-fenced writes of HAProxyCfg, auxiliary objects, Secrets,
//!   per-pod status and conditions;
//! - [`error`]: [`WriteError`] and its classification;
//! - [`client`]: a kube client with kube's retry layer off.
//! Also pod discovery ([`discovery`]) and leader election on a Lease ([`lease`]).

pub mod client;
pub mod crd;
pub mod error;
pub mod writer;

pub use error::WriteError;
pub mod discovery;
pub mod lease;
