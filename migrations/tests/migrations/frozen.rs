//! The frozen record types against real files: every payload of a fixture decodes with the
//! frozen types of its schema and re-encodes to the same bytes; the schema-2 records and the
//! schema-3 and schema-4 checkpoints and the schema-4 history records also mean what the journal
//! wrote (field for field, enum variants by name).

use haptic_journal::redb::{self, ReadableDatabase, ReadableTable};
use haptic_journal::*;
use haptic_migrations::{v1, v2, v3, v4};

use crate::fixture::{self, Fixture};

/// Decodes `envelope`'s payload as `T` (frozen codec), re-encodes it, asserts the same bytes;
/// returns the value and the envelope's kind.
fn round_trip<T: serde::Serialize + serde::de::DeserializeOwned>(
    table: &str,
    key: &str,
    envelope: &[u8],
) -> (T, String) {
    let raw = codec::open(envelope).unwrap_or_else(|e| panic!("{table} {key}: {e}"));
    let v: T = v1::decode(raw.payload)
        .unwrap_or_else(|| panic!("{table} {key} does not decode with the frozen types"));
    assert_eq!(
        v1::encode(&v).unwrap(),
        raw.payload,
        "{table} {key}: frozen types re-encode differently"
    );
    (v, raw.kind.to_owned())
}

/// Every record of the schema-1 tables of `path` round-trips through the frozen `v1` types,
/// but `component_state` in a file at schema 3, through the `v3` types, and at schema 4 or
/// later, through the `v4` types. Returns the number of records checked.
pub fn round_trip_v1_tables(path: &std::path::Path, f: Fixture) -> usize {
    let db = redb::Builder::new().open_read_only(path).unwrap();
    let rtx = db.begin_read().unwrap();
    let version = read_schema_version(&rtx).unwrap().unwrap();
    let mut n = 0;
    for r in rtx.open_table(v1::tables::EVENTS).unwrap().iter().unwrap() {
        let (k, v) = r.unwrap();
        round_trip::<v1::Event>("events", &k.value().to_string(), v.value());
        n += 1;
    }
    assert_eq!(n, fixture::expected(f).events.len());
    for name in v1::tables::FIFO {
        let def: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new(name);
        for r in rtx.open_table(def).unwrap().iter().unwrap() {
            let (k, v) = r.unwrap();
            round_trip::<v1::WorkRecord>(name, &k.value().to_string(), v.value());
            n += 1;
        }
    }
    for name in v1::tables::BY_POD {
        let def: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new(name);
        for r in rtx.open_table(def).unwrap().iter().unwrap() {
            let (k, v) = r.unwrap();
            round_trip::<v1::WorkRecord>(name, k.value(), v.value());
            n += 1;
        }
    }
    for name in v1::tables::SLOTS {
        let def: redb::TableDefinition<(), &[u8]> = redb::TableDefinition::new(name);
        for r in rtx.open_table(def).unwrap().iter().unwrap() {
            let (_, v) = r.unwrap();
            round_trip::<v1::WorkRecord>(name, "slot", v.value());
            n += 1;
        }
    }
    for r in rtx
        .open_table(v1::tables::ENDPOINT_APPLIED)
        .unwrap()
        .iter()
        .unwrap()
    {
        let (k, v) = r.unwrap();
        round_trip::<v1::EndpointApplied>("endpoint_applied", k.value(), v.value());
        n += 1;
    }
    for r in rtx
        .open_table(v1::tables::PUBLISHED_CHECKPOINT)
        .unwrap()
        .iter()
        .unwrap()
    {
        let (k, v) = r.unwrap();
        round_trip::<v1::PublishedCheckpoint>("published_checkpoint", k.value(), v.value());
        n += 1;
    }
    let mut components = 0;
    for r in rtx
        .open_table(v1::tables::COMPONENT_STATE)
        .unwrap()
        .iter()
        .unwrap()
    {
        let (k, v) = r.unwrap();
        if version >= 4 {
            round_trip::<v4::ComponentCheckpoint>("component_state", k.value(), v.value());
        } else if version == 3 {
            round_trip::<v3::ComponentCheckpoint>("component_state", k.value(), v.value());
        } else {
            round_trip::<v1::ComponentCheckpoint>("component_state", k.value(), v.value());
        }
        components += 1;
    }
    assert_eq!(components, 3, "a checkpoint of every component");
    let mut renders = 0;
    for r in rtx.open_table(v1::tables::BLOBS).unwrap().iter().unwrap() {
        let (_, v) = r.unwrap();
        let raw = codec::open(v.value()).unwrap();
        if raw.kind == "blob.render" {
            round_trip::<v1::Render>("blobs", "render", v.value());
            renders += 1;
        }
    }
    assert_eq!(renders, 2);
    assert!(n > 20);
    n + components + renders
}

