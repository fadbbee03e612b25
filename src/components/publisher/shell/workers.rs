//! The invalid worker (`-invalid` HAProxyCfg) and the verdict worker (ConfigValidated /
//! ConfigPinned conditions). Each acks its items only after their write succeeded or was
//! rejected permanently (recorded and shown); a term that ends leaves them queued.

use super::failures::Attempts;
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
        // The newest failure wins: the older ones are acked with it.
        let mut ack = Batch::new();
        for e in &items {
            ack.ack(e.queue, e.key.clone(), e.record.id);
        }
        let name = invalid_haproxycfg_name(self.cfg.identity.name.as_str());
        let Some(render) = item.render else {
            // A failure without a render (nothing rendered) has no bytes to publish.
            self.commit(ack).await?;
            return Ok(());
        };
        let content = match self.load_render(render) {
            Ok((_, c)) => c,
            Err(e) => {
                // Permanent: the rejected render is not in the journal (Unbuildable).
                self.failed(writer, Worker::Invalid, &e, 1, cancel, false)
                    .await;
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
            conditions: &[],
        };
        match self
            .with_retries(writer, Worker::Invalid, cancel, || writer.publish(&spec))
            .await
        {
            Attempts::Done(_) | Attempts::Rejected if !cancel.is_cancelled() => {
                self.commit(ack).await?;
            }
            _ => {}
        }
        Ok(())
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
        let conds =
            decide::verdict_conditions(v.passed, v.pinned, &v.messages, &k8s_time(now_ms()));
        // The HAProxyCfg may not exist yet: wait (unacked) for a publication to wake us.
        match self
            .with_retries(writer, Worker::Verdict, cancel, || writer.get_cfg(&name))
            .await
        {
            Attempts::Done(Some(_)) => {}
            Attempts::Done(None) | Attempts::Stopped => return Ok(()),
            Attempts::Rejected => return self.ack_all(&items).await,
        }
        match self
            .with_retries(writer, Worker::Verdict, cancel, || {
                writer.set_conditions(&name, &conds)
            })
            .await
        {
            Attempts::Done(_) => {
                *self
                    .last_conditions
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = conds.to_vec();
            }
            Attempts::Rejected => return self.ack_all(&items).await,
            Attempts::Stopped => return Ok(()),
        }
        if v.passed {
            let invalid = invalid_haproxycfg_name(self.cfg.identity.name.as_str());
            if let Attempts::Stopped = self
                .with_retries(writer, Worker::Verdict, cancel, || {
                    writer.delete_cfg(&invalid)
                })
                .await
            {
                return Ok(());
            }
        }
        if cancel.is_cancelled() {
            return Ok(());
        }
        self.ack_all(&items).await
    }

    async fn ack_all(&self, items: &[WorkEntry]) -> Result<(), PublisherError> {
        let mut b = Batch::new();
        for e in items {
            b.ack(e.queue, e.key.clone(), e.record.id);
        }
        self.commit(b).await.map(|_| ())
    }
}
