//! The checks after the restart (1-7) and the bounds on what every pod received.

use super::*;

/// Upper bounds of successful writes per pod an uninterrupted run of `fed` makes: raw pushes
/// (one per render change), storage writes (one per file that is new or differs from the
/// previous passed render's).
pub(crate) fn write_bounds(fed: &[&str]) -> (usize, usize) {
    let mut pushes = 0;
    let mut files = 0;
    let mut prev: Option<haptic::core::render::RenderContent> = None;
    for r in fed.iter().filter(|r| !rejected(r)) {
        let c = corpus(r);
        if prev.as_ref().is_some_and(|p| p.checksum() == c.checksum()) {
            continue;
        }
        pushes += 1;
        for f in &c.files {
            let same = prev.as_ref().is_some_and(|p| {
                p.files
                    .iter()
                    .any(|g| g.path == f.path && g.content == f.content)
            });
            if !same {
                files += 1;
            }
        }
        prev = Some(c);
    }
    (pushes, files)
}

/// Checks 1-7 after the restart; returns the time to converge.
pub(super) async fn quiesce(
    w: &World,
    restarted: Instant,
    ctl: &mut Controller,
) -> Result<Duration, String> {
    let i = intervals();
    let bound = i.takeover() + i.follow_up() + w.throttle;
    let took = converged(w, ctl, &w.opts.journal, restarted, bound).await?;
    stopped_clean(ctl, &w.opts.journal)?;
    // (2): no pod receives what it already runs.
    pod_writes(w).await?;
    Ok(took)
}

/// Checks (1), (3), (4) on the cluster and the pods, then quiescence of `ctl` on `journal`
/// (nothing queued, every event dispatched: the live journal, read-only), within `bound` of
/// `since`; returns the time it took.
pub(super) async fn converged(
    w: &World,
    ctl: &mut Controller,
    journal: &Path,
    since: Instant,
    bound: Duration,
) -> Result<Duration, String> {
    let last = w.last_passed();
    let want = checksum(last);
    let (fleet, live) = (&w.fleet, w.live());
    // (1), (3), (4): deployed, published, one status entry per live pod on it and none for a
    // pod that is gone, no zero timestamps, HTTP answers.
    let probe = || async {
        let cfg = fleet.hpcfg(MAIN).await.ok_or(format!("no {MAIN}"))?;
        let p = Published::of(&cfg);
        on_live(&p, &want, &live)?;
        if !p.has("Published", "True") {
            return Err(format!("not Published=True: {p:?}"));
        }
        let st = cfg.status.clone().unwrap_or_default();
        for e in &st.deployed_to_pods {
            let zero = e.deployed_at.as_ref().is_none_or(|t| t.0.as_second() <= 0);
            if zero {
                return Err(format!("{}: zero deployedAt", e.pod_name));
            }
        }
        // No transaction of ours left on any live pod (a kill inside one, issue 24).
        for pod in fleet.pods().iter().filter(|p| live.contains(&p.name)) {
            let open = pod
                .dataplane()
                .transactions()
                .await
                .map_err(|e| format!("{}: listing transactions: {e}", pod.name))?;
            if !open.is_empty() {
                return Err(format!("{}: transactions left open: {open:?}", pod.name));
            }
        }
        fleet.pods_answer_of(last, &live).await
    };
    match until_or_exit(ctl, bound, &format!("converge on {last}"), probe).await? {
        Waited::Reached => {}
        Waited::Exited(s) => {
            return Err(format!("the controller exited {s:?}\n{}", ctl.log_tail(30)));
        }
    }
    let journal = journal.to_path_buf();
    let quiet = || {
        let journal = journal.clone();
        async move {
            let p = tokio::task::spawn_blocking(move || {
                let j = Journal::open(
                    &JournalOptions::new(&journal)
                        .read_only(true)
                        .verify_on_open(false)
                        .concurrency(haptic_journal::Concurrency::SingleWriter),
                )
                .map_err(|e| e.to_string())?;
                j.pending().map_err(|e| e.to_string())
            })
            .await
            .map_err(|e| e.to_string())??;
            let left = queued(&p);
            if left.is_empty() && p.undispatched_events == 0 {
                Ok(())
            } else {
                Err(format!(
                    "queued {left:?}, {} events undispatched",
                    p.undispatched_events
                ))
            }
        }
    };
    let rest = bound.saturating_sub(since.elapsed());
    if let Waited::Exited(s) = until_or_exit(ctl, rest, "quiescence", quiet).await? {
        return Err(format!("the controller exited {s:?}"));
    }
    Ok(since.elapsed())
}

