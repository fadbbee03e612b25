//! The fixtures: what `fixtures/v1.redb`, `fixtures/v2.redb`, `fixtures/v3.redb` and
//! `fixtures/v4.redb` hold, built through the public journal API.
//!
//! `build(journal, fixture)` writes one; `expected(fixture)` describes it without a journal
//! (events in `Seq` order, every queue's items, blobs, state tables, meta), as this build reads
//! it once migrated to the current schema, so the test can check a file written by an older
//! build of this code. All share the schema-1 records (the v1 file was written by this builder
//! when the journal was at schema 1, the v2 file at schema 2); the v2 and v3 fixtures add the
//! pod-truth records of schema 2 ([`crate::fixture_pod`]). The v1 fixture, migrated, holds the
//! schema-2 tables empty. The v4 fixture adds the per-pod history of schema 4
//! ([`crate::fixture_history`]); the older fixtures, migrated, hold `pod_history` empty.
//!
//! The scheduler checkpoint holds one quarantine entry ([`RejectedRender`]). Its schema-3
//! fields are fixed in the v3 fixture ([`QUARANTINE_ATTEMPTS`], [`QUARANTINE_RETRY_AT`]); the
//! older fixtures have none, and `v2_to_v3` gives them `attempts: 1` and the migration's time:
//! [`assert_matches`] checks that shape ([`assert_migrated_quarantine`]) and the tests that
//! migrate check the time against their own clock.
//!
//! The v4 fixture's scheduler checkpoint also holds schema 4's rollback fields:
//! `previous_validated` (render B) and a `rollback` hold on it ([`rollback_hold`]); the older
//! fixtures have neither, and `v3_to_v4` gives them `None` for both.

use std::collections::BTreeMap;

use haptic_journal::*;

use crate::{fixture_history, fixture_pod};

/// A committed fixture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fixture {
    /// `fixtures/v1.redb`: written at schema 1 (frozen: this code writes schema 2).
    V1,
    /// `fixtures/v2.redb`: written at schema 2, with records in the schema-2 tables (frozen:
    /// this code writes schema 3).
    V2,
    /// `fixtures/v3.redb`: written at schema 3, the schema-2 records plus a quarantine entry
    /// with its schema-3 fields (frozen: this code writes schema 4).
    V3,
    /// `fixtures/v4.redb`: written at schema 4, the schema-3 records plus two pods' history.
    V4,
}

impl Fixture {
    /// Every fixture, oldest first.
    pub const ALL: [Fixture; 4] = [Fixture::V1, Fixture::V2, Fixture::V3, Fixture::V4];

    /// The schema version the file was written at.
    pub fn version(self) -> u32 {
        match self {
            Fixture::V1 => 1,
            Fixture::V2 => 2,
            Fixture::V3 => 3,
            Fixture::V4 => 4,
        }
    }

    /// `v1.redb`, `v2.redb`, `v3.redb`, `v4.redb`.
    pub fn file_name(self) -> &'static str {
        match self {
            Fixture::V1 => "v1.redb",
            Fixture::V2 => "v2.redb",
            Fixture::V3 => "v3.redb",
            Fixture::V4 => "v4.redb",
        }
    }

    /// Whether the file holds the schema-2 records (`endpoint_files`, `endpoint_transaction`).
    fn has_pod_truth(self) -> bool {
        self.version() >= 2
    }

    /// Whether the file holds schema 4's history records (`pod_history`).
    pub fn has_history(self) -> bool {
        self.version() >= 4
    }

    /// Whether the scheduler checkpoint holds schema 4's `previous_validated` and `rollback`.
    pub fn has_rollback(self) -> bool {
        self.version() >= 4
    }
}

