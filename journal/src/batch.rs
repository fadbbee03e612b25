//! A batch: events and queue mutations committed together in one write transaction.

use crate::events::{Correlation, Event};
use crate::ids::{Checksum, Identity, Seq, Term, UnixMillis, WorkId};
use crate::render::{AuxFile, AuxKind, Render, render_checksum_of_hashes};
use crate::work::{EndpointApplied, PodStatusKey, PublishedCheckpoint, Queue, WorkItem, WorkKey};

/// Index of an event inside a [`Batch`], to name it as a work item's origin before its
/// [`Seq`] is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventRef(pub usize);

/// The event a work item derives from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// No event (e.g. a timer).
    None,
    /// An event already in the log.
    Seq(Seq),
    /// An event earlier in the same batch.
    Batch(EventRef),
}

/// Kind of a stored blob.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlobKind {
    /// Raw file content (`blob.file`), keyed by its SHA-256.
    File,
    /// A [`Render`] manifest (`blob.render`), keyed by the render checksum; references its files.
    Render,
}

impl BlobKind {
    /// Record kind in the envelope.
    #[must_use]
    pub fn record_kind(self) -> &'static str {
        match self {
            BlobKind::File => "blob.file",
            BlobKind::Render => "blob.render",
        }
    }
}

/// One operation of a batch. Built through [`Batch`]'s methods.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Op {
    /// Append an event.
    Event(Event),
    /// Store a blob unless present (dedup); with `hold`, also take an explicit hold on it.
    PutBlob {
        /// Key.
        hash: Checksum,
        /// File or render manifest.
        kind: BlobKind,
        /// Content (for renders: the encoded manifest).
        content: Vec<u8>,
        /// Take an explicit hold (released with [`Op::ReleaseBlob`]).
        hold: bool,
        /// `hash` was supplied by the caller rather than computed from `content` by this
        /// batch: the writer checks it before it stores the content (a deduplicated content is
        /// not hashed again: its key was checked when it was stored).
        check_hash: bool,
    },
    /// Release one explicit hold.
    ReleaseBlob(Checksum),
    /// Enqueue a work item (FIFO append, or replace-latest for keyed and slot queues).
    Enqueue {
        /// The item.
        item: WorkItem,
        /// The event it derives from.
        origin: Origin,
        /// Earliest first attempt (unix ms); `None` = now.
        not_before: Option<UnixMillis>,
    },
    /// Compare-and-delete: remove the item under `key` only if its id is still `id`.
    Ack {
        /// Queue.
        queue: Queue,
        /// Key.
        key: WorkKey,
        /// The id the worker took.
        id: WorkId,
    },
    /// Compare-and-update: count a failed attempt and set the next attempt time.
    Reschedule {
        /// Queue.
        queue: Queue,
        /// Key.
        key: WorkKey,
        /// The id the worker took.
        id: WorkId,
        /// Earliest next attempt.
        next_attempt_at: UnixMillis,
    },
    /// Compare-and-move a status item from `status-pending` to `status-parked`.
    Park {
        /// Key.
        key: PodStatusKey,
        /// The id the worker took.
        id: WorkId,
    },
    /// Move parked status items back to pending (`None` = all).
    Unpark {
        /// One key, or all.
        key: Option<PodStatusKey>,
    },
    /// Start a new leadership term (must be greater than the current one).
    SetTerm {
        /// The term.
        term: Term,
        /// Who holds it.
        identity: Identity,
    },
    /// Record that every event up to `Seq` was dispatched to the components.
    MarkDispatched(Seq),
    /// Set an endpoint's last-applied state.
    PutEndpointApplied(EndpointApplied),
    /// Forget an endpoint.
    RemoveEndpointApplied(crate::ids::EndpointUrl),
    /// Set an endpoint's stored-file state (schema 2; replaces the one before).
    PutEndpointFiles(crate::pod::EndpointFiles),
    /// Forget an endpoint's stored-file state; absent is a no-op.
    RemoveEndpointFiles(crate::ids::EndpointUrl),
    /// Set the transaction open on an endpoint (schema 2; replaces the one before).
    PutEndpointTransaction(crate::pod::EndpointTransaction),
    /// Forget the transaction of an endpoint (it was committed, aborted or deleted); absent is
    /// a no-op.
    RemoveEndpointTransaction(crate::ids::EndpointUrl),
    /// Set a HAProxyCfg's published checkpoint.
    PutPublishedCheckpoint(PublishedCheckpoint),
    /// Remove a HAProxyCfg's published checkpoint (the object was retired: an earlier
    /// `--config-name`); absent is a no-op. The render hold it kept is released separately
    /// ([`Op::ReleaseBlob`]).
    RemovePublishedCheckpoint(crate::ids::ObjectName),
    /// Set one component's checkpoint (replaces the one before; DESIGN.md J11).
    PutComponentCheckpoint(crate::checkpoint::ComponentCheckpoint),
    /// Trim events below the watermark (see `journal/DESIGN.md`, "Trimming").
    Trim,
    /// Append one sync record to its pod's history (schema 4), then trim that pod's history
    /// to `retention` (see [`Batch::append_history`]).
    AppendHistory {
        /// The record; its render must be stored (it becomes a reference).
        record: crate::history::SyncRecord,
        /// What the pod keeps.
        retention: crate::history::HistoryRetention,
    },
    /// Trim every pod's history to `retention`, ages measured from `now` (see
    /// [`Batch::trim_history`]).
    TrimHistory {
        /// What each pod keeps.
        retention: crate::history::HistoryRetention,
        /// The reference time of `retention.max_age`.
        now: UnixMillis,
    },
}

