//! The process's metric families ([`super::metrics`]): the telemetry's own and every
//! component's, as one exposition.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use haptic_journal::Queue;

use crate::components::scheduler::SchedulerStats;
use crate::telemetry::{RenderSource, ValidationResult};

/// prometheus-client 0.24 writes label values verbatim (no escaping of `"`, `\` or line
/// breaks), so every value we emit must be in this safe alphabet.
fn is_safe_label_value(v: &str) -> bool {
    !v.is_empty()
        && v.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

#[test]
fn every_label_value_is_bounded_and_safe() {
    let mut values: Vec<&str> = Vec::new();
    values.extend(RenderSource::ALL.iter().map(|s| s.as_str()));
    values.extend(ValidationResult::ALL.iter().map(|s| s.as_str()));
    values.extend(Queue::ALL.iter().map(|q| q.as_str()));
    for v in &values {
        assert!(is_safe_label_value(v), "unsafe label value {v:?}");
    }
    // And the fixed values the collector writes, as they appear in the output.
    let out = super::metrics().encode();
    for line in out.lines().filter(|l| !l.starts_with('#')) {
        if let Some(open) = line.find('{') {
            let close = line.rfind('}').unwrap();
            for pair in line[open + 1..close].split(',') {
                let (k, v) = pair.split_once('=').unwrap();
                assert!(
                    k.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                    "{line}"
                );
                let v = v
                    .strip_prefix('"')
                    .and_then(|v| v.strip_suffix('"'))
                    .unwrap();
                if k == "le" {
                    // Histogram bucket bounds, written by the library.
                    assert!(v == "+Inf" || v.parse::<f64>().is_ok(), "{line}");
                    continue;
                }
                assert!(is_safe_label_value(v), "unsafe label value in {line}");
            }
        }
    }
}

#[test]
fn enum_label_values_encode_as_their_names() {
    let m = super::metrics();
    m.render_accepted(RenderSource::ConfigMap);
    m.render_accepted(RenderSource::ConfigMap);
    let validator = Arc::new(crate::components::validator::ValidationStats::default());
    validator
        .failed
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    m.register(validator);
    m.events_accepted(5);
    m.observe_commit(Duration::from_millis(3));
    let out = m.encode();
    for want in [
        "haptic_renders_total{source=\"configmap\"} 2",
        "haptic_renders_total{source=\"dir\"} 0",
        "haptic_renders_total{source=\"ingest\"} 0",
        "haptic_validation_total 1",
        "haptic_validation_errors_total 1",
        "haptic_events_published_total 5",
        "haptic_journal_commit_duration_seconds_count 1",
        "haptic_journal_commit_duration_seconds_bucket{le=\"0.004\"} 1",
        "haptic_journal_commit_duration_seconds_bucket{le=\"0.002\"} 0",
        "haptic_journal_queue_depth{queue=\"status-parked\"} 0",
        "haptic_retries_total{component=\"config-publisher\"} 0",
        "haptic_leader_election_is_leader 0",
        "haptic_deployment_duration_seconds_count 0",
        "# UNIT haptic_deployment_duration_seconds seconds",
        "haptic_term 0",
        "# UNIT haptic_journal_commit_duration_seconds seconds",
    ] {
        assert!(out.lines().any(|l| l == want), "missing {want:?} in\n{out}");
    }
    assert!(out.ends_with("# EOF\n"));
}

#[test]
fn replaced_handles_carry_their_counts_and_the_same_handle_is_not_counted_twice() {
    let m = super::metrics();
    let a = Arc::new(SchedulerStats::default());
    a.started.store(3, Relaxed);
    m.register(a.clone());
    m.register(a.clone());
    let b = Arc::new(SchedulerStats::default());
    b.started.store(1, Relaxed);
    b.timeouts.store(2, Relaxed);
    m.register(b.clone());
    m.register(b);
    let out = m.encode();
    assert!(
        out.contains("\nhaptic_scheduler_deployments_started_total 4\n"),
        "{out}"
    );
    assert!(out.contains("\nhaptic_retries_total{component=\"deployment-scheduler\"} 2\n"));
}
