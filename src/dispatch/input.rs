//! The input boundary: what render sources, validation, pod discovery and the Lease elector hand
//! the acceptor (`runtime::inputs`), the one door through which observed facts enter the journal.
//!
//! ```text
//!  dir / configmap / ingest --Input::Rendered{event, content, source, reply}--+
//!  discovery / Lease / validation --Input::Event(e)---------------------------+--> InputSender
//!                                           (bounded mpsc) --> acceptor: Journal::accept(batch_of(input))
//!                                                              reply (ingest's 202) after the commit
//! ```
//!
//! Also the journal side of a render ([`render_batch`]; reading one back is the render store's,
//! [`super::render`]) and the event ids every
//! producer stamps ([`new_event_id`], [`chain_start`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use haptic_journal::{Accepted, Correlation, CorrelationId, Event, Render};
use tokio::sync::oneshot;

use super::DispatchError;
use crate::core::render::RenderContent;

/// Where a render came from (label `source` of `haptic_renders_total`).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum RenderSource {
    /// A watched directory (`--source dir`).
    Dir,
    /// A ConfigMap (`--source configmap`).
    ConfigMap,
    /// The HTTP ingest endpoint.
    Ingest,
}

impl RenderSource {
    /// Every value, in label order.
    pub const ALL: [RenderSource; 3] = [
        RenderSource::Dir,
        RenderSource::ConfigMap,
        RenderSource::Ingest,
    ];

    /// The label value: `dir`, `configmap`, `ingest`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            RenderSource::Dir => "dir",
            RenderSource::ConfigMap => "configmap",
            RenderSource::Ingest => "ingest",
        }
    }
}

/// The answer to an input sent with a reply channel: the commit's [`Accepted`] once the input is
/// durable, or the error that kept it out of the journal.
pub type AcceptReply = oneshot::Sender<Result<Accepted, DispatchError>>;

/// What the input side hands the acceptor: the one boundary type of sources, validation,
/// discovery and the Lease.
///
/// The acceptor accepts each through `Journal::accept` before anything reacts to it.
#[derive(Debug)]
pub enum Input {
    /// A new render: the `TemplateRendered` event plus the contents, whose blobs
    /// ([`RenderContent::manifest`]) must be put in the same batch as the event.
    Rendered {
        /// The `TemplateRendered` event.
        event: Event,
        /// The render's config and files.
        content: Arc<RenderContent>,
        /// Its journal manifest ([`RenderContent::manifest`]: the SHA-256 of every content and
        /// the render checksum from them), computed once by the source, which used it to tell an
        /// unchanged render and to name the event's render: the batch stores the blobs under
        /// these keys without hashing them again (`Batch::put_render_hashed`).
        manifest: Arc<Render>,
        /// Which source produced it (counted by the acceptor).
        source: RenderSource,
        /// Answered once the render is durable (or was refused); `None` when the producer does
        /// not wait (the directory and ConfigMap sources). With a reply, a failed commit is
        /// answered to the producer and the acceptor goes on; without one it stops the input side.
        reply: Option<AcceptReply>,
    },
    /// Any other event (validation verdicts, pod discovery, leadership).
    Event(Event),
}

/// The sending half the input side writes to.
///
/// Bounded (STYLE.md 2.6): the caller sizes it; a full channel makes the producer wait, which
/// is the back pressure we want (a source then coalesces: it reads the newest render next time).
pub type InputSender = tokio::sync::mpsc::Sender<Input>;

/// Errors of sending to the acceptor.
#[derive(Debug, thiserror::Error)]
#[error("the dispatcher's input channel is closed")]
pub struct SinkClosed;

/// A new unique event id: `<prefix>-<unix ms>-<pid>-<counter>`.
///
/// Unique within a process by the counter and across restarts by the start time and pid.
#[must_use]
pub fn new_event_id(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    format!("{prefix}-{ms}-{}-{n}", std::process::id())
}

/// A correlation that starts a chain: a fresh event id which is also the correlation id.
#[must_use]
pub fn chain_start(prefix: &str) -> Correlation {
    let id = new_event_id(prefix);
    Correlation {
        correlation_id: Some(CorrelationId::new(id.clone())),
        event_id: id.into(),
        causation_id: None,
    }
}

