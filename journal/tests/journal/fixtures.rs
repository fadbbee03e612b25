//! Builders for events and work items used across the tests.

use haptic_journal::*;

pub fn corr(id: u64) -> Correlation {
    Correlation::new(format!("ev-{id}"))
}

pub fn runtime() -> RuntimeConfigRef {
    RuntimeConfigRef {
        namespace: Namespace::new("haptic"),
        name: ObjectName::new("demo-haproxycfg"),
    }
}

pub fn identity() -> ConfigIdentity {
    ConfigIdentity {
        name: ObjectName::new("demo"),
        namespace: Namespace::new("haptic"),
        source_uid: None,
        source_generation: None,
    }
}

pub fn pod(name: &str) -> PodRef {
    PodRef {
        namespace: Namespace::new("haptic"),
        name: ObjectName::new(name),
    }
}

/// A small event without blob references.
pub fn drift(id: u64) -> Event {
    Event::DriftPreventionTriggered {
        correlation: corr(id),
        time_since_last_deployment_ms: id,
    }
}

pub fn rendered(id: u64, render: Checksum) -> Event {
    Event::TemplateRendered {
        correlation: corr(id),
        render,
        config_bytes: 10,
        auxiliary_file_count: 0,
        duration_ms: 1,
        trigger_reason: "test".into(),
        coalescible: true,
    }
}

pub fn publish_item(render: Checksum, seq: Seq) -> WorkItem {
    WorkItem::Publish(PublishItem {
        identity: identity(),
        render,
        render_seq: seq,
        rendered_at: UnixMillis(1),
        validated_at: UnixMillis(2),
        correlation: corr(seq.0),
    })
}

pub fn status_item(pod_name: &str, render: Option<Checksum>) -> WorkItem {
    WorkItem::Status(PodStatusItem {
        runtime_config: runtime(),
        pod: pod(pod_name),
        change: match render {
            Some(checksum) => PodStatusChange::Applied {
                checksum,
                is_drift_check: false,
                sync: SyncMetadata::default(),
                observed_at: UnixMillis(5),
            },
            None => PodStatusChange::Removed,
        },
    })
}

pub fn deploy_item(render: Checksum, id: &str) -> WorkItem {
    WorkItem::DeployPending(DeployRequest {
        deployment: DeploymentId::new(id),
        render,
        endpoints: vec![],
        runtime_config: runtime(),
        reason: DeploymentReason {
            cause: DeploymentCause::ConfigValidation,
            timeout_retry: false,
        },
        correlation: corr(0),
    })
}

/// Stores a tiny render (config + one map) and returns its checksum.
pub fn put_render(j: &Journal, cfg: &str) -> Checksum {
    let mut b = Batch::new();
    let r = b.put_render(
        cfg.as_bytes().to_vec(),
        vec![(AuxKind::Map, "maps/hosts.map".into(), b"a b\n".to_vec())],
    );
    // Keep it alive with an event referencing it.
    b.event(rendered(0, r.checksum));
    j.accept(b).unwrap();
    r.checksum
}

pub fn tmp() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.redb");
    (dir, path)
}
