//! The production step `v2_to_v3` (schema 2 -> 3, issue 27): gives every quarantine entry of the
//! scheduler's checkpoint the two fields schema 3 appended to [`crate::v3::RejectedRender`].
//!
//! ```text
//!  one write transaction (migrate_with):
//!      component_state["deployment-scheduler"]    (absent: nothing to do)
//!          open the envelope, decode the payload as v2::ComponentCheckpoint
//!          every RejectedRender { endpoint, render, message }
//!              -> { endpoint, render, message, attempts: 1, next_retry_at: now }
//!          encode as v3::ComponentCheckpoint, seal with the same kind, accepted_at and term
//!      meta.schema_version = 3                    written by migrate_with in the same transaction
//!  commit (Durability::Immediate)
//! ```
//!
//! `now` is the step's wall-clock time (unix ms), taken once. A quarantine older than the
//! upgrade is therefore retried once at the first leadership after it (its retry time has
//! passed by then), and backs off from there like one the scheduler just recorded: a rejection
//! counted once (`attempts: 1`), as schema 2 recorded no count. Neither "at once" nor "never".
//!
//! Only the `deployment-scheduler` record holds a `SchedulerCheckpoint` (a checkpoint's key is
//! its component), so only it is read. Nothing else is written: events, queues, blobs, counts,
//! meta (but `schema_version`), the other component checkpoints and every other table stay byte
//! for byte what they were (the envelope keeps its kind, accepted-at and term; its CRC and
//! length are recomputed for the new payload). A record that does not open or decode with the
//! frozen schema-2 types fails the step with [`StepError::Undecodable`] (the file stays at
//! schema 2). Uses the frozen types and table definitions only, so it keeps meaning the same
//! when the journal's types change. The read-decode-seal-write of the record is shared with
//! `v3_to_v4` (`rewrite::scheduler_checkpoint`).

use std::time::{SystemTime, UNIX_EPOCH};

use haptic_journal::redb;

use crate::{Step, StepError, rewrite, v2, v3};

/// Schema 2 -> 3: `attempts: 1` and `next_retry_at: now` on every quarantine entry.
pub const V2_TO_V3: Step = Step {
    from: 2,
    to: 3,
    name: "v2_to_v3",
    summary: "give each quarantined render of the scheduler checkpoint attempts 1 and a retry \
              time of now (retried once at the next leadership, then backed off)",
    run,
};

fn run(txn: &redb::WriteTransaction) -> Result<(), StepError> {
    convert(txn, now())
}

/// The wall-clock time, unix ms (0 before the epoch: a broken clock retries at once).
fn now() -> v3::UnixMillis {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    v3::UnixMillis(ms)
}

/// The step with its clock given.
fn convert(txn: &redb::WriteTransaction, now: v3::UnixMillis) -> Result<(), StepError> {
    rewrite::scheduler_checkpoint(
        txn,
        v2::VERSION,
        v3::ComponentCheckpoint::RECORD_KIND,
        |old: v2::ComponentCheckpoint| {
            // Not a scheduler checkpoint (no quarantine in it): its shape did not change.
            matches!(old.state, v2::ComponentState::Scheduler(_)).then(|| upgrade(old, now))
        },
    )
}

/// A schema-2 checkpoint in the schema-3 shape.
fn upgrade(old: v2::ComponentCheckpoint, now: v3::UnixMillis) -> v3::ComponentCheckpoint {
    rewrite::upgrade_checkpoint!(old, v2 => v3, |s| v3::SchedulerCheckpoint {
        last_validated: s.last_validated,
        endpoints: s.endpoints,
        runtime_config: s.runtime_config,
        applied: s.applied,
        given_up: s.given_up,
        rejected: s
            .rejected
            .into_iter()
            .map(|r| v3::RejectedRender {
                endpoint: r.endpoint,
                render: r.render,
                message: r.message,
                attempts: 1,
                next_retry_at: now,
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rejected(n: u8) -> v2::RejectedRender {
        v2::RejectedRender {
            endpoint: v2::EndpointUrl(format!("http://10.0.0.{n}:5555")),
            render: v2::Checksum([n; 32]),
            message: format!("rejected {n}"),
        }
    }

    #[test]
    fn every_quarantine_entry_gets_one_attempt_and_now() {
        let old = v2::ComponentCheckpoint {
            through: v2::Seq(9),
            state: v2::ComponentState::Scheduler(v2::SchedulerCheckpoint {
                given_up: vec![v2::EndpointUrl("http://10.0.0.3:5555".into())],
                rejected: vec![rejected(1), rejected(2)],
                ..v2::SchedulerCheckpoint::default()
            }),
        };
        let new = upgrade(old, v3::UnixMillis(42));
        let v3::ComponentState::Scheduler(s) = &new.state else {
            panic!("{new:?}")
        };
        assert_eq!(new.through, v2::Seq(9));
        assert_eq!(
            s.given_up,
            vec![v2::EndpointUrl("http://10.0.0.3:5555".into())]
        );
        let got: Vec<_> = s
            .rejected
            .iter()
            .map(|r| {
                (
                    r.endpoint.0.as_str(),
                    r.message.as_str(),
                    r.attempts,
                    r.next_retry_at,
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("http://10.0.0.1:5555", "rejected 1", 1, v3::UnixMillis(42)),
                ("http://10.0.0.2:5555", "rejected 2", 1, v3::UnixMillis(42)),
            ]
        );
    }

    #[test]
    fn other_components_keep_their_bytes() {
        let old = v2::ComponentCheckpoint {
            through: v2::Seq(4),
            state: v2::ComponentState::Validator(v2::ValidatorCheckpoint {
                last_passed: Some(v2::Checksum([7; 32])),
            }),
        };
        let bytes = v2::encode(&old).unwrap();
        assert_eq!(v3::encode(&upgrade(old, v3::UnixMillis(1))).unwrap(), bytes);
    }

    #[test]
    fn the_clock_is_unix_millis() {
        // 2020-09-13 and 2100-01-01: a sane wall clock, in milliseconds.
        assert!((1_600_000_000_000..4_102_444_800_000).contains(&now().0));
    }
}
