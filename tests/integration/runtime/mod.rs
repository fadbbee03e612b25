//! The input side of the controller runtime (issue 6): validation with the real `haproxy -c`,
//! render sources, pod discovery, the Lease, and the deploy manifests.

mod dir_source;
mod validate;
