//! HAProxy sandbox pods with Dataplane API v3 endpoints (being built).
