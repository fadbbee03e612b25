//! Kubernetes side of haptic: the custom resource types the publisher writes.
//!
//! Also pod discovery ([`discovery`]) and leader election on a Lease ([`lease`]).

pub mod crd;
pub mod discovery;
pub mod lease;
