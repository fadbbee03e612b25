//! Integration tests of the root crate, one binary (STYLE.md 2.7).
//!
//! - `architecture`: `src/core/` stays pure;
//! - `checksum`: the journal's checksum functions keep DESIGN.md's contract;
//! - `corpus`: checksums, names and compression over `tests/corpus/renders/`;
//! - `crash_matrix`: every crash point and seeded SIGKILLs against the real binary, restarted on
//!   the same journal (issue 13; feature `failpoints`);
//! - `crds`: `deploy/crds/` is up to date, `haptic crds` prints it, the schemas accept our objects;
//! - `publisher`: the config publisher against the Kubernetes API emulator;
//! - `dataplane`: the Dataplane API client against the sandbox's documented-answers endpoint
//!   (answers as ecosystem.md A documents);
//! - `deployer`, `e2e`, `runtime`, `telemetry`: the components, the binary and the runtime against
//!   fleets of the test kit (`haptic-testkit`);
//! - `manifests`: the CRDs and `deploy/` on an API server (`kubectl get`, status read-back,
//!   `kubectl apply --server-side`);
//! - `peers`: the stop-gap helm + kube-apiserver harness of the chart test (issue 16);
//! - `real_peers`: the e2e scenarios and the API-server checks on the real kube-apiserver and etcd
//!   (`tests/peers/build.sh`), the controller on deploy/'s Role; the chart applied to a real API
//!   server (`cargo test ... real_peers` selects them).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod architecture;
mod checksum;
mod corpus;
mod crash_matrix;
mod crds;
mod dataplane;
mod deployer;
mod disk_faults;
mod e2e;
mod manifests;
mod peers;
mod publisher;
mod real_peers;
mod restart_equivalence;
mod runtime;
mod telemetry;
