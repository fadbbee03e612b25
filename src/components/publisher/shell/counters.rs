//! The publisher's counters (tests, benchmarks, metrics): atomics, moved by the workers.

use std::sync::atomic::AtomicU64;

use super::failures::Worker;

/// Counters for tests, benchmarks and metrics.
#[derive(Debug, Default)]
pub struct Counters {
    /// Complete publications of the main HAProxyCfg (including idempotent repeats).
    pub publications: AtomicU64,
    /// ConfigPublished events journaled.
    pub config_published: AtomicU64,
    /// Failed attempts that were retried (every worker).
    pub retries: AtomicU64,
    /// Failed attempts that were retried, per worker.
    pub worker_retries: WorkerRetries,
    /// Failed attempts that need an operator (401, 403, a missing resource type): retried,
    /// and shown (warn naming the fix; `Published=False` for the publish worker).
    pub blocked: AtomicU64,
    /// Items ended by a permanent rejection (400, 413, 422, a too-large 5xx, content not in
    /// the journal): recorded, shown (warn, a Kubernetes Event, `Published=False` for the
    /// publish worker), then acked. Never a transient failure, however long it lasts.
    pub given_up: AtomicU64,
    /// Self-healing republications.
    pub heals: AtomicU64,
    /// Status write rounds (one per HAProxyCfg per round with something to write).
    pub status_rounds: AtomicU64,
}

/// Failed attempts retried, per worker ([`Worker`]).
#[derive(Debug, Default)]
pub struct WorkerRetries {
    /// Publish worker (main HAProxyCfg, auxiliary objects, Secrets).
    pub publish: AtomicU64,
    /// Invalid worker (`-invalid` HAProxyCfg).
    pub invalid: AtomicU64,
    /// Verdict worker (ConfigValidated / ConfigPinned, `-invalid` deletion).
    pub verdict: AtomicU64,
    /// Status worker (per-pod status).
    pub status: AtomicU64,
}

impl WorkerRetries {
    /// The counter of `worker`.
    #[must_use]
    pub fn of(&self, worker: Worker) -> &AtomicU64 {
        match worker {
            Worker::Publish => &self.publish,
            Worker::Invalid => &self.invalid,
            Worker::Verdict => &self.verdict,
            Worker::Status => &self.status,
        }
    }
}