fn store(s: FileStore) -> v2::FileStore {
    match s {
        FileStore::SslCertificate => v2::FileStore::SslCertificate,
        FileStore::CaFile => v2::FileStore::CaFile,
        FileStore::General => v2::FileStore::General,
        FileStore::Map => v2::FileStore::Map,
    }
}

fn checksum(c: Checksum) -> v2::Checksum {
    v2::Checksum(c.0)
}

fn pod(p: &PodRef) -> v2::PodRef {
    v2::PodRef {
        namespace: v2::Namespace(p.namespace.as_str().to_owned()),
        name: v2::ObjectName(p.name.as_str().to_owned()),
    }
}

/// The journal's `EndpointFiles` in the frozen v2 shape (by field and variant name).
fn frozen_files(e: &EndpointFiles) -> v2::EndpointFiles {
    v2::EndpointFiles {
        endpoint: v2::EndpointUrl(e.endpoint.as_str().to_owned()),
        pod: pod(&e.pod),
        files: e
            .files
            .iter()
            .map(|f| v2::StoredFileState {
                store: store(f.store),
                name: f.name.clone(),
                written: checksum(f.written),
                loaded: f.loaded.map(checksum),
            })
            .collect(),
        updated_at: v2::UnixMillis(e.updated_at.0),
    }
}

/// The journal's `EndpointTransaction` in the frozen v2 shape.
fn frozen_transaction(t: &EndpointTransaction) -> v2::EndpointTransaction {
    v2::EndpointTransaction {
        endpoint: v2::EndpointUrl(t.endpoint.as_str().to_owned()),
        pod: pod(&t.pod),
        id: v2::TransactionId(t.id.as_str().to_owned()),
        version: v2::ConfigVersion(t.version.0),
        state: match t.state {
            TransactionState::Open => v2::TransactionState::Open,
            TransactionState::Committing => v2::TransactionState::Committing,
            TransactionState::Unknown => v2::TransactionState::Unknown,
        },
        started_at: v2::UnixMillis(t.started_at.0),
    }
}

/// Every record of the tables schema 2 added round-trips through the frozen `v2` types and
/// equals, in the frozen shape, what [`fixture::expected`] says the journal wrote. Returns the
/// number of records checked.
pub fn round_trip_v2_tables(path: &std::path::Path, f: Fixture) -> usize {
    let exp = fixture::expected(f);
    let db = redb::Builder::new().open_read_only(path).unwrap();
    let rtx = db.begin_read().unwrap();
    let mut files = Vec::new();
    for r in rtx
        .open_table(v2::tables::ENDPOINT_FILES)
        .unwrap()
        .iter()
        .unwrap()
    {
        let (k, v) = r.unwrap();
        let (e, kind) = round_trip::<v2::EndpointFiles>("endpoint_files", k.value(), v.value());
        assert_eq!(kind, v2::EndpointFiles::RECORD_KIND);
        assert_eq!(k.value(), e.endpoint.0, "keyed by URL");
        files.push(e);
    }
    let want: Vec<v2::EndpointFiles> = exp.endpoint_files.iter().map(frozen_files).collect();
    assert_eq!(files, want);
    let mut txs = Vec::new();
    for r in rtx
        .open_table(v2::tables::ENDPOINT_TRANSACTION)
        .unwrap()
        .iter()
        .unwrap()
    {
        let (k, v) = r.unwrap();
        let (t, kind) =
            round_trip::<v2::EndpointTransaction>("endpoint_transaction", k.value(), v.value());
        assert_eq!(kind, v2::EndpointTransaction::RECORD_KIND);
        assert_eq!(k.value(), t.endpoint.0, "keyed by URL");
        txs.push(t);
    }
    let want: Vec<v2::EndpointTransaction> =
        exp.transactions.iter().map(frozen_transaction).collect();
    assert_eq!(txs, want);
    files.len() + txs.len()
}

