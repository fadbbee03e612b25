//! Render order that survives restarts: where a render stands in render sequence when the
//! router's in-memory map does not know it (a new process, a new term, a render seen while
//! another replica led, or one more than the map remembers ago). Read by the router task only.
//!
//! The spec never moves backwards in render sequence (DESIGN.md section 1), so every
//! publication item carries its render's `render_seq`. A render missing from memory cannot
//! take the `Seq` of the event being routed: after a restart a deploy-driven request for an
//! older render (its deployment finished, or was replayed, after the restart) would look newer
//! than the checkpoint and move the spec back. So the place is looked up in what the journal
//! keeps, newest evidence first:
//! 1. the published checkpoint (its render and `render_seq`);
//! 2. queued validation-driven publications of the render (their `render_seq`);
//! 3. the event log: the render's last `template.rendered` before the event (events are kept
//!    until trimmed; at most [`SCAN_LIMIT`] events are read).
//!
//! A deploy-driven request whose render none of them knows, while the checkpoint holds another
//! render, is placed before every published render ([`decide::UNPLACED_RENDER_SEQ`], decided by
//! [`decide::route`] from [`decide::Place::Unknown`]): a render newer than the checkpoint
//! always has a queued publication or a retained render event, unless its validation-driven
//! publication was given up (then the spec keeps the older render until the next one; per-pod
//! status is still written).

use haptic_journal::{Checksum, Event, PublishedCheckpoint, Queue, Seq, UnixMillis, WorkItem};
use tracing::debug;

use super::context::Context;
use crate::components::publisher::PublisherError;
use crate::components::publisher::decide::{self, RouterState};

/// Events read from the log at most to find one render event (bounded read work).
const SCAN_LIMIT: usize = 65_536;

/// Events read per chunk.
const SCAN_CHUNK: usize = 4_096;

/// Where the render `event` (at `seq`) refers to stands in render order, looked up in the
/// journal when `router` does not know it (`None`: no render, or the router knows it). What
/// the router makes of an unknown place is its rule ([`decide::Place::Unknown`]).
///
/// # Errors
/// [`PublisherError::Read`] when the journal cannot be read.
pub(super) fn place_render(
    ctx: &Context,
    router: &RouterState,
    seq: Seq,
    event: &Event,
) -> Result<Option<decide::Place>, PublisherError> {
    let Some(render) = decide::render_of(event) else {
        return Ok(None);
    };
    if router.knows(&render) {
        return Ok(None);
    }
    let cp = ctx.published_checkpoint(&ctx.cfg.haproxycfg_name());
    Ok(Some(match durable_place(ctx, render, seq, cp.as_ref())? {
        Some((s, at)) => {
            debug!(%render, seq = s.0, "render order restored from the journal");
            decide::Place::At { seq: s, at }
        }
        None => decide::Place::Unknown {
            published: cp.map(|c| c.render),
        },
    }))
}

fn durable_place(
    ctx: &Context,
    render: Checksum,
    seq: Seq,
    cp: Option<&PublishedCheckpoint>,
) -> Result<Option<(Seq, UnixMillis)>, PublisherError> {
    if let Some(c) = cp
        && c.render == render
    {
        return Ok(Some((c.render_seq, c.published_at)));
    }
    let queued = ctx
        .queue(Queue::Publish)?
        .into_iter()
        .filter_map(|e| match e.record.item {
            WorkItem::Publish(p) if p.render == render => Some((p.render_seq, p.rendered_at)),
            _ => None,
        })
        .min_by_key(|(s, _)| *s);
    if queued.is_some() {
        return Ok(queued);
    }
    let mut from = Seq(0);
    let mut read = 0usize;
    let mut last = None;
    while read < SCAN_LIMIT {
        let chunk = ctx
            .journal
            .events(from, SCAN_CHUNK)
            .map_err(PublisherError::Read)?;
        let Some((end, _, _)) = chunk.last() else {
            break;
        };
        let next = end.next();
        read += chunk.len();
        for (s, h, e) in chunk {
            if s >= seq {
                return Ok(last);
            }
            if matches!(e, Event::TemplateRendered { render: r, .. } if r == render) {
                last = Some((s, h.accepted_at));
            }
        }
        from = next;
    }
    Ok(last)
}
