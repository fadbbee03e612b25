//! ConfigMap source (placeholder).
