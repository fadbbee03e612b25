//! The frozen record types against real files: every payload of a fixture decodes with the
//! frozen types of its schema and re-encodes to the same bytes; the schema-2 records and the
//! schema-3 and schema-4 checkpoints and the schema-4 history records also mean what the journal
//! wrote (field for field, enum variants by name).

use haptic_journal::redb::{self, ReadableDatabase};
use haptic_journal::*;
use haptic_migrations::{v1, v2, v3, v4};

use crate::fixture::{self, Fixture};
use crate::shared::{Row, byte_rows, try_rows};

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

/// [`round_trip`] of every record of `rows` (a table's [`byte_rows`]) as `T`; returns how many.
fn round_trip_all<T: serde::Serialize + serde::de::DeserializeOwned>(
    table: &str,
    rows: &[Row],
) -> usize {
    for (k, v) in rows {
        round_trip::<T>(table, k, v);
    }
    rows.len()
}

fn num(k: u64) -> String {
    k.to_string()
}

fn text(k: &str) -> String {
    k.to_owned()
}

/// Every record of the schema-1 tables of `path` round-trips through the frozen `v1` types,
/// but `component_state` in a file at schema 3, through the `v3` types, and at schema 4 or
/// later, through the `v4` types. Returns the number of records checked.
pub fn round_trip_v1_tables(path: &std::path::Path, f: Fixture) -> usize {
    let db = redb::Builder::new().open_read_only(path).unwrap();
    let rtx = db.begin_read().unwrap();
    let version = read_schema_version(&rtx).unwrap().unwrap();
    let mut n = round_trip_all::<v1::Event>("events", &byte_rows(&rtx, v1::tables::EVENTS, num));
    assert_eq!(n, fixture::expected(f).events.len());
    for name in v1::tables::FIFO {
        let def: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new(name);
        n += round_trip_all::<v1::WorkRecord>(name, &byte_rows(&rtx, def, num));
    }
    for name in v1::tables::BY_POD {
        let def: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new(name);
        n += round_trip_all::<v1::WorkRecord>(name, &byte_rows(&rtx, def, text));
    }
    for name in v1::tables::SLOTS {
        let def: redb::TableDefinition<(), &[u8]> = redb::TableDefinition::new(name);
        let slot = |()| "slot".to_owned();
        n += round_trip_all::<v1::WorkRecord>(name, &byte_rows(&rtx, def, slot));
    }
    n += round_trip_all::<v1::EndpointApplied>(
        "endpoint_applied",
        &byte_rows(&rtx, v1::tables::ENDPOINT_APPLIED, text),
    );
    n += round_trip_all::<v1::PublishedCheckpoint>(
        "published_checkpoint",
        &byte_rows(&rtx, v1::tables::PUBLISHED_CHECKPOINT, text),
    );
    let components: fn(&str, &[Row]) -> usize = if version >= 4 {
        round_trip_all::<v4::ComponentCheckpoint>
    } else if version == 3 {
        round_trip_all::<v3::ComponentCheckpoint>
    } else {
        round_trip_all::<v1::ComponentCheckpoint>
    };
    let components = components(
        "component_state",
        &byte_rows(&rtx, v1::tables::COMPONENT_STATE, text),
    );
    assert_eq!(components, 3, "a checkpoint of every component");
    let mut renders = 0;
    for (_, v) in byte_rows(&rtx, v1::tables::BLOBS, |k: &[u8]| hex::encode(k)) {
        let raw = codec::open(&v).unwrap();
        if raw.kind == "blob.render" {
            round_trip::<v1::Render>("blobs", "render", &v);
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

/// [`round_trip`] of every record of `rows` (table `table`, keyed by URL) as `T`, asserting
/// its envelope kind `kind` and that its key is its URL (`url`); returns the values.
fn round_trip_by_url<T: serde::Serialize + serde::de::DeserializeOwned>(
    rows: &[Row],
    table: &str,
    kind: &str,
    url: impl Fn(&T) -> &str,
) -> Vec<T> {
    rows.iter()
        .map(|(k, v)| {
            let (t, got) = round_trip::<T>(table, k, v);
            assert_eq!(got, kind);
            assert_eq!(k, url(&t), "keyed by URL");
            t
        })
        .collect()
}

/// Every record of the tables schema 2 added round-trips through the frozen `v2` types and
/// equals, in the frozen shape, what [`fixture::expected`] says the journal wrote. Returns the
/// number of records checked.
pub fn round_trip_v2_tables(path: &std::path::Path, f: Fixture) -> usize {
    let exp = fixture::expected(f);
    let db = redb::Builder::new().open_read_only(path).unwrap();
    let rtx = db.begin_read().unwrap();
    let files = round_trip_by_url(
        &byte_rows(&rtx, v2::tables::ENDPOINT_FILES, text),
        "endpoint_files",
        v2::EndpointFiles::RECORD_KIND,
        |e: &v2::EndpointFiles| &e.endpoint.0,
    );
    let want: Vec<v2::EndpointFiles> = exp.endpoint_files.iter().map(frozen_files).collect();
    assert_eq!(files, want);
    let txs = round_trip_by_url(
        &byte_rows(&rtx, v2::tables::ENDPOINT_TRANSACTION, text),
        "endpoint_transaction",
        v2::EndpointTransaction::RECORD_KIND,
        |t: &v2::EndpointTransaction| &t.endpoint.0,
    );
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
    for (k, v) in byte_rows(&rtx, v1::tables::COMPONENT_STATE, text) {
        let (c, kind) = round_trip::<C>("component_state", &k, &v);
        assert_eq!(kind, v4::ComponentCheckpoint::RECORD_KIND);
        assert_eq!(k, component(&c), "keyed by component");
        out.push((codec::open(&v).unwrap().header(), c));
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
    let rows = try_rows(&rtx, v4::tables::POD_HISTORY, |(pod_key, seq), v| {
        (pod_key.to_owned(), seq, v.to_vec())
    });
    for (pod_key, seq, v) in rows.unwrap() {
        let key = format!("{pod_key}#{seq}");
        let (rec, kind) = round_trip::<v4::SyncRecord>("pod_history", &key, &v);
        assert_eq!(kind, v4::SyncRecord::RECORD_KIND);
        assert_eq!(
            pod_key,
            format!("{}/{}", rec.pod.namespace.0, rec.pod.name.0)
        );
        got.push((pod_key, seq, rec));
    }
    let want: Vec<(String, u64, v4::SyncRecord)> = kept
        .iter()
        .map(|(p, s, r)| (p.clone(), *s, frozen_sync(r)))
        .collect();
    assert_eq!(got, want);
    got.len()
}
