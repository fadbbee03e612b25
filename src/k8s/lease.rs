//! Leader election (placeholder).
