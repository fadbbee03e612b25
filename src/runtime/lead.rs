//! Lead: the Lease elector and the leader-only components (scheduler + deployer, drift
//! monitor, config publisher). They run on every replica but act only while it leads: the
//! dispatcher gates their delivery on a live `leader.became`, they gate themselves, and every
//! external write checks the elector's guard first (DESIGN.md J7). The elector itself starts
//! last, with the inputs ([`super::inputs`]): its `leader.became` is an input like any other.

use std::sync::Arc;
use std::time::Duration;

use crate::components::deployer::{self, Deployer, DeployerSettings};
use crate::components::drift;
use crate::components::publisher::{self, ConfigPublisher, PublisherConfig};
use crate::components::scheduler::{
    self, SchedulerHandle, SchedulerSettings, SchedulerShell, SchedulerState,
};
use crate::dataplane::{ClientSettings, Dataplane};
use crate::k8s::lease::{LeaderElector, LeaseGuard};
use crate::telemetry::{HealthCheck, Metrics};

use super::RuntimeError;
use super::args::RunArgs;
use super::open::{Opened, Probes};
use super::wire::{LeaderSubscriptions, Wired};

/// The leader-only components, running (idle while following).
pub(super) struct Leading {
    /// The elector's fencing guard, checked before every external write.
    guard: LeaseGuard,
    /// The deployer (the scheduler drives it).
    pub(super) deployer: Arc<Deployer>,
    /// The scheduler's handle (drain, counters, stall check).
    pub(super) scheduler: SchedulerHandle,
    /// The config publisher.
    pub(super) publisher: ConfigPublisher,
    /// The drift monitor's handle (counters, stall check).
    drift: drift::DriftHandle,
}

impl Leading {
    /// The fencing check, as the components and reporters take it.
    pub(super) fn lease(&self) -> Arc<dyn crate::core::guard::LeaseGuard> {
        Arc::new(self.guard.clone())
    }

    /// Registers the components' counters on `metrics`.
    pub(super) fn register_metrics(&self, metrics: &Metrics) {
        metrics.register(self.deployer.clone());
        metrics.register(self.publisher.clone());
        metrics.register(self.scheduler.stats.clone());
        metrics.register(self.drift.clone());
    }

    /// The liveness checks of the components, by component, in order (scheduler, deployer,
    /// drift monitor).
    pub(super) fn stall_checks(&self) -> Vec<(&'static str, HealthCheck)> {
        vec![
            (
                scheduler::COMPONENT,
                Arc::new(crate::telemetry::component_stall_check(
                    self.scheduler.health.clone(),
                )),
            ),
            (deployer::COMPONENT, {
                let deployer = self.deployer.clone();
                Arc::new(crate::telemetry::handler_stall_check(move |now_ms| {
                    deployer.health.stalled(now_ms)
                }))
            }),
            (drift::COMPONENT, {
                let drift = self.drift.clone();
                Arc::new(crate::telemetry::timer_stall_check(
                    "drift timer",
                    move |now_ms| drift.stalled(now_ms),
                ))
            }),
        ]
    }
}

