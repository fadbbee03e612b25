//! Against the real peers (DESIGN.md section 5). Select with
//! `cargo test --workspace --all-features real_peers`. A missing peer binary fails (never
//! skips): tests/peers/build.sh builds them.
//!
//! - `chart`: `deploy/` and the Helm chart applied server-side to a real kube-apiserver.

mod chart;
