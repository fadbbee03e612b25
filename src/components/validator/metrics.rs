//! The validator's metric families (upstream HAPTIC's names), read from [`ValidationStats`]
//! at scrape time: the runtime registers them ([`crate::telemetry::Metrics::register`]).
//!
//! | family | labels | from |
//! |---|---|---|
//! | `haptic_validation_total` (upstream name) | | `passed` + `failed` |
//! | `haptic_validation_errors_total` (upstream name) | | `failed` |

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use super::ValidationStats;
use crate::telemetry::{CounterFamily, CounterSource, Series};

static VALIDATION: CounterFamily = CounterFamily {
    name: "haptic_validation",
    help: "Render validations (haproxy -c), passed or failed (upstream HAPTIC's name)",
};
static VALIDATION_ERRORS: CounterFamily = CounterFamily {
    name: "haptic_validation_errors",
    help: "Render validations that rejected the render (upstream HAPTIC's name)",
};

impl CounterSource for Arc<ValidationStats> {
    const SERIES: &'static [Series] = &[Series::of(&VALIDATION), Series::of(&VALIDATION_ERRORS)];

    fn read(&self) -> Vec<u64> {
        let failed = self.failed.load(Relaxed);
        vec![self.passed.load(Relaxed).saturating_add(failed), failed]
    }

    fn same(&self, other: &Self) -> bool {
        Arc::ptr_eq(self, other)
    }
}