/// What a fixture holds. Events, in `Seq` order from 1.
pub struct Expected {
    pub events: Vec<Event>,
    /// Queue -> (item, attempt) in queue order.
    pub queues: BTreeMap<Queue, Vec<(WorkItem, u32)>>,
    /// Render manifests stored.
    pub renders: Vec<Render>,
    /// File blobs: (content), every one of them stored.
    pub files: Vec<Vec<u8>>,
    pub endpoints: Vec<EndpointApplied>,
    pub checkpoints: Vec<PublishedCheckpoint>,
    /// In table (name) order. In a fixture older than schema 3, every quarantine entry's
    /// `next_retry_at` is [`MIGRATED`] (the migration's time, unknown here); in one older than
    /// schema 4, the scheduler has no `previous_validated` and no `rollback`.
    pub components: Vec<ComponentCheckpoint>,
    /// Schema 2: `endpoint_files`, by URL (empty in the v1 fixture).
    pub endpoint_files: Vec<EndpointFiles>,
    /// Schema 2: `endpoint_transaction`, by URL (empty in the v1 fixture).
    pub transactions: Vec<EndpointTransaction>,
    /// Schema 4: `pod_history` as `Journal::history` reads it, by start time (empty before
    /// the v4 fixture).
    pub history: Vec<SyncRecord>,
    pub term: Term,
    pub identity: Identity,
    pub dispatched_through: Seq,
}

pub const TERM: Term = Term(3);
pub const DISPATCHED: Seq = Seq(5);
/// The v3 fixture's quarantine entry: rejections in a row.
pub const QUARANTINE_ATTEMPTS: u32 = 3;
/// The v3 fixture's quarantine entry: its next retry.
pub const QUARANTINE_RETRY_AT: UnixMillis = UnixMillis(1_700_000_900_000);
/// Stands for "the time `v2_to_v3` ran" in [`Expected::components`] of an older fixture.
pub const MIGRATED: UnixMillis = UnixMillis(0);
/// Every time a fixture holds is before this (a migration of one runs after it).
pub const FIXTURE_TIMES_BEFORE: UnixMillis = UnixMillis(1_700_001_000_000);

/// The wall-clock time, unix ms.
pub fn now() -> UnixMillis {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    UnixMillis(u64::try_from(d.as_millis()).unwrap())
}
pub const PRIVATE_KEY_LINE: &str = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQDfakefixture";

pub fn config_a() -> Vec<u8> {
    b"global\n  maxconn 1000\ndefaults\n  mode http\nfrontend fe\n  bind :80\n  \
      default_backend be\nbackend be\n  server s1 10.0.0.1:8080\n"
        .to_vec()
}

pub fn config_b() -> Vec<u8> {
    b"global\nfrontend fe\n  bind :80\n  use_backend missing\n".to_vec()
}

pub fn pem() -> Vec<u8> {
    format!(
        "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUfixturecert\n-----END CERTIFICATE-----\n\
         -----BEGIN PRIVATE KEY-----\n{PRIVATE_KEY_LINE}\nAnotherSecretLine==\n\
         -----END PRIVATE KEY-----\n"
    )
    .into_bytes()
}

pub fn files_a() -> Vec<(AuxKind, String, Vec<u8>)> {
    vec![
        (
            AuxKind::Map,
            "maps/hosts.map".into(),
            b"example.com be\n".to_vec(),
        ),
        (AuxKind::Ssl, "ssl/example.com.pem".into(), pem()),
        (
            AuxKind::Ca,
            "ca/root.pem".into(),
            b"-----BEGIN CERTIFICATE-----\nMIIBcafixture\n-----END CERTIFICATE-----\n".to_vec(),
        ),
        (
            AuxKind::General,
            "general/503.http".into(),
            b"HTTP/1.0 503\r\n\r\n".to_vec(),
        ),
    ]
}

pub fn held_blob() -> Vec<u8> {
    b"an explicitly held blob".to_vec()
}

fn corr(n: u64) -> Correlation {
    Correlation {
        event_id: EventId::new(format!("ev-{n}")),
        correlation_id: Some(CorrelationId::new("ev-1")),
        causation_id: (n > 1).then(|| EventId::new(format!("ev-{}", n - 1))),
    }
}

fn runtime() -> RuntimeConfigRef {
    RuntimeConfigRef {
        namespace: Namespace::new("haptic"),
        name: ObjectName::new("demo-haproxycfg"),
    }
}

fn identity() -> ConfigIdentity {
    ConfigIdentity {
        name: ObjectName::new("demo"),
        namespace: Namespace::new("haptic"),
        source_uid: Some(ObjectUid::new("0b6f0c1e-uid")),
        source_generation: Some(Generation(7)),
    }
}

