//! Liveness of a component's handler, shared by every component and read by `/healthz`.

/// Stall check shared by the components: a handler running longer than this is unhealthy.
pub const STALL_AFTER: std::time::Duration = std::time::Duration::from_secs(120);

/// Liveness of one component's handler: idle is healthy, a handler running longer than
/// [`STALL_AFTER`] is not. The clock is the caller's (`now_ms`: unix milliseconds).
#[derive(Debug, Default)]
pub struct Health {
    /// Unix ms when the current handler started; 0 when idle.
    busy_since_ms: std::sync::atomic::AtomicU64,
}

impl Health {
    /// Marks a handler started at `now_ms`.
    pub fn begin(&self, now_ms: u64) {
        self.busy_since_ms
            .store(now_ms.max(1), std::sync::atomic::Ordering::Relaxed);
    }

    /// Marks the handler finished.
    pub fn end(&self) {
        self.busy_since_ms
            .store(0, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether a handler has been running longer than [`STALL_AFTER`] at `now_ms`.
    #[must_use]
    pub fn stalled(&self, now_ms: u64) -> bool {
        let since = self
            .busy_since_ms
            .load(std::sync::atomic::Ordering::Relaxed);
        since != 0 && now_ms.saturating_sub(since) > STALL_AFTER.as_millis() as u64
    }
}
