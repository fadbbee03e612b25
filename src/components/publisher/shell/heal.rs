//! Self-healing: watch the published objects and wake the publish worker when one of them is
//! deleted or edited by someone else. The watch of the main HAProxyCfg also turns a new value
//! of its annotation `haproxy-haptic.org/retry-rejected` into `deployment.retry.request` (with
//! or without self-healing).
//!
//! The publisher's own writes are not outside edits: an event is one only when the object
//! differs from everything this publisher wrote or expects now (see [`outside_edit`]): the
//! last complete publication, the few before it (their events may arrive late), and the
//! publication being written. An outside edit that sets an object back to the content of one
//! of those few earlier publications of this term is not noticed (documented limit). Status and metadata are not compared, so status writes never
//! count; an object the publication in progress drops (garbage collection) is not restored.

use super::*;

/// What a watch event says about one published object.
#[derive(Debug)]
pub(super) enum Seen<'a> {
    /// Created or changed: its compared content (JSON besides metadata and status) and the
    /// leadership term stamped on it.
    Applied {
        content: &'a str,
        term: Option<Term>,
    },
    /// Deleted.
    Deleted,
}

/// True when the event `seen` on `key` is an outside edit (or delete) this publisher must
/// restore; false for its own writes, status-only changes, garbage collection, objects it does
/// not publish, and objects stamped by a newer term (their writer leads; ours would be
/// refused).
pub(super) fn outside_edit(
    cache: &TermCache,
    key: &ObjectKey,
    seen: &Seen<'_>,
    ours: Term,
) -> bool {
    let planned = cache.in_flight.as_ref().map(|m| m.get(key));
    // The publication in progress drops it: its garbage collection deletes it (and an edit of
    // an object about to be deleted does not matter).
    if planned == Some(None) {
        return false;
    }
    let planned = planned.flatten();
    let expected = cache.expected.get(key);
    if planned.is_none() && expected.is_none() {
        return false;
    }
    match seen {
        Seen::Deleted => true,
        Seen::Applied { term, .. } if term.is_some_and(|t| t > ours) => false,
        Seen::Applied { content, .. } => ![planned, expected]
            .into_iter()
            .flatten()
            .chain(cache.previous.iter().filter_map(|m| m.get(key)))
            .any(|want| want == content),
    }
}

impl Inner {
    pub(super) async fn heal_watch<K>(
        self: Arc<Self>,
        api: Api<K>,
        selector: String,
        term: Term,
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
            let (o, deleted) = match ev {
                Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => (o, false),
                Ok(watcher::Event::Delete(o)) => (o, true),
                Ok(_) => continue,
                Err(e) => {
                    debug!(error = %e, "heal watch error");
                    if !sleep_or_cancel(Duration::from_millis(500), &cancel).await {
                        return;
                    }
                    continue;
                }
            };
            let key = (kind.clone(), o.name_any());
            if kind == "HAProxyCfg" && key.1 == self.cfg.haproxycfg_name() {
                self.remember_status(&o);
                if !deleted && let Err(e) = self.retry_rejected(o.meta()).await {
                    warn!(error = %e, "publisher: journal failure recording a retry request; stopping the term");
                    cancel.cancel();
                    return;
                }
            }
            let content = crate::k8s::writer::content_of(&o);
            let seen = if deleted {
                Seen::Deleted
            } else {
                Seen::Applied {
                    content: &content,
                    term: crate::k8s::writer::stamped_term(o.meta()),
                }
            };
            let drifted = {
                let c = self
                    .cache
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                outside_edit(&c, &key, &seen, term)
            };
            if drifted && self.cfg.self_heal {
                info!(kind = %kind, name = %key.1, deleted, "published object deleted or edited by someone else; restoring");
                self.heal.store(true, Ordering::Release);
                self.wake.publish.notify_one();
            }
        }
    }
}

impl Inner {
    /// Journals `deployment.retry.request` when the main HAProxyCfg's annotation
    /// [`crate::k8s::crd::labels::RETRY_REJECTED`] holds a value that is neither the one of the
    /// last request the router folded ([`decide::retry_requested`], restored from the
    /// checkpoint) nor one this process already journaled (the router folds it a moment
    /// later). Durable when this returns; the scheduler clears its quarantine and deploys the
    /// last validated render to the pods that had rejected it, once.
    ///
    /// # Errors
    /// The journal commit failed ([`PublisherError`]).
    ///
    /// # Cancel safety
    /// Dropped before the commit returns, the request may or may not be journaled; a value not
    /// journaled is seen again at the watch's next event for the object.
    async fn retry_rejected(
        &self,
        meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    ) -> Result<(), PublisherError> {
        let key = crate::k8s::crd::labels::RETRY_REJECTED;
        let Some(value) = meta.annotations.as_ref().and_then(|a| a.get(key)).cloned() else {
            return Ok(());
        };
        let new = {
            let router = self
                .router
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            decide::retry_requested(&router, Some(&value))
        } && self
            .retry_journaled
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_deref()
            != Some(&value);
        if !new {
            return Ok(());
        }
        info!(annotation = key, value = %value, "retry of rejected renders requested");
        let mut b = Batch::new();
        b.event(Event::DeploymentRetryRequest {
            correlation: haptic_journal::Correlation::new(format!("retry-rejected-{}", now_ms().0)),
            runtime_config: self.cfg.runtime_config(),
            value: value.clone(),
        });
        self.commit(b).await?;
        *self
            .retry_journaled
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(value);
        Ok(())
    }

