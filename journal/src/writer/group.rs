//! The writer loop: drain a group of requests, apply them in one transaction, commit once, then
//! answer every caller.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Receiver;

use super::trim::compact;
use super::{BatchReply, Ctx, Request, Tx, WriterConfig, send_group};
use crate::batch::{Accepted, Op};
use crate::db::{Db, Inner, held_bytes};
use crate::error::{AcceptError, CompactError};
use crate::ids::UnixMillis;

/// What the writer thread keeps between commits.
#[derive(Default)]
struct WriterState {
    /// The meta counters as the last successful commit left them; `None` until first loaded,
    /// and again after a failed commit (reloaded from meta then).
    ctx: Option<Ctx>,
    /// The sealing buffer every record is encoded into.
    buf: Vec<u8>,
    /// A commit failed with a storage error: redb refuses every operation on that database
    /// until it is reopened, which the next group (or the failure itself) tries first.
    reopen_needed: bool,
    /// Whether this fault episode already tried compaction to free space (once per episode).
    compacted: bool,
}

/// The writer loop. Returns when every sender is dropped.
pub(crate) fn run(inner: Arc<Inner>, rx: Receiver<Request>, cfg: WriterConfig) {
    let mut since_trim = 0u32;
    let mut state = WriterState::default();
    let mut group: Vec<(Vec<Op>, BatchReply)> = Vec::new();
    let mut compacts = Vec::new();
    while let Ok(first) = rx.recv() {
        let mut push = |r: Request, group: &mut Vec<(Vec<Op>, BatchReply)>| match r {
            Request::Batch { ops, reply } => group.push((ops, reply)),
            Request::Compact { reply } => compacts.push(reply),
        };
        push(first, &mut group);
        while group.len() < cfg.max_group {
            match rx.try_recv() {
                Ok(r) => push(r, &mut group),
                Err(_) => break,
            }
        }
        if !group.is_empty() {
            since_trim += 1;
            let trim = cfg.trim_every_commits > 0 && since_trim >= cfg.trim_every_commits;
            if trim {
                since_trim = 0;
            }
            let used = commit_group(&inner, &cfg, &mut state, &mut group, trim);
            if let Some(used) = used {
                let _ = compact_if_free_dominates(&inner, &cfg, used);
            }
        }
        for reply in compacts.drain(..) {
            let _ = reply.send(compact(&inner));
        }
    }
    // A clean close checks once more, so a closed journal is within the bound whatever was
    // committed since the last periodic trim (J6).
    if cfg.auto_compact_path.is_some()
        && let Some(used) = held_bytes(&inner)
    {
        // A reader still live at the close (a component's last read) makes redb refuse the
        // compaction (`Busy`); there is no next trim to try again, so wait for it, bounded.
        for _ in 0..CLOSE_COMPACT_TRIES {
            if !matches!(
                compact_if_free_dominates(&inner, &cfg, used),
                Some(Err(CompactError::Busy))
            ) {
                break;
            }
            std::thread::sleep(CLOSE_COMPACT_WAIT);
        }
    }
}

/// Tries of the close's compaction while a reader is live, [`CLOSE_COMPACT_WAIT`] apart (at
/// most about 1 s).
const CLOSE_COMPACT_TRIES: u32 = 40;
/// The wait between two tries of the close's compaction.
const CLOSE_COMPACT_WAIT: std::time::Duration = std::time::Duration::from_millis(25);

/// Auto-compaction (J6): compacts when the file is larger than twice the bytes of the pages
/// redb holds plus the slack (free space dominates), or always when so configured.
/// Returns the compaction's outcome when it ran (`None`: not needed, or not configured).
fn compact_if_free_dominates(
    inner: &Inner,
    cfg: &WriterConfig,
    used: u64,
) -> Option<Result<bool, CompactError>> {
    let path = cfg.auto_compact_path.as_ref()?;
    let file = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    if cfg.auto_compact_always
        || file
            > used
                .saturating_mul(2)
                .saturating_add(cfg.auto_compact_slack)
    {
        // Busy (a reader is live) is fine here: the next trim tries again.
        Some(compact(inner))
    } else {
        None
    }
}

/// Commits a group (answering and emptying it); returns the bytes of the pages redb holds
/// (after a trim), for the auto-compaction check.
fn commit_group(
    inner: &Inner,
    cfg: &WriterConfig,
    state: &mut WriterState,
    group: &mut Vec<(Vec<Op>, BatchReply)>,
    trim: bool,
) -> Option<u64> {
    if let Err(e) = ready_to_write(inner, cfg, state) {
        inner
            .counters
            .failed_commits
            .fetch_add(1, Ordering::Relaxed);
        record_fault(inner, &e);
        for (ops, reply) in group.drain(..) {
            reply.send((Err(e.clone()), ops));
        }
        return None;
    }
    // A request whose apply fails (not a storage error) is answered alone and the rest retried.
    loop {
        match try_commit(inner, cfg, state, group, trim) {
            Ok((results, used)) => {
                clear_fault(inner, state);
                send_group(
                    group
                        .drain(..)
                        .zip(results)
                        .map(|((ops, reply), r)| (reply, (r, ops))),
                );
                return used;
            }
            Err(GroupError::Request(i, e)) => {
                let (ops, reply) = group.remove(i);
                reply.send((Err(e), ops));
                if group.is_empty() {
                    return None;
                }
            }
            Err(GroupError::Storage(e)) => {
                // Reload the counters from meta before the next commit.
                state.ctx = None;
                inner
                    .counters
                    .failed_commits
                    .fetch_add(1, Ordering::Relaxed);
                if e.fault_kind().is_some() {
                    record_fault(inner, &e);
                    state.reopen_needed = true;
                }
                for (ops, reply) in group.drain(..) {
                    reply.send((Err(e.clone()), ops));
                }
                // Reopen at once, so readers work again while the volume stays full (redb's
                // repair of the reopened file needs no new space); when it fails, the next
                // group tries again.
                if state.reopen_needed {
                    let _ = ready_to_write(inner, cfg, state);
                }
                return None;
            }
        }
    }
}