/// What one operation did, in the order of the batch's operations.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum OpOutcome {
    /// The event's position.
    Event(Seq),
    /// The blob's key and whether its content was written now (false: deduplicated).
    Blob {
        /// Key.
        hash: Checksum,
        /// Content written by this batch.
        stored: bool,
    },
    /// The new item's id.
    Enqueued(WorkId),
    /// Whether a compare-and-delete/update/park matched (false: a newer value or nothing was
    /// there; the newer value was left alone).
    Matched(bool),
    /// How many parked items were moved back (or dropped because pending had a newer one).
    Unparked(u32),
    /// How many events were trimmed.
    Trimmed(u64),
    /// A sync record was appended to its pod's history.
    HistoryAppended {
        /// Its sequence in the pod's history (from 1 per pod).
        seq: u64,
        /// How many of the pod's older records the retention trimmed.
        trimmed: u64,
    },
    /// How many history records [`Op::TrimHistory`] trimmed.
    HistoryTrimmed(u64),
    /// Done (no result).
    Done,
}

/// The result of [`crate::Journal::accept`]: one outcome per operation. Durable when returned.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Accepted {
    /// One entry per operation, in batch order.
    pub outcomes: Vec<OpOutcome>,
}

impl Accepted {
    /// The `Seq` of every event of the batch, in order.
    #[must_use]
    pub fn seqs(&self) -> Vec<Seq> {
        self.picked(|o| match o {
            OpOutcome::Event(s) => Some(*s),
            _ => None,
        })
    }

    /// The `WorkId` of every enqueued item, in order.
    #[must_use]
    pub fn work_ids(&self) -> Vec<WorkId> {
        self.picked(|o| match o {
            OpOutcome::Enqueued(w) => Some(*w),
            _ => None,
        })
    }

    /// What `pick` takes from each outcome, in order.
    fn picked<T>(&self, pick: impl Fn(&OpOutcome) -> Option<T>) -> Vec<T> {
        self.outcomes.iter().filter_map(pick).collect()
    }
}

/// Events and queue mutations that commit together (one write transaction).
///
/// Operations apply in order; a blob put earlier in the batch may be referenced by a later event
/// or item. A blob put without a hold that nothing references when the batch ends is collected.
#[derive(Clone, Debug, Default)]
pub struct Batch {
    pub(crate) ops: Vec<Op>,
    pub(crate) events: usize,
}

impl Batch {
    /// A batch of these operations, in order (a batch handed back by a failed accept).
    pub(crate) fn from_ops(ops: Vec<Op>) -> Self {
        let events = ops.iter().filter(|o| matches!(o, Op::Event(_))).count();
        Batch { ops, events }
    }

    /// An empty batch.
    #[must_use]
    pub fn new() -> Self {
        Batch::default()
    }

    /// Number of operations.
    #[must_use]
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether the batch has no operation.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// The operations, in order.
    #[must_use]
    pub fn ops(&self) -> &[Op] {
        &self.ops
    }

    /// Appends an operation.
    pub fn push(&mut self, op: Op) -> &mut Self {
        if matches!(op, Op::Event(_)) {
            self.events += 1;
        }
        self.ops.push(op);
        self
    }

