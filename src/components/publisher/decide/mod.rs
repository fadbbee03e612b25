//! The publisher's pure core (STYLE.md 2.2): no I/O, no clock (time is passed in). The shells
//! and [`crate::k8s::writer`] only read and write; every rule is here, with table tests in
//! `publisher/tests.rs`.
//!
//! - [`router`]: which journal work an accepted event becomes, and the router state it folds
//!   (identity, render order, known pods, pods owed a status removal, the gate's latch): the
//!   publisher's checkpoint.
//! - [`pick`]: the coalescing pick of the publish worker, "the spec never moves backwards",
//!   when a newer render supersedes a retry.
//! - [`status`]: the park rule, the per-pod status merge, a status round over a HAProxyCfg and
//!   its auxiliary objects, and the conditions.
//! - [`choice`]: what one publication does before it writes (nothing, skip, defer, ack an
//!   older item, write).
//! - [`retry`]: the retry rule by error class (never an ack of unfinished work) and the
//!   throttle.
//! - [`heal`]: what self-healing remembers of a term's publications, and which watch events
//!   are outside edits.
//! - [`rollback`]: which reads of the rollback annotation are requests to journal.

pub mod choice;
pub mod heal;
pub mod pick;
pub mod retry;
pub mod rollback;
pub mod router;
pub mod status;

pub use choice::{Choice, Facts, Live, choose};
pub use heal::{HEAL_HISTORY, ObjectKey, Objects, Seen, TermCache, outside_edit};
pub use pick::{Pick, Publication, Queued, pick_publication, publication, superseded};
pub use retry::{Retry, RetryPolicy, on_failure, throttle_wait};
pub use rollback::rollback_requested;
pub use router::{
    Effect, GONE_REMEMBERED, Input, Place, RENDERS_REMEMBERED, RouterState, UNPLACED_RENDER_SEQ,
    render_of, retry_requested, route,
};
pub use status::{
    AuxChange, PodChange, PodOutcome, StatusRound, aux_round, failure_condition,
    merge_aux_pod_entry, merge_pod_entry, park_rule, published_condition, status_round,
    too_large_message, too_large_render, verdict_conditions, within_size_limit_condition,
};
