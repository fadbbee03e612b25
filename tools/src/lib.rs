//! haptic's tools: the sandbox peers (a Kubernetes API emulator and HAProxy pods with a Dataplane
//! API v3 subset) used by tests, the demo and `haptic-sandbox`; where the real peers and the
//! pinned `kubectl` are ([`peers`]); `haptic-journalctl` lives in `src/bin/` and uses only the
//! journal and migrations crates.

pub mod peers;
pub mod sandbox;
