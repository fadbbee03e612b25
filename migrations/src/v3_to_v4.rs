//! The production step `v3_to_v4` (schema 3 -> 4, issue 28): creates the per-pod history
//! table of [`crate::v4::tables`], `pod_history`, empty, and gives the scheduler's checkpoint the
//! two fields schema 4 appended to [`crate::v4::SchedulerCheckpoint`] for the operator's
//! rollback, both empty.
//!
//! ```text
//!  one write transaction (migrate_with):
//!      open_table(pod_history)                    created empty (kept as is if somehow present)
//!      component_state["deployment-scheduler"]    (absent: nothing to do)
//!          open the envelope, decode the payload as v3::ComponentCheckpoint
//!          SchedulerCheckpoint { ..every schema-3 field }
//!              -> { ..the same, previous_validated: None, rollback: None }
//!          encode as v4::ComponentCheckpoint, seal with the same kind, accepted_at and term
//!      meta.schema_version = 4                    written by migrate_with in the same transaction
//!  commit (Durability::Immediate)
//! ```
//!
//! An empty `pod_history` means "no sync recorded" (a schema-3 controller kept no history); no
//! `previous_validated` means no render validated before the newest is known (a schema-3
//! controller did not track it), and no `rollback` means no hold (schema 3 had none). Neither
//! adds a render reference, so no blob count moves.
//!
//! Nothing else is written: events, queues, blobs, counts, meta (but `schema_version`), the
//! other component checkpoints and every other table stay byte for byte what they were (the
//! scheduler's envelope keeps its kind, accepted-at and term; its CRC and length are recomputed
//! for the new payload). A scheduler checkpoint that does not open or decode with the frozen
//! schema-3 types fails the step with [`StepError::Undecodable`], and a `pod_history` of
//! another type with [`StepError::Storage`] (the file stays at schema 3). Schema 4's appended
//! variants (`Event::DeploymentRollbackRequest`, `Event::DeploymentRollback`,
//! `DeploymentCause::Rollback`, see [`crate::v4`]) need no rewrite. Uses the frozen types and
//! table definitions only, so it keeps meaning the same when the journal's types change; the
//! read-decode-seal-write of the record is shared with `v2_to_v3`
//! (`rewrite::scheduler_checkpoint`).

use haptic_journal::redb;

use crate::{Step, StepError, rewrite, v3, v4};

/// Schema 3 -> 4: create `pod_history`; no previous render and no rollback hold in the
/// scheduler's checkpoint.
pub const V3_TO_V4: Step = Step {
    from: 3,
    to: 4,
    name: "v3_to_v4",
    summary: "create the empty per-pod history table pod_history and give the scheduler \
              checkpoint no previous validated render and no rollback hold",
    run,
};

fn run(txn: &redb::WriteTransaction) -> Result<(), StepError> {
    txn.open_table(v4::tables::POD_HISTORY)?;
    rewrite::scheduler_checkpoint(
        txn,
        v3::VERSION,
        v4::ComponentCheckpoint::RECORD_KIND,
        |old: v3::ComponentCheckpoint| {
            // Not a scheduler checkpoint: its shape did not change.
            matches!(old.state, v3::ComponentState::Scheduler(_)).then(|| upgrade(old))
        },
    )
}

/// A schema-3 checkpoint in the schema-4 shape.
fn upgrade(old: v3::ComponentCheckpoint) -> v4::ComponentCheckpoint {
    rewrite::upgrade_checkpoint!(old, v3 => v4, |s| v4::SchedulerCheckpoint {
        last_validated: s.last_validated,
        endpoints: s.endpoints,
        runtime_config: s.runtime_config,
        applied: s.applied,
        given_up: s.given_up,
        rejected: s.rejected,
        previous_validated: None,
        rollback: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scheduler() -> v3::ComponentCheckpoint {
        v3::ComponentCheckpoint {
            through: v3::Seq(9),
            state: v3::ComponentState::Scheduler(v3::SchedulerCheckpoint {
                last_validated: Some((
                    v3::Checksum([1; 32]),
                    v3::Correlation {
                        event_id: v3::EventId("ev-3".into()),
                        correlation_id: Some(v3::CorrelationId("ev-1".into())),
                        causation_id: None,
                    },
                )),
                endpoints: vec![v3::Endpoint {
                    url: v3::EndpointUrl("http://10.0.0.7:5555".into()),
                    pod: v3::PodRef {
                        namespace: v3::Namespace("haptic".into()),
                        name: v3::ObjectName("haproxy-0".into()),
                    },
                    detected_version: Some("3.2.4".into()),
                }],
                runtime_config: Some(v3::RuntimeConfigRef {
                    namespace: v3::Namespace("haptic".into()),
                    name: v3::ObjectName("demo-haproxycfg".into()),
                }),
                applied: vec![(
                    v3::EndpointUrl("http://10.0.0.7:5555".into()),
                    v3::Checksum([1; 32]),
                )],
                given_up: vec![v3::EndpointUrl("http://10.0.0.8:5555".into())],
                rejected: vec![v3::RejectedRender {
                    endpoint: v3::EndpointUrl("http://10.0.0.7:5555".into()),
                    render: v3::Checksum([2; 32]),
                    message: "rejected".into(),
                    attempts: 3,
                    next_retry_at: v3::UnixMillis(42),
                }],
            }),
        }
    }

    #[test]
    fn the_scheduler_keeps_every_field_and_holds_no_rollback() {
        let old = scheduler();
        let new = upgrade(old.clone());
        let (v3::ComponentState::Scheduler(o), v4::ComponentState::Scheduler(n)) =
            (&old.state, &new.state)
        else {
            panic!("{new:?}")
        };
        assert_eq!(new.through, old.through);
        assert_eq!(n.last_validated, o.last_validated);
        assert_eq!(n.endpoints, o.endpoints);
        assert_eq!(n.runtime_config, o.runtime_config);
        assert_eq!(n.applied, o.applied);
        assert_eq!(n.given_up, o.given_up);
        assert_eq!(n.rejected, o.rejected);
        assert_eq!((n.previous_validated, &n.rollback), (None, &None));
        // bincode: the schema-3 bytes, then a `None` tag (0) for each appended field.
        let mut bytes = v3::encode(&old).unwrap();
        bytes.extend([0, 0]);
        assert_eq!(v4::encode(&new).unwrap(), bytes);
    }

    #[test]
    fn other_components_keep_their_bytes() {
        for old in [
            v3::ComponentCheckpoint {
                through: v3::Seq(4),
                state: v3::ComponentState::Validator(v3::ValidatorCheckpoint {
                    last_passed: Some(v3::Checksum([7; 32])),
                }),
            },
            v3::ComponentCheckpoint {
                through: v3::Seq(5),
                state: v3::ComponentState::Publisher(v3::PublisherCheckpoint::default()),
            },
        ] {
            let bytes = v3::encode(&old).unwrap();
            assert_eq!(v4::encode(&upgrade(old)).unwrap(), bytes);
        }
    }
}