pub fn pod(name: &str) -> PodRef {
    PodRef {
        namespace: Namespace::new("haptic"),
        name: ObjectName::new(name),
    }
}

fn endpoint(name: &str, ip: u8) -> Endpoint {
    Endpoint {
        url: EndpointUrl::new(format!("http://10.0.0.{ip}:5555")),
        pod: pod(name),
        detected_version: Some("3.2.4".into()),
    }
}

fn reason() -> DeploymentReason {
    DeploymentReason {
        cause: DeploymentCause::ConfigValidation,
        timeout_retry: false,
    }
}

fn sync() -> SyncMetadata {
    SyncMetadata {
        reload_triggered: true,
        reload_id: Some(ReloadId::new("r-1")),
        sync_duration_ms: 42,
        version_conflict_retries: 1,
        fallback_used: false,
        sync_mode: Some(SyncMode::Runtime),
        operation_counts: OperationCounts {
            total_api_operations: 3,
            servers: ChangeCounts {
                added: 1,
                removed: 0,
                modified: 2,
            },
            ..OperationCounts::default()
        },
        error: None,
        rejected: false,
    }
}

fn status(pod_name: &str, checksum: Checksum) -> WorkItem {
    WorkItem::Status(PodStatusItem {
        runtime_config: runtime(),
        pod: pod(pod_name),
        change: PodStatusChange::Applied {
            checksum,
            is_drift_check: false,
            sync: sync(),
            observed_at: UnixMillis(1_700_000_000_000),
        },
    })
}

pub fn render_checksums() -> (Checksum, Checksum) {
    let a = files_a();
    let pairs: Vec<(&str, &[u8])> = a
        .iter()
        .map(|(_, p, c)| (p.as_str(), c.as_slice()))
        .collect();
    (
        render_checksum(&config_a(), &pairs),
        render_checksum(&config_b(), &[]),
    )
}

/// One fixture batch, plus the queue items it enqueues (for `expected`).
struct Script {
    batches: Vec<Batch>,
    events: Vec<Event>,
    enqueued: Vec<WorkItem>,
}

impl Script {
    fn ev(&mut self, b: &mut Batch, e: Event) -> EventRef {
        self.events.push(e.clone());
        b.event(e)
    }
    fn enq(&mut self, b: &mut Batch, item: WorkItem, origin: Origin) {
        self.enqueued.push(item.clone());
        b.enqueue(item, origin);
    }
}

