//! `haptic::source::ingest`: the HTTP ingest endpoint over a real journal and dispatcher.
//!
//! `202` comes only after the render's `TemplateRendered` and blobs are in the journal, with the
//! checksum the directory source computes for the same tree (CA files included); a follower
//! answers `503` naming the Lease holder; tokens, invalid parts and size are refused; a repeated
//! render is acknowledged without journaling it again.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use haptic::dispatch::{DispatchHandle, Dispatcher, Leadership, SubscribeOptions};
use haptic::source::dir::read_render;
use haptic::source::ingest::{IngestConfig, IngestError, IngestServer, read_token};
use haptic_journal::redb::StorageBackend;
use haptic_journal::redb::backends::InMemoryBackend;
use haptic_journal::{
    Batch, Checksum, Correlation, Event, EventKind, Identity, Journal, JournalOptions, Seq, Term,
};
use k8s_openapi::ByteString;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use reqwest::StatusCode;
use reqwest::multipart::{Form, Part};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::{NS, api_server};

const TOKEN: &str = "s3cret-token";

/// Creates the Secret `name` in [`NS`] holding `value` under `key`.
async fn create_secret(emu: &super::Fleet, name: &str, key: &str, value: &str) {
    Api::<Secret>::namespaced(emu.client(), NS)
        .create(
            &PostParams::default(),
            &Secret {
                metadata: ObjectMeta {
                    name: Some(name.into()),
                    namespace: Some(NS.into()),
                    ..Default::default()
                },
                data: Some([(key.to_owned(), ByteString(value.into()))].into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
}

fn corpus(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus/renders")
        .join(name)
}

/// A journal, a dispatcher with a recording subscriber, and the endpoint on a loopback port.
struct Node {
    _dir: tempfile::TempDir,
    journal: Arc<Journal>,
    handle: DispatchHandle,
    recorded: Arc<Mutex<Vec<(Seq, Event)>>>,
    server: IngestServer,
    url: String,
    cancel: CancellationToken,
}

impl Node {
    async fn start(cfg: IngestConfig) -> Node {
        let dir = tempfile::tempdir().unwrap();
        let journal =
            Arc::new(Journal::open(&JournalOptions::new(dir.path().join("j.redb"))).unwrap());
        Node::on(cfg, journal, dir).await
    }

    async fn on(cfg: IngestConfig, journal: Arc<Journal>, dir: tempfile::TempDir) -> Node {
        let mut d = Dispatcher::new(journal.clone());
        let mut sub = d.subscribe(SubscribeOptions::new("recorder"));
        let handle = d.handle();
        let cancel = CancellationToken::new();
        tokio::spawn(d.run(cancel.clone()));
        let recorded = Arc::new(Mutex::new(Vec::new()));
        let rec = recorded.clone();
        tokio::spawn(async move {
            while let Some(delivery) = sub.recv().await {
                rec.lock()
                    .unwrap()
                    .push((delivery.seq, (*delivery.event).clone()));
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        // The acceptor: the one door into the journal, as in `haptic run`.
        let (tx, rx) = tokio::sync::mpsc::channel(haptic::runtime::inputs::INPUT_CAPACITY);
        tokio::spawn(haptic::runtime::inputs::run(
            rx,
            handle.clone(),
            Arc::new(haptic::runtime::inputs::AcceptorStats::default()),
            haptic::telemetry::Metrics::new(),
        ));
        let server = IngestServer::new(cfg, tx, handle.leadership());
        tokio::spawn(server.clone().run(listener, cancel.clone()));
        Node {
            _dir: dir,
            journal,
            handle,
            recorded,
            server,
            url,
            cancel,
        }
    }

    /// Journals `BecameLeader` through the handle, as the runtime does, and waits for the
    /// dispatcher to see it.
    async fn lead(&self) {
        let b = Batch::became_leader(Correlation::new("lead-1"), Identity::new("me"), Term(1));
        self.handle.accept(b).await.unwrap();
        tokio::time::timeout(
            Duration::from_secs(30),
            self.handle.leadership().wait_for(|l| l.is_leader()),
        )
        .await
        .unwrap()
        .unwrap();
        assert!(matches!(
            *self.handle.leadership().borrow(),
            Leadership::Leader(Term(1))
        ));
    }

    fn next_seq(&self) -> u64 {
        self.journal.meta().unwrap().next_seq.0
    }

    /// Every `TemplateRendered` in the journal: (seq, render, trigger).
    fn renders(&self) -> Vec<(Seq, Checksum, String)> {
        self.journal
            .events(Seq(1), 10_000)
            .unwrap()
            .into_iter()
            .filter_map(|(seq, _, e)| match e {
                Event::TemplateRendered {
                    render,
                    trigger_reason,
                    ..
                } => Some((seq, render, trigger_reason)),
                _ => None,
            })
            .collect()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// One part per file of a render directory, named by its render-relative path.
fn form_of(dir: &Path) -> Form {
    let content = read_render(dir).unwrap();
    let mut form = Form::new().part(
        "haproxy.cfg",
        Part::bytes(content.config.clone()).file_name("haproxy.cfg"),
    );
    for f in content.files {
        let name = f.name().to_owned();
        form = form.part(f.path.clone(), Part::bytes(f.content).file_name(name));
    }
    form
}

fn form(parts: &[(&str, &str)]) -> Form {
    parts.iter().fold(Form::new(), |form, (name, body)| {
        form.part((*name).to_owned(), Part::text((*body).to_owned()))
    })
}

fn tar_of(dir: &Path) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    b.append_dir_all(".", dir).unwrap();
    b.into_inner().unwrap()
}

async fn post(node: &Node, token: Option<&str>, form: Form) -> (StatusCode, Value) {
    let mut req = reqwest::Client::new()
        .post(format!("{}/v1/renders", node.url))
        .multipart(form);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status();
    (status, resp.json().await.unwrap_or(Value::Null))
}

async fn post_tar(node: &Node, body: Vec<u8>) -> (StatusCode, Value) {
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/renders", node.url))
        .bearer_auth(TOKEN)
        .header("content-type", "application/x-tar")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = resp.status();
    (status, resp.json().await.unwrap())
}

#[tokio::test]
async fn accepted_only_once_journaled_with_the_directory_checksum_and_idempotent() {
    let node = Node::start(IngestConfig::new(Some(TOKEN.into()))).await;
    node.lead().await;
    let dir = corpus("07-ca");
    let expected = read_render(&dir).unwrap();
    assert!(
        expected.files.iter().any(|f| f.path.starts_with("ca/")),
        "the corpus render has CA files"
    );

    let (status, body) = post(&node, Some(TOKEN), form_of(&dir)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    // Read back right after the 202, without waiting: it must already be durable.
    let renders = node.renders();
    assert_eq!(renders.len(), 1, "{renders:?}");
    let (seq, checksum, trigger) = renders[0].clone();
    assert_eq!(checksum, expected.checksum());
    assert_eq!(trigger, "ingest");
    assert_eq!(body["checksum"], expected.checksum().to_string());
    assert_eq!(body["seq"], seq.0);
    assert_eq!(body["duplicate"], false);
    let stored = haptic::dispatch::render::load(&node.journal, checksum)
        .unwrap()
        .into_content();
    assert_eq!(stored, expected, "config and every file, CA included");

    // The subscribers get it after the commit.
    // (bound: the 30 s the leadership wait above allows)
    haptic_testkit::eventually(
        Duration::from_secs(30),
        "the recorder to get the TemplateRendered",
        || {
            let delivered = node
                .recorded
                .lock()
                .unwrap()
                .iter()
                .any(|(s, e)| *s == seq && e.kind() == EventKind::TemplateRendered);
            std::future::ready(delivered)
        },
    )
    .await;

    // The same render again, as multipart and as a tar: 202 duplicate, nothing journaled.
    let before = node.next_seq();
    let (status, body) = post(&node, Some(TOKEN), form_of(&dir)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["duplicate"], true);
    assert_eq!(body["seq"], seq.0);
    // Names sent verbatim (`name="ca/clients-ca.pem"`, as curl does) rather than RFC 8187-encoded.
    let (status, body) = post(&node, Some(TOKEN), form_of(&dir).percent_encode_noop()).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["duplicate"], true, "{body}");
    let (status, body) = post_tar(&node, tar_of(&dir)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(
        body["duplicate"], true,
        "a tar of the tree has the same checksum"
    );
    assert_eq!(node.next_seq(), before, "a duplicate is not journaled");

    // Another render as a tar: journaled.
    let other = corpus("02-maps");
    let (status, body) = post_tar(&node, tar_of(&other)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["duplicate"], false);
    let other_sum = read_render(&other).unwrap().checksum();
    assert_eq!(body["checksum"], other_sum.to_string());
    assert_eq!(node.renders().last().unwrap().1, other_sum);

    // The latest accepted render.
    let latest: Value = reqwest::Client::new()
        .get(format!("{}/v1/renders/latest", node.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(latest["checksum"], other_sum.to_string());
    let stats = node.server.stats();
    assert_eq!((stats.accepted, stats.duplicates), (2, 3), "{stats:?}");
}

#[tokio::test]
async fn a_follower_answers_503_naming_the_lease_holder_and_the_token_comes_from_a_secret() {
    let emu = api_server().await;
    Api::<Lease>::namespaced(emu.client(), NS)
        .create(
            &PostParams::default(),
            &Lease {
                metadata: ObjectMeta {
                    name: Some("haptic-leader".into()),
                    namespace: Some(NS.into()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some("haptic-1".into()),
                    lease_transitions: Some(3),
                    ..Default::default()
                }),
            },
        )
        .await
        .unwrap();
    for (name, key) in [("ingest", "token"), ("wrong-key", "password")] {
        create_secret(&emu, name, key, &format!("{TOKEN}\n")).await;
    }
    let token = read_token(emu.client(), NS, "ingest").await.unwrap();
    assert_eq!(token, TOKEN, "trimmed of the trailing newline");
    let err = read_token(emu.client(), NS, "wrong-key").await.unwrap_err();
    assert!(matches!(err, IngestError::TokenMissing { .. }), "{err:?}");
    assert!(
        err.to_string().contains("wrong-key") && err.to_string().contains("`token`"),
        "{err}"
    );
    let err = read_token(emu.client(), NS, "absent").await.unwrap_err();
    assert!(matches!(err, IngestError::SecretNotFound { .. }), "{err:?}");
    assert!(err.to_string().contains("absent"), "{err}");

    let node =
        Node::start(IngestConfig::new(Some(token)).lease(emu.client(), NS, "haptic-leader")).await;
    let before = node.next_seq();
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/renders", node.url))
        .bearer_auth(TOKEN)
        .multipart(form_of(&corpus("07-ca")))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(resp.headers()["retry-after"], "2");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"], "not the leader");
    assert_eq!(body["leader"], "haptic-1");
    assert_eq!(node.next_seq(), before, "a follower journals nothing");

    // Without a Lease to read, the leader is unknown.
    let blind = Node::start(IngestConfig::new(None)).await;
    let (status, body) = post(&blind, None, form_of(&corpus("07-ca"))).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body["leader"], Value::Null);
    assert_eq!(node.server.stats().not_leader, 1);
}

#[tokio::test]
async fn refuses_missing_or_wrong_tokens() {
    let node = Node::start(IngestConfig::new(Some(TOKEN.into()))).await;
    node.lead().await;
    for token in [
        None,
        Some("wrong"),
        Some(""),
        Some("s3cret-token-but-longer"),
    ] {
        let resp = {
            let mut req = reqwest::Client::new()
                .post(format!("{}/v1/renders", node.url))
                .multipart(form_of(&corpus("07-ca")));
            if let Some(t) = token {
                req = req.bearer_auth(t);
            }
            req.send().await.unwrap()
        };
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED, "token {token:?}");
        let challenge = resp.headers()["www-authenticate"].to_str().unwrap();
        assert!(challenge.starts_with("Bearer"), "{challenge}");
    }
    let resp = reqwest::Client::new()
        .get(format!("{}/v1/renders/latest", node.url))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    assert!(node.renders().is_empty());
    // The right token passes (the scheme name in any case).
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/renders", node.url))
        .header("authorization", format!("bearer {TOKEN}"))
        .multipart(form_of(&corpus("07-ca")))
        .send()
        .await
        .unwrap();
    let status = resp.status();
    let body: Value = resp.json().await.unwrap();
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    // A rotated token (the runtime re-reads the Secret) replaces the old one at once.
    node.server.set_token("rotated-token");
    let post = |token: &'static str| {
        reqwest::Client::new()
            .post(format!("{}/v1/renders", node.url))
            .bearer_auth(token)
            .multipart(form_of(&corpus("02-maps")))
            .send()
    };
    assert_eq!(
        post(TOKEN).await.unwrap().status(),
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        post("rotated-token").await.unwrap().status(),
        StatusCode::ACCEPTED
    );
}

#[tokio::test]
async fn refuses_invalid_parts_and_oversized_bodies_naming_the_part() {
    let node = Node::start(IngestConfig::new(None).max_body_bytes(4096)).await;
    node.lead().await;
    let cfg = ("haproxy.cfg", "global\n");
    // 300 characters: longer than any pod's filesystem takes.
    let long = format!("maps/{}.map", "n".repeat(296));
    let cases: Vec<(Vec<(&str, &str)>, &str)> = vec![
        (vec![("maps/hosts.map", "a b\n")], "haproxy.cfg"),
        (vec![cfg, cfg], "haproxy.cfg"),
        (vec![cfg, ("certs/site.pem", "x")], "certs/site.pem"),
        (vec![cfg, ("maps/sub/hosts.map", "x")], "maps/sub/hosts.map"),
        (
            vec![cfg, ("maps/../../etc/passwd", "x")],
            "maps/../../etc/passwd",
        ),
        (vec![cfg, ("../haproxy.cfg", "x")], "../haproxy.cfg"),
        (vec![cfg, ("", "x")], ""),
        (vec![cfg, ("maps/", "x")], "maps/"),
        (vec![cfg, ("notes.txt", "x")], "notes.txt"),
        (
            vec![cfg, ("/etc/haproxy/maps/a.map", "x")],
            "/etc/haproxy/maps/a.map",
        ),
        (vec![cfg, ("maps/.hidden", "x")], "maps/.hidden"),
        (vec![cfg, (long.as_str(), "x")], long.as_str()),
        (
            vec![cfg, ("maps/a.map", "x"), ("maps/a.map", "y")],
            "maps/a.map",
        ),
    ];
    for (parts, part) in cases {
        let (status, body) = post(&node, None, form(&parts)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{parts:?}: {body}");
        assert_eq!(body["part"], part, "{parts:?}: {body}");
        assert!(
            body["fix"].as_str().is_some_and(|f| !f.is_empty()),
            "{body}"
        );
        assert!(body["error"].as_str().is_some(), "{body}");
    }
    // A tar with a symlink is refused too.
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Symlink);
    h.set_size(0);
    b.append_link(&mut h, "haproxy.cfg", "/etc/passwd").unwrap();
    let (status, body) = post_tar(&node, b.into_inner().unwrap()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["part"], "haproxy.cfg");

    // Over the limit: 413, whether the parts are small or not.
    let big = "#".repeat(8192);
    let (status, body) = post(&node, None, form(&[("haproxy.cfg", big.as_str())])).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    let (status, _) = post_tar(&node, vec![0; 8192]).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    // Chunked, without Content-Length: refused while reading.
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> = vec![Ok(vec![0; 3000]), Ok(vec![0; 3000])];
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/renders", node.url))
        .header("content-type", "application/x-tar")
        .body(reqwest::Body::wrap_stream(futures::stream::iter(chunks)))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
    // Another media type.
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/renders", node.url))
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);

    assert!(node.renders().is_empty(), "nothing journaled");
    assert_eq!(node.server.stats().accepted, 0);
    // A valid small render still passes afterwards.
    let (status, body) = post(
        &node,
        None,
        form(&[cfg, ("general/503.http", "HTTP/1.0 503\r\n\r\n")]),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    // Spaces, several dots and Unicode are file names like any other.
    let ok = vec![
        cfg,
        ("maps/my hosts.v2.map", "a b\n"),
        ("maps/hôtes-日本.map", "c d\n"),
    ];
    let (status, body) = post(&node, None, form(&ok)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
}

/// An in-memory journal storage whose writes fail once `fail` is set.
#[derive(Debug)]
struct FailingBackend {
    inner: InMemoryBackend,
    fail: Arc<AtomicBool>,
}

impl FailingBackend {
    fn check(&self) -> Result<(), std::io::Error> {
        if self.fail.load(Ordering::SeqCst) {
            Err(std::io::Error::other("injected write failure"))
        } else {
            Ok(())
        }
    }
}

impl StorageBackend for FailingBackend {
    fn len(&self) -> Result<u64, std::io::Error> {
        self.inner.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        self.inner.read(offset, out)
    }

    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        self.check()?;
        self.inner.set_len(len)
    }

    fn sync_data(&self) -> Result<(), std::io::Error> {
        self.check()?;
        self.inner.sync_data()
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        self.check()?;
        self.inner.write(offset, data)
    }
}

#[tokio::test]
async fn a_failed_commit_answers_507_naming_the_journal_and_acknowledges_nothing() {
    let fail = Arc::new(AtomicBool::new(false));
    let backend = FailingBackend {
        inner: InMemoryBackend::new(),
        fail: fail.clone(),
    };
    let dir = tempfile::tempdir().unwrap();
    let journal =
        Journal::open_with_backend(backend, &JournalOptions::new(dir.path().join("mem"))).unwrap();
    let node = Node::on(IngestConfig::new(None), Arc::new(journal), dir).await;
    node.lead().await;
    fail.store(true, Ordering::SeqCst);
    let (status, body) = post(&node, None, form_of(&corpus("07-ca"))).await;
    // A storage fault (issue 13): 507 Insufficient Storage, with Retry-After.
    assert_eq!(status, StatusCode::INSUFFICIENT_STORAGE, "{body}");
    let error = body["error"].as_str().unwrap();
    assert!(error.starts_with("journal accept failed"), "{error}");
    assert!(
        body["kind"].as_str().is_some_and(|k| !k.is_empty()),
        "{body}"
    );
    let latest = reqwest::Client::new()
        .get(format!("{}/v1/renders/latest", node.url))
        .send()
        .await
        .unwrap();
    assert_eq!(
        latest.status(),
        StatusCode::NOT_FOUND,
        "nothing remembered as accepted"
    );
    let stats = node.server.stats();
    assert_eq!(
        (stats.accepted, stats.journal_failures),
        (0, 1),
        "{stats:?}"
    );
}

/// With `--ingest-addr`, a 429 or a 500 while reading the token Secret at start-up is retried
/// with backoff (the process stays not ready), never an exit: one such answer is what
/// `read_token` alone turns into a failed start (issue 15). What needs an operator (an absent
/// Secret) still fails at once.
#[tokio::test]
async fn a_429_or_500_reading_the_token_at_start_up_is_retried_not_fatal() {
    use haptic::source::ingest::read_token_retrying;
    use haptic_tools::sandbox::apiserver::Fault;

    let emu = api_server().await;
    create_secret(&emu, "ingest", "token", TOKEN).await;
    let fault = |status, times| Fault {
        method: "GET".into(),
        path: "/secrets/ingest$".into(),
        status: Some(status),
        times: Some(times),
        ..Fault::default()
    };
    let api = emu.emulator().unwrap();
    api.add_fault(fault(429, 1)).unwrap();
    let err = read_token(emu.client(), NS, "ingest").await.unwrap_err();
    assert!(err.is_transient(), "{err:?}");

    api.add_fault(fault(429, 2)).unwrap();
    api.add_fault(fault(500, 1)).unwrap();
    let cancel = CancellationToken::new();
    let (initial, max) = (Duration::from_millis(10), Duration::from_millis(40));
    let token = read_token_retrying(emu.client(), NS, "ingest", initial, max, &cancel)
        .await
        .unwrap();
    assert_eq!(token.as_deref(), Some(TOKEN));
    let refused = api
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/secrets/ingest") && (r.status == 429 || r.status == 500))
        .count();
    assert_eq!(refused, 4, "each transient answer was retried");

    let err = read_token_retrying(emu.client(), NS, "absent", initial, max, &cancel)
        .await
        .unwrap_err();
    assert!(matches!(err, IngestError::SecretNotFound { .. }), "{err:?}");
    // Cancelled while the reads keep failing: no token, no error.
    api.add_fault(fault(503, 0)).unwrap();
    cancel.cancel();
    let none = read_token_retrying(emu.client(), NS, "ingest", initial, max, &cancel)
        .await
        .unwrap();
    assert!(none.is_none());
}
