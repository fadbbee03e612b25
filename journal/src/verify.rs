//! `verify`: a full walk of every table (J5). Reports every problem with its location.

use std::collections::BTreeMap;
use std::fmt;

use redb::{ReadTransaction, ReadableTable};

use crate::batch::BlobKind;
use crate::corrupt::{Corrupt, CorruptReason, RecordKey};
use crate::decode;
use crate::error::{ReadError, storage};
use crate::ids::{Checksum, Seq};
use crate::tables;
use crate::work::{Queue, QueueShape};

/// What is wrong at one location.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProblemKind {
    /// The value fails its envelope, CRC, decode or hash check.
    Corrupt(CorruptReason),
    /// A record references a blob that is not stored.
    MissingBlob {
        /// The missing blob.
        blob: Checksum,
    },
    /// A blob's stored reference count differs from the references found.
    RefCountMismatch {
        /// Stored count.
        stored: u64,
        /// References found by the walk.
        found: u64,
    },
    /// A blob has content but no counts, or counts but no content.
    OrphanBlob,
    /// A blob with zero references and zero holds was not collected.
    UncollectedBlob,
    /// The event log has a gap.
    SeqGap {
        /// The `Seq` expected next.
        expected: Seq,
        /// The `Seq` found.
        found: Seq,
    },
    /// An event at or beyond meta's `next_seq`.
    SeqBeyondNext {
        /// meta `next_seq`.
        next_seq: Seq,
    },
    /// A work item id at or beyond meta's `next_work_id`, or stored under another id's key.
    BadWorkId,
    /// A record is stamped with a term newer than meta's current term.
    TermAhead {
        /// The record's term.
        found: u64,
        /// meta's term.
        current: u64,
    },
    /// meta itself is missing or malformed.
    BadMeta,
    /// redb could not read a page of the file (it panicked; contained): the b-tree itself is
    /// damaged below the record level.
    Damaged {
        /// redb's message and where it failed.
        message: String,
    },
}

impl fmt::Display for ProblemKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProblemKind::Corrupt(r) => write!(f, "{r}"),
            ProblemKind::MissingBlob { blob } => write!(f, "references missing blob {blob}"),
            ProblemKind::RefCountMismatch { stored, found } => {
                write!(f, "reference count {stored} stored, {found} found")
            }
            ProblemKind::OrphanBlob => f.write_str("blob content and counts disagree"),
            ProblemKind::Damaged { message } => write!(f, "{message}"),
            ProblemKind::UncollectedBlob => f.write_str("unreferenced blob was not collected"),
            ProblemKind::SeqGap { expected, found } => {
                write!(f, "event log gap: expected seq {expected}, found {found}")
            }
            ProblemKind::SeqBeyondNext { next_seq } => {
                write!(f, "event at or beyond meta next_seq {next_seq}")
            }
            ProblemKind::BadWorkId => f.write_str("work id does not match its key or meta"),
            ProblemKind::TermAhead { found, current } => {
                write!(
                    f,
                    "stamped with term {found}, newer than current term {current}"
                )
            }
            ProblemKind::BadMeta => f.write_str("meta is missing or malformed"),
        }
    }
}

/// One problem and where it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// Table name.
    pub table: &'static str,
    /// Record key.
    pub key: RecordKey,
    /// Byte offset inside the value, when meaningful.
    pub offset: Option<u64>,
    /// What is wrong.
    pub kind: ProblemKind,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "table {} at {}", self.table, self.key)?;
        if let Some(o) = self.offset {
            write!(f, " (byte offset {o})")?;
        }
        write!(f, ": {}", self.kind)
    }
}

/// The result of [`crate::Journal::verify`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Every problem, in walk order (tables in [`tables::ALL_TABLES`] order, keys ascending).
    pub problems: Vec<Problem>,
    /// Records checked.
    pub records_checked: u64,
}

impl VerifyReport {
    /// Whether no problem was found.
    #[must_use]
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }

    pub(crate) fn single(c: Corrupt) -> Self {
        let offset = c.reason.offset();
        VerifyReport {
            problems: vec![Problem {
                table: c.table,
                key: c.key,
                offset,
                kind: ProblemKind::Corrupt(c.reason),
            }],
            records_checked: 0,
        }
    }

    /// A report with one [`ProblemKind::Damaged`] problem (a contained redb panic).
    pub(crate) fn damaged(d: crate::contain::Damage) -> Self {
        let message = d.to_string();
        VerifyReport {
            problems: vec![Problem {
                table: d.table.unwrap_or("redb-internal"),
                key: RecordKey::Unknown,
                offset: None,
                kind: ProblemKind::Damaged { message },
            }],
            records_checked: 0,
        }
    }

    fn corrupt(&mut self, table: &'static str, key: RecordKey, reason: CorruptReason) {
        let offset = reason.offset();
        self.problems.push(Problem {
            table,
            key,
            offset,
            kind: ProblemKind::Corrupt(reason),
        });
    }

    fn problem(&mut self, table: &'static str, key: RecordKey, kind: ProblemKind) {
        self.problems.push(Problem {
            table,
            key,
            offset: None,
            kind,
        });
    }
}