/// The fixture's batches; `quarantine` is the quarantine entry's `(attempts, next_retry_at)`;
/// `rollback`: the scheduler holds schema 4's rollback fields.
fn script(quarantine: (u32, UnixMillis), rollback: bool) -> Script {
    let (ra, rb) = render_checksums();
    let deployment = DeploymentId::new("deploy-1");
    let request = DeployRequest {
        deployment: deployment.clone(),
        render: ra,
        endpoints: vec![endpoint("haproxy-0", 7), endpoint("haproxy-1", 8)],
        runtime_config: runtime(),
        reason: reason(),
        correlation: corr(9),
    };
    let mut s = Script {
        batches: Vec::new(),
        events: Vec::new(),
        enqueued: Vec::new(),
    };
    // 1: leadership.
    let mut b = Batch::new();
    b.push(Op::SetTerm {
        term: TERM,
        identity: Identity::new("haptic-0"),
    });
    s.ev(
        &mut b,
        Event::BecameLeader {
            correlation: corr(1),
            identity: Identity::new("haptic-0"),
            term: TERM,
        },
    );
    s.batches.push(b);
    // 2: a render that passes.
    let mut b = Batch::new();
    let r = b.put_render(config_a(), files_a());
    assert_eq!(r.checksum, ra);
    s.ev(
        &mut b,
        Event::TemplateRendered {
            correlation: corr(2),
            render: ra,
            config_bytes: config_a().len() as u64,
            auxiliary_file_count: 4,
            duration_ms: 3,
            trigger_reason: "configmap_changed".into(),
            coalescible: true,
        },
    );
    let v = s.ev(
        &mut b,
        Event::ValidationCompleted {
            correlation: corr(3),
            render: ra,
            warnings: vec!["a warning".into()],
            duration_ms: 40,
            trigger_reason: "configmap_changed".into(),
            coalescible: true,
        },
    );
    s.ev(
        &mut b,
        Event::RenderGateCompleted {
            correlation: corr(4),
            render: ra,
            verdict: GateVerdict::Pass,
            messages: vec![],
            pinned_to: None,
        },
    );
    s.ev(
        &mut b,
        Event::ConfigValidated {
            correlation: corr(5),
            identity: identity(),
        },
    );
    s.enq(
        &mut b,
        WorkItem::Publish(PublishItem {
            identity: identity(),
            render: ra,
            render_seq: Seq(2),
            rendered_at: UnixMillis(1_700_000_000_001),
            validated_at: UnixMillis(1_700_000_000_041),
            correlation: corr(3),
        }),
        Origin::Batch(v),
    );
    s.enq(
        &mut b,
        WorkItem::Verdict(VerdictItem {
            identity: identity(),
            render: ra,
            render_seq: Seq(2),
            passed: true,
            pinned: false,
            messages: vec![],
            correlation: corr(4),
        }),
        Origin::Batch(v),
    );
    s.batches.push(b);
    // 3: a render that fails.
    let mut b = Batch::new();
    let r = b.put_render(config_b(), vec![]);
    assert_eq!(r.checksum, rb);
    s.ev(
        &mut b,
        Event::TemplateRendered {
            correlation: corr(6),
            render: rb,
            config_bytes: config_b().len() as u64,
            auxiliary_file_count: 0,
            duration_ms: 1,
            trigger_reason: "configmap_changed".into(),
            coalescible: true,
        },
    );
    let f = s.ev(
        &mut b,
        Event::ValidationFailed {
            correlation: corr(7),
            render: Some(rb),
            errors: vec!["backend 'missing' not found".into()],
            duration_ms: 35,
            trigger_reason: "configmap_changed".into(),
        },
    );
    s.ev(
        &mut b,
        Event::RenderGateCompleted {
            correlation: corr(8),
            render: rb,
            verdict: GateVerdict::Fail,
            messages: vec!["backend 'missing' not found".into()],
            pinned_to: Some(ra),
        },
    );
    s.enq(
        &mut b,
        WorkItem::Invalid(InvalidPublishItem {
            identity: identity(),
            render: Some(rb),
            render_seq: Seq(6),
            errors: vec!["backend 'missing' not found".into()],
            correlation: corr(7),
        }),
        Origin::Batch(f),
    );
    s.enq(
        &mut b,
        WorkItem::Verdict(VerdictItem {
            identity: identity(),
            render: rb,
            render_seq: Seq(6),
            passed: false,
            pinned: true,
            messages: vec!["backend 'missing' not found".into()],
            correlation: corr(8),
        }),
        Origin::Batch(f),
    );
    s.batches.push(b);
    // 4: pods and a scheduled deployment.
    let mut b = Batch::new();
    s.ev(
        &mut b,
        Event::HAProxyPodsDiscovered {
            correlation: corr(9),
            endpoints: request.endpoints.clone(),
            authoritative: true,
        },
    );
    let d = s.ev(
        &mut b,
        Event::DeploymentScheduled {
            correlation: corr(10),
            deployment: deployment.clone(),
            render: ra,
            endpoints: request.endpoints.clone(),
            runtime_config: runtime(),
            reason: reason(),
            coalescible: false,
        },
    );
    s.enq(
        &mut b,
        WorkItem::DeployPending(request.clone()),
        Origin::Batch(d),
    );
    s.batches.push(b);
    // 5: the deployment runs.
    let mut b = Batch::new();
    let st = s.ev(
        &mut b,
        Event::DeploymentStarted {
            correlation: corr(11),
            deployment: deployment.clone(),
            endpoints: request.endpoints.clone(),
        },
    );
    s.enq(
        &mut b,
        WorkItem::DeployInflight(InFlightDeployment {
            request: request.clone(),
            started_at: UnixMillis(1_700_000_000_100),
            term: TERM,
        }),
        Origin::Batch(st),
    );
    s.ev(
        &mut b,
        Event::InstanceDeployed {
            correlation: corr(12),
            deployment: deployment.clone(),
            endpoint: endpoint("haproxy-0", 7),
            duration_ms: 120,
            reload_required: true,
        },
    );
    s.ev(
        &mut b,
        Event::InstanceDeploymentFailed {
            correlation: corr(13),
            deployment: deployment.clone(),
            endpoint: endpoint("haproxy-1", 8),
            error: "409 version conflict".into(),
            retryable: true,
        },
    );
    let ap = s.ev(
        &mut b,
        Event::ConfigAppliedToPod {
            correlation: corr(14),
            runtime_config: runtime(),
            pod: pod("haproxy-0"),
            checksum: ra,
            is_drift_check: false,
            sync: sync(),
        },
    );
    s.enq(&mut b, status("haproxy-0", ra), Origin::Batch(ap));
    s.enq(&mut b, status("haproxy-1", ra), Origin::Batch(ap));
    s.ev(
        &mut b,
        Event::DeploymentCompleted {
            correlation: corr(15),
            deployment: deployment.clone(),
            total: 2,
            succeeded: 1,
            failed: 1,
            duration_ms: 130,
            reloads_triggered: 1,
            total_api_operations: 3,
            operation_breakdown: BTreeMap::from([("server_update".to_string(), 2)]),
        },
    );
    let pr = s.ev(
        &mut b,
        Event::DeployedConfigPublishRequest {
            correlation: corr(16),
            deployment: deployment.clone(),
            render: ra,
            runtime_config: runtime(),
        },
    );
    s.enq(
        &mut b,
        WorkItem::PublishDeployed(DeployedPublishItem {
            runtime_config: runtime(),
            render: ra,
            render_seq: Seq(2),
            deployment: deployment.clone(),
            deployed_at: UnixMillis(1_700_000_000_130),
            correlation: corr(16),
        }),
        Origin::Batch(pr),
    );
    s.batches.push(b);
    // 6: publication and state tables.
    let mut b = Batch::new();
    let cp = s.ev(
        &mut b,
        Event::ConfigPublished {
            correlation: corr(17),
            runtime_config: runtime(),
            render: ra,
            map_file_count: 1,
            secret_count: 1,
        },
    );
    s.enq(
        &mut b,
        WorkItem::DrainCheckpoint(DrainCheckpoint {
            runtime_config: runtime(),
            render: ra,
            render_seq: Seq(2),
            deployment,
        }),
        Origin::Batch(cp),
    );
    for e in endpoints() {
        b.push(Op::PutEndpointApplied(e));
    }
    for c in checkpoints() {
        b.push(Op::PutPublishedCheckpoint(c));
    }
    for c in components(quarantine.0, quarantine.1, rollback) {
        b.push(Op::PutComponentCheckpoint(c));
    }
    s.batches.push(b);
    // 7: the rest of the kinds.
    let mut b = Batch::new();
    s.ev(
        &mut b,
        Event::DriftPreventionTriggered {
            correlation: corr(18),
            time_since_last_deployment_ms: 300_000,
        },
    );
    s.ev(
        &mut b,
        Event::HAProxyPodTerminated {
            correlation: corr(19),
            pod: pod("haproxy-2"),
        },
    );
    s.ev(
        &mut b,
        Event::DeploymentCancelRequest {
            correlation: corr(20),
            deployment: DeploymentId::new("deploy-0"),
            reason: "deployment_timeout".into(),
        },
    );
    s.ev(
        &mut b,
        Event::LostLeadership {
            correlation: corr(21),
            identity: Identity::new("haptic-0"),
            reason: "lease_lost".into(),
        },
    );
    s.ev(
        &mut b,
        Event::DeploymentRetryRequest {
            correlation: corr(22),
            runtime_config: runtime(),
            value: "2024-05-01".into(),
        },
    );
    s.batches.push(b);
    s
}

