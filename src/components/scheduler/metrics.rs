//! The scheduler's metric families, read from [`SchedulerStats`] at scrape time: the runtime
//! registers them ([`crate::telemetry::Metrics::register`] of `SchedulerHandle::stats`).
//!
//! | family | labels | from |
//! |---|---|---|
//! | `haptic_retries_total` | `component` = `deployment-scheduler` ([`RETRIES`], shared with the publisher) | `timeouts` |
//! | `haptic_scheduler_deployments_started_total` | | `started` |
//! | `haptic_scheduler_timeouts_total` | | `timeouts` |
//! | `haptic_scheduler_endpoints_given_up_total` | | `given_up` |

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

impl CounterSource for Arc<SchedulerStats> {
    const SERIES: &'static [Series] = &[
        Series::labelled(&RETRIES, "component", "deployment-scheduler"),
        Series::of(&STARTED),
        Series::of(&TIMEOUTS),
        Series::of(&GIVEN_UP),
    ];

    fn read(&self) -> Vec<u64> {
        let timeouts = self.timeouts.load(Relaxed);
        vec![
            timeouts,
            self.started.load(Relaxed),
            timeouts,
            self.given_up.load(Relaxed),
        ]
    }

    fn same(&self, other: &Self) -> bool {
        Arc::ptr_eq(self, other)
    }
}
