//! Dataplane API values the journal does not define (STYLE.md 2.5).
//!
//! `ConfigVersion` and `ReloadId` are the journal's ([`haptic_journal::ConfigVersion`],
//! [`haptic_journal::ReloadId`]): its events and work items carry them.

use serde::{Deserialize, Serialize};

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