/// Every `component_state` record of `path` (a file at schema `version` or later) round-trips
/// through the frozen `C` (`v3` or `v4::ComponentCheckpoint`) and has the kind and key the
/// journal gives it (`component` names a record's key). Returns them in key order, with their
/// envelope headers.
fn round_trip_components<C: serde::Serialize + serde::de::DeserializeOwned>(
    path: &std::path::Path,
    version: u32,
    component: fn(&C) -> &'static str,
) -> Vec<(RecordHeader, C)> {
    let db = redb::Builder::new().open_read_only(path).unwrap();
    let rtx = db.begin_read().unwrap();
    assert!(read_schema_version(&rtx).unwrap().unwrap() >= version);
    let mut out = Vec::new();
    for r in rtx
        .open_table(v1::tables::COMPONENT_STATE)
        .unwrap()
        .iter()
        .unwrap()
    {
        let (k, v) = r.unwrap();
        let (c, kind) = round_trip::<C>("component_state", k.value(), v.value());
        assert_eq!(kind, v4::ComponentCheckpoint::RECORD_KIND);
        assert_eq!(k.value(), component(&c), "keyed by component");
        out.push((codec::open(v.value()).unwrap().header(), c));
    }
    out
}

/// [`round_trip_components`] with the frozen `v3` types: a file at schema 3 (the committed v3
/// fixture; after `v3_to_v4` the scheduler's record no longer decodes as schema 3).
pub fn round_trip_v3_components(
    path: &std::path::Path,
) -> Vec<(RecordHeader, v3::ComponentCheckpoint)> {
    round_trip_components(path, 3, |c: &v3::ComponentCheckpoint| c.state.component())
}

/// [`round_trip_components`] with the frozen `v4` types: a file at schema 4.
pub fn round_trip_v4_components(
    path: &std::path::Path,
) -> Vec<(RecordHeader, v4::ComponentCheckpoint)> {
    round_trip_components(path, 4, |c: &v4::ComponentCheckpoint| c.state.component())
}

/// A frozen schema-3 checkpoint as schema 4 reads it: every field the same, the scheduler's
/// `previous_validated` and `rollback` empty (what `v3_to_v4` must write; stated here on its
/// own, field by field, rather than calling the step).
pub fn as_v4(c: &v3::ComponentCheckpoint) -> v4::ComponentCheckpoint {
    let state = match &c.state {
        v3::ComponentState::Scheduler(s) => {
            v4::ComponentState::Scheduler(v4::SchedulerCheckpoint {
                last_validated: s.last_validated.clone(),
                endpoints: s.endpoints.clone(),
                runtime_config: s.runtime_config.clone(),
                applied: s.applied.clone(),
                given_up: s.given_up.clone(),
                rejected: s.rejected.clone(),
                previous_validated: None,
                rollback: None,
            })
        }
        v3::ComponentState::Validator(v) => v4::ComponentState::Validator(v.clone()),
        v3::ComponentState::Publisher(p) => v4::ComponentState::Publisher(p.clone()),
    };
    v4::ComponentCheckpoint {
        through: c.through,
        state,
    }
}

/// The journal's checkpoint and the frozen one are the same value: the same payload bytes
/// (the types differ; bincode numbers fields and variants in order, so equal bytes mean equal
/// fields), and for the quarantine entries and the rollback fields the same fields by name.
pub fn assert_same_checkpoint(journal: &ComponentCheckpoint, frozen: &v4::ComponentCheckpoint) {
    assert_eq!(
        codec::encode_payload(journal),
        v4::encode(frozen).unwrap(),
        "{journal:?} != {frozen:?}"
    );
    let rejected: Vec<(String, [u8; 32], String, u32, u64)> = match &frozen.state {
        v4::ComponentState::Scheduler(s) => s
            .rejected
            .iter()
            .map(|r| {
                (
                    r.endpoint.0.clone(),
                    r.render.0,
                    r.message.clone(),
                    r.attempts,
                    r.next_retry_at.0,
                )
            })
            .collect(),
        _ => Vec::new(),
    };
    let want: Vec<(String, [u8; 32], String, u32, u64)> = crate::fixture::quarantine_of(journal)
        .iter()
        .map(|r| {
            (
                r.endpoint.as_str().to_owned(),
                r.render.0,
                r.message.clone(),
                r.attempts,
                r.next_retry_at.0,
            )
        })
        .collect();
    assert_eq!(rejected, want);
    type Rollback = (Option<[u8; 32]>, Option<(String, [u8; 32], String, u64)>);
    let got: Rollback = match &frozen.state {
        v4::ComponentState::Scheduler(s) => (
            s.previous_validated.map(|c| c.0),
            s.rollback.as_ref().map(|h| {
                (
                    h.value.clone(),
                    h.render.0,
                    h.correlation.event_id.0.clone(),
                    h.since.0,
                )
            }),
        ),
        _ => (None, None),
    };
    let want: Rollback = crate::fixture::scheduler_of(journal).map_or((None, None), |s| {
        (
            s.previous_validated.map(|c| c.0),
            s.rollback.as_ref().map(|h| {
                (
                    h.value.clone(),
                    h.render.0,
                    h.correlation.event_id.as_str().to_owned(),
                    h.since.0,
                )
            }),
        )
    });
    assert_eq!(got, want);
}

