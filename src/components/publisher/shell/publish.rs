//! The publish worker: validation- and deploy-driven publications of the main HAProxyCfg,
//! the throttle, retries, and the ack that moves the published checkpoint. The pick, the
//! spec rule and the retry rule are [`decide`]'s.

use super::*;

impl Inner {
    /// One main-HAProxyCfg publication with retries. Returns true when it committed (or was
    /// stale and released), false when cancelled or superseded (item left as it is / acked).
    /// While it runs, its objects are the cache's `in_flight` set (the heal watch does not take
    /// their writes, or the GC of what it drops, for outside edits).
    pub(super) async fn publish_main(
        &self,
        writer: &Writer,
        cancel: &CancellationToken,
        entry: Option<&WorkEntry>,
        extra_acks: &[&WorkEntry],
        drain: bool,
    ) -> Result<bool, PublisherError> {
        let r = self
            .publish_main_inner(writer, cancel, entry, extra_acks, drain)
            .await;
        let mut c = self
            .cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // An incomplete publication (superseded, cancelled, rejected) still wrote some of its
        // objects: their late events are ours too. A rejected one asks for a heal itself.
        if let Some(partial) = c.in_flight.take() {
            c.previous.push_front(partial);
            c.previous.truncate(HEAL_HISTORY);
        }
        drop(c);
        r
    }

    fn set_in_flight(&self, writer: &Writer, spec: &PublishSpec<'_>) {
        let objects = writer
            .planned_objects(spec)
            .into_iter()
            .map(|o| ((o.kind.to_owned(), o.name), o.content))
            .collect();
        self.cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .in_flight = Some(objects);
    }

