//! Newtypes for the Dataplane API's identifiers (STYLE.md 2.5).
//!
//! They live in `core` (not in `dataplane`) because the pure deployer code reasons about
//! them without touching the HTTP client.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The Dataplane API configuration version: the `version` query parameter and the
/// `Configuration-Version` response header (ecosystem.md A.1).
///
/// An optimistic-concurrency guard: a push at version N succeeds only while the file is at N
/// and moves it to N+1. Range: positive in practice; the API reports `0`/`-1` on no file.
/// The version alone does not identify content (it can be reused after a failed reload,
/// ecosystem.md A.3): compare content too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ConfigVersion(pub i64);

impl ConfigVersion {
    /// The version as the API's integer.
    pub fn get(self) -> i64 {
        self.0
    }
}

impl fmt::Display for ConfigVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A reload identifier from the `Reload-ID` header, e.g. `2026-11-30-3` (ecosystem.md A.3).
///
/// The counter restarts with the Dataplane API process, so an ID is only meaningful for the
/// process that issued it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ReloadId(pub String);

impl ReloadId {
    /// The ID as sent by the API.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ReloadId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// State of a reload as `GET /v3/services/haproxy/reloads/{id}` reports it (ecosystem.md A.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReloadStatus {
    /// Scheduled or running (`in_progress`).
    InProgress,
    /// HAProxy reloaded with the new file (`succeeded`).
    Succeeded,
    /// The reload failed; the pod runs its last-known-good file (`failed`).
    Failed,
}
