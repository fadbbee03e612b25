//! Self-healing: watch the published objects and wake the publish worker when one of them is
//! deleted or edited by someone else.

use super::*;

impl Inner {
    pub(super) async fn heal_watch<K>(
        self: Arc<Self>,
        api: Api<K>,
        selector: String,
        cancel: CancellationToken,
    ) where
        K: Resource
            + Clone
            + serde::de::DeserializeOwned
            + serde::Serialize
            + std::fmt::Debug
            + Send
            + Sync
            + 'static,
        K::DynamicType: Default,
    {
        let kind = K::kind(&K::DynamicType::default()).into_owned();
        let stream = watcher(api, watcher::Config::default().labels(&selector));
        futures::pin_mut!(stream);
        loop {
            let ev = tokio::select! {
                () = cancel.cancelled() => return,
                ev = stream.next() => ev,
            };
            let Some(ev) = ev else { return };
            let drifted = match ev {
                Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                    let key = (kind.clone(), o.name_any());
                    let c = self
                        .cache
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    c.expected
                        .get(&key)
                        .is_some_and(|want| *want != content_json(&o))
                }
                Ok(watcher::Event::Delete(o)) => {
                    let key = (kind.clone(), o.name_any());
                    let c = self
                        .cache
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    c.expected.contains_key(&key)
                }
                Ok(_) => false,
                Err(e) => {
                    debug!(error = %e, "heal watch error");
                    if !sleep_or_cancel(Duration::from_millis(500), &cancel).await {
                        return;
                    }
                    false
                }
            };
            if drifted {
                info!(kind = %kind, "published object deleted or edited; restoring");
                self.heal.store(true, Ordering::Release);
                self.wake.publish.notify_one();
            }
        }
    }
}

fn content_json<K: serde::Serialize>(obj: &K) -> String {
    let mut v = serde_json::to_value(obj).unwrap_or_default();
    if let Some(m) = v.as_object_mut() {
        m.remove("metadata");
        m.remove("status");
        m.remove("apiVersion");
        m.remove("kind");
    }
    v.to_string()
}