/// Check (5) after a clean SIGTERM stop of `ctl` within [`Intervals::stop`], and (6) on its
/// journal.
pub(super) fn stopped_clean(ctl: &mut Controller, journal: &Path) -> Result<(), String> {
    let i = intervals();
    let status = ctl.stop(i.stop()).ok_or_else(|| {
        format!(
            "no exit within {:?} of SIGTERM\n{}",
            i.stop(),
            ctl.log_tail(40)
        )
    })?;
    if !status.success() {
        return Err(format!(
            "clean stop exited {status:?}\n{}",
            ctl.log_tail(30)
        ));
    }
    journal_after_stop(journal)?;
    journal_size_within(journal, &ctl.opts.env)
}

/// A pod, its request log when kept at its kill, and the renders it may receive.
pub(super) type WritePlan = (
    haptic_testkit::Pod,
    Option<Vec<RequestRecord>>,
    Vec<&'static str>,
);

/// Check (2) on every pod of the fleet: no more successful raw pushes and file writes than an
/// uninterrupted run of the renders it could receive makes. A pod there from the start: the
/// whole stream; a pod a churn added: from the last render reached when it appeared; a pod a
/// churn killed: its log at the kill, the renders fed by then; the spare pod never added:
/// nothing.
pub(super) async fn pod_writes(w: &World) -> Result<(), String> {
    // What each pod may receive, decided before any request (nothing of `w` held across them).
    let mut plans: Vec<WritePlan> = Vec::new();
    for pod in w.fleet.pods() {
        let killed = w.killed.iter().position(|k| k.0 == pod.name);
        let added = w.added.iter().position(|a| a.0 == pod.name);
        let (snapshot, fed) = match (killed, added) {
            (Some(k), _) => (Some(w.killed[k].1.clone()), w.fed[..w.killed[k].2].to_vec()),
            (None, Some(a)) => (None, w.fed[w.added[a].1..].to_vec()),
            (None, None) if w.spare.as_deref() == Some(pod.name.as_str()) => (None, Vec::new()),
            (None, None) => (None, w.fed.clone()),
        };
        plans.push((pod, snapshot, fed));
    }
    for (pod, snapshot, fed) in plans {
        let reqs = match snapshot {
            Some(r) => r,
            None => pod.faults().requests().await.map_err(|e| e.to_string())?,
        };
        let (max_pushes, max_files) = write_bounds(&fed);
        writes_within(&pod.name, &reqs, max_pushes, max_files)?;
    }
    Ok(())
}

/// The queues of `p` with items in them (name, count), the drain checkpoint aside.
fn queued(p: &haptic_journal::Pending) -> Vec<(&'static str, u64)> {
    p.queues
        .iter()
        .filter(|q| q.count > 0 && q.queue != Queue::DrainCheckpoint)
        .map(|q| (q.queue.as_str(), q.count))
        .collect()
}

/// Checks (5) and (2) on a stopped controller's journal: `verify` finds nothing, nothing is
/// pending (the drain checkpoint aside), and no HAProxyCfg has two ConfigPublished of one
/// checksum.
pub(crate) fn journal_after_stop(journal: &std::path::Path) -> Result<(), String> {
    let j = Journal::open(&JournalOptions::new(journal).read_only(true))
        .map_err(|e| format!("the journal after the stop: {e}"))?;
    let problems = j.verify().map_err(|e| e.to_string())?.problems;
    if !problems.is_empty() {
        return Err(format!("verify: {problems:?}"));
    }
    let pending = j.pending().map_err(|e| e.to_string())?;
    let left = queued(&pending);
    if !left.is_empty() {
        return Err(format!("pending after a clean stop: {left:?}"));
    }
    if !pending.open_transactions.is_empty() {
        return Err(format!(
            "transactions journaled open after a clean stop: {:?}",
            pending.open_transactions
        ));
    }
    // (2): one ConfigPublished per checksum per HAProxyCfg.
    let mut per: BTreeMap<(String, String), usize> = BTreeMap::new();
    for (_, _, e) in j.events(Seq(1), usize::MAX).map_err(|e| e.to_string())? {
        if let Event::ConfigPublished {
            render,
            runtime_config,
            ..
        } = e
        {
            *per.entry((runtime_config.name.as_str().to_owned(), render.to_string()))
                .or_default() += 1;
        }
    }
    let twice: Vec<_> = per.iter().filter(|(_, n)| **n > 1).collect();
    if !twice.is_empty() {
        return Err(format!("ConfigPublished more than once: {twice:?}"));
    }
    drop(j);
    Ok(())
}

