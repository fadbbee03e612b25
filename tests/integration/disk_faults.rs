//! The "Disk" fault scenarios of issue 13: the journal on a real, small file system mounted by
//! the test (a tmpfs; an ext4 image on a loop device for the read-only case), the real `haptic`
//! binary against a sandbox fleet of the test kit, renders through the directory source and the
//! HTTP ingest endpoint.
//!
//! ```text
//!  01-basic (dir) ─► converged ─► fault (fill the tmpfs | ext4 error: remount-ro)
//!     10-large-map (dir) ─► held, not journaled       POST 05-tls (ingest) ─► 507 naming the journal
//!     /healthz 200, /readyz 503 naming the journal and the fix, haptic_journal_writable 0,
//!     haptic_journal_refused_inputs_total >= 2, Event JournalNotWritable, JournalWritable=False,
//!     no pod reloads, every pod still answers 01-basic
//!  fix (delete the filler | umount, e2fsck, mount) ─► resumes by itself within PROBE_MAX +
//!     converge: 10-large-map on every pod and in the HAProxyCfg, Event JournalWritable,
//!     JournalWritable=True, /readyz 200, metric 1; POST 05-tls ─► 202 ─► converges
//!  SIGTERM ─► exit 0 ─► haptic-journalctl verify and pending exit 0, nothing pending, every
//!     accepted render in the journal
//! ```
//!
//! Invariants (the issue's): every render accepted before the fault is deployed and published or
//! superseded; no pod receives a configuration it already runs (per pod, reloads never exceed
//! the renders deployed, and none during the fault); the journal verifies after a clean stop;
//! convergence within a bound derived from the configured intervals and the probe backoff.
//!
//! The file systems need root (CAP_SYS_ADMIN): a failing `mount` fails the test saying so. A
//! guard unmounts everything on drop, also when the test fails.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use haptic::k8s::crd::HAProxyCfg;
use haptic_journal::{Journal, JournalOptions};
use haptic_testkit::{Controller, Fleet, Intervals, Published};
use k8s_openapi::api::events::v1::Event as KubeEvent;
use kube::api::{Api, ListParams};

use crate::e2e::sources::{TOKEN_SECRET, create_token_secret, post};
use crate::e2e::telemetry::{get, scrape};
use crate::e2e::{MAIN, answers, bounds, checksum, feed, opts, published, start, stop_cleanly};

/// The journal watch's longest probe interval (`src/runtime/journal_watch.rs`, `PROBE_MAX`).
const PROBE_MAX: Duration = Duration::from_secs(30);

/// How long after the fault the controller must say so: the held render's first commit fails at
/// once; the watch looks every 250 ms; one deployment bound covers a render read meanwhile.
fn degraded_bound() -> Duration {
    bounds().deployment()
}

/// Waits (within [`degraded_bound`]) until `/readyz` on `metrics` answers 503 with a body
/// `accept` takes; returns that body.
async fn readyz_503(
    ctl: &Controller,
    metrics: std::net::SocketAddr,
    what: &str,
    accept: impl Fn(&str) -> bool,
) -> String {
    ctl.eventually(degraded_bound(), what, || async {
        let (s, body) = get(metrics, "/readyz").await;
        (s == 503 && accept(&body))
            .then_some(body.clone())
            .ok_or(format!("{s} {body}"))
    })
    .await
}

/// From the fix to the newest render on every pod and in the HAProxyCfg: the probe's backoff
/// (at most [`PROBE_MAX`]), then a render's convergence.
fn resume_bound(i: &Intervals) -> Duration {
    PROBE_MAX + i.converge()
}