/// Before a commit: the file must still be the one opened (not removed or replaced), and a
/// database that failed an I/O must be reopened first. After the reopen of a full volume,
/// compaction runs once per fault episode (it may give pages back to the file system).
fn ready_to_write(
    inner: &Inner,
    cfg: &WriterConfig,
    state: &mut WriterState,
) -> Result<(), AcceptError> {
    if let Some(file) = &cfg.file {
        use std::os::unix::fs::MetadataExt as _;
        match std::fs::metadata(&file.path) {
            Ok(m) if m.dev() == file.dev && m.ino() == file.ino => {}
            Ok(_) => {
                return Err(AcceptError::Removed {
                    path: file.path.clone(),
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(AcceptError::Removed {
                    path: file.path.clone(),
                });
            }
            // Any other stat failure (EACCES on a parent, ...) says nothing about the open
            // file: let the commit decide.
            Err(_) => {}
        }
    }
    if !state.reopen_needed {
        return Ok(());
    }
    let Some(open) = &cfg.reopen else {
        return Ok(());
    };
    {
        let mut db = inner
            .db
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if matches!(&*db, Db::Ro(_)) {
            return Err(AcceptError::ReadOnly);
        }
        // redb holds the file lock until the failed database is dropped.
        drop(std::mem::replace(&mut *db, Db::Closed));
        let reopened = open().map_err(|e| AcceptError::storage(redb::Error::from(e)))?;
        *db = Db::Rw(reopened);
    }
    state.reopen_needed = false;
    state.ctx = None;
    let full = lock(&inner.fault)
        .as_ref()
        .is_some_and(|f| f.kind == crate::error::FaultKind::Full);
    if full && !state.compacted {
        state.compacted = true;
        if let Err(crate::error::CompactError::Storage(_)) = compact(inner) {
            state.reopen_needed = true;
            return Err(AcceptError::storage(redb::Error::PreviousIo));
        }
    }
    Ok(())
}

/// Starts or extends the fault episode with `e` (a storage fault; anything else is ignored).
fn record_fault(inner: &Inner, e: &AcceptError) {
    let Some(kind) = e.fault_kind() else { return };
    let mut fault = lock(&inner.fault);
    match &mut *fault {
        // redb's "previous I/O error" says nothing new: keep the first error's text.
        Some(f) if f.kind == kind || is_previous_io(e) => f.failures += 1,
        _ => {
            *fault = Some(crate::error::StorageFault {
                kind,
                message: fault_message(e),
                since: UnixMillis::now(),
                failures: 1,
            });
        }
    }
}

fn clear_fault(inner: &Inner, state: &mut WriterState) {
    let mut fault = lock(&inner.fault);
    if fault.take().is_some() {
        state.compacted = false;
    }
}

fn is_previous_io(e: &AcceptError) -> bool {
    matches!(e, AcceptError::Storage { source } if matches!(**source, redb::Error::PreviousIo))
}

/// The error with its sources (`journal storage failed: I/O error: No space left on device`).
fn fault_message(e: &AcceptError) -> String {
    let mut out = String::new();
    let mut next: Option<&dyn std::error::Error> = match e {
        AcceptError::Storage { source } => Some(&**source),
        other => Some(other),
    };
    while let Some(s) = next {
        let text = s.to_string();
        if !out.contains(&text) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&text);
        }
        next = s.source();
    }
    out
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One result per request, and the bytes redb uses when measured (after a trim).
type GroupResults = (Vec<Result<Accepted, AcceptError>>, Option<u64>);

enum GroupError {
    Request(usize, AcceptError),
    Storage(AcceptError),
}

fn try_commit(
    inner: &Inner,
    cfg: &WriterConfig,
    state: &mut WriterState,
    group: &[(Vec<Op>, BatchReply)],
    trim: bool,
) -> Result<GroupResults, GroupError> {
    let st = |e: redb::Error| GroupError::Storage(AcceptError::storage(e));
    let db = inner
        .db
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let db = match &*db {
        Db::Rw(db) => db,
        Db::Ro(_) => return Err(GroupError::Storage(AcceptError::ReadOnly)),
        Db::Closed => return Err(st(redb::Error::DatabaseClosed)),
    };
    let mut txn = db.begin_write().map_err(|e| st(e.into()))?;
    txn.set_durability(cfg.durability)
        .map_err(|e| st(e.into()))?;
    let mut results = Vec::with_capacity(group.len());
    let mut events = 0u64;
    let ctx = {
        let mut tx = Tx::new(&txn, std::mem::take(&mut state.buf));
        let r = (|| {
            let stored = match &state.ctx {
                Some(c) => c.clone(),
                None => {
                    let c = tx.load_ctx().map_err(GroupError::Storage)?;
                    state.ctx = Some(c.clone());
                    c
                }
            };
            let mut ctx = stored.clone();
            ctx.now = UnixMillis::now();
            for (i, (ops, _)) in group.iter().enumerate() {
                match tx.validate(&ctx, ops) {
                    Ok(()) => {}
                    Err(e) => {
                        results.push(Err(e));
                        continue;
                    }
                }
                events += ops.iter().filter(|o| matches!(o, Op::Event(_))).count() as u64;
                match tx.apply(&mut ctx, ops) {
                    Ok(a) => results.push(Ok(a)),
                    Err(e @ AcceptError::Storage { .. }) => return Err(GroupError::Storage(e)),
                    Err(e) => return Err(GroupError::Request(i, e)),
                }
            }
            if trim {
                tx.trim(&ctx).map_err(GroupError::Storage)?;
            }
            tx.store_ctx(&mut ctx, &stored)
                .map_err(GroupError::Storage)?;
            Ok(ctx)
        })();
        state.buf = tx.finish();
        r?
    };
    let used = if trim && cfg.auto_compact_path.is_some() {
        // The pages redb holds (tables, its own trees and metadata), not its free pages:
        // `fragmented_bytes` counts those too, so stored + metadata + fragmented is about the
        // whole file and free space never dominated by that measure (`held_bytes`).
        let st = txn.stats().map_err(|e| st(e.into()))?;
        Some(st.allocated_pages() * st.page_size() as u64)
    } else {
        None
    };
    crate::crash_point!("journal::before_commit");
    txn.commit().map_err(|e| st(e.into()))?;
    crate::crash_point!("journal::after_commit");
    state.ctx = Some(ctx);
    inner.counters.commits.fetch_add(1, Ordering::Relaxed);
    inner.counters.events.fetch_add(events, Ordering::Relaxed);
    inner
        .counters
        .requests
        .fetch_add(group.len() as u64, Ordering::Relaxed);
    Ok((results, used))
}

#[cfg(test)]
mod tests {
    use std::sync::RwLock;
    use std::sync::mpsc::sync_channel;

    use super::*;
    use crate::batch::Batch;
    use crate::db::Counters;
    use crate::events::{Correlation, Event};
    use crate::ids::{Checksum, Seq};

    fn drift(i: u64) -> Event {
        Event::DriftPreventionTriggered {
            correlation: Correlation::new(format!("e{i}")),
            time_since_last_deployment_ms: i,
        }
    }

    /// Three requests in one group: the invalid middle one is answered alone with its error,
    /// the other two share one commit.
    #[test]
    fn a_rejected_request_does_not_sink_its_group() {
        let db = redb::Builder::new()
            .create_with_backend(redb::backends::InMemoryBackend::new())
            .unwrap();
        let txn = db.begin_write().unwrap();
        crate::meta::init_tables(&txn).unwrap();
        txn.commit().unwrap();
        let inner = Inner {
            db: RwLock::new(Db::Rw(db)),
            counters: Counters::default(),
            fault: std::sync::Mutex::new(None),
        };
        let cfg = WriterConfig {
            durability: redb::Durability::Immediate,
            max_group: 16,
            trim_every_commits: 0,
            auto_compact_path: None,
            auto_compact_slack: 0,
            auto_compact_always: false,
            reopen: None,
            file: None,
        };
        let mut group = Vec::new();
        let mut results = Vec::new();
        let mut waits = Vec::new();
        for i in 0..3u64 {
            let mut b = Batch::new();
            b.event(drift(i));
            if i == 1 {
                b.push(Op::ReleaseBlob(Checksum::of(b"never stored")));
            }
            // Each reply needs its own waiting thread (a thread reuses its slot).
            let (tx, rx) = sync_channel(1);
            waits.push(std::thread::spawn(move || {
                let (reply, wait) = super::super::batch_reply();
                tx.send(reply).unwrap();
                wait.wait().unwrap().0
            }));
            group.push((b.ops, rx.recv().unwrap()));
        }
        let mut state = WriterState::default();
        commit_group(&inner, &cfg, &mut state, &mut group, false);
        for w in waits {
            results.push(w.join().unwrap());
        }
        assert_eq!(results[0].as_ref().unwrap().seqs(), vec![Seq(1)]);
        assert!(matches!(results[1], Err(AcceptError::NoHold { .. })));
        assert_eq!(results[2].as_ref().unwrap().seqs(), vec![Seq(2)]);
        assert_eq!(inner.counters.commits.load(Ordering::Relaxed), 1);
        assert_eq!(inner.counters.events.load(Ordering::Relaxed), 2);
    }
}
