//! The publisher's metric families, read from its [`Counters`] at scrape time: the runtime
//! registers the publisher ([`crate::telemetry::Metrics::register`] of a [`ConfigPublisher`]).
//!
//! | family | labels | from |
//! |---|---|---|
//! | `haptic_publishes_total` | `result` = `success`, `given_up` (ended by a permanent rejection) | `publications`, `given_up` |
//! | `haptic_retries_total` | `component` = `config-publisher` ([`RETRIES`], shared with the scheduler) | `retries` |
//! | `haptic_config_published_total` | | `config_published` |
//! | `haptic_publisher_blocked_attempts_total` | | `blocked` (401, 403, missing CRD; retried) |
//! | `haptic_publisher_heals_total` | | `heals` |
//! | `haptic_status_write_rounds_total` | | `status_rounds` |

use std::sync::atomic::Ordering::Relaxed;

use super::{ConfigPublisher, Counters};
use crate::telemetry::{CounterFamily, CounterSource, RETRIES, Series};

static PUBLISHES: CounterFamily = CounterFamily {
    name: "haptic_publishes",
    help: "Publications of the main HAProxyCfg, by result",
};
static CONFIG_PUBLISHED: CounterFamily = CounterFamily {
    name: "haptic_config_published",
    help: "ConfigPublished events journaled",
};
static BLOCKED: CounterFamily = CounterFamily {
    name: "haptic_publisher_blocked_attempts",
    help: "Failed publisher writes that need an operator (401, 403, a missing CRD); retried",
};
static HEALS: CounterFamily = CounterFamily {
    name: "haptic_publisher_heals",
    help: "Self-healing republications of changed or deleted objects",
};
static STATUS_ROUNDS: CounterFamily = CounterFamily {
    name: "haptic_status_write_rounds",
    help: "Per-pod status write rounds",
};

impl CounterSource for ConfigPublisher {
    const SERIES: &'static [Series] = &[
        Series::labelled(&PUBLISHES, "result", "success"),
        Series::labelled(&PUBLISHES, "result", "given_up"),
        Series::labelled(&RETRIES, "component", "config-publisher"),
        Series::of(&CONFIG_PUBLISHED),
        Series::of(&BLOCKED),
        Series::of(&HEALS),
        Series::of(&STATUS_ROUNDS),
    ];

    fn read(&self) -> Vec<u64> {
        let c: &Counters = self.counters();
        vec![
            c.publications.load(Relaxed),
            c.given_up.load(Relaxed),
            c.retries.load(Relaxed),
            c.config_published.load(Relaxed),
            c.blocked.load(Relaxed),
            c.heals.load(Relaxed),
            c.status_rounds.load(Relaxed),
        ]
    }

    fn same(&self, other: &Self) -> bool {
        std::ptr::eq(self.counters(), other.counters())
    }
}