fn run(cmd: &mut Command) -> (bool, String) {
    let out = cmd.output().unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn must_mount(cmd: &mut Command) {
    let (ok, text) = run(cmd);
    assert!(
        ok,
        "this test mounts a file system for the journal and needs root or CAP_SYS_ADMIN (run \
         it as root, or inside `unshare -Urm`): {cmd:?} failed: {text}"
    );
}

/// What the test mounted, undone on drop (lazy unmount: also while the controller still holds
/// the file; then the loop device is detached).
struct Mounted {
    dir: PathBuf,
    loop_dev: Option<String>,
    /// The ext4 is mounted only inside the controller's private mount namespace (this pid's),
    /// set once the controller runs; `None`: mounted in the test's namespace.
    ns_pid: std::cell::Cell<Option<u32>>,
    _tmp: tempfile::TempDir,
}

impl Mounted {
    /// A tmpfs of `size` (e.g. `"16m"`).
    fn tmpfs(size: &str) -> Mounted {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("vol");
        std::fs::create_dir(&dir).unwrap();
        must_mount(
            Command::new("mount")
                .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
                .arg(&dir),
        );
        Mounted {
            dir,
            loop_dev: None,
            ns_pid: std::cell::Cell::new(None),
            _tmp: tmp,
        }
    }

    /// An ext4 image of `size_mib` on a loop device, to be mounted `errors=remount-ro` inside
    /// the controller's own mount namespace ([`Mounted::wrap`]): sandbox pods (of this fleet or
    /// of a test running beside) each run in a private mount namespace, which would copy a mount
    /// made in the test's namespace and keep the file system alive after its unmount, so the
    /// repair could never unmount it.
    fn ext4(size_mib: u64) -> Mounted {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("vol");
        std::fs::create_dir(&dir).unwrap();
        let img = tmp.path().join("vol.img");
        std::fs::File::create(&img)
            .unwrap()
            .set_len(size_mib << 20)
            .unwrap();
        let (ok, text) = run(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&img));
        assert!(ok, "mkfs.ext4 (e2fsprogs) is needed: {text}");
        let (ok, dev) = run(Command::new("losetup").args(["-f", "--show"]).arg(&img));
        assert!(
            ok,
            "this test attaches a loop device and needs root or CAP_SYS_ADMIN: losetup: {dev}"
        );
        // The mount itself happens in the controller's namespace; check here that mounting works
        // at all (and fail saying what it needs), in a throw-away namespace.
        let dev = dev.trim().to_owned();
        must_mount(
            Command::new("unshare")
                .args([
                    "-m",
                    "--propagation",
                    "private",
                    "mount",
                    "-t",
                    "ext4",
                    &dev,
                ])
                .arg(&dir),
        );
        Mounted {
            dir,
            loop_dev: Some(dev),
            ns_pid: std::cell::Cell::new(None),
            _tmp: tmp,
        }
    }

    /// Runs the controller in a private mount namespace that mounts the ext4 first.
    fn wrap(&self, o: &mut haptic_testkit::ControllerOpts) {
        let Some(dev) = &self.loop_dev else { return };
        let script = format!(
            "mount -t ext4 -o errors=remount-ro {dev} {} && exec \"$0\" \"$@\"",
            self.dir.display()
        );
        o.pre_args = vec![
            "-m".into(),
            "--propagation".into(),
            "private".into(),
            "sh".into(),
            "-c".into(),
            script,
            o.program.display().to_string(),
        ];
        o.program = PathBuf::from("unshare");
    }

    /// A command in the mount namespace of the ext4 (the controller's, once it runs).
    fn in_ns(&self, program: &str) -> Command {
        match self.ns_pid.get() {
            Some(pid) => {
                let mut c = Command::new("nsenter");
                c.args(["-t", &pid.to_string(), "-m", "--", program]);
                c
            }
            None => Command::new(program),
        }
    }

    fn mount_ext4(&self) {
        must_mount(
            self.in_ns("mount")
                .args(["-t", "ext4", "-o", "errors=remount-ro"])
                .arg(self.loop_dev.as_deref().unwrap())
                .arg(&self.dir),
        );
    }

    /// Makes the ext4 file system fail as a failing disk does: the kernel remounts it read-only
    /// under the open journal (`errors=remount-ro`), every write then gets `EROFS`.
    fn ext4_error(&self) {
        let dev = self.loop_dev.as_deref().unwrap();
        let name = Path::new(dev).file_name().unwrap().to_string_lossy();
        std::fs::write(
            format!("/sys/fs/ext4/{name}/trigger_fs_error"),
            "disk fault test\n",
        )
        .unwrap();
    }

    /// Repairs the read-only ext4: unmount (the controller closed the file when its commit
    /// failed), `e2fsck -fy`, mount again at the same path (same device and inode, so the
    /// controller's reopen finds its journal).
    fn ext4_repair(&self) -> Result<(), String> {
        let (ok, text) = run(self.in_ns("umount").arg(&self.dir));
        if !ok {
            return Err(format!("umount: {text}"));
        }
        let dev = self.loop_dev.as_deref().unwrap();
        let (ok, text) = run(Command::new("e2fsck").args(["-fy", dev]));
        // 0 clean, 1 errors corrected.
        if !ok && !text.contains("FILE SYSTEM WAS MODIFIED") {
            return Err(format!("e2fsck: {text}"));
        }
        self.mount_ext4();
        Ok(())
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        // The controller's namespace goes with the controller (and its mounts with it).
        if self.ns_pid.get().is_some() {
            let _ = self.in_ns("umount").arg("-l").arg(&self.dir).status();
        }
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        if let Some(dev) = &self.loop_dev {
            let _ = Command::new("losetup").args(["-d", dev]).status();
        }
    }
}