/// Runs the walk in one read transaction (a consistent snapshot).
pub(crate) fn verify(rtx: &ReadTransaction) -> Result<VerifyReport, ReadError> {
    let mut rep = VerifyReport::default();
    crate::contain::at_table("meta");
    let meta = match crate::journal::read_meta(rtx) {
        Ok(m) => Some(m),
        Err(ReadError::Corrupt(c)) => {
            rep.problem("meta", c.key, ProblemKind::BadMeta);
            None
        }
        Err(e) => return Err(e),
    };
    if let Some(m) = &meta
        && m.dispatched_through.0 >= m.next_seq.0
    {
        rep.problem(
            "meta",
            RecordKey::Text(tables::META_DISPATCHED.to_owned()),
            ProblemKind::BadMeta,
        );
    }
    let term = meta.as_ref().map_or(u64::MAX, |m| m.term.0);
    let check_term = |rep: &mut VerifyReport, table: &'static str, key: &RecordKey, t: u64| {
        if t > term {
            rep.problem(
                table,
                key.clone(),
                ProblemKind::TermAhead {
                    found: t,
                    current: term,
                },
            );
        }
    };
    // Blob references found, by blob, with where they came from (for MissingBlob).
    let mut found: BTreeMap<Checksum, u64> = BTreeMap::new();
    let mut referrers: Vec<(&'static str, RecordKey, Checksum)> = Vec::new();

    // events
    {
        crate::contain::at_table("events");
        let t = rtx.open_table(tables::EVENTS).map_err(storage)?;
        let mut expected: Option<u64> = None;
        for r in t.iter().map_err(storage)? {
            let (k, v) = r.map_err(storage)?;
            let seq = k.value();
            crate::contain::at_key(|| RecordKey::Seq(seq));
            rep.records_checked += 1;
            let key = RecordKey::Seq(seq);
            if let Some(e) = expected
                && seq != e
            {
                rep.problem(
                    "events",
                    key.clone(),
                    ProblemKind::SeqGap {
                        expected: Seq(e),
                        found: Seq(seq),
                    },
                );
            }
            expected = Some(seq + 1);
            if let Some(m) = &meta
                && seq >= m.next_seq.0
            {
                rep.problem(
                    "events",
                    key.clone(),
                    ProblemKind::SeqBeyondNext {
                        next_seq: m.next_seq,
                    },
                );
            }
            match decode::event(v.value()) {
                Ok((h, e)) => {
                    check_term(&mut rep, "events", &key, h.term.0);
                    for b in e.blob_refs() {
                        *found.entry(b).or_default() += 1;
                        referrers.push(("events", key.clone(), b));
                    }
                }
                Err(reason) => rep.corrupt("events", key, reason),
            }
        }
    }

    // queues
    for q in Queue::ALL {
        let name = q.table_name();
        crate::contain::at_table(name);
        let mut visit =
            |rep: &mut VerifyReport, key: RecordKey, id_key: Option<u64>, bytes: &[u8]| {
                crate::contain::at_key(|| key.clone());
                rep.records_checked += 1;
                match decode::work(bytes) {
                    Ok((h, w)) => {
                        check_term(rep, name, &key, h.term.0);
                        let bad_id = id_key.is_some_and(|k| k != w.id.0)
                            || meta.as_ref().is_some_and(|m| w.id.0 >= m.next_work_id.0);
                        if bad_id {
                            rep.problem(name, key.clone(), ProblemKind::BadWorkId);
                        }
                        for b in w.item.blob_refs() {
                            *found.entry(b).or_default() += 1;
                            referrers.push((name, key.clone(), b));
                        }
                    }
                    Err(reason) => rep.corrupt(name, key, reason),
                }
            };
        match q.shape() {
            QueueShape::Fifo => {
                let t = rtx.open_table(tables::fifo_def(*q)).map_err(storage)?;
                for r in t.iter().map_err(storage)? {
                    let (k, v) = r.map_err(storage)?;
                    visit(
                        &mut rep,
                        RecordKey::WorkId(k.value()),
                        Some(k.value()),
                        v.value(),
                    );
                }
            }
            QueueShape::ByPod => {
                let t = rtx.open_table(tables::pod_def(*q)).map_err(storage)?;
                for r in t.iter().map_err(storage)? {
                    let (k, v) = r.map_err(storage)?;
                    visit(
                        &mut rep,
                        RecordKey::Text(k.value().to_owned()),
                        None,
                        v.value(),
                    );
                }
            }
            QueueShape::Slot => {
                let t = rtx.open_table(tables::slot_def(*q)).map_err(storage)?;
                if let Some(v) = t.get(()).map_err(storage)? {
                    visit(&mut rep, RecordKey::Slot, None, v.value());
                }
            }
        }
    }

    // state tables
    for (name, def) in [
        ("endpoint_applied", tables::ENDPOINT_APPLIED),
        ("published_checkpoint", tables::PUBLISHED_CHECKPOINT),
    ] {
        crate::contain::at_table(name);
        let t = rtx.open_table(def).map_err(storage)?;
        for r in t.iter().map_err(storage)? {
            let (k, v) = r.map_err(storage)?;
            rep.records_checked += 1;
            let key = RecordKey::Text(k.value().to_owned());
            crate::contain::at_key(|| key.clone());
            let res = if name == "endpoint_applied" {
                decode::endpoint_applied(v.value()).map(|(h, e)| {
                    // the render an endpoint runs is a reference (writer: PutEndpointApplied)
                    *found.entry(e.render).or_default() += 1;
                    referrers.push((name, key.clone(), e.render));
                    h
                })
            } else {
                decode::published_checkpoint(v.value()).map(|(h, _)| h)
            };
            match res {
                Ok(h) => check_term(&mut rep, name, &key, h.term.0),
                Err(reason) => rep.corrupt(name, key, reason),
            }
        }
    }

    // blobs: content, hashes, manifests (which reference their files)
    let mut stored: BTreeMap<Checksum, ()> = BTreeMap::new();
    {
        crate::contain::at_table("blobs");
        let t = rtx.open_table(tables::BLOBS).map_err(storage)?;
        for r in t.iter().map_err(storage)? {
            let (k, v) = r.map_err(storage)?;
            rep.records_checked += 1;
            crate::contain::at_key(|| {
                Checksum::from_key(k.value()).map_or_else(
                    || RecordKey::BadBlobKey(k.value().to_vec()),
                    RecordKey::Blob,
                )
            });
            let Some(hash) = Checksum::from_key(k.value()) else {
                rep.problem(
                    "blobs",
                    RecordKey::BadBlobKey(k.value().to_vec()),
                    ProblemKind::OrphanBlob,
                );
                continue;
            };
            let key = RecordKey::Blob(hash);
            stored.insert(hash, ());
            match decode::blob_checked(hash, v.value()) {
                Ok((BlobKind::Render, content)) => match decode::render(content) {
                    Ok(render) => {
                        for b in render.blob_refs() {
                            *found.entry(b).or_default() += 1;
                            referrers.push(("blobs", key.clone(), b));
                        }
                    }
                    Err(reason) => rep.corrupt("blobs", key, reason),
                },
                Ok((BlobKind::File, _)) => {}
                Err(reason) => rep.corrupt("blobs", key, reason),
            }
        }
    }
    for (table, key, b) in referrers {
        if !stored.contains_key(&b) {
            rep.problem(table, key, ProblemKind::MissingBlob { blob: b });
        }
    }
    // blob_refs: counts equal references found; no zero entries; content present
    {
        crate::contain::at_table("blob_refs");
        let t = rtx.open_table(tables::BLOB_REFS).map_err(storage)?;
        let mut counted: BTreeMap<Checksum, ()> = BTreeMap::new();
        for r in t.iter().map_err(storage)? {
            let (k, v) = r.map_err(storage)?;
            let Some(hash) = Checksum::from_key(k.value()) else {
                rep.problem(
                    "blob_refs",
                    RecordKey::BadBlobKey(k.value().to_vec()),
                    ProblemKind::OrphanBlob,
                );
                continue;
            };
            counted.insert(hash, ());
            crate::contain::at_key(|| RecordKey::Blob(hash));
            let (refs, holds) = v.value();
            let f = found.get(&hash).copied().unwrap_or(0);
            if refs != f {
                rep.problem(
                    "blob_refs",
                    RecordKey::Blob(hash),
                    ProblemKind::RefCountMismatch {
                        stored: refs,
                        found: f,
                    },
                );
            }
            if refs == 0 && holds == 0 {
                rep.problem(
                    "blob_refs",
                    RecordKey::Blob(hash),
                    ProblemKind::UncollectedBlob,
                );
            }
            if !stored.contains_key(&hash) {
                rep.problem("blob_refs", RecordKey::Blob(hash), ProblemKind::OrphanBlob);
            }
        }
        for hash in stored.keys() {
            if !counted.contains_key(hash) {
                rep.problem("blobs", RecordKey::Blob(*hash), ProblemKind::OrphanBlob);
            }
        }
    }
    Ok(rep)
}

/// Turns a report problem into the `Corrupt` error shape (first corrupt problem), if any.
#[must_use]
pub fn first_corrupt(report: &VerifyReport) -> Option<Corrupt> {
    report.problems.iter().find_map(|p| match &p.kind {
        ProblemKind::Corrupt(r) => Some(Corrupt {
            table: p.table,
            key: p.key.clone(),
            reason: r.clone(),
        }),
        _ => None,
    })
}
