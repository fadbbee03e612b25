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
//! [`Input::Rendered`](crate::dispatch::input::Input) on the caller's bounded channel
//! ([`InputSender`](crate::dispatch::input::InputSender)) for every render whose checksum differs
//! from the previous one this source emitted. Nothing is journaled here: the acceptor accepts the
//! event (and puts the render's blobs) through `Journal::accept`; the ingest endpoint waits for
//! that commit through the input's reply channel before it answers `202`.
//!
//! # Journal records
//! None directly; the acceptor journals `template.rendered` and the blobs of
//! [`RenderContent::manifest`](crate::core::render::RenderContent::manifest).
//!
//! # Failpoints
//! None.
//!
//! # Metrics
//! None of their own: the acceptor counts renders by [`RenderSource`](crate::dispatch::input::RenderSource).
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
pub mod dir;
pub mod ingest;
