//! The publish worker's rules: which queued publication goes next (the coalescing pick), what a
//! publication does to the spec and the published checkpoint ("the spec never moves backwards in
//! render sequence", DESIGN.md section 1), and when a newer render supersedes a retry.

use haptic_journal::{Checksum, Seq, WorkId};

/// A queued publication as the pick sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Queued {
    /// The item's id (arrival order across both queues).
    pub id: WorkId,
    /// Its render's place in render order.
    pub render_seq: Seq,
}

/// Which item the publish worker takes next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pick {
    /// The validation-driven item at this index of the `publish` queue; the items at
    /// `superseded` (every other validation-driven item) are acked with it.
    Validated {
        /// Index in the validated queue.
        index: usize,
        /// Indexes of the older validation-driven items it coalesces.
        superseded: Vec<usize>,
    },
    /// The deploy-driven item at this index of the `publish-deployed` queue (alone: deploy
    /// work keeps arrival order and never supersedes validation work).
    Deployed {
        /// Index in the deployed queue.
        index: usize,
    },
}

/// The coalescing pick over both queues (each in queue order): validation work coalesces to the
/// newest render (highest `render_seq`, then newest id); deploy work keeps arrival order (the
/// oldest first); between the two, the one that arrived first goes. `None`: nothing queued.
#[must_use]
pub fn pick_publication(validated: &[Queued], deployed: &[Queued]) -> Option<Pick> {
    let newest_v = validated
        .iter()
        .enumerate()
        .max_by_key(|(_, q)| (q.render_seq, q.id))
        .map(|(i, q)| (i, *q));
    let oldest_d = deployed.first().copied();
    let validated_pick = |index: usize| Pick::Validated {
        index,
        superseded: (0..validated.len()).filter(|i| *i != index).collect(),
    };
    match (newest_v, oldest_d) {
        (Some((_, v)), Some(d)) if d.id < v.id => Some(Pick::Deployed { index: 0 }),
        (Some((i, _)), _) => Some(validated_pick(i)),
        (None, Some(_)) => Some(Pick::Deployed { index: 0 }),
        (None, None) => None,
    }
}

/// What publishing a render does, given the published checkpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Publication {
    /// Older than the published render: the spec is left as it is, the item acked (per-pod
    /// status still goes its own way).
    Older,
    /// The published render again (self-healing, a term start, a deploy-driven repeat):
    /// written idempotently; the checkpoint does not move and no `config.published` is emitted.
    Repeat,
    /// A new render at or after the published one: written, then the checkpoint moves to it
    /// and `config.published` is emitted, in the ack's commit.
    Advance,
}

/// The spec never moves backwards in render sequence: `render` at `render_seq` against the
/// published checkpoint `(render, render_seq)`, if any.
#[must_use]
pub fn publication(
    render: Checksum,
    render_seq: Seq,
    checkpoint: Option<(Checksum, Seq)>,
) -> Publication {
    match checkpoint {
        None => Publication::Advance,
        Some((c, _)) if c == render => Publication::Repeat,
        Some((_, s)) if render_seq < s => Publication::Older,
        Some(_) => Publication::Advance,
    }
}

/// Whether a validation-driven retry of `mine` is superseded by a newer validation generation
/// in `validated` (another item at or after its render order): the retry yields to it.
#[must_use]
pub fn superseded(mine: Queued, validated: &[Queued]) -> bool {
    validated
        .iter()
        .any(|q| q.id != mine.id && q.render_seq >= mine.render_seq)
}
