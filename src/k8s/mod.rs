//! Kubernetes side of haptic: the custom resource types the publisher writes.
//!
//! Watchers, the publisher's writers and the Lease come in later issues.

pub mod crd;
