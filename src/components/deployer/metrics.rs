//! The deployer's metric families, read from [`DeployerStats`] at scrape time: the deployer
//! registers itself ([`crate::telemetry::Metrics::register`] of its `Arc<Deployer>`).
//!
//! | family | labels | from |
//! |---|---|---|
//! | `haptic_deployment_total` (upstream name) | | `deployments` |
//! | `haptic_deployment_errors_total` (upstream name) | | `failed_deployments` |
//! | `haptic_deployments_deposed_total` | | `deposed` |
//! | `haptic_endpoint_syncs_total` | `result` = `success`, `failure` | `endpoint_successes`, `endpoint_failures` |
//! | `haptic_reloads_total` | | `reloads` |
//! | `haptic_endpoint_sync_modes_total` | `mode` = the [`SyncMode`] values | [`DeployerStats::mode`] |
//! | `haptic_drift_detected_total` | | `drift_detected` |

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use haptic_journal::SyncMode;

use super::{Deployer, DeployerStats};
use crate::telemetry::{CounterFamily, CounterSource, Series};

static DEPLOYMENT: CounterFamily = CounterFamily {
    name: "haptic_deployment",
    help: "Deployment runs completed (upstream HAPTIC's name)",
};
static DEPLOYMENT_ERRORS: CounterFamily = CounterFamily {
    name: "haptic_deployment_errors",
    help: "Deployment runs completed with at least one failed pod (upstream HAPTIC's name)",
};
static DEPOSED: CounterFamily = CounterFamily {
    name: "haptic_deployments_deposed",
    help: "Deployment runs stopped because the Lease was no longer valid",
};
static ENDPOINT_SYNCS: CounterFamily = CounterFamily {
    name: "haptic_endpoint_syncs",
    help: "Endpoint (pod Dataplane API) syncs, by result",
};
static RELOADS: CounterFamily = CounterFamily {
    name: "haptic_reloads",
    help: "HAProxy reloads triggered",
};
static SYNC_MODES: CounterFamily = CounterFamily {
    name: "haptic_endpoint_sync_modes",
    help: "Successful endpoint syncs, by how the configuration was applied",
};
static DRIFT_DETECTED: CounterFamily = CounterFamily {
    name: "haptic_drift_detected",
    help: "Drift checks that found a pod differing from its render",
};

/// The modes of `haptic_endpoint_sync_modes_total`, in series order, with their label values.
const MODES: [(SyncMode, &str); 8] = [
    (SyncMode::FineGrained, "fine_grained"),
    (SyncMode::Runtime, "runtime"),
    (SyncMode::RawInitial, "raw_initial"),
    (SyncMode::RawThreshold, "raw_threshold"),
    (SyncMode::RawFallback, "raw_fallback"),
    (SyncMode::RawUnmodelled, "raw_unmodelled"),
    (SyncMode::RawResync, "raw_resync"),
    (SyncMode::NoRuntimeApi, "no_runtime_api"),
];

impl CounterSource for Arc<Deployer> {
    const SERIES: &'static [Series] = &[
        Series::of(&DEPLOYMENT),
        Series::of(&DEPLOYMENT_ERRORS),
        Series::of(&DEPOSED),
        Series::labelled(&ENDPOINT_SYNCS, "result", "success"),
        Series::labelled(&ENDPOINT_SYNCS, "result", "failure"),
        Series::of(&RELOADS),
        Series::labelled(&SYNC_MODES, "mode", MODES[0].1),
        Series::labelled(&SYNC_MODES, "mode", MODES[1].1),
        Series::labelled(&SYNC_MODES, "mode", MODES[2].1),
        Series::labelled(&SYNC_MODES, "mode", MODES[3].1),
        Series::labelled(&SYNC_MODES, "mode", MODES[4].1),
        Series::labelled(&SYNC_MODES, "mode", MODES[5].1),
        Series::labelled(&SYNC_MODES, "mode", MODES[6].1),
        Series::labelled(&SYNC_MODES, "mode", MODES[7].1),
        Series::of(&DRIFT_DETECTED),
    ];

    fn read(&self) -> Vec<u64> {
        let s: &DeployerStats = &self.stats;
        let mut out = vec![
            s.deployments.load(Relaxed),
            s.failed_deployments.load(Relaxed),
            s.deposed.load(Relaxed),
            s.endpoint_successes.load(Relaxed),
            s.endpoint_failures.load(Relaxed),
            s.reloads.load(Relaxed),
        ];
        out.extend(MODES.iter().map(|(mode, _)| s.mode(*mode)));
        out.push(s.drift_detected.load(Relaxed));
        out
    }

    fn same(&self, other: &Self) -> bool {
        Arc::ptr_eq(self, other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every sync mode has its series, labelled with its journal name.
    #[test]
    fn every_sync_mode_has_a_series() {
        assert_eq!(MODES.len(), SyncMode::ALL.len());
        for mode in SyncMode::ALL {
            let label = MODES.iter().find(|(m, _)| *m == mode).map(|(_, l)| *l);
            assert_eq!(label, Some(mode.as_str()), "{mode:?}");
        }
    }
}
