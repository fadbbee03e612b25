//! The validator's HAProxy against the pods' (issue 16): renders are checked by the controller
//! image's `haproxy -c`, so a fleet of another release line may run configurations the
//! validator rejects (3.x keywords on a 2.6 validator) or reject ones it passed.
//!
//! ```text
//!  Deployer::version_report (after each completed deployment: pods whose major.minor differs)
//!     --changed--> haptic_validator_version_mismatch_pods (metric)
//!              --> log line (warn) naming both versions and the fix
//!              --> Kubernetes Event ValidatorVersionMismatch on the HAProxyCfg
//!              --> condition ValidatorVersionMismatch (True/False) on the HAProxyCfg status
//! ```
//!
//! The condition is written here, not by the config publisher: a read of the HAProxyCfg, the
//! condition set by type (`crd::set_condition`: the transition time moves only with the
//! status), then a resourceVersion-guarded `replace_status`, only while the Lease is valid. The
//! publisher's own condition writes merge by type, so neither removes the other's. (When the
//! publisher grows an input for foreign conditions, this write moves there.)
//!
//! # Inputs
//! [`VersionReport`]s; the Lease guard.
//! # Effects
//! The metric, one log line, one Event per change, the condition.
//! # Journal records
//! None (it is re-derived from the pods after a restart, at the first deployment).

use std::sync::Arc;
use std::time::Duration;

use haptic_journal::RuntimeConfigRef;
use kube::runtime::events::EventType;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::notify::{self, Notifier};
use crate::components::deployer::VersionReport;
use crate::core::guard::LeaseGuard;
use crate::core::version::{HaproxyVersion, fix_for};
use crate::k8s::crd::{self, conditions, reasons};
use crate::telemetry::Metrics;

/// Time between attempts at the condition while the HAProxyCfg does not exist yet or a write
/// failed.
const RETRY: Duration = Duration::from_secs(2);

/// The condition for `report`: `None` when the validator's version is unknown.
#[must_use]
pub fn condition(report: &VersionReport) -> Option<(bool, String)> {
    let validator = HaproxyVersion::parse(report.validator.as_deref()?)?;
    if report.mismatched.is_empty() {
        return Some((
            false,
            format!("every pod runs HAProxy {validator}, as the validator does"),
        ));
    }
    let pods: Vec<String> = report
        .mismatched
        .iter()
        .map(|(p, v)| format!("{}: {v}", p.name))
        .collect();
    let theirs = report
        .mismatched
        .iter()
        .find_map(|(_, v)| HaproxyVersion::parse(v));
    let fix = theirs.map_or_else(String::new, |v| format!("; fix: {}", fix_for(v)));
    Some((
        true,
        format!(
            "the validator's haproxy -c is HAProxy {validator} but {} pod(s) run another \
             version ({}): renders are checked by another HAProxy than the one that runs them{fix}",
            pods.len(),
            pods.join(", ")
        ),
    ))
}

/// Follows the deployer's reports until `cancel` fires or the deployer is gone.
///
/// # Cancel safety
/// Cancel safe.
pub(super) async fn run(
    mut rx: watch::Receiver<VersionReport>,
    notifier: Notifier,
    client: kube::Client,
    runtime_config: RuntimeConfigRef,
    metrics: Arc<Metrics>,
    lease: Arc<dyn LeaseGuard>,
    cancel: CancellationToken,
) {
    let mut written: Option<(bool, String)> = None;
    let mut announced: Option<VersionReport> = None;
    loop {
        let report = rx.borrow_and_update().clone();
        metrics.set_version_mismatch_pods(report.mismatched.len() as u64);
        let wanted = condition(&report);
        if let Some((true, message)) = &wanted
            && announced.as_ref() != Some(&report)
        {
            tracing::warn!(
                validator = report.validator.as_deref().unwrap_or_default(),
                pods = ?report.mismatched,
                %message,
                "validator haproxy version differs from the pods"
            );
            notifier.emit(
                EventType::Warning,
                notify::reasons::VALIDATOR_VERSION_MISMATCH,
                "Validate",
                message.clone(),
            );
            announced = Some(report.clone());
        } else if matches!(&wanted, Some((false, _))) && announced.is_some() {
            tracing::info!("validator haproxy version matches the pods again");
            announced = None;
        }
        // Write the condition (until it is written or the report changes).
        if let Some(want) = wanted.filter(|w| written.as_ref() != Some(w)) {
            let mut newer = false;
            loop {
                if lease.is_valid() {
                    match write(&client, &runtime_config, &want).await {
                        Ok(true) => {
                            written = Some(want);
                            break;
                        }
                        Ok(false) => {}
                        Err(error) => tracing::warn!(%error,
                            "condition ValidatorVersionMismatch not written; retrying"),
                    }
                }
                tokio::select! {
                    () = cancel.cancelled() => return,
                    r = rx.changed() => {
                        if r.is_err() {
                            return;
                        }
                        newer = true;
                        break;
                    }
                    () = tokio::time::sleep(RETRY) => {}
                }
            }
            if newer {
                continue;
            }
        }
        tokio::select! {
            () = cancel.cancelled() => return,
            r = rx.changed() => if r.is_err() { return },
        }
    }
}

/// Sets the condition on the HAProxyCfg's status. `Ok(false)` when the HAProxyCfg does not
/// exist (yet) or conflicts kept winning.
async fn write(
    client: &kube::Client,
    runtime_config: &RuntimeConfigRef,
    (mismatch, message): &(bool, String),
) -> Result<bool, kube::Error> {
    let reason = if *mismatch {
        reasons::HAPROXY_VERSION_DIFFERS
    } else {
        reasons::HAPROXY_VERSION_MATCHES
    };
    crd::write_cfg_condition(
        client,
        runtime_config,
        (conditions::VALIDATOR_VERSION_MISMATCH, *mismatch, reason),
        message,
    )
    .await
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use haptic_journal::{Namespace, ObjectName, PodRef};

    use super::*;

    #[test]
    fn the_condition_names_both_versions_and_the_fix() {
        let pod = |n: &str| PodRef {
            namespace: Namespace::new("ns"),
            name: ObjectName::new(n),
        };
        let mut r = VersionReport {
            validator: Some("HAProxy version 2.6.12-1+deb12u4 2026/10/17".into()),
            mismatched: vec![(pod("haproxy-0"), "3.0.11-1".into())],
        };
        let (on, message) = condition(&r).unwrap();
        assert!(on);
        assert!(message.contains("HAProxy 2.6"), "{message}");
        assert!(message.contains("haproxy-0: 3.0.11-1"), "{message}");
        assert!(message.contains("DEBIAN_SUITE=trixie"), "{message}");
        r.mismatched.clear();
        assert!(!condition(&r).unwrap().0);
        r.validator = None;
        assert_eq!(condition(&r), None);
    }
}
