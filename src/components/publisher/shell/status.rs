//! The status worker: per-pod status (coalesced, one write per object per round, and only for
//! an object some entry of which changed), parking, and the term-start step of the router.

use kube::runtime::events::EventType;

use super::failures::Attempts;
use super::*;
use crate::k8s::crd::AuxiliaryFileReferences;

impl Inner {
    /// Term start: the router queues what it owes the new term (status removals of pods that
    /// went away while this replica did not lead). On a journal that had no checkpoint, the
    /// pods the published status lists are folded too ([`decide::Input::StatusListed`]; the
    /// router folds them whatever their order with the first discovery, so nothing waits for
    /// this read). A journal failure stops the term's workers.
    pub(super) async fn term_started(self: Arc<Self>, writer: Writer, cancel: CancellationToken) {
        if let Err(e) = self.step(Input::TermStarted).await {
            warn!(error = %e, "publisher: journal failure at term start; stopping the term");
            cancel.cancel();
            return;
        }
        if self.restored || self.listed.load(Ordering::Acquire) {
            return;
        }
        let name = self.cfg.haproxycfg_name();
        let cfg = match self
            .with_retries(&writer, Worker::Status, &cancel, || writer.get_cfg(&name))
            .await
        {
            Attempts::Done(cfg) => cfg,
            Attempts::Rejected | Attempts::Stopped => return,
        };
        let pods: Vec<haptic_journal::PodRef> = cfg
            .iter()
            .flat_map(|c| c.status.iter().flat_map(|s| s.deployed_to_pods.iter()))
            .map(|p| haptic_journal::PodRef {
                namespace: p
                    .namespace
                    .clone()
                    .unwrap_or_else(|| self.cfg.namespace.clone())
                    .into(),
                name: p.pod_name.as_str().into(),
            })
            .collect();
        match self.step(Input::StatusListed { pods: &pods }).await {
            Ok(()) => self.listed.store(true, Ordering::Release),
            Err(e) => {
                warn!(error = %e, "publisher: journal failure folding the listed pods; stopping the term");
                cancel.cancel();
            }
        }
    }

    pub(super) async fn status_worker(self: Arc<Self>, writer: Writer, cancel: CancellationToken) {
        let mut last: Option<Instant> = None;
        let mut attempt = 0u32;
        loop {
            let mut wait = None;
            if let Some(w) = decide::throttle_wait(self.cfg.publish_interval, last, Instant::now())
            {
                wait = Some(w);
            } else {
                match self.status_round(&writer).await {
                    Ok(wrote) => {
                        attempt = 0;
                        if wrote {
                            last = Some(Instant::now());
                        }
                    }
                    Err(StatusErr::Journal(e)) => {
                        warn!(error = %e, "status worker: journal failure; stopping");
                        return;
                    }
                    Err(StatusErr::Write { error, items }) => {
                        attempt += 1;
                        match self
                            .failed(&writer, Worker::Status, &error, attempt, &cancel, false)
                            .await
                        {
                            Retry::After(d) => wait = Some(d),
                            Retry::StopTerm => return,
                            Retry::Reject => {
                                // Recorded and shown: the round's items of that object end.
                                attempt = 0;
                                let mut b = Batch::new();
                                for (queue, key, id) in items {
                                    b.ack(queue, key, id);
                                }
                                if let Err(e) = self.commit(b).await {
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
                        () = self.wake.status.notified() => {}
                    }
                }
            }
        }
    }

    /// One round over every pending status, one HAProxyCfg at a time: the round's status
    /// ([`decide::status_round`]) and each auxiliary object's ([`decide::aux_round`]) are
    /// written only when some entry changed; then, in one commit, the done items are acked and
    /// the others parked. `Ok(true)` when something was written.
    async fn status_round(&self, writer: &Writer) -> Result<bool, StatusErr> {
        let pending = self
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
            let now = k8s_time(now_ms());
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
                    self.event(
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
                    .aux_round(writer, &refs, &changes, &round.aux)
                    .await
                    .map_err(failed)?;
            }
            self.counters.status_rounds.fetch_add(1, Ordering::Relaxed);
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
            self.commit(b).await.map_err(StatusErr::Journal)?;
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
        writer: &Writer,
        refs: &AuxiliaryFileReferences,
        changes: &[decide::PodChange],
        aux: &[decide::AuxChange],
    ) -> Result<bool, WriteError> {
        let f = |file, generation, st: Option<&crate::k8s::crd::AuxiliaryFileStatus>| {
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

enum StatusErr {
    Journal(PublisherError),
    /// A write failed; `items` are the round's items of that object (acked when the failure
    /// is a permanent rejection).
    Write {
        error: WriteError,
        items: Vec<(Queue, WorkKey, haptic_journal::WorkId)>,
    },
}