    /// Appends an event; returns its reference inside the batch.
    pub fn event(&mut self, event: Event) -> EventRef {
        let r = EventRef(self.events);
        self.push(Op::Event(event));
        r
    }

    /// Stores file content (dedup by SHA-256); returns its key.
    pub fn put_blob(&mut self, content: Vec<u8>) -> Checksum {
        let hash = Checksum::of(&content);
        self.put_file(hash, content, false, false);
        hash
    }

    /// Stores file content and takes an explicit hold (see [`crate::Journal::release_blob`]).
    pub fn hold_blob(&mut self, content: Vec<u8>) -> Checksum {
        let hash = Checksum::of(&content);
        self.put_file(hash, content, true, false);
        hash
    }

    fn put_file(&mut self, hash: Checksum, content: Vec<u8>, hold: bool, check_hash: bool) {
        self.push(Op::PutBlob {
            hash,
            kind: BlobKind::File,
            content,
            hold,
            check_hash,
        });
    }

    /// Stores a whole render: every file as a blob, then the manifest keyed by
    /// [`crate::render_checksum`]. Returns the manifest. Unchanged content is not written again.
    /// Each content is hashed once (SHA-256, in the calling thread): its blob key, from which the
    /// render checksum is derived.
    ///
    /// `files`: (kind, path relative to the render root, content); any order.
    pub fn put_render(
        &mut self,
        config: Vec<u8>,
        files: Vec<(AuxKind, String, Vec<u8>)>,
    ) -> Render {
        let config_hash = Checksum::of(&config);
        let files = files
            .into_iter()
            .map(|(kind, path, content)| {
                let hash = Checksum::of(&content);
                (kind, path, content, hash)
            })
            .collect();
        self.put_render_parts(config, config_hash, files, false)
    }

    /// Stores a whole render whose contents the caller has already hashed (for example while it
    /// computed the render's identity from [`crate::render_checksum_of_hashes`]): nothing is
    /// hashed here, so re-accepting an unchanged render costs no pass over its content. Returns
    /// the manifest, keyed by the checksum of the given hashes.
    ///
    /// `config_hash` and each file's hash must be the SHA-256 of the content: the writer checks
    /// every content it stores ([`crate::AcceptError::BlobHashMismatch`] refuses the batch); a
    /// content already stored under its key is deduplicated unread.
    ///
    /// `files`: (kind, path relative to the render root, content, SHA-256 of content); any order.
    pub fn put_render_hashed(
        &mut self,
        config: Vec<u8>,
        config_hash: Checksum,
        files: Vec<(AuxKind, String, Vec<u8>, Checksum)>,
    ) -> Render {
        self.put_render_parts(config, config_hash, files, true)
    }

    fn put_render_parts(
        &mut self,
        config: Vec<u8>,
        config_hash: Checksum,
        files: Vec<(AuxKind, String, Vec<u8>, Checksum)>,
        check_hash: bool,
    ) -> Render {
        let config_size_bytes = config.len() as u64;
        self.put_file(config_hash, config, false, check_hash);
        let mut aux = Vec::with_capacity(files.len());
        for (kind, path, content, blob) in files {
            let size_bytes = content.len() as u64;
            self.put_file(blob, content, false, check_hash);
            aux.push(AuxFile {
                kind,
                path,
                blob,
                size_bytes,
            });
        }
        aux.sort_by(|a, b| a.path.cmp(&b.path));
        let pairs: Vec<(&str, Checksum)> = aux.iter().map(|f| (f.path.as_str(), f.blob)).collect();
        let checksum = render_checksum_of_hashes(config_hash, &pairs);
        let render = Render {
            checksum,
            config: config_hash,
            config_size_bytes,
            files: aux,
        };
        // The manifest's key is computed here from the manifest itself: nothing to check.
        self.push(Op::PutBlob {
            hash: checksum,
            kind: BlobKind::Render,
            content: crate::codec::encode_payload(&render),
            hold: false,
            check_hash: false,
        });
        render
    }

    /// Takes an explicit hold on a render manifest (and so, through it, on its files): stores the
    /// manifest unless present. The publisher holds the render of each HAProxyCfg's last complete
    /// publication so self-healing can restore it after its events were trimmed. Release with
    /// [`Batch::release_blob`].
    pub fn hold_render(&mut self, render: &Render) -> &mut Self {
        self.push(Op::PutBlob {
            hash: render.checksum,
            kind: BlobKind::Render,
            content: crate::codec::encode_payload(render),
            hold: true,
            check_hash: false,
        })
    }

