//! What a sync does after one execution of its plan ended, as a pure function (the deployer's
//! retry and fallback rules beside [`super::decide::plan`], issue 26). The executor
//! ([`super::sync`]) only reports how the attempt ended and follows the answer.
//!
//! ```text
//!  Attempt::Done ───────────────────────────────► Succeed
//!  Attempt::NotAllLoaded (a reload did not come) ► Replan (bounded by the unloaded passes)
//!  Attempt::Conflict (409/406: the version moved) ► Replan, bounded by max_conflict_retries
//!  Attempt::ReloadUnknown (404, an older reload) ► Replan, same bound (read the pod again)
//!  Attempt::TooManyTransactions (429 at start) ──► CleanupThenReplan once, then FallBack
//!  Attempt::FineGrainedFailed (other failure) ──► FallBack (one raw push)
//!  Attempt::PushRejected (400/422 on a push) ────► Replan once (files synced again), then Fail
//!  Attempt::Failed ──────────────────────────────► Fail
//! ```
//!
//! A failed reload is `Failed`, not `FineGrainedFailed` (issue 27): the configuration reached
//! the pod and HAProxy refused to load it, so the same push at once would fail the same way;
//! the next sync (after the scheduler's backoff) finds the API's configuration and its file
//! apart and pushes raw (`raw_resync`), which is the fallback one backoff step later.
//!
//! Every loop is bounded: a sync that cannot finish fails (retryable) and the scheduler backs
//! off (DESIGN.md J11: work is never acked unfinished, retries back off to a cap).

/// How one execution of a plan ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// Every operation succeeded and every render file is known loaded.
    Done,
    /// Every operation succeeded but a render file is still not known loaded (e.g. a commit
    /// that answered without a reload after `skip_reload` writes).
    NotAllLoaded,
    /// A version-conditional write answered 409, or a commit 406: the version moved.
    Conflict,
    /// The reload a write scheduled cannot be confirmed: the API does not know its id (404),
    /// or the answer is older than the write.
    ReloadUnknown,
    /// The API refused to open a transaction (429: too many open).
    TooManyTransactions,
    /// A fine-grained step failed otherwise (the transaction was aborted).
    FineGrainedFailed,
    /// The configuration push was rejected (400/422).
    PushRejected,
    /// Anything else (transport, 5xx on a file write or a push, a failed reload, the Lease).
    Failed,
}

/// What the executor does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Report success.
    Succeed,
    /// Read the pod again and plan again.
    Replan,
    /// Delete the transactions listed on the pod, then read and plan again.
    CleanupThenReplan,
    /// One raw push of the render at the version read again ([`haptic_journal::SyncMode::RawFallback`]).
    FallBack,
    /// Report the attempt's failure.
    Fail,
}

/// The counts [`next_step`] keeps across the attempts of one sync.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Attempts {
    /// Conflicts and unknown reloads planned again.
    pub conflicts: u32,
    /// Passes planned again because a file was still not loaded.
    pub unloaded: u32,
    /// Whether the pod's transactions were deleted after a 429.
    pub cleaned: bool,
    /// Whether a rejected push was followed by one more pass.
    pub resynced: bool,
}

/// Passes planned again for files still not loaded after an attempt that succeeded.
pub const MAX_UNLOADED_PASSES: u32 = 2;

/// The next step after `attempt` (module doc); `max_conflict_retries` bounds conflicts and
/// unknown reloads together.
#[must_use]
pub fn next_step(attempt: Attempt, counts: &mut Attempts, max_conflict_retries: u32) -> Next {
    match attempt {
        Attempt::Done => Next::Succeed,
        Attempt::NotAllLoaded if counts.unloaded < MAX_UNLOADED_PASSES => {
            counts.unloaded += 1;
            Next::Replan
        }
        Attempt::Conflict | Attempt::ReloadUnknown if counts.conflicts < max_conflict_retries => {
            counts.conflicts += 1;
            Next::Replan
        }
        Attempt::TooManyTransactions if !counts.cleaned => {
            counts.cleaned = true;
            Next::CleanupThenReplan
        }
        Attempt::TooManyTransactions | Attempt::FineGrainedFailed => Next::FallBack,
        Attempt::PushRejected if !counts.resynced => {
            counts.resynced = true;
            Next::Replan
        }
        Attempt::NotAllLoaded
        | Attempt::Conflict
        | Attempt::ReloadUnknown
        | Attempt::PushRejected
        | Attempt::Failed => Next::Fail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_loop_is_bounded() {
        let table: &[(Attempt, &[Next])] = &[
            (Attempt::Done, &[Next::Succeed]),
            (Attempt::Failed, &[Next::Fail]),
            (
                Attempt::FineGrainedFailed,
                &[Next::FallBack, Next::FallBack],
            ),
            (
                Attempt::Conflict,
                &[Next::Replan, Next::Replan, Next::Replan, Next::Fail],
            ),
            (
                Attempt::ReloadUnknown,
                &[Next::Replan, Next::Replan, Next::Replan, Next::Fail],
            ),
            (
                Attempt::TooManyTransactions,
                &[Next::CleanupThenReplan, Next::FallBack],
            ),
            (Attempt::PushRejected, &[Next::Replan, Next::Fail]),
            (
                Attempt::NotAllLoaded,
                &[Next::Replan, Next::Replan, Next::Fail],
            ),
        ];
        for (attempt, want) in table {
            let mut counts = Attempts::default();
            let got: Vec<Next> = want
                .iter()
                .map(|_| next_step(*attempt, &mut counts, 3))
                .collect();
            assert_eq!(&got, want, "{attempt:?}");
        }
    }

    #[test]
    fn conflicts_and_unknown_reloads_share_one_bound() {
        let mut counts = Attempts::default();
        assert_eq!(next_step(Attempt::Conflict, &mut counts, 2), Next::Replan);
        assert_eq!(
            next_step(Attempt::ReloadUnknown, &mut counts, 2),
            Next::Replan
        );
        assert_eq!(next_step(Attempt::Conflict, &mut counts, 2), Next::Fail);
    }
}