/// The `TemplateRendered` event of a render whose manifest is `manifest` (a new correlation
/// chain).
#[must_use]
pub fn template_rendered(
    content: &RenderContent,
    manifest: &Render,
    read_time: Duration,
    trigger: &str,
) -> Event {
    Event::TemplateRendered {
        correlation: chain_start("render"),
        render: manifest.checksum,
        config_bytes: content.config.len() as u64,
        auxiliary_file_count: content.file_count(),
        duration_ms: u64::try_from(read_time.as_millis()).unwrap_or(u64::MAX),
        trigger_reason: trigger.to_owned(),
        coalescible: true,
    }
}

/// Sends a render (with the manifest the source computed: [`RenderContent::manifest`]) to the
/// acceptor without waiting for its commit.
///
/// # Errors
/// [`SinkClosed`] when the receiver is gone.
///
/// # Cancel safety
/// Cancel safe: a cancelled send sends nothing.
pub async fn send_render(
    sink: &InputSender,
    content: RenderContent,
    manifest: Render,
    read_time: Duration,
    trigger: &str,
    source: RenderSource,
) -> Result<(), SinkClosed> {
    let event = template_rendered(&content, &manifest, read_time, trigger);
    sink.send(Input::Rendered {
        event,
        content: Arc::new(content),
        manifest: Arc::new(manifest),
        source,
        reply: None,
    })
    .await
    .map_err(|_| SinkClosed)
}

/// The journal batch of one render: every file and the manifest as blobs, then its
/// `TemplateRendered` event, so the event and the content it names are durable together (J1, J4).
/// The blob keys are `manifest`'s ([`RenderContent::manifest`] of `content`): nothing is hashed
/// here; the journal checks the hash of each content it stores for the first time.
#[must_use]
pub fn render_batch(
    event: Event,
    content: &RenderContent,
    manifest: &Render,
) -> haptic_journal::Batch {
    let mut batch = haptic_journal::Batch::new();
    batch.put_render_hashed(
        content.config.clone(),
        manifest.config,
        content
            .files
            .iter()
            .zip(&manifest.files)
            .map(|(f, m)| (f.kind, f.path.clone(), f.content.clone(), m.blob))
            .collect(),
    );
    batch.event(event);
    batch
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::core::render::RenderFile;
    use haptic_journal::{AuxKind, Journal, JournalOptions};

    /// A source hashes each content once (`manifest`); the batch stores the blobs under those
    /// keys, and what the journal holds reads back as the render, under the checksum the event
    /// names, whatever the order the files came in.
    #[test]
    fn a_render_batch_stores_the_manifest_the_source_computed() {
        let file = |kind, path: &str, content: &[u8]| RenderFile {
            kind,
            path: path.into(),
            content: content.to_vec(),
        };
        let content = RenderContent {
            config: b"global\n".to_vec(),
            files: vec![
                file(AuxKind::Map, "maps/b.map", b"b 1\n"),
                file(
                    AuxKind::General,
                    "general/503.http",
                    b"HTTP/1.0 503\r\n\r\n",
                ),
                file(AuxKind::Map, "maps/a.map", b"a 1\n"),
            ],
        };
        let manifest = content.manifest();
        assert_eq!(manifest.checksum, content.checksum());
        let event = template_rendered(&content, &manifest, Duration::ZERO, "test");
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::open(&JournalOptions::new(dir.path().join("j.redb"))).unwrap();
        journal
            .accept(render_batch(event.clone(), &content, &manifest))
            .unwrap();
        let Event::TemplateRendered { render, .. } = event else {
            unreachable!()
        };
        assert_eq!(render, manifest.checksum);
        let back = super::super::render::load(&journal, render)
            .expect("stored")
            .into_content();
        assert_eq!(back.checksum(), content.checksum());
        assert_eq!(back.config, content.config);
        let mut want: Vec<_> = content
            .files
            .iter()
            .map(|f| (&f.path, &f.content))
            .collect();
        want.sort();
        let got: Vec<_> = back.files.iter().map(|f| (&f.path, &f.content)).collect();
        assert_eq!(got, want);
    }
}