/// Check (2) on the pods: none received more raw pushes than `max_pushes` or more file writes
/// than `max_files` (what the stream fed can need; counted in the sandbox request logs).
pub(crate) async fn pod_writes_within(
    fleet: &Fleet,
    max_pushes: usize,
    max_files: usize,
) -> Result<(), String> {
    for pod in fleet.pods() {
        let reqs = pod.faults().requests().await.map_err(|e| e.to_string())?;
        writes_within(&pod.name, &reqs, max_pushes, max_files)?;
    }
    Ok(())
}

/// Check (2) on one pod's request log.
pub(super) fn writes_within(
    pod: &str,
    reqs: &[RequestRecord],
    max_pushes: usize,
    max_files: usize,
) -> Result<(), String> {
    let ok = |r: &&RequestRecord| (200..300).contains(&r.status);
    let write = |r: &&RequestRecord| matches!(r.method.as_str(), "POST" | "PUT");
    let pushes = reqs
        .iter()
        .filter(ok)
        .filter(write)
        .filter(|r| r.path.ends_with("/configuration/raw"))
        .count();
    let files: Vec<String> = reqs
        .iter()
        .filter(ok)
        .filter(write)
        .filter(|r| r.path.contains("/storage/") || r.path.contains("/ssl_ca_files"))
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    if pushes > max_pushes || files.len() > max_files {
        return Err(format!(
            "{pod}: {pushes} raw pushes (at most {max_pushes}), {} file writes (at most \
             {max_files}): {files:?}",
            files.len()
        ));
    }
    Ok(())
}

/// The auto-compaction slack of every controller here (the test hook
/// `HAPTIC_TEST_JOURNAL_COMPACT_SLACK_BYTES`; the product's default, 8 MiB, is far above what a
/// row's short stream writes). Even so a row's journal (70-140 KB: renders are stored
/// compressed and redb reuses freed pages) stays within check 6's bound with compaction off;
/// the journal crate's `auto_compaction_gives_back_free_space_after_a_backlog_drains` is the
/// test that fails when the threshold is wrong.
pub(super) const COMPACT_SLACK_BYTES: u64 = 64 * 1024;

/// Check (6), after a clean stop: the journal file is within the writer's auto-compaction
/// bound, twice the pages redb holds for its live data plus the slack
/// (`journal/src/writer/group.rs`: the writer compacts when the file is larger than that, after
/// each periodic trim and when it closes).
pub(super) fn journal_size_within(journal: &Path, env: &[(String, String)]) -> Result<(), String> {
    let slack = env
        .iter()
        .find(|(k, _)| k == "HAPTIC_TEST_JOURNAL_COMPACT_SLACK_BYTES")
        .and_then(|(_, v)| v.parse::<u64>().ok())
        .unwrap_or(JournalOptions::new(journal).auto_compact_slack_bytes);
    // Writable (the stopped controller's file, no other user) for `held_bytes`, which reads
    // redb's page counts from a write transaction it drops; no compaction of its own.
    let j = Journal::open(&JournalOptions::new(journal).auto_compact(false))
        .map_err(|e| format!("the journal after the stop: {e}"))?;
    let held = j.held_bytes().ok_or("no page counts")?;
    let st = j.stats().map_err(|e| e.to_string())?;
    let file = st.file_bytes.ok_or("no file size")?;
    let bound = 2 * held + slack;
    if file > bound {
        return Err(format!(
            "check 6: the journal file is {file} bytes, over 2 x {held} bytes of live pages + \
             {slack} slack = {bound} ({} live key+value bytes)",
            st.live_bytes()
        ));
    }
    Ok(())
}