/// Builds the elector, the deployer, the scheduler, the publisher and the drift monitor, and
/// starts the three component tasks (scheduler, drift monitor, publisher). The elector is
/// returned unstarted ([`super::inputs::start`] runs it).
///
/// # Errors
/// [`RuntimeError::Dataplane`] when the Dataplane HTTP client cannot be built.
pub(super) fn start(
    args: &RunArgs,
    opened: &Opened,
    wired: &Wired,
    subscriptions: LeaderSubscriptions,
    probes: &Probes,
) -> Result<(Leading, LeaderElector), RuntimeError> {
    let LeaderSubscriptions {
        scheduler: scheduler_sub,
        drift: drift_sub,
        publisher: publisher_sub,
    } = subscriptions;
    let (dispatch, client, identity) = (&wired.dispatch, &opened.client, &opened.identity);
    let floor_journal = opened.journal.clone();
    let elector = LeaderElector::new(client.clone(), opened.lease.clone())
        .with_term_floor(move || floor_journal.term().map_or(0, |t| t.0));
    let guard = elector.guard();

    let dataplane = Dataplane::new(&ClientSettings {
        user_agent: crate::k8s::client::user_agent(identity),
        ..ClientSettings::default()
    })
    .map_err(RuntimeError::Dataplane)?;
    let deployer = Arc::new(Deployer::new(
        dispatch.clone(),
        dataplane,
        DeployerSettings {
            max_parallel: args.max_parallel,
            raw_push_threshold: args.raw_push_threshold,
            endpoint_timeout: args
                .deployment_timeout
                .saturating_sub(Duration::from_secs(5))
                .max(args.deployment_timeout / 2),
            credentials: opened.credentials.first.clone(),
            credentials_source: Some(opened.credentials.rx.clone()),
            validator_version: Some(opened.validator.version().to_owned()),
            history: haptic_journal::HistoryRetention {
                max_entries_per_pod: args.history_max_entries,
                max_age: args.history_max_age,
            },
            ..DeployerSettings::default()
        },
        Arc::new(guard.clone()),
        Some(crate::k8s::events::notice_hook(
            client.clone(),
            identity,
            &wired.runtime_config,
            crate::k8s::events::EVENT_WRITE_TIMEOUT,
        )),
    ));
    let state = SchedulerState::new(
        SchedulerSettings {
            quarantine_retry_initial: super::settings::quarantine_retry_initial(args),
            quarantine_retry_max: args.quarantine_retry_max,
            ..SchedulerSettings::with_intervals(
                args.min_deployment_interval,
                args.deployment_timeout,
            )
        },
        format!("{identity}-{}", haptic_journal::UnixMillis::now().0),
    );
    let (shell, scheduler) =
        SchedulerShell::new(state, dispatch.clone(), deployer.clone(), scheduler_sub);
    let shell = shell.with_rollback_check(scheduler::RollbackCheck {
        renders: crate::dispatch::render::RenderStore::new(opened.journal.clone()),
        validator: opened.validator.clone(),
    });
    let publisher = ConfigPublisher::new(
        opened.journal.clone(),
        client.clone(),
        publisher_config(args, opened, wired, &guard),
    );
    publisher.attach(dispatch.clone());
    {
        // Not ready while publishing waits for an operator (CRDs missing, RBAC, credentials):
        // the message names what failed and the fix; the writes are retried meanwhile.
        let publisher = publisher.clone();
        probes
            .health
            .add_readiness("publisher", move || match publisher.blocked() {
                None => Ok(()),
                Some(why) => Err(format!(
                    "publishing is blocked until an operator acts: {why}"
                )),
            });
    }

    let (critical, work) = (&wired.tasks.critical, &wired.tasks.work);
    critical.spawn(scheduler::COMPONENT, shell.run(work.clone()));
    let drift = drift::DriftHandle::default();
    critical.spawn(
        drift::COMPONENT,
        drift::run(
            args.drift_prevention_interval,
            dispatch.clone(),
            drift_sub,
            drift.clone(),
            work.clone(),
        ),
    );
    {
        let (p, w) = (publisher.clone(), work.clone());
        critical.spawn(publisher::COMPONENT, async move {
            p.run(publisher_sub, w).await
        });
    }
    let leading = Leading {
        guard,
        deployer,
        scheduler,
        publisher,
        drift,
    };
    Ok((leading, elector))
}

/// The publisher's settings from the flags, fenced by `guard`.
fn publisher_config(
    args: &RunArgs,
    opened: &Opened,
    wired: &Wired,
    guard: &LeaseGuard,
) -> PublisherConfig {
    let mut cfg = PublisherConfig::new(wired.identity.clone(), &opened.namespace);
    cfg.owner.clone_from(&wired.owner);
    cfg.publish_interval = args.publish_interval;
    cfg.compression_threshold_bytes = args.compression_threshold;
    cfg.retry = publisher::decide::RetryPolicy {
        initial: args.publish_retry_initial,
        max_delay: args.publish_retry_max,
    };
    cfg.request_timeout = args.kube_request_timeout;
    cfg.reporter_instance = Some(opened.identity.clone());
    cfg.lease = Arc::new(guard.clone());
    cfg
}