fn endpoints() -> Vec<EndpointApplied> {
    let (ra, _) = render_checksums();
    vec![EndpointApplied {
        endpoint: EndpointUrl::new("http://10.0.0.7:5555"),
        pod: pod("haproxy-0"),
        render: ra,
        config_version: Some(ConfigVersion(12)),
        reload_id: Some(ReloadId::new("r-1")),
        applied_at: UnixMillis(1_700_000_000_120),
    }]
}

fn checkpoints() -> Vec<PublishedCheckpoint> {
    let (ra, _) = render_checksums();
    vec![PublishedCheckpoint {
        name: ObjectName::new("demo-haproxycfg"),
        render: ra,
        render_seq: Seq(2),
        resource_version: Some(ResourceVersion::new("4711")),
        published_at: UnixMillis(1_700_000_000_150),
    }]
}

/// The v4 fixture's rollback hold: on render B, asked for as `previous` (its
/// `previous_validated`).
pub fn rollback_hold() -> RollbackHold {
    let (_, rb) = render_checksums();
    RollbackHold {
        value: "previous".into(),
        render: rb,
        correlation: corr(23),
        since: UnixMillis(1_700_000_000_200),
    }
}

/// One checkpoint per component (DESIGN.md J11), in table (name) order; the quarantine entry
/// with `attempts` and `next_retry_at`; with `rollback`, the scheduler's `previous_validated`
/// and [`rollback_hold`].
fn components(
    attempts: u32,
    next_retry_at: UnixMillis,
    rollback: bool,
) -> Vec<ComponentCheckpoint> {
    let (ra, rb) = render_checksums();
    vec![
        ComponentCheckpoint {
            through: Seq(12),
            state: ComponentState::Publisher(PublisherCheckpoint {
                identity: Some(identity()),
                rendered: vec![RenderPlace {
                    render: ra,
                    seq: Seq(2),
                    at: UnixMillis(1_700_000_000_010),
                }],
                known_pods: vec![pod("haproxy-0"), pod("haproxy-1")],
                discovered: true,
                gone: vec![pod("haproxy-2")],
                pinned: true,
                queued_through: Some(Seq(11)),
                leading: true,
                retry_rejected: Some("2024-04-30".into()),
            }),
        },
        ComponentCheckpoint {
            through: Seq(12),
            state: ComponentState::Scheduler(SchedulerCheckpoint {
                last_validated: Some((ra, corr(3))),
                endpoints: vec![endpoint("haproxy-0", 7), endpoint("haproxy-1", 8)],
                runtime_config: Some(runtime()),
                applied: vec![(EndpointUrl::new("http://10.0.0.7:5555"), ra)],
                given_up: vec![EndpointUrl::new("http://10.0.0.8:5555")],
                rejected: vec![RejectedRender {
                    endpoint: EndpointUrl::new("http://10.0.0.7:5555"),
                    render: ra,
                    message: "dataplane rejected the request with status 400: [ALERT] x".into(),
                    attempts,
                    next_retry_at,
                }],
                previous_validated: rollback.then_some(rb),
                rollback: rollback.then(rollback_hold),
            }),
        },
        ComponentCheckpoint {
            through: Seq(9),
            state: ComponentState::Validator(ValidatorCheckpoint {
                last_passed: Some(ra),
            }),
        },
    ]
}

