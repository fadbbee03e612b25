//! Directory source (placeholder).
