//! The scheduler's metric families, read from [`SchedulerStats`] at scrape time: the runtime
//! registers them ([`crate::telemetry::Metrics::register`] of `SchedulerHandle::stats`).
//!
//! | family | labels | from |
//! |---|---|---|
//! | `haptic_retries_total` | `component` = `deployment-scheduler` ([`RETRIES`], shared with the publisher) | `timeouts` |
//! | `haptic_scheduler_deployments_started_total` | | `started` |
//! | `haptic_scheduler_timeouts_total` | | `timeouts` |
//! | `haptic_scheduler_endpoints_given_up_total` | | `given_up` |
//! | `haptic_scheduler_quarantined_total` | | `quarantined`: permanent rejections that (re)quarantined a render for a pod |
//! | `haptic_scheduler_quarantine_retries_total` | | `quarantine_retries`: quarantined renders sent again after their backoff |

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use super::SchedulerStats;
use crate::telemetry::{CounterFamily, CounterSource, RETRIES, Series};

static STARTED: CounterFamily = CounterFamily {
    name: "haptic_scheduler_deployments_started",
    help: "Deployments started by the scheduler (including resumed ones)",
};
static TIMEOUTS: CounterFamily = CounterFamily {
    name: "haptic_scheduler_timeouts",
    help: "Deployments cancelled after their timeout",
};
static GIVEN_UP: CounterFamily = CounterFamily {
    name: "haptic_scheduler_endpoints_given_up",
    help: "Endpoints given up after the timeout retries",
};

static QUARANTINED: CounterFamily = CounterFamily {
    name: "haptic_scheduler_quarantined",
    help: "Permanent rejections of a render by a pod that quarantined it (again)",
};
static QUARANTINE_RETRIES: CounterFamily = CounterFamily {
    name: "haptic_scheduler_quarantine_retries",
    help: "Quarantined renders sent to a pod again after their backoff (one per pod)",
};

impl CounterSource for Arc<SchedulerStats> {
    const SERIES: &'static [Series] = &[
        Series::labelled(&RETRIES, "component", "deployment-scheduler"),
        Series::of(&STARTED),
        Series::of(&TIMEOUTS),
        Series::of(&GIVEN_UP),
        Series::of(&QUARANTINED),
        Series::of(&QUARANTINE_RETRIES),
    ];

    fn read(&self) -> Vec<u64> {
        let timeouts = self.timeouts.load(Relaxed);
        vec![
            timeouts,
            self.started.load(Relaxed),
            timeouts,
            self.given_up.load(Relaxed),
            self.quarantined.load(Relaxed),
            self.quarantine_retries.load(Relaxed),
        ]
    }

    fn same(&self, other: &Self) -> bool {
        Arc::ptr_eq(self, other)
    }
}
