//! Sandbox pod and Dataplane endpoint tests.
