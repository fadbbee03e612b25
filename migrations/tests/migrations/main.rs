//! haptic-migrations tests (one binary): the committed fixtures (`fixtures/v1.redb`, schema 1,
//! migrated by `v1_to_v2`, `v2_to_v3` then `v3_to_v4`; `fixtures/v2.redb`, schema 2, migrated
//! by `v2_to_v3` then `v3_to_v4`; `fixtures/v3.redb`, schema 3, migrated by `v3_to_v4`;
//! `fixtures/v4.redb`, schema 4), `SchemaTooNew`, and (feature `test-v5`) a test-only v4 -> v5
//! step after the real chain with a crash in its middle.
//!
//! Regenerate the v4 fixture (only when schema 4 changes before it is released, DESIGN.md J8):
//! `cargo test -p haptic-migrations --test migrations -- --ignored regenerate_v4_fixture`.
//! The v1, v2 and v3 fixtures are frozen: this code writes schema 4 and cannot write them
//! again.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fixture;
mod fixture_history;
mod fixture_pod;
mod fixture_v1;
mod fixture_v2;
mod fixture_v3;
mod fixture_v4;
mod frozen;
mod shared;
#[cfg(feature = "test-v5")]
mod test_v5;

use std::path::{Path, PathBuf};

use fixture::Fixture;

/// A committed fixture.
pub fn fixture_path(f: Fixture) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(f.file_name())
}

/// A private copy of a fixture (tests never open the committed files read-write).
pub fn fixture_copy(f: Fixture) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(f.file_name());
    std::fs::copy(fixture_path(f), &path).unwrap();
    (dir, path)
}
