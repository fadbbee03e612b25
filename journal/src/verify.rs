//! `verify`: a full walk of every table (J5). Reports every problem with its location.

use std::collections::BTreeMap;

use redb::{ReadTransaction, ReadableTable};

use crate::batch::BlobKind;
use crate::corrupt::{Corrupt, RecordKey};
use crate::decode;
use crate::error::{ReadError, storage};
use crate::ids::{Checksum, Seq};
pub use crate::report::{Problem, ProblemKind, VerifyReport};
use crate::tables;
use crate::work::{Queue, QueueShape};

/// Runs the walk in one read transaction (a consistent snapshot).
pub(crate) fn verify(rtx: &ReadTransaction) -> Result<VerifyReport, ReadError> {
    let mut rep = VerifyReport::default();
    crate::contain::at_table("meta");
    let meta = match crate::meta::read_meta(rtx) {
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
        each_queue_record(rtx, *q, |key, bytes| {
            let id = match key {
                RecordKey::WorkId(id) => Some(id),
                _ => None,
            };
            visit(&mut rep, key, id, bytes);
            Ok(())
        })?;
    }

    // state tables
    for (name, def) in [
        ("endpoint_applied", tables::ENDPOINT_APPLIED),
        ("endpoint_files", tables::ENDPOINT_FILES),
        ("endpoint_transaction", tables::ENDPOINT_TRANSACTION),
        ("published_checkpoint", tables::PUBLISHED_CHECKPOINT),
        ("component_state", tables::COMPONENT_STATE),
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
            } else if name == "component_state" {
                decode::component_checkpoint(v.value()).map(|(h, c)| {
                    // the renders a component's state names are references (writer:
                    // PutComponentCheckpoint)
                    for r in c.state.renders() {
                        *found.entry(r).or_default() += 1;
                        referrers.push((name, key.clone(), r));
                    }
                    h
                })
            } else if name == "endpoint_files" {
                decode::endpoint_files(v.value()).map(|(h, _)| h)
            } else if name == "endpoint_transaction" {
                decode::endpoint_transaction(v.value()).map(|(h, _)| h)
            } else {
                decode::published_checkpoint(v.value()).map(|(h, _)| h)
            };
            match res {
                Ok(h) => check_term(&mut rep, name, &key, h.term.0),
                Err(reason) => rep.corrupt(name, key, reason),
            }
        }
    }

    // pod_history (schema 4): each record references its render (writer: AppendHistory)
    {
        crate::contain::at_table("pod_history");
        let t = rtx.open_table(tables::POD_HISTORY).map_err(storage)?;
        for r in t.iter().map_err(storage)? {
            let (k, v) = r.map_err(storage)?;
            rep.records_checked += 1;
            let (pod, seq) = k.value();
            let key = crate::history::record_key(pod, seq);
            crate::contain::at_key(|| key.clone());
            match decode::sync_record(v.value()) {
                Ok((h, rec)) => {
                    check_term(&mut rep, "pod_history", &key, h.term.0);
                    let record_pod = rec.pod_key();
                    if record_pod != pod {
                        rep.problem(
                            "pod_history",
                            key.clone(),
                            ProblemKind::HistoryKeyMismatch { record_pod },
                        );
                    }
                    *found.entry(rec.render).or_default() += 1;
                    referrers.push(("pod_history", key, rec.render));
                }
                Err(reason) => rep.corrupt("pod_history", key, reason),
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
            let Some(hash) = blob_key(&mut rep, "blobs", k.value()) else {
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
            let Some(hash) = blob_key(&mut rep, "blob_refs", k.value()) else {
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

/// The blob key `key` of `table`; `None`, reported as an orphan, when it is not 32 bytes long.
fn blob_key(rep: &mut VerifyReport, table: &'static str, key: &[u8]) -> Option<Checksum> {
    let hash = Checksum::from_key(key);
    if hash.is_none() {
        rep.problem(
            table,
            RecordKey::BadBlobKey(key.to_vec()),
            ProblemKind::OrphanBlob,
        );
    }
    hash
}

/// Calls `f(key, value)` for every record of `queue`'s table in `rtx`, in key order; the key
/// is a [`RecordKey::WorkId`], [`RecordKey::Text`] or [`RecordKey::Slot`] by the queue's shape.
pub(crate) fn each_queue_record(
    rtx: &ReadTransaction,
    queue: Queue,
    mut f: impl FnMut(RecordKey, &[u8]) -> Result<(), ReadError>,
) -> Result<(), ReadError> {
    match queue.shape() {
        QueueShape::Fifo => {
            let t = rtx.open_table(tables::fifo_def(queue)).map_err(storage)?;
            for r in t.iter().map_err(storage)? {
                let (k, v) = r.map_err(storage)?;
                f(RecordKey::WorkId(k.value()), v.value())?;
            }
        }
        QueueShape::ByPod => {
            let t = rtx.open_table(tables::pod_def(queue)).map_err(storage)?;
            for r in t.iter().map_err(storage)? {
                let (k, v) = r.map_err(storage)?;
                f(RecordKey::Text(k.value().to_owned()), v.value())?;
            }
        }
        QueueShape::Slot => {
            let t = rtx.open_table(tables::slot_def(queue)).map_err(storage)?;
            if let Some(v) = t.get(()).map_err(storage)? {
                f(RecordKey::Slot, v.value())?;
            }
        }
    }
    Ok(())
}
