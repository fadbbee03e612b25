//! The schema-4 records of `fixtures/v4.redb`: two pods' sync history (table `pod_history`).
//!
//! ```text
//!  haptic/haproxy-0  appended 4 with max 3 entries: #1 trimmed; #2..#4 kept
//!      #2 render A  raw_initial     applied, reloaded r-2     term 2
//!      #3 render A  runtime         applied, no reload        term 3
//!      #4 render B  (none)          failed before planning    term 3
//!  haptic/haproxy-1
//!      #1 render A  no_runtime_api  applied, reloaded r-9     term 2
//!      #2 render B  raw_resync      rejected (422)            term 3
//! ```
//!
//! Every `SyncResult` variant, a record without a mode, and the two `SyncMode` variants schema 2
//! appended (the frozen `v4::SyncMode` must know them).

use haptic_journal::*;

use crate::fixture::{pod, render_checksums};

/// The retention the fixture appends with: 3 per pod, so haproxy-0's first record goes.
pub fn retention() -> HistoryRetention {
    HistoryRetention {
        max_entries_per_pod: 3,
        ..HistoryRetention::default()
    }
}

/// One record; every field the fixture varies is a parameter (a row of the table above).
#[allow(clippy::too_many_arguments)]
fn record(
    pod_name: &str,
    ip: u8,
    render: Checksum,
    at: u64,
    mode: Option<SyncMode>,
    reload: Option<&str>,
    result: SyncResult,
    term: u64,
) -> SyncRecord {
    SyncRecord {
        pod: pod(pod_name),
        endpoint: EndpointUrl::new(format!("http://10.0.0.{ip}:5555")),
        render,
        started_at: UnixMillis(1_700_000_000_000 + at),
        ended_at: UnixMillis(1_700_000_000_000 + at + 250),
        mode,
        operations: OperationCounts {
            total_api_operations: 2,
            servers: ChangeCounts {
                added: 1,
                removed: 0,
                modified: 1,
            },
            ..OperationCounts::default()
        },
        reloaded: reload.is_some(),
        reload_id: reload.map(ReloadId::new),
        result,
        term: Term(term),
        deployment: DeploymentId::new(format!("deploy-{at}")),
    }
}

/// Every record appended, in append order (the first is trimmed by the fourth append).
pub fn appended() -> Vec<SyncRecord> {
    let (a, b) = render_checksums();
    vec![
        record(
            "haproxy-0",
            7,
            a,
            1_000,
            Some(SyncMode::RawInitial),
            Some("r-1"),
            SyncResult::Applied,
            2,
        ),
        record(
            "haproxy-1",
            8,
            a,
            1_500,
            Some(SyncMode::NoRuntimeApi),
            Some("r-9"),
            SyncResult::Applied,
            2,
        ),
        record(
            "haproxy-0",
            7,
            a,
            2_000,
            Some(SyncMode::RawInitial),
            Some("r-2"),
            SyncResult::Applied,
            2,
        ),
        record(
            "haproxy-0",
            7,
            a,
            3_000,
            Some(SyncMode::Runtime),
            None,
            SyncResult::Applied,
            3,
        ),
        record(
            "haproxy-1",
            8,
            b,
            3_500,
            Some(SyncMode::RawResync),
            None,
            SyncResult::Rejected {
                message: "dataplane rejected the request with status 422: unknown keyword".into(),
            },
            3,
        ),
        record(
            "haproxy-0",
            7,
            b,
            4_000,
            None,
            None,
            SyncResult::Failed {
                message: "connection refused".into(),
            },
            3,
        ),
    ]
}

/// What the table keeps: `(pod key, sequence, record)` in key order.
pub fn kept() -> Vec<(String, u64, SyncRecord)> {
    let r = appended();
    vec![
        ("haptic/haproxy-0".into(), 2, r[2].clone()),
        ("haptic/haproxy-0".into(), 3, r[3].clone()),
        ("haptic/haproxy-0".into(), 4, r[5].clone()),
        ("haptic/haproxy-1".into(), 1, r[1].clone()),
        ("haptic/haproxy-1".into(), 2, r[4].clone()),
    ]
}

/// [`kept`] as `Journal::history` returns it: by start time.
pub fn timeline() -> Vec<SyncRecord> {
    let mut v: Vec<SyncRecord> = kept().into_iter().map(|(_, _, r)| r).collect();
    v.sort_by_key(|r| r.started_at);
    v
}

/// The batches that write them: one append per batch, as a deployer appends per sync.
pub fn batches() -> Vec<Batch> {
    appended()
        .into_iter()
        .map(|r| {
            let mut b = Batch::new();
            b.append_history(r, retention());
            b
        })
        .collect()
}
