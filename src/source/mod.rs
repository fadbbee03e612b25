//! Render sources: where renders come from (DESIGN.md section 1; issue 6 "Render sources").
//!
//! ```text
//!  directory (poll + debounce, haproxy.cfg rename / ..data swap) --+
//!                                                                  +--> Input::Rendered{TemplateRendered, content}
//!  ConfigMap (+ optional Secret) via kube watcher -----------------+          |
//!                                                                  bounded mpsc (caller's) --> dispatcher:
//!                                                                  put blobs + accept the event, then validate
//! ```
//!
//! # Inputs
//! A render directory ([`dir::DirSource`]) or a ConfigMap plus optional Secret
//! ([`configmap::ConfigMapSource`]).
//!
//! # Effects
//! [`Input::Rendered`] on the caller's bounded channel ([`InputSender`]) for every render whose
//! checksum differs from the previous one this source emitted. Nothing is journaled here: the
//! receiver accepts the event (and puts the render's blobs) through `Journal::accept`.
//!
//! # Journal records
//! None directly; the receiver journals `template.rendered` and the blobs of [`RenderContent::manifest`].
//!
//! # Failpoints
//! None.
//!
//! # Metrics
//! None yet (renders emitted can be counted by the receiver).
//!
//! # Wiring (the runtime issue)
//! One bounded `mpsc::channel::<Input>(N)` feeds the dispatcher; every producer gets a clone of
//! the sender and the shared `CancellationToken`:
//!
//! ```text
//!  validator = validate::Validator::new("haproxy", validation_timeout).await?   // start-up check
//!  dir::DirSource::new(DirSourceConfig::new(render_dir)).run(tx.clone(), cancel.clone())
//!    | configmap::ConfigMapSource::new(client, cfg).run(tx.clone(), cancel.clone())
//!  k8s::discovery::PodDiscovery::new(client, cfg)  (.synced() for /readyz)  .run(tx.clone(), cancel)
//!  k8s::lease::LeaderElector::new(client, cfg)     (.guard() into every writer) .run(tx, lease_cancel)
//!  dispatcher: Input::Rendered{event, content} -> Batch{put blobs of content.manifest(), event}
//!              Input::Event(e)                 -> Batch{e} (BecameLeader: also the term to meta)
//!              after TemplateRendered is durable: validator.validate(&content) ->
//!              validate::verdict_events(..) -> accept them (same way)
//! ```
//! The Lease gets its own token, cancelled after the deployer and publisher drains, so the
//! release comes last.

pub mod configmap;
mod content;
pub mod dir;
pub mod ingest;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use haptic_journal::{Correlation, CorrelationId, Event};

pub use content::{
    CONFIG_FILE, FOLDERS, RenderContent, RenderFile, folder_of_kind, kind_of_folder,
    pod_dir_of_kind, sha256,
};

/// What the input side hands the dispatcher: the one boundary type of sources, validation,
/// discovery and the Lease.
///
/// The dispatcher accepts each through `Journal::accept` before anything reacts to it.
#[derive(Debug, Clone)]
pub enum Input {
    /// A new render: the `TemplateRendered` event plus the contents, whose blobs
    /// ([`RenderContent::manifest`]) must be put in the same batch as the event.
    Rendered {
        /// The `TemplateRendered` event.
        event: Event,
        /// The render's config and files.
        content: Arc<RenderContent>,
    },
    /// Any other event (validation verdicts, pod discovery, leadership).
    Event(Event),
}

/// The sending half the input side writes to.
///
/// Bounded (STYLE.md 2.6): the caller sizes it; a full channel makes the producer wait, which
/// is the back pressure we want (a source then coalesces: it reads the newest render next time).
pub type InputSender = tokio::sync::mpsc::Sender<Input>;

/// Errors of sending to the dispatcher.
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

/// The `TemplateRendered` event of a render (a new correlation chain).
#[must_use]
pub fn template_rendered(content: &RenderContent, read_time: Duration, trigger: &str) -> Event {
    Event::TemplateRendered {
        correlation: chain_start("render"),
        render: content.checksum(),
        config_bytes: content.config.len() as u64,
        auxiliary_file_count: content.file_count(),
        duration_ms: u64::try_from(read_time.as_millis()).unwrap_or(u64::MAX),
        trigger_reason: trigger.to_owned(),
        coalescible: true,
    }
}

/// Sends a render to the dispatcher.
///
/// # Errors
/// [`SinkClosed`] when the receiver is gone.
///
/// # Cancel safety
/// Cancel safe: a cancelled send sends nothing.
pub async fn send_render(
    sink: &InputSender,
    content: RenderContent,
    read_time: Duration,
    trigger: &str,
) -> Result<(), SinkClosed> {
    let event = template_rendered(&content, read_time, trigger);
    sink.send(Input::Rendered {
        event,
        content: Arc::new(content),
    })
    .await
    .map_err(|_| SinkClosed)
}

/// The journal batch of one render: every file and the manifest as blobs, then its
/// `TemplateRendered` event, so the event and the content it names are durable together (J1, J4).
#[must_use]
pub fn render_batch(event: Event, content: &RenderContent) -> haptic_journal::Batch {
    let mut batch = haptic_journal::Batch::new();
    batch.put_render(
        content.config.clone(),
        content
            .files
            .iter()
            .map(|f| (f.kind, f.path.clone(), f.content.clone()))
            .collect(),
    );
    batch.event(event);
    batch
}

/// Reads a render back from the journal's blobs (the manifest keyed by its checksum, then each
/// file).
///
/// Returns `Ok(None)` when the manifest or one of its blobs is absent (trimmed or never stored).
///
/// # Errors
/// [`haptic_journal::ReadError`] when the journal cannot be read.
pub fn load_render(
    journal: &haptic_journal::Journal,
    checksum: haptic_journal::Checksum,
) -> Result<Option<RenderContent>, haptic_journal::ReadError> {
    let Some(render) = journal.get_render(checksum)? else {
        return Ok(None);
    };
    let Some(config) = journal.get_blob(render.config)? else {
        return Ok(None);
    };
    let mut files = Vec::with_capacity(render.files.len());
    for f in &render.files {
        let Some(content) = journal.get_blob(f.blob)? else {
            return Ok(None);
        };
        files.push(RenderFile {
            kind: f.kind,
            path: f.path.clone(),
            content,
        });
    }
    Ok(Some(RenderContent::new(config, files)))
}