/// The quarantine entry's schema-3 fields as [`build`] writes them: the v3 fixture's, or for an
/// older fixture what `v2_to_v3` would write now.
fn quarantine(fixture: Fixture) -> (u32, UnixMillis) {
    if fixture.version() >= 3 {
        (QUARANTINE_ATTEMPTS, QUARANTINE_RETRY_AT)
    } else {
        (1, now())
    }
}

/// Writes `fixture` into an empty journal (the v1 fixture's records: only what schema 1 had; an
/// older fixture's quarantine entry as `v2_to_v3` leaves it, timed now).
pub fn build(j: &Journal, fixture: Fixture) {
    for b in script(quarantine(fixture), fixture.has_rollback()).batches {
        j.accept(b).expect("fixture batch");
    }
    if fixture.has_pod_truth() {
        j.accept(fixture_pod::batch()).expect("pod-truth batch");
    }
    if fixture.has_history() {
        for b in fixture_history::batches() {
            j.accept(b).expect("history batch");
        }
    }
    // Park haproxy-1's status (the HAProxyCfg "cannot take it yet"); fail one publish attempt.
    let pending = j.queue(Queue::StatusPending).expect("status");
    let e = pending
        .iter()
        .find(|e| e.key == WorkKey::Pod(PodStatusKey("haptic/demo-haproxycfg/haproxy-1".into())))
        .expect("haproxy-1 status");
    let WorkKey::Pod(key) = e.key.clone() else {
        unreachable!()
    };
    assert!(j.park(key, e.record.id).expect("park"));
    let p = &j.queue(Queue::Publish).expect("publish")[0];
    assert!(
        j.reschedule(
            Queue::Publish,
            p.key.clone(),
            p.record.id,
            UnixMillis(1_700_000_060_000)
        )
        .expect("reschedule")
    );
    j.put_blob(held_blob()).expect("held blob");
    j.mark_dispatched(DISPATCHED).expect("dispatched");
}

