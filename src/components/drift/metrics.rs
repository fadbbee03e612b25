//! The drift monitor's metric family, read from its [`DriftHandle`] at scrape time: the
//! runtime registers the handle ([`crate::telemetry::Metrics::register`]).
//!
//! | family | labels | from |
//! |---|---|---|
//! | `haptic_drift_triggers_total` | | `triggers` |

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use super::DriftHandle;
use crate::telemetry::{CounterFamily, CounterSource, Series};

static TRIGGERS: CounterFamily = CounterFamily {
    name: "haptic_drift_triggers",
    help: "Drift prevention checks triggered",
};

impl CounterSource for DriftHandle {
    const SERIES: &'static [Series] = &[Series::of(&TRIGGERS)];

    fn read(&self) -> Vec<u64> {
        vec![self.triggers.load(Relaxed)]
    }

    fn same(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.triggers, &other.triggers)
    }
}
