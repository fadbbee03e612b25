//! The heal cache: the publisher's only lock. One [`TermCache`] per term, written by the
//! publish worker (what it writes and wrote) and by the heal watch of the main HAProxyCfg (the
//! status it saw), read by every heal watch (is an event an outside edit?) and by a repeat's
//! status restore. It is a `std::sync::Mutex` taken only inside [`HealCache::with`], whose
//! closure is synchronous: the guard is never held across an await, and nothing under it reads
//! the journal or the cluster (this file names neither; the architecture test checks it).

use std::sync::{Mutex, PoisonError};

use crate::components::publisher::decide::TermCache;

/// One term's [`TermCache`] behind the lock (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct HealCache(Mutex<TermCache>);

impl HealCache {
    /// Runs `f` on the cache (a poisoned lock only means a task panicked mid-update; the cache
    /// is still a valid memory of writes, at worst one heal too many).
    pub(super) fn with<R>(&self, f: impl FnOnce(&mut TermCache) -> R) -> R {
        f(&mut self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Forgets everything (a lost leadership: what the heal watch expects).
    pub(super) fn clear(&self) {
        self.with(|c| *c = TermCache::default());
    }
}
