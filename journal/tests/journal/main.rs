//! Integration tests of `haptic-journal` (one binary, submodules per concern).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod basic;
mod checkpoints;
mod compaction;
mod corruption;
mod crash;
mod damage;
mod disk_fault;
#[cfg(feature = "failpoints")]
mod failpoints;
pub mod fixtures;
mod group_commit;
mod history;
mod hot_path;
mod lost_writes;
mod model;
mod module_graph;
mod page_damage;
