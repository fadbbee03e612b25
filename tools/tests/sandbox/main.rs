//! Tests of the sandbox peers themselves (one test binary for all of them).

mod apiserver;
mod pods;
mod spec;
