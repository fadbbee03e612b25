//! haptic's tools: the sandbox peers (a Kubernetes API emulator and HAProxy pods with a Dataplane
//! API v3 subset) used by tests, the demo and `haptic-sandbox`; `haptic-journalctl` lives in
//! `src/bin/` and uses only the journal and migrations crates.

pub mod sandbox;