/// What [`build`] wrote for `fixture`.
pub fn expected(fixture: Fixture) -> Expected {
    let quarantine = if fixture.version() >= 3 {
        (QUARANTINE_ATTEMPTS, QUARANTINE_RETRY_AT)
    } else {
        (1, MIGRATED)
    };
    let s = script(quarantine, fixture.has_rollback());
    let mut queues: BTreeMap<Queue, Vec<(WorkItem, u32)>> = BTreeMap::new();
    for q in Queue::ALL {
        queues.insert(*q, Vec::new());
    }
    for item in s.enqueued {
        let mut q = item.queue();
        let attempt = u32::from(q == Queue::Publish);
        if let WorkItem::Status(st) = &item
            && st.pod.name.as_str() == "haproxy-1"
        {
            q = Queue::StatusParked;
        }
        queues.entry(q).or_default().push((item, attempt));
    }
    let (ra, rb) = render_checksums();
    let files_a = files_a();
    let render_a = Render {
        checksum: ra,
        config: Checksum::of(&config_a()),
        config_size_bytes: config_a().len() as u64,
        files: {
            let mut f: Vec<AuxFile> = files_a
                .iter()
                .map(|(k, p, c)| AuxFile {
                    kind: *k,
                    path: p.clone(),
                    blob: Checksum::of(c),
                    size_bytes: c.len() as u64,
                })
                .collect();
            f.sort_by(|a, b| a.path.cmp(&b.path));
            f
        },
    };
    let render_b = Render {
        checksum: rb,
        config: Checksum::of(&config_b()),
        config_size_bytes: config_b().len() as u64,
        files: vec![],
    };
    let mut files = vec![config_a(), config_b(), held_blob()];
    files.extend(files_a.into_iter().map(|(_, _, c)| c));
    Expected {
        events: s.events,
        queues,
        renders: vec![render_a, render_b],
        files,
        endpoints: endpoints(),
        checkpoints: checkpoints(),
        components: components(quarantine.0, quarantine.1, fixture.has_rollback()),
        endpoint_files: if fixture.has_pod_truth() {
            fixture_pod::endpoint_files()
        } else {
            Vec::new()
        },
        transactions: if fixture.has_pod_truth() {
            fixture_pod::transactions()
        } else {
            Vec::new()
        },
        history: if fixture.has_history() {
            fixture_history::timeline()
        } else {
            Vec::new()
        },
        term: TERM,
        identity: Identity::new("haptic-0"),
        dispatched_through: DISPATCHED,
    }
}

