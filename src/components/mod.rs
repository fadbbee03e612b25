//! The controller's components, one module each (STYLE.md 2.2).

pub mod publisher;