    /// Releases one explicit hold (see [`crate::Journal::release_blob`]).
    pub fn release_blob(&mut self, hash: Checksum) -> &mut Self {
        self.push(Op::ReleaseBlob(hash))
    }

    /// Sets a HAProxyCfg's published checkpoint.
    pub fn put_published_checkpoint(&mut self, checkpoint: PublishedCheckpoint) -> &mut Self {
        self.push(Op::PutPublishedCheckpoint(checkpoint))
    }

    /// Removes a HAProxyCfg's published checkpoint (absent: nothing happens). Pair it with a
    /// [`Batch::release_blob`] of the checkpoint's render, whose hold the publication took.
    pub fn remove_published_checkpoint(&mut self, name: crate::ids::ObjectName) -> &mut Self {
        self.push(Op::RemovePublishedCheckpoint(name))
    }

    /// Sets one component's checkpoint (table `component_state`, keyed by
    /// [`crate::ComponentState::component`]): the state after folding every event up to
    /// `checkpoint.through`. Put it in the batch of the effects or acks that changed the state.
    /// The renders the state names ([`crate::ComponentState::renders`]) must be stored.
    pub fn put_component_checkpoint(
        &mut self,
        checkpoint: crate::checkpoint::ComponentCheckpoint,
    ) -> &mut Self {
        self.push(Op::PutComponentCheckpoint(checkpoint))
    }

    /// Enqueues a work item (FIFO append or replace-latest, by queue).
    pub fn enqueue(&mut self, item: WorkItem, origin: Origin) -> &mut Self {
        self.push(Op::Enqueue {
            item,
            origin,
            not_before: None,
        })
    }

    /// Compare-and-delete ack (J3).
    pub fn ack(&mut self, queue: Queue, key: WorkKey, id: WorkId) -> &mut Self {
        self.push(Op::Ack { queue, key, id })
    }

    /// Compare-and-move a status item to `status-parked`.
    pub fn park(&mut self, key: PodStatusKey, id: WorkId) -> &mut Self {
        self.push(Op::Park { key, id })
    }

    /// Starts a new leadership term (put the `BecameLeader` event in the same batch).
    pub fn set_term(&mut self, term: Term, identity: Identity) -> &mut Self {
        self.push(Op::SetTerm { term, identity })
    }

    /// A batch of one `BecameLeader` for `identity` in `term`, with the term recorded in the
    /// same commit (J7).
    #[must_use]
    pub fn became_leader(correlation: Correlation, identity: Identity, term: Term) -> Batch {
        let mut b = Batch::new();
        b.set_term(term, identity.clone());
        b.event(Event::BecameLeader {
            correlation,
            identity,
            term,
        });
        b
    }

    /// Appends one sync record to its pod's history (table `pod_history`, schema 4) and trims
    /// that pod's history in the same transaction: oldest first beyond
    /// `retention.max_entries_per_pod`, and every record that ended more than
    /// `retention.max_age` before `record.ended_at` (the new record itself is always kept).
    ///
    /// The record references its render (`record.render`), which must be stored or put earlier
    /// in the batch ([`crate::AcceptError::MissingBlob`] refuses the batch otherwise); a trimmed
    /// record releases its reference, so a render is collected only when nothing, history
    /// included, names it. Durable when the [`crate::Journal::accept`] that carries the batch
    /// returns ([`OpOutcome::HistoryAppended`]: the record's sequence and how many were trimmed).
    pub fn append_history(
        &mut self,
        record: crate::history::SyncRecord,
        retention: crate::history::HistoryRetention,
    ) -> &mut Self {
        self.push(Op::AppendHistory { record, retention })
    }

    /// Trims every pod's history to `retention`, ages measured from `now` (unix ms): the
    /// history of a pod that is gone is trimmed only this way, since no append for it comes.
    /// Releases the trimmed records' render references ([`OpOutcome::HistoryTrimmed`]: how
    /// many). Reads the whole table: call it periodically, not per sync.
    pub fn trim_history(
        &mut self,
        retention: crate::history::HistoryRetention,
        now: UnixMillis,
    ) -> &mut Self {
        self.push(Op::TrimHistory { retention, now })
    }

    /// Records that events up to `seq` were dispatched.
    pub fn mark_dispatched(&mut self, seq: Seq) -> &mut Self {
        self.push(Op::MarkDispatched(seq))
    }
}