/// Asserts that `j` (opened at this build's schema, [`SCHEMA_VERSION`]) holds exactly
/// [`expected`]`(fixture)`, record for record, and verifies clean.
pub fn assert_matches(j: &Journal, fixture: Fixture) {
    let exp = expected(fixture);
    let report = j.verify().expect("verify runs");
    assert!(report.is_clean(), "verify: {:?}", report.problems);
    assert!(report.records_checked > 0);
    let meta = j.meta().expect("meta");
    assert_eq!(meta.schema_version, SCHEMA_VERSION);
    assert_eq!(meta.codec, "bincode2-serde-le-fixint");
    assert_eq!(meta.term, exp.term);
    assert_eq!(meta.identity.as_ref(), Some(&exp.identity));
    assert_eq!(meta.dispatched_through, exp.dispatched_through);
    assert_eq!(meta.next_seq, Seq(exp.events.len() as u64 + 1));
    // Every event, in order, with its header.
    let events = j.events(Seq(0), usize::MAX).expect("events");
    assert_eq!(events.len(), exp.events.len());
    for (i, ((seq, h, e), want)) in events.iter().zip(&exp.events).enumerate() {
        assert_eq!(*seq, Seq(i as u64 + 1));
        assert_eq!(e, want, "event {seq}");
        assert_eq!(h.kind, want.kind().as_str());
        assert!(h.term <= exp.term);
    }
    // Every queue.
    for q in Queue::ALL {
        let got: Vec<(WorkItem, u32)> = j
            .queue(*q)
            .expect("queue")
            .into_iter()
            .map(|e| (e.record.item, e.record.attempt))
            .collect();
        assert_eq!(&got, &exp.queues[q], "queue {q}");
        assert!(!got.is_empty(), "fixture must fill queue {q}");
    }
    // Blobs: manifests and files, content-checked.
    for r in &exp.renders {
        assert_eq!(j.get_render(r.checksum).expect("render").as_ref(), Some(r));
    }
    for f in &exp.files {
        assert_eq!(
            j.get_blob(Checksum::of(f)).expect("blob").as_deref(),
            Some(f.as_slice())
        );
    }
    assert_eq!(
        j.blobs().expect("blobs").len(),
        exp.renders.len() + exp.files.len()
    );
    assert_eq!(j.endpoints_applied().expect("endpoints"), exp.endpoints);
    assert_eq!(
        j.published_checkpoints().expect("checkpoints"),
        exp.checkpoints
    );
    for c in &exp.components {
        let mut got = j
            .component_checkpoint(c.state.component())
            .expect("component checkpoint");
        if fixture.version() < 3
            && let Some(got) = &mut got
        {
            assert_migrated_quarantine(got, FIXTURE_TIMES_BEFORE, now());
            set_retry_at(got, MIGRATED);
        }
        assert_eq!(got.as_ref(), Some(c));
    }
    assert_eq!(
        j.endpoints_files().expect("endpoint_files"),
        exp.endpoint_files
    );
    assert_eq!(
        j.endpoint_transactions().expect("endpoint_transaction"),
        exp.transactions
    );
    assert_eq!(
        j.pending().expect("pending").open_transactions,
        exp.transactions,
        "pending lists every open transaction"
    );
    assert_eq!(j.history().expect("pod_history"), exp.history);
}

/// The quarantine entries of `c` when it is the scheduler's (none for another component).
pub fn quarantine_of(c: &ComponentCheckpoint) -> &[RejectedRender] {
    match &c.state {
        ComponentState::Scheduler(s) => &s.rejected,
        _ => &[],
    }
}

/// The scheduler's state in `c` (none for another component).
pub fn scheduler_of(c: &ComponentCheckpoint) -> Option<&SchedulerCheckpoint> {
    match &c.state {
        ComponentState::Scheduler(s) => Some(s),
        _ => None,
    }
}

/// Sets the `next_retry_at` of every quarantine entry of `c`.
pub fn set_retry_at(c: &mut ComponentCheckpoint, at: UnixMillis) {
    if let ComponentState::Scheduler(s) = &mut c.state {
        for r in &mut s.rejected {
            r.next_retry_at = at;
        }
    }
}

/// Asserts that every quarantine entry of `c` is as `v2_to_v3` left it, run in `[from, to]`:
/// one attempt, retried at the migration's time.
pub fn assert_migrated_quarantine(c: &ComponentCheckpoint, from: UnixMillis, to: UnixMillis) {
    for r in quarantine_of(c) {
        assert_eq!(r.attempts, 1, "{r:?}");
        assert!(
            (from..=to).contains(&r.next_retry_at),
            "next_retry_at {:?} outside the migration's time {from:?}..={to:?}",
            r.next_retry_at
        );
    }
}