/// Writes to `path` until the volume is full.
fn fill(path: &Path) {
    use std::io::Write as _;
    let mut f = std::fs::File::create(path).unwrap();
    let chunk = vec![0x5a_u8; 64 * 1024];
    while f.write_all(&chunk).is_ok() {}
    while f.write_all(&chunk[..512]).is_ok() {}
    let _ = f.sync_all();
}

async fn events_with(api: &Api<KubeEvent>, reason: &str) -> Vec<String> {
    api.list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .map(|e| e.note.unwrap_or_default())
        .collect()
}

fn journal_condition(cfg: &HAProxyCfg) -> Option<(String, String, String)> {
    cfg.status.as_ref()?.conditions.iter().find_map(|c| {
        (c.type_ == "JournalWritable")
            .then(|| (c.status.clone(), c.reason.clone(), c.message.clone()))
    })
}

/// The `haptic-journalctl` binary beside this test binary (`cargo test --workspace` builds it).
fn journalctl() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(Path::parent).unwrap();
    let bin = dir.join("haptic-journalctl");
    if !bin.exists() {
        let (ok, text) = run(Command::new(env!("CARGO")).args([
            "build",
            "-q",
            "-p",
            "haptic-tools",
            "--bin",
            "haptic-journalctl",
        ]));
        assert!(ok, "building haptic-journalctl: {text}");
    }
    bin
}

/// The renders journaled (`template.rendered`) and not trimmed yet, in order.
fn rendered(j: &Journal) -> Vec<haptic_journal::Checksum> {
    j.events(haptic_journal::Seq(0), usize::MAX)
        .unwrap()
        .into_iter()
        .filter_map(|(_, _, e)| match e {
            haptic_journal::Event::TemplateRendered { render, .. } => Some(render),
            _ => None,
        })
        .collect()
}

/// The controller's metrics and ingest addresses once `01-basic` is published on both pods
/// and answered, and the pods' reload counts then.
async fn converged_on_01_basic(
    world: &Fleet,
    ctl: &mut Controller,
) -> (std::net::SocketAddr, std::net::SocketAddr, Vec<usize>) {
    let metrics = ctl.metrics_addr().await;
    let ingest = ctl.ingest_addr().await;
    published(world, "01-basic", 2).await;
    answers(world, "01-basic").await;
    (metrics, ingest, world.reload_counts().await)
}

