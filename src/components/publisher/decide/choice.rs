//! The publication choice: what one publication of the main HAProxyCfg does before it writes
//! (nothing to do, skip, defer, ack an older item, or write), from what the publish worker
//! read: the queued item (or none: a repeat of the last complete publication, at term start or
//! for self-healing), the published checkpoint, and for a repeat the main HAProxyCfg as the
//! cluster holds it. Pure; table tests in `publisher/tests.rs`.
//!
//! Rules: the spec never moves backwards in render sequence ([`super::publication`]); a repeat
//! never rolls back another leader's work (a render stamped by another term stays) and yields
//! to a queued publication of the render the spec already holds (it completes that render; the
//! repeat runs after it).

use haptic_journal::{Checksum, Seq};

use super::pick::{Publication, publication};

/// The main HAProxyCfg as a repeat read it from the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Live {
    /// Its `spec.checksum`.
    pub checksum: Checksum,
    /// Whether it is stamped with the publishing term (annotation
    /// `haproxy-haptic.org/leader-term`).
    pub ours: bool,
    /// Whether a publication of the render it holds is queued (validation- or deploy-driven).
    pub queued: bool,
}

/// What the publish worker read before one publication.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Facts {
    /// The queued item's render and its place in render order; `None`: a repeat of the
    /// published checkpoint.
    pub item: Option<(Checksum, Seq)>,
    /// The published checkpoint: its render and place in render order.
    pub checkpoint: Option<(Checksum, Seq)>,
    /// For a repeat: the main HAProxyCfg as read (`None`: absent, the read failed, or not a
    /// repeat).
    pub live: Option<Live>,
}

/// What one publication does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    /// A repeat with no complete publication to repeat: done.
    Nothing,
    /// A repeat while the cluster holds another render stamped by another term (a
    /// successor's or a predecessor's work is not rolled back): left as it is, done.
    Skip,
    /// A repeat while the spec holds a render whose publication is queued: that publication
    /// completes it; the repeat runs after it (not done).
    Defer,
    /// A queued item older than the published render: acked, the spec left as it is (per-pod
    /// status still goes its own way).
    AckOlder,
    /// Write `render`; `moves` says what the ack does to the published checkpoint.
    Write {
        /// The render written.
        render: Checksum,
        /// Its place in render order.
        render_seq: Seq,
        /// Advance (the checkpoint moves, `config.published`) or Repeat (it stays).
        moves: Publication,
    },
}

/// The choice for `facts` (see the module docs for the rules).
#[must_use]
pub fn choose(facts: &Facts) -> Choice {
    let (render, render_seq) = match (facts.item, facts.checkpoint) {
        (Some(item), _) => item,
        (None, Some(published)) => published,
        (None, None) => return Choice::Nothing,
    };
    if facts.item.is_none()
        && let Some(live) = facts.live
        && live.checksum != render
    {
        if !live.ours {
            return Choice::Skip;
        }
        if live.queued {
            return Choice::Defer;
        }
    }
    let moves = publication(render, render_seq, facts.checkpoint);
    if facts.item.is_some() && moves == Publication::Older {
        return Choice::AckOlder;
    }
    Choice::Write {
        render,
        render_seq,
        moves,
    }
}
