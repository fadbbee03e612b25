//! The input side of the controller runtime (issue 6): validation with the real `haproxy -c`,
//! render sources, pod discovery, the Lease, and the deploy manifests.

mod configmap_source;
mod deploy;
mod dir_source;
mod discovery;
pub(crate) mod helm;
mod ingest;
mod lease;
mod validate;

use haptic_testkit::{Fleet, FleetConfig};

/// The namespace the emulator tests use.
pub const NS: &str = "haptic-test";

/// A fleet of the API server only (no pods, no CRDs), objects in [`NS`].
pub async fn api_server() -> Fleet {
    Fleet::start(FleetConfig::api_only(NS).without_crds()).await
}

/// Forgets the emulator's watch history (older watches get 410) and ends the next open watch
/// on `path`: the client must relist.
pub fn force_relist(emu: &Fleet, path: &str) {
    let api = emu.emulator().unwrap();
    api.compact();
    api.add_fault(haptic_tools::sandbox::apiserver::Fault {
        path: path.into(),
        end_watch: true,
        times: Some(1),
        ..Default::default()
    })
    .unwrap();
}