    /// Keeps the status of the main HAProxyCfg `obj` when it has pod entries or conditions
    /// besides `Published` and `Synced` (which a publication writes itself: a recreated
    /// object's first status has only those, and must not replace what the deleted object
    /// had).
    fn remember_status<K: serde::Serialize>(&self, obj: &K) {
        let status = serde_json::to_value(obj)
            .ok()
            .and_then(|mut v| v.get_mut("status").map(serde_json::Value::take))
            .and_then(|s| serde_json::from_value::<crate::k8s::crd::HAProxyCfgStatus>(s).ok());
        if let Some(s) = status
            && (s.conditions.iter().any(|c| {
                c.type_ != crate::k8s::crd::conditions::PUBLISHED
                    && c.type_ != crate::k8s::crd::conditions::SYNCED
            }) || !s.deployed_to_pods.is_empty())
        {
            self.cache
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .status = Some(s);
        }
    }

    /// After a repeat of the last complete publication (self-healing, term start): gives the
    /// main HAProxyCfg back the conditions and per-pod entries it had before it was deleted
    /// (the last status the heal watch saw, else the gate's conditions this publisher last
    /// wrote; pods the publisher no longer knows are left out), filling only what it lacks; newer status writes are never overwritten. Write
    /// failures are logged: the next status or verdict write repairs them (a term-ending one
    /// cancels `cancel`).
    pub(super) async fn restore_status(&self, writer: &Writer, cancel: &CancellationToken) {
        let name = self.cfg.haproxycfg_name();
        let (mut conditions, pods) = {
            let c = self
                .cache
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            c.status.as_ref().map_or_else(
                || (Vec::new(), Vec::new()),
                |s| (s.conditions.clone(), s.deployed_to_pods.clone()),
            )
        };
        for c in self
            .last_conditions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
        {
            if !conditions.iter().any(|x| x.type_ == c.type_) {
                conditions.push(c.clone());
            }
        }
        // Only pods the publisher still knows (a pod removed meanwhile stays removed).
        let pods: Vec<_> = {
            let r = self
                .router
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            pods.into_iter()
                .filter(|p| r.known_pods.is_empty() || r.known_pods.contains_key(&p.pod_name))
                .collect()
        };
        if conditions.is_empty() && pods.is_empty() {
            return;
        }
        match writer.restore_status(&name, &conditions, &pods).await {
            Ok(wrote) => {
                if wrote {
                    info!(name = %name, "status restored");
                }
            }
            Err(e) => {
                if !stop_term_on(&e, cancel) {
                    warn!(error = %e, "status restore failed");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(kind: &str, name: &str) -> ObjectKey {
        (kind.to_owned(), name.to_owned())
    }

    fn cache() -> TermCache {
        let mut c = TermCache::default();
        c.expected.insert(key("HAProxyCfg", "cfg"), "v2".into());
        c.expected.insert(key("HAProxyMapFile", "old"), "m2".into());
        let mut v1 = HashMap::new();
        v1.insert(key("HAProxyCfg", "cfg"), "v1".to_owned());
        c.previous.push_front(v1);
        c
    }

    fn applied(content: &str) -> Seen<'_> {
        Seen::Applied {
            content,
            term: Some(Term(1)),
        }
    }

    #[test]
    fn own_writes_are_not_outside_edits() {
        let mut c = cache();
        let cfg = key("HAProxyCfg", "cfg");
        assert!(!outside_edit(&c, &cfg, &applied("v2"), Term(1)));
        // A late event of the previous publication.
        assert!(!outside_edit(&c, &cfg, &applied("v1"), Term(1)));
        // The publication in progress writes v3 and drops the old map (GC).
        let mut planned = HashMap::new();
        planned.insert(cfg.clone(), "v3".to_owned());
        planned.insert(key("HAProxyMapFile", "new"), "m3".to_owned());
        c.in_flight = Some(planned);
        assert!(!outside_edit(&c, &cfg, &applied("v3"), Term(1)));
        assert!(!outside_edit(
            &c,
            &key("HAProxyMapFile", "new"),
            &applied("m3"),
            Term(1)
        ));
        let old = key("HAProxyMapFile", "old");
        assert!(!outside_edit(&c, &old, &Seen::Deleted, Term(1)));
        // Objects we do not publish, and a newer term's writes.
        assert!(!outside_edit(
            &c,
            &key("HAProxyCfg", "cfg-invalid"),
            &Seen::Deleted,
            Term(1)
        ));
        let newer = Seen::Applied {
            content: "theirs",
            term: Some(Term(2)),
        };
        assert!(!outside_edit(&c, &cfg, &newer, Term(1)));
    }

    #[test]
    fn outside_edits_and_deletes_are() {
        let mut c = cache();
        let cfg = key("HAProxyCfg", "cfg");
        assert!(outside_edit(&c, &cfg, &applied("evil"), Term(1)));
        assert!(outside_edit(&c, &cfg, &Seen::Deleted, Term(1)));
        let unstamped = Seen::Applied {
            content: "evil",
            term: None,
        };
        assert!(outside_edit(
            &c,
            &key("HAProxyMapFile", "old"),
            &unstamped,
            Term(1)
        ));
        // During a publication: an edit of an object it writes is still one.
        let mut planned = HashMap::new();
        planned.insert(cfg.clone(), "v3".to_owned());
        c.in_flight = Some(planned);
        assert!(outside_edit(&c, &cfg, &applied("evil"), Term(1)));
        assert!(outside_edit(&c, &cfg, &Seen::Deleted, Term(1)));
    }
}
