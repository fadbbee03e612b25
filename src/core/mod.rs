//! Pure decision code: types and functions with no I/O, no async, no clock and no randomness.
//!
//! Everything here is deterministic so that the components' `decide` functions and the
//! publisher can be tested table-driven and with proptest. The architecture test
//! (`tests/integration/architecture.rs`) fails when a file under `src/core/` mentions
//! `tokio`, `reqwest`, `kube::Api`, `redb`, `Instant::now`, `SystemTime::now` or `rand`.

pub mod checksum;
pub mod compression;
pub mod error;
pub mod ids;
pub mod naming;

pub use checksum::{AuxFile, Checksum, ChecksumParseError};
pub use error::ErrorKind;
pub use ids::{ConfigVersion, ReloadId, ReloadStatus};