/// An ingest render answered `507` naming the journal and the fault's `kind`; the body.
async fn refused_507(
    ingest: std::net::SocketAddr,
    journal_text: &str,
    kind: &str,
) -> serde_json::Value {
    let (s, body) = post(ingest, "05-tls").await;
    assert_eq!(s, 507, "{body}");
    assert_eq!(body["kind"], kind, "{body}");
    assert_eq!(body["journal"], journal_text, "{body}");
    body
}

/// The HAProxyCfg's `JournalWritable=False` condition, once written: (status, reason, message).
async fn not_writable_condition(world: &Fleet, ctl: &Controller) -> (String, String, String) {
    ctl.eventually(degraded_bound(), "JournalWritable=False", || async {
        let c = world.hpcfg(MAIN).await.and_then(|c| journal_condition(&c));
        match c {
            Some(c) if c.0 == "False" => Ok(c),
            other => Err(format!("{other:?}")),
        }
    })
    .await
}

/// The fleet keeps what it runs while the journal takes no commits: over a deployment's time
/// no pod reloads (`no_reload` says so otherwise), every pod answers `01-basic`, the HAProxyCfg
/// No pod reloaded more than `more` times since `reloads_before` (`what` says the bound in the
/// message).
async fn reloads_at_most(world: &Fleet, reloads_before: &[usize], more: usize, what: &str) {
    for (before, after) in reloads_before.iter().zip(world.reload_counts().await) {
        assert!(
            after <= before + more,
            "a pod reloaded {what}: {before} -> {after}"
        );
    }
}

/// keeps it.
async fn fleet_kept(world: &Fleet, reloads_before: &[usize], no_reload: &str) {
    tokio::time::sleep(bounds().deployment().min(Duration::from_secs(5))).await;
    assert_eq!(world.reload_counts().await, reloads_before, "{no_reload}");
    world.pods_answer("01-basic").await.unwrap();
    let p = Published::of(&world.hpcfg(MAIN).await.unwrap());
    assert_eq!(
        p.spec,
        checksum("01-basic"),
        "the HAProxyCfg keeps the last render"
    );
}

/// `10-large-map`, held `while_held`, on both pods and published within `bound`.
async fn held_render_applied(world: &Fleet, ctl: &Controller, bound: Duration, while_held: &str) {
    let want = checksum("10-large-map");
    ctl.eventually(
        bound,
        &format!("10-large-map (held {while_held}) on every pod and published"),
        || async {
            let p = Published::of(&world.hpcfg(MAIN).await.ok_or("no HAProxyCfg")?);
            p.on(&want, 2).then_some(()).ok_or(format!("{p:?}"))
        },
    )
    .await;
}

/// `haptic-journalctl verify` and `pending` pass on the stopped controller's journal, which
/// opens read-only and verifies clean; the journal.
fn verified(journal_path: &Path) -> Journal {
    for sub in ["verify", "pending"] {
        let (ok, text) = run(Command::new(journalctl()).arg(sub).arg(journal_path));
        assert!(ok, "haptic-journalctl {sub}: {text}");
    }
    let j = Journal::open(&JournalOptions::new(journal_path).read_only(true)).unwrap();
    assert!(j.verify().unwrap().is_clean());
    j
}

