//! The status worker: per-pod status (coalesced, one write per object per round, and only for
//! an object some entry of which changed), and parking. The park rule and the merge are
//! [`decide`]'s.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use haptic_journal::{Batch, Queue, UnixMillis, WorkEntry, WorkId, WorkItem, WorkKey};
use kube::runtime::events::EventType;
use tracing::warn;

use super::context::Context;
use super::failures::{Writes, sleep_or_cancel};
use crate::components::publisher::PublisherError;
use crate::components::publisher::decide::{self, Retry};
use crate::k8s::WriteError;
use crate::k8s::crd::{
    AuxiliaryFileReferences, AuxiliaryFileStatus, HAProxyCRTListFile, HAProxyGeneralFile,
    HAProxyMapFile,
};
use crate::k8s::writer::k8s_time;

/// The status worker of one term.
pub(super) struct StatusWorker {
    ctx: Arc<Context>,
    writes: Writes,
    /// When the last round wrote (the throttle's leading edge).
    last: Option<Instant>,
    /// Failed rounds in a row (the back-off's attempt number).
    attempt: u32,
}

impl StatusWorker {
    /// The worker; its first round runs at once.
    pub(super) fn new(ctx: Arc<Context>, writes: Writes) -> StatusWorker {
        StatusWorker {
            ctx,
            writes,
            last: None,
            attempt: 0,
        }
    }

    /// Runs rounds until the term ends: throttled, woken by new items and publications; a
    /// failed write backs off ([`Writes::failed`]), a permanent rejection acks the round's
    /// items of that object.
    pub(super) async fn run(mut self) {
        let cancel = self.writes.cancel.clone();
        loop {
            let mut wait = None;
            if let Some(w) =
                decide::throttle_wait(self.ctx.cfg.publish_interval, self.last, Instant::now())
            {
                wait = Some(w);
            } else {
                match self.round().await {
                    Ok(wrote) => {
                        self.attempt = 0;
                        if wrote {
                            self.last = Some(Instant::now());
                        }
                    }
                    Err(StatusErr::Journal(e)) => {
                        warn!(error = %e, "status worker: journal failure; stopping");
                        return;
                    }
                    Err(StatusErr::Write { error, items }) => {
                        self.attempt += 1;
                        match self.writes.failed(&error, self.attempt, false).await {
                            Retry::After(d) => wait = Some(d),
                            Retry::StopTerm => return,
                            Retry::Reject => {
                                // Recorded and shown: the round's items of that object end.
                                self.attempt = 0;
                                let mut b = Batch::new();
                                for (queue, key, id) in items {
                                    b.ack(queue, key, id);
                                }
                                if let Err(e) = self.ctx.commit.commit(b).await {
                                    warn!(error = %e, "status worker: journal failure; stopping");
                                    return;
                                }
                            }
                        }
                    }
                }
            }
            match wait {
                Some(d) => {
                    if !sleep_or_cancel(d, &cancel).await {
                        return;
                    }
                }
                None => {
                    tokio::select! {
                        () = cancel.cancelled() => return,
                        () = self.ctx.wake.status.notified() => {}
                    }
                }
            }
        }
    }