/// The journal's `SyncRecord` in the frozen v4 shape (enum variants by name).
fn frozen_sync(r: &SyncRecord) -> v4::SyncRecord {
    let counts = |c: ChangeCounts| v4::ChangeCounts {
        added: c.added,
        removed: c.removed,
        modified: c.modified,
    };
    let o = r.operations;
    v4::SyncRecord {
        pod: pod(&r.pod),
        endpoint: v4::EndpointUrl(r.endpoint.as_str().to_owned()),
        render: checksum(r.render),
        started_at: v4::UnixMillis(r.started_at.0),
        ended_at: v4::UnixMillis(r.ended_at.0),
        mode: r.mode.map(|m| match m {
            SyncMode::FineGrained => v4::SyncMode::FineGrained,
            SyncMode::Runtime => v4::SyncMode::Runtime,
            SyncMode::RawInitial => v4::SyncMode::RawInitial,
            SyncMode::RawThreshold => v4::SyncMode::RawThreshold,
            SyncMode::RawFallback => v4::SyncMode::RawFallback,
            SyncMode::RawUnmodelled => v4::SyncMode::RawUnmodelled,
            SyncMode::RawResync => v4::SyncMode::RawResync,
            SyncMode::NoRuntimeApi => v4::SyncMode::NoRuntimeApi,
        }),
        operations: v4::OperationCounts {
            total_api_operations: o.total_api_operations,
            backends: counts(o.backends),
            servers: counts(o.servers),
            frontends: counts(o.frontends),
            maps: counts(o.maps),
            ssl_certs: counts(o.ssl_certs),
            general_files: counts(o.general_files),
        },
        reloaded: r.reloaded,
        reload_id: r
            .reload_id
            .as_ref()
            .map(|id| v4::ReloadId(id.as_str().to_owned())),
        result: match &r.result {
            SyncResult::Applied => v4::SyncResult::Applied,
            SyncResult::Failed { message } => v4::SyncResult::Failed {
                message: message.clone(),
            },
            SyncResult::Rejected { message } => v4::SyncResult::Rejected {
                message: message.clone(),
            },
        },
        term: v4::Term(r.term.0),
        deployment: v4::DeploymentId(r.deployment.as_str().to_owned()),
    }
}

/// Every record of the table schema 4 added (`pod_history`) round-trips through the frozen
/// `v4` types, is keyed by its pod, and equals, in the frozen shape, what `kept` says the
/// journal keeps (`(pod key, sequence, record)` in key order). Returns the number of records.
pub fn round_trip_v4_history(path: &std::path::Path, kept: &[(String, u64, SyncRecord)]) -> usize {
    let db = redb::Builder::new().open_read_only(path).unwrap();
    let rtx = db.begin_read().unwrap();
    let mut got = Vec::new();
    for r in rtx
        .open_table(v4::tables::POD_HISTORY)
        .unwrap()
        .iter()
        .unwrap()
    {
        let (k, v) = r.unwrap();
        let (pod_key, seq) = k.value();
        let key = format!("{pod_key}#{seq}");
        let (rec, kind) = round_trip::<v4::SyncRecord>("pod_history", &key, v.value());
        assert_eq!(kind, v4::SyncRecord::RECORD_KIND);
        assert_eq!(
            pod_key,
            format!("{}/{}", rec.pod.namespace.0, rec.pod.name.0)
        );
        got.push((pod_key.to_owned(), seq, rec));
    }
    let want: Vec<(String, u64, v4::SyncRecord)> = kept
        .iter()
        .map(|(p, s, r)| (p.clone(), *s, frozen_sync(r)))
        .collect();
    assert_eq!(got, want);
    got.len()
}