#[derive(Clone, Copy, Debug)]
enum Fault {
    /// A full tmpfs (a filler file), fixed by deleting the filler.
    Full,
    /// An ext4 file system the kernel remounted read-only, fixed by a repair and a new mount.
    ReadOnly,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_full_refuses_input_keeps_the_fleet_and_resumes_by_itself() {
    scenario(Fault::Full).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_volume_refuses_input_keeps_the_fleet_and_resumes_after_repair() {
    scenario(Fault::ReadOnly).await;
}

async fn scenario(fault: Fault) {
    let started = Instant::now();
    // The fleet first: each sandbox pod runs in a private mount namespace, which would copy a
    // mount made before it and keep the file system alive after the test unmounts it.
    let world = start(haptic_testkit::Peers::Emulator, 2).await;
    let vol = match fault {
        Fault::Full => Mounted::tmpfs("16m"),
        Fault::ReadOnly => Mounted::ext4(32),
    };
    let journal_path = vol.dir.join("journal.redb");
    create_token_secret(&world).await;
    let render_dir = world.dir().join("render");
    feed(&render_dir, "01-basic");
    let mut o = opts(&world, "solo", &render_dir).ingest(TOKEN_SECRET);
    o.journal = journal_path.clone();
    o.log = Some(world.dir().join("controller.log"));
    vol.wrap(&mut o);
    let mut ctl = world.controller(o);
    if matches!(fault, Fault::ReadOnly) {
        vol.ns_pid.set(Some(ctl.child.id()));
    }
    let (metrics, ingest, reloads_before) = converged_on_01_basic(&world, &mut ctl).await;

    // The fault.
    let filler = vol.dir.join("filler");
    match fault {
        Fault::Full => fill(&filler),
        Fault::ReadOnly => vol.ext4_error(),
    }
    let faulted_at = Instant::now();
    feed(&render_dir, "10-large-map");
    let ready = readyz_503(&ctl, metrics, "/readyz 503 naming the journal", |body| {
        body.contains("journal")
    })
    .await;
    let journal_text = journal_path.display().to_string();
    assert!(ready.contains(&journal_text), "{ready}");
    match fault {
        Fault::Full => {
            assert!(ready.contains("No space left on device"), "{ready}");
            assert!(ready.contains("free space on the volume"), "{ready}");
        }
        Fault::ReadOnly => {
            assert!(ready.contains("Read-only file system"), "{ready}");
            assert!(ready.contains("read-only"), "{ready}");
        }
    }
    let (s, body) = get(metrics, "/healthz").await;
    assert_eq!((s, body.as_str()), (200, "ok\n"), "liveness stays up");
    let kind = match fault {
        Fault::Full => "full",
        Fault::ReadOnly => "read_only",
    };
    let body = refused_507(ingest, &journal_text, kind).await;
    assert!(
        body["fix"].as_str().is_some_and(|f| !f.is_empty()),
        "{body}"
    );
    // The journal watch sets the gauge within a tick of the fault; the directory source reads
    // the render within its poll and debounce (another write may have met the fault first).
    let m = ctl
        .eventually(
            degraded_bound(),
            "haptic_journal_writable 0, the directory render refused",
            || async {
                let m = scrape(metrics).await;
                (m.value("haptic_journal_writable") == 0.0
                    && m.value("haptic_journal_refused_inputs_total{source=\"dir\"}") >= 1.0)
                    .then_some(m)
                    .ok_or("not yet".to_owned())
            },
        )
        .await;
    assert!(
        m.value("haptic_journal_refused_inputs_total{source=\"dir\"}") >= 1.0,
        "{}",
        m.text
    );
    assert!(
        m.value("haptic_journal_refused_inputs_total{source=\"ingest\"}") >= 1.0,
        "{}",
        m.text
    );
    let events: Api<KubeEvent> = Api::namespaced(world.client(), world.namespace());
    let notes = ctl
        .eventually(degraded_bound(), "Event JournalNotWritable", || async {
            let n = events_with(&events, "JournalNotWritable").await;
            (!n.is_empty())
                .then_some(n.clone())
                .ok_or("none".to_owned())
        })
        .await;
    assert!(notes.iter().any(|n| n.contains(&journal_text)), "{notes:?}");
    let cond = not_writable_condition(&world, &ctl).await;
    assert_eq!(
        cond.1,
        match fault {
            Fault::Full => "JournalFull",
            Fault::ReadOnly => "JournalReadOnly",
        }
    );
    // The fleet keeps what it runs: no deployment from the unjournaled render.
    fleet_kept(&world, &reloads_before, "no pod reloaded during the fault").await;
    assert!(
        ctl.child.try_wait().unwrap().is_none(),
        "the controller stays up"
    );
    let fault_secs = faulted_at.elapsed().as_secs_f64();

    // The fix; it resumes by itself.
    let fixed_at = Instant::now();
    match fault {
        Fault::Full => std::fs::remove_file(&filler).unwrap(),
        Fault::ReadOnly => vol.ext4_repair().unwrap(),
    }
    let bound = resume_bound(&bounds());
    let want = checksum("10-large-map");
    held_render_applied(&world, &ctl, bound, "during the fault").await;
    let resumed_secs = fixed_at.elapsed().as_secs_f64();
    answers(&world, "10-large-map").await;
    let (s, body) = get(metrics, "/readyz").await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(scrape(metrics).await.value("haptic_journal_writable"), 1.0);
    ctl.eventually(
        degraded_bound(),
        "Event JournalWritable and JournalWritable=True",
        || async {
            let e = events_with(&events, "JournalWritable").await;
            let c = world.hpcfg(MAIN).await.and_then(|c| journal_condition(&c));
            (!e.is_empty()
                && c.as_ref()
                    .is_some_and(|c| c.0 == "True" && c.1 == "JournalWritable"))
            .then_some(())
            .ok_or(format!("{e:?} {c:?}"))
        },
    )
    .await;
    // The ingest render refused with 507 was never journaled: it is not applied after the
    // fix (the client must send it again), and no pod got it.
    tokio::time::sleep(bounds().min_deployment_interval * 2).await;
    let p = Published::of(&world.hpcfg(MAIN).await.unwrap());
    assert_eq!(p.spec, want, "the refused ingest render stays unapplied");
    world.pods_answer("10-large-map").await.unwrap();
    let (s, body) = post(ingest, "05-tls").await;
    assert_eq!(s, 202, "{body}");
    published(&world, "05-tls", 2).await;
    answers(&world, "05-tls").await;
    // Per pod: at most one reload per render deployed after 01-basic (10-large-map, 05-tls).
    reloads_at_most(&world, &reloads_before, 2, "more than once per render").await;

    // A clean stop; the reopened journal is correct.
    stop_cleanly(&mut ctl);
    let log = ctl.log_text();
    assert!(!log.contains("component failed"), "{}", ctl.log_tail(60));
    if matches!(fault, Fault::ReadOnly) {
        // Its namespace (and the mount) went with the controller: mount it here to read it.
        vol.ns_pid.set(None);
        vol.mount_ext4();
    }
    let j = verified(&journal_path);
    let pending = j.pending().unwrap();
    assert_eq!(pending.undispatched_events, 0, "{pending:?}");
    assert!(pending.queues.iter().all(|q| q.count == 0), "{pending:?}");
    drop(j);
    eprintln!(
        "disk fault {fault:?}: fault shown for {fault_secs:.1} s, resumed in {resumed_secs:.1} s \
         (bound {:.0} s), total {:.1} s",
        bound.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    world.shutdown().await;
    drop(vol);
}

/// The journal file removed under the running controller (`rm` of the file; the process keeps
/// its unlinked inode open). No mount needed: the journal on the test's own directory.
///
/// While it lasts: `/healthz` 200, `/readyz` 503 naming the journal and the fix ("restart the
/// pod"), ingest 507 with kind `removed`, `haptic_journal_writable 0`, `JournalWritable=False`
/// (reason `JournalUnavailable`), the directory render held, no pod reloaded, every pod still
/// answering `01-basic`, the process up; it never resumes by itself (writes to the unlinked
/// file would vanish at the next restart). A restart (what the fix says) opens a fresh journal
/// at the path, reconciles with the fleet (J9: `01-basic` is not pushed again) and converges on
/// the held render; the refused ingest render is never applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removed_journal_refuses_input_until_a_restart_on_a_fresh_file() {
    let started = Instant::now();
    let world = start(haptic_testkit::Peers::Emulator, 2).await;
    create_token_secret(&world).await;
    let render_dir = world.dir().join("render");
    feed(&render_dir, "01-basic");
    let o = opts(&world, "solo", &render_dir).ingest(TOKEN_SECRET);
    let journal_path = o.journal.clone();
    let mut ctl = world.controller(o.clone());
    let (metrics, ingest, reloads_before) = converged_on_01_basic(&world, &mut ctl).await;

    std::fs::remove_file(&journal_path).unwrap();
    let removed_at = Instant::now();
    feed(&render_dir, "10-large-map");
    let journal_text = journal_path.display().to_string();
    let ready = readyz_503(
        &ctl,
        metrics,
        "/readyz 503 naming the journal and the fix",
        |body| body.contains(&journal_text) && body.contains("restart the pod"),
    )
    .await;
    let (s, body) = get(metrics, "/healthz").await;
    assert_eq!(
        (s, body.as_str()),
        (200, "ok\n"),
        "liveness stays up: {ready}"
    );
    let body = refused_507(ingest, &journal_text, "removed").await;
    assert!(
        body["fix"].as_str().is_some_and(|f| f.contains("restart")),
        "{body}"
    );
    ctl.eventually(degraded_bound(), "haptic_journal_writable 0", || async {
        let m = scrape(metrics).await;
        (m.value("haptic_journal_writable") == 0.0)
            .then_some(())
            .ok_or(m.text)
    })
    .await;
    let cond = not_writable_condition(&world, &ctl).await;
    assert_eq!(cond.1, "JournalUnavailable", "{cond:?}");
    assert!(cond.2.contains("restart the pod"), "{cond:?}");
    // It stays so: no resumption onto the unlinked file, no deployment of the held render.
    fleet_kept(
        &world,
        &reloads_before,
        "no pod reloaded while the journal is gone",
    )
    .await;
    let (s, body) = get(metrics, "/readyz").await;
    assert_eq!(s, 503, "still not ready: {body}");
    assert!(
        !journal_path.exists(),
        "nothing recreated the file at the path"
    );
    assert!(
        ctl.child.try_wait().unwrap().is_none(),
        "the controller stays up"
    );
    let shown_secs = removed_at.elapsed().as_secs_f64();

    // The fix: restart the pod. The old process stops (its journal is gone: whatever it
    // exits with, it exits); the new one opens a fresh journal at the path.
    let stopped = ctl.stop(bounds().stop());
    assert!(stopped.is_some(), "stops on SIGTERM\n{}", ctl.log_tail(40));
    let restarted_at = Instant::now();
    let mut ctl = world.controller(o.clone());
    let bound = bounds().takeover() + bounds().converge();
    held_render_applied(&world, &ctl, bound, "while the journal was gone").await;
    let recovered_secs = restarted_at.elapsed().as_secs_f64();
    answers(&world, "10-large-map").await;
    let metrics = ctl.metrics_addr().await;
    let (s, body) = get(metrics, "/readyz").await;
    assert_eq!(s, 200, "{body}");
    // Per pod: one reload, for 10-large-map (the fresh journal did not push 01-basic again).
    reloads_at_most(&world, &reloads_before, 1, "more than once").await;
    stop_cleanly(&mut ctl);
    let j = verified(&journal_path);
    // (Acked records are trimmed: only what is left can be looked at.)
    assert!(
        !rendered(&j).contains(&checksum("05-tls")),
        "the fresh journal never took the refused ingest render"
    );
    drop(j);
    // Nothing pending (a drain checkpoint aside), no checksum published twice.
    if let Err(e) = crate::crash_matrix::journal_after_stop(&journal_path) {
        panic!("{e}\n{}", ctl.log_tail(30));
    }
    eprintln!(
        "journal removed: shown for {shown_secs:.1} s, recovered {recovered_secs:.1} s after \
         the restart (bound {:.0} s), total {:.1} s",
        bound.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    world.shutdown().await;
}