    /// One round over every pending status, one HAProxyCfg at a time: the round's status
    /// ([`decide::status_round`]) and each auxiliary object's ([`decide::aux_round`]) are
    /// written only when some entry changed; then, in one commit, the done items are acked and
    /// the others parked. `Ok(true)` when something was written.
    async fn round(&self) -> Result<bool, StatusErr> {
        let writer = &self.writes.writer;
        let pending = self
            .ctx
            .queue(Queue::StatusPending)
            .map_err(StatusErr::Journal)?;
        if pending.is_empty() {
            return Ok(false);
        }
        let mut by_cfg: BTreeMap<String, Vec<&WorkEntry>> = BTreeMap::new();
        for e in &pending {
            if let WorkItem::Status(s) = &e.record.item {
                by_cfg
                    .entry(s.runtime_config.name.as_str().to_owned())
                    .or_default()
                    .push(e);
            }
        }
        let mut wrote = false;
        for (name, entries) in by_cfg {
            let changes: Vec<decide::PodChange> = entries
                .iter()
                .filter_map(|e| match &e.record.item {
                    WorkItem::Status(s) => Some(decide::PodChange {
                        pod: s.pod.name.as_str().to_owned(),
                        namespace: s.pod.namespace.as_str().to_owned(),
                        change: s.change.clone(),
                    }),
                    _ => None,
                })
                .collect();
            let failed = |error: WriteError| StatusErr::Write {
                error,
                items: entries
                    .iter()
                    .map(|e| (e.queue, e.key.clone(), e.record.id))
                    .collect(),
            };
            let now = k8s_time(UnixMillis::now());
            let read = writer
                .modify_cfg_status(&name, |cfg| {
                    let round = decide::status_round(Some(cfg), &changes, &now);
                    let refs = cfg.status.as_ref().and_then(|s| s.auxiliary_files.clone());
                    (round.status.clone(), (round, refs))
                })
                .await
                .map_err(failed)?;
            let (round, refs) = match read {
                Some(((round, refs), w)) => {
                    wrote |= w;
                    (round, refs)
                }
                None => (decide::status_round(None, &changes, &now), None),
            };
            if wrote {
                for (pod, error) in &round.rejected {
                    self.ctx.events.emit(
                        EventType::Warning,
                        crate::k8s::events::reasons::DEPLOYMENT_REJECTED,
                        crate::k8s::events::actions::QUARANTINE,
                        crate::k8s::events::rejected_note(pod, error),
                    );
                }
            }
            if !round.aux.is_empty()
                && let Some(refs) = refs
            {
                wrote |= self
                    .aux_round(&refs, &changes, &round.aux)
                    .await
                    .map_err(failed)?;
            }
            self.ctx
                .counters
                .status_rounds
                .fetch_add(1, Ordering::Relaxed);
            if wrote {
                haptic_journal::crash_point!("status::after_status_write");
            }
            let mut parked = false;
            let mut b = Batch::new();
            for (e, o) in entries.iter().zip(&round.outcomes) {
                match (o, &e.key) {
                    (decide::PodOutcome::Done, k) => {
                        b.ack(e.queue, k.clone(), e.record.id);
                    }
                    (decide::PodOutcome::Park, WorkKey::Pod(k)) => {
                        b.park(k.clone(), e.record.id);
                        parked = true;
                    }
                    (decide::PodOutcome::Park, _) => {}
                }
            }
            self.ctx
                .commit
                .commit(b)
                .await
                .map_err(StatusErr::Journal)?;
            if parked {
                haptic_journal::crash_point!("status::after_park");
            }
        }
        Ok(wrote)
    }

    /// The round's changes on every auxiliary object the HAProxyCfg references (one status
    /// write per object whose entries change). Returns whether something was written.
    async fn aux_round(
        &self,
        refs: &AuxiliaryFileReferences,
        changes: &[decide::PodChange],
        aux: &[decide::AuxChange],
    ) -> Result<bool, WriteError> {
        let writer = &self.writes.writer;
        let f = |file, generation, st: Option<&AuxiliaryFileStatus>| {
            decide::aux_round(st, file, generation, changes, aux)
        };
        let mut wrote = false;
        for r in &refs.map_files {
            wrote |= writer
                .modify_aux_status::<HAProxyMapFile>(&r.name, f)
                .await?;
        }
        for r in &refs.general_files {
            wrote |= writer
                .modify_aux_status::<HAProxyGeneralFile>(&r.name, f)
                .await?;
        }
        for r in &refs.crt_list_files {
            wrote |= writer
                .modify_aux_status::<HAProxyCRTListFile>(&r.name, f)
                .await?;
        }
        Ok(wrote)
    }
}

/// Why a status round stopped.
enum StatusErr {
    /// The journal failed: the worker stops.
    Journal(PublisherError),
    /// A write failed; `items` are the round's items of that object (acked when the failure
    /// is a permanent rejection).
    Write {
        error: WriteError,
        items: Vec<(Queue, WorkKey, WorkId)>,
    },
}
