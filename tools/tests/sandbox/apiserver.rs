//! Kubernetes API emulator tests.
