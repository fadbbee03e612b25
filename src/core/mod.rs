//! Pure decision code: types and functions with no I/O, no async, no clock and no randomness.
//!
//! Everything here is deterministic so that the components' `decide` functions and the
//! publisher can be tested table-driven and with proptest. The architecture test
//! (`tests/integration/architecture.rs`) fails when a file under `src/core/` mentions
//! `tokio`, `reqwest`, `kube::Api`, `redb`, `Instant::now`, `SystemTime::now` or `rand`.
//!
//! Identities shared with the journal are the journal's own types, not copies:
//! [`haptic_journal::Checksum`] (render checksums via [`haptic_journal::render_checksum`],
//! single files via [`haptic_journal::Checksum::of`]), [`haptic_journal::AuxKind`],
//! [`haptic_journal::ConfigVersion`] and [`haptic_journal::ReloadId`].

pub mod compression;
pub mod error;
pub mod guard;
pub mod health;
pub mod ids;
pub mod naming;
pub mod render;
pub mod text;
pub mod version;

pub use error::ErrorKind;
pub use ids::ReloadStatus;
