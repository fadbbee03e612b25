//! The invalid worker (`-invalid` HAProxyCfg), the verdict worker (ConfigValidated /
//! ConfigPinned conditions) and the retry helper they share.

use super::*;

impl Inner {
    pub(super) async fn invalid_worker(self: Arc<Self>, writer: Writer, cancel: CancellationToken) {
        loop {
            if let Err(e) = self.invalid_round(&writer, &cancel).await {
                warn!(error = %e, "invalid worker: journal failure; stopping");
                return;
            }
            tokio::select! {
                () = cancel.cancelled() => return,
                () = self.wake.invalid.notified() => {}
            }
        }
    }

    async fn invalid_round(
        &self,
        writer: &Writer,
        cancel: &CancellationToken,
    ) -> Result<(), PublisherError> {
        let items = self.queue(Queue::Invalid)?;
        let Some(newest) = items.last() else {
            return Ok(());
        };
        let WorkItem::Invalid(item) = &newest.record.item else {
            return Ok(());
        };
        let mut ack = Batch::new();
        for e in &items {
            ack.ack(e.queue, e.key.clone(), e.record.id);
        }
        let name = invalid_haproxycfg_name(self.cfg.identity.name.as_str());
        let Some(render) = item.render else {
            self.commit(ack).await?;
            return Ok(());
        };
        let content = match self.load_render(render) {
            Ok((_, c)) => c,
            Err(e) => {
                warn!(error = %e, "rejected render unavailable");
                self.commit(ack).await?;
                return Ok(());
            }
        };
        let spec = PublishSpec {
            name: &name,
            render: &content,
            with_files: false,
            rendered_at: None,
            validated_at: None,
            validation_error: summarize_validation_errors(&item.errors),
        };
        self.with_retries(cancel, || writer.publish(&spec)).await?;
        if !cancel.is_cancelled() {
            self.commit(ack).await?;
        }
        Ok(())
    }

    /// Runs `op` with the retry policy; `Ok(true)` when it succeeded, `Ok(false)` when it was
    /// released or cancelled.
    async fn with_retries<T, F, Fut>(
        &self,
        cancel: &CancellationToken,
        mut op: F,
    ) -> Result<bool, PublisherError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, WriteError>>,
    {
        let mut attempt = 0;
        loop {
            if cancel.is_cancelled() {
                return Ok(false);
            }
            attempt += 1;
            match op().await {
                Ok(_) => return Ok(true),
                Err(e) if stop_term_on(&e, cancel) => return Ok(false),
                Err(e) => {
                    match decide::on_failure(&self.cfg.retry, e.kind(), attempt, e.retry_after()) {
                        Retry::After(d) => {
                            self.counters.retries.fetch_add(1, Ordering::Relaxed);
                            warn!(error = %e, attempt, "write failed; retrying");
                            if !sleep_or_cancel(d, cancel).await {
                                return Ok(false);
                            }
                        }
                        Retry::GiveUp => {
                            self.counters.given_up.fetch_add(1, Ordering::Relaxed);
                            warn!(error = %e, "write rejected; released");
                            return Ok(false);
                        }
                    }
                }
            }
        }
    }

    pub(super) async fn verdict_worker(self: Arc<Self>, writer: Writer, cancel: CancellationToken) {
        loop {
            if let Err(e) = self.verdict_round(&writer, &cancel).await {
                warn!(error = %e, "verdict worker: journal failure; stopping");
                return;
            }
            tokio::select! {
                () = cancel.cancelled() => return,
                () = self.wake.verdict.notified() => {}
            }
        }
    }

    async fn verdict_round(
        &self,
        writer: &Writer,
        cancel: &CancellationToken,
    ) -> Result<(), PublisherError> {
        let items = self.queue(Queue::Verdict)?;
        let Some(newest) = items.last() else {
            return Ok(());
        };
        let WorkItem::Verdict(v) = &newest.record.item else {
            return Ok(());
        };
        let name = self.cfg.haproxycfg_name();
        let now = k8s_time(now_ms());
        let message = v.messages.first().cloned().unwrap_or_default();
        let conds = [
            Condition {
                type_: conditions::CONFIG_VALIDATED.into(),
                status: if v.passed { "True" } else { "False" }.into(),
                reason: if v.passed {
                    reasons::VALIDATION_SUCCEEDED
                } else {
                    reasons::VALIDATION_FAILED
                }
                .into(),
                message: if v.passed { String::new() } else { message },
                last_transition_time: now.clone(),
                observed_generation: None,
            },
            Condition {
                type_: conditions::CONFIG_PINNED.into(),
                status: if v.pinned { "True" } else { "False" }.into(),
                reason: if v.pinned {
                    reasons::NEWEST_RENDER_REJECTED
                } else {
                    reasons::NEWEST_RENDER_PASSED
                }
                .into(),
                message: String::new(),
                last_transition_time: now,
                observed_generation: None,
            },
        ];
        // The HAProxyCfg may not exist yet: wait (unacked) for a publication to wake us.
        match writer.get_cfg(&name).await {
            Ok(Some(_)) => {}
            Ok(None) => return Ok(()),
            Err(e) => {
                warn!(error = %e, "verdict: read failed");
                return Ok(());
            }
        }
        let ok = self
            .with_retries(cancel, || writer.set_conditions(&name, &conds))
            .await?;
        if ok {
            *self
                .last_conditions
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = conds.to_vec();
        }
        if v.passed && ok {
            let invalid = invalid_haproxycfg_name(self.cfg.identity.name.as_str());
            self.with_retries(cancel, || writer.delete_cfg(&invalid))
                .await?;
        }
        if cancel.is_cancelled() {
            return Ok(());
        }
        let mut b = Batch::new();
        for e in &items {
            b.ack(e.queue, e.key.clone(), e.record.id);
        }
        self.commit(b).await?;
        Ok(())
    }
}
