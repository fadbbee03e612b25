//! haptic-migrations tests (one binary): the committed schema-1 fixture, `SchemaTooNew`, and
//! (feature `test-v2`) a test-only v1 -> v2 step with a crash in the middle.
//!
//! Regenerate the fixture (only when schema 1 changes before `v0.1.0`, DESIGN.md J8):
//! `cargo test -p haptic-migrations --test migrations -- --ignored regenerate_v1_fixture`

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fixture;
mod fixture_v1;
#[cfg(feature = "test-v2")]
mod test_v2;

use std::path::{Path, PathBuf};

/// The committed fixture.
pub fn fixture_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/v1.redb")
}

/// A private copy of the fixture (tests never open the committed file read-write).
pub fn fixture_copy() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v1.redb");
    std::fs::copy(fixture_path(), &path).unwrap();
    (dir, path)
}
