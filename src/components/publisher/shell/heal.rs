//! Self-healing: watch the published objects and ask the publish worker for a repeat when one
//! of them is deleted or edited by someone else ([`decide::outside_edit`] over the term's heal
//! cache). The watch of the main HAProxyCfg also keeps its last status in the cache (so a
//! restored object gets it back) and turns a new value of its annotation
//! `haproxy-haptic.org/retry-rejected` into `deployment.retry.request` and of
//! `haproxy-haptic.org/rollback-to` into `deployment.rollback.request` through the router (with
//! or without self-healing).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt as _;
use haptic_journal::Term;
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt as _};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::cache::HealCache;
use super::context::Context;
use super::failures::sleep_or_cancel;
use super::router::RouterHandle;
use crate::components::publisher::decide::{self, Seen};
use crate::k8s::crd::{HAProxyCfgStatus, conditions, labels};

/// What the `RolledBack` condition of the HAProxyCfg `obj` shows (nothing without one).
fn rollback_shown<K: serde::Serialize>(obj: &K) -> crate::k8s::crd::RollbackShown {
    serde_json::to_value(obj)
        .ok()
        .and_then(|mut v| v.get_mut("status").map(serde_json::Value::take))
        .and_then(|s| serde_json::from_value::<HAProxyCfgStatus>(s).ok())
        .map(|s| crate::k8s::crd::RollbackShown::of(&s.conditions))
        .unwrap_or_default()
}

/// One watch of one kind of published object, for one term.
pub(super) struct HealWatch {
    pub(super) ctx: Arc<Context>,
    /// Where retry requests go (the watch of the main HAProxyCfg only).
    pub(super) retries: Option<RouterHandle>,
    /// The term's heal cache.
    pub(super) cache: Arc<HealCache>,
    /// The term's heal request, read by the publish worker.
    pub(super) heal: Arc<AtomicBool>,
    pub(super) term: Term,
    pub(super) cancel: CancellationToken,
}

impl HealWatch {
    /// Watches `api` (objects matching `selector`) until the term ends.
    pub(super) async fn run<K>(self, api: Api<K>, selector: String)
    where
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
        let main = self.ctx.cfg.haproxycfg_name();
        // The render `RolledBack=True` names, as this watch last saw it (see `held_changed`).
        let mut held: Option<Option<haptic_journal::Checksum>> = None;
        loop {
            let ev = tokio::select! {
                () = self.cancel.cancelled() => return,
                ev = stream.next() => ev,
            };
            let Some(ev) = ev else { return };
            let (o, deleted) = match ev {
                Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => (o, false),
                Ok(watcher::Event::Delete(o)) => (o, true),
                Ok(_) => continue,
                Err(e) => {
                    debug!(error = %e, "heal watch error");
                    if !sleep_or_cancel(Duration::from_millis(500), &self.cancel).await {
                        return;
                    }
                    continue;
                }
            };
            let key = (kind.clone(), o.name_any());
            if kind == "HAProxyCfg" && key.1 == main {
                self.remember_status(&o);
                let shown = rollback_shown(&o);
                let now_held = shown.held.as_ref().map(|(_, c)| *c);
                let changed = match held {
                    Some(h) => h != now_held,
                    None => now_held.is_some(),
                };
                if !deleted && changed {
                    // Pod reports of the held render were parked while the condition was not
                    // there yet (the spec never moves back): they can be shown now.
                    if let Err(e) = self.ctx.commit.unpark_all().await {
                        warn!(error = %e, "publisher: journal failure unparking statuses; stopping the term");
                        self.cancel.cancel();
                        return;
                    }
                    self.ctx.wake.status.notify_one();
                }
                held = Some(now_held);
                if !deleted && let Err(e) = self.retry_rejected(o.meta()).await {
                    warn!(error = %e, "publisher: journal failure recording a retry request; stopping the term");
                    self.cancel.cancel();
                    return;
                }
                if !deleted && let Err(e) = self.rollback(o.meta(), shown).await {
                    warn!(error = %e, "publisher: journal failure recording a rollback request; stopping the term");
                    self.cancel.cancel();
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
            let drifted = self
                .cache
                .with(|c| decide::outside_edit(c, &key, &seen, self.term));
            if drifted && self.ctx.cfg.self_heal {
                info!(kind = %kind, name = %key.1, deleted, "published object deleted or edited by someone else; restoring");
                self.heal.store(true, Ordering::Release);
                self.ctx.wake.publish.notify_one();
            }
        }
    }

    /// Hands the annotation [`labels::RETRY_REJECTED`] of the main HAProxyCfg to the router,
    /// which journals `deployment.retry.request` when it is a new value.
    ///
    /// # Errors
    /// The journal commit failed ([`crate::components::publisher::PublisherError`]).
    ///
    /// # Cancel safety
    /// Dropped before the router answers, the request may or may not be journaled; a value not
    /// journaled is seen again at the watch's next event for the object.
    async fn retry_rejected(
        &self,
        meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    ) -> Result<(), crate::components::publisher::PublisherError> {
        let Some(router) = &self.retries else {
            return Ok(());
        };
        let Some(value) = meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(labels::RETRY_REJECTED))
            .cloned()
        else {
            return Ok(());
        };
        router.retry_requested(value).await
    }

    /// Hands the annotation [`labels::ROLLBACK_TO`] of the main HAProxyCfg (or its absence) to
    /// the router, which journals `deployment.rollback.request` when it changed.
    ///
    /// # Errors
    /// The journal commit failed ([`crate::components::publisher::PublisherError`]).
    ///
    /// # Cancel safety
    /// As [`HealWatch::retry_rejected`].
    async fn rollback(
        &self,
        meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
        shown: crate::k8s::crd::RollbackShown,
    ) -> Result<(), crate::components::publisher::PublisherError> {
        let Some(router) = &self.retries else {
            return Ok(());
        };
        let value = meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(labels::ROLLBACK_TO))
            .cloned();
        router.rollback_requested(value, shown).await
    }

    /// Keeps the status of the main HAProxyCfg `obj` when it has pod entries or conditions
    /// besides `Published` and `Synced` (which a publication writes itself: a recreated
    /// object's first status has only those, and must not replace what the deleted object
    /// had).
    fn remember_status<K: serde::Serialize>(&self, obj: &K) {
        let status = serde_json::to_value(obj)
            .ok()
            .and_then(|mut v| v.get_mut("status").map(serde_json::Value::take))
            .and_then(|s| serde_json::from_value::<HAProxyCfgStatus>(s).ok());
        if let Some(s) = status
            && (s
                .conditions
                .iter()
                .any(|c| c.type_ != conditions::PUBLISHED && c.type_ != conditions::SYNCED)
                || !s.deployed_to_pods.is_empty())
        {
            self.cache.with(|c| c.status = Some(s));
        }
    }
}
