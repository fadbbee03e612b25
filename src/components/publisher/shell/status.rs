//! The status worker: per-pod status (coalesced, one write per object per round), parking,
//! and the known pod set seeded from the published status.

use super::*;

impl Inner {
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
                    Ok(true) => {
                        attempt = 0;
                        last = Some(Instant::now());
                    }
                    Ok(false) => {}
                    Err(StatusErr::Journal(e)) => {
                        warn!(error = %e, "status worker: journal failure; stopping");
                        return;
                    }
                    Err(StatusErr::Write(e)) if stop_term_on(&e, &cancel) => return,
                    Err(StatusErr::Write(e)) => {
                        attempt += 1;
                        match decide::on_failure(
                            &self.cfg.retry,
                            e.kind(),
                            attempt,
                            e.retry_after(),
                        ) {
                            Retry::After(d) => {
                                self.counters.retries.fetch_add(1, Ordering::Relaxed);
                                warn!(error = %e, attempt, "status write failed; retrying");
                                wait = Some(d);
                            }
                            Retry::GiveUp => {
                                self.counters.given_up.fetch_add(1, Ordering::Relaxed);
                                warn!(error = %e, "status write rejected; items released");
                                attempt = 0;
                                if self.drop_pending().await.is_err() {
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

    async fn drop_pending(&self) -> Result<(), PublisherError> {
        let mut b = Batch::new();
        for e in self.queue(Queue::StatusPending)? {
            b.ack(e.queue, e.key.clone(), e.record.id);
        }
        self.commit(b).await.map(|_| ())
    }

    /// One round over every pending status. `Ok(true)` when something was written.
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
            let changes: Vec<PodEntryChange> = entries
                .iter()
                .filter_map(|e| match &e.record.item {
                    WorkItem::Status(s) => Some(match &s.change {
                        PodStatusChange::Applied { checksum, .. } => PodEntryChange::Applied {
                            pod: s.pod.name.as_str().to_owned(),
                            checksum: *checksum,
                            merge: decide::merge_pod_entry,
                            input: Box::new(PodStatusInput {
                                pod: s.pod.name.as_str().to_owned(),
                                namespace: s.pod.namespace.as_str().to_owned(),
                                change: s.change.clone(),
                            }),
                        },
                        PodStatusChange::Removed => PodEntryChange::Removed {
                            pod: s.pod.name.as_str().to_owned(),
                        },
                    }),
                    _ => None,
                })
                .collect();
            let outcomes = writer
                .update_pod_statuses(&name, &changes)
                .await
                .map_err(StatusErr::Write)?;
            self.counters.status_rounds.fetch_add(1, Ordering::Relaxed);
            let mut b = Batch::new();
            for (e, o) in entries.iter().zip(outcomes) {
                match (o, &e.key) {
                    (PodEntryOutcome::Done, k) => {
                        wrote = true;
                        b.ack(e.queue, k.clone(), e.record.id);
                    }
                    (PodEntryOutcome::Park, WorkKey::Pod(k)) => {
                        b.park(k.clone(), e.record.id);
                    }
                    (PodEntryOutcome::Park, _) => {}
                }
            }
            self.commit(b).await.map_err(StatusErr::Journal)?;
        }
        Ok(wrote)
    }

    pub(super) async fn seed_known_pods(self: Arc<Self>, writer: Writer) {
        let name = self.cfg.haproxycfg_name();
        let Ok(Some(cfg)) = writer.get_cfg(&name).await else {
            return;
        };
        let mut r = self
            .router
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for p in cfg.status.iter().flat_map(|s| s.deployed_to_pods.iter()) {
            let ns = p
                .namespace
                .clone()
                .unwrap_or_else(|| self.cfg.namespace.clone());
            r.known_pods
                .entry(p.pod_name.clone())
                .or_insert_with(|| haptic_journal::PodRef {
                    namespace: ns.into(),
                    name: p.pod_name.as_str().into(),
                });
        }
    }
}

enum StatusErr {
    Journal(PublisherError),
    Write(WriteError),
}