    #[allow(clippy::too_many_lines)]
    async fn publish_main_inner(
        &self,
        writer: &Writer,
        cancel: &CancellationToken,
        entry: Option<&WorkEntry>,
        extra_acks: &[&WorkEntry],
        drain: bool,
    ) -> Result<bool, PublisherError> {
        let name = self.cfg.haproxycfg_name();
        let cp = self.checkpoint(&name);
        let (render, render_seq, rendered_at, validated_at, correlation, deployment) =
            match entry.map(|e| &e.record.item) {
                Some(WorkItem::Publish(p)) => (
                    p.render,
                    p.render_seq,
                    Some(p.rendered_at),
                    Some(p.validated_at),
                    p.correlation.clone(),
                    None,
                ),
                Some(WorkItem::PublishDeployed(d)) => (
                    d.render,
                    d.render_seq,
                    None,
                    None,
                    d.correlation.clone(),
                    Some(d.clone()),
                ),
                // A self-healing repeat of the last complete publication.
                _ => match &cp {
                    Some(c) => (
                        c.render,
                        c.render_seq,
                        None,
                        None,
                        Correlation::new("self-heal"),
                        None,
                    ),
                    None => return Ok(true),
                },
            };
        // A repeat (term start, self-healing) never overwrites another leader's newer render:
        // when the cluster holds another checksum stamped by another term, leave it (queued
        // work of ours still publishes; dedup compares with the cluster, not only the journal).
        if entry.is_none() {
            match writer.get_cfg(&name).await {
                Ok(Some(live))
                    if live.spec.checksum != render
                        && crate::k8s::writer::stamped_term(&live.metadata)
                            != Some(writer.config().term) =>
                {
                    info!(name = %name, "cluster holds another leader's render; repeat skipped");
                    return Ok(true);
                }
                // The spec holds a render whose publication is queued (newer than the
                // checkpoint): that publication completes it; the repeat runs after it.
                Ok(Some(live))
                    if live.spec.checksum != render
                        && self.render_queued(live.spec.checksum)? =>
                {
                    debug!(name = %name, "spec holds a queued render; repeat deferred");
                    self.heal.store(true, Ordering::Release);
                    return Ok(false);
                }
                Ok(_) => {}
                Err(e) => {
                    debug!(error = %e, "repeat: read failed; trying the publication");
                }
            }
        }
        // The spec never moves backwards in render sequence.
        let moves = decide::publication(
            render,
            render_seq,
            cp.as_ref().map(|c| (c.render, c.render_seq)),
        );
        if let Some(e) = entry
            && moves == decide::Publication::Older
        {
            debug!(seq = render_seq.0, "older render: spec left as it is");
            let mut b = Batch::new();
            b.ack(e.queue, e.key.clone(), e.record.id);
            for x in extra_acks {
                b.ack(x.queue, x.key.clone(), x.record.id);
            }
            self.commit(b).await?;
            return Ok(true);
        }
        let (manifest, content) = match self.load_render(render) {
            Ok(x) => x,
            Err(e) => {
                // Permanent (Unbuildable): recorded and shown by `failed`, then released.
                self.failed(writer, Worker::Publish, &e, 1, cancel, entry.is_some())
                    .await;
                if let Some(e) = entry {
                    let mut b = Batch::new();
                    b.ack(e.queue, e.key.clone(), e.record.id);
                    self.commit(b).await?;
                }
                return Ok(true);
            }
        };
        // A queued publication that completes sets `Published=True` and, since every object
        // fit, `SizeLimitExceeded=False`; a self-healing repeat of the checkpoint leaves the
        // conditions as they are (they may show a rejection of a newer render, which the
        // repeat does not undo).
        let published: Vec<Condition> = entry
            .map(|_| {
                let now = k8s_time(now_ms());
                [
                    decide::published_condition(&now),
                    decide::within_size_limit_condition(&now),
                ]
            })
            .into_iter()
            .flatten()
            .collect();
        let mut attempt = 0u32;
        loop {
            if cancel.is_cancelled() {
                return Ok(false);
            }
            attempt += 1;
            let spec = PublishSpec {
                name: &name,
                render: &content,
                with_files: true,
                rendered_at,
                validated_at,
                validation_error: None,
                conditions: &published,
            };
            self.set_in_flight(writer, &spec);
            let result = writer.publish(&spec).await;
            // The publication attempt moves parked statuses back to pending.
            let unparked = {
                let j = Arc::clone(&self.journal);
                tokio::task::spawn_blocking(move || j.unpark(None))
                    .await
                    .map_err(|_| PublisherError::Join)?
                    .map_err(PublisherError::Accept)?
            };
            if unparked > 0 {
                haptic_journal::crash_point!("status::after_unpark");
                self.wake.status.notify_one();
            }
            match result {
                Ok(p) => {
                    self.set_blocked(Worker::Publish, None);
                    let term = writer.config().term;
                    if !self.authoritative(term, cancel) {
                        return Ok(false);
                    }
                    let mut b = Batch::new();
                    if let Some(e) = entry {
                        b.ack(e.queue, e.key.clone(), e.record.id);
                    }
                    for x in extra_acks {
                        b.ack(x.queue, x.key.clone(), x.record.id);
                    }
                    let advances = moves == decide::Publication::Advance;
                    if advances {
                        b.hold_render(&manifest);
                        if let Some(c) = &cp {
                            b.release_blob(c.render);
                        }
                        b.put_published_checkpoint(haptic_journal::PublishedCheckpoint {
                            name: name.clone().into(),
                            render,
                            render_seq,
                            resource_version: p.resource_version.clone().map(Into::into),
                            published_at: now_ms(),
                        });
                        b.event(Event::ConfigPublished {
                            correlation: correlation.clone(),
                            runtime_config: self.cfg.runtime_config(),
                            render,
                            map_file_count: p.map_files,
                            secret_count: p.secrets,
                        });
                    }
                    if drain && let Some(d) = &deployment {
                        {
                            b.enqueue(
                                WorkItem::DrainCheckpoint(DrainCheckpoint {
                                    runtime_config: d.runtime_config.clone(),
                                    render,
                                    render_seq,
                                    deployment: d.deployment.clone(),
                                }),
                                haptic_journal::Origin::None,
                            );
                        }
                    }
                    if drain {
                        haptic_journal::crash_point!("drain::after_publish");
                    }
                    haptic_journal::crash_point!("publisher::before_publish_ack");
                    self.commit(b).await?;
                    if advances {
                        haptic_journal::crash_point!("publisher::after_config_published");
                    }
                    self.counters.publications.fetch_add(1, Ordering::Relaxed);
                    if advances {
                        self.counters
                            .config_published
                            .fetch_add(1, Ordering::Relaxed);
                        info!(name = %name, checksum = %render, "config published");
                    }
                    {
                        let mut c = self
                            .cache
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner);
                        let now: HashMap<ObjectKey, String> = p
                            .objects
                            .into_iter()
                            .map(|o| ((o.kind.to_owned(), o.name), o.content))
                            .collect();
                        if now != c.expected {
                            let old = std::mem::replace(&mut c.expected, now);
                            c.previous.push_front(old);
                            c.previous.truncate(HEAL_HISTORY);
                        }
                        c.in_flight = None;
                    }
                    if entry.is_none() {
                        self.restore_status(writer, cancel).await;
                    }
                    self.wake.verdict.notify_one();
                    self.wake.status.notify_one();
                    return Ok(true);
                }
                Err(e) => match self
                    .failed(
                        writer,
                        Worker::Publish,
                        &e,
                        attempt,
                        cancel,
                        entry.is_some(),
                    )
                    .await
                {
                    Retry::StopTerm => return Ok(false),
                    Retry::After(d) => {
                        if !sleep_or_cancel(d, cancel).await {
                            return Ok(false);
                        }
                        // A repeat yields to queued publications (they are complete and
                        // newer); it runs again after them.
                        if entry.is_none() && self.publication_queued()? {
                            self.heal.store(true, Ordering::Release);
                            return Ok(false);
                        }
                        // A newer validation generation supersedes an older validation retry.
                        if let Some(e) = entry
                            && e.queue == Queue::Publish
                            && !drain
                            && self.newer_validated(render_seq, e)?
                        {
                            return Ok(false);
                        }
                    }
                    Retry::Reject => {
                        if e.is_too_large() {
                            let what = decide::too_large_message(
                                render,
                                &super::failures::rejection_message(&e),
                            );
                            let _ = writer.set_too_large(&name, &what, now_ms()).await;
                            // The pods' statuses for this render, parked until the spec had
                            // it, may be written now (the park rule).
                            let j = Arc::clone(&self.journal);
                            let unparked = tokio::task::spawn_blocking(move || j.unpark(None))
                                .await
                                .map_err(|_| PublisherError::Join)?
                                .map_err(PublisherError::Accept)?;
                            if unparked > 0 {
                                self.wake.status.notify_one();
                            }
                        }
                        // The rejected render may have reached the spec before the
                        // failure: restore the last complete publication (never a
                        // complete one older than the spec: the rejected render is not).
                        self.heal.store(true, Ordering::Release);
                        if drain {
                            return Ok(false);
                        }
                        if let Some(e) = entry {
                            let mut b = Batch::new();
                            b.ack(e.queue, e.key.clone(), e.record.id);
                            self.commit(b).await?;
                        }
                        return Ok(true);
                    }
                },
            }
        }
    }

    fn render_queued(&self, render: Checksum) -> Result<bool, PublisherError> {
        let mut all = self.queue(Queue::Publish)?;
        all.extend(self.queue(Queue::PublishDeployed)?);
        Ok(all.iter().any(|e| match &e.record.item {
            WorkItem::Publish(p) => p.render == render,
            WorkItem::PublishDeployed(d) => d.render == render,
            _ => false,
        }))
    }

    fn publication_queued(&self) -> Result<bool, PublisherError> {
        Ok(!self.queue(Queue::Publish)?.is_empty()
            || !self.queue(Queue::PublishDeployed)?.is_empty())
    }

    fn newer_validated(&self, render_seq: Seq, e: &WorkEntry) -> Result<bool, PublisherError> {
        let validated: Vec<decide::Queued> =
            self.queue(Queue::Publish)?.iter().map(queued).collect();
        Ok(decide::superseded(
            decide::Queued {
                id: e.record.id,
                render_seq,
            },
            &validated,
        ))
    }

    pub(super) async fn publish_worker(self: Arc<Self>, writer: Writer, cancel: CancellationToken) {
        let mut last: Option<Instant> = None;
        loop {
            match self.publish_round(&writer, &cancel, &mut last).await {
                Ok(Some(wait)) => {
                    tokio::select! {
                        () = cancel.cancelled() => return,
                        () = tokio::time::sleep(wait) => {}
                    }
                    continue;
                }
                Ok(None) => {}
                Err(e) => {
                    warn!(error = %e, "publish worker: journal failure; stopping");
                    return;
                }
            }
            tokio::select! {
                () = cancel.cancelled() => return,
                () = self.wake.publish.notified() => {}
            }
        }
    }

    /// Handles what is due. `Ok(Some(wait))`: throttled, come back after `wait`.
    async fn publish_round(
        &self,
        writer: &Writer,
        cancel: &CancellationToken,
        last: &mut Option<Instant>,
    ) -> Result<Option<Duration>, PublisherError> {
        loop {
            if cancel.is_cancelled() {
                return Ok(None);
            }
            let validated = self.queue(Queue::Publish)?;
            let deployed = self.queue(Queue::PublishDeployed)?;
            let heal = self.heal.load(Ordering::Acquire);
            if validated.is_empty() && deployed.is_empty() && !heal {
                return Ok(None);
            }
            if let Some(wait) =
                decide::throttle_wait(self.cfg.publish_interval, *last, Instant::now())
                && (!validated.is_empty() || !deployed.is_empty())
            {
                return Ok(Some(wait));
            }
            let _g = self.publish_lock.lock().await;
            // Validation work coalesces to the newest render; deploy work keeps arrival order.
            let v: Vec<decide::Queued> = validated.iter().map(queued).collect();
            let d: Vec<decide::Queued> = deployed.iter().map(queued).collect();
            let (pick, extra): (Option<&WorkEntry>, Vec<&WorkEntry>) =
                match decide::pick_publication(&v, &d) {
                    Some(decide::Pick::Validated { index, superseded }) => (
                        Some(&validated[index]),
                        superseded.into_iter().map(|i| &validated[i]).collect(),
                    ),
                    Some(decide::Pick::Deployed { index }) => (Some(&deployed[index]), Vec::new()),
                    None => (None, Vec::new()),
                };
            if pick.is_none() {
                self.heal.store(false, Ordering::Release);
                self.counters.heals.fetch_add(1, Ordering::Relaxed);
            }
            let done = self
                .publish_main(writer, cancel, pick, &extra, false)
                .await?;
            if pick.is_some() && done {
                *last = Some(Instant::now());
            }
            if !done && cancel.is_cancelled() {
                return Ok(None);
            }
        }
    }
}

/// A queued publication as [`decide::pick_publication`] sees it.
fn queued(e: &WorkEntry) -> decide::Queued {
    decide::Queued {
        id: e.record.id,
        render_seq: item_seq(e),
    }
}
