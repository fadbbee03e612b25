//! The schema-2 records of `fixtures/v2.redb` (and `fixtures/v3.redb`): what three pods'
//! Dataplane endpoints hold besides their configuration (tables `endpoint_files`,
//! `endpoint_transaction`).
//!
//! ```text
//!  endpoint_files        http://10.0.0.7:5555  haproxy-0  4 files: one per store
//!                            ssl_certificates/example.com.pem  loaded = written
//!                            ssl_ca_files/root.pem             loaded = written
//!                            general/503.http                  loaded = an older content
//!                            maps/hosts.map                    loaded unknown (None)
//!                        http://10.0.0.8:5555  haproxy-1  1 file, loaded unknown
//!  endpoint_transaction  http://10.0.0.7:5555  Open        at version 12
//!                        http://10.0.0.8:5555  Committing  at version 13
//!                        http://10.0.0.9:5555  Unknown     at version 7
//! ```

use haptic_journal::*;

use crate::fixture::{files_a, pod};

fn url(ip: u8) -> EndpointUrl {
    EndpointUrl::new(format!("http://10.0.0.{ip}:5555"))
}

/// The content of the fixture's auxiliary file stored under `path` (see `fixture::files_a`).
fn content(path: &str) -> Checksum {
    files_a()
        .into_iter()
        .find(|(_, p, _)| p == path)
        .map(|(_, _, c)| Checksum::of(&c))
        .unwrap_or_else(|| panic!("no fixture file {path}"))
}

fn file(
    store: FileStore,
    name: &str,
    written: Checksum,
    loaded: Option<Checksum>,
) -> StoredFileState {
    StoredFileState {
        store,
        name: name.to_owned(),
        written,
        loaded,
    }
}

/// `endpoint_files`, in URL order (each record's files sorted by store and name).
pub fn endpoint_files() -> Vec<EndpointFiles> {
    let mut a = EndpointFiles {
        endpoint: url(7),
        pod: pod("haproxy-0"),
        files: Vec::new(),
        updated_at: UnixMillis(1_700_000_000_125),
    };
    // Put out of order: `set` sorts them.
    a.set(file(
        FileStore::Map,
        "hosts.map",
        content("maps/hosts.map"),
        None,
    ));
    let pem = content("ssl/example.com.pem");
    a.set(file(
        FileStore::SslCertificate,
        "example.com.pem",
        pem,
        Some(pem),
    ));
    a.set(file(
        FileStore::General,
        "503.http",
        content("general/503.http"),
        Some(Checksum::of(b"HTTP/1.0 503\r\n\r\nan older page")),
    ));
    let ca = content("ca/root.pem");
    a.set(file(FileStore::CaFile, "root.pem", ca, Some(ca)));
    let b = EndpointFiles {
        endpoint: url(8),
        pod: pod("haproxy-1"),
        files: vec![file(
            FileStore::Map,
            "hosts.map",
            content("maps/hosts.map"),
            None,
        )],
        updated_at: UnixMillis(1_700_000_000_126),
    };
    vec![a, b]
}

/// `endpoint_transaction`: one record in each state, in URL order.
pub fn transactions() -> Vec<EndpointTransaction> {
    let t = |ip: u8, pod_name: &str, id: &str, version: i64, state: TransactionState| {
        EndpointTransaction {
            endpoint: url(ip),
            pod: pod(pod_name),
            id: TransactionId::new(id),
            version: ConfigVersion(version),
            state,
            started_at: UnixMillis(1_700_000_000_200 + u64::from(ip)),
        }
    };
    vec![
        t(
            7,
            "haproxy-0",
            "273e3385-2d0c-4fb1-aa27-93cbb31ff203",
            12,
            TransactionState::Open,
        ),
        t(
            8,
            "haproxy-1",
            "9a1c0f4e-3b7d-4c52-8e61-0d2f7a4b5c68",
            13,
            TransactionState::Committing,
        ),
        t(
            9,
            "haproxy-2",
            "c4e8b2a0-71f3-4d9e-b6a5-2e0f9d8c7b14",
            7,
            TransactionState::Unknown,
        ),
    ]
}

/// The batch that writes them.
pub fn batch() -> Batch {
    let mut b = Batch::new();
    for e in endpoint_files() {
        b.push(Op::PutEndpointFiles(e));
    }
    for t in transactions() {
        b.push(Op::PutEndpointTransaction(t));
    }
    b
}
